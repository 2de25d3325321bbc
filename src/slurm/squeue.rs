//! Reading `squeue --json` (pure), and Slurm's job states as `squeue`/`sacct` name them.
//!
//! JSON, not a `-o` format: a job name or comment is its owner's text and may hold any
//! separator or a newline, which would let one user's job add a row for another in a
//! delimited listing. Slurm 22.05 prints plain numbers; later versions wrap some of them as
//! `{"set": true, "number": N}`, which is read too.

use serde_json::Value;

use super::scontrol::parse_gres;

/// One job as `squeue --json` lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueuedJob {
    /// `job_id`: Slurm's job number (an array member's own number).
    pub job_id: u32,
    /// The id as squeue shows it: `14`, `13_0`, or `13_[1-4]` for array members not yet split off.
    pub shown: String,
    /// e.g. `PENDING`, `RUNNING`, `COMPLETING`.
    pub state: String,
    /// `state_reason`, e.g. `Priority`, `BeginTime`, `None`.
    pub reason: String,
    /// `user_name`: the submitter's login name.
    pub user: String,
    /// `user_id`: the submitter's uid, when squeue printed one.
    pub uid: Option<u32>,
    /// `name`: the job's name (its owner's text).
    pub name: String,
    /// `nodes`: the nodes it runs on, in Slurm's hostlist notation; empty while pending.
    pub nodes: String,
    /// Shards it asks for, summed over its `tres_per_*` requests; `None` for none.
    pub shards: Option<u32>,
    /// `submit_time`, Unix s; `None` when unset.
    pub submit_s: Option<u64>,
    /// `start_time`, Unix s (for a pending job, Slurm's expected start); `None` when unset.
    pub start_s: Option<u64>,
    /// The job carries a `carma:` comment.
    pub carma_comment: bool,
}

impl QueuedJob {
    /// A job of carma's: it asks for shards, or carries a `carma:` comment.
    pub fn is_carma(&self) -> bool {
        self.shards.is_some() || self.carma_comment
    }
}

/// The jobs in `squeue --json` output; an error names what is wrong with it.
pub fn parse(text: &str) -> Result<Vec<QueuedJob>, String> {
    let root: Value =
        serde_json::from_str(text).map_err(|e| format!("squeue --json printed no JSON: {e}"))?;
    // With the controller down, 22.05 exits 0 and reports the failure in "errors".
    if let Some(first) = root.get("errors").and_then(Value::as_array).and_then(|e| e.first()) {
        let field = |key: &str| first.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        return Err(format!("{}: {} ({})", field("source"), field("error"), field("description")));
    }
    let Some(jobs) = root.get("jobs").and_then(Value::as_array) else {
        return Err("squeue --json printed no \"jobs\" list".into());
    };
    Ok(jobs.iter().filter_map(job).collect())
}

fn job(value: &Value) -> Option<QueuedJob> {
    let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    let job_id = u32::try_from(number(value.get("job_id"))?).ok()?;
    let array_job = number(value.get("array_job_id")).filter(|&n| n > 0);
    // NO_VAL (0xfffffffe) and friends mean "not an array member".
    let array_task = number(value.get("array_task_id")).filter(|&n| n < 0xffff_fff0);
    let range = text("array_task_string");
    let shown = match (array_job, array_task) {
        (Some(array), Some(task)) => format!("{array}_{task}"),
        (Some(array), None) if !range.is_empty() => {
            format!("{array}_[{}]", range.split('%').next().unwrap_or(""))
        }
        _ => job_id.to_string(),
    };
    let gres = [text("tres_per_node"), text("tres_per_job"), text("tres_per_task")].join(",");
    let state = match value.get("job_state") {
        // 23.02 and later: a list of the state and its flags.
        Some(Value::Array(states)) => states.first().and_then(Value::as_str).unwrap_or_default().to_string(),
        _ => text("job_state"),
    };
    Some(QueuedJob {
        job_id,
        shown,
        state,
        reason: text("state_reason"),
        user: text("user_name"),
        uid: number(value.get("user_id")).and_then(|n| u32::try_from(n).ok()),
        name: text("name"),
        nodes: text("nodes"),
        shards: parse_gres(&gres).shards,
        submit_s: number(value.get("submit_time")).filter(|&s| s > 0),
        start_s: number(value.get("start_time")).filter(|&s| s > 0),
        carma_comment: text("comment").starts_with("carma:"),
    })
}

/// A JSON number, or the `number` of a `{"set": true, "number": N}` object.
fn number(value: Option<&Value>) -> Option<u64> {
    match value? {
        Value::Number(n) => n.as_u64(),
        Value::Object(o) if o.get("set").and_then(Value::as_bool) != Some(false) => o.get("number")?.as_u64(),
        _ => None,
    }
}

/// squeue's compact code for a Slurm job state (`PENDING` → `PD`); the state itself when
/// Slurm has no code for it.
pub fn state_code(state: &str) -> String {
    let code = match state {
        "PENDING" => "PD",
        "RUNNING" => "R",
        "SUSPENDED" => "S",
        "COMPLETING" => "CG",
        "COMPLETED" => "CD",
        "CONFIGURING" => "CF",
        "CANCELLED" => "CA",
        "FAILED" => "F",
        "TIMEOUT" => "TO",
        "PREEMPTED" => "PR",
        "BOOT_FAIL" => "BF",
        "DEADLINE" => "DL",
        "NODE_FAIL" => "NF",
        "OUT_OF_MEMORY" => "OOM",
        "REQUEUED" => "RQ",
        "REQUEUE_HOLD" => "RH",
        "REQUEUE_FED" => "RF",
        "RESIZING" => "RS",
        "REVOKED" => "RV",
        "SIGNALING" => "SI",
        "SPECIAL_EXIT" => "SE",
        "STAGE_OUT" => "SO",
        "STOPPED" => "ST",
        other => return other.to_string(),
    };
    code.to_string()
}

/// Whether a state code means the job has ended.
pub fn is_ended(code: &str) -> bool {
    ["CD", "CA", "F", "TO", "PR", "BF", "DL", "NF", "OOM", "RV", "SE"].contains(&code)
}

#[cfg(test)]
mod tests {
    //! Goal: ids in Slurm's array notation, states and shards out of 22.05's JSON, and owner
    //! text (name, comment) that cannot add or change a row.
    use super::*;

    const SQUEUE: &str = r#"{"meta": {}, "errors": [], "jobs": [
      {"job_id": 14, "array_job_id": 13, "array_task_id": 0, "array_task_string": "",
       "job_state": "RUNNING", "state_reason": "None", "user_name": "nobody", "user_id": 65534,
       "name": "sweep\n{\"job_id\": 99}", "nodes": "n1", "tres_per_node": "gres:shard:3",
       "submit_time": 1795424067, "start_time": 1795424068, "comment": "carma:mem=2GiB"},
      {"job_id": 13, "array_job_id": 13, "array_task_id": 4294967294, "array_task_string": "1-4%2",
       "job_state": "PENDING", "state_reason": "JobArrayTaskLimit", "user_name": "nobody",
       "user_id": 65534, "name": "sweep", "nodes": "", "tres_per_node": "gres/shard:3",
       "submit_time": 1795424067, "start_time": 0, "comment": "carma:mem=2GiB"},
      {"job_id": 20, "array_job_id": 0, "array_task_id": null, "job_state": ["PENDING"],
       "state_reason": "BeginTime", "user_name": "root", "user_id": {"set": true, "number": 0},
       "name": "x", "tres_per_node": "", "comment": "carma:mem=1GiB"},
      {"job_id": 21, "job_state": "RUNNING", "name": "plain", "comment": "mine"}
    ]}"#;

    #[test]
    fn jobs_in_array_notation() {
        let jobs = parse(SQUEUE).unwrap();
        let shown: Vec<&str> = jobs.iter().map(|j| j.shown.as_str()).collect();
        assert_eq!(shown, ["13_0", "13_[1-4]", "20", "21"]);
        assert_eq!((jobs[0].shards, jobs[1].shards, jobs[2].shards), (Some(3), Some(3), None));
        assert_eq!(jobs[0].name, "sweep\n{\"job_id\": 99}");
        assert_eq!(
            (jobs[2].state.as_str(), jobs[2].uid, jobs[2].reason.as_str()),
            ("PENDING", Some(0), "BeginTime")
        );
        assert_eq!(jobs.iter().map(QueuedJob::is_carma).collect::<Vec<_>>(), [true, true, true, false]);
        assert_eq!((jobs[0].submit_s, jobs[1].start_s), (Some(1795424067), None));
        assert!(parse("squeue: error").unwrap_err().starts_with("squeue --json printed no JSON"));
        assert_eq!(parse("{}").unwrap_err(), "squeue --json printed no \"jobs\" list");
        let down = r#"{"errors": [{"description": "Failed while looking for jobs", "error_number": -1,
            "error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []}"#;
        assert_eq!(
            parse(down).unwrap_err(),
            "slurm_load_jobs: Unspecified error (Failed while looking for jobs)"
        );
    }

    #[test]
    fn state_codes() {
        assert_eq!(state_code("PENDING"), "PD");
        assert_eq!(state_code("TIMEOUT"), "TO");
        assert_eq!(state_code("NODE_FAIL"), "NF");
        assert_eq!(state_code("SOMETHING_NEW"), "SOMETHING_NEW");
        assert!(is_ended("CA") && is_ended("TO") && !is_ended("PD") && !is_ended("R"));
    }
}
