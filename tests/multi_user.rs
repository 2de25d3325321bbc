//! A root-owned state directory used by an ordinary user: submit and cancel go through the
//! sticky spool; the job runs as that user; the queue is read from the published view.
//!
//! Runs only as root with `runuser` available (it needs a second user); otherwise it checks
//! that it was skipped for that reason and nothing else.

mod common;

use common::skip::{Need, skip};

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use common::TestHome;
use common::cluster::TWO_A100;

fn can_switch_user() -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    root && Command::new("runuser").arg("--help").output().is_ok_and(|o| o.status.success())
}

#[test]
fn an_ordinary_user_submits_cancels_and_runs_as_themselves() {
    if !can_switch_user() {
        return skip(Need::Users, "needs root with runuser for a second user (run the tests as root)");
    }
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = home.path().join("carma");
    common::copy_carma(&exe);
    let as_nobody = |args: &[&str]| {
        Command::new("runuser")
            .args(["-u", "nobody", "--", exe.to_str().unwrap()])
            .args(args)
            .env("CARMA_HOME", home.path())
            .current_dir("/tmp")
            .output()
            .unwrap()
    };
    let out = as_nobody(&["submit", "--parsable", "--mem", "1GiB", "--", "sh", "-c", "id -u; sleep 1"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let id = common::stdout(&out).trim().to_string();
    let doomed = common::stdout(&as_nobody(&["submit", "--parsable", "--mem", "1GiB", "--", "sleep", "60"]));
    let doomed = doomed.trim();

    home.ok(&["tick"]);
    // An ordinary user reads the queue without any access to the journal or its lock.
    let queue = as_nobody(&["queue"]);
    assert!(queue.status.success(), "{}", common::stderr(&queue));
    assert!(common::stdout(&queue).contains(&id[..8]), "{}", common::stdout(&queue));
    let out = as_nobody(&["cancel", doomed]);
    assert_eq!(
        common::stdout(&out),
        format!("cancel of task {doomed} (sleep) requested; the next tick applies it\n")
    );
    home.tick_until_done(Duration::from_secs(30));
    let log = std::fs::read_to_string(home.path().join(format!("runs/{id}/1/stdout.log"))).unwrap();
    assert_eq!(log.trim(), "65534", "the job ran as its submitter, not as root");
    let show: serde_json::Value = serde_json::from_str(&home.ok(&["show", doomed, "--json"])).unwrap();
    assert_eq!(show["task"]["status"], "Cancelled");
    assert_eq!(show["task"]["submitter_uid"], 65534);
}
