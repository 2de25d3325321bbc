//! The scratch room's promises, on a real file system: exclusive creation, links refused,
//! untrusted parents refused, stale directories of dead processes swept.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

/// A pid that no process has now: a child that has already been waited for.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait true");
    pid
}

/// Goal: a scratch directory is new, 0700, named `PURPOSE-PID-RANDOM` with a fresh random
/// part each time, and gone after drop.
#[test]
fn scratch_dirs_are_fresh_private_and_removed_on_drop() {
    let parent = tempfile::tempdir().unwrap();
    let first = ScratchDir::new_in(parent.path(), "inspect").unwrap();
    let second = ScratchDir::new_in(parent.path(), "inspect").unwrap();
    assert_ne!(first.path(), second.path());
    let meta = std::fs::symlink_metadata(first.path()).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o700);
    let name = first.path().file_name().unwrap().to_str().unwrap().to_string();
    let prefix = format!("inspect-{}-", std::process::id());
    assert!(name.starts_with(&prefix), "{name}");
    assert_eq!(name.len(), prefix.len() + 16, "64 random bits in hex: {name}");
    let path = first.path().to_path_buf();
    drop(first);
    assert!(!path.exists(), "removed on drop");
    assert!(second.path().exists(), "the other one is left alone");
}

/// Goal: exclusive creation refuses whatever is already at the name, a link above all, and
/// never writes through it; a copy refuses a source that is a link.
#[test]
fn exclusive_creation_refuses_what_exists_and_links() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();

    let existing = create_file_exclusive(&victim, 0o600).unwrap_err();
    assert_eq!(existing.kind(), io::ErrorKind::AlreadyExists);
    let through_link = create_file_exclusive(&link, 0o600).unwrap_err();
    assert_eq!(through_link.kind(), io::ErrorKind::AlreadyExists);
    let copy_onto_link = copy_file_nofollow(&victim, &link).unwrap_err();
    assert_eq!(copy_onto_link.kind(), io::ErrorKind::AlreadyExists);
    let copy_from_link = copy_file_nofollow(&link, &dir.path().join("copy")).unwrap_err();
    assert_eq!(copy_from_link.to_string(), "a symbolic link, not a regular file");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "the victim is untouched");
    assert_eq!(std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777, 0o644);

    let copy = dir.path().join("copy");
    assert_eq!(copy_file_nofollow(&victim, &copy).unwrap(), 8);
    assert_eq!(std::fs::read(&copy).unwrap(), b"precious");
    assert_eq!(std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777, 0o600);

    let made = dir.path().join("made");
    mkdir_exclusive(&made, 0o700).unwrap();
    assert_eq!(mkdir_exclusive(&made, 0o700).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
    let dir_link = dir.path().join("dir-link");
    std::os::unix::fs::symlink(&made, &dir_link).unwrap();
    assert_eq!(mkdir_exclusive(&dir_link, 0o700).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
}

/// Goal: a parent that is a link, or that others may write without the sticky bit, is refused
/// with the one-line error naming it; the system's sticky temporary directory is accepted.
#[test]
fn untrusted_parents_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let error = ScratchDir::new_in(&open, "x").unwrap_err();
    let real = open.canonicalize().unwrap();
    assert_eq!(
        error.to_string(),
        format!(
            "refusing {}: writable by others (mode 0777) and not sticky; nothing was changed there; remove the group and other write bits (chmod go-w)",
            real.display()
        )
    );
    assert_eq!(error.exit_code(), crate::error::EXIT_UNSAFE_PATH);
    assert_eq!(std::fs::read_dir(&open).unwrap().count(), 0, "nothing was made there");

    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert!(ScratchDir::new_in(&open, "x").is_ok(), "sticky, as /tmp");
    assert!(ScratchDir::new_in(&std::env::temp_dir(), "carma-test").is_ok());
}

/// Goal: the next scratch directory in a parent sweeps the ones whose process is gone, and
/// leaves alone a live process's, another purpose's, a link, and names it does not make.
#[test]
fn stale_scratch_dirs_of_dead_processes_are_swept() {
    let parent = tempfile::tempdir().unwrap();
    let dead = dead_pid();
    let stale = parent.path().join(format!("inspect-{dead}-00112233aabbccdd"));
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("carma.redb"), b"an old copy").unwrap();
    let live = parent.path().join(format!("inspect-{}-0", std::process::id()));
    std::fs::create_dir(&live).unwrap();
    let other = parent.path().join(format!("bench-{dead}-0"));
    std::fs::create_dir(&other).unwrap();
    let odd = parent.path().join(format!("inspect-{dead}-x.y"));
    std::fs::create_dir(&odd).unwrap();
    let target = tempfile::tempdir().unwrap();
    std::fs::write(target.path().join("keep"), b"k").unwrap();
    let link = parent.path().join(format!("inspect-{dead}-1"));
    std::os::unix::fs::symlink(target.path(), &link).unwrap();

    // One whose pid is gone here but whose owner (in another pid namespace) holds its lock.
    let locked = parent.path().join(format!("inspect-{dead}-ffeeddccbbaa9988"));
    std::fs::create_dir(&locked).unwrap();
    let held = open_dir_nofollow(&locked).unwrap();
    flock(&held, libc::LOCK_EX | libc::LOCK_NB).unwrap();

    let fresh = ScratchDir::new_in(parent.path(), "inspect").unwrap();
    assert!(!stale.exists(), "the dead process's copy is swept");
    assert!(locked.is_dir(), "a locked one is in use elsewhere: kept");
    drop(held);
    for kept in [&live, &other, &odd] {
        assert!(kept.is_dir(), "{} is kept", kept.display());
    }
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "a link is never swept");
    assert!(target.path().join("keep").exists(), "nor followed");
    assert!(fresh.path().is_dir());
    assert_eq!(sweep(parent.path(), "inspect"), 1, "once its lock is free, it is stale too");
    assert_eq!(sweep(parent.path(), "inspect"), 0, "nothing stale is left");
}

/// Goal: a journal's scratch goes to the root-only `private/scratch/` beside it when there is
/// one, and to the temporary directory otherwise.
#[test]
fn a_journals_scratch_lives_in_its_private_folder() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join("private")).unwrap();
    std::fs::set_permissions(home.path().join("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let scratch = for_journal(&home.path().join("carma.redb"), "inspect").unwrap();
    let parent = home.path().canonicalize().unwrap().join("private").join(PRIVATE_SCRATCH);
    assert_eq!(scratch.path().parent(), Some(parent.as_path()));
    let meta = std::fs::metadata(&parent).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o700);
    assert_eq!(meta.uid(), crate::access::uid::effective());

    let loose = tempfile::tempdir().unwrap();
    let scratch = for_journal(&loose.path().join("carma.redb"), "inspect").unwrap();
    let temp = std::env::temp_dir().canonicalize().unwrap();
    assert_eq!(scratch.path().parent(), Some(temp.as_path()));
}

/// Goal: a tick sweeps what a killed check left in `private/scratch/`, without waiting for the
/// next check. Method: a stale copy of a dead pid and a live one of ours, then the tick's sweep.
#[test]
fn the_ticks_sweep_of_private_scratch_removes_a_dead_checks_copy() {
    let private = tempfile::tempdir().unwrap();
    let parent = private.path().join(PRIVATE_SCRATCH);
    std::fs::create_dir(&parent).unwrap();
    let stale = parent.join(format!("inspect-{}-0123456789abcdef", dead_pid()));
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("carma.redb"), b"an old copy").unwrap();
    let live = parent.join(format!("inspect-{}-0", std::process::id()));
    std::fs::create_dir(&live).unwrap();
    assert_eq!(sweep_private(private.path()), 1);
    assert!(!stale.exists(), "the dead check's copy is gone");
    assert!(live.is_dir(), "a live process's copy is kept");
    assert_eq!(sweep_private(&private.path().join("none")), 0, "no private/scratch: nothing to do");
}
