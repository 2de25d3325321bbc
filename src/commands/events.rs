//! `carma events`: the journal, in order, for people or as JSON Lines.
//!
//! Records are read in chunks, each under its own short shared lock, so dumping a large
//! journal never keeps the tick waiting for longer than one chunk.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::cli::EventsArgs;
use crate::clock::format_ms;
use crate::error::Error;
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::{Event, Record, session};

/// Schema tag of each `carma events --json` line (schema/event.schema.json).
pub const EVENT_SCHEMA: &str = "carma.event/1";
/// Records read per lock acquisition.
const CHUNK: usize = 20_000;

#[derive(Serialize)]
struct EventJson<'a> {
    schema: &'static str,
    seq: u64,
    time_ms: u64,
    kind: &'static str,
    task: Option<&'a str>,
    data: serde_json::Value,
}

pub fn run(home: &Home, wait: Duration, args: EventsArgs) -> anyhow::Result<()> {
    let filter = match &args.task {
        Some(query) => Some(resolve_task(home, wait, query)?),
        None => None,
    };
    let mut next = args.since.max(1);
    let mut out = std::io::stdout().lock();
    loop {
        let chunk = read_chunk(home, wait, next)?;
        let Some(&(last_seq, _)) = chunk.last() else {
            break;
        };
        for (seq, record) in &chunk {
            if filter.as_ref().is_some_and(|id| record.event.task() != Some(id)) {
                continue;
            }
            write_event(&mut out, *seq, record, args.json)?;
        }
        next = last_seq + 1;
    }
    Ok(())
}

fn resolve_task(home: &Home, wait: Duration, query: &str) -> anyhow::Result<TaskId> {
    let found = session::read(home, wait, |_, state| Ok(state.find(query).map(|t| t.id.clone())))?;
    Ok(found.ok_or_else(|| Error::UnknownTask(query.to_string()))?)
}

fn read_chunk(home: &Home, wait: Duration, from: u64) -> anyhow::Result<Vec<(u64, Record)>> {
    let mut chunk = Vec::new();
    let lock = crate::home::LockGuard::acquire(home, crate::home::LockMode::Shared, wait)?;
    let journal = match crate::journal::store::Journal::open_read_only(&home.journal_path())? {
        crate::journal::store::ReadOpen::Ready(j) => j,
        crate::journal::store::ReadOpen::NeedsRepair => {
            drop(lock);
            // Let the repairing read path fix the file, then read normally.
            session::read(home, wait, |_, _| Ok(()))?;
            return read_chunk(home, wait, from);
        }
    };
    journal.for_each(from, |seq, record| {
        chunk.push((seq, record));
        Ok(chunk.len() < CHUNK)
    })?;
    Ok(chunk)
}

fn write_event(out: &mut impl Write, seq: u64, record: &Record, json: bool) -> anyhow::Result<()> {
    let event = &record.event;
    if json {
        let data = match serde_json::to_value(event)? {
            serde_json::Value::Object(mut outer) => outer.remove(event.kind()).unwrap_or_default(),
            other => other,
        };
        let line = EventJson {
            schema: EVENT_SCHEMA,
            seq,
            time_ms: record.time_ms,
            kind: event.kind(),
            task: event.task().map(TaskId::as_str),
            data,
        };
        serde_json::to_writer(&mut *out, &line)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{seq:>8}  {}  {:<13} {}", format_ms(record.time_ms), event.kind(), summary(event))?;
    }
    Ok(())
}

/// One line of human text per event.
fn summary(event: &Event) -> String {
    match event {
        Event::Submitted { task, submitter_uid, spec } => {
            format!(
                "{task} {} by uid {submitter_uid}: {} GPU(s), {}",
                spec.name,
                spec.gpus,
                spec.command.join(" ")
            )
        }
        Event::Rejected { spool_file, reason, .. } => format!("{spool_file}: {reason}"),
        Event::Cancelled { task, by_uid, reason } => format!("{task} by uid {by_uid}: {reason}"),
        Event::Estimated { task, method, mib, upper_mib, .. } => {
            format!("{task} {method}: {mib} MiB (upper {upper_mib} MiB)")
        }
        Event::Pending { task, reason } => format!("{task}: {reason}"),
        Event::Placed { task, attempt, gpus, reason, .. } => {
            format!("{task} attempt {attempt} on {}: {reason}", gpus.join(","))
        }
        Event::Launched { task, attempt, supervisor, adopted } => {
            format!(
                "{task} attempt {attempt} pid {}{}",
                supervisor.pid,
                if *adopted { " (adopted)" } else { "" }
            )
        }
        Event::Finished { task, attempt, .. } => format!("{task} attempt {attempt} exit 0"),
        Event::Failed { task, attempt, outcome, reason } => {
            format!("{task} attempt {attempt} {outcome}: {reason}")
        }
        Event::OomDetected { task, attempt, evidence, .. } => format!("{task} attempt {attempt}: {evidence}"),
        Event::Lost { task, attempt, reason } => format!("{task} attempt {attempt}: {reason}"),
        Event::Requeued { task, recovery, reason, .. } => {
            format!("{task} to the {} queue: {reason}", if *recovery { "recovery" } else { "main" })
        }
        Event::TickCompleted { ingested, rejected, placed, duration_us, .. } => {
            format!("ingested {ingested}, rejected {rejected}, placed {placed} in {duration_us} µs")
        }
        Event::MetricSample { sample: s } => format!(
            "GPU{} {}/{} MiB used, smact {}, power {}, energy {}, {} process(es)",
            s.index,
            s.memory_used_mib,
            s.memory_total_mib,
            s.sm_active.map_or("-".into(), |v| format!("{v:.2}")),
            s.power_mw.map_or("-".into(), |p| format!("{:.0} W", f64::from(p) / 1000.0)),
            s.energy_mj.map_or("-".into(), |e| format!("{e} mJ")),
            s.processes.len()
        ),
        Event::GpuDiscovered { uuid, index, name, memory_total_mib } => {
            format!("GPU{index} {uuid} {name}, {memory_total_mib} MiB")
        }
        Event::GpuProbeStatus { detail } if detail.is_empty() => "GPUs readable again".into(),
        Event::GpuProbeStatus { detail } => detail.clone(),
        Event::Stopped { task, attempt, outcome } => {
            format!("{task} attempt {attempt} after cancel: {outcome}")
        }
        Event::Usage { task, attempt, peak_mib } => format!("{task} attempt {attempt} peak {peak_mib} MiB"),
        Event::EstimateFailed { task, reason, .. } => format!("{task} no estimate: {reason}"),
    }
}
