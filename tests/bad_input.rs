//! Bad input gets a clear one-line error, a distinct exit code, and loses nothing.
//!
//! Each test drives the real binary and checks the exact message and exit code, then
//! checks that what was journaled before is still there.

mod common;

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;

use common::{TestHome, assert_error, stdout};

fn write(home: &TestHome, name: &str, text: &str) -> String {
    let path = home.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Submits and ingests one good task so every test can check it survives.
fn queued_task(home: &TestHome) -> String {
    let id = home.ok(&["submit", "--parsable", "--name", "keep", "--", "true"]).trim().to_string();
    home.ok(&["tick"]);
    id
}

fn assert_still_queued(home: &TestHome, id: &str) {
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--json"])).unwrap();
    let ids: Vec<&str> =
        queue["tasks"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [id], "the task queued before the bad input is still there");
}

#[test]
fn truncated_spec_file() {
    let home = TestHome::new();
    let id = queued_task(&home);
    let path = write(&home, "job.toml", "name = \"x\"\ncommand = [\"python\", ");
    let out = home.run(&["submit", &path]);
    assert_error(
        &out,
        2,
        &format!(
            "{path}:2: unclosed array, expected `]`; fix the spec (format: schema/task-spec.schema.json)"
        ),
    );
    assert_still_queued(&home, &id);
}

#[test]
fn malformed_spec_file() {
    let home = TestHome::new();
    let path = write(&home, "job.toml", "name = \"x\"\ncommand = \"python train.py\"\n");
    let out = home.run(&["submit", &path]);
    assert_error(
        &out,
        2,
        &format!(
            "{path}:2: invalid type: string \"python train.py\", expected a sequence; fix the spec (format: schema/task-spec.schema.json)"
        ),
    );
}

#[test]
fn unknown_field() {
    let home = TestHome::new();
    let path = write(&home, "job.toml", "name = \"x\"\ncommand = [\"a\"]\ngpu = 2\n");
    let out = home.run(&["submit", &path]);
    assert_eq!(out.status.code(), Some(2));
    let err = common::stderr(&out);
    assert!(
        err.starts_with(&format!("error: {path}:3: unknown field `gpu`, expected one of `name`, `command`")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

#[test]
fn zero_negative_and_too_many_gpus() {
    let home = TestHome::new();
    let id = queued_task(&home);
    let out = home.run(&["submit", "--gpus", "0", "--", "true"]);
    assert_error(&out, 2, "command line: gpus = 0: a task needs at least 1 GPU");
    let out = home.run(&["submit", "--gpus", "-1", "--", "true"]);
    assert_error(&out, 2, "command line: gpus = -1: a task needs at least 1 GPU");
    // The tick records the machine's GPUs; here we write the inventory a 2-GPU tick leaves.
    let inventory = r#"{"schema":"carma.inventory/1","updated_ms":0,"gpus":[
        {"index":0,"uuid":"GPU-a","name":"A100","memory_total_mib":40960},
        {"index":1,"uuid":"GPU-b","name":"A100","memory_total_mib":40960}]}"#;
    std::fs::write(home.path().join("inventory.json"), inventory).unwrap();
    let out = home.run(&["submit", "--gpus", "3", "--", "true"]);
    assert_error(&out, 2, "command line: gpus = 3: this machine has only 2 GPU(s); ask for at most 2");
    assert_still_queued(&home, &id);
}

#[test]
fn non_utf8_paths() {
    let home = TestHome::new();
    let bad = std::ffi::OsStr::from_bytes(b"/tmp/caf\xe9");
    let out = home.cmd().args(["submit", "--workdir"]).arg(bad).args(["--", "true"]).output().unwrap();
    assert_error(
        &out,
        2,
        "--workdir /tmp/caf\u{fffd} is not valid UTF-8; use a path with UTF-8 characters only",
    );
    let out = home.cmd().args(["submit", "--", "python"]).arg(bad).output().unwrap();
    assert_error(
        &out,
        2,
        "command argument /tmp/caf\u{fffd} is not valid UTF-8; carma stores commands as UTF-8",
    );
    // A spec file whose own name is not UTF-8 is fine: only stored paths must be UTF-8.
    let spec_path = home.path().join(std::ffi::OsStr::from_bytes(b"job-\xe9.toml"));
    std::fs::write(&spec_path, "name = \"x\"\ncommand = [\"true\"]\n").unwrap();
    let out = home.cmd().arg("submit").arg(&spec_path).output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
}

#[test]
fn huge_and_garbage_memory() {
    let home = TestHome::new();
    let out = home.run(&["submit", "--mem", "99999999999TiB", "--", "true"]);
    assert_error(
        &out,
        2,
        "command line: memory \"99999999999TiB\" is larger than any GPU (at most 1024 GiB); use a number with a unit, e.g. 12GiB or 500MiB",
    );
    let out = home.run(&["submit", "--mem", "twelve", "--", "true"]);
    assert_error(
        &out,
        2,
        "command line: memory \"twelve\" is not a size; use a number with a unit, e.g. 12GiB or 500MiB",
    );
    let out = home.run(&["submit", "--mem", "12 bananas", "--", "true"]);
    assert_error(
        &out,
        2,
        "command line: memory \"12 bananas\" has an unknown unit \"bananas\"; use a number with a unit, e.g. 12GiB or 500MiB",
    );
}

#[test]
fn tampered_spool_file_from_another_user_is_rejected_at_ingest() {
    let home = TestHome::new();
    let id = queued_task(&home);
    // Another user submits; then the file is changed so it is world-writable and garbled.
    let victim = home.ok(&["submit", "--parsable", "--", "true"]).trim().to_string();
    let path = home.spool().join(format!("{victim}.toml"));
    let other_uid = if unsafe { libc::geteuid() } == 0 { 4242 } else { unsafe { libc::geteuid() } };
    if other_uid == 4242 {
        std::os::unix::fs::chown(&path, Some(4242), Some(4242)).unwrap();
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::write(&path, "name = \"evil\"\ncommand = [\"rm\", \"-rf\", \"/\"]\n").unwrap();
    let out = home.run(&["tick"]);
    assert!(out.status.success(), "a bad spool file does not fail the tick");
    let events = home.events();
    let rejected: Vec<_> = events.iter().filter(|e| e["kind"] == "Rejected").collect();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0]["task"], victim.as_str());
    assert_eq!(rejected[0]["data"]["submitter_uid"], other_uid);
    assert_eq!(
        rejected[0]["data"]["reason"],
        format!(
            "spool file {victim}.toml is writable by group or others (mode 666) and may have been tampered with; resubmit the task"
        )
    );
    assert!(!path.exists(), "the rejected file is removed after the commit");
    assert_still_queued(&home, &id);
    // A private file whose content was replaced with garbage is rejected with the parse error.
    let second = home.ok(&["submit", "--parsable", "--", "true"]).trim().to_string();
    std::fs::write(home.spool().join(format!("{second}.toml")), "this is not toml").unwrap();
    home.ok(&["tick"]);
    let events = home.events();
    let last = events.iter().rev().find(|e| e["kind"] == "Rejected").unwrap();
    assert_eq!(
        last["data"]["reason"],
        format!(
            "spool file {second}.toml:1: key with no value, expected `=`; fix the spec (format: schema/task-spec.schema.json)"
        )
    );
}

#[test]
fn journal_record_with_unknown_version_byte() {
    let home = TestHome::new();
    let id = queued_task(&home);
    let seq = {
        let journal = carma::journal::Journal::open(&home.path().join("carma.redb")).unwrap();
        journal.append_raw_for_test(&[9, 1, 2, 3]).unwrap()
    };
    let message = format!(
        "journal record {seq}: unknown format version 9 (this carma reads version 1); the journal was written by a newer or different carma, upgrade carma or report a bug (nothing was changed)"
    );
    assert_error(&home.run(&["queue"]), 1, &message);
    // The tick refuses too, and leaves the spool alone: nothing is ingested into a journal it cannot read.
    let pending = home.ok(&["submit", "--parsable", "--", "true"]).trim().to_string();
    assert_error(&home.run(&["tick"]), 1, &message);
    assert!(home.spool().join(format!("{pending}.toml")).exists());
    // Earlier records are intact.
    let out = home.run(&["events", "--task", &id]);
    assert_error(&out, 1, &message);
    let journal = carma::journal::Journal::open(&home.path().join("carma.redb")).unwrap();
    let mut seen = Vec::new();
    let _ = journal.for_each(1, |s, r| {
        seen.push((s, r.event.kind()));
        Ok(true)
    });
    assert!(seen.iter().any(|(_, k)| *k == "Submitted"), "the earlier Submitted survives: {seen:?}");
}

#[test]
fn missing_state_directory() {
    let home = TestHome::uninitialised();
    let missing = home.path().join("nowhere");
    for args in
        [&["queue"][..], &["tick"], &["submit", "--", "true"], &["show", "x"], &["events"], &["cancel", "x"]]
    {
        let out = home.cmd().env("CARMA_HOME", &missing).args(args).output().unwrap();
        assert_error(
            &out,
            2,
            &format!(
                "state directory {} does not exist; run `carma init` first (or pass --home DIR)",
                missing.display()
            ),
        );
    }
}

#[test]
fn lock_held_by_a_hung_process_gives_exit_75() {
    let home = TestHome::new();
    let lock = std::fs::File::open(home.path().join("carma.lock")).unwrap();
    lock.lock().unwrap();
    let started = std::time::Instant::now();
    let out = home.cmd().env("CARMA_LOCK_TIMEOUT", "300ms").arg("tick").output().unwrap();
    let waited = started.elapsed();
    assert_eq!(out.status.code(), Some(75), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(
        err.starts_with(&format!(
            "error: lock {} is held by another carma process (waited ",
            home.path().join("carma.lock").display()
        )),
        "{err}"
    );
    assert!(waited.as_millis() >= 300, "waited the bounded time");
    // Submit never takes the lock, so it still works while a tick is stuck.
    let out = home.run(&["submit", "--parsable", "--", "true"]);
    assert!(out.status.success());
    drop(lock);
    assert!(stdout(&home.run(&["tick", "-v"])).contains("ingested 1"));
}

#[test]
fn unknown_task_and_finished_task_cancel() {
    let home = TestHome::new();
    let id = queued_task(&home);
    assert_error(
        &home.run(&["show", "zzzzzzzz"]),
        2,
        "no task zzzzzzzz; `carma queue --all` lists the known tasks",
    );
    home.ok(&["cancel", &id]);
    assert_error(
        &home.run(&["cancel", &id]),
        2,
        &format!("task {id} is already cancelled; nothing to cancel"),
    );
}

#[test]
fn missing_or_unreadable_model_summary() {
    let home = TestHome::new();
    let id = queued_task(&home);
    let missing = home.path().join("nope.json");
    let out = home.run(&["submit", "--model-summary", missing.to_str().unwrap(), "--", "true"]);
    assert_error(
        &out,
        2,
        &format!(
            "model summary {}: No such file or directory (os error 2); give a summary JSON, torchsummary text or module dump (schema/model-summary.schema.json), or drop model_summary",
            missing.display()
        ),
    );
    let garbage = write(&home, "garbage.txt", "not a model\n");
    let out = home.run(&["submit", "--model-summary", &garbage, "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        common::stderr(&out).starts_with(&format!("error: model summary {garbage}: unknown summary format"))
    );
    assert!(!home.spool().read_dir().unwrap().any(|_| true), "nothing was queued");
    assert_still_queued(&home, &id);
}
