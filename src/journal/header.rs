//! The redb file header: the current commit slot, checked before redb opens the file.
//!
//! redb keeps two commit slots in its first page, each with the root pointers of one commit
//! and an XXH3-128 checksum, and a god byte saying which slot is current (the primary). When it
//! opens a file that was closed cleanly it trusts the primary slot without checking its
//! checksum, so a flipped bit in a root pointer sends it to whatever page the pointer now
//! names: an error at best, an older copy of the table tree (an older, sound-looking journal)
//! at worst. [`verify`] checks the primary slot's checksum first. A cleanly closed file always
//! has a sound primary slot: redb rewrites the whole header in one write, slots unchanged, when
//! it clears the recovery flag on close.
//!
//! What is not checked, on purpose: the order of the two slots. After a writer is killed
//! between writing the other slot and making it primary, and the next writer repairs the file
//! and is killed too, a cleanly flagged file legitimately has an older primary than its sound
//! other slot (`tests/crash_safety.rs` produces exactly that). A file whose last writer crashed
//! has the recovery flag set; redb then repairs it itself, and nothing is checked here. The
//! layout below is redb 4's file format 3 (`tree_store/page_store/header.rs` in redb); a file
//! of another format is left to redb.

use std::io::Read;
use std::path::Path;

const MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];
const GOD_BYTE: usize = 9;
const PRIMARY_BIT: u8 = 1;
const RECOVERY_REQUIRED: u8 = 2;
const SLOTS: [usize; 2] = [64, 192];
const SLOT_BYTES: usize = 128;
const HEADER_BYTES: usize = 320;
/// redb's file format version, the first byte of each slot.
const SLOT_VERSION: u8 = 3;
/// Within a slot: the last committed transaction id, then the slot's XXH3-128 checksum.
const TRANSACTION_ID: usize = 104;
const CHECKSUM: usize = 112;

/// One commit slot as read.
struct Slot {
    transaction: u64,
    sound: bool,
}

fn slot(header: &[u8], at: usize) -> Option<Slot> {
    let bytes = &header[at..at + SLOT_BYTES];
    if bytes[0] != SLOT_VERSION {
        return None;
    }
    let stored = u128::from_le_bytes(bytes[CHECKSUM..].try_into().expect("16 bytes"));
    let transaction = u64::from_le_bytes(bytes[TRANSACTION_ID..CHECKSUM].try_into().expect("8 bytes"));
    Some(Slot { transaction, sound: xxhash_rust::xxh3::xxh3_128(&bytes[..CHECKSUM]) == stored })
}

/// `Err(detail)` when the header of the redb file at `path` would make redb follow root
/// pointers that are not the ones written; `Ok` when it is sound, or when this cannot be told
/// (a crashed writer, a file too short or of another format: redb then has its say).
pub(super) fn verify(path: &Path) -> Result<(), String> {
    let mut header = [0u8; HEADER_BYTES];
    let Ok(mut file) = std::fs::File::open(path) else { return Ok(()) };
    if file.read_exact(&mut header).is_err() || header[..MAGIC.len()] != MAGIC {
        return Ok(());
    }
    let god = header[GOD_BYTE];
    if god & RECOVERY_REQUIRED != 0 {
        return Ok(());
    }
    let primary = usize::from(god & PRIMARY_BIT != 0);
    match slot(&header, SLOTS[primary]) {
        Some(current) if !current.sound => {
            Err("the file header's current commit slot fails its checksum".into())
        }
        _ => Ok(()),
    }
}

/// Points the god byte of the redb file at `path` at its newest sound commit slot, for a
/// temporary copy whose header [`verify`] refused; the recovery flag is left as it was. Returns
/// false when no slot is sound.
pub(super) fn point_at_newest_sound_slot(path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    // The copy is root's own (a scratch directory), yet opened without following a link and
    // changed in place: only the header is read, only the god byte written.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let mut bytes = [0u8; HEADER_BYTES];
    if (&file).read_exact(&mut bytes).is_err() || bytes[..MAGIC.len()] != MAGIC {
        return Ok(false);
    }
    let newest =
        (0..2).filter_map(|i| slot(&bytes, SLOTS[i]).filter(|s| s.sound).map(|s| (s.transaction, i))).max();
    let Some((_, primary)) = newest else { return Ok(false) };
    let god = (bytes[GOD_BYTE] & !PRIMARY_BIT) | primary as u8;
    file.write_all_at(&[god], GOD_BYTE as u64)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal_with_commits(dir: &Path) -> std::path::PathBuf {
        let path = dir.join("j.redb");
        crate::journal::Journal::create(&path).unwrap();
        let mut journal = crate::journal::Journal::open(&path).unwrap();
        let mut state = journal.load_state().unwrap();
        for n in 0..3 {
            let record = crate::journal::Record {
                time_ms: n,
                event: crate::journal::Event::GpuProbeStatus { detail: format!("{n}") },
            };
            journal.append(&[record], &mut state).unwrap();
        }
        drop(journal);
        path
    }

    /// Goal: a cleanly closed journal passes; any flipped bit in the current slot is caught,
    /// in the other slot it is not (redb does not read it), and neither is a swapped primary
    /// bit (a legitimate state after crashes, see the module docs). This also pins that redb's
    /// slot checksum is XXH3-128 over the slot's first 112 bytes.
    #[test]
    fn a_damaged_current_commit_slot_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal_with_commits(dir.path());
        let clean = std::fs::read(&path).unwrap();
        assert_eq!(verify(&path), Ok(()));
        let primary = usize::from(clean[GOD_BYTE] & PRIMARY_BIT != 0);
        let flipped = |offset: usize, bit: u8| {
            let mut bytes = clean.clone();
            bytes[offset] ^= 1 << bit;
            std::fs::write(&path, &bytes).unwrap();
            verify(&path)
        };
        for offset in [8, 16, 40, 104, 112, 127] {
            let at = SLOTS[primary] + offset;
            assert!(flipped(at, 3).is_err(), "a flip at {at} in the current slot");
            assert_eq!(flipped(SLOTS[1 - primary] + offset, 3), Ok(()), "the other slot at {offset}");
        }
        assert_eq!(flipped(GOD_BYTE, 0), Ok(()), "the other slot is sound: left to redb");
        assert_eq!(flipped(GOD_BYTE, 1), Ok(()), "a recovery flag leaves it to redb's repair");
        let mut bytes = clean.clone();
        bytes[SLOTS[primary] + 20] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(point_at_newest_sound_slot(&path).unwrap());
        assert_eq!(verify(&path), Ok(()), "a copy pointed at the sound slot opens");
    }
}
