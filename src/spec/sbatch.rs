//! Slurm's grammar: a job script's `#SBATCH` lines read with sbatch's rules, into the carma
//! words they mean, with a note for each option that means nothing on one server and a
//! refusal, with its reason, for each that cannot be honoured here.
//!
//! The rules are sbatch's: only lines before the first command count (blank lines and other
//! comments may come between them); a `#` starting a word ends the line (a trailing
//! comment); options are `--opt=value`, `--opt value`, `-tvalue` or `-t value`, and a long
//! name may be shortened to a prefix of only one option, as getopt allows. Every option of
//! the man page is in [`OPTIONS`] (the README's "Slurm users" table), in one of three groups.
//!
//! Nothing here decides twice: the carma words go through `carma submit`'s own parser, so
//! `#SBATCH --gres=gpu:2` and `#CARMA --gpus 2` are the same task. What needs the server
//! (its GPU names and count) comes in [`Server`].

mod convert;
mod gpus;
mod table;

pub use convert::{output_template, slurm_memory_mib, slurm_time_ms};
pub use gpus::type_matches;
pub use table::{Group, OPTIONS, SlurmOption, by_long, by_short, getopt_long, markdown, nearest};

/// The directive prefix sbatch reads.
pub const DIRECTIVE: &str = "#SBATCH";

/// What the checks that need this server know of it.
#[derive(Clone, Debug, Default)]
pub struct Server {
    /// Its GPUs' names (`NVIDIA A100-SXM4-80GB`), one per GPU; `None` when carma has not
    /// seen them yet (no tick has run).
    pub gpus: Option<Vec<String>>,
    /// Its host name, for `%N`.
    pub node: String,
    /// Whether this queue sends mail (its config names a sendmail).
    pub sends_mail: bool,
    /// Whether it mails the submitter when no `--mail-user` is given.
    pub mails_submitter: bool,
    /// Why this queue cannot set a job's host memory limit (a personal queue, no cgroup v2
    /// memory controller); `None` where it can ([`crate::exec::hostlimit`]).
    pub host_limits_unenforced: Option<String>,
    /// The same for a CPU limit (the cpu controller).
    pub cpu_limit_unenforced: Option<String>,
}

/// One option of a `#SBATCH` line and the carma words it became.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Carma {
    /// The script's line number (from 1).
    pub line: usize,
    /// The option as written (`--gres=gpu:2`).
    pub written: String,
    /// The carma words (`--gpus 2`); empty when it changes nothing.
    pub words: Vec<String>,
}

/// A note or a refusal about one option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The script's line number (from 1); [`COMMAND_LINE`] for an option typed on submit's
    /// command line.
    pub line: usize,
    /// The option as written.
    pub written: String,
    /// What carma does, or why it cannot.
    pub text: String,
}

/// The "line" of the sbatch options typed on `carma submit`'s command line, which come after
/// every `#SBATCH` line and so win over them, as sbatch's command line does.
pub const COMMAND_LINE: usize = 0;

impl Finding {
    /// `train.sh:4: #SBATCH --nodes=2: why`, `train.sh:9: why` for a line of the body, or
    /// `command line: --nodes=2: why`.
    pub fn render(&self, origin: &str) -> String {
        if self.line == COMMAND_LINE {
            return format!("command line: {}: {}", self.written, self.text);
        }
        if self.written.is_empty() {
            return format!("{origin}:{}: {}", self.line, self.text);
        }
        format!("{origin}:{}: {DIRECTIVE} {}: {}", self.line, self.written, self.text)
    }
}

/// What a script's `#SBATCH` lines mean to carma.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Translation {
    /// The carma words of each option, in the script's order.
    pub carma: Vec<Carma>,
    /// Options accepted with a note.
    pub notes: Vec<Finding>,
    /// Options that cannot be honoured here; the task is refused when there is one.
    pub refusals: Vec<Finding>,
}

/// One option as read from a line, before it is understood.
struct Read {
    line: usize,
    written: String,
    option: &'static SlurmOption,
    value: Option<String>,
}

/// Reads `text`'s `#SBATCH` lines (before the first command) into carma words, notes and
/// refusals; every problem of every line is in the result, none stops the reading.
pub fn translate(text: &str, server: &Server) -> Translation {
    translate_with(text, server, &[], &[])
}

/// A setting given above the `#SBATCH` lines (a `#CARMA` line, a carma flag on the command
/// line): its carma flag (`--gpus`) and where it was given (`the command line's --gpus 2`).
pub type Above = (&'static str, String);

/// [`translate`], with sbatch options typed on submit's command line (`command_line`, read
/// as one line after the script's, [`COMMAND_LINE`]) and the settings given `above` them all.
/// As sbatch, a later option wins: what this server cannot give for a setting that a later
/// line or a layer above sets again is a note, not a refusal.
pub fn translate_with(text: &str, server: &Server, command_line: &[String], above: &[Above]) -> Translation {
    let mut out = Translation::default();
    let mut read = Vec::new();
    for (line, rest) in directive_lines(text) {
        match words(rest) {
            Ok(words) => parse_words(line, &words, &mut read, &mut out.refusals),
            Err(why) => out.refusals.push(Finding { line, written: rest.trim().into(), text: why }),
        }
    }
    parse_words(COMMAND_LINE, command_line, &mut read, &mut out.refusals);
    let context = Context::of(&read, server);
    out.refusals.extend(implied_nodes(&read));
    // sbatch adds each --mail-type to the ones before (a line each for begin and end).
    let mut mail_types: Vec<String> = Vec::new();
    for (at, item) in read.iter().enumerate() {
        let Read { line, written, option, value } = item;
        let (line, written) = (*line, written.clone());
        let mut value = value.clone();
        if option.long == "mail-type" {
            mail_types.extend(value.take());
            value = Some(mail_types.join(","));
        }
        let value = value.unwrap_or_default();
        match meaning(option, value.trim(), &context) {
            Ok(Meaning { words, note }) => {
                if let Some(text) = note {
                    out.notes.push(Finding { line, written: written.clone(), text });
                }
                out.carma.push(Carma { line, written, words });
            }
            Err(Why::Server(text)) => match overridden(option, &read[at + 1..], above) {
                Some(by) => {
                    out.notes.push(Finding { line, written, text: format!("{text}; overridden by {by}") })
                }
                None => out.refusals.push(Finding { line, written, text }),
            },
            Err(Why::Syntax(text)) => out.refusals.push(Finding { line, written, text }),
        }
    }
    if !out.carma.is_empty() || !out.notes.is_empty() || !out.refusals.is_empty() {
        out.notes.extend(slurm_commands(text));
    }
    // In the script's order (a stable sort keeps each line's options in theirs), the command
    // line's last.
    out.refusals.sort_by_key(|f| if f.line == COMMAND_LINE { usize::MAX } else { f.line });
    out
}

/// The carma setting an option sets, for the options whose value this server may be unable
/// to give: a later option or a layer above that sets it again wins over the refusal.
fn setting_of(long: &str) -> Option<&'static str> {
    Some(match long {
        "gpus" | "gpus-per-node" | "gpus-per-task" | "gres" => "--gpus",
        "nodes" => "--nodes",
        "time" => "--time-limit",
        "mem" | "mem-per-cpu" => "--host-mem",
        "cpus-per-task" => "--cpus-per-task",
        _ => return None,
    })
}

/// Who sets `option`'s setting again after it: a later line (`line 9's --gpus=2`), the command
/// line, or a layer `above`; `None` when nothing does.
fn overridden(option: &SlurmOption, later: &[Read], above: &[Above]) -> Option<String> {
    let setting = setting_of(option.long)?;
    if let Some((_, by)) = above.iter().rev().find(|(s, _)| *s == setting) {
        return Some(by.clone());
    }
    let later = later.iter().rev().find(|r| setting_of(r.option.long) == Some(setting))?;
    Some(match later.line {
        COMMAND_LINE => format!("the command line's {}", later.written),
        line => format!("line {line}'s {}", later.written),
    })
}

/// `--ntasks` over `--ntasks-per-node` is a node count: more than one node is refused, at
/// the `--ntasks` option, as `--nodes=2` is.
fn implied_nodes(read: &[Read]) -> Option<Finding> {
    let last = |name: &str| read.iter().rev().find(|r| r.option.long == name);
    let number = |r: &Read| r.value.as_deref().and_then(|v| v.trim().parse::<u32>().ok()).filter(|n| *n >= 1);
    let (tasks_read, per_node_read) = (last("ntasks")?, last("ntasks-per-node")?);
    let (tasks, per_node) = (number(tasks_read)?, number(per_node_read)?);
    let nodes = tasks.div_ceil(per_node);
    (nodes > 1).then(|| Finding {
        line: tasks_read.line,
        written: tasks_read.written.clone(),
        text: format!(
            "{tasks} tasks at {per_node} per node ({}) is {nodes} nodes: this server is one node; ask for at most {per_node} tasks",
            per_node_read.written
        ),
    })
}

/// Slurm's commands that scripts call, none of which is on a carma server (`srun` is: a job
/// finds carma's on its PATH, `exec::srun`).
const SLURM_COMMANDS: [&str; 5] = ["scontrol", "sbatch", "squeue", "scancel", "sacct"];

/// A note for the first line of the body that calls each Slurm command: no Slurm is there to
/// answer questions or take jobs.
fn slurm_commands(text: &str) -> Vec<Finding> {
    let mut found: Vec<Finding> = Vec::new();
    for (number, line) in text.lines().enumerate().skip(1) {
        let code = line.trim();
        if code.starts_with('#') {
            continue;
        }
        let words = code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        for word in words {
            let known = SLURM_COMMANDS.contains(&word);
            if known && !found.iter().any(|f| f.text.starts_with(&format!("{word} "))) {
                let text = format!(
                    "{word} is a Slurm command and there is no Slurm here; carma's own are carma queue, show, cancel and requeue"
                );
                found.push(Finding { line: number + 1, written: String::new(), text });
            }
        }
    }
    found
}

/// Whether `text` has any `#SBATCH` line before its first command.
pub fn has_directives(text: &str) -> bool {
    directive_lines(text).next().is_some()
}

/// The `#SBATCH` lines before the first command: line number and the text after the prefix.
fn directive_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .skip(1)
        .map(|(number, line)| (number + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty())
        .take_while(|(_, line)| line.starts_with('#'))
        .filter_map(|(number, line)| {
            let rest = line.strip_prefix(DIRECTIVE)?;
            (rest.is_empty() || rest.starts_with([' ', '\t'])).then_some((number, rest))
        })
}

/// A directive's words: split at blanks, quotes group, a `#` starting a word ends the line.
fn words(rest: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in rest.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => current.push(c),
            None if c == '\'' || c == '"' => (quote, in_word) = (Some(c), true),
            None if c == ' ' || c == '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            None if c == '#' && !in_word => break,
            None => {
                current.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err("unterminated quote; close it".into());
    }
    if in_word {
        words.push(current);
    }
    Ok(words)
}

/// The options of one line's words; an unknown one, or one missing its value, is a refusal.
fn parse_words(line: usize, words: &[String], read: &mut Vec<Read>, refusals: &mut Vec<Finding>) {
    let mut index = 0;
    while index < words.len() {
        let word = &words[index];
        index += 1;
        let refuse = |text: String| Finding { line, written: word.clone(), text };
        let (option, inline) = if let Some(long) = word.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (long, None),
            };
            match by_long(name) {
                Some(option) => (option, inline),
                None => {
                    refusals.push(refuse(unknown(name)));
                    continue;
                }
            }
        } else if let Some(short) = word.strip_prefix('-').and_then(|s| s.chars().next()) {
            let rest = &word[1 + short.len_utf8()..];
            match by_short(short) {
                Some(option) => (option, (!rest.is_empty()).then(|| rest.to_string())),
                None => {
                    refusals.push(refuse(format!("-{short} is not an sbatch option")));
                    continue;
                }
            }
        } else {
            refusals.push(refuse("not an option; #SBATCH lines take options only".into()));
            continue;
        };
        let value = match (option.takes_value, inline) {
            (true, Some(value)) => Some(value),
            (true, None) if index < words.len() => {
                index += 1;
                Some(words[index - 1].clone())
            }
            (true, None) => {
                refusals.push(refuse(format!("--{} needs a value", option.long)));
                continue;
            }
            (false, Some(_)) => {
                refusals.push(refuse(format!("--{} takes no value", option.long)));
                continue;
            }
            (false, None) => None,
        };
        let written = match &value {
            Some(value) if !word.contains('=') && word.starts_with("--") => format!("{word} {value}"),
            Some(value) if !word.starts_with("--") && word.len() == 2 => format!("{word} {value}"),
            _ => word.clone(),
        };
        read.push(Read { line, written, option, value });
    }
}

/// The refusal of an unknown `--name`: the options it is an ambiguous prefix of (getopt's
/// refusal), or the sbatch option it is nearest to.
fn unknown(name: &str) -> String {
    let prefixed: Vec<String> = OPTIONS
        .iter()
        .filter(|o| !name.is_empty() && o.long.starts_with(name))
        .map(|o| format!("--{}", o.long))
        .collect();
    if prefixed.len() > 1 {
        return format!("--{name} is ambiguous ({}); write more of it, as sbatch asks", prefixed.join(", "));
    }
    match nearest(name) {
        Some(option) => {
            format!("--{name} is not an sbatch option; did you mean --{}? ({})", option.long, option.carma)
        }
        None => format!("--{name} is not an sbatch option; the README's \"Slurm users\" table lists them"),
    }
}

/// What the meaning of one option may depend on.
struct Context<'a> {
    ntasks: u32,
    /// Whether `--ntasks` itself was given (else `--ntasks-per-node`, one node, is the count).
    ntasks_given: bool,
    /// `-c`, 1 without it (as Slurm gives one CPU per task).
    cpus_per_task: u32,
    server: &'a Server,
    /// Whether the script names a `--mail-user`.
    mail_user: bool,
}

impl Context<'_> {
    /// The context of every option `read` (the last of each option wins, as in sbatch).
    fn of<'a>(read: &[Read], server: &'a Server) -> Context<'a> {
        let last_number = |name: &str| {
            read.iter()
                .rev()
                .find(|r| r.option.long == name)
                .and_then(|r| r.value.as_deref().and_then(|v| v.trim().parse::<u32>().ok()))
        };
        let ntasks_given = last_number("ntasks");
        Context {
            ntasks: ntasks_given.or(last_number("ntasks-per-node")).unwrap_or(1),
            ntasks_given: ntasks_given.is_some(),
            cpus_per_task: last_number("cpus-per-task").unwrap_or(1),
            server,
            mail_user: read.iter().any(|r| r.option.long == "mail-user"),
        }
    }
}

/// Why an option cannot be honoured: its value is wrong (always a refusal), or this server
/// cannot give it (a refusal unless a later option or a layer above sets the same again).
enum Why {
    Syntax(String),
    Server(String),
}

impl From<String> for Why {
    fn from(text: String) -> Why {
        Why::Syntax(text)
    }
}

/// One option's carma words and note.
struct Meaning {
    words: Vec<String>,
    note: Option<String>,
}

fn words_of(words: &[&str]) -> Meaning {
    Meaning { words: words.iter().map(|w| w.to_string()).collect(), note: None }
}

fn noted(words: &[&str], note: String) -> Meaning {
    Meaning { note: Some(note), ..words_of(words) }
}

/// The carma words (and note) of `option` with `value`, or why it cannot be honoured.
fn meaning(option: &SlurmOption, value: &str, context: &Context) -> Result<Meaning, Why> {
    match option.group {
        Group::Noted => return Ok(noted(&[], option.carma.to_string())),
        Group::Refused => return Err(Why::Syntax(option.carma.to_string())),
        Group::Honoured => {}
    }
    let count = |what: &str| -> Result<u32, String> {
        value
            .parse::<u32>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("{what} {value:?} is not a whole number of at least 1"))
    };
    Ok(match option.long {
        "array" => {
            super::workflow::parse_array(value)?;
            words_of(&["--array", value])
        }
        "begin" => {
            let now_ms = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
            super::timing::parse_begin(value, now_ms)?;
            words_of(&["--begin", value])
        }
        "chdir" => words_of(&["--workdir", value]),
        "cpus-per-task" => cpus(count("CPUs per task")?, context),
        "dependency" => dependency(value)?,
        "error" | "output" => {
            let (template, note) = output_template(value, &context.server.node)?;
            Meaning { words: vec![format!("--{}", option.long), template], note }
        }
        "export" => {
            super::export::Export::parse(Some(value))?;
            words_of(&["--export", value])
        }
        "gpus" | "gpus-per-node" | "gpus-per-task" | "gres" => gpus::gpus(option.long, value, context)?,
        "hold" => words_of(&["--hold"]),
        "job-name" => {
            super::validate_name(value)?;
            words_of(&["--name", value])
        }
        "kill-on-invalid-dep" => match value {
            "yes" => words_of(&[]),
            "no" => words_of(&["--keep-on-dependency-failure"]),
            _ => return Err(format!("{value:?} is neither yes nor no").into()),
        },
        "mail-type" | "mail-user" if !context.server.sends_mail => {
            noted(&[], "this queue sends no mail (its administrator set no sendmail); ignored".into())
        }
        "mail-type" => {
            super::mail::MailTypes::parse(value)?;
            if !context.mail_user && !context.server.mails_submitter {
                return Ok(noted(&[], "no one to mail: add --mail-user ADDRESS (this queue mails no submitter by default); ignored".into()));
            }
            words_of(&["--mail-type", value])
        }
        "mail-user" => words_of(&["--mail-user", value]),
        "mem" | "mem-per-cpu" => host_memory(option.long, value, context)?,
        "mem-per-gpu" => {
            let mib = slurm_memory_mib(value)?;
            noted(
                &["--env", &format!("SLURM_MEM_PER_GPU={mib}")],
                format!(
                    "host memory per GPU ({mib} MiB) is not limited; use --mem for the whole job's; GPU memory per GPU is --gpu-mem SIZE"
                ),
            )
        }
        "nice" | "priority" => {
            value.parse::<i64>().map_err(|_| format!("{value:?} is not a whole number"))?;
            words_of(&[&format!("--{}", option.long), value])
        }
        "no-requeue" => words_of(&["--no-requeue"]),
        "nodes" => nodes(value)?,
        "ntasks" => {
            let n = count("tasks")?;
            words_of(&["--env", &format!("SLURM_NTASKS={n}")])
        }
        // One node: the count per node is the job's, unless --ntasks gives it.
        "ntasks-per-node" => {
            let n = count("tasks")?;
            let mut words = vec!["--env".to_string(), format!("SLURM_NTASKS_PER_NODE={n}")];
            if !context.ntasks_given {
                words.extend(["--env".to_string(), format!("SLURM_NTASKS={n}")]);
            }
            Meaning { words, note: None }
        }
        "open-mode" => match value {
            "truncate" => words_of(&[]),
            "append" => noted(
                &[],
                "a requeued or retried attempt appends to the output file, so earlier output is kept; the first attempt truncates it".into(),
            ),
            _ => return Err(format!("{value:?} is neither append nor truncate").into()),
        },
        "parsable" => words_of(&["--parsable"]),
        // The name is checked where every spec's is (`spec::extras`), as the words are read.
        "reservation" => words_of(&["--reservation", value]),
        "requeue" => words_of(&["--requeue"]),
        "signal" => {
            super::timing::parse_signal(value)?;
            words_of(&["--signal", value])
        }
        "test-only" => words_of(&["--dry-run"]),
        "time" => match slurm_time_ms(value)? {
            Some(ms) if ms > super::TIME_LIMIT_MS_MAX => {
                return Err(Why::Server(format!("{} is longer than carma's limit of a year", render_duration(ms))));
            }
            Some(ms) => words_of(&["--time-limit", &render_duration(ms)]),
            None => words_of(&[]),
        },
        other => return Err(Why::Syntax(format!("--{other} is not read by this carma; tell its maintainers"))),
    })
}

/// `--dependency`: carma's `--after` reads Slurm's all-of lists; the other forms are refused
/// by name.
fn dependency(value: &str) -> Result<Meaning, String> {
    if value == "singleton" {
        return Err(super::workflow::SINGLETON_REFUSED.into());
    }
    for item in value.split([',', '?']) {
        let kind = item.split(':').next().unwrap_or_default();
        if matches!(kind, "after" | "aftercorr" | "afterburstbuffer") {
            return Err(format!("{kind} is not supported; use afterok, afterany or afternotok"));
        }
    }
    super::workflow::parse_after(value)?;
    Ok(words_of(&["--after", value]))
}

/// `--nodes`: one node is what there is; more than one cannot be given.
fn nodes(value: &str) -> Result<Meaning, Why> {
    let min = value.split(['-', ',', ':']).next().unwrap_or_default();
    match min.trim().parse::<u32>() {
        Ok(1) => Ok(noted(&[], "this server is one node; always so here".into())),
        Ok(n) if n > 1 => Err(Why::Server(format!(
            "{n} nodes: this server is one node; ask for the GPUs one node has with --gpus N"
        ))),
        _ => Err(Why::Syntax(format!("{value:?} is not a node count"))),
    }
}

/// `--mem` (the whole job's) and `--mem-per-cpu` (times `-c` × `-n`): carma's `--host-mem`, a
/// limit on the job's cgroup; noted where this queue cannot set it. `0` is Slurm's "all of the
/// node's memory": no limit.
fn host_memory(long: &str, value: &str, context: &Context) -> Result<Meaning, String> {
    let mib = slurm_memory_mib(value)?;
    if mib == 0 {
        return Ok(noted(&[], "0 asks for all of the node's memory: no host memory limit".into()));
    }
    let cpus = context.cpus_per_task.saturating_mul(context.ntasks);
    let (total, mut words, mut notes) = match long {
        "mem-per-cpu" => (
            mib.saturating_mul(u64::from(cpus)),
            vec!["--env".to_string(), format!("SLURM_MEM_PER_CPU={mib}")],
            vec![format!("{mib} MiB per CPU × {cpus} CPU(s)")],
        ),
        _ => (mib, Vec::new(), Vec::new()),
    };
    words.extend(["--host-mem".to_string(), format!("{total}MiB")]);
    if let Some(why) = &context.server.host_limits_unenforced {
        notes.push(format!("host memory {total} MiB: not enforced here ({why})"));
    }
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    Ok(Meaning { words, note })
}

/// `-c N`: carma's `--cpus-per-task`, the whole job's CPUs (`-c` × `-n`, one node), a quota on
/// its cgroup; noted where this queue cannot set it.
fn cpus(per_task: u32, context: &Context) -> Meaning {
    let total = per_task.saturating_mul(context.ntasks);
    let mut notes = Vec::new();
    if context.ntasks > 1 {
        notes.push(format!("{per_task} CPUs per task × {} tasks on one node", context.ntasks));
    }
    if let Some(why) = &context.server.cpu_limit_unenforced {
        notes.push(format!("{total} CPU(s): not enforced here ({why})"));
    }
    let words = vec!["--cpus-per-task".to_string(), total.to_string()];
    Meaning { words, note: (!notes.is_empty()).then(|| notes.join("; ")) }
}

/// A duration in carma's words: `2d 12h`, `90m`, `30s`.
pub fn render_duration(ms: u64) -> String {
    let seconds = ms / 1000;
    let parts =
        [(seconds / 86_400, "d"), (seconds / 3600 % 24, "h"), (seconds / 60 % 60, "m"), (seconds % 60, "s")];
    let words: Vec<String> =
        parts.iter().filter(|(n, _)| *n > 0).map(|(n, unit)| format!("{n}{unit}")).collect();
    if words.is_empty() { "0s".into() } else { words.join(" ") }
}

/// This server's short host name (`%N`, `SLURMD_NODENAME`); `localhost` when it has none.
pub fn node_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
    let name = if ok { String::from_utf8_lossy(&buf[..end]).into_owned() } else { String::new() };
    let short = name.split('.').next().unwrap_or_default();
    if short.is_empty() { "localhost".into() } else { short.to_string() }
}

/// An output template's `{array}` and `{index}` (Slurm's `%A` and `%a`) filled in for one
/// task: an array member's id and index, or, for a task that is no array, its own id (`%j`)
/// and Slurm's "no index" value.
pub fn fill_output(template: &str, array: Option<(&str, u32)>) -> String {
    let (id, index) = match array {
        Some((id, index)) => (id.to_string(), index.to_string()),
        None => ("%j".to_string(), NO_ARRAY_INDEX.to_string()),
    };
    template.replace("{array}", &id).replace("{index}", &index)
}

/// What Slurm writes for `%a` in a job that is no array (its NO_VAL).
pub const NO_ARRAY_INDEX: u32 = 4_294_967_294;

#[cfg(test)]
mod tests;
