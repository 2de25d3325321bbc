//! `carma events`: the journal, in order, for people or as JSON Lines.
//!
//! Records are read in chunks, each under its own short shared lock, so dumping a large
//! journal never keeps the tick waiting for longer than one chunk.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::access::users;
use crate::cli::EventsArgs;
use crate::clock::format_ms;
use crate::error::Error;
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::{Event, Record};

/// Schema tag of each `carma events --json` line (schema/event.schema.json).
pub(super) const EVENT_SCHEMA: &str = "carma.event/1";
/// Records read per lock acquisition.

#[derive(Serialize)]
struct EventJson<'a> {
    schema: &'static str,
    seq: u64,
    time_ms: u64,
    kind: &'static str,
    task: Option<&'a str>,
    data: serde_json::Value,
}

/// Kinds hidden without `--all` (or a `--kind` naming them) in the human listing: at idle,
/// every line would be one of them.
const NOISY: [&str; 2] = ["MetricSample", "TickCompleted"];
/// Every event kind, for `--kind`.
const KINDS: [&str; 40] = [
    "Submitted",
    "Rejected",
    "Cancelled",
    "Estimated",
    "Pending",
    "Placed",
    "Launched",
    "Finished",
    "Failed",
    "OomDetected",
    "Lost",
    "Requeued",
    "TickCompleted",
    "MetricSample",
    "GpuDiscovered",
    "GpuProbeStatus",
    "Stopped",
    "Usage",
    "EstimateFailed",
    "IngestDeferred",
    "Reaped",
    "GpuHealthChanged",
    "SlurmPlaced",
    "SmObserved",
    "Held",
    "Released",
    "Updated",
    "Reserved",
    "Notified",
    "NotifyFailed",
    "RequeueRequested",
    "MemoryExceeded",
    "Preempted",
    "Checkpointed",
    "ReservationCreated",
    "ReservationDeleted",
    "Suspended",
    "Resumed",
    "PreemptionWithdrawn",
    "SuspensionEnded",
];
/// How the gate's reason for cancelling a task whose dependency can never be met begins.
const NEVER_SATISFIED: &str = "DependencyNeverSatisfied: ";
/// Events `--follow` shows from before it starts (without `--since`), as `tail -f`'s lines.
const FOLLOW_BACKLOG: usize = 10;
/// How often `--follow` looks for new records.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// What `events` keeps.
struct Filter {
    tasks: Option<Vec<TaskId>>,
    kinds: Option<Vec<&'static str>>,
    users: Option<Vec<u32>>,
    since_ms: Option<u64>,
    hide_noisy: bool,
    /// Each task's submitter, for `--user`: from the view, then from Submitted records.
    owners: std::collections::HashMap<TaskId, u32>,
}

impl Filter {
    fn keeps(&mut self, record: &Record) -> bool {
        let event = &record.event;
        if let Event::Submitted { task, submitter_uid, .. } = event {
            self.owners.insert(task.clone(), *submitter_uid);
        }
        let kind = event.kind();
        let task = event.task();
        self.kinds.as_ref().is_none_or(|k| k.contains(&kind))
            && !(self.hide_noisy && NOISY.contains(&kind))
            && self.since_ms.is_none_or(|since| record.time_ms >= since)
            && self.tasks.as_ref().is_none_or(|ids| task.is_some_and(|t| ids.contains(t)))
            && self.users.as_ref().is_none_or(|uids| {
                task.and_then(|t| self.owners.get(t)).is_some_and(|owner| uids.contains(owner))
            })
    }
}

pub(super) fn run(home: &Home, wait: Duration, args: EventsArgs) -> anyhow::Result<()> {
    let _ = wait;
    let (since_seq, since_ms) = parse_since(args.since.as_deref())?;
    let kinds = args.kind.as_deref().map(parse_kinds).transpose()?;
    let hide_noisy = !args.all && !args.json && kinds.is_none();
    let tasks = args.task.as_deref().map(|query| resolve_task(home, query)).transpose()?;
    let users = args.user.as_deref().map(parse_users).transpose()?;
    let owners = if users.is_some() {
        crate::view::load(home)?.tasks.values().map(|t| (t.id.clone(), t.submitter_uid)).collect()
    } else {
        Default::default()
    };
    let mut filter = Filter { tasks, kinds, users, since_ms, hide_noisy, owners };
    let mut out = std::io::stdout().lock();
    let mut next = since_seq.max(1);
    if args.follow && args.since.is_none() {
        // As `tail -f`: the last few events, then what comes.
        let mut last = std::collections::VecDeque::with_capacity(FOLLOW_BACKLOG);
        crate::view::for_each(home, next, |seq, record| {
            next = seq + 1;
            if filter.keeps(&record) {
                if last.len() == FOLLOW_BACKLOG {
                    last.pop_front();
                }
                last.push_back((seq, record));
            }
            Ok(true)
        })?;
        for (seq, record) in &last {
            write_event(&mut out, *seq, record, args.json)?;
        }
    }
    loop {
        let mut written: anyhow::Result<()> = Ok(());
        crate::view::for_each(home, next, |seq, record| {
            next = seq + 1;
            if !filter.keeps(&record) {
                return Ok(true);
            }
            written = write_event(&mut out, seq, &record, args.json);
            Ok(written.is_ok())
        })?;
        written?;
        if !args.follow {
            return Ok(());
        }
        out.flush()?;
        std::thread::sleep(FOLLOW_POLL);
    }
}

/// `--since`: a sequence number, a duration ago (10m) or a time (2026-11-25T20:00:00Z).
fn parse_since(text: Option<&str>) -> Result<(u64, Option<u64>), Error> {
    use crate::clock::{Clock, SystemClock};
    let Some(text) = text.map(str::trim) else { return Ok((1, None)) };
    if let Ok(seq) = text.parse::<u64>() {
        return Ok((seq, None));
    }
    if let Ok(ago) = humantime::parse_duration(text) {
        return Ok((1, Some(SystemClock.now_ms().saturating_sub(ago.as_millis() as u64))));
    }
    if let Ok(time) = humantime::parse_rfc3339_weak(text) {
        return Ok((1, Some(time.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64))));
    }
    // `--begin`'s local forms: 11:40:20 (the latest such time), 2026-11-25T20:00.
    crate::spec::timing::parse_local_past(text, SystemClock.now_ms()).map(|ms| (1, Some(ms))).ok_or_else(|| {
        Error::BadInput(format!(
            "--since {text:?} is neither a sequence number, a duration nor a time; use e.g. 120, 10m, 11:40:20 or 2026-11-25T20:00:00Z"
        ))
    })
}

fn parse_kinds(text: &str) -> Result<Vec<&'static str>, Error> {
    text.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| {
            KINDS.iter().find(|known| known.eq_ignore_ascii_case(k)).copied().ok_or_else(|| {
                Error::BadInput(format!("--kind {k}: no such event kind; the kinds are {}", KINDS.join(", ")))
            })
        })
        .collect()
}

fn parse_users(text: &str) -> Result<Vec<u32>, Error> {
    text.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|name| {
            users::uid_of(name).or_else(|| name.parse().ok()).ok_or_else(|| {
                Error::BadInput(format!("--user {name}: no such user; give a login name or a uid"))
            })
        })
        .collect()
}

/// The tasks `--task` names: one, or every member of an array.
fn resolve_task(home: &Home, query: &str) -> anyhow::Result<Vec<TaskId>> {
    use crate::view::lookup;
    let state = crate::view::load(home)?;
    let spooled = lookup::spooled(home, &state);
    Ok(match lookup::resolve(&state, &spooled, query)? {
        lookup::Target::Task(found) => vec![found.id().clone()],
        lookup::Target::Array { members, .. } => members.iter().map(|m| m.id().clone()).collect(),
    })
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
        let summary = crate::text::escape(&summary(event)).into_owned();
        writeln!(out, "{seq:>8}  {}  {:<13} {summary}", format_ms(record.time_ms), event.kind())?;
    }
    Ok(())
}

/// A GPU reading in one line: memory (used by processes, reserved by the driver), SM activity
/// with its source when coarse, power, energy, processes, MIG instances, health.
fn metric_summary(s: &crate::gpu::GpuSample) -> String {
    let mut text = format!("GPU{} {}/{} MiB used", s.index, s.memory_used_mib, s.memory_total_mib);
    if let Some(reserved) = s.memory_reserved_mib {
        text.push_str(&format!(", {reserved} MiB reserved"));
    }
    let smact = s.sm_active.map_or("-".into(), |v| format!("{v:.2}"));
    let source = if s.sm_active_source.is_coarse() {
        format!(" ({})", s.sm_active_source.label())
    } else {
        String::new()
    };
    text.push_str(&format!(
        ", smact {smact}{source}, power {}, energy {}, {} process(es)",
        s.power_mw.map_or("-".into(), |p| format!("{:.0} W", f64::from(p) / 1000.0)),
        s.energy_mj.map_or("-".into(), |e| format!("{e} mJ")),
        s.processes.len()
    ));
    if s.mig.is_on() {
        text.push_str(&format!(", MIG on: {} instance(s)", s.mig.instances.len()));
    }
    if let Some(reason) = s.health.reason() {
        text.push_str(&format!(", {reason}"));
    }
    text
}

/// One line of human text per event.
// Long on purpose: one arm per event kind, and the match is exhaustive, so a new kind does
// not compile until it has its line here.
fn summary(event: &Event) -> String {
    match event {
        Event::Submitted { task, submitter_uid, spec } => {
            format!(
                "{task} {} by {}: {} GPU(s), {}",
                spec.name,
                users::display(*submitter_uid),
                spec.gpus,
                spec.command.join(" ")
            )
        }
        Event::Rejected { spool_file, reason, .. } => format!("{spool_file}: {reason}"),
        Event::Cancelled { task, by_uid, reason } => match reason.strip_prefix(NEVER_SATISFIED) {
            // The tick's own cancel, not root's: say why in the dependency's words.
            Some(dependency) => format!("{task} by carma: dependency {dependency}"),
            None => format!("{task} by {}: {reason}", users::display(*by_uid)),
        },
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
        Event::MetricSample { sample: s } => metric_summary(s),
        Event::GpuDiscovered { uuid, index, name, memory_total_mib } => {
            format!("GPU{index} {uuid} {name}, {memory_total_mib} MiB")
        }
        Event::GpuHealthChanged { uuid, index, health } => match health.reason() {
            Some(reason) => format!("GPU{index} {uuid} unavailable: {reason}"),
            None => format!("GPU{index} {uuid} healthy again"),
        },
        Event::GpuProbeStatus { detail } if detail.is_empty() => "GPUs readable again".into(),
        Event::GpuProbeStatus { detail } => detail.clone(),
        Event::Stopped { task, attempt, outcome } if outcome.contains("requeue") => {
            format!("{task} attempt {attempt}: {outcome}")
        }
        // Stopped by the tick: a cancel, a requeue or a preemption; the outcome says which.
        Event::Stopped { task, attempt, outcome } if outcome.contains(": preempted by ") => {
            format!("{task} attempt {attempt} stopped: {outcome}")
        }
        Event::Stopped { task, attempt, outcome } => {
            format!("{task} attempt {attempt} after cancel: {outcome}")
        }
        Event::Usage { task, attempt, peak_mib } => format!("{task} attempt {attempt} peak {peak_mib} MiB"),
        Event::EstimateFailed { task, reason, .. } => format!("{task} no estimate: {reason}"),
        Event::IngestDeferred { entries } => format!("{entries} spool entries left for the next ticks"),
        Event::Reaped { task, attempt, detail, .. } => format!("{task} attempt {attempt}: {detail}"),
        Event::SlurmPlaced { task, attempt, job_id, node, shards, .. } => {
            let share = shards.map_or("whole GPUs".into(), |s| format!("shard:{s}"));
            format!(
                "{task} attempt {attempt}: Slurm job {job_id} on {} with {share}",
                crate::text::escape(node)
            )
        }
        Event::SmObserved { task, attempt, sm_util } => {
            format!("{task} attempt {attempt} SM utilisation {sm_util:.2} (below saturation)")
        }
        Event::Held { task, by_uid } => format!("{task} held by {}", users::display(*by_uid)),
        Event::Released { task, by_uid } => format!("{task} released by {}", users::display(*by_uid)),
        Event::Updated { task, by_uid, priority, nice, memory_mib, time_limit_ms, gpus } => {
            let mut changes = Vec::new();
            changes.extend(priority.map(|p| format!("priority {p}")));
            changes.extend(nice.map(|n| format!("nice {n}")));
            changes.extend(memory_mib.map(|m| format!("memory {:.1} GiB", m as f64 / 1024.0)));
            changes.extend(time_limit_ms.map(|t| format!("time limit {}", crate::spec::render_ms(t))));
            changes.extend(gpus.map(|g| format!("{g} GPU(s)")));
            format!("{task} by {}: {}", users::display(*by_uid), changes.join(", "))
        }
        Event::Reserved { task, gpus } => format!("{} kept for blocked head {task}", gpus.join(",")),
        Event::Notified { task, channel, notice, detail } => format!("{task} {notice} {channel}: {detail}"),
        Event::NotifyFailed { task, channel, notice, reason } => {
            format!("{task} {notice} {channel} failed: {reason}")
        }
        Event::RequeueRequested { task, by_uid } => {
            format!("{task} requeue asked by {}: stopping its attempt", users::display(*by_uid))
        }
        Event::MemoryExceeded { task, attempt, reason, .. } => {
            format!("{task} attempt {attempt} over its GPU memory: {reason}; stopping it")
        }
        Event::Preempted { task, attempt, by, reason, lost_ms } => format!(
            "{task} attempt {attempt} preempted by {by}: {reason}; {} of work lost",
            crate::spec::render_ms(*lost_ms)
        ),
        Event::Checkpointed { task, attempt } => format!("{task} attempt {attempt} checkpointed"),
        Event::Suspended { task, attempt, by } => {
            format!("{task} attempt {attempt} suspended for {by}: GPU memory released")
        }
        Event::Resumed { task, attempt } => format!("{task} attempt {attempt} resumed on its GPUs"),
        Event::PreemptionWithdrawn { task, attempt, reason } => {
            format!("{task} attempt {attempt} preemption withdrawn: {reason}; it runs on")
        }
        Event::SuspensionEnded { task, attempt, reason } => {
            format!("{task} attempt {attempt} suspension ended: {reason}; stopped and queued again")
        }
        Event::ReservationCreated { name, start_ms, end_ms, users: uids, gpu_count, gpus, by_uid } => {
            let who: Vec<String> = uids.iter().map(|&uid| users::display(uid)).collect();
            let what = if gpus.is_empty() { format!("{gpu_count} GPU(s)") } else { gpus.join(",") };
            format!(
                "\"{name}\" by {}: {what} from {} to {} for {}",
                users::display(*by_uid),
                crate::clock::format_ms(*start_ms),
                crate::clock::format_ms(*end_ms),
                who.join(",")
            )
        }
        Event::ReservationDeleted { name, by_uid } => {
            format!("\"{name}\" deleted by {}", users::display(*by_uid))
        }
    }
}

#[cfg(test)]
mod kinds_tests {
    /// Goal: `--kind` knows every kind the journal can hold, so a new record kind cannot be
    /// left unfilterable. Method: the kinds event.schema.json documents (the schema test holds
    /// those to the code's `Event::kind`) against `KINDS`.
    #[test]
    fn kind_filter_knows_every_documented_kind() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../schema/event.schema.json")).expect("schema");
        let documented: Vec<&str> = schema["properties"]["kind"]["enum"]
            .as_array()
            .expect("kind enum")
            .iter()
            .filter_map(|k| k.as_str())
            .collect();
        assert_eq!(documented.len(), super::KINDS.len(), "{documented:?}");
        for kind in documented {
            assert!(super::KINDS.contains(&kind), "--kind does not know {kind}");
        }
    }
}
