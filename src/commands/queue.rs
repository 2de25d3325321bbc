//! `carma queue`: the task table, with the reason each waiting task waits.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;
use tabled::settings::Style;
use tabled::{Table, Tabled};

use super::render;
use crate::cli::QueueArgs;
use crate::clock::{Clock, SystemClock};
use crate::home::Home;
use crate::journal::{State, Task, session};

/// Schema tag of `carma queue --json` (schema/queue.schema.json).
pub const QUEUE_SCHEMA: &str = "carma.queue/1";

#[derive(Serialize)]
struct QueueJson<'a> {
    schema: &'static str,
    generated_ms: u64,
    tasks: Vec<TaskRow<'a>>,
    rejected: Vec<RejectedRow<'a>>,
}

#[derive(Serialize)]
struct TaskRow<'a> {
    id: &'a str,
    name: &'a str,
    state: &'static str,
    submitter_uid: u32,
    gpus: u32,
    memory_mib: Option<u64>,
    attempts: usize,
    in_recovery: bool,
    submitted_ms: u64,
    started_ms: Option<u64>,
    ended_ms: Option<u64>,
    gpu_uuids: Vec<&'a str>,
    reason: Option<&'a str>,
}

#[derive(Serialize)]
struct RejectedRow<'a> {
    id: Option<&'a str>,
    spool_file: &'a str,
    submitter_uid: u32,
    time_ms: u64,
    reason: &'a str,
}

#[derive(Tabled)]
struct Line {
    #[tabled(rename = "ID")]
    id: String,
    #[tabled(rename = "NAME")]
    name: String,
    #[tabled(rename = "STATE")]
    state: String,
    #[tabled(rename = "GPUS")]
    gpus: String,
    #[tabled(rename = "MEM")]
    mem: String,
    #[tabled(rename = "TRIES")]
    tries: String,
    #[tabled(rename = "AGE")]
    age: String,
    #[tabled(rename = "REASON / PLACEMENT")]
    reason: String,
}

pub fn run(home: &Home, wait: Duration, args: QueueArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    session::read(home, wait, |_, state| Ok(render_queue(&state, args.all, args.json, &mut out)))?
}

/// The human table, for the demo.
pub fn print(home: &Home, wait: Duration, all: bool, out: &mut impl Write) -> anyhow::Result<()> {
    session::read(home, wait, |_, state| Ok(render_queue(&state, all, false, out)))?
}

fn render_queue(state: &State, all: bool, json: bool, out: &mut impl Write) -> anyhow::Result<()> {
    let now = SystemClock.now_ms();
    let mut tasks: Vec<&Task> = state.tasks.values().filter(|t| all || !t.status.is_terminal()).collect();
    tasks.sort_by_key(|t| t.submit_seq);
    if json {
        let rejected = if all { state.rejections.iter().map(rejected_row).collect() } else { Vec::new() };
        let doc = QueueJson {
            schema: QUEUE_SCHEMA,
            generated_ms: now,
            tasks: tasks.iter().map(|t| row(t)).collect(),
            rejected,
        };
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        return Ok(());
    }
    let mut lines: Vec<Line> = tasks.iter().map(|t| line(t, now)).collect();
    if all {
        lines.extend(state.rejections.iter().map(|r| Line {
            id: r.task.as_ref().map_or_else(|| "-".into(), |t| t.to_string()),
            name: r.spool_file.clone(),
            state: "Rejected".into(),
            gpus: "-".into(),
            mem: "-".into(),
            tries: "-".into(),
            age: render::duration_ms(now.saturating_sub(r.time_ms)),
            reason: r.reason.clone(),
        }));
    }
    if lines.is_empty() {
        writeln!(
            out,
            "no tasks{}",
            if all { "" } else { " waiting or running (use --all for finished ones)" }
        )?;
        return Ok(());
    }
    writeln!(out, "{}", Table::new(lines).with(Style::blank()))?;
    Ok(())
}

fn row(task: &Task) -> TaskRow<'_> {
    let active = task.active_attempt();
    TaskRow {
        id: task.id.as_str(),
        name: &task.spec.name,
        state: task.status.as_str(),
        submitter_uid: task.submitter_uid,
        gpus: task.spec.gpus,
        memory_mib: task.spec.memory_mib,
        attempts: task.attempts.len(),
        in_recovery: task.in_recovery,
        submitted_ms: task.submitted_ms,
        started_ms: task.attempts.first().and_then(|a| a.launched_ms),
        ended_ms: task.ended_ms,
        gpu_uuids: active.map(|a| a.gpus.iter().map(String::as_str).collect()).unwrap_or_default(),
        reason: reason(task),
    }
}

fn rejected_row(r: &crate::journal::state::Rejection) -> RejectedRow<'_> {
    RejectedRow {
        id: r.task.as_ref().map(|t| t.as_str()),
        spool_file: &r.spool_file,
        submitter_uid: r.submitter_uid,
        time_ms: r.time_ms,
        reason: &r.reason,
    }
}

/// The one-line explanation shown for a task: why it waits, where it runs, or how it ended.
pub fn reason(task: &Task) -> Option<&str> {
    if let Some(attempt) = task.active_attempt() {
        return Some(&attempt.placement_reason);
    }
    task.pending_reason.as_deref().or(task.end_reason.as_deref())
}

fn line(task: &Task, now: u64) -> Line {
    let mut state = task.status.as_str().to_string();
    if task.in_recovery {
        state.push_str(" (recovery)");
    }
    Line {
        id: task.id.to_string(),
        name: task.spec.name.clone(),
        state,
        gpus: task.spec.gpus.to_string(),
        mem: task.spec.memory_mib.map_or_else(|| "-".into(), render::gib),
        tries: task.attempts.len().to_string(),
        age: render::duration_ms(now.saturating_sub(task.submitted_ms)),
        reason: reason(task).unwrap_or("").to_string(),
    }
}
