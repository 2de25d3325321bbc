//! The workflow views of `carma queue` and `carma show`: arrays folded into one line
//! (`--expand` shows every member), dependency chains as trees (`--tree`), the workflow fields
//! of `--json`, and `show`'s workflow lines.
//!
//! Pure functions of the State, so they are tested without a terminal; `queue` renders what
//! they return.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::id::TaskId;
use crate::journal::{Status, Task};

/// One line of the table: a task, or an array folded into one.
#[derive(Debug)]
pub(super) enum Entry<'a> {
    Task(&'a Task),
    Array(ArraySummary<'a>),
}

/// An array's members as one line.
#[derive(Debug)]
pub(super) struct ArraySummary<'a> {
    pub id: &'a TaskId,
    /// Its members among the listed tasks, in submit order.
    pub members: Vec<&'a Task>,
    pub count: u32,
    pub running_max: Option<u32>,
}

/// The listed tasks with every array's members folded into one entry, at its first member's
/// place. Tasks must be in submit order.
pub(super) fn fold_arrays<'a>(tasks: &[&'a Task]) -> Vec<Entry<'a>> {
    let mut entries: Vec<Entry<'a>> = Vec::with_capacity(tasks.len());
    let mut position: BTreeMap<&'a TaskId, usize> = BTreeMap::new();
    for &task in tasks {
        let Some(array) = &task.spec.array else {
            entries.push(Entry::Task(task));
            continue;
        };
        match position.get(&array.id) {
            Some(&at) => {
                if let Entry::Array(summary) = &mut entries[at] {
                    summary.members.push(task);
                }
            }
            None => {
                position.insert(&array.id, entries.len());
                entries.push(Entry::Array(ArraySummary {
                    id: &array.id,
                    members: vec![task],
                    count: array.count,
                    running_max: array.running_max,
                }));
            }
        }
    }
    entries
}

impl ArraySummary<'_> {
    /// `ID[count%N]`, as squeue shows an array, with the id's first `id_width` characters.
    pub(super) fn label(&self, id_width: usize) -> String {
        let cap = self.running_max.map_or(String::new(), |n| format!("%{n}"));
        let id = self.id.as_str();
        format!("{}[{}{cap}]", &id[..id_width.min(id.len())], self.count)
    }

    /// Members per squeue state code, e.g. `2R 5PD 3CD`, in life order.
    pub(super) fn codes(&self) -> String {
        let order = ["R", "S", "CF", "PD", "CD", "F", "TO", "CA"];
        order
            .iter()
            .filter_map(|code| {
                let n = self.members.iter().filter(|t| super::status::code(t) == *code).count();
                (n > 0).then(|| format!("{n}{code}"))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Members per state, e.g. `2 Running, 5 Pending, 3 Finished`, in life order.
    pub(super) fn states(&self) -> String {
        let order = [
            Status::Running,
            Status::Placed,
            Status::Pending,
            Status::Finished,
            Status::Failed,
            Status::Cancelled,
        ];
        order
            .iter()
            .filter_map(|status| {
                let n = self.members.iter().filter(|t| t.status() == *status).count();
                (n > 0).then(|| format!("{n} {}", status.as_str()))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The first waiting member's reason, else the first running member's placement.
    pub(super) fn reason(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.members
            .iter()
            .find(|t| t.status() == Status::Pending)
            .or_else(|| self.members.first())
            .and_then(|t| super::status::reason(t))
    }
}

/// The listed tasks as a forest of dependency chains: each task under the newest of its
/// listed dependencies (so a chain reads top to bottom), roots in submit order. Each line is
/// its tree prefix (`├─ `, `└─ `, `│  `) and the task.
pub(super) fn tree<'a>(tasks: &[&'a Task]) -> Vec<(String, &'a Task)> {
    let listed: BTreeSet<&TaskId> = tasks.iter().map(|t| &t.id).collect();
    let mut children: BTreeMap<&TaskId, Vec<&'a Task>> = BTreeMap::new();
    let mut roots: Vec<&'a Task> = Vec::new();
    for &task in tasks {
        let parent = task.spec.dependencies.iter().map(|d| &d.task).filter(|id| listed.contains(id)).max();
        match parent {
            Some(parent) if parent != &task.id => children.entry(parent).or_default().push(task),
            _ => roots.push(task),
        }
    }
    let mut lines = Vec::with_capacity(tasks.len());
    for root in roots {
        walk(root, "", "", &children, &mut lines, 0);
    }
    lines
}

/// Depth-first, with the prefixes of the lines above; depth-bounded because a damaged
/// journal could hold a cycle.
fn walk<'a>(
    task: &'a Task,
    own: &str,
    inherited: &str,
    children: &BTreeMap<&TaskId, Vec<&'a Task>>,
    lines: &mut Vec<(String, &'a Task)>,
    depth: usize,
) {
    lines.push((format!("{inherited}{own}"), task));
    if depth > 64 {
        return;
    }
    let below = children.get(&task.id).map(Vec::as_slice).unwrap_or_default();
    let continued = match own {
        "├─ " => format!("{inherited}│  "),
        "└─ " => format!("{inherited}   "),
        _ => inherited.to_string(),
    };
    for (i, child) in below.iter().enumerate() {
        let mark = if i + 1 == below.len() { "└─ " } else { "├─ " };
        walk(child, mark, &continued, children, lines, depth + 1);
    }
}

/// The workflow part of a task in `carma queue --json` and `carma show --json`.
#[derive(Debug, Serialize)]
pub(super) struct WorkflowJson<'a> {
    pub held: bool,
    pub priority: i32,
    pub nice: i32,
    pub array_id: Option<&'a str>,
    pub array_index: Option<u32>,
    pub dependencies: Vec<DependencyJson<'a>>,
}

/// One dependency in `--json`.
#[derive(Debug, Serialize)]
pub(super) struct DependencyJson<'a> {
    pub kind: &'static str,
    pub task: &'a str,
}

/// The workflow fields of `task`.
pub(super) fn workflow_json(task: &Task) -> WorkflowJson<'_> {
    let spec = &task.spec;
    WorkflowJson {
        held: task.held(),
        priority: spec.priority,
        nice: spec.nice,
        array_id: spec.array.as_ref().map(|a| a.id.as_str()),
        array_index: spec.array.as_ref().map(|a| a.index),
        dependencies: spec
            .dependencies
            .iter()
            .map(|d| DependencyJson { kind: d.kind.name(), task: d.task.as_str() })
            .collect(),
    }
}

/// `carma show`'s lines about the workflow, as (label, value); only what is set.
pub(super) fn show_lines(task: &Task) -> Vec<(&'static str, String)> {
    let spec = &task.spec;
    let mut lines = Vec::new();
    if spec.priority != 0 || spec.nice != 0 {
        lines.push(("priority", format!("{} (nice {})", spec.priority, spec.nice)));
    }
    if task.held() {
        lines.push(("held", "yes: waits until `carma release`".to_string()));
    }
    for dependency in &spec.dependencies {
        let keep = if spec.keep_on_dependency_failure { ", kept if it cannot be met" } else { "" };
        lines.push(("after", format!("{} {}{keep}", dependency.kind.name(), dependency.task)));
    }
    if let Some(array) = &spec.array {
        let cap = array.running_max.map_or(String::new(), |n| format!(", at most {n} at once"));
        let params: Vec<String> = array.params.iter().map(|(n, v)| format!("{n}={v}")).collect();
        let params = if params.is_empty() { String::new() } else { format!(" ({})", params.join(" ")) };
        lines.push(("array", format!("{} index {} of {}{cap}{params}", array.id, array.index, array.count)));
    }
    if let Some(script) = &spec.script {
        lines.push(("script", format!("{script} (copied at submit)")));
    }
    if let Some(signal) = &spec.signal {
        lines.push(("signal", signal_line(signal)));
    }
    if let Some(begin_ms) = spec.begin_ms {
        lines.push(("begin", crate::clock::format_ms(begin_ms)));
    }
    if !spec.notify.is_empty() {
        lines.push(("notify", spec.notify.join(" ")));
    }
    if let Some(address) = &spec.mail_user {
        lines.push(("mail", address.clone()));
    }
    lines
}

/// `USR1 5 s before the time limit`, and to whom for `B:`.
fn signal_line(canonical: &str) -> String {
    let (batch, rest) = match canonical.strip_prefix("B:") {
        Some(rest) => (", to the job's first process only", rest),
        None => ("", canonical),
    };
    let (name, seconds) = rest.split_once('@').unwrap_or((rest, "?"));
    format!("{name} {seconds} s before the time limit{batch}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Event, Record, State};
    use crate::spec::{ArrayMember, Dependency, DependencyKind, TaskSpec};

    fn id(n: u64) -> TaskId {
        TaskId::from_parts(1_700_000_000_000 + n, 0)
    }

    fn state(specs: Vec<(u64, TaskSpec)>) -> State {
        let mut state = State::default();
        for (seq, (n, spec)) in specs.into_iter().enumerate() {
            let event = Event::Submitted { task: id(n), submitter_uid: 1, spec };
            state.apply(seq as u64 + 1, &Record { time_ms: 1, event });
        }
        state
    }

    fn after(name: &str, deps: &[u64]) -> TaskSpec {
        let dependencies =
            deps.iter().map(|n| Dependency { kind: DependencyKind::AfterOk, task: id(*n) }).collect();
        TaskSpec { name: name.into(), gpus: 1, dependencies, ..TaskSpec::default() }
    }

    /// Goal: a chain prepare -> train -> evaluate and a second child read as a tree.
    #[test]
    fn chains_render_as_trees() {
        let state = state(vec![
            (1, after("prepare", &[])),
            (2, after("train", &[1])),
            (3, after("evaluate", &[2])),
            (4, after("plot", &[1])),
            (5, after("alone", &[])),
        ]);
        let tasks: Vec<&Task> = state.tasks.values().collect();
        let lines: Vec<String> = tree(&tasks).iter().map(|(p, t)| format!("{p}{}", t.spec.name)).collect();
        assert_eq!(lines, ["prepare", "├─ train", "│  └─ evaluate", "└─ plot", "alone"]);
    }

    /// Goal: members of an array fold into one entry at the first member's place and count
    /// their states.
    #[test]
    fn arrays_fold_into_one_entry() {
        let member = |index| {
            let array = ArrayMember { id: id(100), index, count: 3, running_max: Some(2), params: vec![] };
            TaskSpec { name: "sweep".into(), gpus: 1, array: Some(array), ..TaskSpec::default() }
        };
        let state = state(vec![
            (1, after("a", &[])),
            (2, member(0)),
            (3, member(1)),
            (4, after("b", &[])),
            (5, member(2)),
        ]);
        let tasks: Vec<&Task> = state.tasks.values().collect();
        let entries = fold_arrays(&tasks);
        assert_eq!(entries.len(), 3);
        let Entry::Array(summary) = &entries[1] else { panic!("the array is second: {entries:?}") };
        assert_eq!(summary.members.len(), 3);
        assert_eq!(summary.label(16), format!("{}[3%2]", id(100)));
        assert_eq!(summary.label(8), format!("{}[3%2]", &id(100).as_str()[..8]));
        assert_eq!(summary.states(), "3 Pending");
    }
}
