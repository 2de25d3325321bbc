//! Output path templates, supervisor side: the real `carma run-task` opens user-chosen
//! stdout/stderr files as the submitter.
//!
//! Goal: the file is created where asked, with the job's output, owned by the submitter,
//! mode 0600; OOM detection works on a template path; a FIFO without a reader fails at once
//! with a one-line reason instead of hanging; a path the submitter cannot write (or a link
//! the submitter planted towards a root file) fails with a one-line reason and touches
//! nothing; one file for both streams keeps both. Method: a plan written with
//! `AttemptPlan::write_atomic` into a run dir of an initialised home, then `carma run-task`.
//! As root the job belongs to a throw-away user (`useradd`, removed at the end); otherwise
//! to the current user, and the root-only cases are skipped with a message.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use carma::exec::{
    AttemptPlan, ExitOutcome, ExitRecord, create_run_dir, expand_output_template, read_exit_record,
};
use common::TestHome;
use common::users::{ThrowawayUser, can_create_users};

/// Who the jobs run as, and a directory of theirs to write into.
struct Submitter {
    uid: u32,
    gid: u32,
    name: String,
    _user: Option<ThrowawayUser>,
    _dir: tempfile::TempDir,
    own_dir: PathBuf,
}

fn submitter() -> Submitter {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let own_dir = dir.path().join("mine");
    std::fs::create_dir(&own_dir).unwrap();
    if can_create_users() {
        let user = ThrowawayUser::create("out");
        std::os::unix::fs::chown(&own_dir, Some(user.uid), Some(user.gid)).unwrap();
        std::fs::set_permissions(&own_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        return Submitter {
            uid: user.uid,
            gid: user.gid,
            name: user.name.clone(),
            _user: Some(user),
            _dir: dir,
            own_dir,
        };
    }
    // SAFETY: geteuid and getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let name = carma::access::users::name_of(uid).unwrap_or_else(|| "me".into());
    Submitter { uid, gid, name, _user: None, _dir: dir, own_dir }
}

/// Write the plan for `sh -c script` with the given output paths and run its supervisor.
fn run(
    home: &TestHome,
    task_id: &str,
    who: &Submitter,
    script: &str,
    stdout_path: Option<PathBuf>,
    stderr_path: Option<PathBuf>,
) -> (ExitRecord, Output, Duration) {
    let run_dir = create_run_dir(home.path(), task_id, 1).unwrap();
    let plan = AttemptPlan {
        task_id: task_id.into(),
        attempt: 1,
        argv: vec!["sh".into(), "-c".into(), script.into()],
        env: BTreeMap::new(),
        workdir: who.own_dir.clone(),
        uid: who.uid,
        gid: None,
        gpu_uuids: vec![],
        mps_mem_limit_mib: None,
        time_limit_ms: None,
        stdout_path,
        stderr_path,
        script: None,
    };
    plan.write_atomic(&run_dir).unwrap();
    let started = Instant::now();
    let out = home.cmd().args(["run-task", task_id, "--attempt", "1"]).output().unwrap();
    let took = started.elapsed();
    assert!(out.status.success(), "run-task: {}", common::stderr(&out));
    (read_exit_record(&run_dir).unwrap().expect("exit.json"), out, took)
}

fn template(who: &Submitter, task_id: &str, text: &str) -> PathBuf {
    expand_output_template(text, task_id, 1, "train", &who.name, &who.own_dir).unwrap()
}

fn not_started(record: &ExitRecord) -> &str {
    match &record.outcome {
        ExitOutcome::SpawnFailed { reason } => reason,
        other => panic!("expected SpawnFailed, got {other:?}"),
    }
}

#[test]
fn output_templates_are_opened_as_the_submitter() {
    let home = TestHome::new();
    let who = submitter();

    // Created where asked, with the output, the submitter's, 0600; OOM found on --error.
    let out_path = template(&who, "0out1", "%x-%j.%a.out");
    let err_path = template(&who, "0out1", "%u.err");
    assert_eq!(out_path, who.own_dir.join("train-0out1.1.out"));
    let oom = "echo hello; echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1";
    let (record, _, _) = run(&home, "0out1", &who, oom, Some(out_path.clone()), Some(err_path.clone()));
    assert_eq!(record.outcome, ExitOutcome::Exited { code: 1 });
    assert_eq!(record.oom.map(|e| e.signature), Some("torch.OutOfMemoryError".to_string()));
    assert_eq!(std::fs::read_to_string(&out_path).unwrap(), "hello\n");
    for path in [&out_path, &err_path] {
        let meta = std::fs::metadata(path).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (who.uid, who.gid),
            "{} belongs to the submitter",
            path.display()
        );
        assert_eq!(meta.mode() & 0o777, 0o600, "{}", path.display());
    }
    let run_dir = home.path().join("runs/0out1/1");
    assert!(!run_dir.join("stdout.log").exists() && !run_dir.join("stderr.log").exists());

    // One file for both streams keeps both, in order.
    let both = who.own_dir.join("both.log");
    let (record, _, _) =
        run(&home, "0out2", &who, "echo a; echo b >&2; echo c", Some(both.clone()), Some(both.clone()));
    assert_eq!(record.outcome, ExitOutcome::Exited { code: 0 });
    assert_eq!(std::fs::read_to_string(&both).unwrap(), "a\nb\nc\n");

    // A device is fine; the OOM scan says it skipped it.
    let (record, out, _) = run(&home, "0out3", &who, "echo gone", Some("/dev/null".into()), None);
    assert_eq!(record.outcome, ExitOutcome::Exited { code: 0 });
    assert!(
        common::stderr(&out).contains("OOM scan of /dev/null skipped: not a regular file"),
        "{}",
        common::stderr(&out)
    );
}

#[test]
fn unusable_output_paths_fail_cleanly() {
    let home = TestHome::new();
    let who = submitter();
    let uid = who.uid;

    // A FIFO nobody reads: refused at once, not a supervisor blocked in open(2).
    let fifo = who.own_dir.join("pipe");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::chown(&fifo, Some(who.uid), Some(who.gid)).unwrap();
    let (record, _, took) = run(&home, "0bad1", &who, "echo never", Some(fifo.clone()), None);
    assert_eq!(
        not_started(&record),
        format!(
            "cannot open the job's stdout file {} as uid {uid}: it is a FIFO that nobody is reading; choose a path that uid {uid} can write",
            fifo.display()
        )
    );
    assert!(took < Duration::from_secs(5), "the supervisor hung on the FIFO for {took:?}");

    // A directory the submitter cannot write (root without useradd can write anywhere).
    if uid != 0 {
        let locked = tempfile::tempdir().unwrap();
        std::fs::set_permissions(locked.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
        let denied = locked.path().join("err.txt");
        let (record, _, _) = run(&home, "0bad2", &who, "echo never", None, Some(denied.clone()));
        let reason = not_started(&record);
        assert_eq!(
            reason,
            format!(
                "cannot open the job's stderr file {} as uid {uid}: Permission denied (os error 13); choose a path that uid {uid} can write",
                denied.display()
            )
        );
        assert!(!denied.exists());
        let log = std::fs::read_to_string(home.path().join("runs/0bad2/1/stderr.log")).unwrap();
        assert_eq!(
            log,
            format!("carma: the job did not start: {reason}\n"),
            "the reason is in the run folder's log too"
        );
    }

    if !can_create_users() {
        eprintln!("skipped the link case: needs root and useradd (run the tests as root)");
        return;
    }
    // A link the submitter planted towards a root-only file: opened as the submitter, so
    // refused, and the file keeps its content.
    let vault = tempfile::tempdir().unwrap();
    let precious = vault.path().join("precious");
    std::fs::write(&precious, "keep me\n").unwrap();
    std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o644)).unwrap();
    let link = who.own_dir.join("link.out");
    std::os::unix::fs::symlink(&precious, &link).unwrap();
    let (record, _, _) = run(&home, "0bad3", &who, "echo overwritten", Some(link.clone()), None);
    assert!(not_started(&record).contains("Permission denied"), "{record:?}");
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me\n");
    assert_eq!(Path::new(&precious).metadata().unwrap().uid(), 0);
}
