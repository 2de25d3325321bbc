//! Run folders are private: only root and the submitter can read a task's environment, its
//! logs or its exit record, and nobody else can list the task ids.
//!
//! Method: real ticks, supervisors and jobs. As root, a throw-away user (`useradd`, removed
//! at the end) submits to a root queue, and the test checks every mode and owner, then what
//! that user and a second user can and cannot read (`runuser`); then the same user runs a
//! personal queue of their own. Not as root, only the personal queue is checked, as the
//! current user.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use common::TestHome;
use common::cluster::TWO_A100;
use common::users::{ThrowawayUser, can_create_users};

const RUN_FILES: [&str; 8] = [
    "checkpoint",
    "claim.json",
    "exit.json",
    "job.json",
    "plan.json",
    "stderr.log",
    "stdout.log",
    "supervisor.log",
];

fn assert_mode(path: &Path, mode: u32, uid: u32) {
    let meta = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(meta.mode() & 0o7777, mode, "mode of {}: {:o}", path.display(), meta.mode() & 0o7777);
    assert_eq!(meta.uid(), uid, "owner of {}", path.display());
}

/// Every level of the run folder and every file in it, as the module docs of exec::rundir say,
/// after the attempt ended: a root tick has then sealed the logs (exec::seal: root's, 0640,
/// readable by the submitter through an ACL); a personal queue's stay its user's, 0600.
fn assert_layout(runs: &Path, id: &str, dir_mode: u32, owner: u32, submitter: u32) {
    let run_dir = runs.join(id).join("1");
    for dir in [runs.to_path_buf(), runs.join(id), run_dir.clone()] {
        assert_mode(&dir, dir_mode, owner);
    }
    let mut names: Vec<String> =
        std::fs::read_dir(&run_dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    // `bin/` holds the job's `srun` (a link to carma, exec::srun): the run folder's owner's,
    // 0755, so the job may run what is in it and change nothing.
    let mut expected: Vec<&str> = RUN_FILES.to_vec();
    expected.push("bin");
    expected.sort();
    assert_eq!(names, expected, "no other files (temp files) are left");
    assert_mode(&run_dir.join("bin"), 0o755, owner);
    let link = std::fs::read_link(run_dir.join("bin/srun")).expect("bin/srun is a link");
    assert!(
        link.is_absolute() && link.ends_with("carma"),
        "to the carma that supervised it: {}",
        link.display()
    );
    for name in RUN_FILES {
        // The checkpoint file is the submitter's while the attempt runs and sealed with the logs.
        let log = (name.ends_with(".log") && name != "supervisor.log") || name == "checkpoint";
        let (mode, expected_owner) = match (log, owner) {
            (true, 0) => (0o640, 0),
            (true, _) => (0o600, submitter),
            (false, _) => (0o600, owner),
        };
        assert_mode(&run_dir.join(name), mode, expected_owner);
    }
}

#[test]
fn run_folders_are_readable_only_by_root_and_the_submitter() {
    if !can_create_users() {
        personal_queue_of_the_current_user();
        return common::skip::skip(
            common::skip::Need::Users,
            "not root: checked a personal queue only (run the tests as root for the shared layout)",
        );
    }
    let user = ThrowawayUser::create("priv");
    shared_queue(&user);
    personal_queue(&user);
}

fn personal_queue_of_the_current_user() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let id = home.submit_sh("mine", Some("1GiB"), "echo out; echo err >&2");
    home.tick_until_done(Duration::from_secs(30));
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    assert_layout(&home.path().join("runs"), &id, 0o700, me, me);
}

fn shared_queue(user: &ThrowawayUser) {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = home.path().join("carma");
    common::copy_carma(&exe);
    let exe = exe.to_str().unwrap();
    let env = [("CARMA_HOME", home.path().to_str().unwrap())];
    let out = user.run(
        exe,
        &["submit", "--parsable", "--mem", "1GiB", "--", "sh", "-c", "echo out; echo err >&2"],
        &env,
        Path::new("/tmp"),
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let id = common::stdout(&out).trim().to_string();
    home.tick_until_done(Duration::from_secs(30));
    let runs = home.path().join("runs");
    assert_layout(&runs, &id, 0o711, 0, user.uid);

    let as_user = |args: &[&str]| user.run(args[0], &args[1..], &[], Path::new("/tmp"));
    let path = |name: &str| runs.join(&id).join("1").join(name).display().to_string();
    let own_log = as_user(&["cat", &path("stdout.log")]);
    assert_eq!(
        common::stdout(&own_log),
        "out\n",
        "the submitter reads their log: {}",
        common::stderr(&own_log)
    );
    assert_eq!(common::stdout(&as_user(&["cat", &path("stderr.log")])), "err\n");
    for private in ["exit.json", "plan.json", "job.json", "claim.json", "supervisor.log"] {
        let out = as_user(&["cat", &path(private)]);
        assert!(!out.status.success(), "the submitter must not read {private}");
        assert!(common::stderr(&out).contains("Permission denied"), "{}", common::stderr(&out));
    }
    let listing = as_user(&["ls", runs.to_str().unwrap()]);
    assert!(!listing.status.success(), "task ids must not be listable: {}", common::stdout(&listing));
    let stranger = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--", "cat", &path("stdout.log")])
        .output()
        .unwrap();
    assert!(!stranger.status.success(), "another user must not read the log");
}

fn personal_queue(user: &ThrowawayUser) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("carma");
    common::copy_carma(&exe);
    let gpus = dir.path().join("gpus.json");
    std::fs::write(&gpus, TWO_A100).unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(user.uid), Some(user.gid)).unwrap();
    let env = [("CARMA_HOME", home.to_str().unwrap()), ("CARMA_LOCK_TIMEOUT", "5s")];
    let carma = |args: &[&str]| {
        let out = user.run(exe.to_str().unwrap(), args, &env, Path::new("/tmp"));
        assert!(out.status.success(), "carma {args:?} as {}: {}", user.name, common::stderr(&out));
        common::stdout(&out)
    };
    carma(&["init"]);
    std::fs::write(home.join("config.toml"), format!("[tick]\ngpus = \"fake:{}\"\n", gpus.display()))
        .unwrap();
    let id = carma(&["submit", "--parsable", "--mem", "1GiB", "--", "sh", "-c", "echo out; echo err >&2"]);
    let id = id.trim();
    let started = Instant::now();
    loop {
        carma(&["tick"]);
        let show: serde_json::Value = serde_json::from_str(&carma(&["show", id, "--json"])).unwrap();
        if show["task"]["status"] == "Finished" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{show:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_layout(&home.join("runs"), id, 0o700, user.uid, user.uid);
}
