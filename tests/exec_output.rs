//! Output path templates, supervisor side: the real `carma run-task` opens user-chosen
//! stdout/stderr files as the submitter.
//!
//! Goal: the file is created where asked, with the job's output, owned by the submitter,
//! mode 0600; OOM detection works on a template path; a FIFO without a reader fails at once
//! with a one-line reason instead of hanging; a path the submitter cannot write (or a link
//! the submitter planted towards a root file) fails with a one-line reason and touches
//! nothing; one file for both streams keeps both; run-folder logs stay under
//! `log-bytes-max` and keep their end, user-chosen files are not capped. Method: a plan written with
//! `AttemptPlan::write_atomic` into a run dir of an initialised home, then `carma run-task`.
//! As root the job belongs to a throw-away user (`useradd`, removed at the end); otherwise
//! to the current user, and the root-only cases are skipped with a message.

mod common;

use common::skip::{Need, skip};

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
    run_plan(home, plan(task_id, who, script, stdout_path, stderr_path))
}

/// The plan for `sh -c script`, uncapped.
fn plan(
    task_id: &str,
    who: &Submitter,
    script: &str,
    stdout_path: Option<PathBuf>,
    stderr_path: Option<PathBuf>,
) -> AttemptPlan {
    AttemptPlan {
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
        log_bytes_max: None,
        signal: None,
        interactive: None,
        host_limits: Default::default(),
        gpu_watch: None,
    }
}

/// Write `plan` into its run dir and run its supervisor.
fn run_plan(home: &TestHome, plan: AttemptPlan) -> (ExitRecord, Output, Duration) {
    let run_dir = create_run_dir(home.path(), &plan.task_id, 1).unwrap();
    plan.write_atomic(&run_dir).unwrap();
    let started = Instant::now();
    let out = home.cmd().args(["run-task", &plan.task_id, "--attempt", "1"]).output().unwrap();
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
        return skip(Need::Users, "the link case needs root and useradd (run the tests as root)");
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

const CAP: u64 = 64 * 1024;
const NOTE_START: &str = "carma: output truncated at 64 KiB (log-bytes-max): ";

/// The one note in a capped log, and the count of dropped bytes it gives.
fn note_count(text: &str) -> u64 {
    let notes: Vec<&str> = text.lines().filter(|line| line.starts_with("carma: output truncated")).collect();
    assert_eq!(notes.len(), 1, "one note: {notes:?}");
    let count = notes[0].strip_prefix(NOTE_START).and_then(|rest| rest.strip_suffix(" bytes dropped here"));
    count.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("note {:?}", notes[0]))
}

/// Goal: a job that writes far more than `log-bytes-max` (64 KiB here) ends with each
/// run-folder log at most the cap, note included: its first bytes, one note with the dropped
/// count, and its last bytes, so the OOM message printed at the very end of stderr is still
/// found; its exit status is its own; the exit record says what was dropped. A job under the
/// cap keeps its output byte for byte, and a user-chosen file is not capped. Method: real
/// supervisors running `head -c` of `yes` (tens of MB at full speed) with a capped plan.
#[test]
fn run_folder_logs_are_capped_and_keep_their_end() {
    let home = TestHome::new();
    let who = submitter();
    let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
    let script = format!(
        "yes out | head -c 30000000; yes err | head -c 30000000 >&2; echo '{oom}' >&2; echo last; exit 3"
    );
    let capped = AttemptPlan { log_bytes_max: Some(CAP), ..plan("0cap1", &who, &script, None, None) };
    let (record, _, _) = run_plan(&home, capped);
    assert_eq!(record.outcome, ExitOutcome::Exited { code: 3 }, "the job's own status");
    assert_eq!(record.oom.map(|e| e.signature), Some("torch.OutOfMemoryError".to_string()));
    let run_dir = home.path().join("runs/0cap1/1");
    let mut counts = Vec::new();
    for (name, line, end) in
        [("stdout.log", "out\n", "out\nlast\n".to_string()), ("stderr.log", "err\n", format!("err\n{oom}\n"))]
    {
        let text = std::fs::read_to_string(run_dir.join(name)).unwrap();
        assert!(text.len() as u64 <= CAP, "{name} has {} bytes", text.len());
        assert!(text.starts_with(&line.repeat(1000)), "{name} keeps its head");
        assert!(text.ends_with(&end), "{name} keeps its end: {:?}", &text[text.len() - 100..]);
        let count = note_count(&text);
        assert!((29_000_000..30_000_000).contains(&count), "{name}: {count} bytes dropped");
        counts.push(count);
    }
    assert_eq!(
        record.output_truncated,
        Some(format!(
            "stdout.log truncated at 64 KiB (log-bytes-max), {} bytes dropped; stderr.log truncated at 64 KiB (log-bytes-max), {} bytes dropped",
            counts[0], counts[1]
        ))
    );

    // Under the cap: untouched, nothing recorded.
    let quiet = AttemptPlan {
        log_bytes_max: Some(CAP),
        ..plan("0cap2", &who, "echo hello; echo oops >&2", None, None)
    };
    let (record, _, _) = run_plan(&home, quiet);
    assert_eq!(record.output_truncated, None);
    assert_eq!(std::fs::read_to_string(home.path().join("runs/0cap2/1/stdout.log")).unwrap(), "hello\n");
    assert_eq!(std::fs::read_to_string(home.path().join("runs/0cap2/1/stderr.log")).unwrap(), "oops\n");

    // A file of the submitter's choosing is on their storage: not capped.
    let mine = who.own_dir.join("big.out");
    let big = plan("0cap3", &who, "yes mine | head -c 200000", Some(mine.clone()), None);
    let (record, _, _) = run_plan(&home, AttemptPlan { log_bytes_max: Some(CAP), ..big });
    assert_eq!(record.output_truncated, None);
    assert_eq!(std::fs::metadata(&mine).unwrap().len(), 200_000);
}

/// Goal: a job that writes as fast as it can for as long as it runs (`yes`) is held near the
/// cap while it runs, not only trimmed at its end: a log may pass the cap only by what one
/// poll interval lets through. Method: `yes` stopped at a 2 s time limit, the log's size
/// sampled while it runs.
#[test]
fn a_job_writing_in_a_loop_stays_near_the_cap_while_it_runs() {
    let home = TestHome::new();
    let who = submitter();
    let forever = AttemptPlan {
        log_bytes_max: Some(CAP),
        time_limit_ms: Some(2000),
        ..plan("0cap4", &who, "exec yes", None, None)
    };
    let log = home.path().join("runs/0cap4/1/stdout.log");
    let watcher = std::thread::spawn(move || {
        let mut largest = 0;
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(1800) {
            largest = largest.max(std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0));
            std::thread::sleep(Duration::from_millis(5));
        }
        largest
    });
    let (record, _, _) = run_plan(&home, forever);
    let largest = watcher.join().unwrap();
    assert_eq!(record.outcome, ExitOutcome::TimeLimit);
    let text = std::fs::read_to_string(home.path().join("runs/0cap4/1/stdout.log")).unwrap();
    assert!(text.len() as u64 <= CAP, "{} bytes at the end", text.len());
    let dropped = note_count(&text);
    assert!(dropped > 1_000_000, "yes wrote more than a MB in 2 s");
    // One 50 ms poll of a 2 s run is a 40th of what was written; a quarter leaves room for a
    // loaded machine and still fails when only the final trim runs.
    assert!(largest < dropped / 4, "the log reached {largest} bytes while the job ran ({dropped} dropped)");
}
