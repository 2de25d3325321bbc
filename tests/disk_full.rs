//! A state directory whose filesystem is nearly full: the tick stops starting attempts, says
//! DiskFull in every waiting task's reason and on its own stderr, and still journals, cancels
//! and exits 0; once space is freed, tasks start again.
//!
//! Method: as root, an 8 MiB tmpfs mounted as the state directory's filesystem, filled with a
//! file until less than the configured 4 MiB floor is free (but enough for the journal's
//! commits, which is what the floor keeps), then the real `carma` binary. Without root (or
//! where mounting is not allowed) the test says it skipped.

mod common;

use common::skip::{Need, skip};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::TestHome;
use common::cluster::TWO_A100;

/// The tmpfs, unmounted on drop (lazily, so a failed assertion never leaves it busy).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("needs root to mount a tmpfs".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "needs root to mount a tmpfs (mount said: {})",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Writes zeros into `path` until the filesystem is full, then gives back `leave` bytes.
fn fill(path: &Path, leave: u64) {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    let _ = file.flush();
    let len = file.metadata().unwrap().len();
    file.set_len(len.saturating_sub(leave)).unwrap();
}

fn queue_reason(home: &TestHome, id: &str) -> String {
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--all", "--json"])).unwrap();
    let task = queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).cloned();
    let task = task.unwrap_or_else(|| panic!("{id} in {queue:#}"));
    task["reason"].as_str().unwrap_or_default().to_string()
}

#[test]
fn below_the_free_space_floor_the_tick_starts_nothing_but_keeps_working() {
    let tmpfs = match Tmpfs::mount("8m") {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            return skip(Need::Mount, &why);
        }
    };
    let home = TestHome { dir: tempfile::tempdir_in(tmpfs.path()).unwrap() };
    home.ok(&["init"]);
    std::fs::write(home.gpus_file(), TWO_A100).unwrap();
    home.set_config(&format!(
        "[tick]\ngpus = \"fake:{}\"\n\n[limits]\nfree-space-floor = \"4MiB\"\n",
        home.gpus_file().display()
    ));
    let kept = home.ok(&["submit", "--parsable", "--name", "kept", "--", "true"]).trim().to_string();
    let dropped = home.ok(&["submit", "--parsable", "--name", "dropped", "--", "true"]).trim().to_string();
    let filler: PathBuf = tmpfs.path().join("filler");
    fill(&filler, 2 << 20);

    let out = home.run(&["tick"]);
    assert!(out.status.success(), "the tick works below the floor: {}", common::stderr(&out));
    let said = common::stderr(&out);
    assert!(said.contains("below the 4 MiB free-space-floor: no new attempt starts"), "{said}");
    let home_dir = home.path().display().to_string();
    let reason = format!(
        "DiskFull: less than 4 MiB free in {home_dir}, the [limits] free-space-floor; free space there or lower the floor"
    );
    assert_eq!(queue_reason(&home, &kept), reason);
    assert_eq!(queue_reason(&home, &dropped), reason);

    // Cancels and the journal still work.
    home.ok(&["cancel", &dropped]);
    assert!(home.run(&["tick"]).status.success());
    let kinds: Vec<String> =
        home.events().iter().map(|e| e["kind"].as_str().unwrap_or_default().to_string()).collect();
    assert!(!kinds.iter().any(|k| k == "Placed"), "nothing placed below the floor: {kinds:?}");
    assert!(kinds.iter().any(|k| k == "Cancelled"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "TickCompleted").count(), 2, "{kinds:?}");

    // Space comes back: the waiting task starts.
    std::fs::remove_file(&filler).unwrap();
    let out = home.run(&["tick"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(common::stderr(&out), "", "nothing to say with room");
    let placed = home.events().iter().any(|e| e["kind"] == "Placed" && e["data"]["task"] == kept.as_str());
    assert!(placed, "{:#?}", home.events());
}

/// Goal: once an attempt has ended, its run-folder log is no longer its submitter's to grow
/// (before, it stayed theirs, mode 0600: they could append to it by its path, past
/// log-bytes-max, for ever), yet they still read it with `carma logs`. Method: a throw-away
/// user's task on a root queue; after the tick records its end, the user's append and chmod
/// are refused and `carma logs` shows the output.
#[test]
fn an_ended_attempts_logs_are_no_longer_the_submitters_to_grow() {
    if common::users::skip_without_users() {
        return;
    }
    let queue = common::users::SharedQueue::new();
    let alice = common::users::ThrowawayUser::create("sealal");
    let id =
        queue.ok_as(&alice, &["submit", "--parsable", "--", "sh", "-c", "echo hello"]).trim().to_string();
    queue.home.tick_until_done(std::time::Duration::from_secs(30));
    let log = queue.home.path().join(format!("runs/{id}/1/stdout.log"));
    let append = alice.run("/bin/sh", &["-c", &format!("exec 3>>{}", log.display())], &[], Path::new("/tmp"));
    assert!(!append.status.success(), "alice could still append to her ended attempt's log");
    assert!(common::stderr(&append).contains("Permission denied"), "{}", common::stderr(&append));
    let chmod = alice.run("/bin/chmod", &["600", log.to_str().unwrap()], &[], Path::new("/tmp"));
    assert!(!chmod.status.success(), "alice could take the log back with chmod");
    let meta = std::fs::metadata(&log).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o640));
    assert_eq!(queue.ok_as(&alice, &["logs", &id, "--stdout"]), "hello\n", "alice still reads her log");
}

/// Goal: `quarantine/` is bounded and cleaned every tick: a user's refused junk keeps at most
/// 1 MiB (the newest), an entry older than a week goes, and a directory parked there (a
/// flood) is emptied and removed over a few ticks, however deep. Before, all of it stayed for
/// ever where its owner could not delete it.
#[test]
fn quarantine_is_bounded_and_cleaned() {
    let home = TestHome::new();
    home.ok(&["submit", "--", "true"]); // makes this user's spool folder
    let folder = home.spool();
    let junk: Vec<u8> = (0..100 * 1024).map(|n| (n % 251) as u8).collect();
    for n in 0..30 {
        std::fs::write(folder.join(format!("junk{n:02}")), &junk).unwrap();
    }
    let quarantine = home.path().join("quarantine");
    std::fs::create_dir_all(&quarantine).unwrap();
    std::fs::write(quarantine.join("1000000000000000000-old"), "from 2001").unwrap();
    let deep = quarantine.join("1000000000000000001-spool/a/b/c");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("file"), "x").unwrap();
    for _ in 0..6 {
        home.ok(&["tick"]);
    }
    let mut kept_bytes = 0;
    let mut kept = Vec::new();
    for entry in std::fs::read_dir(&quarantine).unwrap() {
        let entry = entry.unwrap();
        let meta = std::fs::symlink_metadata(entry.path()).unwrap();
        assert!(!meta.is_dir(), "a parked directory is still there: {}", entry.path().display());
        kept_bytes += meta.len();
        kept.push(entry.file_name().to_string_lossy().into_owned());
    }
    assert!(!kept.iter().any(|name| name.ends_with("-old")), "{kept:?}");
    assert!(kept_bytes <= 1 << 20, "quarantine keeps {kept_bytes} bytes of one user's junk: {kept:?}");
    assert!(!kept.is_empty(), "the newest refusals are kept under the bound");
}

/// Goal: below the free-space floor one user's bytes do not stop everyone: the tick first
/// removes quarantine's junk, then holds only the user whose files in the state directory pass
/// `state-bytes-per-user-max` (root here, with a 3 MB log), with a reason that says so, while
/// another user's task starts. Before, every task waited with the queue-wide DiskFull.
#[test]
fn below_the_floor_only_the_user_over_their_bytes_waits() {
    if common::users::skip_without_users() {
        return;
    }
    let tmpfs = match Tmpfs::mount("32m") {
        Ok(tmpfs) => tmpfs,
        Err(why) => return skip(Need::Mount, &why),
    };
    use std::os::unix::fs::PermissionsExt;
    let home = TestHome { dir: tempfile::tempdir_in(tmpfs.path()).unwrap() };
    home.ok(&["init"]);
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(home.gpus_file(), TWO_A100).unwrap();
    home.set_config(&format!(
        "[tick]\ngpus = \"fake:{}\"\n\n[limits]\nfree-space-floor = \"12MiB\"\nfree-space-reserve = \"2MiB\"\nstate-bytes-per-user-max = \"2MiB\"\n",
        home.gpus_file().display()
    ));
    let bin = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = bin.path().join("carma");
    common::copy_carma(&exe);
    home.ok(&["submit", "--", "sh", "-c", "head -c 3000000 /dev/zero"]);
    home.tick_until_done(std::time::Duration::from_secs(30));
    let quarantine = home.path().join("quarantine");
    std::fs::create_dir_all(&quarantine).unwrap();
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    std::fs::write(quarantine.join(format!("{stamp}-junk")), vec![7u8; 1 << 20]).unwrap();

    let alice = common::users::ThrowawayUser::create("dfalice");
    let env = [("CARMA_HOME", home.path().to_str().unwrap()), ("CARMA_LOCK_TIMEOUT", "5s")];
    let out =
        alice.run(exe.to_str().unwrap(), &["submit", "--parsable", "--", "true"], &env, Path::new("/tmp"));
    assert!(out.status.success(), "{}", common::stderr(&out));
    let alices = common::stdout(&out).trim().to_string();
    let roots = home.ok(&["submit", "--parsable", "--", "true"]).trim().to_string();
    fill(&tmpfs.path().join("filler"), 6 << 20);

    let out = home.run(&["tick"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let said = common::stderr(&out);
    assert!(
        said.contains("the tasks of uid 0 (over the 2 MiB state-bytes-per-user-max) wait; the others start while 2 MiB is free"),
        "{said}"
    );
    assert_eq!(std::fs::read_dir(&quarantine).unwrap().count(), 0, "the junk went first");
    assert_eq!(
        queue_reason(&home, &roots),
        format!(
            "DiskFull: less than 12 MiB free in {}, and the submitter's files there hold more than the [limits] state-bytes-per-user-max of 2 MiB; only their tasks wait: remove their old run folders or raise the bound",
            home.path().display()
        )
    );
    let placed = home.events().iter().any(|e| e["kind"] == "Placed" && e["data"]["task"] == alices.as_str());
    assert!(placed, "alice's task starts: {:#?}", home.events());
}
