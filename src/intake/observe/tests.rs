//! Observe on a real spool: real folders and files owned by two users, read through the scan.

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::Path;

use super::{Seen, observe};
use crate::home::Home;
use crate::id::TaskId;
use crate::intake::{BOUNDS, scan};
use crate::journal::State;
use crate::spec::Limits;

/// A user's folder under `spool/` holding `count` spool files that are not submissions.
fn junk_folder(spool: &Path, uid: u32, first: u64, count: u64) {
    let folder = spool.join(uid.to_string());
    std::fs::create_dir(&folder).unwrap();
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown(&folder, Some(uid), Some(uid)).unwrap();
    for n in first..first + count {
        let file = folder.join(format!("{}.toml", TaskId::from_parts(1_700_000_000_000 + n, 0)));
        std::fs::write(&file, "this is not a spool file").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        chown(&file, Some(uid), Some(uid)).unwrap();
    }
}

/// Goal: once a user has had `refusals_per_user` refusals judged from the bytes, observe
/// leaves the rest of that user's folder unopened (NotRead), while another user's folder in
/// the same tick is read in full.
#[test]
fn observe_stops_reading_a_flooding_users_folder_at_the_bound() {
    if !crate::home::is_root() {
        println!("skipped: needs root to make two users' spool folders");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let spool = tmp.path().join("spool");
    std::fs::create_dir(&spool).unwrap();
    let bound = BOUNDS.refusals_per_user as u64;
    // The flooder's files come first in id order, so the bound is reached before the other's.
    junk_folder(&spool, 60_001, 0, bound + 8);
    junk_folder(&spool, 60_002, 1_000, 10);
    let mut scan = scan(&Home::at(tmp.path())).unwrap();
    let observed = observe(&mut scan, &State::default(), Limits::default());
    let count = |uid: u32, read: bool| {
        let seen = observed.entries.iter().filter(|(entry, _)| entry.uid == uid);
        seen.filter(|(_, seen)| matches!(seen, Seen::NotRead) != read).count()
    };
    assert_eq!((count(60_001, true), count(60_001, false)), (BOUNDS.refusals_per_user, 8));
    assert_eq!(
        (count(60_002, true), count(60_002, false)),
        (10, 0),
        "the other user's folder is read in full"
    );
    let (first, Seen::Refused(reason)) = &observed.entries[0] else { panic!("{:?}", observed.entries[0]) };
    assert!(reason.starts_with(&format!("spool file {}:1: ", first.file_name)), "{reason}");
    let read = observed.entries.iter().filter(|(_, seen)| matches!(seen, Seen::Refused(_))).count();
    assert_eq!(read, BOUNDS.refusals_per_user + 10, "each read file is refused from its bytes");
}
