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
fn bad_mig_profiles() {
    let home = TestHome::new();
    let out = home.run(&["submit", "--gpus", "2", "--mig-profile", "1g.10gb", "--", "true"]);
    assert_error(
        &out,
        2,
        "command line: mig_profile = \"1g.10gb\" with gpus = 2: a task gets one MIG instance (CUDA shows a process one MIG device); set gpus = 1",
    );
    for bad in ["1G.10GB", "big", "1g 10gb", ""] {
        let out = home.run(&["submit", "--mig-profile", bad, "--", "true"]);
        assert_error(
            &out,
            2,
            &format!(
                "command line: mig_profile {bad:?} is invalid; use a MIG profile name such as \"1g.10gb\" (see nvidia-smi mig -lgip)"
            ),
        );
    }
    let path =
        write(&home, "mig.toml", "name = \"x\"\ncommand = [\"a\"]\nmig_profile = \"3g.40gb\"\ngpus = 3\n");
    let out = home.run(&["submit", &path]);
    assert_error(
        &out,
        2,
        &format!(
            "{path}: mig_profile = \"3g.40gb\" with gpus = 3: a task gets one MIG instance (CUDA shows a process one MIG device); set gpus = 1"
        ),
    );
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
    let mut path = home.spool().join(format!("{victim}.toml"));
    let other_uid = if unsafe { libc::geteuid() } == 0 { 4242 } else { unsafe { libc::geteuid() } };
    if other_uid == 4242 {
        path = home.hand_to(&path, 4242);
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
            "spool file {victim}.toml is writable by group or others (mode 666) and may have been tampered with; resubmit the task with `carma submit`"
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
        "journal {}: record {seq} was written by a newer carma (unknown format version 9 (this carma reads versions 1 and 2)); use that carma or a later one (nothing was changed)",
        home.path().join("carma.redb").display()
    );
    // The tick refuses, and leaves the spool alone: nothing is ingested into a journal it
    // cannot read.
    let pending = home.ok(&["submit", "--parsable", "--", "true"]).trim().to_string();
    assert_error(&home.run(&["tick"]), 1, &message);
    assert!(home.spool().join(format!("{pending}.toml")).exists());
    // Readers keep the view published before the record: earlier records are intact.
    assert!(home.ok(&["queue", "--json"]).contains(&id));
    assert!(home.ok(&["events", "--task", &id]).contains("Submitted"));
    let journal = carma::journal::Journal::open(&home.path().join("carma.redb")).unwrap();
    let mut seen = Vec::new();
    let _ = journal.for_each(1, |s, r| {
        seen.push((s, r.event.kind()));
        Ok(true)
    });
    assert!(seen.iter().any(|(_, k)| *k == "Submitted"), "the earlier Submitted survives: {seen:?}");
}

#[test]
fn journal_record_with_a_flipped_bit_is_named_not_folded() {
    // Goal: damage is told apart from a newer carma, and names the record and its task.
    let home = TestHome::new();
    queued_task(&home);
    home.ok(&["tick"]);
    let path = home.path().join("carma.redb");
    let (seq, mut bytes) = {
        let journal = carma::journal::Journal::open(&path).unwrap();
        let mut found = None;
        journal
            .for_each(1, |seq, record| {
                if record.event.kind() == "Submitted" {
                    found = Some((seq, record));
                }
                Ok(true)
            })
            .unwrap();
        let (_, record) = found.unwrap();
        // A copy of the Submitted record, with one bit of its task id flipped, as the next seq.
        (
            journal.last_seq().unwrap() + 1,
            carma::journal::frame::encode(journal.last_seq().unwrap() + 1, &record),
        )
    };
    bytes[30] ^= 0x01;
    carma::journal::Journal::open(&path).unwrap().append_raw_for_test(&bytes).unwrap();
    let out = home.run(&["tick"]);
    let message = common::stderr(&out);
    // The tick refuses the journal (exit 3), as `carma journal check` calls it damaged.
    assert_eq!(out.status.code(), Some(3), "{message}");
    assert!(
        message.starts_with(&format!("error: journal {} is damaged (record {seq} (task ", path.display())),
        "{message}"
    );
    assert!(message.contains("): checksum mismatch"), "{message}");
    assert!(
        message.ends_with("; nothing was written; run `carma journal check` for details and `carma journal salvage` to recover\n"),
        "{message}"
    );
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
                "state directory {} does not exist; run `carma init --home {}`",
                missing.display(),
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
        &format!("task {id} (keep) is already cancelled; nothing to cancel"),
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

#[test]
fn truncated_journal_is_an_error_never_a_panic() {
    // Goal: redb asserts on a truncated file; carma must turn that into a one-line error.
    // Method: a journal with some history, cut at several lengths, read by `carma queue`.
    let home = TestHome::new();
    for _ in 0..3 {
        queued_task(&home);
    }
    home.ok(&["tick"]);
    let path = home.path().join("carma.redb");
    let whole = std::fs::read(&path).unwrap();
    for cut in [whole.len() / 9, whole.len() / 3, whole.len() / 2, whole.len() - 4096, whole.len() - 1] {
        std::fs::write(&path, &whole[..cut]).unwrap();
        let out = home.run(&["tick"]);
        let err = common::stderr(&out);
        assert!(!err.contains("panicked"), "cut at {cut}: {err}");
        // `carma journal check` calls a cut file damaged, so the tick refuses it (exit 3).
        assert_eq!(out.status.code(), Some(3), "cut at {cut}: {err}");
        assert!(
            err.starts_with(&format!("error: journal {} is damaged (", path.display())),
            "cut at {cut}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "cut at {cut}: {err}");
    }
}

/// Goal: each workflow flag a user can get wrong is refused at submit with one line and exit
/// 2, and nothing reaches the spool.
#[test]
fn bad_workflow_flags_are_refused_at_submit() {
    let home = TestHome::new();
    let cases: [(&[&str], &str); 8] = [
        (
            &["--after", "zzzzzzz"],
            "dependency zzzzzzz: no such task or array; `carma queue --all` lists them",
        ),
        (&["--after", "@"], "dependency @: you have no submissions in this queue yet"),
        (
            &["--after", "after:abcd"],
            "dependency type \"after\" is not supported; use one of afterok, afterany, afternotok",
        ),
        (
            &["--array", "5-1"],
            "--array \"5-1\": \"5-1\" ends before it starts; use e.g. 0-9, 0-9:2, 1,4,7, and %N to cap how many run at once (0-9%2)",
        ),
        (&["--param", "lr=1,2"], "--param lr is not used: put {lr} in the command or --name-template"),
        (
            &["--array", "0-3", "--param", "x={x}"],
            "--array with indices and --param cannot be combined; a sweep numbers its tasks itself (cap it with --array %N)",
        ),
        (&["--priority", "20000"], "command line: priority = 20000: use a value from -10000 to 10000"),
        (
            &["--name-template", "x{index}"],
            "--name-template names the tasks of an --array or --param submission; use --name for one task",
        ),
    ];
    for (flags, message) in cases {
        let mut args = vec!["submit"];
        args.extend(flags);
        args.extend(["--", "true"]);
        assert_error(&home.run(&args), 2, message);
    }
    let spooled = std::fs::read_dir(home.spool()).unwrap().count();
    assert_eq!(spooled, 0, "nothing was submitted");
}

/// Goal: a job script's #! line and #CARMA lines are checked at submit, naming the line.
#[test]
fn bad_job_scripts_are_refused_at_submit() {
    let home = TestHome::new();
    let relative = write(&home, "relative.sh", "#!sh\necho hi\n");
    assert_error(
        &home.run(&["submit", &relative]),
        2,
        &format!(
            "{relative}: interpreter \"sh\" is not an absolute path; the first line must be #! and the interpreter's absolute path, e.g. #!/bin/bash or #!/usr/bin/env python3"
        ),
    );
    let typo = write(&home, "typo.sh", "#!/bin/sh\n#CARMA --gpu 2\necho hi\n");
    assert_error(
        &home.run(&["submit", &typo]),
        2,
        &format!(
            "{typo}:2: #CARMA line: unexpected argument '--gpu' found; a similar argument exists: '--gpus'"
        ),
    );
    let missing = write(&home, "missing.sh", "#!/no/such/interpreter\necho hi\n");
    assert_error(
        &home.run(&["submit", &missing]),
        2,
        &format!(
            "{missing}:1: interpreter /no/such/interpreter from its #! line is not a program you can run; fix the #! line"
        ),
    );
}
// ---------------------------------------------------------------------------------------
// Issue 11's bad inputs: each refused at submit, with the numbers and the right form
// ---------------------------------------------------------------------------------------

#[test]
fn memory_larger_than_any_gpu_is_refused_at_submit_with_the_numbers() {
    let home = TestHome::with_fake_gpus(common::cluster::TWO_A100, "magm");
    let id = queued_task(&home); // the tick that ingests it also writes the inventory
    assert_error(
        &home.run(&["submit", "--mem", "80GiB", "--", "true"]),
        2,
        "command line: memory 80.0 GiB per GPU is more than the largest GPU here has (40.0 GiB); ask for at most 40.0 GiB",
    );
    assert_error(
        &home.run(&["submit", "--gpus", "3", "--", "true"]),
        2,
        "command line: gpus = 3: this machine has only 2 GPU(s); ask for at most 2",
    );
    assert_still_queued(&home, &id);
}

#[test]
fn values_ingest_would_reject_are_rejected_at_submit() {
    let home = TestHome::new();
    let id = queued_task(&home);
    assert_error(
        &home.run(&["submit", "--time-limit", "600y", "--", "true"]),
        2,
        "command line: time_limit \"600y\" is longer than a year; use e.g. 90s, 45m, 2h or 7days",
    );
    assert_error(
        &home.run(&["submit", "--mem", "-5GiB", "--", "true"]),
        2,
        "command line: memory \"-5GiB\" is negative; use a number with a unit, e.g. 12GiB or 500MiB",
    );
    assert_error(
        &home.run(&["submit", "--gpus", "99999999999999999999", "--", "true"]),
        2,
        "--gpus \"99999999999999999999\" is not a whole number; give e.g. --gpus 2",
    );
    assert_error(
        &home.run(&["submit", "--", "no-such-program-carma-test"]),
        2,
        &format!(
            "program `no-such-program-carma-test` is not on the PATH the job gets ({}); activate its environment before submitting, or give its full path",
            std::env::var("PATH").unwrap()
        ),
    );
    let missing = home.path().join("no-such-dir");
    assert_error(
        &home.run(&["submit", "--workdir", missing.to_str().unwrap(), "--", "true"]),
        2,
        &format!("workdir {} is not a directory; create it or pass --workdir DIR", missing.display()),
    );
    assert!(std::fs::read_dir(home.spool()).unwrap().next().is_none(), "nothing was spooled");
    assert_still_queued(&home, &id);
}

#[test]
fn a_script_or_a_bare_command_gets_the_right_form() {
    let home = TestHome::new();
    let script = home.path().join("train.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A script with a #! line is a job script (issue 12): submitted as it is.
    let out = home.cmd().current_dir(home.path()).args(["submit", "train.sh"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("submitted task "));
    // An executable without one is a program, which goes after `--`.
    let program = home.path().join("train.bin");
    std::fs::write(&program, "\x7fELF").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = home.cmd().current_dir(home.path()).args(["submit", "train.bin"]).output().unwrap();
    assert_error(
        &out,
        2,
        "train.bin is a program, not a TOML spec or a script with #!; run it with: carma submit [options] -- ./train.bin",
    );
    assert_error(
        &home.run(&["submit", "python", "train.py", "--lr", "0.1"]),
        2,
        "`python train.py --lr 0.1` looks like a command; put it after `--`: carma submit [options] -- python train.py --lr 0.1",
    );
    assert_error(
        &home.run(&["submit", "python"]),
        2,
        "python is not a spec file; to run a command put it after `--`: carma submit [options] -- python",
    );
}

#[test]
fn ids_by_prefix_and_ambiguous_prefixes_list_the_matches() {
    let home = TestHome::new();
    let ids: Vec<String> =
        (0..3).map(|_| home.ok(&["submit", "--parsable", "--", "true"]).trim().to_string()).collect();
    home.ok(&["tick"]);
    // The ids of one burst share their time prefix: 4 characters name all three.
    let prefix = &ids[0][..4];
    let out = home.run(&["show", prefix]);
    assert_eq!(out.status.code(), Some(2));
    let err = common::stderr(&out);
    assert!(
        err.starts_with(&format!("error: task id prefix {prefix} matches 3 tasks: {} (true), ", ids[0])),
        "{err}"
    );
    assert!(err.ends_with("; give more characters\n"), "{err}");
    assert_error(
        &home.run(&["show", "06h"]),
        2,
        "task id \"06h\" is too short; give the whole id or at least 4 characters of it",
    );
    // The shortest unique prefix works everywhere.
    let unique = (4..=16)
        .map(|n| &ids[2][..n])
        .find(|p| ids.iter().filter(|id| id.starts_with(p)).count() == 1)
        .unwrap();
    assert!(home.ok(&["show", unique]).contains(&ids[2]));
    assert!(home.ok(&["events", "--task", unique]).contains("Submitted"));
}

#[test]
fn control_characters_in_a_command_reach_no_terminal() {
    let home = TestHome::new();
    let id = home.ok(&["submit", "--parsable", "--", "echo", "clear\x1b[2Jscreen"]).trim().to_string();
    home.ok(&["tick"]);
    for args in [&["show", id.as_str()][..], &["events"], &["queue", "--format", "id,name,reason"]] {
        let out = home.ok(args);
        assert!(!out.contains('\x1b'), "carma {args:?} printed a raw escape: {out:?}");
    }
    assert!(home.ok(&["show", &id]).contains("clear\\x1b[2Jscreen"));
    // JSON escapes it its own way, and keeps the argv exact.
    let shown: serde_json::Value = serde_json::from_str(&home.ok(&["show", &id, "--json"])).unwrap();
    assert_eq!(shown["task"]["spec"]["command"][1], "clear\x1b[2Jscreen");
}

#[test]
fn report_reads_the_queue_it_is_given_by_home() {
    let home = TestHome::new();
    queued_task(&home);
    let report: serde_json::Value = serde_json::from_str(&home.ok(&["report", "--json"])).unwrap();
    assert_eq!(report["reports"][0]["label"], "queue");
    assert_eq!(report["reports"][0]["tasks"], 1);
    assert_error(
        &home.run(&["report", "--since", "last tuesday"]),
        2,
        "--since \"last tuesday\" is neither a duration nor a time; use e.g. 24h, 7days or 2026-11-01T00:00:00Z",
    );
}

#[test]
fn a_removed_lock_file_is_recreated_by_the_tick() {
    let home = TestHome::new();
    let id = queued_task(&home);
    std::fs::remove_file(home.path().join("carma.lock")).unwrap();
    home.ok(&["tick"]);
    assert!(home.path().join("carma.lock").exists());
    let mode = std::fs::metadata(home.path().join("carma.lock")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "no other user may hold the lock");
    assert_still_queued(&home, &id);
}

#[test]
fn a_submit_that_cannot_write_leaves_no_temp_file() {
    // Method: bash's `ulimit -f 1` makes every write past 1 KiB fail with EFBIG (SIGXFSZ
    // ignored), as a full disk would; the spec carries 8 KiB of environment.
    let home = TestHome::new();
    let big = "x".repeat(8192);
    let script = format!(
        "trap '' XFSZ; ulimit -f 1; exec {} submit --env BIG={big} -- true",
        env!("CARGO_BIN_EXE_carma")
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .env("CARMA_HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    assert!(common::stderr(&out).starts_with("error: cannot write "), "{}", common::stderr(&out));
    let left: Vec<_> = std::fs::read_dir(home.spool()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "the failed submit left {left:?} in the spool");
}

/// Goal: the evaluation flags of `carma simulate` refuse what makes no sense, with exit 2: a
/// time-limit factor below 1 (the sim's users never declare less than the run time),
/// enforcement without limits, and a jitter without copies.
#[test]
fn simulate_evaluation_flags_are_checked() {
    let home = TestHome::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let trace = root.join("traces/demo-40.csv").display().to_string();
    let profiles = root.join("traces/demo-profiles.csv").display().to_string();
    let base = ["simulate", "--trace", trace.as_str(), "--profiles", profiles.as_str()];
    let run = |extra: &[&str]| home.run(&[&base[..], extra].concat());
    assert_error(
        &run(&["--copies", "2", "--time-limits", "0.5:2"]),
        2,
        "--time-limits \"0.5:2\": use MIN:MAX with 1 <= MIN <= MAX <= 100 (e.g. 1.2:3), default, loose or none",
    );
    assert_error(
        &run(&["--copies", "2", "--time-limits", "none", "--enforce-time-limits"]),
        2,
        "--enforce-time-limits needs time limits; drop it or set --time-limits MIN:MAX",
    );
    let out = run(&["--jitter", "30s", "--journal", "j.redb"]);
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert!(common::stderr(&out).contains("--copies <K>"), "{}", common::stderr(&out));
}

/// Goal: a bidi override in an argv or a spool file's name reaches no human output raw, so
/// `carma events` cannot show a command reversed. Method: submit a command holding U+202E, drop
/// a spool file whose name holds one, tick, and read every human view.
#[test]
fn bidi_controls_in_a_command_or_spool_name_reach_no_terminal() {
    let home = TestHome::new();
    let id = home.ok(&["submit", "--parsable", "--", "echo", "gpj.\u{202e}exe"]).trim().to_string();
    std::fs::write(home.spool().join("evil\u{202e}lmth.toml"), "not a spec").unwrap();
    home.ok(&["tick"]);
    let views = [&["show", id.as_str()][..], &["events"], &["queue", "--all", "--format", "id,name,reason"]];
    for args in views {
        let out = home.ok(args);
        assert!(!out.contains('\u{202e}'), "carma {args:?} printed a raw U+202E: {out:?}");
    }
    assert!(home.ok(&["show", &id]).contains("gpj.\\u{202e}exe"));
    let events = home.ok(&["events"]);
    assert!(events.contains("echo gpj.\\u{202e}exe"), "{events}");
    assert!(events.contains("evil\\u{202e}lmth.toml"), "{events}");
}

/// Goal: a config value TOML accepts but carma cannot use stops the tick with the usage exit
/// code and one line naming the key, the value and a fix, before anything is placed. Method:
/// `sm-cap = nan` under a queued task; the task is still queued afterwards.
#[test]
fn a_nan_sm_cap_stops_the_tick_with_the_key_and_a_fix() {
    let home = TestHome::new();
    let id = queued_task(&home);
    home.set_config("[tick]\ngpus = \"none\"\n\n[sched]\nsm-cap = nan\n");
    let out = home.run(&["tick"]);
    let config = home.path().join("config.toml");
    assert_error(
        &out,
        2,
        &format!(
            "{}: [sched] sm-cap = nan is not a number above 0 and at most 1; write e.g. sm-cap = 0.80",
            config.display()
        ),
    );
    home.set_config("[tick]\ngpus = \"none\"\n");
    assert_still_queued(&home, &id);
}
