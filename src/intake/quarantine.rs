//! `quarantine/` is bounded and cleaned every tick.
//!
//! Refused spool entries are moved there (`settle`), and a flood at the top of `spool/` is
//! parked there whole (`rooms::move_top_level`), so that an administrator can see what was
//! refused. Its owner can no longer delete what is there, so the tick does, at the start of
//! each tick and again once the tick's own refusals are in (so no user's share outlasts the
//! tick that made it; the newest refusals that fit the bounds stay), by a pure policy ([`doomed`]) over what one bounded look ([`CleanBounds::entries_per_tick`]) finds:
//!
//! - anything older than [`CleanBounds::age_max_ms`] goes, the age read from the stamp root
//!   put in the name when it moved the entry there (a file's own times are its owner's to
//!   set); a name without root's stamp counts as old;
//! - directories go at once (a parked flood or a folder someone left: nothing to read);
//! - each user keeps at most [`CleanBounds::bytes_per_user_max`] bytes of refused files (their
//!   newest), attributed by the file's owner (a user cannot give a file away);
//! - all users together keep at most [`CleanBounds::bytes_max`], newest first.
//!
//! Removal never follows a link: files and links are unlinked by name in root's own folder;
//! a directory is emptied through its descriptor, its subdirectories moved up into
//! `quarantine/` under the same stamp (so depth costs nothing), then removed; a big one
//! takes several ticks, [`CleanBounds::entries_per_tick`] names each.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use super::fd;
use super::rooms::quarantine_dir;
use crate::error::Result;
use crate::home::Home;

/// The bounds of quarantine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanBounds {
    /// Older entries are removed, in ms.
    pub age_max_ms: u64,
    /// Bytes of refused files kept per user.
    pub bytes_per_user_max: u64,
    /// Bytes of refused files kept for all users together.
    pub bytes_max: u64,
    /// Names looked at (and removed) per tick.
    pub entries_per_tick: usize,
}

/// The bounds of every real tick: a week, 1 MiB per user, 64 MiB in all.
pub const CLEAN_BOUNDS: CleanBounds = CleanBounds {
    age_max_ms: 7 * 24 * 3600 * 1000,
    bytes_per_user_max: 1 << 20,
    bytes_max: 64 << 20,
    entries_per_tick: 4_096,
};

const _: () = assert!(CLEAN_BOUNDS.bytes_per_user_max <= CLEAN_BOUNDS.bytes_max);

/// One entry of `quarantine/`, as the cleaner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parked {
    /// When root moved it there, Unix ms, from its name; `None`: not root's name.
    pub parked_ms: Option<u64>,
    /// Its owner.
    pub uid: u32,
    /// The disk bytes it holds (a directory counts 0: it always goes).
    pub bytes: u64,
    /// Whether it is a directory.
    pub is_dir: bool,
}

/// Which of `parked` to remove at `now_ms` under `bounds` (indexes, ascending); see the
/// module docs. Pure: the same entries give the same answer.
pub(crate) fn doomed(parked: &[Parked], now_ms: u64, bounds: &CleanBounds) -> Vec<usize> {
    let too_old = |p: &Parked| p.parked_ms.is_none_or(|at| now_ms.saturating_sub(at) > bounds.age_max_ms);
    let mut gone: Vec<bool> = parked.iter().map(|p| p.is_dir || too_old(p)).collect();
    // Newest first: what a bound keeps is the latest refusals.
    let mut order: Vec<usize> = (0..parked.len()).filter(|&i| !gone[i]).collect();
    order.sort_by_key(|&i| std::cmp::Reverse((parked[i].parked_ms, i)));
    let mut per_user: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    let mut total = 0u64;
    for i in order {
        let user = per_user.entry(parked[i].uid).or_default();
        let (user_after, total_after) = (*user + parked[i].bytes, total + parked[i].bytes);
        if user_after > bounds.bytes_per_user_max || total_after > bounds.bytes_max {
            gone[i] = true;
        } else {
            (*user, total) = (user_after, total_after);
        }
    }
    (0..parked.len()).filter(|&i| gone[i]).collect()
}

/// What one clean removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cleaned {
    /// Entries removed from `quarantine/` (or from directories in it).
    pub removed: u64,
}

/// Cleans `quarantine/` (see the module docs); a missing folder is clean. Ages are measured
/// on the wall clock, as root's stamps were (not the tick's clock, which a simulation moves).
pub fn clean_quarantine(home: &Home) -> Result<Cleaned> {
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    clean_with(home, u64::try_from(now_ms).unwrap_or(u64::MAX), &CLEAN_BOUNDS)
}

pub(crate) fn clean_with(home: &Home, now_ms: u64, bounds: &CleanBounds) -> Result<Cleaned> {
    let mut cleaned = Cleaned::default();
    if !home.quarantine_dir().exists() {
        return Ok(cleaned);
    }
    let dir = quarantine_dir(home)?;
    let (names, _) = fd::list(&dir, bounds.entries_per_tick).map_err(|e| {
        crate::error::Error::io(format!("cannot list {}", home.quarantine_dir().display()), e)
    })?;
    let mut seen = Vec::with_capacity(names.len());
    for name in names {
        let Ok(stat) = fd::lstat_at(&dir, &name) else { continue };
        let parked = Parked {
            parked_ms: stamp_ms(&name),
            uid: stat.uid,
            bytes: stat.disk_bytes,
            is_dir: stat.is_dir(),
        };
        seen.push((name, parked));
    }
    let parked: Vec<Parked> = seen.iter().map(|(_, p)| p.clone()).collect();
    let mut budget = bounds.entries_per_tick;
    for i in doomed(&parked, now_ms, bounds) {
        let (name, entry) = &seen[i];
        if entry.is_dir {
            cleaned.removed += empty_and_remove(&dir, name, &mut budget);
        } else if fd::unlink_at(&dir, name).is_ok() {
            cleaned.removed += 1;
        }
        if budget == 0 {
            break;
        }
    }
    Ok(cleaned)
}

/// Removes everything in `quarantine/` that one tick's budget reaches: the tick does this
/// first when the state directory is below its free-space floor.
pub fn empty_quarantine(home: &Home) -> Result<Cleaned> {
    let bounds = CleanBounds { age_max_ms: 0, ..CLEAN_BOUNDS };
    clean_with(home, u64::MAX, &bounds)
}

/// The disk bytes of what each user has waiting in their spool folder (`spool/<uid>/`, at
/// most [`super::SPOOL_ENTRIES_PER_USER_MAX`] names each), looked at without following
/// links and without opening a file.
pub fn spool_bytes_by_user(home: &Home) -> std::collections::BTreeMap<u32, u64> {
    let mut bytes = std::collections::BTreeMap::new();
    let Ok(spool) = fd::open_dir(&home.spool_dir()) else { return bytes };
    let (names, _) = fd::list(&spool, super::BOUNDS.top_names_max).unwrap_or_default();
    for name in names {
        let Some(uid) = super::rooms::user_folder_uid(&name) else { continue };
        let Ok(folder) = fd::open_dir_at(&spool, &name) else { continue };
        let (entries, _) = fd::list(&folder, super::SPOOL_ENTRIES_PER_USER_MAX).unwrap_or_default();
        let held: u64 =
            entries.iter().filter_map(|entry| fd::lstat_at(&folder, entry).ok()).map(|s| s.disk_bytes).sum();
        *bytes.entry(uid).or_default() += held;
    }
    bytes
}

/// The ms of root's stamp at the start of a quarantine name (`<ns>-<name>`, see
/// `rooms::stamped`).
fn stamp_ms(name: &OsStr) -> Option<u64> {
    let bytes = name.as_bytes();
    let digits = bytes.iter().position(|&b| b == b'-')?;
    let ns: u128 = std::str::from_utf8(&bytes[..digits]).ok()?.parse().ok()?;
    u64::try_from(ns / 1_000_000).ok()
}

/// Empties the directory `name` in `quarantine` by at most `budget` names (files and links
/// unlinked, subdirectories moved up under the same stamp), then removes it when empty.
/// Returns how many names went.
fn empty_and_remove(quarantine: &OwnedFd, name: &OsStr, budget: &mut usize) -> u64 {
    let mut removed = 0;
    let Ok(dir) = fd::open_dir_at(quarantine, name) else { return 0 };
    let stamp: OsString = {
        let bytes = name.as_bytes();
        let end = bytes.iter().position(|&b| b == b'-').unwrap_or(0);
        OsStr::from_bytes(&bytes[..end]).to_os_string()
    };
    let (children, _) = fd::list(&dir, *budget).unwrap_or_default();
    for (n, child) in children.iter().enumerate() {
        *budget = budget.saturating_sub(1);
        let is_dir = fd::lstat_at(&dir, child).is_ok_and(|stat| stat.is_dir());
        let gone = if is_dir {
            let mut moved = stamp.clone();
            moved.push(format!("-{n}-"));
            moved.push(super::rooms::stamped_suffix(child));
            fd::rename_at(&dir, child, quarantine, &moved).is_ok()
        } else {
            fd::unlink_at(&dir, child).is_ok()
        };
        removed += u64::from(gone);
    }
    if *budget > 0 && fd::remove_dir_at(quarantine, name).is_ok() {
        *budget -= 1;
        removed += 1;
    }
    removed
}

#[cfg(test)]
mod tests {
    //! Goal: the policy removes the old, the directories, a user's bytes past their own bound
    //! (oldest first) and everyone's past the total, and keeps the rest. Method: the pure
    //! decision over a table.
    use super::*;

    const BOUNDS: CleanBounds =
        CleanBounds { age_max_ms: 1_000, bytes_per_user_max: 100, bytes_max: 150, entries_per_tick: 64 };

    fn file(parked_ms: u64, uid: u32, bytes: u64) -> Parked {
        Parked { parked_ms: Some(parked_ms), uid, bytes, is_dir: false }
    }

    #[test]
    fn old_dirs_and_bytes_over_the_bounds_go_newest_kept() {
        let now = 10_000;
        let parked = vec![
            file(8_000, 7, 10),                                                // 0: too old
            Parked { parked_ms: None, uid: 7, bytes: 1, is_dir: false },       // 1: not root's name
            Parked { parked_ms: Some(9_900), uid: 7, bytes: 0, is_dir: true }, // 2: a directory
            file(9_500, 7, 60),                                                // 3: mallory's older
            file(9_600, 7, 60),                                                // 4: mallory's newest
            file(9_400, 8, 40),                                                // 5: alice's
            file(9_300, 9, 60),                                                // 6: bob's, past the total
        ];
        assert_eq!(doomed(&parked, now, &BOUNDS), vec![0, 1, 2, 3, 6]);
        let fresh = vec![file(9_500, 7, 50), file(9_600, 8, 50)];
        assert_eq!(doomed(&fresh, now, &BOUNDS), Vec::<usize>::new(), "within every bound");
    }

    #[test]
    fn the_stamp_is_read_from_roots_name() {
        assert_eq!(stamp_ms(OsStr::new("1700000000123456789-junk.toml")), Some(1_700_000_000_123));
        assert_eq!(stamp_ms(OsStr::new("junk")), None);
        assert_eq!(stamp_ms(OsStr::new("x-junk")), None);
    }
}
