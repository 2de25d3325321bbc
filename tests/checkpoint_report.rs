//! A job says when it checkpointed, and the tick journals it.
//!
//! Goal: a job on a root-owned queue reports checkpoints by touching `$CARMA_CHECKPOINT_FILE`
//! or by running `carma checkpointed`; each report becomes one `Checkpointed` record for its
//! attempt, however often the job touched the file between two ticks; the job cannot swap the
//! file for a link (the run folder is root's); `carma checkpointed` outside a job is a one-line
//! usage error.
//! Method: the real binary, real `carma tick`s, a real job run as a throw-away user on fake
//! GPUs; the job waits for files the test creates, so each step is one tick apart.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use common::cluster::TWO_A100;
use common::users::{SharedQueue, ThrowawayUser, skip_without_users};
use common::{TestHome, assert_error};

/// The job: writes into its checkpoint file and touches it twice, tries to replace it with a
/// link, then reports once more with `carma checkpointed` when told to (`go`), and ends when
/// told to (`end`).
const JOB: &str = "#!/bin/sh
#CARMA -J ckpt
echo junk >> \"$CARMA_CHECKPOINT_FILE\"
touch \"$CARMA_CHECKPOINT_FILE\"
touch \"$CARMA_CHECKPOINT_FILE\"
if ln -sf /etc/shadow \"$CARMA_CHECKPOINT_FILE\" 2>/dev/null; then echo replaced; else echo cannot replace; fi
while [ ! -e @DIR@/go ]; do sleep 0.1; done
@CARMA@ checkpointed && echo reported
while [ ! -e @DIR@/end ]; do sleep 0.1; done
";

fn checkpointed(queue: &SharedQueue, id: &str) -> Vec<u64> {
    let events = queue.home.events();
    let mine = events.iter().filter(|e| e["kind"] == "Checkpointed" && e["data"]["task"] == id);
    mine.map(|e| e["data"]["attempt"].as_u64().unwrap_or(0)).collect()
}

/// Ticks until the task has `count` Checkpointed records, at most 30 s.
fn tick_until_checkpoints(queue: &SharedQueue, id: &str, count: usize) -> Vec<u64> {
    let started = Instant::now();
    loop {
        queue.home.ok(&["tick"]);
        let seen = checkpointed(queue, id);
        if seen.len() >= count {
            return seen;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let home = queue.home.path();
            let log = |name: &str| std::fs::read_to_string(home.join(format!("runs/{id}/1/{name}")));
            let events = queue.home.ok(&["events", "--task", id]);
            panic!(
                "{count} checkpoints not seen: {seen:?}\n{events}\n{:?}\n{:?}",
                log("stdout.log"),
                log("stderr.log")
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_job_reports_checkpoints_and_each_becomes_one_record() {
    if skip_without_users() {
        return;
    }
    let queue = SharedQueue::new();
    let alice = ThrowawayUser::create("ckpt");
    let dir = queue.home.path().join("signals");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = JOB.replace("@DIR@", dir.to_str().unwrap()).replace("@CARMA@", queue.exe.to_str().unwrap());
    let script = queue.home.path().join("ckpt.sh");
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let id = queue.ok_as(&alice, &["submit", "--parsable", script.to_str().unwrap()]).trim().to_string();

    // Two touches before the tick sees them: one record.
    assert_eq!(tick_until_checkpoints(&queue, &id, 1), [1]);
    for _ in 0..3 {
        queue.home.ok(&["tick"]);
    }
    assert_eq!(checkpointed(&queue, &id), [1], "a report is journaled once");
    let shown = queue.home.ok(&["show", &id]);
    assert!(shown.contains("\n            last checkpoint reported 20"), "{shown}");
    let file = queue.home.path().join(format!("runs/{id}/1/checkpoint"));
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert!(meta.file_type().is_file(), "still the file carma made");
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (alice.uid, 0o600));

    std::fs::write(dir.join("go"), "").unwrap();
    assert_eq!(tick_until_checkpoints(&queue, &id, 2), [1, 1], "carma checkpointed reports again");
    std::fs::write(dir.join("end"), "").unwrap();
    let started = Instant::now();
    let state = |queue: &SharedQueue| {
        let tasks = queue.queue()["tasks"].as_array().unwrap().clone();
        tasks.iter().find(|t| t["id"] == id.as_str()).map(|t| t["state"].clone())
    };
    while state(&queue) != Some("Finished".into()) {
        assert!(started.elapsed() < Duration::from_secs(30), "the job did not end");
        queue.home.ok(&["tick"]);
        std::thread::sleep(Duration::from_millis(300));
    }
    let log = std::fs::read_to_string(queue.home.path().join(format!("runs/{id}/1/stdout.log"))).unwrap();
    assert_eq!(log, "cannot replace\nreported\n");
    assert_eq!(checkpointed(&queue, &id), [1, 1]);
    // Sealed with the logs once the attempt ended: root's, and what the job wrote into it gone.
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert_eq!((meta.uid(), meta.len()), (0, 0));
}

#[test]
fn carma_checkpointed_outside_a_job_is_a_usage_error() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let out = home.cmd().arg("checkpointed").env_remove("CARMA_CHECKPOINT_FILE").output().unwrap();
    assert_error(
        &out,
        2,
        "not inside a carma job: CARMA_CHECKPOINT_FILE is not set\nhint: run carma checkpointed from the job itself, once its checkpoint is written",
    );
    let out = home
        .cmd()
        .arg("checkpointed")
        .env("CARMA_CHECKPOINT_FILE", "/nonexistent/checkpoint")
        .output()
        .unwrap();
    assert_error(
        &out,
        1,
        "cannot report a checkpoint through /nonexistent/checkpoint: No such file or directory (os error 2)\nhint: CARMA_CHECKPOINT_FILE must name the file carma made for this attempt",
    );
}
