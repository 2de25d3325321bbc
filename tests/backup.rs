//! `carma journal backup` under a running tick loop (issue 42): a hundred backups taken while
//! `carma tick --every` runs and tasks keep arriving, each checked sound by `carma journal
//! check` on the copy, and nothing lost in the live journal. Real processes throughout: the
//! tick loop, submits and jobs on fake GPUs, and one `carma journal backup` process a backup.

mod common;

/// A child process killed when the test ends, passed or not: a tick loop must not outlive it.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::cluster::TWO_A100;
use common::{TestHome, stderr};

const BACKUPS: usize = 100;
/// Tasks submitted while the backups are taken.
const SUBMISSIONS: usize = 40;

fn task_ids(home: &TestHome) -> BTreeSet<String> {
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--all", "--json"])).unwrap();
    queue["tasks"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_string()).collect()
}

/// Goal: every backup taken while ticks commit is a sound journal, each later one holds at
/// least the records of the one before, and the live journal loses nothing. Fails on the old
/// code (no `journal backup` verb: exit 2).
#[test]
fn a_hundred_backups_under_a_running_tick_loop_are_sound_and_lose_nothing() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let backups = tempfile::tempdir().unwrap();
    let mut ticking = Reaped(home.cmd().args(["tick", "--every", "100ms"]).spawn().unwrap());
    let stop = AtomicBool::new(false);
    let submitted = std::thread::scope(|scope| {
        let submitter = scope.spawn(|| {
            let mut ids = Vec::new();
            // A bounded stream (its tasks run too): a flood would make each check slower and the
            // test a measure of the machine.
            while !stop.load(Ordering::SeqCst) && ids.len() < SUBMISSIONS {
                let out =
                    home.run(&["submit", "--parsable", "--gpus", "1", "--gpu-mem", "1GiB", "--", "true"]);
                assert!(out.status.success(), "{}", stderr(&out));
                ids.push(common::stdout(&out).trim().to_string());
                std::thread::sleep(Duration::from_millis(100));
            }
            ids
        });
        let mut last_seq = 0u64;
        for i in 0..BACKUPS {
            let dest = backups.path().join(format!("b{i:03}"));
            let out = home.run(&["journal", "backup", dest.to_str().unwrap(), "--json"]);
            assert!(out.status.success(), "backup {i}: {}", stderr(&out));
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(report["check"]["sound"], true, "backup {i}: {report:#}");
            let seq = report["check"]["records"]["last_seq"].as_u64().unwrap_or(0);
            assert!(seq >= last_seq, "backup {i} holds seq {seq}, an earlier one held {last_seq}");
            last_seq = seq;
            // Each copy was checked by `carma journal check`'s code (`check` above); every tenth
            // is checked again by the administrator's own command, as a separate process.
            if i % 10 == 9 {
                let journal = dest.join("carma.redb");
                let check = home.run(&["journal", "check", "--journal", journal.to_str().unwrap()]);
                assert!(check.status.success(), "backup {i}: {}", stderr(&check));
            }
        }
        stop.store(true, Ordering::SeqCst);
        assert!(last_seq > 0);
        submitter.join().unwrap()
    });
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(ticking.0.id() as i32, libc::SIGTERM) };
    assert_eq!(ticking.0.wait().unwrap().code(), Some(0));
    home.ok(&["tick"]);
    let live = task_ids(&home);
    for id in &submitted {
        assert!(live.contains(id), "task {id} was submitted during the backups and is in the journal");
    }
    home.ok(&["journal", "check"]);
    // The last backup is a queue that reads: its tasks are the live journal's, fewer or equal.
    let last = backups.path().join(format!("b{:03}", BACKUPS - 1));
    let restored = TestHome::new();
    std::fs::copy(last.join("carma.redb"), restored.path().join("carma.redb")).unwrap();
    std::fs::copy(last.join("private/vault.redb"), restored.path().join("private/vault.redb")).unwrap();
    restored.ok(&["init"]);
    let restored_ids = task_ids(&restored);
    assert!(
        !restored_ids.is_empty() && restored_ids.is_subset(&live),
        "{} of {}",
        restored_ids.len(),
        live.len()
    );
}

/// Goal: a backup never overwrites: an existing folder is refused with a new name to use, and
/// nothing in it changes.
#[test]
fn a_backup_into_an_existing_folder_is_refused() {
    let home = TestHome::new();
    let dest = tempfile::tempdir().unwrap();
    std::fs::write(dest.path().join("carma.redb"), b"mine").unwrap();
    let out = home.run(&["journal", "backup", dest.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let message = stderr(&out);
    let start = format!(
        "error: backup folder {} already exists; a backup never overwrites: give a new folder, e.g. ",
        dest.path().display()
    );
    assert!(message.starts_with(&start), "{message}");
    assert_eq!(std::fs::read(dest.path().join("carma.redb")).unwrap(), b"mine");
    let fresh = dest.path().join("new");
    let text = home.ok(&["journal", "backup", fresh.to_str().unwrap()]);
    assert!(text.contains("check      sound"), "{text}");
}
