//! Journal records: the facts carma has learned, one per event, versioned on disk.
//!
//! Each value in the `events` table is `[FORMAT_VERSION][bincode 2 payload of Record]`.
//! bincode is not self-describing, so the version byte is what lets an old or foreign
//! journal fail with a clear error instead of decoding into garbage. Evolve additively:
//! append new variants at the end of [`Event`] and never reorder or retype a field; a
//! change that cannot be additive bumps [`FORMAT_VERSION`] and adds a reader in an
//! `upgrade` module. Decoding never panics.

use serde::{Deserialize, Serialize};

use crate::gpu::GpuSample;
use crate::id::TaskId;
use crate::spec::TaskSpec;

/// Version byte written in front of every record.
pub const FORMAT_VERSION: u8 = 1;
/// Largest encoded record accepted, so one bad record cannot exhaust memory on replay.
pub const RECORD_BYTES_MAX: usize = 1 << 20;

/// One journal entry: when it happened and what.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Wall-clock time of the event, Unix milliseconds (virtual time in simulations).
    pub time_ms: u64,
    pub event: Event,
}

/// A running process as identified across pid reuse and reboots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRef {
    pub pid: u32,
    /// Start time from `/proc/PID/stat` field 22, in clock ticks since boot.
    pub start_time_ticks: u64,
    /// `/proc/sys/kernel/random/boot_id` when the process was seen.
    pub boot_id: String,
}

/// Every fact carma records. Variants are appended at the end only (see module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// A spool file was ingested; `submitter_uid` is the file owner.
    Submitted { task: TaskId, submitter_uid: u32, spec: TaskSpec },
    /// A spool file failed validation at ingest; `task` is absent when even its name was bad.
    Rejected { task: Option<TaskId>, spool_file: String, submitter_uid: u32, reason: String },
    /// The task was cancelled by `by_uid`; a running attempt is being stopped.
    Cancelled { task: TaskId, by_uid: u32, reason: String },
    /// A memory estimate for the task (per GPU).
    Estimated { task: TaskId, method: String, mib: u64, upper_mib: u64, explanation: String },
    /// Why the task is still waiting; recorded only when the reason changes.
    Pending { task: TaskId, reason: String },
    /// Intent to launch `attempt` on `gpus`; committed before the launch happens.
    Placed {
        task: TaskId,
        attempt: u32,
        gpus: Vec<String>,
        exclusive: bool,
        requirement_mib: Option<u64>,
        reason: String,
    },
    /// The attempt's supervisor is running (`adopted` when found after a tick crash).
    Launched { task: TaskId, attempt: u32, supervisor: ProcessRef, adopted: bool },
    /// The attempt ended with exit code 0.
    Finished { task: TaskId, attempt: u32, exit_ms: u64 },
    /// The attempt ended and will not be retried; `outcome` is the exit in words.
    Failed { task: TaskId, attempt: u32, outcome: String, reason: String },
    /// The attempt died of GPU out-of-memory; a Requeued or Failed event follows.
    OomDetected { task: TaskId, attempt: u32, evidence: String, peak_mib: Option<u64> },
    /// The attempt vanished (dead supervisor without exit record, reboot); a Requeued or
    /// Failed event follows.
    Lost { task: TaskId, attempt: u32, reason: String },
    /// The task goes back to a queue; `recovery` is true for the priority recovery queue.
    Requeued {
        task: TaskId,
        recovery: bool,
        requirement_mib: Option<u64>,
        recovery_mode: String,
        reason: String,
    },
    /// End-of-tick bookkeeping, for `carma report` and operations. `rr_cursor` is the
    /// round-robin position the decision left, journaled so replay needs no other input.
    TickCompleted { ingested: u32, rejected: u32, placed: u32, duration_us: u64, rr_cursor: u32 },
    /// One GPU's reading at this tick (memory, activity, power, energy counter, processes).
    MetricSample { sample: GpuSample },
    /// A GPU seen for the first time, or with a changed identity (index, name, memory).
    GpuDiscovered { uuid: String, index: u32, name: String, memory_total_mib: u64 },
    /// The GPU probe failed or recovered; recorded on change only, so a machine without a
    /// driver says so once. `detail` is empty when GPUs are readable again.
    GpuProbeStatus { detail: String },
    /// The attempt of a cancelled task has ended (`outcome` in words).
    Stopped { task: TaskId, attempt: u32, outcome: String },
    /// A new peak of the attempt's GPU memory (on its busiest GPU, MiB), recorded when it
    /// grows by at least 256 MiB; recovery raises the requirement to at least this.
    Usage { task: TaskId, attempt: u32, peak_mib: u64 },
    /// The task's model summary could not be read or estimated. Journaled once per version
    /// of the summary file (`summary_stamp`, from its size and modification time), so a
    /// bad file costs one record, and a fixed file is estimated again.
    EstimateFailed { task: TaskId, reason: String, summary_stamp: u64 },
}

impl Event {
    /// The task the event is about, if any.
    pub fn task(&self) -> Option<&TaskId> {
        match self {
            Event::Submitted { task, .. }
            | Event::Cancelled { task, .. }
            | Event::Estimated { task, .. }
            | Event::Pending { task, .. }
            | Event::Placed { task, .. }
            | Event::Launched { task, .. }
            | Event::Finished { task, .. }
            | Event::Failed { task, .. }
            | Event::OomDetected { task, .. }
            | Event::Lost { task, .. }
            | Event::Requeued { task, .. }
            | Event::Stopped { task, .. }
            | Event::Usage { task, .. }
            | Event::EstimateFailed { task, .. } => Some(task),
            Event::Rejected { task, .. } => task.as_ref(),
            Event::TickCompleted { .. }
            | Event::MetricSample { .. }
            | Event::GpuDiscovered { .. }
            | Event::GpuProbeStatus { .. } => None,
        }
    }

    /// The variant's name, as shown by `carma events`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Submitted { .. } => "Submitted",
            Event::Rejected { .. } => "Rejected",
            Event::Cancelled { .. } => "Cancelled",
            Event::Estimated { .. } => "Estimated",
            Event::Pending { .. } => "Pending",
            Event::Placed { .. } => "Placed",
            Event::Launched { .. } => "Launched",
            Event::Finished { .. } => "Finished",
            Event::Failed { .. } => "Failed",
            Event::OomDetected { .. } => "OomDetected",
            Event::Lost { .. } => "Lost",
            Event::Requeued { .. } => "Requeued",
            Event::TickCompleted { .. } => "TickCompleted",
            Event::MetricSample { .. } => "MetricSample",
            Event::GpuDiscovered { .. } => "GpuDiscovered",
            Event::GpuProbeStatus { .. } => "GpuProbeStatus",
            Event::Stopped { .. } => "Stopped",
            Event::Usage { .. } => "Usage",
            Event::EstimateFailed { .. } => "EstimateFailed",
        }
    }
}

/// Why a stored record could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record is empty")]
    Empty,
    #[error("unknown format version {found} (this carma reads version {FORMAT_VERSION})")]
    UnknownVersion { found: u8 },
    #[error("record of {0} bytes exceeds the {RECORD_BYTES_MAX}-byte limit")]
    TooLarge(usize),
    #[error("payload does not decode: {0}")]
    Payload(String),
    #[error("{0} trailing bytes after the payload")]
    Trailing(usize),
}

fn bincode_config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes a record with its version byte.
pub fn encode(record: &Record) -> Vec<u8> {
    let mut bytes = vec![FORMAT_VERSION];
    // Encoding plain owned data into a Vec cannot fail.
    let payload = bincode::serde::encode_to_vec(record, bincode_config())
        .unwrap_or_else(|e| unreachable!("encoding a journal record: {e}"));
    bytes.extend_from_slice(&payload);
    assert!(bytes.len() <= RECORD_BYTES_MAX, "record of {} bytes is over the limit", bytes.len());
    bytes
}

/// Decodes a stored record, checking the version byte and that every byte was used.
pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
    let (&version, payload) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if version != FORMAT_VERSION {
        return Err(DecodeError::UnknownVersion { found: version });
    }
    if bytes.len() > RECORD_BYTES_MAX {
        return Err(DecodeError::TooLarge(bytes.len()));
    }
    let config = bincode_config().with_limit::<RECORD_BYTES_MAX>();
    let (record, used): (Record, usize) = bincode::serde::decode_from_slice(payload, config)
        .map_err(|e| DecodeError::Payload(e.to_string()))?;
    if used != payload.len() {
        return Err(DecodeError::Trailing(payload.len() - used));
    }
    Ok(record)
}
