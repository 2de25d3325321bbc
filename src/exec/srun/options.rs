//! srun's command line as srun reads it: its options up to the program (getopt_long with
//! `+`: the first word that is not an option, or `--`, ends them), long names shortened to a
//! prefix of only one option, `-n4` and `-n 4`, `--ntasks=4` and `--ntasks 4`, and no-value
//! short options clustered (`-lu`). Every option a batch script passes is in [`OPTIONS`], in
//! one of three groups, as `#SBATCH`'s are in `spec::sbatch`'s table.

use std::ffi::OsString;

/// Whether an option takes a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arg {
    /// `--label`.
    None,
    /// `--ntasks=4`, `--ntasks 4`, `-n4`, `-n 4`.
    Required,
    /// `--kill-on-bad-exit[=1]`, `-K[1]`: a value only when attached.
    Optional,
}

/// What carma's srun does with an option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Read into the step ([`Request`]).
    Honoured,
    /// Means nothing on one server: accepted with this note.
    Noted(&'static str),
    /// Cannot be had here: refused with this reason.
    Refused(&'static str),
}

/// One srun option.
#[derive(Clone, Copy, Debug)]
pub(super) struct SrunOption {
    pub long: &'static str,
    pub short: Option<char>,
    pub arg: Arg,
    pub kind: Kind,
}

const fn o(long: &'static str, short: Option<char>, arg: Arg, kind: Kind) -> SrunOption {
    SrunOption { long, short, arg, kind }
}

use Arg::{None as N, Optional as Opt, Required as R};
use Kind::{Honoured as H, Noted, Refused};

const CLUSTER: Kind = Noted("only matters on a cluster; ignored");
const LAYOUT: Kind = Noted("CPU and memory layout is not set per task on this server; ignored");
const LIMITS: Kind = Noted("the job's own limits hold for its steps; ignored");

/// The srun options carma's srun knows (Slurm 24's man page, those a batch script uses).
pub(super) const OPTIONS: &[SrunOption] = &[
    o("account", Some('A'), R, CLUSTER),
    o("accel-bind", None, R, LAYOUT),
    o("begin", Some('b'), R, Noted("a step starts at once inside its job; ignored")),
    o("bcast", None, Opt, Refused("files are not broadcast: there is one node; drop --bcast")),
    o("chdir", Some('D'), R, H),
    o("comment", None, R, Noted("comments are not kept; ignored")),
    o("constraint", Some('C'), R, CLUSTER),
    o("container", None, R, Refused("carma runs no OCI containers; start the container in the command")),
    o("contiguous", None, N, CLUSTER),
    o("cores-per-socket", None, R, LAYOUT),
    o("cpu-bind", None, R, LAYOUT),
    o("cpu-freq", None, R, Noted("CPU frequency is not set by carma; ignored")),
    o("cpus-per-gpu", None, R, LAYOUT),
    o("cpus-per-task", Some('c'), R, H),
    o("deadline", None, R, LIMITS),
    o("dependency", Some('d'), R, Noted("a step starts when srun runs; ignored")),
    o("distribution", Some('m'), R, LAYOUT),
    o("epilog", None, R, Refused("step epilogs are not run here; run the command after srun in the script")),
    o(
        "error",
        Some('e'),
        R,
        Refused("per-task files are not written here; redirect in the command (2> err_$SLURM_PROCID.log)"),
    ),
    o("exact", None, N, LAYOUT),
    o("exclude", Some('x'), R, CLUSTER),
    o("exclusive", None, Opt, LAYOUT),
    o("export", None, R, H),
    o("gid", None, R, Refused("the tasks run as you, in your groups; drop --gid")),
    o("gpu-bind", None, R, H),
    o("gpu-freq", None, R, Noted("GPU clocks are not set by carma; ignored")),
    o("gpus", Some('G'), R, H),
    o("gpus-per-node", None, R, H),
    o("gpus-per-task", None, R, H),
    o("gres", None, R, H),
    o("gres-flags", None, R, CLUSTER),
    o("het-group", None, R, Refused("heterogeneous jobs are a cluster's; drop --het-group")),
    o("hint", None, R, LAYOUT),
    o("immediate", Some('I'), Opt, Noted("a step starts at once inside its job; ignored")),
    o("input", Some('i'), R, Refused("tasks read no input here; read the file in the command")),
    o("job-name", Some('J'), R, Noted("steps have no name of their own here; ignored")),
    o("jobid", None, R, Refused("a step runs in the job that calls srun; drop --jobid")),
    o("kill-on-bad-exit", Some('K'), Opt, H),
    o("label", Some('l'), N, H),
    o("licenses", Some('L'), R, CLUSTER),
    o("mem", None, R, LIMITS),
    o("mem-bind", None, R, LAYOUT),
    o("mem-per-cpu", None, R, LIMITS),
    o("mem-per-gpu", None, R, LIMITS),
    o("mincpus", None, R, LAYOUT),
    o("mpi", None, R, H),
    o(
        "multi-prog",
        None,
        N,
        Refused("one program runs as every task; branch on $SLURM_PROCID in a script instead"),
    ),
    o("network", None, R, CLUSTER),
    o("nodefile", Some('F'), R, CLUSTER),
    o("nodelist", Some('w'), R, CLUSTER),
    o("nodes", Some('N'), R, H),
    o("no-kill", Some('k'), Opt, CLUSTER),
    o("ntasks", Some('n'), R, H),
    o("ntasks-per-core", None, R, LAYOUT),
    o("ntasks-per-gpu", None, R, LAYOUT),
    o("ntasks-per-node", None, R, H),
    o("ntasks-per-socket", None, R, LAYOUT),
    o("open-mode", None, R, Noted("the tasks write to the job's own output; ignored")),
    o(
        "output",
        Some('o'),
        R,
        Refused("per-task files are not written here; redirect in the command (> out_$SLURM_PROCID.log)"),
    ),
    o("overcommit", Some('O'), N, LAYOUT),
    o("overlap", None, N, LAYOUT),
    o("partition", Some('p'), R, CLUSTER),
    o("prolog", None, R, Refused("step prologs are not run here; run the command before srun in the script")),
    o("propagate", None, Opt, LIMITS),
    o(
        "pty",
        None,
        N,
        Refused("no terminal inside a batch job; for an interactive command use carma run, outside a job"),
    ),
    o("qos", Some('q'), R, CLUSTER),
    o("quiet", Some('Q'), N, H),
    o("relative", Some('r'), R, CLUSTER),
    o("reservation", None, R, CLUSTER),
    o("signal", None, R, Noted("the job's --signal reaches every task already; ignored")),
    o("sockets-per-node", None, R, LAYOUT),
    o("switches", None, R, CLUSTER),
    o("task-epilog", None, R, Refused("task epilogs are not run here; run it in the command")),
    o("task-prolog", None, R, Refused("task prologs are not run here; run it in the command")),
    o("threads-per-core", None, R, LAYOUT),
    o("time", Some('t'), R, LIMITS),
    o("tmp", None, R, LAYOUT),
    o("tres-bind", None, R, LAYOUT),
    o("tres-per-task", None, R, LAYOUT),
    o("uid", None, R, Refused("the tasks run as you; drop --uid")),
    o("unbuffered", Some('u'), N, H),
    o("verbose", Some('v'), N, H),
    o("wait", Some('W'), R, Noted("srun waits for every task, as with --wait=0; ignored")),
    o("wckey", None, R, CLUSTER),
    o("x11", None, Opt, Refused("no X11 forwarding inside a batch job; drop --x11")),
];

/// One option as read, with its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Given {
    pub option: &'static str,
    pub value: Option<String>,
}

/// srun's words split into its options (in order) and the command.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Split {
    pub given: Vec<Given>,
    pub command: Vec<OsString>,
}

/// The option named `long`: its full name or, as getopt_long reads it, a prefix of only one.
pub(super) fn by_long(long: &str) -> Option<&'static SrunOption> {
    crate::spec::sbatch::getopt_long(OPTIONS, long, |o| o.long)
}

fn by_short(short: char) -> Option<&'static SrunOption> {
    OPTIONS.iter().find(|o| o.short == Some(short))
}

/// Splits `words` (what follows `srun`) as srun's getopt does; the first problem is the error.
pub(super) fn split(words: &[OsString]) -> Result<Split, String> {
    let mut given = Vec::new();
    let mut index = 0;
    while index < words.len() {
        let Some(word) = words[index].to_str() else { break };
        if word == "--" {
            index += 1;
            break;
        }
        if !word.starts_with('-') || word == "-" {
            break;
        }
        index += 1;
        let next = words.get(index).and_then(|w| w.to_str());
        let used_next = if let Some(long) = word.strip_prefix("--") {
            read_long(long, next, &mut given)?
        } else {
            read_shorts(&word[1..], next, &mut given)?
        };
        index += usize::from(used_next);
    }
    let command = words[index..].to_vec();
    if command.is_empty() {
        return Err("no program to run; give one, e.g. srun python train.py".into());
    }
    Ok(Split { given, command })
}

/// `--name[=value]`; whether the next word was its value.
fn read_long(long: &str, next: Option<&str>, given: &mut Vec<Given>) -> Result<bool, String> {
    let (name, inline) = match long.split_once('=') {
        Some((name, value)) => (name, Some(value.to_string())),
        None => (long, None),
    };
    let option = by_long(name).ok_or_else(|| match ambiguous(name) {
        Some(names) => format!("--{name} is ambiguous ({names}); write more of it"),
        None => format!("--{name} is not an srun option"),
    })?;
    let (value, used_next) = match (option.arg, inline) {
        (Arg::None, Some(_)) => return Err(format!("--{} takes no value", option.long)),
        (Arg::None | Arg::Optional, None) => (None, false),
        (_, Some(value)) => (Some(value), false),
        (Arg::Required, None) => match next {
            Some(value) => (Some(value.to_string()), true),
            None => return Err(format!("--{} needs a value", option.long)),
        },
    };
    given.push(Given { option: option.long, value });
    Ok(used_next)
}

/// `-n4`, `-n 4`, `-lu`, `-K1`; whether the next word was a value.
fn read_shorts(shorts: &str, next: Option<&str>, given: &mut Vec<Given>) -> Result<bool, String> {
    for (at, short) in shorts.char_indices() {
        let option = by_short(short).ok_or_else(|| format!("-{short} is not an srun option"))?;
        let rest = &shorts[at + short.len_utf8()..];
        match option.arg {
            Arg::None => given.push(Given { option: option.long, value: None }),
            Arg::Optional => {
                let value = (!rest.is_empty()).then(|| rest.to_string());
                given.push(Given { option: option.long, value });
                return Ok(false);
            }
            Arg::Required if !rest.is_empty() => {
                given.push(Given { option: option.long, value: Some(rest.to_string()) });
                return Ok(false);
            }
            Arg::Required => {
                let value = next.ok_or_else(|| format!("-{short} (--{}) needs a value", option.long))?;
                given.push(Given { option: option.long, value: Some(value.to_string()) });
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The options `name` is a prefix of, when more than one.
fn ambiguous(name: &str) -> Option<String> {
    let names: Vec<String> = OPTIONS
        .iter()
        .filter(|o| !name.is_empty() && o.long.starts_with(name))
        .map(|o| format!("--{}", o.long))
        .collect();
    (names.len() > 1).then(|| names.join(", "))
}

/// The group of the option named `long` (a full name from [`Given`]).
pub(super) fn kind(long: &str) -> Kind {
    OPTIONS.iter().find(|o| o.long == long).map_or(Kind::Honoured, |o| o.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<OsString> {
        line.split(' ').map(OsString::from).collect()
    }

    fn given(option: &'static str, value: Option<&str>) -> Given {
        Given { option, value: value.map(str::to_string) }
    }

    /// Goal: options end at the program or `--`, in every form getopt_long reads, and the
    /// program's own flags stay its own.
    #[test]
    fn options_end_at_the_program_in_every_getopt_form() {
        let split =
            split(&words("-n4 --cpus-per-task 2 -lu --gpus-per-t=1 -K python train.py -n 9")).unwrap();
        assert_eq!(
            split.given,
            [
                given("ntasks", Some("4")),
                given("cpus-per-task", Some("2")),
                given("label", None),
                given("unbuffered", None),
                given("gpus-per-task", Some("1")),
                given("kill-on-bad-exit", None),
            ]
        );
        assert_eq!(split.command, words("python train.py -n 9"));
        let escaped = super::split(&words("-n 2 -- -weird")).unwrap();
        assert_eq!(escaped.command, words("-weird"));
        assert_eq!(super::split(&words("-K1 x")).unwrap().given, [given("kill-on-bad-exit", Some("1"))]);
    }

    /// Goal: each bad command line is one line naming the word and what to do.
    #[test]
    fn bad_words_are_named() {
        let error = |line: &str| super::split(&words(line)).unwrap_err();
        assert_eq!(error("--frob x"), "--frob is not an srun option");
        assert_eq!(
            error("--ntasks-per x"),
            "--ntasks-per is ambiguous (--ntasks-per-core, --ntasks-per-gpu, --ntasks-per-node, --ntasks-per-socket); write more of it"
        );
        assert_eq!(error("-n"), "-n (--ntasks) needs a value");
        assert_eq!(error("--label=1 x"), "--label takes no value");
        assert_eq!(error("-n 2"), "no program to run; give one, e.g. srun python train.py");
        assert_eq!(error("-Z x"), "-Z is not an srun option");
    }

    /// Goal: the table's names and letters are unique, so a prefix or letter names one option.
    #[test]
    fn names_and_letters_are_unique() {
        for (i, a) in OPTIONS.iter().enumerate() {
            for b in &OPTIONS[i + 1..] {
                assert_ne!(a.long, b.long);
                assert!(a.short.is_none() || a.short != b.short, "{} and {}", a.long, b.long);
            }
        }
    }
}
