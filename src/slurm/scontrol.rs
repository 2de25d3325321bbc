//! Reading `scontrol show job -d JOBID` (run with `SLURM_TIME_FORMAT=%s`, so times are Unix
//! seconds), and Slurm's GRES strings.
//!
//! The output mixes Slurm's own fields with text the job's owner chose (job name, comment,
//! working directory, output paths), and those may contain spaces, `KEY=value` lookalikes and
//! even newlines, so an owner could add a line that looks like one of Slurm's. A root hook must
//! not be fooled by that. Each field is therefore collected from *every* place it appears, and
//! used only when all of them agree: an injected copy can make a field unknown, never change
//! it, and only for the owner's own job. Facts that Slurm puts in the hook's environment
//! (job id, user, restart count, GPUs, exit code, comment) are taken from there instead.

/// What carma reads from `scontrol show job -d`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobView {
    /// The job name (first line), cut at the end of that line.
    pub name: Option<String>,
    /// `SubmitTime=`, Unix s (reset by every requeue).
    pub submit_s: Option<u64>,
    /// `StartTime=`, Unix s.
    pub start_s: Option<u64>,
    /// `EndTime=`, Unix s (for a running job, when its time limit ends it).
    pub end_s: Option<u64>,
    /// e.g. `RUNNING`, `COMPLETING`, `PENDING`.
    pub state: Option<String>,
    /// `Restarts=`: how often Slurm has restarted the job.
    pub restarts: Option<u32>,
    /// Whether Slurm may requeue the job (`Requeue=1`).
    pub requeue: Option<bool>,
    /// The job's GRES request, e.g. `shard:12` (`JOB_GRES=`; kept after the job ends).
    pub job_gres: Option<String>,
    /// `StdOut=`: the path of the job's standard output (its owner's text).
    pub std_out: Option<String>,
    /// `StdErr=`: the path of the job's standard error (its owner's text).
    pub std_err: Option<String>,
    /// `ExitCode=EXIT:SIGNAL` of the batch script (`0:15` for a cancelled job, where the
    /// Epilog's `SLURM_JOB_EXIT_CODE2` says `0:0`).
    pub exit_code: Option<(i32, i32)>,
    /// `DerivedExitCode=`: the highest exit code of the job's steps.
    pub derived_exit_code: Option<(i32, i32)>,
    /// `Reason=`, e.g. `None`, `JobHeldAdmin`, `launch_failed_requeued_held`.
    pub reason: Option<String>,
    /// `BatchHost=`: the node that runs (or ran) the batch script.
    pub batch_host: Option<String>,
    /// The job's comment (its owner's text).
    pub comment: Option<String>,
    /// The owner's uid, from `UserId=name(uid)`.
    pub uid: Option<u32>,
    /// GPU indices of the job's GRES on its node (`GRES=shard:12(IDX:0)`).
    pub gres_indices: Vec<u32>,
    /// An array member's place in Slurm's notation, `13_0` (`ArrayJobId=13 ArrayTaskId=0`).
    pub array: Option<String>,
}

/// Parses the multi-line output of `scontrol show job -d`.
pub fn parse_job(text: &str) -> JobView {
    let first_line = text.lines().next().unwrap_or_default();
    let name = first_line.split_once(" JobName=").map(|(_, name)| name.to_string());
    let seconds = |key: &str| token(text, key).and_then(|v| v.parse::<u64>().ok());
    JobView {
        name,
        submit_s: seconds("SubmitTime"),
        start_s: seconds("StartTime"),
        end_s: seconds("EndTime"),
        state: token(text, "JobState"),
        restarts: token(text, "Restarts").and_then(|v| v.parse().ok()),
        requeue: token(text, "Requeue").and_then(|v| match v.as_str() {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        }),
        job_gres: token(text, "JOB_GRES").filter(|v| v != "(null)"),
        std_out: line_value(text, "StdOut"),
        std_err: line_value(text, "StdErr"),
        exit_code: token(text, "ExitCode").and_then(|v| parse_exit_pair(&v)),
        derived_exit_code: token(text, "DerivedExitCode").and_then(|v| parse_exit_pair(&v)),
        reason: token(text, "Reason"),
        batch_host: token(text, "BatchHost").filter(|v| v != "(null)"),
        comment: line_value(text, "Comment").filter(|v| v != "(null)"),
        uid: token(text, "UserId")
            .and_then(|v| v.split_once('(').and_then(|(_, rest)| rest.strip_suffix(')')?.parse().ok())),
        gres_indices: token(text, "GRES").map(|g| parse_indices(&g)).unwrap_or_default(),
        array: array_id(token(text, "ArrayJobId"), token(text, "ArrayTaskId")),
    }
}

/// `13_0` from `ArrayJobId=13 ArrayTaskId=0`; `None` unless both are numbers.
fn array_id(job: Option<String>, task: Option<String>) -> Option<String> {
    let job: u32 = job?.parse().ok()?;
    let task: u32 = task?.parse().ok()?;
    Some(format!("{job}_{task}"))
}

/// The record of job `job_id` in `scontrol show job` output. Asked for an array's own id,
/// scontrol prints every member of the array, whose fields disagree, so each would read as
/// unknown; the member whose `JobId=` is `job_id` is the one wanted. When no record, or more
/// than one (a job name can hold a line that looks like one), starts so, the whole text.
pub fn record_of(text: &str, job_id: u32) -> &str {
    let mut starts: Vec<usize> = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with("JobId=") {
            starts.push(offset);
        }
        offset += line.len();
    }
    let wanted = format!("JobId={job_id}");
    let records: Vec<&str> = starts
        .iter()
        .enumerate()
        .map(|(i, &start)| &text[start..starts.get(i + 1).copied().unwrap_or(text.len())])
        .filter(|record| record.split_whitespace().next() == Some(wanted.as_str()))
        .collect();
    match records.as_slice() {
        [one] => one,
        _ => text,
    }
}

/// The GPU indices in a GRES allocation such as `shard:12(IDX:0)` or `gpu:2(IDX:0-1,3)`.
fn parse_indices(gres: &str) -> Vec<u32> {
    let Some((_, rest)) = gres.split_once("(IDX:") else { return Vec::new() };
    let list = rest.split(')').next().unwrap_or_default();
    let mut out = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend((a..=b).take(64));
                }
            }
            None => out.extend(part.parse::<u32>().ok()),
        }
    }
    out
}

/// The value of `KEY=` where it starts a word, when every such occurrence agrees.
fn token(text: &str, key: &str) -> Option<String> {
    let needle = format!("{key}=");
    let mut found: Option<&str> = None;
    for line in text.lines() {
        let mut rest = line;
        while let Some(at) = rest.find(&needle) {
            let starts_word = at == 0 || rest[..at].ends_with(char::is_whitespace);
            let after = &rest[at + needle.len()..];
            let value = after.split(char::is_whitespace).next().unwrap_or_default();
            if starts_word {
                match found {
                    Some(seen) if seen != value => return None,
                    _ => found = Some(value),
                }
            }
            rest = after;
        }
    }
    found.map(str::to_string)
}

/// The rest of the line after `KEY=` on lines that start with it (after indentation), when
/// every such line agrees: for values that may hold spaces, such as paths.
fn line_value(text: &str, key: &str) -> Option<String> {
    let needle = format!("{key}=");
    let mut found: Option<&str> = None;
    for line in text.lines() {
        let Some(value) = line.trim_start().strip_prefix(&needle) else { continue };
        let value = value.trim_end();
        match found {
            Some(seen) if seen != value => return None,
            _ => found = Some(value),
        }
    }
    found.map(str::to_string)
}

/// Counts in a GRES string such as `gpu:1(IDX:0),shard:a100:12(IDX:0-1)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GresCount {
    /// Summed `gpu` counts; `None` when the string names none.
    pub gpus: Option<u32>,
    /// Summed `shard` counts; `None` when the string names none.
    pub shards: Option<u32>,
}

/// Parses a GRES string: comma-separated `NAME[:TYPE]:COUNT[(...)]` items, with commas inside
/// parentheses (index lists) ignored. A `gres:` or `gres/` prefix is accepted.
pub fn parse_gres(text: &str) -> GresCount {
    let mut count = GresCount::default();
    for item in top_level_items(text) {
        let item = item.trim();
        let item = item.strip_prefix("gres:").or_else(|| item.strip_prefix("gres/")).unwrap_or(item);
        let head = item.split('(').next().unwrap_or_default();
        let mut parts = head.split(':');
        let name = parts.next().unwrap_or_default();
        let Some(number) = parts.next_back().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let slot = match name {
            "gpu" => &mut count.gpus,
            "shard" => &mut count.shards,
            _ => continue,
        };
        *slot = Some(slot.unwrap_or(0).saturating_add(number));
    }
    count
}

fn top_level_items(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
}

/// Parses `CUDA_VISIBLE_DEVICES` as Slurm sets it for a job (`0,2`): GPU indices on the node.
pub fn parse_gpu_indices(text: &str) -> Vec<u32> {
    text.split(',').filter_map(|i| i.trim().parse().ok()).collect()
}

/// Parses Slurm's exit code pair `EXIT:SIGNAL` (`SLURM_JOB_EXIT_CODE2`, e.g. `1:0`).
pub fn parse_exit_pair(text: &str) -> Option<(i32, i32)> {
    let (code, signal) = text.trim().split_once(':')?;
    Some((code.parse().ok()?, signal.parse().ok()?))
}

pub use crate::exec::proctable::{
    SLURM_ENVIRON_BYTES_MAX as ENVIRON_BYTES_MAX, slurm_job_in_environ as job_in_environ,
};

#[cfg(test)]
mod tests {
    //! Goal: the fields come out of real 22.05 output, and text a job's owner controls cannot
    //! change them. Method: the output of a running shard job, then the same with a job name
    //! and a comment that inject lines.
    use super::*;

    const RUNNING: &str = "JobId=7 JobName=wrap
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=(null) QOS=(null)
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   DerivedExitCode=0:0
   RunTime=00:00:01 TimeLimit=365-00:00:00 TimeMin=N/A
   SubmitTime=1795424067 EligibleTime=1795424067
   AccrueTime=1795424067
   StartTime=1795424068 EndTime=1826960067 Deadline=N/A
   Partition=debug AllocNode:Sid=localhost:11066
   NodeList=n1
   BatchHost=n1
   JOB_GRES=shard:12
     Nodes=n1 CPU_IDs=0 Mem=0 GRES=shard:12(IDX:0)
   Command=(null)
   WorkDir=/tmp/my work
   Comment=carma:mem=12GiB 
   StdErr=/tmp/out dir/out.7
   StdIn=/dev/null
   StdOut=/tmp/out dir/out.7
   TresPerNode=gres:shard:12
";

    #[test]
    fn reads_a_running_shard_job() {
        let view = parse_job(RUNNING);
        assert_eq!(view.name.as_deref(), Some("wrap"));
        assert_eq!(
            (view.submit_s, view.start_s, view.end_s),
            (Some(1795424067), Some(1795424068), Some(1826960067))
        );
        assert_eq!(view.state.as_deref(), Some("RUNNING"));
        assert_eq!((view.restarts, view.requeue), (Some(0), Some(true)));
        assert_eq!(view.job_gres.as_deref(), Some("shard:12"));
        assert_eq!(view.std_out.as_deref(), Some("/tmp/out dir/out.7"));
        assert_eq!(view.std_err.as_deref(), Some("/tmp/out dir/out.7"));
        assert_eq!((view.exit_code, view.derived_exit_code), (Some((0, 0)), Some((0, 0))));
        assert_eq!((view.reason.as_deref(), view.batch_host.as_deref()), (Some("None"), Some("n1")));
        assert_eq!((view.uid, view.gres_indices.as_slice()), (Some(0), [0].as_slice()));
        assert_eq!(view.comment.as_deref(), Some("carma:mem=12GiB"));
        assert_eq!(view.array, None);
        let member =
            parse_job(&RUNNING.replace("JobId=7 JobName", "JobId=7 ArrayJobId=5 ArrayTaskId=2 JobName"));
        assert_eq!((member.array.as_deref(), member.name.as_deref()), (Some("5_2"), Some("wrap")));
        assert_eq!(parse_indices("gpu:3(IDX:0-1,3)"), [0, 1, 3]);
        let cancelled = parse_job(&RUNNING.replace("Reboot=0 ExitCode=0:0", "Reboot=0 ExitCode=0:15"));
        assert_eq!((cancelled.exit_code, cancelled.derived_exit_code), (Some((0, 15)), Some((0, 0))));
    }

    #[test]
    fn injected_lines_make_a_field_unknown_never_different() {
        let spoofed = RUNNING
            .replace("JobName=wrap", "JobName=x\n   JOB_GRES=shard:40\n   SubmitTime=5 EligibleTime=5")
            .replace("Comment=carma:mem=12GiB ", "Comment=c JobState=COMPLETED\n   StdOut=/etc/shadow");
        let view = parse_job(&spoofed);
        assert_eq!(view.name.as_deref(), Some("x"));
        assert_eq!((view.job_gres, view.submit_s, view.state, view.std_out), (None, None, None, None));
        // Untouched fields are still read.
        assert_eq!(view.start_s, Some(1795424068));
        // A copy that agrees changes nothing.
        let agreeing = RUNNING.replace("JobName=wrap", "JobName=y\n   JOB_GRES=shard:12");
        assert_eq!(parse_job(&agreeing).job_gres.as_deref(), Some("shard:12"));
    }

    #[test]
    fn the_record_of_one_array_member() {
        let member = |id: u32, task: u32, start: u64| {
            RUNNING
                .replace("JobId=7 JobName", &format!("JobId={id} ArrayJobId=4 ArrayTaskId={task} JobName"))
                .replace("StartTime=1795424068", &format!("StartTime={start}"))
        };
        let text = format!("{}\n{}\n", member(5, 0, 100), member(4, 2, 200));
        assert_eq!(parse_job(&text).array, None, "the members disagree");
        let view = parse_job(record_of(&text, 4));
        assert_eq!((view.array.as_deref(), view.start_s), (Some("4_2"), Some(200)));
        assert_eq!(parse_job(record_of(&text, 5)).array.as_deref(), Some("4_0"));
        // A name that forges a second record of the same id: the whole text, fields unknown.
        let forged = text.replace("JobName=wrap", "JobName=x\nJobId=4 ArrayJobId=4 ArrayTaskId=9");
        assert_eq!(record_of(&forged, 4), forged);
        assert_eq!(record_of(RUNNING, 8), RUNNING);
    }

    #[test]
    fn gres_strings() {
        assert_eq!(parse_gres("shard:12"), GresCount { gpus: None, shards: Some(12) });
        assert_eq!(parse_gres("gres:shard:12"), GresCount { gpus: None, shards: Some(12) });
        assert_eq!(
            parse_gres("gpu:1(IDX:0),shard:a100:12(IDX:0,2)"),
            GresCount { gpus: Some(1), shards: Some(12) }
        );
        assert_eq!(parse_gres("gpu:4,shard:160"), GresCount { gpus: Some(4), shards: Some(160) });
        assert_eq!(parse_gres("(null)"), GresCount::default());
        assert_eq!(parse_gpu_indices("0,2"), [0, 2]);
        assert_eq!(parse_exit_pair("1:0"), Some((1, 0)));
        assert_eq!(parse_exit_pair("0:15"), Some((0, 15)));
        assert_eq!(parse_exit_pair("x"), None);
    }

    #[test]
    fn slurm_jobs_in_environments() {
        let environ = b"PATH=/bin\0SLURM_JOB_ID=42\0SLURM_CLUSTER_NAME=lab\0X=1";
        assert_eq!(job_in_environ(environ), Some(("lab".into(), 42)));
        assert_eq!(job_in_environ(b"SLURM_JOB_ID=7"), Some((String::new(), 7)));
        assert_eq!(job_in_environ(b"SLURM_JOB_IDX=7\0HOME=/"), None);
        assert_eq!(job_in_environ(b"SLURM_JOB_ID=x"), None);
    }
}
