//! One tick: the single entry point that `carma tick` (and later `carma simulate`) runs.
//!
//! 1. Sample the GPUs, before taking the lock (GPM needs a short sleep between samples).
//! 2. Take the exclusive lock and load State.
//! 3. Commit the samples and the ingested spool in one transaction, then remove the
//!    ingested spool files. A crash anywhere leaves either the file (re-ingested next tick)
//!    or the event plus the file (recognised by id and removed), never neither.
//! 4. Commit TickCompleted and release the lock.

use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::error::Result;
use crate::gpu::{GpuProbe, GpuSample, SinceMarks};
use crate::home::Home;
use crate::inventory::{INVENTORY_SCHEMA, Inventory, InventoryGpu};
use crate::journal::{Event, Record, State, session};
use crate::spec::Limits;
use crate::spool::{self, Ingested, SpoolEntry};

/// What one tick did, for the CLI and TickCompleted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TickReport {
    pub ingested: u32,
    pub rejected: u32,
    pub placed: u32,
    pub duration_us: u64,
    /// Set when the GPU probe started failing (the message) or recovered (empty); the CLI
    /// prints it, so a machine without a driver says so once rather than every tick.
    pub probe_status_changed: Option<String>,
}

/// Everything a tick needs from outside.
pub struct TickContext<'a> {
    pub home: &'a Home,
    pub clock: &'a dyn Clock,
    pub lock_wait: Duration,
    pub probe: &'a mut dyn GpuProbe,
    /// Why no probe could be built (e.g. no NVIDIA driver); the tick then runs without GPUs.
    pub probe_error: Option<String>,
}

/// Runs one tick.
pub fn run(ctx: &mut TickContext) -> Result<TickReport> {
    let started = Instant::now();
    let inventory = Inventory::load(ctx.home);
    let samples = sample(ctx, inventory.as_ref());
    let home = ctx.home;
    let clock = ctx.clock;
    let report = session::write(home, ctx.lock_wait, |journal, state| {
        let now = clock.now_ms();
        let mut report = TickReport::default();
        let mut records = gpu_records(state, &samples, now, &mut report);
        let entries = spool::list(home)?;
        let limits = Limits { machine_gpus: known_gpu_count(state, &samples) };
        let (ingested, consumed) = ingest(state, &entries, limits, now, &mut report);
        records.extend(ingested);
        report.duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        records.push(Record { time_ms: clock.now_ms(), event: tick_completed(&report) });
        journal.append(&records, state)?;
        spool::remove(home, &consumed)?;
        write_inventory(home, state, &samples, now)?;
        Ok(report)
    })?;
    Ok(report)
}

fn tick_completed(report: &TickReport) -> Event {
    Event::TickCompleted {
        ingested: report.ingested,
        rejected: report.rejected,
        placed: report.placed,
        duration_us: report.duration_us,
    }
}

/// Samples outside the lock. The "since" marks come from the inventory the previous tick
/// wrote, so sampling never needs the journal.
fn sample(
    ctx: &mut TickContext,
    inventory: Option<&Inventory>,
) -> std::result::Result<Vec<GpuSample>, String> {
    if let Some(error) = &ctx.probe_error {
        return Err(error.clone());
    }
    let mut marks = SinceMarks::new();
    for gpu in inventory.map(|i| i.gpus.as_slice()).unwrap_or_default() {
        if let Some(mark) = gpu.util_last_timestamp_us {
            marks.insert(&gpu.uuid, mark);
        }
    }
    ctx.probe.sample(&marks).map_err(|e| e.to_string())
}

/// MetricSample per GPU, GpuDiscovered for new or changed GPUs, GpuProbeStatus on change.
fn gpu_records(
    state: &State,
    samples: &std::result::Result<Vec<GpuSample>, String>,
    now: u64,
    report: &mut TickReport,
) -> Vec<Record> {
    let mut records = Vec::new();
    let mut push = |event| records.push(Record { time_ms: now, event });
    match samples {
        Err(detail) => {
            if state.gpu_probe_error.as_deref() != Some(detail.as_str()) {
                report.probe_status_changed = Some(detail.clone());
                push(Event::GpuProbeStatus { detail: detail.clone() });
            }
        }
        Ok(samples) => {
            if state.gpu_probe_error.is_some() {
                report.probe_status_changed = Some(String::new());
                push(Event::GpuProbeStatus { detail: String::new() });
            }
            for sample in samples {
                // A reading that breaks its own invariants is a probe bug; journaling it
                // would poison every later window, so it is dropped.
                if sample.check().is_err() {
                    continue;
                }
                let known = state.gpus.get(&sample.uuid);
                let changed = known.is_none_or(|g| {
                    g.index != sample.index
                        || g.name != sample.name
                        || g.memory_total_mib != sample.memory_total_mib
                });
                if changed {
                    push(Event::GpuDiscovered {
                        uuid: sample.uuid.clone(),
                        index: sample.index,
                        name: sample.name.clone(),
                        memory_total_mib: sample.memory_total_mib,
                    });
                }
                push(Event::MetricSample { sample: sample.clone() });
            }
        }
    }
    records
}

/// GPUs on the machine for submit-time checks; unknown while the probe fails, so a
/// machine without a driver keeps queueing rather than rejecting every task.
fn known_gpu_count(state: &State, samples: &std::result::Result<Vec<GpuSample>, String>) -> Option<u32> {
    match samples {
        Ok(samples) if !samples.is_empty() => Some(samples.len() as u32),
        Ok(_) if !state.gpus.is_empty() => Some(state.gpus.len() as u32),
        _ => None,
    }
}

fn write_inventory(
    home: &Home,
    state: &State,
    samples: &std::result::Result<Vec<GpuSample>, String>,
    now: u64,
) -> Result<()> {
    let Ok(samples) = samples else { return Ok(()) };
    if samples.is_empty() && state.gpus.is_empty() {
        return Ok(());
    }
    let gpus = samples
        .iter()
        .map(|s| InventoryGpu {
            index: s.index,
            uuid: s.uuid.clone(),
            name: s.name.clone(),
            memory_total_mib: s.memory_total_mib,
            util_last_timestamp_us: s.util_last_timestamp_us,
        })
        .collect();
    Inventory { schema: INVENTORY_SCHEMA.into(), updated_ms: now, gpus }.store(home)
}

/// Turns spool files into Submitted/Rejected records. Returns the records and the files to
/// remove once they are committed.
pub fn ingest(
    state: &State,
    entries: &[SpoolEntry],
    limits: Limits,
    now_ms: u64,
    report: &mut TickReport,
) -> (Vec<Record>, Vec<SpoolEntry>) {
    let mut records = Vec::new();
    let mut consumed = Vec::new();
    for entry in entries {
        // Already journaled by a tick that died before removing the file.
        if entry.id.as_ref().is_some_and(|id| state.knows(id)) {
            consumed.push(entry.clone());
            continue;
        }
        let event = match spool::read_entry(entry, limits) {
            Ingested::NotReady => continue,
            Ingested::Valid { id, submitter_uid, spec } => {
                report.ingested += 1;
                Event::Submitted { task: id, submitter_uid, spec }
            }
            Ingested::Invalid { id, submitter_uid, reason } => {
                report.rejected += 1;
                Event::Rejected { task: id, spool_file: entry.file_name.clone(), submitter_uid, reason }
            }
        };
        records.push(Record { time_ms: now_ms, event });
        consumed.push(entry.clone());
    }
    (records, consumed)
}
