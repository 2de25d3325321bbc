//! Journal records: the facts carma has learned, one per event, and their bytes on disk.
//!
//! [`Event`] and [`Record`] are domain types; `journal::wire` holds the frozen shapes bincode
//! writes and converts between the two. Each value in the `events` table is one *frame*:
//!
//! ```text
//! version 2: [2]["crma"][seq u64 LE][payload length u32 LE][bincode WireRecord][crc32 u32 LE]
//! version 1: [1][bincode WireRecord]                    (carma 0.1; read, never written)
//! ```
//!
//! The CRC-32 covers everything before it, the seq included, so a flipped bit anywhere in the
//! record, or a record that turns up under another key, is detected and named instead of being
//! folded silently. The magic and the length make a frame findable in raw bytes, which is how
//! `carma journal salvage` recovers records from a file redb can no longer open, and how
//! readers parse the public event log (`view`). Decoding never panics.

use serde::{Deserialize, Serialize};

use crate::gpu::{GpuHealth, GpuSample};
use crate::id::TaskId;
use crate::spec::TaskSpec;

/// Version byte written in front of every record.
pub const FORMAT_VERSION: u8 = 2;
/// The version carma 0.1 wrote: no framing, no checksum. Still read.
pub const LEGACY_FORMAT_VERSION: u8 = 1;
/// Bytes 1..5 of a version-2 frame.
pub const FRAME_MAGIC: [u8; 4] = *b"crma";
/// Version, magic, seq and payload length.
pub const FRAME_HEADER_BYTES: usize = 1 + 4 + 8 + 4;
/// The CRC-32 at the end of a frame.
pub const FRAME_TRAILER_BYTES: usize = 4;
/// Largest encoded record accepted, so one bad record cannot exhaust memory on replay.
pub const RECORD_BYTES_MAX: usize = 1 << 20;

/// One journal entry: when it happened and what.
#[derive(Clone, Debug, PartialEq, Serialize)]
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

/// Every fact carma records. `carma events --json` shows each variant's fields as `data`, so a
/// change here is documented in schema/event.schema.json; the bytes on disk are
/// `journal::wire`'s business.
// `Submitted` carries the whole spec and outweighs the other variants; records are made and
// folded one at a time (the fold keeps `State`, not events), so boxing it would only add a
// dereference at every use.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize)]
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
    /// The tick left this many spool entries for later ticks (its per-tick bounds), so a
    /// flood is visible instead of silently slowing ingest.
    IngestDeferred { entries: u64 },
    /// Processes of an attempt whose supervisor is gone (or done) that the tick found alive
    /// and sent SIGKILL (`processes` of them), recorded before the attempt's verdict.
    /// `remaining` are pids that survived even that: the attempt stays active (its verdict
    /// and any retry wait, the task's pending reason names them) and the tick tries again
    /// every tick, recording again only when the set changes.
    Reaped { task: TaskId, attempt: u32, processes: u32, remaining: Vec<u32>, detail: String },
    /// A GPU's health changed: it was lost, reported an XID error, became unreadable, or reads
    /// healthy again (`Healthy`). Recorded on change only (every MetricSample carries the
    /// health too); while unhealthy the GPU and its MIG instances take no work.
    GpuHealthChanged { uuid: String, index: u32, health: GpuHealth },
    /// Slurm started the attempt as job `job_id` of `cluster` on node `node`, with `shards`
    /// shards of `shard_mib` MiB each (`None` for a job given whole GPUs); the Placed event
    /// committed with it names the GPUs. Journaled by the node's Prolog (`carma slurm
    /// prolog`). From this event on the task belongs to Slurm: the tick never places,
    /// launches, reconciles or cancels it.
    SlurmPlaced {
        task: TaskId,
        attempt: u32,
        cluster: String,
        job_id: u32,
        node: String,
        shards: Option<u32>,
        shard_mib: u64,
    },
    /// A per-process SM-utilisation sample of the running attempt (its processes' sum, 0..1, on
    /// its busiest GPU), taken while that GPU's processes together used less than
    /// [`SM_SATURATED`](crate::tick::SM_SATURATED) of it, so that it measures the job's
    /// standalone SM activity. At most one per attempt per
    /// [`SM_SAMPLE_EVERY_MS`](crate::tick::SM_SAMPLE_EVERY_MS); State learns each workload's SM
    /// activity from them.
    SmObserved { task: TaskId, attempt: u32, sm_util: f32 },
    /// The task was held by `by_uid` (`carma hold`): it waits, with reason `Held`, until
    /// released. A task submitted with `--hold` starts held without this record.
    Held { task: TaskId, by_uid: u32 },
    /// The task was released by `by_uid` (`carma release`).
    Released { task: TaskId, by_uid: u32 },
    /// A waiting task's settings were changed by `by_uid` (`carma update`); each field that is
    /// set replaces the spec's.
    Updated {
        task: TaskId,
        by_uid: u32,
        priority: Option<i32>,
        nice: Option<i32>,
        memory_mib: Option<u64>,
        time_limit_ms: Option<u64>,
        gpus: Option<u32>,
    },
    /// With backfill, the GPUs kept for the blocked head of the queue: no task behind it
    /// starts on them while it stays the head. Recorded when the reservation changes.
    Reserved { task: TaskId, gpus: Vec<String> },
    /// The task's end was announced (`channel`: "command" or "mail"); `detail` says how.
    Notified { task: TaskId, channel: String, detail: String },
    /// The task's end could not be announced through `channel`.
    NotifyFailed { task: TaskId, channel: String, reason: String },
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
            | Event::EstimateFailed { task, .. }
            | Event::Reaped { task, .. }
            | Event::SlurmPlaced { task, .. }
            | Event::SmObserved { task, .. }
            | Event::Held { task, .. }
            | Event::Released { task, .. }
            | Event::Updated { task, .. }
            | Event::Reserved { task, .. }
            | Event::Notified { task, .. }
            | Event::NotifyFailed { task, .. } => Some(task),
            Event::Rejected { task, .. } => task.as_ref(),
            Event::TickCompleted { .. }
            | Event::MetricSample { .. }
            | Event::GpuDiscovered { .. }
            | Event::GpuProbeStatus { .. }
            | Event::IngestDeferred { .. } => None,
            Event::GpuHealthChanged { .. } => None,
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
            Event::IngestDeferred { .. } => "IngestDeferred",
            Event::Reaped { .. } => "Reaped",
            Event::GpuHealthChanged { .. } => "GpuHealthChanged",
            Event::SlurmPlaced { .. } => "SlurmPlaced",
            Event::SmObserved { .. } => "SmObserved",
            Event::Held { .. } => "Held",
            Event::Released { .. } => "Released",
            Event::Updated { .. } => "Updated",
            Event::Reserved { .. } => "Reserved",
            Event::Notified { .. } => "Notified",
            Event::NotifyFailed { .. } => "NotifyFailed",
        }
    }
}

/// Why a stored record could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record is empty")]
    Empty,
    #[error("unknown format version {found} (this carma reads versions 1 and {FORMAT_VERSION})")]
    UnknownVersion { found: u8 },
    #[error("record of {0} bytes exceeds the {RECORD_BYTES_MAX}-byte limit")]
    TooLarge(usize),
    #[error("payload does not decode: {0}")]
    Payload(String),
    #[error("{0} trailing bytes after the payload")]
    Trailing(usize),
    /// The frame is cut short, its magic or length is wrong, or its checksum does not match.
    #[error("{0}")]
    Damaged(String),
    /// A sound frame stored under another seq: a record moved by damage.
    #[error("the record says it is seq {found}")]
    WrongSeq { found: u64 },
}

impl DecodeError {
    /// True when the bytes are damaged, false when they are only from a newer carma.
    pub fn is_damage(&self) -> bool {
        !matches!(self, DecodeError::UnknownVersion { .. })
    }
}

fn bincode_config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes a record as the version-2 frame for `seq`.
pub fn encode(seq: u64, record: &Record) -> Vec<u8> {
    let wire = super::wire::to_wire(record);
    // Encoding plain owned data into a Vec cannot fail.
    let payload = bincode::serde::encode_to_vec(&wire, bincode_config())
        .unwrap_or_else(|e| unreachable!("encoding a journal record: {e}"));
    let mut bytes = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len() + FRAME_TRAILER_BYTES);
    bytes.push(FORMAT_VERSION);
    bytes.extend_from_slice(&FRAME_MAGIC);
    bytes.extend_from_slice(&seq.to_le_bytes());
    let length = u32::try_from(payload.len()).expect("a record payload is far below 4 GiB");
    bytes.extend_from_slice(&length.to_le_bytes());
    bytes.extend_from_slice(&payload);
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    // Not asserted here: `Journal::append` refuses a frame over RECORD_BYTES_MAX before it
    // writes anything, so a user's oversized submission is an error, never a panic.
    bytes
}

/// Whether the Submitted record of a task with `spec` fits the journal's record limit: the
/// check `carma submit` makes at once and ingest makes again, so the tick never meets a
/// record it cannot write.
pub fn check_submitted_fits(spec: &crate::spec::TaskSpec, submitter_uid: u32) -> Result<(), String> {
    let task = crate::id::TaskId::from_parts(u64::MAX >> 16, u32::MAX);
    let event = Event::Submitted { task, submitter_uid, spec: spec.clone() };
    let bytes = encode(u64::MAX, &Record { time_ms: u64::MAX, event }).len();
    if bytes > RECORD_BYTES_MAX {
        return Err(format!(
            "the task's journal record would be {bytes} bytes, over the journal's {RECORD_BYTES_MAX}-byte record limit; shorten its command line, environment names or parameters (pass long arguments in a file)"
        ));
    }
    Ok(())
}

/// Decodes the record stored under `seq`, checking its version, frame, checksum and seq.
pub fn decode(seq: u64, bytes: &[u8]) -> Result<Record, DecodeError> {
    let (&version, rest) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if bytes.len() > RECORD_BYTES_MAX {
        return Err(DecodeError::TooLarge(bytes.len()));
    }
    match version {
        FORMAT_VERSION => {
            let (found, record, used) = decode_frame(bytes).map_err(|e| match e {
                FrameError::Incomplete => DecodeError::Damaged("the frame is cut short".into()),
                FrameError::Invalid(e) => e,
            })?;
            if used != bytes.len() {
                return Err(DecodeError::Trailing(bytes.len() - used));
            }
            if found != seq {
                return Err(DecodeError::WrongSeq { found });
            }
            Ok(record)
        }
        LEGACY_FORMAT_VERSION => decode_payload(rest),
        found if version_byte_damaged(bytes) => Err(DecodeError::Damaged(format!(
            "its version byte reads {found}, but the rest is a sound version-{FORMAT_VERSION} record"
        ))),
        found => Err(DecodeError::UnknownVersion { found }),
    }
}

/// True when `bytes` is a sound version-2 frame but for its first byte. The checksum covers
/// the version byte, so a newer carma's frame never passes as version 2: this is damage.
fn version_byte_damaged(bytes: &[u8]) -> bool {
    if bytes.len() < FRAME_HEADER_BYTES || bytes[1..5] != FRAME_MAGIC {
        return false;
    }
    let mut fixed = bytes.to_vec();
    fixed[0] = FORMAT_VERSION;
    matches!(decode_frame(&fixed), Ok((_, _, used)) if used == fixed.len())
}

/// Why [`decode_frame`] found no frame at the start of its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The bytes end before the frame does (a log being written, or cut off).
    Incomplete,
    /// The bytes are not a sound frame.
    Invalid(DecodeError),
}

/// Decodes the version-2 frame at the start of `bytes`: its seq, its record, and its length.
pub fn decode_frame(bytes: &[u8]) -> Result<(u64, Record, usize), FrameError> {
    let invalid = |detail: String| FrameError::Invalid(DecodeError::Damaged(detail));
    if bytes.len() < FRAME_HEADER_BYTES {
        return Err(FrameError::Incomplete);
    }
    if bytes[0] != FORMAT_VERSION {
        return Err(FrameError::Invalid(DecodeError::UnknownVersion { found: bytes[0] }));
    }
    if bytes[1..5] != FRAME_MAGIC {
        return Err(invalid("the frame's magic bytes are wrong".into()));
    }
    let seq = u64::from_le_bytes(bytes[5..13].try_into().expect("8 bytes"));
    let length = u32::from_le_bytes(bytes[13..17].try_into().expect("4 bytes")) as usize;
    let total = FRAME_HEADER_BYTES + length + FRAME_TRAILER_BYTES;
    if total > RECORD_BYTES_MAX {
        return Err(invalid(format!(
            "the frame claims {total} bytes, over the {RECORD_BYTES_MAX}-byte limit"
        )));
    }
    if bytes.len() < total {
        return Err(FrameError::Incomplete);
    }
    let body = FRAME_HEADER_BYTES + length;
    let stored = u32::from_le_bytes(bytes[body..total].try_into().expect("4 bytes"));
    if crc32fast::hash(&bytes[..body]) != stored {
        return Err(invalid("checksum mismatch".into()));
    }
    let record = decode_payload(&bytes[FRAME_HEADER_BYTES..body]).map_err(FrameError::Invalid)?;
    Ok((seq, record, total))
}

/// The task a damaged record probably concerns: its payload decoded without trusting the
/// checksum, for error messages only.
pub fn probable_task(bytes: &[u8]) -> Option<TaskId> {
    let framed = bytes.len() >= FRAME_HEADER_BYTES + FRAME_TRAILER_BYTES && bytes[1..5] == FRAME_MAGIC;
    let payload = match *bytes.first()? {
        _ if framed => &bytes[FRAME_HEADER_BYTES..bytes.len() - FRAME_TRAILER_BYTES],
        LEGACY_FORMAT_VERSION => &bytes[1..],
        _ => return None,
    };
    decode_payload(payload).ok().and_then(|r| r.event.task().cloned())
}

/// The environment values a carma 0.1 Submitted record carries (`None` for anything else).
pub fn legacy_env(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    let (&version, payload) = bytes.split_first()?;
    if version != LEGACY_FORMAT_VERSION {
        return None;
    }
    let config = bincode_config().with_limit::<RECORD_BYTES_MAX>();
    let (wire, _): (super::wire::WireRecord, usize) =
        bincode::serde::decode_from_slice(payload, config).ok()?;
    super::wire::legacy_env(&wire)
}

fn decode_payload(payload: &[u8]) -> Result<Record, DecodeError> {
    let config = bincode_config().with_limit::<RECORD_BYTES_MAX>();
    let (wire, used): (super::wire::WireRecord, usize) = bincode::serde::decode_from_slice(payload, config)
        .map_err(|e| DecodeError::Payload(e.to_string()))?;
    if used != payload.len() {
        return Err(DecodeError::Trailing(payload.len() - used));
    }
    Ok(super::wire::from_wire(wire))
}
