//! Issue 23: a lab's daily path, each defect of the tryout with its exact output and exit code.
//!
//! Goal: job scripts take arguments and keep their `#CARMA` lines in every form; a mistyped
//! flag is named; an array's id, its queue prefix, `ARRAY_INDEX` and `@` work in every verb;
//! a failed task's stderr shows where people look; a second update is not dropped with exit
//! 0; `events` filters; the smaller refusals say what is wrong.
//! Method: the real binary on a state directory with two fake GPUs, real job processes.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{TestHome, assert_error, stderr, stdout};

fn home() -> TestHome {
    TestHome::with_fake_gpus(common::cluster::TWO_A100, "magm")
}

/// carma in the state directory's folder (where the scripts are).
fn here(home: &TestHome, args: &[&str]) -> Output {
    home.cmd().current_dir(home.path()).args(args).output().unwrap()
}

fn here_ok(home: &TestHome, args: &[&str]) -> String {
    let out = here(home, args);
    assert!(out.status.success(), "carma {args:?}: {}", stderr(&out));
    stdout(&out)
}

/// An executable job script in the state directory's folder.
fn script(home: &TestHome, name: &str, text: &str) {
    let path = home.path().join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

const TRAIN: &str = "#!/bin/sh\n#CARMA --mem 2GiB --time-limit 5m -J trainer\necho \"args: $*\"\n";

/// The line of `show` that starts with `label`.
fn shown(home: &TestHome, id: &str, label: &str) -> String {
    let text = home.ok(&["show", id]);
    text.lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label} in:\n{text}"))
        .to_string()
}

/// Defect 1: the words after a script reach it (carma's own flags among them, as sbatch
/// does), and its `#CARMA` lines apply in every form that runs it.
#[test]
fn job_scripts_take_arguments_and_keep_their_directives_in_every_form() {
    let home = home();
    script(&home, "train.sh", TRAIN);
    let forms: [&[&str]; 3] = [
        &["submit", "--parsable", "train.sh", "--lr", "0.1", "--gpus", "2"],
        &["submit", "--parsable", "--", "./train.sh", "x"],
        &["submit", "--parsable", "--", "train.sh", "y"],
    ];
    let ids: Vec<String> = forms.iter().map(|args| here_ok(&home, args).trim().to_string()).collect();
    home.tick_until_done(Duration::from_secs(60));
    for (id, args) in ids.iter().zip(["--lr 0.1 --gpus 2", "x", "y"]) {
        assert_eq!(home.ok(&["logs", "--stdout", id]), format!("args: {args}\n"));
        assert_eq!(shown(&home, id, "name"), "name        trainer");
        assert_eq!(shown(&home, id, "memory"), "memory      2.0 GiB declared");
        assert_eq!(shown(&home, id, "time limit"), "time limit  5m");
        assert_eq!(shown(&home, id, "gpus"), "gpus        1", "--gpus after the script is the script's");
        // Efficiency after the end (item 7), as seff.
        assert!(shown(&home, id, "wall").ends_with(" of the 5m limit (0%)"), "{}", shown(&home, id, "wall"));
        assert!(shown(&home, id, "gpu memory").ends_with("; requested 2.0 GiB"));
        assert_eq!(shown(&home, id, "gpu-hours"), "gpu-hours   0.000 over 1 attempt(s)");
    }
    // A file in the current folder that is no script is named with the form that runs it.
    std::fs::write(home.path().join("train.bin"), "\x7fELF").unwrap();
    std::fs::set_permissions(home.path().join("train.bin"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_error(
        &here(&home, &["submit", "--", "train.bin"]),
        2,
        &format!(
            "`train.bin` is not on the PATH but is a file in {}; to run it give its path: carma submit [options] -- ./train.bin",
            home.path().display()
        ),
    );
}

/// Defect 2: a mistyped flag before the script is named, with the flag it was meant to be.
#[test]
fn a_mistyped_flag_is_named_on_one_line() {
    let home = home();
    script(&home, "train.sh", TRAIN);
    assert_error(
        &here(&home, &["submit", "--gpus", "1", "--tim", "5m", "train.sh"]),
        2,
        "unexpected argument '--tim' found; a similar argument exists: '--time'",
    );
    // A command without `--` still gets the form that runs it.
    assert_error(
        &here(&home, &["submit", "--gpus", "1", "python", "train.py", "--lr", "0.1"]),
        2,
        "`python train.py --lr 0.1` looks like a command; put it after `--`: carma submit [options] -- python train.py --lr 0.1",
    );
    let typo = home.path().join("typo.sh");
    std::fs::write(&typo, "#!/bin/sh\n#CARMA --gpu 2\n").unwrap();
    assert_error(
        &home.run(&["submit", typo.to_str().unwrap()]),
        2,
        &format!(
            "{}:2: #CARMA line: unexpected argument '--gpu' found; a similar argument exists: '--gpus'",
            typo.display()
        ),
    );
}

/// Defect 3 and `@` (defect 4): the id `submit --array` prints, the prefix `queue` shows and
/// `ARRAY_INDEX` work in show, wait, logs, events and cancel.
#[test]
fn array_ids_work_in_every_verb() {
    let home = home();
    let array = home.ok(&[
        "submit",
        "--parsable",
        "--array",
        "0-2",
        "--",
        "sh",
        "-c",
        "echo member $CARMA_ARRAY_INDEX",
    ]);
    let array = array.trim();
    home.tick_until_done(Duration::from_secs(60));
    let held =
        home.ok(&["submit", "--parsable", "--hold", "--array", "0-1", "--", "true"]).trim().to_string();
    home.ok(&["tick"]);
    // The prefix `queue` shows is unique among what it shows now; a later submission may
    // share it (ids are time-sorted), so it is read after the last one.
    let folded = home.ok(&["queue", "--all"]);
    let prefix = folded.lines().find_map(|l| l.split('[').next().filter(|p| array.starts_with(p)));
    let prefix = prefix.unwrap_or_else(|| panic!("no row for {array}:\n{folded}")).to_string();
    let listing = home.ok(&["show", array]);
    assert!(listing.starts_with(&format!("array       {array} (sh): 3 task(s)\n")), "{listing}");
    assert!(listing.contains(&format!("  {array}_1    ")), "{listing}");
    assert_eq!(home.ok(&["show", &prefix]), listing, "the prefix queue shows names the array");
    let member = shown(&home, &format!("{array}_2"), "task");
    let member_id = member.trim_start_matches("task").trim().to_string();
    assert_eq!(home.ok(&["logs", &format!("{array}_2")]), "member 2\n");
    let waited = home.ok(&["wait", array]);
    assert_eq!(waited.lines().count(), 3, "{waited}");
    assert!(waited.lines().all(|l| l.ends_with(") finished")), "{waited}");
    let events = home.ok(&["events", "--task", array, "--kind", "Finished"]);
    assert_eq!(events.lines().count(), 3, "{events}");
    let one = home.ok(&["events", "--task", &format!("{array}_2"), "--kind", "Finished"]);
    assert!(one.contains(&member_id), "{one}");
    let expanded = home.ok(&["queue", "--all", "-r"]);
    assert!(expanded.contains(&format!("{array}_0")), "{array}:\n{expanded}");
    // @ is the latest submission (the held array), @~1 the one before.
    assert!(home.ok(&["show", "@"]).starts_with(&format!("array       {held} ")));
    assert!(home.ok(&["show", "@~1"]).starts_with(&format!("array       {array} ")));
    assert!(home.ok(&["cancel", &format!("{held}_1")]).contains("cancel"));
    assert_error(
        &home.run(&["show", &format!("{array}_9")]),
        2,
        &format!("array {array} has no index 9 (its 3 task(s): 0,1,2); `carma queue -r` lists them"),
    );
    assert_error(
        &home.run(&["logs", array]),
        2,
        &format!(
            "{array} is an array of 3 task(s); name one as {array}_INDEX (`carma show {array}` lists them)"
        ),
    );
    assert_error(
        &home.run(&["show", "@~5"]),
        2,
        "@~5: you have 2 submission(s) in this queue; the oldest is @~1",
    );
}

/// Defect 5: a failed task's last stderr lines in `show` and `wait`, escaped; `logs` shows
/// both streams by default and says in which order.
#[test]
fn a_failed_task_shows_its_stderr_and_logs_shows_both_streams() {
    let home = home();
    let id = home.submit_sh(
        "imports",
        None,
        "echo out1; echo 'Traceback (most recent call last):' >&2; printf 'ImportError: no \\033[31mtorch\\n' >&2; echo out2; exit 1",
    );
    home.tick_until_done(Duration::from_secs(60));
    let tail = format!(
        "stderr      last 2 line(s) of attempt 1 (carma logs --stderr {id}):\n  | Traceback (most recent call last):\n  | ImportError: no \\x1b[31mtorch\n"
    );
    assert!(home.ok(&["show", &id]).ends_with(&tail), "{}", home.ok(&["show", &id]));
    let waited = home.run(&["wait", &id]);
    assert_eq!(waited.status.code(), Some(1));
    let text = stdout(&waited);
    assert!(
        text.starts_with(&format!(
            "task {id} (imports) failed: exit 1 without an out-of-memory message; not retried\n  wall        "
        )),
        "{text}"
    );
    assert!(text.ends_with(&tail), "{text}");
    let both = home.run(&["logs", &id]);
    assert_eq!(
        stdout(&both),
        "out1\nout2\nTraceback (most recent call last):\nImportError: no \x1b[31mtorch\n"
    );
    assert_eq!(
        stderr(&both),
        "carma logs: stdout, then stderr (two files, lines not timed); --stdout or --stderr shows one\n"
    );
    assert_eq!(home.ok(&["logs", "--stdout", &id]), "out1\nout2\n");
    assert_eq!(
        home.ok(&["logs", "--stderr", &id]),
        "Traceback (most recent call last):\nImportError: no \x1b[31mtorch\n"
    );
}

/// Defect 6: a second update request before the next tick is refused, exit 5, not dropped.
#[test]
fn a_second_update_before_the_tick_is_refused() {
    let home = home();
    let id = home.ok(&["submit", "--parsable", "--hold", "--", "true"]).trim().to_string();
    home.ok(&["tick"]);
    assert_eq!(
        home.ok(&["update", &id, "--priority", "0", "--request"]),
        format!("update of task {id} (true) requested; the next tick applies it\n")
    );
    assert_error(
        &home.run(&["update", &id, "--nice", "1", "--request"]),
        5,
        &format!(
            "an earlier update of task {id} (true) is still waiting for the next tick; this one was not filed: run it again once `carma show` has the first"
        ),
    );
    home.ok(&["tick"]);
    home.ok(&["update", &id, "--nice", "1", "--request"]);
}

/// Defects 7 and 8: --export NONE gets a minimal PATH; --mail-user needs a sendmail.
#[test]
fn export_none_path_and_mail_without_sendmail() {
    let home = home();
    let id = home.ok(&["submit", "--parsable", "--export", "NONE", "--", "/bin/sh", "-c", "echo $PATH"]);
    home.tick_until_done(Duration::from_secs(60));
    // First on it, the folder of the attempt's `srun` (Slurm's step launcher, exec::srun).
    let srun = home.path().join(format!("runs/{}/1/bin", id.trim()));
    assert_eq!(
        home.ok(&["logs", "--stdout", id.trim()]),
        format!("{}:/usr/local/bin:/usr/bin:/bin\n", srun.display())
    );
    assert_error(
        &home.run(&["submit", "--mail-user", "a@example.org", "--", "true"]),
        2,
        "--mail-user: this queue sends no mail (no [notify] sendmail in its config.toml); ask the administrator to set one, or use --notify CMD",
    );
}

/// Defect 9: `events` hides the per-tick noise unless asked, and filters by kind, user, task
/// and time.
#[test]
fn events_hide_the_noise_and_filter() {
    let home = home();
    let id = home.ok(&["submit", "--parsable", "--name", "one", "--", "true"]).trim().to_string();
    home.tick_until_done(Duration::from_secs(60));
    let plain = home.ok(&["events"]);
    assert!(!plain.contains("TickCompleted") && !plain.contains("MetricSample"), "{plain}");
    assert!(plain.contains("Finished"), "{plain}");
    assert!(home.ok(&["events", "--all"]).contains("TickCompleted"));
    let kinds = home.ok(&["events", "--kind", "submitted,Finished"]);
    assert_eq!(kinds.lines().count(), 2, "{kinds}");
    let me = carma::access::users::display(carma::access::uid::effective());
    assert!(kinds.lines().next().unwrap().contains(&format!("{id} one by {me}: 1 GPU(s), ")), "{kinds}");
    assert_eq!(
        home.ok(&["events", "--kind", "Finished", "--user", &me, "--since", "10m"]).lines().count(),
        1
    );
    assert_eq!(
        home.ok(&["events", "--kind", "Finished", "--since", "2000-01-01T00:00:00Z"]).lines().count(),
        1
    );
    assert_eq!(
        home.ok(&["events", "--kind", "Finished", "--user", "0,1"]).lines().count(),
        usize::from(me == "root")
    );
    assert_error(
        &home.run(&["events", "--since", "yesterday"]),
        2,
        "--since \"yesterday\" is neither a sequence number, a duration nor a time; use e.g. 120, 10m, 11:40:20 or 2026-11-25T20:00:00Z",
    );
    let bad = home.run(&["events", "--kind", "Finishd"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).starts_with("error: --kind Finishd: no such event kind; the kinds are Submitted, "));
}

/// Defect 10: the smaller refusals.
#[test]
fn the_smaller_refusals_say_what_is_wrong() {
    let home = home();
    assert_error(
        &here(&home, &["submit", "nosuch.sh"]),
        2,
        "nosuch.sh: no such file; give the path of a TOML spec or a job script (a command goes after `--`)",
    );
    std::fs::write(home.path().join("plain.sh"), "echo hi\n").unwrap();
    assert_error(
        &here(&home, &["submit", "plain.sh"]),
        2,
        "plain.sh is neither a job script (its first line must be #! and an interpreter, e.g. #!/bin/bash) nor a TOML spec (name it .toml)",
    );
    assert_error(
        &home.run(&["submit", "--mem", "12", "--", "true"]),
        2,
        "--gpu-mem 12 has no unit; give one, e.g. --gpu-mem 12GiB or --gpu-mem 12MiB",
    );
    // Flags combine with a spec file, as the README says.
    std::fs::write(home.path().join("job.toml"), "name = \"a\"\ncommand = [\"true\"]\n").unwrap();
    assert_eq!(
        here_ok(&home, &["submit", "--dry-run", "-J", "renamed", "--time-limit", "5m", "job.toml"]),
        "would submit 1 task(s):\n  renamed: true\n      output: runs/ID/1/stdout.log  error: runs/ID/1/stderr.log\n\
         GPUs: 1 (default)\nGPU memory: not declared: shares a GPU, assumed 5.0 GiB; give --gpu-mem to say more (default)\n\
         host memory: no limit (default)\nCPUs: no limit (default)\n\
         time limit: 5m (command line)\nsignal: none (default)\ndependency: none (default)\n\
         array: none (default)\nname: renamed (command line)\n\
         output: carma logs ID (default)\nerror: carma logs --err ID (default)\n\
         requeue: the queue's default (default)\n"
    );
    assert_error(
        &here(&home, &["submit", "job.toml", "--", "x"]),
        2,
        "a spec file brings its own command; drop the one after `--`, or drop the file",
    );
    assert!(!Path::new(&home.path().join("spool/x")).exists());
}

/// Defect 10, the display ones: at 80 columns a long reason gets its own line instead of 12
/// characters; the man page cites no carma-VERB(1) pages (the verbs are its sections); a
/// cancelled task's reason is how it ended.
#[test]
fn reasons_fit_and_the_man_page_cites_only_itself() {
    let home = home();
    let id = home.ok(&["submit", "--parsable", "--hold", "--name", "held", "--", "true"]).trim().to_string();
    home.ok(&["tick"]);
    let out = home.cmd().env("COLUMNS", "80").args(["queue"]).output().unwrap();
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[1].starts_with(&id[..8]) && !lines[1].contains("Held"), "{text}");
    assert_eq!(lines[2], "    Held: waits until released (carma release)", "{text}");
    home.ok(&["cancel", &id]);
    let reason = home.ok(&["queue", "--all", "--format", "id,reason"]);
    assert!(reason.lines().nth(1).unwrap().ends_with("  cancelled by root"), "{reason}");
    let man = home.ok(&["man"]);
    assert!(!man.contains("carma\\-submit(1)"), "no page of its own");
    assert!(man.contains(".TP\n\\fBcarma submit\\fR\n"), "listed as a section");
}
