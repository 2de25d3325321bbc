//! A queue a whole lab shares (issue 11), end to end with real users and real processes.
//!
//! Goal: after root's `carma init --system`, two ordinary users use the queue with no flags
//! and no setup; user A's job runs from A's activated virtual environment with A's variables;
//! user B sees A's task (from the moment it is submitted) but not A's environment values, logs
//! or run-folder files, and B's cancel is refused at once; A's `carma logs -f` streams the
//! output until the job ends.
//! Method: root, two throw-away users made with `useradd`, a real venv made with the system's
//! python3, fake GPUs, the tick run by root as the timer would. Skips (with a message) when not
//! root or without useradd/runuser or /usr/bin/python3; CI runs as root.

mod common;

use common::skip::{Need, skip};

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::users::{ThrowawayUser, can_create_users};
use common::{stderr, stdout};

const SECRET: &str = "wandb-secret-of-user-a-7f3c";

/// The machine: a state directory registered as the system queue in a system config file of
/// the test's own (never /etc), fake GPUs.
struct Lab {
    dir: tempfile::TempDir,
}

impl Lab {
    fn new() -> Lab {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // A copy of carma every user can run, as an installed one is: the build's own may sit
        // under a folder only its owner can enter (CI builds under /root/.cache).
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        common::copy_carma(&dir.path().join("bin/carma"));
        std::fs::set_permissions(dir.path().join("bin"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(dir.path().join("bin/carma"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let lab = Lab { dir };
        let out = lab.root(&["--home", lab.home().to_str().unwrap(), "init", "--system"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("registered"), "{}", stdout(&out));
        std::fs::write(lab.gpus(), common::cluster::TWO_A100).unwrap();
        let config = format!("[tick]\ngpus = \"fake:{}\"\n", lab.gpus().display());
        std::fs::write(lab.home().join("config.toml"), config).unwrap();
        lab
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The carma every user runs (see `new`).
    fn exe(&self) -> PathBuf {
        self.dir.path().join("bin/carma")
    }

    fn gpus(&self) -> PathBuf {
        self.dir.path().join("gpus.json")
    }

    fn system_config(&self) -> PathBuf {
        self.dir.path().join("carma.toml")
    }

    /// carma as root, finding the queue through the system config.
    fn root(&self, args: &[&str]) -> Output {
        Command::new(self.exe())
            .args(args)
            .env("CARMA_SYSTEM_CONFIG", self.system_config())
            .env_remove("CARMA_HOME")
            .output()
            .unwrap()
    }

    fn tick(&self) {
        let out = self.root(&["tick"]);
        assert!(out.status.success(), "tick: {}", stderr(&out));
    }

    /// carma as `user`, in `dir`, with `env` (and nothing that names the state directory).
    fn user(&self, user: &ThrowawayUser, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
        let config = self.system_config();
        let mut all = vec![("CARMA_SYSTEM_CONFIG", config.to_str().unwrap())];
        all.extend_from_slice(env);
        user.run(self.exe().to_str().unwrap(), args, &all, dir)
    }
}

fn skip_reason() -> Option<(Need, &'static str)> {
    if !can_create_users() {
        return Some((Need::Users, "needs root with useradd, userdel and runuser (CI runs as root)"));
    }
    if !Path::new("/usr/bin/python3").exists() {
        return Some((Need::Python3, "needs /usr/bin/python3 to make a virtual environment"));
    }
    None
}

#[test]
fn two_users_share_one_queue_with_secrets_kept_apart() {
    if let Some((need, why)) = skip_reason() {
        return skip(need, why);
    }
    let lab = Lab::new();
    let alice = ThrowawayUser::create("a");
    let bob = ThrowawayUser::create("b");
    let work = lab.dir.path().join("alice");
    std::fs::create_dir(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(alice.uid), Some(alice.gid)).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o700)).unwrap();

    // Alice makes a virtual environment and "activates" it: that is only variables.
    let venv = work.join("venv");
    let made =
        alice.run("/usr/bin/python3", &["-m", "venv", "--without-pip", venv.to_str().unwrap()], &[], &work);
    assert!(made.status.success(), "python3 -m venv: {}", stderr(&made));
    let path = format!("{}/bin:/usr/local/bin:/usr/bin:/bin", venv.display());
    let activated =
        [("PATH", path.as_str()), ("VIRTUAL_ENV", venv.to_str().unwrap()), ("WANDB_API_KEY", SECRET)];
    let script = "import os, sys, time\n\
                  print('prefix', sys.prefix, flush=True)\n\
                  print('key', os.environ.get('WANDB_API_KEY'), flush=True)\n\
                  for i in range(3):\n    time.sleep(1); print('step', i, flush=True)\n";
    let submitted = lab.user(
        &alice,
        &work,
        &activated,
        &["submit", "--parsable", "--mem", "2GiB", "--", "python", "-c", script],
    );
    assert!(submitted.status.success(), "alice's submit: {}", stderr(&submitted));
    let id = stdout(&submitted).trim().to_string();

    // Bob sees it at once, still in the spool, with no flags: the queue is found, not given.
    let queue = lab.user(&bob, Path::new("/"), &[], &["queue"]);
    assert!(queue.status.success(), "bob's queue: {}", stderr(&queue));
    let line = stdout(&queue).lines().find(|l| l.starts_with(&id[..8])).map(str::to_string);
    let line = line.unwrap_or_else(|| panic!("bob does not see the spooled task:\n{}", stdout(&queue)));
    assert!(line.contains(" SU "), "{line}");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&lab.user(&bob, Path::new("/"), &[], &["queue", "--json"]))).unwrap();
    let row = &json["tasks"][0];
    assert_eq!((row["id"].as_str(), row["state"].as_str()), (Some(id.as_str()), Some("Submitted")));
    assert_eq!(row["user"].as_str(), Some(alice.name.as_str()));
    assert_eq!(row["name"], "", "bob may not read alice's spool file");

    lab.tick();
    // Bob reads the queue and the task, never the values.
    let shown = lab.user(&bob, Path::new("/"), &[], &["show", &id]);
    assert!(shown.status.success(), "bob's show: {}", stderr(&shown));
    assert!(stdout(&shown).contains("WANDB_API_KEY"), "the names are public: {}", stdout(&shown));
    for args in [
        &["show", &id, "--json"][..],
        &["events", "--json"],
        &["queue", "--all", "--json"],
        &["report", "--json"],
    ] {
        let out = lab.user(&bob, Path::new("/"), &[], args);
        assert!(out.status.success(), "bob's {args:?}: {}", stderr(&out));
        assert!(!stdout(&out).contains(SECRET), "bob's {args:?} shows alice's secret");
    }
    // Bob's cancel is refused at once, and files nothing.
    let cancel = lab.user(&bob, Path::new("/"), &[], &["cancel", &id]);
    assert_eq!(cancel.status.code(), Some(77), "{}", stderr(&cancel));
    assert_eq!(
        stderr(&cancel),
        format!(
            "error: cannot cancel task {id} (python): it belongs to {}; only its submitter or root may cancel it\n",
            alice.name
        )
    );
    // Every user's spool folder is empty: nothing waits, and bob's refusal filed nothing.
    let spool: Vec<_> = std::fs::read_dir(lab.home().join("spool"))
        .unwrap()
        .flat_map(|folder| std::fs::read_dir(folder.unwrap().path()).unwrap())
        .collect();
    assert!(spool.is_empty(), "bob's refused cancel left a request: {spool:?}");
    // Nor may he read her output, through carma or around it.
    let logs = lab.user(&bob, Path::new("/"), &[], &["logs", &id]);
    assert_eq!(logs.status.code(), Some(77), "{}", stderr(&logs));
    assert!(stderr(&logs).contains("only its submitter or root may read its output"), "{}", stderr(&logs));
    let run_dir = lab.home().join("runs").join(&id).join("1");
    for path in [run_dir.join("stdout.log"), run_dir.join("plan.json"), lab.home().join("carma.redb")] {
        let out = bob.run("/bin/cat", &[path.to_str().unwrap()], &[], Path::new("/"));
        assert!(!out.status.success(), "bob read {}", path.display());
    }
    for dir in [lab.home().join("runs"), lab.home().join("private")] {
        let out = bob.run("/bin/ls", &[dir.to_str().unwrap()], &[], Path::new("/"));
        assert!(!out.status.success(), "bob listed {}", dir.display());
    }
    let view = std::fs::read(lab.home().join("view/events.log")).unwrap();
    assert!(!String::from_utf8_lossy(&view).contains(SECRET), "the published view holds the secret");

    // Alice follows her job to its end while the timer (here: a loop) ticks.
    let follower = {
        let config = lab.system_config();
        let env = vec![("CARMA_SYSTEM_CONFIG".to_string(), config.display().to_string())];
        let (name, work, id, exe) = (alice.name.clone(), work.clone(), id.clone(), lab.exe());
        std::thread::spawn(move || {
            Command::new(common::users::runuser())
                .args(["-u", &name, "--"])
                .arg(exe)
                .args(["logs", "-f", &id])
                .envs(env)
                .current_dir(work)
                .output()
                .unwrap()
        })
    };
    let started = Instant::now();
    while !follower.is_finished() && started.elapsed() < Duration::from_secs(60) {
        lab.tick();
        std::thread::sleep(Duration::from_millis(300));
    }
    let followed = follower.join().unwrap();
    assert!(followed.status.success(), "alice's logs -f: {}", stderr(&followed));
    let text = stdout(&followed);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("prefix {}", venv.display()), "the job ran alice's venv python:\n{text}");
    assert_eq!(lines[1], format!("key {SECRET}"), "the job got alice's variables:\n{text}");
    assert_eq!(&lines[2..], ["step 0", "step 1", "step 2"], "-f streamed to the end:\n{text}");
    let waited = lab.user(&alice, &work, &[], &["wait", &id]);
    assert!(waited.status.success(), "{}", stderr(&waited));
    let waited = stdout(&waited);
    assert!(waited.starts_with(&format!("task {id} (python) finished\n  wall        ")), "{waited}");
    assert!(waited.contains("\n  gpu-hours   "), "efficiency lines after the end: {waited}");
}

/// Goal (issue 23): a lab's daily path as two real users. Alice's job script runs with its
/// `#CARMA` lines and with `--lr 0.1` after it; her array's id, a member's `ARRAY_INDEX` and
/// `@` work in show, wait, logs and events; her failed job's stderr tail shows in her `show`
/// and root's, never in bob's; efficiency lines follow the end.
#[test]
fn a_lab_day_with_scripts_arrays_and_stderr() {
    if let Some((need, why)) = skip_reason() {
        return skip(need, why);
    }
    let lab = Lab::new();
    let alice = ThrowawayUser::create("a");
    let bob = ThrowawayUser::create("b");
    let work = lab.dir.path().join("alice");
    std::fs::create_dir(&work).unwrap();
    let script = work.join("train.sh");
    std::fs::write(&script, "#!/bin/sh\n#CARMA --mem 2GiB --time-limit 5m -J trainer\necho \"lr $2\"\n")
        .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for path in [&work, &script] {
        std::os::unix::fs::chown(path, Some(alice.uid), Some(alice.gid)).unwrap();
    }
    let ok = |args: &[&str]| {
        let out = lab.user(&alice, &work, &[], args);
        assert!(out.status.success(), "alice's {args:?}: {}", stderr(&out));
        stdout(&out)
    };
    let trained = ok(&["submit", "--parsable", "train.sh", "--lr", "0.1"]).trim().to_string();
    let array = ok(&[
        "submit",
        "--parsable",
        "--array",
        "0-1",
        "--",
        "/bin/sh",
        "-c",
        "echo member $CARMA_ARRAY_INDEX",
    ]);
    let array = array.trim().to_string();
    let failed =
        ok(&["submit", "--parsable", "--", "/bin/sh", "-c", "echo 'ImportError: no torch' >&2; exit 1"]);
    let failed = failed.trim().to_string();
    let started = Instant::now();
    loop {
        lab.tick();
        let queue: serde_json::Value =
            serde_json::from_str(&stdout(&lab.root(&["queue", "--json"]))).unwrap();
        if queue["tasks"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "tasks did not end: {queue:#}");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(ok(&["logs", "--stdout", &trained]), "lr 0.1\n", "the script got its arguments");
    let shown = ok(&["show", &trained]);
    for line in
        ["name        trainer\n", "memory      2.0 GiB declared\n", "time limit  5m\n", "\nwall        "]
    {
        assert!(shown.contains(line), "directives and efficiency: {line:?} in\n{shown}");
    }
    assert!(ok(&["show", &array]).starts_with(&format!("array       {array} (sh): 2 task(s)\n")));
    assert_eq!(ok(&["logs", &format!("{array}_1")]), "member 1\n");
    assert_eq!(ok(&["wait", &array]).lines().count(), 2);
    assert!(ok(&["events", "--task", &format!("{array}_0")]).contains(" Finished "));
    let tail = "stderr      last 1 line(s) of attempt 1";
    let mine = ok(&["show", "@"]);
    assert!(mine.starts_with(&format!("task        {failed}\n")), "@ is alice's latest: {mine}");
    assert!(mine.contains(tail) && mine.ends_with("  | ImportError: no torch\n"), "{mine}");
    assert!(stdout(&lab.root(&["show", &failed])).contains("  | ImportError: no torch\n"));
    let bobs = lab.user(&bob, Path::new("/"), &[], &["show", &failed]);
    assert!(bobs.status.success(), "{}", stderr(&bobs));
    // The command is public (it names the text); the output is not.
    assert!(
        !stdout(&bobs).contains(tail) && !stdout(&bobs).contains("  | "),
        "bob sees alice's stderr: {}",
        stdout(&bobs)
    );
}
