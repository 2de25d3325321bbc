//! `carma replay`: a trace submitted in real time against a real state directory.
//!
//! Where `carma simulate` runs the tick on simulated GPUs and a virtual clock, a replay only
//! plays the trace's arrivals: each row becomes a real task, submitted through the real spool
//! (`spool::submit`) `offset_s / speedup` seconds of wall time after the replay started, and
//! the real tick (the systemd timer, or `carma tick` by hand) places and runs it on real GPUs.
//! The task's command comes from a template, an argv in which `{workload}`, `{model}`,
//! `{batch_size}`, `{minutes}` (the profile's exclusive minutes divided by the speedup) and
//! `{mem_mib}` (the profile's actual peak memory) are substituted inside each argument; no
//! shell is involved. `{{` and `}}` stand for literal braces.
//!
//! Every row is turned into a validated spec before the first submission, so a bad template,
//! an unknown workload or a task the machine can never run fails before anything is queued.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::sim::{Profile, TraceRow};
use crate::spec::{Limits, SpecFile, TaskSpec};

/// The placeholders a command template may use.
pub const PLACEHOLDERS: [&str; 5] = ["workload", "model", "batch_size", "minutes", "mem_mib"];

/// Which profile figure becomes the task's declared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryFigure {
    /// The measured peak (`mem_actual_mib`): the paper's oracle.
    Actual,
    /// The Horus formula's estimate (`est_horus_mib`).
    Horus,
    /// The FakeTensor trace's estimate (`est_faketensor_mib`).
    FakeTensor,
    /// GPUMemNet's estimate (`est_gpumemnet_mib`).
    GpuMemNet,
    /// No declared memory: the tick places the task with its no-figure margin.
    None,
}

impl std::str::FromStr for MemoryFigure {
    type Err = String;
    fn from_str(text: &str) -> Result<MemoryFigure, String> {
        Ok(match text {
            "actual" => MemoryFigure::Actual,
            "horus" => MemoryFigure::Horus,
            "faketensor" => MemoryFigure::FakeTensor,
            "gpumemnet" => MemoryFigure::GpuMemNet,
            "none" => MemoryFigure::None,
            _ => {
                return Err(format!(
                    "unknown memory figure {text:?}; use actual, horus, faketensor, gpumemnet or none"
                ));
            }
        })
    }
}

impl MemoryFigure {
    /// The figure of `profile`, MiB per GPU (at least 1), or none.
    pub fn of(self, profile: &Profile) -> Option<u64> {
        let mib = match self {
            MemoryFigure::Actual => profile.mem_actual_mib,
            MemoryFigure::Horus => profile.est_horus_mib,
            MemoryFigure::FakeTensor => profile.est_faketensor_mib,
            MemoryFigure::GpuMemNet => profile.est_gpumemnet_mib,
            MemoryFigure::None => return None,
        };
        Some(mib.max(1))
    }
}

/// How to turn a trace into tasks.
#[derive(Debug, Clone)]
pub struct ReplayPlan {
    /// The trace's offsets and the `{minutes}` placeholder are divided by this (`--speedup`).
    pub speedup: f64,
    /// Which profile figure each task declares (`--memory`).
    pub memory: MemoryFigure,
    /// The command, one argv, with [`PLACEHOLDERS`] filled in per task.
    pub template: Vec<String>,
    /// Retries per task (`--max-retries`); `None`: the spec's default.
    pub max_retries: Option<u32>,
}

/// One submission of the replay.
#[derive(Debug, Clone)]
pub struct Submission {
    /// Wall time after the start of the replay.
    pub at: Duration,
    /// The trace row's workload.
    pub workload: String,
    /// The task as it is submitted.
    pub spec: TaskSpec,
}

/// Checks `--speedup` (finite, positive).
pub fn check_speedup(speedup: f64) -> Result<(), String> {
    if speedup.is_finite() && speedup > 0.0 {
        Ok(())
    } else {
        Err(format!("--speedup {speedup} must be a positive number, e.g. 1 or 60"))
    }
}

/// Checks the template's placeholders without substituting (an empty template is refused).
pub fn check_template(template: &[String]) -> Result<(), String> {
    if template.is_empty() {
        return Err(
            "no command template; give one after `--`, e.g. -- python train.py --model {model}".into()
        );
    }
    let values: BTreeMap<&str, String> = PLACEHOLDERS.iter().map(|p| (*p, String::new())).collect();
    template.iter().try_for_each(|arg| substitute(arg, &values).map(drop))
}

/// Replaces `{name}` in `arg` with `values[name]`; `{{`/`}}` are literal braces.
pub fn substitute(arg: &str, values: &BTreeMap<&str, String>) -> Result<String, String> {
    let known = || PLACEHOLDERS.iter().map(|p| format!("{{{p}}}")).collect::<Vec<_>>().join(", ");
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
            continue;
        }
        if tail.starts_with('}') {
            return Err(format!(
                "command template argument {arg:?} has an unmatched '}}'; write }}}} for a literal brace"
            ));
        }
        let Some(end) = tail.find('}') else {
            return Err(format!(
                "command template argument {arg:?} has an unclosed '{{'; write {{{{ for a literal brace"
            ));
        };
        let name = &tail[1..end];
        let value = values.get(name).ok_or_else(|| {
            format!("unknown placeholder {{{name}}} in command template argument {arg:?}; use {}", known())
        })?;
        out.push_str(value);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Minutes as a short decimal (at most 4 places, no trailing zeros).
fn minutes_text(minutes: f64) -> String {
    let text = format!("{minutes:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text.is_empty() { "0".into() } else { text.to_string() }
}

/// Every submission of the replay, validated as `carma submit` validates a spec; `workdir` is
/// the tasks' working directory and `limits` the machine's (its GPU count when known).
pub fn plan(
    trace_origin: &str,
    trace: &[TraceRow],
    profiles: &BTreeMap<String, Profile>,
    plan: &ReplayPlan,
    workdir: &Path,
    limits: Limits,
) -> Result<Vec<Submission>, String> {
    check_speedup(plan.speedup)?;
    check_template(&plan.template)?;
    trace
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let profile = profiles
                .get(&row.workload)
                .ok_or_else(|| format!("{trace_origin}: workload {:?} has no profile", row.workload))?;
            let minutes = profile.exclusive_ms as f64 / 60_000.0 / plan.speedup;
            let values = BTreeMap::from([
                ("workload", profile.workload.clone()),
                ("model", profile.model.clone()),
                ("batch_size", profile.batch_size.to_string()),
                ("minutes", minutes_text(minutes)),
                ("mem_mib", profile.mem_actual_mib.to_string()),
            ]);
            let command =
                plan.template.iter().map(|arg| substitute(arg, &values)).collect::<Result<Vec<_>, _>>()?;
            let file = SpecFile {
                name: Some(profile.workload.clone()),
                command: Some(command),
                gpus: Some(i64::from(profile.gpus)),
                memory: plan.memory.of(profile).map(|mib| format!("{mib}MiB")),
                batch_size: (profile.batch_size > 0).then_some(i64::from(profile.batch_size)),
                max_retries: plan.max_retries.map(i64::from),
                ..SpecFile::default()
            };
            let origin = format!("{trace_origin}: row {} ({})", i + 1, row.workload);
            let spec = file.validate(&origin, workdir, limits)?;
            let at = Duration::from_secs_f64(row.offset_ms as f64 / 1000.0 / plan.speedup);
            Ok(Submission { at, workload: row.workload.clone(), spec })
        })
        .collect()
}

/// Plays `submissions` in real time: waits until each one's time (measured from `started`),
/// then calls `submit`, which returns what to report about it.
pub fn play<T, E>(
    submissions: &[Submission],
    started: Instant,
    mut submit: impl FnMut(&Submission, Duration) -> Result<T, E>,
) -> Result<Vec<T>, E> {
    let mut done = Vec::with_capacity(submissions.len());
    for submission in submissions {
        if let Some(wait) = submission.at.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        done.push(submit(submission, started.elapsed())?);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> BTreeMap<&'static str, String> {
        BTreeMap::from([("workload", "w".to_string()), ("minutes", "1.5".to_string())])
    }

    /// Goal: placeholders are replaced anywhere in an argument, braces can be escaped, and
    /// every malformed template is refused with a message that names the argument.
    #[test]
    fn substitution() {
        assert_eq!(substitute("--name={workload}-{minutes}m", &values()).unwrap(), "--name=w-1.5m");
        assert_eq!(substitute("{{x}}", &values()).unwrap(), "{x}");
        assert_eq!(
            substitute("{nope}", &values()).unwrap_err(),
            "unknown placeholder {nope} in command template argument \"{nope}\"; use {workload}, {model}, {batch_size}, {minutes}, {mem_mib}"
        );
        assert!(substitute("{workload", &values()).unwrap_err().contains("unclosed"));
        assert!(substitute("a}b", &values()).unwrap_err().contains("unmatched"));
        assert_eq!(minutes_text(14.8684), "14.8684");
        assert_eq!(minutes_text(2.0), "2");
        assert_eq!(minutes_text(0.148684), "0.1487");
    }
}
