//! An attempt's processes live and die together, through the real tick, real supervisors
//! and real jobs.
//!
//! Goal: a SIGKILLed supervisor's job children (`sleep 100 & sleep 100; wait`) are killed by
//! the next tick, journaled as Reaped, before the Lost verdict and before attempt 2 starts; a
//! `setsid` or double-forked child does not outlive its task's Finished, time limit or
//! cancel; processes that survive SIGKILL hold the attempt (no Lost, no retry) until they
//! are gone. As root every scenario runs twice: with the job's own cgroup, and with
//! `CARMA_NO_CGROUP=1` (the process-tree fallback, as on a machine without a writable
//! cgroup2). The frozen-process test needs root and the cgroup v1 freezer, and says so
//! when it skips.

mod common;

use common::skip::{Need, skip};

use std::path::Path;
use std::time::{Duration, Instant};

use common::TestHome;
use common::cluster::{TWO_A100, kinds};

/// The two ways jobs are contained on this machine.
fn modes() -> Vec<bool> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 { vec![false, true] } else { vec![true] }
}

/// `carma tick`, with the cgroup turned off when `no_cgroup`.
fn tick(home: &TestHome, no_cgroup: bool) {
    let mut cmd = home.cmd();
    if no_cgroup {
        cmd.env("CARMA_NO_CGROUP", "1");
    }
    let out = cmd.arg("tick").output().expect("run tick");
    assert!(out.status.success(), "tick failed: {}", common::stderr(&out));
}

fn tick_until<F: Fn(&[serde_json::Value]) -> bool>(home: &TestHome, id: &str, no_cgroup: bool, done: F) {
    let started = Instant::now();
    loop {
        tick(home, no_cgroup);
        if done(&home.task_events(id)) {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{:?}", kinds(&home.task_events(id)));
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn has(kind: &'static str) -> impl Fn(&[serde_json::Value]) -> bool {
    move |events| events.iter().any(|e| e["kind"] == kind)
}

/// (pid, start time) of a process, to tell it from a later one with the same pid.
type Proc = (u32, u64);

fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// True while `process` runs (not a zombie, same start time).
fn running(process: Proc) -> bool {
    stat_fields(process.0).is_some_and(|f| f[0] != "Z" && f[19].parse::<u64>().ok() == Some(process.1))
}

/// The live `comm` processes in session `sid`.
fn in_session(sid: u32, comm: &str) -> Vec<Proc> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let is_comm = text.contains(&format!("({comm})"));
        let Some(fields) = stat_fields(pid) else { continue };
        if is_comm && fields[0] != "Z" && fields[3] == sid.to_string() {
            found.push((pid, fields[19].parse().expect("start time")));
        }
    }
    found
}

fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn supervisor_pid(home: &TestHome, id: &str, attempt: u32) -> u32 {
    let launched = home
        .task_events(id)
        .into_iter()
        .find(|e| e["kind"] == "Launched" && e["data"]["attempt"] == attempt)
        .expect("a Launched event");
    launched["data"]["supervisor"]["pid"].as_u64().expect("pid") as u32
}

fn read_pid(path: &Path) -> u32 {
    wait_for("a pid file", || std::fs::read_to_string(path).ok().filter(|t| t.ends_with('\n')))
        .trim()
        .parse()
        .expect("pid")
}

fn start_time(pid: u32) -> Proc {
    (pid, stat_fields(pid).expect("stat")[19].parse().expect("start"))
}

/// Attempt 1 forks two sleeps and waits; attempt 2 writes which of the pids listed in
/// `pids` (pid and start time per line) still run, then `done`.
fn two_sleeps_then_check(dir: &Path) -> String {
    format!(
        r#"if [ "$CARMA_ATTEMPT" = 1 ]; then sleep 100 & sleep 100; wait; exit 0; fi
while read pid start; do
  if [ "$(cut -d' ' -f22 /proc/$pid/stat 2>/dev/null)" = "$start" ] && [ "$(cut -d' ' -f3 /proc/$pid/stat)" != Z ]; then echo "alive $pid"; fi
done < {pids}
echo done"#,
        pids = dir.join("attempt1.pids").display()
    )
}

#[test]
fn a_killed_supervisors_children_die_before_the_retry_starts() {
    for no_cgroup in modes() {
        let home = TestHome::with_fake_gpus(TWO_A100, "magm");
        let id = home.submit_sh("sleeps", Some("1GiB"), &two_sleeps_then_check(home.path()));
        tick(&home, no_cgroup);
        let supervisor = supervisor_pid(&home, &id, 1);
        let sleeps =
            wait_for("two sleeps", || Some(in_session(supervisor, "sleep")).filter(|s| s.len() == 2));
        let lines: String = sleeps.iter().map(|(pid, start)| format!("{pid} {start}\n")).collect();
        std::fs::write(home.path().join("attempt1.pids"), lines).unwrap();

        // SAFETY: kill has no memory effects; the pid is the supervisor the journal names.
        assert_eq!(unsafe { libc::kill(supervisor as i32, libc::SIGKILL) }, 0);
        wait_for("the supervisor's death", || (!running(start_time_or_dead(supervisor))).then_some(()));
        // The parent-death signal ends only the job's first process: both sleeps live on.
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            sleeps.iter().all(|s| running(*s)),
            "cgroup off = {no_cgroup}: the sleeps outlive the supervisor until a tick"
        );

        tick(&home, no_cgroup);
        for sleep in &sleeps {
            assert!(!running(*sleep), "cgroup off = {no_cgroup}: {sleep:?} of attempt 1 survived the tick");
        }
        let events = home.task_events(&id);
        let names = kinds(&events);
        let at = |kind: &str, attempt: u64| {
            events
                .iter()
                .position(|e| e["kind"] == kind && e["data"]["attempt"].as_u64().is_none_or(|a| a == attempt))
                .unwrap_or_else(|| panic!("no {kind} in {names:?}"))
        };
        assert!(at("Reaped", 1) < at("Lost", 1), "{names:?}");
        assert!(at("Lost", 1) < at("Placed", 2) && at("Placed", 2) < at("Launched", 2), "{names:?}");
        let reaped = &events[at("Reaped", 1)]["data"];
        assert_eq!(reaped["processes"], 2, "{reaped}");
        assert_eq!(reaped["remaining"], serde_json::json!([]));
        assert!(
            reaped["detail"].as_str().unwrap().starts_with("killed 2 leftover process(es) of attempt 1: ")
        );

        tick_until(&home, &id, no_cgroup, has("Finished"));
        let check = std::fs::read_to_string(home.path().join(format!("runs/{id}/2/stdout.log"))).unwrap();
        assert_eq!(check, "done\n", "cgroup off = {no_cgroup}: attempt 2 saw attempt 1's processes");
    }
}

/// The process's identity now, or one that can never run (it is gone).
fn start_time_or_dead(pid: u32) -> Proc {
    stat_fields(pid).and_then(|f| f[19].parse().ok()).map_or((pid, u64::MAX), |start| (pid, start))
}

#[test]
fn setsid_and_double_forked_children_do_not_outlive_finished() {
    for no_cgroup in modes() {
        let home = TestHome::with_fake_gpus(TWO_A100, "magm");
        let dir = home.path().display().to_string();
        let script = format!(
            "setsid sleep 321 & echo $! > {dir}/setsid.pid; (setsid sleep 322 & echo $! > {dir}/double.pid); sleep 1"
        );
        let id = home.submit_sh("escape", Some("1GiB"), &script);
        tick(&home, no_cgroup);
        let setsid = start_time(read_pid(&home.path().join("setsid.pid")));
        let double = start_time(read_pid(&home.path().join("double.pid")));
        tick_until(&home, &id, no_cgroup, has("Finished"));
        assert!(!running(setsid), "cgroup off = {no_cgroup}: `setsid sleep 321 &` outlived Finished");
        assert!(!running(double), "cgroup off = {no_cgroup}: a double-forked child outlived Finished");
        // The supervisor ended them itself, before its exit record: the tick found nothing.
        assert_eq!(kinds(&home.task_events(&id)), ["Submitted", "Placed", "Launched", "Finished"]);
        let log = std::fs::read_to_string(home.path().join(format!("runs/{id}/1/supervisor.log"))).unwrap();
        assert!(log.contains("ended 2 leftover process(es) of the job"), "{log}");
    }
}

#[test]
fn time_limit_and_cancel_end_double_forked_children() {
    for no_cgroup in modes() {
        let home = TestHome::with_fake_gpus(TWO_A100, "magm");
        let dir = home.path().display().to_string();
        let limited = home.ok(&[
            "submit",
            "--parsable",
            "--mem",
            "1GiB",
            "--time-limit",
            "2s",
            "--",
            "sh",
            "-c",
            &format!("(setsid sleep 300 & echo $! > {dir}/limited.pid); sleep 300"),
        ]);
        let limited = limited.trim().to_string();
        let cancelled = home.submit_sh(
            "cancelled",
            Some("1GiB"),
            &format!("(setsid sleep 301 & echo $! > {dir}/cancelled.pid); sleep 301"),
        );
        tick(&home, no_cgroup);
        let limited_child = start_time(read_pid(&home.path().join("limited.pid")));
        let cancelled_child = start_time(read_pid(&home.path().join("cancelled.pid")));
        home.ok(&["cancel", &cancelled]);
        tick_until(&home, &cancelled, no_cgroup, has("Stopped"));
        assert!(!running(cancelled_child), "cgroup off = {no_cgroup}: cancel left a double-forked child");
        tick_until(&home, &limited, no_cgroup, has("Failed"));
        let failed = home.task_events(&limited).pop().unwrap();
        assert_eq!(failed["data"]["outcome"], "time limit");
        assert!(
            !running(limited_child),
            "cgroup off = {no_cgroup}: the time limit left a double-forked child"
        );
    }
}

/// A cgroup v1 freezer group, to make a process that SIGKILL cannot end until it is thawed.
struct Freezer {
    dir: std::path::PathBuf,
}

impl Freezer {
    fn create() -> Option<Freezer> {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let dir = Path::new("/sys/fs/cgroup/freezer").join(format!("carma-test-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some(Freezer { dir })
    }

    fn freeze(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).expect("move into the freezer");
        std::fs::write(self.dir.join("freezer.state"), "FROZEN").expect("freeze");
        wait_for("FROZEN", || {
            let state = std::fs::read_to_string(self.dir.join("freezer.state")).unwrap_or_default();
            (state.trim() == "FROZEN").then_some(())
        });
    }

    fn thaw(&self) {
        std::fs::write(self.dir.join("freezer.state"), "THAWED").expect("thaw");
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        // After a failed assertion the frozen sleep may still be inside: end it (it is ours).
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|line| line.trim().parse::<i32>().ok()) {
            // SAFETY: kill has no memory effects; the pid is a sleep this test froze.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = std::fs::write(self.dir.join("freezer.state"), "THAWED");
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn processes_that_survive_sigkill_hold_the_attempt_until_they_are_gone() {
    for no_cgroup in modes() {
        let Some(freezer) = Freezer::create() else {
            return skip(
                Need::CgroupV1Freezer,
                "needs root and a writable cgroup v1 freezer at /sys/fs/cgroup/freezer (run the tests as root on such a machine)",
            );
        };
        let home = TestHome::with_fake_gpus(TWO_A100, "magm");
        let id = home.submit_sh("frozen", Some("1GiB"), &two_sleeps_then_check(home.path()));
        std::fs::write(home.path().join("attempt1.pids"), "").unwrap();
        tick(&home, no_cgroup);
        let supervisor = supervisor_pid(&home, &id, 1);
        let sleeps =
            wait_for("two sleeps", || Some(in_session(supervisor, "sleep")).filter(|s| s.len() == 2));
        let (frozen, free) = (sleeps[0], sleeps[1]);
        freezer.freeze(frozen.0);
        // SAFETY: kill has no memory effects; the pid is the supervisor the journal names.
        assert_eq!(unsafe { libc::kill(supervisor as i32, libc::SIGKILL) }, 0);
        wait_for("the supervisor's death", || (!running(start_time_or_dead(supervisor))).then_some(()));

        tick(&home, no_cgroup);
        assert!(!running(free), "the other sleep is killed");
        assert!(running(frozen), "a frozen process survives SIGKILL");
        let events = home.task_events(&id);
        assert_eq!(kinds(&events), ["Submitted", "Placed", "Launched", "Reaped"], "no Lost while it lives");
        let reaped = &events[3]["data"];
        assert_eq!(reaped["remaining"], serde_json::json!([frozen.0]));
        let detail = reaped["detail"].as_str().unwrap();
        assert!(detail.contains(&format!("survive SIGKILL: {} (state D)", frozen.0)), "{detail}");
        let show: serde_json::Value = serde_json::from_str(&home.ok(&["show", &id, "--json"])).unwrap();
        assert_eq!(show["task"]["status"], "Running", "the attempt still holds its GPUs");

        tick(&home, no_cgroup);
        assert_eq!(kinds(&home.task_events(&id)).len(), 4, "the same survivor is journaled once");

        freezer.thaw();
        wait_for("the thawed process to die", || (!running(frozen)).then_some(()));
        tick_until(&home, &id, no_cgroup, has("Finished"));
        let names = kinds(&home.task_events(&id));
        assert_eq!(
            &names[3..8],
            ["Reaped", "Reaped", "Lost", "Requeued", "Placed"],
            "the last Reaped says they are gone, then the verdict and the retry: {names:?}"
        );
        let gone = &home.task_events(&id)[4]["data"];
        assert_eq!(gone["remaining"], serde_json::json!([]));
        assert_eq!(gone["detail"], "the processes of attempt 1 are gone");
    }
}
