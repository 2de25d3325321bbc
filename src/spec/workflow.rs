//! The workflow part of a task spec: dependencies, array membership, priority, hold and
//! notification, with the textual forms users already know from Slurm and gflow.
//!
//! Everything here is syntax and bounds: whether a dependency names a task that exists and
//! that the submitter may see is settled by `carma submit` (which reads the published view)
//! and checked again at ingest; whether it is satisfied is `sched`'s business.

use serde::{Deserialize, Serialize};

use crate::id::TaskId;

/// Most tasks one `--array` or `--param` submission may create (Slurm's MaxArraySize is 1001).
pub const ARRAY_TASKS_MAX: usize = 1000;
/// Largest array index accepted.
pub const ARRAY_INDEX_MAX: u32 = 1_000_000;
/// Most dependencies one task may name (an array counts each member).
pub const DEPENDENCIES_MAX: usize = 2000;
/// `--priority` and `--nice` take values in `-PRIORITY_ABS_MAX..=PRIORITY_ABS_MAX`.
pub const PRIORITY_ABS_MAX: i32 = 10_000;
/// Most arguments of a `--notify` command.
pub const NOTIFY_ARGS_MAX: usize = 64;

/// How a dependency must end before the dependent may start (Slurm's `--dependency` types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DependencyKind {
    /// The dependency finished with exit 0 (the default).
    AfterOk,
    /// The dependency ended, however.
    AfterAny,
    /// The dependency failed or was cancelled.
    AfterNotOk,
}

/// One dependency of a task, by full id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Dependency {
    /// How the dependency must end.
    pub kind: DependencyKind,
    /// The task depended on.
    pub task: TaskId,
}

/// A dependency as typed, before `carma submit` resolves its target (`@`, `@~N`, a prefix,
/// an array id) to full task ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DependencyRequest {
    /// How the dependency must end.
    pub kind: DependencyKind,
    /// The target as typed: a full id, a prefix, an array id, `@` or `@~N` (the caller's latest tasks).
    pub target: String,
}

/// A task's place in an array (`--array`) or a sweep (`--param`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayMember {
    /// The array's id: made at submit like a task id, shared by every member, not a task.
    pub id: TaskId,
    /// `CARMA_ARRAY_INDEX`: the `--array` index, or the position in the sweep from 0.
    pub index: u32,
    /// How many tasks the submission created.
    pub count: u32,
    /// At most this many members run at once (`%N`); `None`: no cap.
    pub running_max: Option<u32>,
    /// The sweep's values for this member (`--param`), in the order the flags gave them.
    pub params: Vec<(String, String)>,
}

/// A parsed `--array` value: the indices, in order, and the `%N` cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArraySpec {
    /// Empty for a bare `%N`, which only caps a `--param` sweep.
    pub indices: Vec<u32>,
    /// The `%N` cap: at most this many members run at once; `None`: no cap.
    pub running_max: Option<u32>,
}

/// One `--param NAME=V1,V2` flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// The parameter's name, the `{NAME}` placeholder it fills.
    pub name: String,
    /// Its values, in the order given; the sweep runs every combination of all flags' values.
    pub values: Vec<String>,
}

impl DependencyKind {
    /// The Slurm spelling.
    pub fn name(self) -> &'static str {
        match self {
            DependencyKind::AfterOk => "afterok",
            DependencyKind::AfterAny => "afterany",
            DependencyKind::AfterNotOk => "afternotok",
        }
    }

    fn parse(word: &str) -> Option<DependencyKind> {
        match word {
            "afterok" => Some(DependencyKind::AfterOk),
            "afterany" => Some(DependencyKind::AfterAny),
            "afternotok" => Some(DependencyKind::AfterNotOk),
            _ => None,
        }
    }
}

impl Dependency {
    /// `afterok:ID`, the canonical form in spec files.
    pub fn label(&self) -> String {
        format!("{}:{}", self.kind.name(), self.task)
    }

    /// Parses one canonical entry: `KIND:ID` or a bare full `ID` (afterok).
    pub fn parse_canonical(text: &str) -> Result<Dependency, String> {
        let (kind, id) = match text.split_once(':') {
            Some((kind, id)) => (DependencyKind::parse(kind), id),
            None => (Some(DependencyKind::AfterOk), text),
        };
        let hint = "use a full task id, optionally as afterok:ID, afterany:ID or afternotok:ID";
        let kind = kind.ok_or_else(|| format!("dependency {text:?} has an unknown type; {hint}"))?;
        let task =
            TaskId::parse(id).ok_or_else(|| format!("dependency {text:?} is not a task id; {hint}"))?;
        Ok(Dependency { kind, task })
    }
}

/// Slurm's `--dependency singleton`, refused by name wherever carma reads a dependency (a
/// flag, `#CARMA` or `#SBATCH`): it needs a per-name rule the queue does not keep.
pub const SINGLETON_REFUSED: &str =
    "singleton (one running task per name) is not supported; name the task to wait for: --after ID";

/// Parses `--after` / `--dependency`: a comma list of `ID`, `@`, `@~N` (afterok), or
/// `TYPE:ID[:ID...]` with TYPE one of afterok, afterany, afternotok (Slurm's spelling, so
/// `--dependency afterok:12:13,afterany:14` works as typed).
pub fn parse_after(text: &str) -> Result<Vec<DependencyRequest>, String> {
    if text.split(',').any(|item| item.trim() == "singleton") {
        return Err(SINGLETON_REFUSED.into());
    }
    let hint = "use ID[,ID...] or afterok:ID[:ID...], afterany:ID, afternotok:ID; @ is your latest submission, @~1 the one before";
    if text.contains('?') {
        return Err(format!(
            "dependency {text:?} uses `?` (any of); carma supports only all-of lists joined by `,`"
        ));
    }
    let mut requests = Vec::new();
    for item in text.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(format!("dependency {text:?} has an empty item; {hint}"));
        }
        let mut parts = item.split(':');
        let first = parts.next().unwrap_or_default();
        let (kind, targets): (DependencyKind, Vec<&str>) = match DependencyKind::parse(first) {
            Some(kind) => (kind, parts.collect()),
            None if item.contains(':') => {
                let valid = ["afterok", "afterany", "afternotok"];
                return Err(format!(
                    "dependency type {first:?} is not supported; use one of {}",
                    valid.join(", ")
                ));
            }
            None => (DependencyKind::AfterOk, vec![item]),
        };
        if targets.is_empty() || targets.iter().any(|t| t.trim().is_empty()) {
            return Err(format!("dependency {item:?} names no task; {hint}"));
        }
        for target in targets {
            requests.push(DependencyRequest { kind, target: target.trim().to_string() });
        }
    }
    if requests.len() > DEPENDENCIES_MAX {
        return Err(format!("{} dependencies; at most {DEPENDENCIES_MAX} are allowed", requests.len()));
    }
    Ok(requests)
}

/// The `N` of `@~N` (`@` is 0), or `None` when `target` is not a recent-submission shortcut.
pub fn recent_offset(target: &str) -> Option<Result<usize, String>> {
    let rest = target.strip_prefix('@')?;
    if rest.is_empty() {
        return Some(Ok(0));
    }
    let parsed = rest.strip_prefix('~').and_then(|n| n.parse::<usize>().ok()).filter(|n| *n <= 1000);
    Some(parsed.ok_or_else(|| {
        format!("{target:?} is not @ or @~N; @ is your latest submission, @~1 the one before")
    }))
}

/// Parses `--array`: `0-9`, `0-9:2`, `1,4,7`, any of these with `%N`, or a bare `%N` (which
/// caps a `--param` sweep).
pub fn parse_array(text: &str) -> Result<ArraySpec, String> {
    let hint = "use e.g. 0-9, 0-9:2, 1,4,7, and %N to cap how many run at once (0-9%2)";
    let (list, cap) = match text.split_once('%') {
        Some((list, cap)) => (list, Some(cap)),
        None => (text, None),
    };
    let running_max = cap
        .map(|cap| cap.trim().parse::<u32>().ok().filter(|n| *n >= 1))
        .map(|n| {
            n.ok_or_else(|| format!("--array {text:?}: the cap after % must be a whole number of at least 1"))
        })
        .transpose()?;
    let mut indices = Vec::new();
    if !list.trim().is_empty() {
        for item in list.split(',').map(str::trim) {
            expand_range(item, &mut indices).map_err(|why| format!("--array {text:?}: {why}; {hint}"))?;
            if indices.len() > ARRAY_TASKS_MAX {
                return Err(format!("--array {text:?} makes more than {ARRAY_TASKS_MAX} tasks; split it"));
            }
        }
    } else if running_max.is_none() {
        return Err(format!("--array {text:?} is empty; {hint}"));
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(twice) = indices.iter().find(|i| !seen.insert(**i)) {
        return Err(format!("--array {text:?} lists index {twice} twice"));
    }
    Ok(ArraySpec { indices, running_max })
}

fn expand_range(item: &str, out: &mut Vec<u32>) -> Result<(), String> {
    let number = |text: &str| -> Result<u32, String> {
        text.trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= ARRAY_INDEX_MAX)
            .ok_or_else(|| format!("{text:?} is not an index from 0 to {ARRAY_INDEX_MAX}"))
    };
    let (range, step) = match item.split_once(':') {
        Some((range, step)) => (range, number(step)?),
        None => (item, 1),
    };
    if step == 0 {
        return Err("a step of 0".into());
    }
    let (first, last) = match range.split_once('-') {
        Some((first, last)) => (number(first)?, number(last)?),
        None if item.contains(':') => return Err(format!("{item:?} has a step but no range")),
        None => {
            let only = number(range)?;
            (only, only)
        }
    };
    if last < first {
        return Err(format!("{item:?} ends before it starts"));
    }
    let mut index = first;
    while index <= last && out.len() <= ARRAY_TASKS_MAX {
        out.push(index);
        index = match index.checked_add(step) {
            Some(next) => next,
            None => break,
        };
    }
    Ok(())
}

/// Parses `--param NAME=V1,V2,...`.
pub fn parse_param(text: &str) -> Result<Param, String> {
    let hint = "use --param NAME=V1,V2 and {NAME} in the command";
    let (name, values) =
        text.split_once('=').ok_or_else(|| format!("--param {text:?} has no '='; {hint}"))?;
    let name = name.trim();
    if !super::is_env_name(name) || name.len() > 64 {
        return Err(format!("--param name {name:?} is invalid; use letters, digits and _ (not first)"));
    }
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        return Err(format!("--param {text:?} has an empty value; {hint}"));
    }
    if values.iter().any(|v| v.contains('\0')) {
        return Err(format!("--param {name} has a value with a NUL byte; remove it"));
    }
    Ok(Param { name: name.to_string(), values })
}

/// Every combination of the parameters' values (the cartesian product, the first flag
/// varying slowest), each as `(name, value)` pairs in flag order.
pub fn expand_params(params: &[Param]) -> Result<Vec<Vec<(String, String)>>, String> {
    for (i, param) in params.iter().enumerate() {
        if params[..i].iter().any(|p| p.name == param.name) {
            return Err(format!("--param {} is given twice; list its values in one flag", param.name));
        }
    }
    let count = params.iter().try_fold(1usize, |n, p| n.checked_mul(p.values.len()));
    if count.is_none_or(|n| n > ARRAY_TASKS_MAX) {
        return Err(format!("the --param values make more than {ARRAY_TASKS_MAX} tasks; sweep fewer values"));
    }
    let mut combinations: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for param in params {
        combinations = combinations
            .into_iter()
            .flat_map(|prefix| {
                param.values.iter().map(move |value| {
                    let mut next = prefix.clone();
                    next.push((param.name.clone(), value.clone()));
                    next
                })
            })
            .collect();
    }
    Ok(combinations)
}

/// `template` with every `{NAME}` of a parameter replaced by its value. Braces around
/// anything else stay as they are, so JSON arguments pass through untouched.
pub fn substitute(template: &str, values: &[(String, String)]) -> String {
    let mut out = template.to_string();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

/// Whether `template` mentions `{NAME}`.
pub fn mentions(template: &str, name: &str) -> bool {
    template.contains(&format!("{{{name}}}"))
}

/// Checks a `priority` or `nice` value.
pub fn validate_priority(field: &str, value: i64) -> Result<i32, String> {
    let max = i64::from(PRIORITY_ABS_MAX);
    if !(-max..=max).contains(&value) {
        return Err(format!("{field} = {value}: use a value from -{max} to {max}"));
    }
    Ok(value as i32)
}

/// Checks a `notify` command: an argv (never a shell line) of at most [`NOTIFY_ARGS_MAX`]
/// arguments without NUL bytes.
pub fn validate_notify(argv: &[String]) -> Result<(), String> {
    if argv.is_empty() || argv[0].is_empty() {
        return Err(
            "`notify` is empty; give a program and its arguments, e.g. [\"notify-send\", \"done\"]".into()
        );
    }
    if argv.len() > NOTIFY_ARGS_MAX {
        return Err(format!("`notify` has {} arguments; at most {NOTIFY_ARGS_MAX} are allowed", argv.len()));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err("`notify` contains a NUL byte; remove it".into());
    }
    Ok(())
}

/// Checks a `mail_user` address: one address, no whitespace or control characters (it goes
/// into a mail header), not starting with `-`.
pub fn validate_mail_user(address: &str) -> Result<(), String> {
    let bad = address.is_empty()
        || address.len() > 254
        || address.starts_with('-')
        || address.chars().any(|c| c.is_whitespace() || c.is_control() || c == ',' || c == '<' || c == '>');
    if bad {
        return Err(format!(
            "mail_user {address:?} is not one mail address; give e.g. alice or alice@example.org"
        ));
    }
    Ok(())
}

/// What `carma update` changes in a waiting task: each field that is set replaces the
/// spec's. Also the body of an update request in the spool (TOML), so unknown keys are
/// refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Changes {
    /// New [`TaskSpec::priority`](super::TaskSpec::priority).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// New [`TaskSpec::nice`](super::TaskSpec::nice).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nice: Option<i32>,
    /// New declared memory per GPU, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// New time limit per attempt, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit_ms: Option<u64>,
    /// New GPU count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
}

impl Changes {
    /// True when nothing would change.
    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }

    /// The request body.
    pub fn to_toml(&self) -> String {
        // Plain integers cannot fail to serialise.
        toml::to_string(self).unwrap_or_else(|e| unreachable!("update TOML: {e}"))
    }

    /// Parses and bounds-checks a request body (written by a user, so checked like a spec).
    pub fn parse(text: &str, limits: super::Limits) -> Result<Changes, String> {
        let changes: Changes = toml::from_str(text).map_err(|e| {
            format!("the update is not valid ({}); it was not written by `carma update`", e.message().trim())
        })?;
        changes.check(limits)?;
        Ok(changes)
    }

    /// The same bounds as a spec's fields.
    pub fn check(&self, limits: super::Limits) -> Result<(), String> {
        if self.is_empty() {
            return Err("nothing to change; give --priority, --nice, --mem, --time-limit or --gpus".into());
        }
        if let Some(priority) = self.priority {
            validate_priority("priority", i64::from(priority))?;
        }
        if let Some(nice) = self.nice {
            validate_priority("nice", i64::from(nice))?;
        }
        if let Some(gpus) = self.gpus {
            super::validate_gpus(i64::from(gpus), limits)?;
        }
        if let Some(mib) = self.memory_mib {
            super::parse_memory_mib(&format!("{mib}MiB"))?;
            if let Some(largest) = limits.largest_gpu_mib.filter(|&l| l > 0 && mib > l) {
                // In GiB, as submit says it for the same figure.
                let gib = |mib: u64| mib as f64 / 1024.0;
                return Err(format!(
                    "memory {:.1} GiB per GPU is more than the largest GPU here has ({:.1} GiB); ask for at most {:.1} GiB",
                    gib(mib),
                    gib(largest),
                    gib(largest)
                ));
            }
        }
        if let Some(ms) = self.time_limit_ms {
            super::parse_time_limit_ms(&format!("{ms}ms"))?;
            if let Some(max) = limits.time_limit_max_ms.filter(|max| ms > *max) {
                return Err(format!(
                    "time limit {} is longer than this queue allows ({})",
                    super::render_ms(ms),
                    super::render_ms(max)
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33, defects 7 and 11: `--dependency singleton` was "no such task"; it is refused
    /// by name, in sbatch's words. An update's memory refusal is in GiB, as submit's.
    #[test]
    fn singleton_is_refused_by_name_and_an_update_speaks_gib() {
        let words =
            "singleton (one running task per name) is not supported; name the task to wait for: --after ID";
        assert_eq!(parse_after("singleton").unwrap_err(), words);
        assert_eq!(parse_after("afterok:abcd,singleton").unwrap_err(), words);
        let limits = super::super::Limits { largest_gpu_mib: Some(40_960), ..Default::default() };
        let changes = Changes { memory_mib: Some(81_920), ..Default::default() };
        assert_eq!(
            changes.check(limits).unwrap_err(),
            "memory 80.0 GiB per GPU is more than the largest GPU here has (40.0 GiB); ask for at most 40.0 GiB"
        );
    }

    fn targets(text: &str) -> Vec<(DependencyKind, String)> {
        parse_after(text).unwrap().into_iter().map(|r| (r.kind, r.target)).collect()
    }

    #[test]
    fn after_accepts_ids_shortcuts_and_slurm_spelling() {
        use DependencyKind::*;
        assert_eq!(targets("abcd,@~1"), [(AfterOk, "abcd".into()), (AfterOk, "@~1".into())]);
        assert_eq!(
            targets("afterok:a1b2:c3d4,afterany:@,afternotok:e5f6"),
            [
                (AfterOk, "a1b2".into()),
                (AfterOk, "c3d4".into()),
                (AfterAny, "@".into()),
                (AfterNotOk, "e5f6".into())
            ]
        );
        assert_eq!(
            parse_after("after:abcd").unwrap_err(),
            "dependency type \"after\" is not supported; use one of afterok, afterany, afternotok"
        );
        assert!(parse_after("afterok:a?afterany:b").unwrap_err().contains("`?`"));
        assert!(parse_after("afterok:").unwrap_err().contains("names no task"));
        assert!(parse_after("a,,b").unwrap_err().contains("empty item"));
        assert_eq!(recent_offset("@"), Some(Ok(0)));
        assert_eq!(recent_offset("@~3"), Some(Ok(3)));
        assert!(recent_offset("@3").unwrap().is_err());
        assert_eq!(recent_offset("abcd"), None);
    }

    #[test]
    fn canonical_dependencies_round_trip() {
        let id = TaskId::from_parts(1_700_000_000_000, 7);
        for kind in [DependencyKind::AfterOk, DependencyKind::AfterAny, DependencyKind::AfterNotOk] {
            let dependency = Dependency { kind, task: id.clone() };
            assert_eq!(Dependency::parse_canonical(&dependency.label()), Ok(dependency));
        }
        assert_eq!(Dependency::parse_canonical(id.as_str()).unwrap().kind, DependencyKind::AfterOk);
        assert!(Dependency::parse_canonical("afterok:abcd").unwrap_err().contains("not a task id"));
    }

    #[test]
    fn array_ranges_steps_lists_and_caps() {
        let parse = |t: &str| parse_array(t).unwrap();
        assert_eq!(parse("0-9").indices, (0..10).collect::<Vec<_>>());
        assert_eq!(parse("0-9:2").indices, [0, 2, 4, 6, 8]);
        assert_eq!(parse("1,4,7"), ArraySpec { indices: vec![1, 4, 7], running_max: None });
        assert_eq!(parse("0-9%2").running_max, Some(2));
        assert_eq!(parse("1,3-5%3").indices, [1, 3, 4, 5]);
        assert_eq!(parse("%4"), ArraySpec { indices: vec![], running_max: Some(4) });
        assert!(parse_array("5-1").unwrap_err().contains("ends before it starts"));
        assert!(parse_array("0-9%0").unwrap_err().contains("at least 1"));
        assert!(parse_array("0-9:0").unwrap_err().contains("a step of 0"));
        assert!(parse_array("1,1").unwrap_err().contains("twice"));
        assert!(parse_array("0-5000").unwrap_err().contains("more than 1000 tasks"));
        assert!(parse_array("x").unwrap_err().contains("is not an index"));
    }

    #[test]
    fn params_expand_to_the_cartesian_product_in_flag_order() {
        let lr = parse_param("lr=0.001,0.01").unwrap();
        let bs = parse_param("bs=32,64").unwrap();
        let combos = expand_params(&[lr.clone(), bs]).unwrap();
        let shown: Vec<String> = combos.iter().map(|c| substitute("lr{lr}-bs{bs}", c)).collect();
        assert_eq!(shown, ["lr0.001-bs32", "lr0.001-bs64", "lr0.01-bs32", "lr0.01-bs64"]);
        assert_eq!(substitute("{\"x\": {lr}}", &combos[0]), "{\"x\": 0.001}");
        assert!(expand_params(&[lr.clone(), lr]).unwrap_err().contains("given twice"));
        assert!(parse_param("lr").unwrap_err().contains("has no '='"));
        assert!(parse_param("1x=1").unwrap_err().contains("invalid"));
        assert!(parse_param("lr=1,,2").unwrap_err().contains("empty value"));
        let many: Vec<Param> =
            (0..4).map(|i| parse_param(&format!("p{i}=1,2,3,4,5,6,7,8,9,10")).unwrap()).collect();
        assert!(expand_params(&many).unwrap_err().contains("more than 1000"));
    }

    #[test]
    fn changes_round_trip_and_are_bounded() {
        let changes = Changes { priority: Some(5), memory_mib: Some(2048), ..Changes::default() };
        assert_eq!(Changes::parse(&changes.to_toml(), super::super::Limits::default()), Ok(changes));
        let limits = super::super::Limits { machine_gpus: Some(2), ..Default::default() };
        let err = Changes::parse("gpus = 3\n", limits).unwrap_err();
        assert_eq!(err, "gpus = 3: this machine has only 2 GPU(s); ask for at most 2");
        assert!(Changes::parse("", limits).unwrap_err().starts_with("nothing to change"));
        assert!(
            Changes::parse("colour = 1\n", limits).unwrap_err().contains("not written by `carma update`")
        );
    }

    #[test]
    fn priority_notify_and_mail_bounds() {
        assert_eq!(validate_priority("priority", -10_000), Ok(-10_000));
        assert_eq!(
            validate_priority("nice", 10_001).unwrap_err(),
            "nice = 10001: use a value from -10000 to 10000"
        );
        assert!(validate_notify(&[]).is_err());
        assert!(validate_notify(&["notify-send".into()]).is_ok());
        assert!(validate_mail_user("alice@example.org").is_ok());
        assert!(validate_mail_user("a\nBcc: x").is_err());
        assert!(validate_mail_user("-oQ/tmp").is_err());
    }
}
