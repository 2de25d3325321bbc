//! The bytes of a journal record on disk: the frame around a bincode `WireRecord`.
//!
//! `journal::wire` holds the frozen shapes bincode writes and converts them to and from the
//! domain [`Record`]. Each value in the `events` table is one *frame*:
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

use super::event::{Event, Record};
use super::wire;
use crate::id::TaskId;

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

/// Why a stored record could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The stored value has no bytes at all.
    #[error("record is empty")]
    Empty,
    /// The first byte names a format this carma does not know (a newer carma's): not damage.
    #[error("unknown format version {found} (this carma reads versions 1 and {FORMAT_VERSION})")]
    UnknownVersion {
        /// The version byte found.
        found: u8,
    },
    /// The stored value is longer than [`RECORD_BYTES_MAX`] (its length in bytes).
    #[error("record of {0} bytes exceeds the {RECORD_BYTES_MAX}-byte limit")]
    TooLarge(usize),
    /// The bytes are whole but bincode cannot decode them as a wire record (its message).
    #[error("payload does not decode: {0}")]
    Payload(String),
    /// The payload decoded with this many bytes left over.
    #[error("{0} trailing bytes after the payload")]
    Trailing(usize),
    /// The frame is cut short, its magic or length is wrong, or its checksum does not match.
    #[error("{0}")]
    Damaged(String),
    /// A sound frame stored under another seq: a record moved by damage.
    #[error("the record says it is seq {found}")]
    WrongSeq {
        /// The seq in the frame's header.
        found: u64,
    },
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
    let wire = wire::to_wire(record);
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
    let (wire, _): (wire::WireRecord, usize) = bincode::serde::decode_from_slice(payload, config).ok()?;
    wire::legacy_env(&wire)
}

fn decode_payload(payload: &[u8]) -> Result<Record, DecodeError> {
    let config = bincode_config().with_limit::<RECORD_BYTES_MAX>();
    let (wire, used): (wire::WireRecord, usize) = bincode::serde::decode_from_slice(payload, config)
        .map_err(|e| DecodeError::Payload(e.to_string()))?;
    if used != payload.len() {
        return Err(DecodeError::Trailing(payload.len() - used));
    }
    Ok(wire::from_wire(wire))
}
