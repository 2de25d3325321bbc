//! Issue 33: the daily-path defects of a Slurm user's tryout, each with its exact output and
//! exit code.
//!
//! Goal: cancel chooses tasks as scancel does and reads `carma queue`'s ids from a pipe;
//! `events -f` starts as `tail -f`; `--since` takes a clock time; a user's `tick` or
//! `journal check` of root's queue says who ticks it; `--dependency singleton` is refused by
//! name; `show`, `update`, the workdir, `report --user`, `logs -f` and a dependency's cancel
//! say what they mean.
//! Method: the real binary on a state directory with two fake GPUs, real job processes; a
//! throw-away user where another user is needed.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::users::{SharedQueue, ThrowawayUser, skip_without_users};
use common::{TestHome, assert_error, stderr, stdout};

fn home() -> TestHome {
    TestHome::with_fake_gpus(common::cluster::TWO_A100, "magm")
}

/// A task that waits an hour for its begin time, so it stays in the queue.
fn later(home: &TestHome, name: &str) -> String {
    let args = ["submit", "--parsable", "--begin", "now+1hour", "-J", name, "--", "true"];
    home.ok(&args).trim().to_string()
}

/// What a long-running carma command printed in `run_for`, then killed.
fn for_a_while(home: &TestHome, args: &[&str], run_for: Duration) -> (String, String) {
    let mut child =
        home.cmd().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("carma");
    std::thread::sleep(run_for);
    child.kill().expect("kill");
    let out = child.wait_with_output().expect("output");
    (stdout(&out), stderr(&out))
}

/// Defect 5: scancel's filters (`--me`, `--name`, `--state`), `queue --noheader`, and
/// `carma queue --me -o id | xargs carma cancel`, whose header and notes used to reach cancel.
#[test]
fn cancel_chooses_tasks_as_scancel_and_reads_the_queues_ids() {
    let home = home();
    let (a, b, c) = (later(&home, "sweep-a"), later(&home, "sweep-b"), later(&home, "other"));
    home.ok(&["tick"]);
    assert_eq!(
        home.ok(&["cancel", "--name", "sweep-*", "--state", "pending"]),
        format!("cancelled task {a} (sweep-a)\ncancelled task {b} (sweep-b)\n")
    );
    // The rows alone: no header, and the notes under the table go to stderr.
    let short = home.ok(&["queue", "--noheader", "-o", "id"]);
    assert!(c.starts_with(short.trim()) && short.lines().count() == 1, "{short}");
    assert_eq!(home.ok(&["queue", "-o", "id"]), format!("ID\n{short}"));
    let pipeline = format!("{0} queue --me -o id | xargs {0} cancel", env!("CARGO_BIN_EXE_carma"));
    let out = Command::new("sh").args(["-c", &pipeline]).env("CARMA_HOME", home.path()).output().expect("sh");
    assert_eq!(stdout(&out), format!("cancelled task {c} (other)\n"), "{}", stderr(&out));
    assert!(out.status.success());
    // Nothing left: the note is not a row.
    let out = home.run(&["queue", "-o", "id"]);
    assert_eq!(
        (stdout(&out).as_str(), stderr(&out).as_str()),
        ("", "no tasks waiting or running (use --all for finished ones)\n")
    );
    assert_eq!(home.ok(&["cancel", "--me"]), "no waiting or running task matches; nothing to cancel\n");
    assert_error(
        &home.run(&["cancel"]),
        2,
        "nothing to cancel: give task ids, or choose tasks with --me, --user, --state or --name",
    );
}

/// Defect 6: `events -f` printed the whole journal before following; it prints the last 10
/// events, as `tail -f`. Defect 11: `--since 11:40:20` was refused.
#[test]
fn events_follow_from_the_last_ten_and_since_takes_a_clock_time() {
    let home = home();
    for i in 0..8 {
        later(&home, &format!("t{i}"));
    }
    home.ok(&["tick"]);
    let all = home.ok(&["events"]);
    assert!(all.lines().count() > 10, "{all}");
    let (followed, _) = for_a_while(&home, &["events", "-f"], Duration::from_millis(1500));
    let last_ten: Vec<&str> = all.lines().skip(all.lines().count() - 10).collect();
    assert_eq!(followed.lines().collect::<Vec<_>>(), last_ten);
    // A clock time a minute from now is yesterday's: every event of this test is after it.
    let clock = Command::new("date").args(["-d", "now + 1 minute", "+%H:%M:%S"]).output().unwrap();
    let clock = stdout(&clock).trim().to_string();
    assert_eq!(home.ok(&["events", "--since", &clock]), all);
    assert_error(
        &home.run(&["events", "--since", "soon"]),
        2,
        "--since \"soon\" is neither a sequence number, a duration nor a time; use e.g. 120, 10m, 11:40:20 or 2026-11-25T20:00:00Z",
    );
}

/// Defect 8: a user's `carma tick` or `journal check` on root's queue got "Permission denied
/// (os error 13)" and no next step; now one line says who ticks it, exit 77.
#[test]
fn a_users_tick_or_check_of_roots_queue_says_who_ticks_it() {
    if skip_without_users() {
        return;
    }
    let lab = SharedQueue::new();
    let user = ThrowawayUser::create("dpt");
    let root = lab.home.path().display().to_string();
    assert_error(
        &lab.as_user(&user, &["tick"]),
        77,
        &format!(
            "cannot tick the queue in {root}: only its owner writes its journal, and root's timer ticks the system queue (carma-tick.timer); your tasks move without you: `carma queue --me` shows them, and an administrator checks the timer with `systemctl status carma-tick.timer`"
        ),
    );
    assert_error(
        &lab.as_user(&user, &["journal", "check"]),
        77,
        &format!(
            "cannot check journal {root}/carma.redb: only its owner may read it (root, for the system queue); read the queue with `carma queue` and `carma events`, or ask an administrator to run `sudo carma journal check`"
        ),
    );
}

/// Defects 7, 9 and 11: singleton is refused by name; an attempt alone on an idle GPU is
/// "shareable", not "shared"; the workdir has no `./.`; update answers in GiB.
#[test]
fn show_update_workdir_and_singleton_say_what_they_mean() {
    let home = home();
    assert_error(
        &home.run(&["submit", "--dependency", "singleton", "--", "true"]),
        2,
        "singleton (one running task per name) is not supported; name the task to wait for: --after ID",
    );
    let out = home
        .cmd()
        .current_dir(home.path())
        .args(["submit", "--parsable", "--workdir", "./.", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    home.tick_until_done(Duration::from_secs(60));
    let shown = home.ok(&["show", &id]);
    let workdir = shown.lines().find(|l| l.starts_with("workdir")).unwrap();
    assert_eq!(workdir, format!("workdir     {}", home.path().display()));
    let attempt = shown.lines().find(|l| l.starts_with("attempt 1")).unwrap();
    assert!(attempt.contains(" (shareable), launched "), "{attempt}");
    assert!(shown.contains("placed: idle: GPU0 idle (exclusive first)"), "{shown}");
    let waiting = later(&home, "w");
    home.ok(&["tick"]);
    assert_error(
        &home.run(&["update", &waiting, "--mem", "64GiB"]),
        2,
        "memory 64.0 GiB per GPU is more than the largest GPU here has (40.0 GiB); ask for at most 40.0 GiB",
    );
}

/// Defect 11: `report --user U` showed the queue's energy and GPUs as if they were U's;
/// `logs -f` on a waiting task said nothing; a dependency's cancel read "by root".
#[test]
fn report_logs_and_dependency_cancels_say_whose_and_why() {
    let home = home();
    let failing = home.ok(&["submit", "--parsable", "--", "false"]).trim().to_string();
    let after = home.ok(&["submit", "--parsable", "--after", &failing, "--", "true"]).trim().to_string();
    home.tick_until_done(Duration::from_secs(60));
    let events = home.ok(&["events", "--task", &after, "--kind", "Cancelled"]);
    assert!(
        events.trim_end().ends_with(&format!("{after} by carma: dependency afterok {failing} failed")),
        "{events}"
    );
    let report = home.ok(&["report", "--user", "root"]);
    let lines: Vec<&str> = report.lines().collect();
    let makespan = lines.iter().find(|l| l.starts_with("  makespan ")).expect("a makespan line");
    assert!(makespan.ends_with(" (root's tasks only)"), "{report}");
    assert!(report.contains("\n  whole queue, not only root's: energy "), "{report}");
    assert!(
        report.contains(
            "\n  GPU  UUID                  energy MJ  SM active  memory used  mean power (whole queue)\n"
        ),
        "{report}"
    );
    let everyone = home.ok(&["report"]);
    assert!(!everyone.contains("whole queue") && !everyone.contains("tasks only"), "{everyone}");
    let waiting = later(&home, "w");
    home.ok(&["tick"]);
    let (out, err) = for_a_while(&home, &["logs", "-f", &waiting], Duration::from_millis(1500));
    assert_eq!(out, "");
    let prefix = format!("carma logs: task {waiting} has not started (BeginTime: starts at ");
    assert!(err.starts_with(&prefix), "{err}");
    assert!(err.ends_with(" (in 60 min)); its output follows once it does (Ctrl-C stops)\n"), "{err}");
    assert_eq!(err.lines().count(), 1, "said once: {err}");
}
