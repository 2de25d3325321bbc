//! What `carma submit` refuses before it writes anything (issue 21): a spool that holds the
//! queue-wide most entries (`[limits] spool-entries-max`), and a spec, script or `.rad` path
//! that is a FIFO (which a plain open would wait on for ever).

mod common;

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{TestHome, assert_error};

/// Runs `carma args`, failing the test if it has not ended within 10 s (it must never block).
fn run_within(home: &TestHome, args: &[&str]) -> Output {
    let started = Instant::now();
    let mut child =
        home.cmd().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn carma");
    while started.elapsed() < Duration::from_secs(10) {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("carma {args:?} blocked for 10 s");
}

fn waiting(home: &TestHome) -> usize {
    std::fs::read_dir(home.path().join("spool"))
        .unwrap()
        .map(|folder| std::fs::read_dir(folder.unwrap().path()).unwrap().count())
        .sum()
}

/// Goal: past the queue-wide cap, submit refuses in one line with the limit and what to do
/// (exit 5), an array goes in whole or not at all, and once the tick has taken the spool in,
/// submissions go through again.
#[test]
fn the_queue_wide_spool_cap_is_refused_at_submit_in_one_line() {
    let home = TestHome::new();
    home.set_config("[tick]\ngpus = \"none\"\n[limits]\nspool-entries-max = 3\n");
    home.ok(&["submit", "--", "true"]);
    home.ok(&["submit", "--", "true"]);
    assert_eq!(waiting(&home), 2);
    let array = home.run(&["submit", "--array", "0-1", "--", "true"]);
    assert_error(
        &array,
        5,
        "the spool already holds 2 entries waiting for the tick and takes at most 3 ([limits] spool-entries-max), so 2 more cannot go in; wait for the tick to take them in (`carma queue` warns when it has stopped), or ask the queue's admin to raise the limit",
    );
    assert_eq!(waiting(&home), 2, "no member of the refused array was written");
    home.ok(&["submit", "--", "true"]);
    let full = home.run(&["submit", "--", "true"]);
    assert_error(
        &full,
        5,
        "the spool already holds 3 entries waiting for the tick and takes at most 3 ([limits] spool-entries-max), so one more cannot go in; wait for the tick to take them in (`carma queue` warns when it has stopped), or ask the queue's admin to raise the limit",
    );
    home.ok(&["tick"]);
    assert_eq!(waiting(&home), 0, "the tick took the spool in");
    home.ok(&["submit", "--array", "0-1", "--", "true"]);
    assert_eq!(waiting(&home), 2);
}

/// Goal: a FIFO given as the spec (`.toml` or not), a `.rad` file or a job script is refused
/// at once in one line (exit 2), never waited on.
#[test]
fn a_fifo_as_the_spec_is_refused_at_submit_without_blocking() {
    let home = TestHome::new();
    for name in ["job.toml", "job", "job.rad"] {
        let fifo = home.path().join(name);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(made.success());
        let shown = fifo.display().to_string();
        let out = if name.ends_with(".rad") {
            run_within(&home, &["submit", "--rad", &shown])
        } else {
            run_within(&home, &["submit", &shown])
        };
        let expected = if name.ends_with(".rad") {
            format!("{shown}: cannot read .rad file: a FIFO, not a regular file")
        } else {
            format!("{shown}: cannot read spec: a FIFO, not a regular file")
        };
        assert_error(&out, 2, &expected);
    }
    assert_eq!(waiting(&home), 0, "nothing was submitted");
}

/// Goal: another user's flood of their own folder never refuses your `carma submit`: the
/// queue-wide cap counts each user at most at their own cap (10000). Before, mallory's 15000
/// files counted in full against `spool-entries-max = 15000` and alice was refused. Mallory,
/// at her cap, is refused in one line (exit 5); alice's submit goes in.
#[test]
fn another_users_flood_never_refuses_your_submit() {
    if common::users::skip_without_users() {
        return;
    }
    let queue = common::users::SharedQueue::new();
    queue.home.set_config(&format!(
        "[tick]\ngpus = \"fake:{}\"\n[limits]\nspool-entries-max = 15000\n",
        queue.home.gpus_file().display()
    ));
    let (alice, mallory) =
        (common::users::ThrowawayUser::create("flalice"), common::users::ThrowawayUser::create("flmal"));
    // Mallory's folder, made by her first submit, then flooded to past her cap.
    queue.ok_as(&mallory, &["submit", "--", "true"]);
    let folder = queue.home.path().join("spool").join(mallory.uid.to_string());
    for n in 0..15_000 {
        std::fs::write(folder.join(format!("junk{n}.cancel")), "").expect("flood");
    }
    let refused = queue.as_user(&mallory, &["submit", "--", "true"]);
    assert_error(
        &refused,
        5,
        &format!(
            "you already have 10000 entries waiting in {}, the most one user may have; wait for the tick to take them in (`carma queue` warns when it has stopped)",
            folder.display()
        ),
    );
    let out = queue.as_user(&alice, &["submit", "--parsable", "--", "true"]);
    assert!(out.status.success(), "alice was refused: {}", common::stderr(&out));
}
