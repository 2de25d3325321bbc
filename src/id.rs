//! Task ids: time-ordered and unique without a shared counter.
//!
//! `carma submit` never opens the journal, so it cannot take the next sequence number. An id
//! is instead 48 bits of Unix milliseconds, 10 bits of the microsecond within that
//! millisecond, and 22 random bits, written in lowercase Crockford base32 (16 characters).
//! Sorting ids as strings sorts them by submit time to the microsecond (and ids made by one
//! process in one millisecond in the order it made them), and two submitters in the same
//! microsecond collide with probability 2^-22; the spool's
//! `O_EXCL` create and the ingest's duplicate check turn even that into a retry or a
//! Rejected event, never a silent overwrite.

use std::fmt;

const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
/// `IN_ALPHABET[b]`: whether byte `b` is in [`ALPHABET`]; the tick parses an id per waiting
/// task, and a scan of the alphabet per character showed in its profile.
const IN_ALPHABET: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < ALPHABET.len() {
        table[ALPHABET[i] as usize] = true;
        i += 1;
    }
    table
};
/// Characters in a rendered id.
pub const TASK_ID_LEN: usize = 16;

/// A task's identity, stable for its whole life.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct TaskId(String);

impl TaskId {
    /// A fresh id for `unix_ms` (the wall clock, or the simulator's virtual clock). The
    /// microsecond within the millisecond comes from the wall clock, so ids made in one
    /// millisecond still sort in the order they were made.
    pub fn generate(unix_ms: u64) -> TaskId {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let micros_in_ms = (nanos / 1000) % 1000;
        let mut random = [0u8; 4];
        // Fall back to time-derived noise: uniqueness is still enforced by O_EXCL and ingest.
        if getrandom::fill(&mut random).is_err() {
            random = (nanos ^ std::process::id()).to_le_bytes();
        }
        let random = u32::from_le_bytes(random) & ((1 << 22) - 1);
        let low = next_in_process(unix_ms, (micros_in_ms << 22) | random);
        TaskId::from_parts(unix_ms, low)
    }

    /// Builds the id from its two halves; exposed so tests can make ids deterministically.
    pub fn from_parts(unix_ms: u64, random: u32) -> TaskId {
        let value: u128 = (u128::from(unix_ms & ((1 << 48) - 1)) << 32) | u128::from(random);
        let mut out = [0u8; TASK_ID_LEN];
        for (i, slot) in out.iter_mut().enumerate() {
            let shift = 5 * (TASK_ID_LEN - 1 - i);
            *slot = ALPHABET[((value >> shift) & 31) as usize];
        }
        TaskId(out.iter().map(|&b| b as char).collect())
    }

    /// Parses a rendered id, refusing anything that could escape a file name.
    pub fn parse(text: &str) -> Option<TaskId> {
        let ok = text.len() == TASK_ID_LEN && text.bytes().all(|b| IN_ALPHABET[usize::from(b)]);
        ok.then(|| TaskId(text.to_string()))
    }

    /// The smallest id that starts with `prefix`, for range queries over a sorted map; not a
    /// valid id itself.
    pub fn lower_bound(prefix: &str) -> TaskId {
        TaskId(prefix.to_string())
    }

    /// The id a journal record holds, as it was stored: decoding takes it as it is, as serde
    /// does, because a record's checksum already vouches for its bytes.
    pub(crate) fn from_stored(text: String) -> TaskId {
        TaskId(text)
    }

    /// The id's text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The submit time encoded in the id, in Unix milliseconds.
    pub fn unix_ms(&self) -> u64 {
        let value = self.0.bytes().fold(0u128, |acc, b| {
            let digit = ALPHABET.iter().position(|&a| a == b).unwrap_or(0) as u128;
            (acc << 5) | digit
        });
        (value >> 32) as u64
    }
}

/// The low half for an id made at `unix_ms`, strictly above the last one this process made
/// in the same millisecond: a fast caller (a release build makes several ids per
/// microsecond) would otherwise order them by their random bits.
fn next_in_process(unix_ms: u64, low: u32) -> u32 {
    static LAST: std::sync::Mutex<(u64, u32)> = std::sync::Mutex::new((0, 0));
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let low = if last.0 == unix_ms && low <= last.1 { last.1.saturating_add(1) } else { low };
    *last = (unix_ms, low);
    low
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_time_and_round_trip() {
        let a = TaskId::from_parts(1_700_000_000_000, u32::MAX);
        let b = TaskId::from_parts(1_700_000_000_001, 0);
        assert!(a < b, "{a} should sort before {b}");
        assert_eq!(a.unix_ms(), 1_700_000_000_000);
        assert_eq!(TaskId::parse(a.as_str()), Some(a.clone()));
        assert_eq!(a.as_str().len(), TASK_ID_LEN);
    }

    #[test]
    fn ids_made_one_after_another_sort_in_that_order() {
        // With the same millisecond argument, only the microsecond field can order them: an
        // inversion happens only when the wall clock crosses into the next millisecond and
        // the field restarts. Random low bits alone would invert about half the pairs.
        let ids: Vec<TaskId> = (0..1000).map(|_| TaskId::generate(1_700_000_000_000)).collect();
        let inversions = ids.windows(2).filter(|pair| pair[1] < pair[0]).count();
        assert!(inversions < 100, "{inversions} of 999 consecutive ids are out of order");
    }

    #[test]
    fn parse_refuses_path_tricks() {
        assert_eq!(TaskId::parse("../../etc/passwd"), None);
        assert_eq!(TaskId::parse("0123456789ABCDEF"), None);
        assert_eq!(TaskId::parse("0123456789abcde"), None);
    }
}
