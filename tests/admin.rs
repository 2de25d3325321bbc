//! An administrator's week (issue 42): a personal queue's timer (`carma tick --every`, user
//! units), units that never run a build folder's binary, `carma config check`, `carma report
//! --by-user`, and run-folder retention, each through the real binary on a real state
//! directory with fake GPUs and real jobs.

mod common;

/// A child process killed when the test ends, passed or not: a tick loop must not outlive it.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::cluster::TWO_A100;
use common::{TestHome, assert_error, stderr, stdout};

fn queue_json(home: &TestHome) -> serde_json::Value {
    serde_json::from_str(&home.ok(&["queue", "--all", "--json"])).unwrap()
}

fn state_of(home: &TestHome, id: &str) -> String {
    let queue = queue_json(home);
    let task = queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).cloned();
    task.map(|t| t["state"].as_str().unwrap_or_default().to_string()).unwrap_or_default()
}

/// Goal: `carma tick --every` ticks in the foreground until SIGTERM and then exits 0 after a
/// whole tick; too short a period is refused. Fails on the old code (no `--every`: exit 2).
#[test]
fn tick_every_runs_the_queue_in_the_foreground_until_a_signal() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let refused = home.run(&["tick", "--every", "10ms"]);
    assert_error(
        &refused,
        2,
        "--every 10ms: ticks closer than 100ms apart only contend for the lock; give e.g. --every 5s",
    );
    let mut looping = Reaped(
        home.cmd()
            .args(["tick", "--every", "200ms", "-v"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let id = home
        .ok(&["submit", "--parsable", "--gpus", "1", "--gpu-mem", "1GiB", "--", "true"])
        .trim()
        .to_string();
    let started = Instant::now();
    while state_of(&home, &id) != "Finished" {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the loop ran the job: {}",
            state_of(&home, &id)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(looping.0.id() as i32, libc::SIGTERM) };
    let stopped = Instant::now();
    let status = loop {
        if let Some(status) = looping.0.try_wait().unwrap() {
            break status;
        }
        assert!(stopped.elapsed() < Duration::from_secs(5), "the loop ends soon after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "a signal is a clean end");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut looping.0.stdout.take().unwrap(), &mut text).unwrap();
    assert!(text.lines().filter(|l| l.starts_with("tick: ingested")).count() >= 2, "{text}");
    assert!(text.ends_with("tick: stopped by a signal after the last whole tick\n"), "{text}");
    home.ok(&["journal", "check"]);
}

/// Goal: `carma systemd --install` refuses units that would run a cargo build folder's
/// binary, names the fix, and writes nothing; printing says so on stderr; `--exe` or
/// `--force` install. Fails on the old code (it installed the build folder's path).
#[test]
fn units_never_run_a_build_folders_binary_unasked() {
    let home = TestHome::new();
    let units = tempfile::tempdir().unwrap();
    let dir = units.path().to_str().unwrap();
    let exe = env!("CARGO_BIN_EXE_carma");
    assert!(exe.contains("/debug/"), "the test binary is a build folder's: {exe}");
    let refused = home.run(&["systemd", "--install", "--unit-dir", dir, "--man-dir", dir]);
    assert_error(
        &refused,
        2,
        &format!(
            "refusing to install units that run {exe}: it is in a cargo build folder, which `cargo clean` or the next build empties; install carma first (the Debian package, or `cargo install --path . --root /usr/local`) and run that binary's `carma systemd --install`, or name the binary with --exe PATH (--force installs these anyway)"
        ),
    );
    assert_eq!(std::fs::read_dir(units.path()).unwrap().count(), 0, "nothing written");
    let printed = home.run(&["systemd"]);
    assert!(printed.status.success());
    assert!(stderr(&printed).contains("is in a cargo build folder"), "{}", stderr(&printed));
    let forced = home.ok(&["systemd", "--install", "--force", "--unit-dir", dir, "--man-dir", dir]);
    assert!(forced.contains("carma-tick.timer"), "{forced}");
    let service = std::fs::read_to_string(units.path().join("carma-tick.service")).unwrap();
    assert!(service.contains(&format!("ExecStart={exe} --home")), "{service}");
}

/// Goal: a user's `carma systemd --install` writes user units for `systemctl --user` into
/// their own `~/.config/systemd/user` (no MPS daemon, nothing in /etc), and a root-owned
/// binary check never stops a user. Fails on the old code (it wrote to /etc and failed).
#[test]
fn a_users_install_writes_user_units_into_their_home() {
    if common::users::skip_without_users() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("carma");
    common::copy_carma(&exe);
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let user = common::users::ThrowawayUser::create("units");
    let user_home = dir.path().join("home");
    std::fs::create_dir(&user_home).unwrap();
    std::os::unix::fs::chown(&user_home, Some(user.uid), Some(user.gid)).unwrap();
    let queue = user_home.join("queue");
    // runuser gives the user their passwd HOME (none here): XDG's folders say where theirs are.
    let (config_home, data_home) = (user_home.join(".config"), user_home.join(".local/share"));
    let env = [
        ("HOME", user_home.to_str().unwrap()),
        ("XDG_CONFIG_HOME", config_home.to_str().unwrap()),
        ("XDG_DATA_HOME", data_home.to_str().unwrap()),
    ];
    let exe = exe.to_str().unwrap();
    let init = user.run(exe, &["--home", queue.to_str().unwrap(), "init"], &env, &user_home);
    assert!(init.status.success(), "{}", stderr(&init));
    let out = user.run(exe, &["--home", queue.to_str().unwrap(), "systemd", "--install"], &env, &user_home);
    assert!(out.status.success(), "{}", stderr(&out));
    let unit_dir = user_home.join(".config/systemd/user");
    let service = std::fs::read_to_string(unit_dir.join("carma-tick.service")).unwrap();
    assert!(
        service.lines().any(|l| l == format!("ExecStart={exe} --home {} tick", queue.display())),
        "{service}"
    );
    assert!(unit_dir.join("carma-tick.timer").exists() && !unit_dir.join("carma-mps.service").exists());
    assert!(user_home.join(".local/share/man/man1/carma.1").exists());
    let text = stdout(&out);
    assert!(
        text.contains("systemctl --user daemon-reload && systemctl --user enable --now carma-tick.timer"),
        "{text}"
    );
    assert_eq!(
        std::fs::metadata(unit_dir.join("carma-tick.timer"))
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap(),
        user.uid
    );
}

/// Goal: `carma config check` reads the queue without ticking, says one line a check, and
/// exits 78 naming the count while a problem stands: no tick yet, a folder's mode, a link in
/// place of a part. Fails on the old code (no such verb: exit 2).
#[test]
fn config_check_names_each_problem_with_its_fix_and_exits_78() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let first = home.run(&["config", "check"]);
    assert_error(
        &first,
        78,
        &format!(
            "1 problem found in {}; fix each as its line says, then run `carma config check` again",
            home.path().display()
        ),
    );
    let text = stdout(&first);
    assert!(
        text.contains("PROBLEM timer     no tick has run yet: systemctl enable --now carma-tick.timer"),
        "{text}"
    );
    assert!(text.contains("ok      gpus      fake"), "{text}");
    assert!(text.contains("ok      config    "), "{text}");
    home.ok(&["tick"]);
    let sound = home.ok(&["config", "check"]);
    assert!(!sound.contains("PROBLEM"), "{sound}");
    assert!(sound.lines().all(|l| !l.is_empty()));
    std::fs::set_permissions(home.path().join("runs"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let bad = home.run(&["config", "check", "--json"]);
    assert_eq!(bad.status.code(), Some(78), "{}", stderr(&bad));
    let report: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    let problems: Vec<&serde_json::Value> =
        report["findings"].as_array().unwrap().iter().filter(|f| f["level"] == "problem").collect();
    assert_eq!(problems.len(), 1, "{report:#}");
    let want =
        if common::skip::is_root() { "runs has mode 777, not 711" } else { "runs has mode 777, not 700" };
    assert!(problems[0]["detail"].as_str().unwrap().ends_with(want), "{report:#}");
    assert!(problems[0]["fix"].as_str().unwrap().contains("carma init"));
    assert_eq!(report["problems"], 1);
    home.ok(&["init"]);
    home.ok(&["config", "check"]);
}

/// Goal: `carma report --by-user` gives each submitter's tasks, GPU-hours and relaunches, in
/// a table that fits 80 columns and as CSV, from the journal alone. Fails on the old code (no
/// `--by-user`: exit 2).
#[test]
fn report_by_user_accounts_gpu_time_per_submitter() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let two = home.ok(&["submit", "--parsable", "--gpus", "2", "--gpu-mem", "1GiB", "--", "sleep", "1"]);
    let one = home.ok(&["submit", "--parsable", "--gpus", "1", "--gpu-mem", "1GiB", "--", "false"]);
    home.tick_until_done(Duration::from_secs(60));
    let (two, one) = (two.trim(), one.trim());
    let table = home.ok(&["report", "--by-user"]);
    for line in table.lines() {
        assert!(line.chars().count() <= 80, "wider than 80 columns: {line:?}");
    }
    let me =
        common::stdout(&std::process::Command::new("id").arg("-un").output().unwrap()).trim().to_string();
    let row = table.lines().find(|l| l.trim_start().starts_with(&me[..me.len().min(10)])).expect(&table);
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&words[1..5], ["2", "1", "1", "0"], "tasks, done, failed, cancelled: {row}");
    assert_eq!(words[5], "0.00", "GPU-hours to two places: {row}");
    assert!(table.lines().any(|l| l.trim_start().starts_with("total")), "{table}");
    let csv = home.ok(&["report", "--by-user", "--csv"]);
    let mut lines = csv.lines();
    assert!(lines.next().unwrap().starts_with("label,uid,user,tasks,finished,failed,cancelled,gpu_hours,"));
    assert_eq!(lines.count(), 1, "{csv}");
    let json: serde_json::Value = serde_json::from_str(&home.ok(&["report", "--json"])).unwrap();
    let user = &json["reports"][0]["users"][0];
    assert_eq!((&user["tasks"], &user["attempts"], &user["failed"]), (&2.into(), &2.into(), &1.into()));
    let gpu_hours = user["gpu_hours"].as_f64().unwrap();
    assert!(gpu_hours > 2.0 / 3600.0 * 0.9, "2 GPUs for about a second, and the other's run: {gpu_hours}");
    assert!(!two.is_empty() && !one.is_empty());
}

/// Goal: retention removes the run folders of a user's oldest ended tasks past
/// `runs-per-user-max`, keeps the latest and a running task's, removes a planted link without
/// following it, and `carma logs` of a removed one says why. Fails on the old code (nothing
/// is removed).
#[test]
fn retention_keeps_the_latest_ended_and_never_a_running_tasks_folder() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let config = std::fs::read_to_string(home.path().join("config.toml")).unwrap();
    home.set_config(&format!("{config}\n[retention]\nruns-per-user-max = 2\n"));
    let runs = home.path().join("runs");
    let outside = home.path().join("outside.txt");
    std::fs::write(&outside, b"not the tick's to remove").unwrap();
    let mut ended = Vec::new();
    for i in 0..4 {
        let echo = format!("echo {i}");
        let args = ["submit", "--parsable", "--gpus", "1", "--gpu-mem", "1GiB", "--", "sh", "-c", &echo];
        ended.push(home.ok(&args).trim().to_string());
        home.tick_until_done(Duration::from_secs(60));
        if i == 0 {
            // What a job could leave in its folder: a link out of it.
            std::os::unix::fs::symlink(&outside, runs.join(&ended[0]).join("1").join("planted")).unwrap();
        }
    }
    let running = home
        .ok(&["submit", "--parsable", "--gpus", "1", "--gpu-mem", "1GiB", "--", "sleep", "60"])
        .trim()
        .to_string();
    home.ok(&["tick"]);
    home.ok(&["tick"]);
    let present = |id: &str| runs.join(id).exists();
    assert_eq!(
        ended.iter().map(|id| present(id)).collect::<Vec<_>>(),
        [false, false, true, true],
        "the two latest stay"
    );
    assert!(present(&running), "a running task's folder stays");
    assert_eq!(std::fs::read(&outside).unwrap(), b"not the tick's to remove");
    let logs = home.run(&["logs", &ended[0]]);
    assert_eq!(logs.status.code(), Some(2));
    assert!(stderr(&logs).contains("has ended and its run folder"), "{}", stderr(&logs));
    assert_eq!(home.ok(&["logs", &ended[3]]), "3\n");
    home.ok(&["cancel", &running]);
    home.ok(&["tick"]);
}
