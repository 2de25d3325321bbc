//! Issue 34: preemption in a real tick, as root with throw-away users on fake GPUs.
//!
//! Goal: a low-priority task that opted in (`requeue = true`, `--signal USR1@5`) is warned with
//! USR1 when a higher-priority task cannot start, checkpoints and exits; the higher-priority
//! task starts within the grace plus two ticks; the victim is queued again as attempt 2, runs
//! again and finishes; its Preempted record carries the work it lost; a task that did not opt in
//! and a task inside `min-run` are never touched.
//! Method: the real binary, real `carma tick`s, real job processes run as throw-away users
//! (`useradd`; elsewhere the test prints "skipped"). Three fake 40 GiB GPUs each hold one 30 GiB
//! task (memory in flight keeps their room taken), so the 30 GiB newcomer fits only where a task
//! gives way. The flags `--requeue`/`--no-requeue` are wired by another part of this release: the
//! tasks are submitted as spec files with the `requeue` key.
//! With `mode = "suspend"` (a stand-in `cuda-checkpoint` recording its argv; the fake GPU lists
//! the victim's pid): the victim is suspended and resumed on its GPU, and without the tool, or
//! when its `--toggle` fails, it is requeued with the reason why.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::users::{SharedQueue, ThrowawayUser, skip_without_users};
use serde_json::Value;

const THREE_A100: &str = r#"[
  {"uuid": "GPU-fake-0000", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0},
  {"uuid": "GPU-fake-0001", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0},
  {"uuid": "GPU-fake-0002", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0}
]"#;

/// The grace between the warning and the stop, and the youngest attempt preemption may take.
const GRACE_S: u64 = 3;
const MIN_RUN_S: u64 = 6;

/// Checkpoints on USR1 and exits 0 in its first attempt (as Slurm, still a requeue: it was
/// preempted); says it resumed in the next.
const LOW: &str = "#!/bin/sh
if [ \"$CARMA_ATTEMPT\" != 1 ]; then echo \"resumed in attempt $CARMA_ATTEMPT\"; exit 0; fi
trap 'echo \"USR1: checkpoint saved\"; exit 0' USR1
i=0
while [ $i -lt 900 ]; do sleep 0.1; i=$((i + 1)); done
echo never warned
";

const SHORT: &str = "#!/bin/sh
echo \"attempt $CARMA_ATTEMPT\"
sleep 2
";

const MEDIUM: &str = "#!/bin/sh
echo \"attempt $CARMA_ATTEMPT\"
sleep 12
";

struct Lab(SharedQueue);

impl Lab {
    fn new() -> Lab {
        Lab::with_policy(|_| "mode = \"requeue\"\n".to_string())
    }

    /// A lab whose `[sched.preemption]` table starts with `policy(home)` (mode and its keys).
    fn with_policy(policy: impl Fn(&std::path::Path) -> String) -> Lab {
        let lab = Lab(SharedQueue::new());
        let policy = policy(lab.0.home.path());
        let gpus = lab.0.home.gpus_file();
        std::fs::write(&gpus, THREE_A100).unwrap();
        lab.0.home.set_config(&format!(
            "[tick]\ngpus = \"fake:{}\"\n\n[sched]\npolicy = \"magm\"\nin-flight-grace-ms = 600000\n\n\
             [sched.preemption]\n{policy}grace = \"{GRACE_S}s\"\nmin-run = \"{MIN_RUN_S}s\"\nhead-wait = \"1h\"\n",
            gpus.display()
        ));
        lab
    }

    /// A job script and its spec file, readable and runnable by anyone.
    fn spec(&self, name: &str, script: &str, extra: &str) -> String {
        let dir = self.0.home.path();
        let program = dir.join(format!("{name}.sh"));
        std::fs::write(&program, script).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let spec = dir.join(format!("{name}.toml"));
        // Ten minutes unless `extra` says otherwise.
        let limit = if extra.contains("time_limit") { "" } else { "time_limit = \"10m\"\n" };
        let text = format!(
            "name = \"{name}\"\ncommand = [\"{}\"]\nmemory = \"30GiB\"\n{limit}{extra}",
            program.display()
        );
        std::fs::write(&spec, text).unwrap();
        std::fs::set_permissions(&spec, std::fs::Permissions::from_mode(0o644)).unwrap();
        spec.to_str().unwrap().to_string()
    }

    fn submit(&self, user: &ThrowawayUser, spec: &str) -> String {
        self.0.ok_as(user, &["submit", "--parsable", spec]).trim().to_string()
    }

    fn task(&self, id: &str) -> Value {
        let queue = self.0.queue();
        queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).cloned().unwrap()
    }

    fn tick(&self) {
        self.0.home.ok(&["tick"]);
    }

    /// Ticks until `done` holds for the task, at most `limit`.
    fn tick_until(&self, id: &str, limit: Duration, done: impl Fn(&Value) -> bool) {
        let started = Instant::now();
        loop {
            self.tick();
            let task = self.task(id);
            if done(&task) {
                return;
            }
            assert!(started.elapsed() < limit, "not done within {limit:?}: {task:#}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The task's records, as `carma events --json` gives them.
    fn events(&self, id: &str) -> Vec<Value> {
        let text = self.0.home.ok(&["events", "--task", id, "--json"]);
        text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }

    fn kinds(&self, id: &str) -> Vec<String> {
        self.events(id).iter().map(|e| e["kind"].as_str().unwrap_or_default().to_string()).collect()
    }
}

fn running(task: &Value) -> bool {
    task["state"] == "Running"
}

fn ended(task: &Value) -> bool {
    matches!(task["state"].as_str(), Some("Finished" | "Failed" | "Timeout" | "Cancelled"))
}

#[test]
fn a_higher_priority_task_takes_the_gpu_of_an_opted_in_one_which_resumes_later() {
    if skip_without_users() {
        return;
    }
    let lab = Lab::new();
    let (alice, bob) = (ThrowawayUser::create("pra"), ThrowawayUser::create("prb"));
    let low = lab.spec("low", LOW, "nice = 5\nrequeue = true\nsignal = \"USR1@5\"\n");
    let norq = lab.spec("norq", MEDIUM, "nice = 5\nrequeue = false\n");
    let young = lab.spec("young", MEDIUM, "nice = 5\nrequeue = true\n");
    let urgent = lab.spec("urgent", SHORT, "");

    let low = lab.submit(&alice, &low);
    let norq = lab.submit(&bob, &norq);
    lab.tick_until(&low, Duration::from_secs(30), running);
    lab.tick_until(&norq, Duration::from_secs(30), running);
    let low_started = Instant::now();
    // The first two are past min-run; the third starts now and is not.
    std::thread::sleep(Duration::from_secs(MIN_RUN_S + 1));
    let young = lab.submit(&bob, &young);
    lab.tick_until(&young, Duration::from_secs(30), running);
    let urgent = lab.submit(&bob, &urgent);
    lab.tick();
    let preempted_at = Instant::now();
    let kinds = lab.kinds(&low);
    assert!(kinds.iter().any(|k| k == "Preempted"), "the tick that saw the urgent task preempted: {kinds:?}");
    assert_eq!(
        lab.task(&urgent)["reason"].as_str(),
        Some(format!("Preempting: waiting for {low} to stop").as_str()),
        "{:#}",
        lab.task(&urgent)
    );
    // The victim, warned and in its grace, says so instead of where it was placed.
    let victim = lab.task(&low);
    let reason = victim["reason"].as_str().unwrap_or_default();
    let said = format!("Preempted by {urgent}: warned at ");
    assert!(reason.starts_with(&said), "{victim:#}");
    assert!(
        reason.ends_with(", stopped after its grace and queued again (priority 0 preempts priority -1 or lower (priority-gap 1))"),
        "{victim:#}"
    );

    // The victim checkpoints on USR1 and exits; the urgent task starts within the grace plus
    // two ticks: at most two ticks begin after the grace has run out.
    let mut after_grace = 0;
    loop {
        if preempted_at.elapsed() >= Duration::from_secs(GRACE_S) {
            after_grace += 1;
        }
        lab.tick();
        if running(&lab.task(&urgent)) {
            break;
        }
        assert!(after_grace < 2, "the urgent task did not start within the grace plus two ticks");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Everyone ends; the victim ran again and finished.
    for id in [&urgent, &low, &young, &norq] {
        lab.tick_until(id, Duration::from_secs(90), ended);
    }
    for id in [&urgent, &low, &young, &norq] {
        assert_eq!(lab.task(id)["state"], "Finished", "{:#}", lab.task(id));
    }
    let preempted: Vec<Value> = lab.events(&low).into_iter().filter(|e| e["kind"] == "Preempted").collect();
    assert_eq!(preempted.len(), 1, "{preempted:#?}");
    let record = &preempted[0]["data"];
    assert_eq!(record["attempt"], 1);
    assert_eq!(record["by"], urgent.as_str());
    assert_eq!(record["reason"], "priority 0 preempts priority -1 or lower (priority-gap 1)");
    let lost_ms = record["lost_ms"].as_u64().unwrap();
    let ran_ms = u64::try_from(low_started.elapsed().as_millis()).unwrap();
    assert!((MIN_RUN_S * 1000..=ran_ms).contains(&lost_ms), "lost {lost_ms} ms of a run of {ran_ms} ms");
    let text = lab.0.home.ok(&["events", "--task", &low]);
    assert!(text.contains(&format!("attempt 1 stopped: exit 0: preempted by {urgent}")), "{text}");
    assert!(
        text.contains(&format!("to the main queue: preempted by {urgent} (priority 0 preempts priority -1 or lower (priority-gap 1));")),
        "{text}"
    );
    assert_eq!(lab.0.ok_as(&alice, &["logs", "--stdout", &low]), "resumed in attempt 2\n");
    let show = lab.0.home.ok(&["show", &low]);
    assert!(
        show.contains(&format!(
            "preempted by {urgent}: priority 0 preempts priority -1 or lower (priority-gap 1);"
        )),
        "{show}"
    );
    // Neither the task that did not opt in nor the one inside min-run was touched.
    for id in [&young, &norq] {
        let kinds = lab.kinds(id);
        assert!(!kinds.iter().any(|k| k == "Preempted" || k == "Requeued"), "{id}: {kinds:?}");
        assert_eq!(lab.task(id)["attempts"], 1, "{:#}", lab.task(id));
    }
}

/// Notes USR1 and runs on; finishes 0 in its first attempt, fails in any other (it should have
/// had none).
const STUBBORN: &str = "#!/bin/sh
if [ \"$CARMA_ATTEMPT\" != 1 ]; then echo \"attempt $CARMA_ATTEMPT\"; exit 3; fi
trap 'echo warned' USR1
i=0
while [ $i -lt 160 ]; do sleep 0.1; i=$((i + 1)); done
echo done
";

/// Goal: a preemption whose preemptor is cancelled during the grace is withdrawn: the victim,
/// still running, is not stopped at the end of the grace, runs to its end and finishes as its
/// exit 0 says (one attempt, no Requeued), and `events` and `show` say why.
#[test]
fn a_cancelled_preemptor_withdraws_the_preemption_and_the_victim_finishes() {
    if skip_without_users() {
        return;
    }
    let lab = Lab::new();
    let (alice, bob) = (ThrowawayUser::create("pwa"), ThrowawayUser::create("pwb"));
    let low = lab.spec("low", STUBBORN, "nice = 5\nrequeue = true\nsignal = \"USR1@5\"\n");
    let low = lab.submit(&alice, &low);
    for i in 0..2 {
        let filler = lab.spec(&format!("norq{i}"), MEDIUM, "nice = 5\nrequeue = false\n");
        let filler = lab.submit(&bob, &filler);
        lab.tick_until(&filler, Duration::from_secs(30), running);
    }
    lab.tick_until(&low, Duration::from_secs(30), running);
    std::thread::sleep(Duration::from_secs(MIN_RUN_S + 1));
    let urgent = lab.spec("urgent", SHORT, "");
    let urgent = lab.submit(&bob, &urgent);
    lab.tick();
    assert!(lab.kinds(&low).iter().any(|k| k == "Preempted"), "{:?}", lab.kinds(&low));
    lab.0.ok_as(&bob, &["cancel", &urgent]);
    lab.tick_until(&low, Duration::from_secs(60), ended);

    assert_eq!(lab.task(&urgent)["state"], "Cancelled");
    assert_eq!(lab.task(&low)["state"], "Finished", "{:#}", lab.task(&low));
    assert_eq!(lab.task(&low)["attempts"], 1, "{:#}", lab.task(&low));
    let kinds = lab.kinds(&low);
    assert!(!kinds.iter().any(|k| k == "Requeued" || k == "Stopped"), "{kinds:?}");
    let withdrawn: Vec<Value> =
        lab.events(&low).into_iter().filter(|e| e["kind"] == "PreemptionWithdrawn").collect();
    assert_eq!(withdrawn.len(), 1, "{kinds:?}");
    let reason = format!("preemptor {urgent} was cancelled");
    assert_eq!(withdrawn[0]["data"]["reason"], reason.as_str());
    assert_eq!(withdrawn[0]["data"]["attempt"], 1);
    let text = lab.0.home.ok(&["events", "--task", &low, "--kind", "PreemptionWithdrawn"]);
    assert!(text.contains(&format!("{low} attempt 1 preemption withdrawn: {reason}; it runs on")), "{text}");
    let show = lab.0.home.ok(&["show", &low]);
    assert!(show.contains(&format!("preemption withdrawn: {reason}; it ran on")), "{show}");
    assert_eq!(lab.0.ok_as(&alice, &["logs", "--stdout", &low]), "warned\ndone\n");
}

/// `mode = "suspend"` without `cuda-checkpoint`: the victim is requeued, and its Preempted and
/// Requeued records say exactly why it was not suspended.
#[test]
fn suspend_without_cuda_checkpoint_requeues_and_says_why() {
    if skip_without_users() {
        return;
    }
    let lab = Lab::with_policy(|_| {
        "mode = \"suspend\"\ncuda-checkpoint = \"/nonexistent/cuda-checkpoint\"\n".to_string()
    });
    let (alice, bob) = (ThrowawayUser::create("psa"), ThrowawayUser::create("psb"));
    let lows: Vec<String> = (0..3)
        .map(|i| {
            let spec = lab.spec(&format!("low{i}"), LOW, "nice = 5\nrequeue = true\nsignal = \"USR1@5\"\n");
            lab.submit(&alice, &spec)
        })
        .collect();
    for id in &lows {
        lab.tick_until(id, Duration::from_secs(30), running);
    }
    std::thread::sleep(Duration::from_secs(MIN_RUN_S + 1));
    let urgent = lab.submit(&bob, &lab.spec("urgent", SHORT, ""));
    lab.tick();
    let victims: Vec<&String> =
        lows.iter().filter(|id| lab.kinds(id).iter().any(|k| k == "Preempted")).collect();
    assert_eq!(victims.len(), 1, "one victim: {victims:?}");
    let victim = victims[0];
    let why = "priority 0 preempts priority -1 or lower (priority-gap 1); suspend unavailable (cuda-checkpoint \
               at /nonexistent/cuda-checkpoint: No such file or directory (os error 2)): requeued instead";
    let preempted = lab.events(victim).into_iter().find(|e| e["kind"] == "Preempted").unwrap();
    assert_eq!(preempted["data"]["reason"], why);
    lab.tick_until(&urgent, Duration::from_secs(30), running);
    let text = lab.0.home.ok(&["events", "--task", victim]);
    assert!(text.contains(&format!("to the main queue: preempted by {urgent} ({why});")), "{text}");
    let reason = lab.task(victim)["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.starts_with(&format!("Requeued after preemption by {urgent}: ")), "{reason}");
    // The others are cancelled; the victim runs again and finishes.
    for id in lows.iter().filter(|id| *id != victim) {
        lab.0.home.ok(&["cancel", id]);
    }
    lab.tick_until(victim, Duration::from_secs(60), ended);
    assert_eq!(lab.task(victim)["state"], "Finished", "{:#}", lab.task(victim));
    assert_eq!(lab.0.ok_as(&alice, &["logs", "--stdout", victim]), "resumed in attempt 2\n");
}

/// A stand-in for NVIDIA's `cuda-checkpoint`: records its argv in `DIR/argv` and keeps each
/// pid's CUDA state in `DIR/state-PID` (`--get-state` prints it, `running` when unset;
/// `--toggle` flips running and checkpointed), as the real tool answers.
const STAND_IN: &str = r#"#!/bin/sh
echo "$*" >> DIR/argv
state=DIR/state-$3
case "$1" in
  --get-state) if [ -f "$state" ]; then cat "$state"; else echo running; fi ;;
  --toggle) if [ "$(cat "$state" 2>/dev/null)" = checkpointed ]; then echo running > "$state"; else echo checkpointed > "$state"; fi ;;
  *) echo "unknown option $1" >&2; exit 1 ;;
esac
"#;

/// Writes its pid where the test reads it, then counts 150 steps of 0.1 s (a stopped process
/// counts none).
const VICTIM: &str = "#!/bin/sh
echo $$ > DIR/victim.pid
i=0
while [ $i -lt 150 ]; do sleep 0.1; i=$((i + 1)); done
echo \"victim done after $i steps\"
";

const FILLER: &str = "#!/bin/sh
sleep 120
";

/// The kernel's state letter of `pid` (`T` while stopped).
fn proc_state(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')').next().unwrap_or_default().split_whitespace().next().unwrap_or("?").to_string()
}

/// `mode = "suspend"` with a stand-in `cuda-checkpoint`: the victim is suspended (its GPU
/// process toggled, its processes stopped, a Suspended record), the preemptor starts on its
/// GPU and ends, the victim resumes on the same GPU (Resumed, toggled back, running again) and
/// finishes every step.
/// A suspend lab: `mode = "suspend"` with the stand-in `tool` (DIR: the shared folder), a
/// victim that opted in and two fillers that did not, one per GPU, all running past `min-run`;
/// the fake GPU lists the victim's process.
struct SuspendLab {
    lab: Lab,
    shared: std::path::PathBuf,
    alice: ThrowawayUser,
    bob: ThrowawayUser,
    victim: String,
    fillers: Vec<String>,
    pid: u32,
    gpu: String,
}

impl SuspendLab {
    fn new(tool_script: &str) -> SuspendLab {
        SuspendLab::with_victim(tool_script, "")
    }

    /// As [`SuspendLab::new`], the victim's spec ending with `extra`.
    fn with_victim(tool_script: &str, extra: &str) -> SuspendLab {
        SuspendLab::with_script(tool_script, VICTIM, extra)
    }

    /// As [`SuspendLab::with_victim`], the victim running `script` (DIR: the shared folder).
    fn with_script(tool_script: &str, script: &str, extra: &str) -> SuspendLab {
        let lab = Lab::with_policy(|home| {
            format!("mode = \"suspend\"\ncuda-checkpoint = \"{}\"\n", home.join("cuda-checkpoint").display())
        });
        let home = lab.0.home.path().to_path_buf();
        let shared = home.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let tool = home.join("cuda-checkpoint");
        std::fs::write(&tool, tool_script.replace("DIR", shared.to_str().unwrap())).unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (alice, bob) = (ThrowawayUser::create("pva"), ThrowawayUser::create("pvb"));
        let victim_script = script.replace("DIR", shared.to_str().unwrap());
        let victim = lab.submit(
            &alice,
            &lab.spec("victim", &victim_script, &format!("nice = 5\nrequeue = true\n{extra}")),
        );
        let fillers: Vec<String> = (0..2)
            .map(|i| {
                lab.submit(&bob, &lab.spec(&format!("filler{i}"), FILLER, "nice = 5\nrequeue = false\n"))
            })
            .collect();
        for id in std::iter::once(&victim).chain(&fillers) {
            lab.tick_until(id, Duration::from_secs(30), running);
        }
        // The fake GPU lists the victim's process, as NVML lists a CUDA process.
        let pid_file = shared.join("victim.pid");
        let started = Instant::now();
        while !pid_file.exists() {
            assert!(started.elapsed() < Duration::from_secs(10), "the victim never wrote its pid");
            std::thread::sleep(Duration::from_millis(50));
        }
        let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        let gpu = lab.task(&victim)["gpu_uuids"][0].as_str().unwrap().to_string();
        let mut gpus: Value = serde_json::from_str(THREE_A100).unwrap();
        for g in gpus.as_array_mut().unwrap().iter_mut().filter(|g| g["uuid"] == gpu.as_str()) {
            g["memory_used_mib"] = 1024.into();
            g["processes"] = serde_json::json!([{"pid": pid, "used_mib": 1024}]);
        }
        std::fs::write(lab.0.home.gpus_file(), gpus.to_string()).unwrap();
        std::thread::sleep(Duration::from_secs(MIN_RUN_S + 1));
        SuspendLab { lab, shared, alice, bob, victim, fillers, pid, gpu }
    }

    /// Cancels the fillers and waits for their end.
    fn finish(&self) {
        for id in &self.fillers {
            self.lab.0.home.ok(&["cancel", id]);
        }
        for id in &self.fillers {
            self.lab.tick_until(id, Duration::from_secs(30), ended);
        }
    }
}

#[test]
fn a_suspended_victim_gives_its_gpu_and_resumes_on_it_after_the_preemptor() {
    if skip_without_users() {
        return;
    }
    let suspend_lab = SuspendLab::new(STAND_IN);
    let SuspendLab { lab, shared, alice, bob, victim, pid, gpu, .. } = &suspend_lab;
    let pid = *pid;

    let urgent = lab.submit(bob, &lab.spec("urgent", SHORT, ""));
    lab.tick();
    let suspended: Vec<Value> = lab.events(victim).into_iter().filter(|e| e["kind"] == "Suspended").collect();
    assert_eq!(suspended.len(), 1, "{:?}", lab.kinds(victim));
    assert_eq!(suspended[0]["data"]["by"], urgent.as_str());
    assert_eq!(suspended[0]["data"]["attempt"], 1);
    assert_eq!(proc_state(pid), "T", "the victim's process is stopped");
    let argv = std::fs::read_to_string(shared.join("argv")).unwrap();
    assert_eq!(argv, format!("--get-state --pid {pid}\n--toggle --pid {pid}\n"));
    let text = lab.0.home.ok(&["events", "--task", victim]);
    assert!(
        text.contains(&format!("{victim} attempt 1 suspended for {urgent}: GPU memory released")),
        "{text}"
    );
    // `queue` says it is suspended and who it gave way to, as squeue's S.
    let row = lab.task(victim);
    assert_eq!(row["state"], "Suspended", "{row:#}");
    let reason = format!("Suspended: gave way to {urgent}; resumes on its GPUs once they have room");
    assert_eq!(row["reason"], reason.as_str());
    let compact = lab.0.home.ok(&["queue", "--state", "S", "--format", "id,st,state,reason"]);
    let lines: Vec<&str> = compact.lines().skip(1).collect();
    assert_eq!(lines.len(), 1, "{compact}");
    let cells: Vec<&str> = lines[0].split_whitespace().take(3).collect();
    assert!(victim.starts_with(cells[0]), "{compact}");
    assert_eq!(cells[1..], ["S", "Suspended"], "{compact}");
    assert!(lines[0].contains("Suspended: gave way to "), "{compact}");

    // The preemptor starts on the victim's GPU; the victim stays suspended meanwhile.
    lab.tick_until(&urgent, Duration::from_secs(30), running);
    assert_eq!(lab.task(&urgent)["gpu_uuids"][0], gpu.as_str());
    assert_eq!(proc_state(pid), "T", "{}", lab.0.home.ok(&["events", "--task", victim]));
    lab.tick_until(&urgent, Duration::from_secs(60), ended);

    // The preemptor ended: the victim resumes on the same GPU and finishes every step.
    lab.tick_until(victim, Duration::from_secs(30), |_| lab.kinds(victim).iter().any(|k| k == "Resumed"));
    let text = lab.0.home.ok(&["events", "--task", victim]);
    assert!(text.contains(&format!("{victim} attempt 1 resumed on its GPUs")), "{text}");
    assert_ne!(proc_state(pid), "T", "the victim's process runs again");
    let argv = std::fs::read_to_string(shared.join("argv")).unwrap();
    // Each process of the job is asked (all at once); only the one that says checkpointed is
    // toggled back, after the answers.
    let toggles: Vec<&str> = argv.lines().filter(|l| l.starts_with("--toggle")).collect();
    assert_eq!(toggles, [format!("--toggle --pid {pid}"), format!("--toggle --pid {pid}")], "{argv}");
    assert_eq!(argv.matches(&format!("--get-state --pid {pid}\n")).count(), 2, "{argv}");
    assert!(argv.ends_with(&format!("--toggle --pid {pid}\n")), "{argv}");
    assert_eq!(std::fs::read_to_string(shared.join(format!("state-{pid}"))).unwrap(), "running\n");
    lab.tick_until(victim, Duration::from_secs(60), ended);
    assert_eq!(lab.task(victim)["state"], "Finished", "{:#}", lab.task(victim));
    assert_eq!(lab.task(victim)["attempts"], 1, "{:#}", lab.task(victim));
    assert_eq!(lab.0.ok_as(alice, &["logs", "--stdout", victim]), "victim done after 150 steps\n");
    suspend_lab.finish();
}

/// A stand-in whose `--toggle` fails, as the real tool does on a process it cannot checkpoint.
const REFUSING_STAND_IN: &str = r#"#!/bin/sh
echo "$*" >> DIR/argv
case "$1" in
  --get-state) echo running ;;
  *) echo "toggle refused by the stand-in" >&2; exit 1 ;;
esac
"#;

/// A suspend whose `--toggle` fails falls back to requeue: Suspended, Resumed, then the
/// Preempted record saying why, the warning, and Requeued.
#[test]
fn a_failed_suspend_requeues_and_says_why() {
    if skip_without_users() {
        return;
    }
    let lab = SuspendLab::new(REFUSING_STAND_IN);
    let urgent = lab.lab.submit(&lab.bob, &lab.lab.spec("urgent", SHORT, ""));
    lab.lab.tick();
    let victim = &lab.victim;
    let kinds: Vec<String> =
        lab.lab.kinds(victim).into_iter().filter(|k| k != "Pending" && k != "SmObserved").collect();
    assert!(kinds.ends_with(&["Suspended".into(), "Resumed".into(), "Preempted".into()]), "{kinds:?}");
    let preempted = lab.lab.events(victim).into_iter().find(|e| e["kind"] == "Preempted").unwrap();
    let pid = lab.pid;
    assert_eq!(
        preempted["data"]["reason"],
        format!(
            "priority 0 preempts priority -1 or lower (priority-gap 1); suspend failed (`cuda-checkpoint --toggle --pid \
             {pid}` failed: exit status: 1: toggle refused by the stand-in): requeued instead"
        )
    );
    assert_ne!(proc_state(pid), "T", "a victim that was not suspended is not left stopped");
    lab.lab.tick_until(&urgent, Duration::from_secs(30), running);
    assert!(lab.lab.kinds(victim).iter().any(|k| k == "Requeued"), "{:?}", lab.lab.kinds(victim));
    let argv = std::fs::read_to_string(lab.shared.join("argv")).unwrap();
    assert_eq!(argv, format!("--get-state --pid {pid}\n--toggle --pid {pid}\n"));
    lab.lab.0.home.ok(&["cancel", victim]);
    lab.lab.tick_until(victim, Duration::from_secs(30), ended);
    lab.finish();
}

/// Goal: as Slurm's suspend, a suspended victim's time limit counts running time only.
/// Method: the victim (150 steps of 0.1 s, about 16 s of running) has a 24 s limit and is
/// suspended for a 12 s preemptor: its run spans more than 24 s of wall clock, yet it is not
/// stopped at its limit and finishes every step.
#[test]
fn a_suspended_victims_time_limit_counts_running_time_only() {
    if skip_without_users() {
        return;
    }
    let suspend_lab = SuspendLab::with_victim(STAND_IN, "time_limit = \"24s\"\n");
    let SuspendLab { lab, alice, bob, victim, .. } = &suspend_lab;
    let urgent = lab.submit(bob, &lab.spec("urgent", MEDIUM, ""));
    lab.tick();
    assert!(lab.kinds(victim).iter().any(|k| k == "Suspended"), "{:?}", lab.kinds(victim));
    lab.tick_until(&urgent, Duration::from_secs(60), ended);
    lab.tick_until(victim, Duration::from_secs(60), ended);
    let task = lab.task(victim);
    assert_eq!(task["state"], "Finished", "{task:#}");
    let span_ms = task["ended_ms"].as_u64().unwrap() - task["started_ms"].as_u64().unwrap();
    assert!(span_ms > 24_000, "the run spanned {span_ms} ms: not past its limit, so the test proves nothing");
    assert_eq!(lab.0.ok_as(alice, &["logs", "--stdout", victim]), "victim done after 150 steps\n");
    suspend_lab.finish();
}

/// A stand-in as [`STAND_IN`] that kills the tick that runs it (its parent) when the file
/// `DIR/kill-at--OPTION` is there, before it does anything: a tick killed at the tool.
const CRASHING_STAND_IN: &str = r#"#!/bin/sh
echo "$*" >> DIR/argv
state=DIR/state-$3
if [ -f "DIR/kill-at$1" ]; then rm -f "DIR/kill-at$1"; kill -9 $PPID; exit 1; fi
case "$1" in
  --get-state) if [ -f "$state" ]; then cat "$state"; else echo running; fi ;;
  --toggle) if [ "$(cat "$state" 2>/dev/null)" = checkpointed ]; then echo running > "$state"; else echo checkpointed > "$state"; fi ;;
  *) echo "unknown option $1" >&2; exit 1 ;;
esac
"#;

impl SuspendLab {
    /// `carma tick`, as root; whether it was killed (SIGKILL) rather than ending.
    fn tick_killed(&self, under_strace: bool) -> bool {
        let home = self.lab.0.home.path();
        let carma = env!("CARGO_BIN_EXE_carma");
        let mut command = if under_strace {
            let mut strace = std::process::Command::new(strace().expect("strace"));
            // The first pidfd_send_signal of the tick kills it: a tick killed at the signal.
            strace.args([
                "-f",
                "-qq",
                "-o",
                "/dev/null",
                "-e",
                "inject=pidfd_send_signal:signal=KILL",
                carma,
            ]);
            strace
        } else {
            std::process::Command::new(carma)
        };
        let out = command.arg("tick").env("CARMA_HOME", home).output().unwrap();
        use std::os::unix::process::ExitStatusExt;
        let killed = out.status.signal() == Some(libc::SIGKILL) || out.status.code() == Some(137);
        assert!(killed || out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        killed
    }

    /// Ticks (each under strace when `under_strace`) until one is killed, at most 60 s.
    fn tick_until_killed(&self, under_strace: bool) {
        let started = Instant::now();
        while !self.tick_killed(under_strace) {
            assert!(started.elapsed() < Duration::from_secs(60), "no tick was killed");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The tool's CUDA state of the victim's process (`running` when never toggled).
    fn cuda_state(&self) -> String {
        let path = self.shared.join(format!("state-{}", self.pid));
        std::fs::read_to_string(path).map_or_else(|_| "running".to_string(), |s| s.trim().to_string())
    }

    /// Whether the tick's mark of an applied suspension is in the victim's run folder.
    fn marked(&self) -> bool {
        let run_dir = self.lab.0.home.path().join("runs").join(&self.victim).join("1");
        run_dir.join(carma::exec::freeze::SUSPENDED_MARK).exists()
    }

    fn has(&self, kind: &str) -> bool {
        self.lab.kinds(&self.victim).iter().any(|k| k == kind)
    }
}

fn strace() -> Option<&'static str> {
    ["/usr/bin/strace", "/bin/strace"].into_iter().find(|p| std::path::Path::new(p).exists())
}

/// Goal (issue 41, 8): what a tick journals about a suspension and then applies is finished by
/// the next tick when the one that journaled it was killed first. Method: real ticks; the
/// suspending tick is killed at the tool (the stand-in kills its parent at `--toggle`): the
/// Suspended record is committed, the job still runs, its CUDA state untouched, and the next
/// tick toggles and stops it. The resuming tick is killed at its first `pidfd_send_signal`
/// (strace's fault injection), before the SIGCONT: Resumed is committed, the job still
/// stopped, its CUDA state checkpointed, and the next tick continues it and toggles it back.
/// On the code before, the job stayed running while suspended, then stopped for good while
/// Running (the issue's reproduction).
#[test]
fn a_tick_killed_at_the_tool_or_the_signal_leaves_nothing_undone_for_the_next() {
    if skip_without_users() {
        return;
    }
    if strace().is_none() {
        return common::skip::skip(common::skip::Need::Strace, "needs strace to kill a tick at a signal");
    }
    let suspend_lab = SuspendLab::new(CRASHING_STAND_IN);
    let SuspendLab { lab, shared, bob, victim, pid, .. } = &suspend_lab;
    let pid = *pid;
    std::fs::write(shared.join("kill-at--toggle"), "").unwrap();
    let urgent = lab.submit(bob, &lab.spec("urgent", SHORT, ""));
    assert!(suspend_lab.tick_killed(false), "the tick was killed at the tool");
    assert_ne!(proc_state(pid), "T", "the killed tick had not stopped it yet");
    assert_eq!(suspend_lab.cuda_state(), "running");
    // (A killed tick publishes nothing: its records show once the next tick has published.)
    lab.tick();
    assert!(suspend_lab.has("Suspended"), "{:?}", lab.kinds(victim));
    assert_eq!(proc_state(pid), "T", "the next tick stopped it");
    assert_eq!(suspend_lab.cuda_state(), "checkpointed", "and toggled it");
    assert!(suspend_lab.marked());

    lab.tick_until(&urgent, Duration::from_secs(30), running);
    suspend_lab.tick_until_killed(true);
    assert_eq!(proc_state(pid), "T", "killed before its SIGCONT");
    assert_eq!(suspend_lab.cuda_state(), "checkpointed");
    lab.tick();
    assert!(suspend_lab.has("Resumed"), "the killed tick journaled the resume: {:?}", lab.kinds(victim));
    assert_eq!(lab.task(victim)["state"], "Running");
    assert_ne!(proc_state(pid), "T", "the next tick continued it");
    assert_eq!(suspend_lab.cuda_state(), "running", "and gave it its CUDA state back");
    assert!(!suspend_lab.marked());
    lab.tick_until(victim, Duration::from_secs(60), ended);
    assert_eq!(lab.task(victim)["state"], "Finished", "{:#}", lab.task(victim));
    assert_eq!(
        lab.0.ok_as(&suspend_lab.alice, &["logs", "--stdout", victim]),
        "victim done after 150 steps\n"
    );
    suspend_lab.finish();
}

/// Goal (issue 41, 8): the other two crash points. The suspending tick is killed at its first
/// `pidfd_send_signal`, after the toggle and before the SIGSTOP: the next tick stops it
/// without toggling it twice. The resuming tick is killed at the tool (the toggle back): the
/// job runs again but its CUDA state is still checkpointed, and the next tick toggles it
/// back. On the code before, the first left a Suspended task running and the second a
/// Running task whose CUDA calls block for good.
#[test]
fn a_tick_killed_at_the_signal_or_the_tool_leaves_nothing_undone_for_the_next() {
    if skip_without_users() {
        return;
    }
    if strace().is_none() {
        return common::skip::skip(common::skip::Need::Strace, "needs strace to kill a tick at a signal");
    }
    let suspend_lab = SuspendLab::new(CRASHING_STAND_IN);
    let SuspendLab { lab, shared, bob, victim, pid, .. } = &suspend_lab;
    let pid = *pid;
    let urgent = lab.submit(bob, &lab.spec("urgent", SHORT, ""));
    assert!(suspend_lab.tick_killed(true), "the tick was killed at the signal");
    assert_eq!(suspend_lab.cuda_state(), "checkpointed", "the toggle came before the signal");
    assert_ne!(proc_state(pid), "T");
    lab.tick();
    assert!(suspend_lab.has("Suspended"), "{:?}", lab.kinds(victim));
    assert_eq!(proc_state(pid), "T", "the next tick stopped it");
    assert_eq!(suspend_lab.cuda_state(), "checkpointed", "without toggling it back");
    let argv = std::fs::read_to_string(shared.join("argv")).unwrap();
    assert_eq!(argv.matches("--toggle").count(), 1, "{argv}");

    lab.tick_until(&urgent, Duration::from_secs(30), running);
    std::fs::write(shared.join("kill-at--toggle"), "").unwrap();
    suspend_lab.tick_until_killed(false);
    assert_ne!(proc_state(pid), "T", "continued before the tool");
    assert_eq!(suspend_lab.cuda_state(), "checkpointed");
    assert!(suspend_lab.marked(), "the resume is not finished");
    lab.tick();
    assert!(suspend_lab.has("Resumed"), "{:?}", lab.kinds(victim));
    assert_eq!(suspend_lab.cuda_state(), "running", "the next tick gave it its CUDA state back");
    assert!(!suspend_lab.marked());
    lab.tick_until(victim, Duration::from_secs(60), ended);
    assert_eq!(lab.task(victim)["state"], "Finished", "{:#}", lab.task(victim));
    suspend_lab.finish();
}

/// Writes its pid, then starts a worker that counts steps of 0.1 s into `DIR/steps` (900 of
/// them) and waits for it: the job's first process is not the one that works.
const WORKER_VICTIM: &str = "#!/bin/sh
echo $$ > DIR/victim.pid
( i=0; while [ $i -lt 900 ]; do sleep 0.1; i=$((i + 1)); echo $i > DIR/steps; done ) &
echo $! > DIR/worker.pid
wait
echo \"worker done\"
";

/// The worker's steps so far.
fn steps(shared: &std::path::Path) -> u64 {
    std::fs::read_to_string(shared.join("steps")).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// Goal (issue 41, 2): a suspended job is stopped as a whole and kept to its time limit even
/// when its owner continues its other processes from their own login. Method: the victim's
/// first process waits while a worker counts steps; once it is suspended, its owner sends
/// SIGCONT to every process of theirs but the first, four times a second for 8 s, while
/// ticks run (the preemptor runs 30 s). With its cgroup frozen the worker counts nothing meanwhile; without one each
/// tick stops it again; either way its 20 s limit counts every moment it ran: it counts at
/// most 200 steps (a step is 0.1 s of running) before its limit ends it. On the code before,
/// the worker ran on while the first process stayed stopped, and the paused clock gave it
/// those seconds for free (well over 200 steps).
#[test]
fn a_suspended_job_its_owner_continues_is_stopped_again_and_kept_to_its_limit() {
    if skip_without_users() {
        return;
    }
    let suspend_lab = SuspendLab::with_script(STAND_IN, WORKER_VICTIM, "time_limit = \"20s\"\n");
    let SuspendLab { lab, shared, alice, bob, victim, pid, .. } = &suspend_lab;
    // The preemptor runs 30 s: the victim stays suspended through the attack, however slow
    // the machine.
    let urgent = lab.submit(bob, &lab.spec("urgent", "#!/bin/sh\nsleep 30\n", ""));
    lab.tick();
    assert!(suspend_lab.has("Suspended"), "{:?}", lab.kinds(victim));
    // A step under way when the job was stopped may still land.
    std::thread::sleep(Duration::from_millis(500));
    let before = steps(shared);
    let attack = format!(
        "i=0; while [ $i -lt 32 ]; do for p in $(pgrep -u $(id -u)); do [ $p = {pid} ] || kill -CONT $p 2>/dev/null; done; sleep 0.25; i=$((i + 1)); done"
    );
    let mut attacker = std::process::Command::new(common::users::runuser())
        .args(["-u", &alice.name, "--", "sh", "-c", &attack])
        .current_dir("/tmp")
        .spawn()
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(8) {
        lab.tick();
        std::thread::sleep(Duration::from_millis(500));
    }
    attacker.wait().unwrap();
    lab.tick();
    assert_eq!(lab.task(victim)["state"], "Suspended", "{:#}", lab.task(victim));
    let run_dir = lab.0.home.path().join("runs").join(victim).join("1");
    let job: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("job.json")).unwrap()).unwrap();
    let worked = steps(shared) - before;
    if job["cgroup"].is_string() {
        assert!(worked <= 2, "a frozen job counted {worked} steps while its owner continued it");
    }
    lab.tick_until(&urgent, Duration::from_secs(60), ended);
    lab.tick_until(victim, Duration::from_secs(90), ended);
    let total = steps(shared);
    assert!(total <= 205, "the job ran {total} steps of 0.1 s under a 20 s limit");
    assert_ne!(lab.task(victim)["state"], "Finished", "{:#}", lab.task(victim));
    suspend_lab.finish();
}

/// Goal (issue 41, 2): a suspended attempt's room is never held for a job that runs again.
/// Method: while the victim is suspended, the fake GPU shows its processes holding 20 GiB
/// again (as after its owner continued them and they allocated), and the other GPUs are full;
/// once the preemptor ended, it resumes (its own memory is its room), and another user's new
/// 6 GiB task starts on its GPU within three ticks. On the code before, the victim waited for room its own memory
/// took, its held room counted on top, and the newcomer waited until it was cancelled.
#[test]
fn a_suspended_job_holding_gpu_memory_again_keeps_nobody_waiting() {
    if skip_without_users() {
        return;
    }
    let suspend_lab = SuspendLab::new(STAND_IN);
    let SuspendLab { lab, bob, victim, pid, gpu, .. } = &suspend_lab;
    let urgent = lab.submit(bob, &lab.spec("urgent", SHORT, ""));
    lab.tick();
    assert!(suspend_lab.has("Suspended"), "{:?}", lab.kinds(victim));
    lab.tick_until(&urgent, Duration::from_secs(30), running);
    let mut gpus: Value = serde_json::from_str(THREE_A100).unwrap();
    for g in gpus.as_array_mut().unwrap().iter_mut() {
        if g["uuid"] == gpu.as_str() {
            g["memory_used_mib"] = 20480.into();
            g["processes"] = serde_json::json!([{"pid": pid, "used_mib": 20480}]);
        } else {
            // The fillers' GPUs have no room for the newcomer: only the victim's GPU can take it.
            g["memory_used_mib"] = 36864.into();
        }
    }
    std::fs::write(lab.0.home.gpus_file(), gpus.to_string()).unwrap();
    lab.tick_until(&urgent, Duration::from_secs(60), ended);
    let small = lab.0.home.path().join("small.toml");
    let program = lab.0.home.path().join("filler0.sh");
    std::fs::write(
        &small,
        format!(
            "name = \"small\"\ncommand = [\"{}\"]\nmemory = \"6GiB\"\ntime_limit = \"10m\"\n",
            program.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&small, std::fs::Permissions::from_mode(0o644)).unwrap();
    let small = lab.submit(bob, small.to_str().unwrap());
    for _ in 0..3 {
        lab.tick();
    }
    assert!(running(&lab.task(&small)), "{:#}", lab.task(&small));
    assert_eq!(lab.task(&small)["gpu_uuids"][0], gpu.as_str());
    assert!(suspend_lab.has("Resumed"), "{:?}", lab.kinds(victim));
    lab.0.home.ok(&["cancel", &small, victim]);
    lab.tick_until(&small, Duration::from_secs(30), ended);
    lab.tick_until(victim, Duration::from_secs(30), ended);
    suspend_lab.finish();
}

/// Goal (issue 41, 3): a preemptor held and released in a loop cannot warn another user's
/// job without end: every notice counts, withdrawn or not, so the victim gets at most
/// `max-per-task` (3) of them, and then the loop is over: the preemptor no longer keeps "one
/// preemption at a time" for itself and waits as any task. Method: `withdrawn-rest = "0s"`
/// (so only the count holds it), real ticks, the victim counting the USR1 warnings it gets;
/// six rounds of preempt, hold, withdraw, release. On the code before: six notices, six
/// warnings, and the loop could go on for ever.
#[test]
fn a_hold_and_release_loop_warns_a_victim_at_most_max_per_task_times() {
    if skip_without_users() {
        return;
    }
    let lab = Lab::with_policy(|_| "mode = \"requeue\"\nwithdrawn-rest = \"0s\"\n".to_string());
    let (alice, bob) = (ThrowawayUser::create("pla"), ThrowawayUser::create("plb"));
    let long = STUBBORN.replace("-lt 160", "-lt 400");
    let low = lab.submit(&alice, &lab.spec("low", &long, "nice = 5\nrequeue = true\nsignal = \"USR1@5\"\n"));
    for i in 0..2 {
        let filler = lab.submit(&bob, &lab.spec(&format!("norq{i}"), MEDIUM, "nice = 5\nrequeue = false\n"));
        lab.tick_until(&filler, Duration::from_secs(30), running);
    }
    lab.tick_until(&low, Duration::from_secs(30), running);
    std::thread::sleep(Duration::from_secs(MIN_RUN_S + 1));
    let urgent = lab.submit(&bob, &lab.spec("urgent", SHORT, ""));
    let notices = |lab: &Lab| lab.kinds(&low).iter().filter(|k| *k == "Preempted").count();
    for _ in 0..6 {
        lab.tick();
        lab.0.ok_as(&bob, &["hold", &urgent]);
        lab.tick();
        lab.0.ok_as(&bob, &["release", &urgent]);
    }
    lab.tick();
    assert_eq!(notices(&lab), 3, "{:?}", lab.kinds(&low));
    let withdrawn = lab.kinds(&low).iter().filter(|k| *k == "PreemptionWithdrawn").count();
    assert_eq!(withdrawn, 3, "{:?}", lab.kinds(&low));
    let reason = lab.task(&urgent)["reason"].as_str().unwrap_or_default().to_string();
    assert!(!reason.starts_with("Preempting"), "the loop is over: {reason}");
    // The victim runs on to its end, warned three times.
    lab.tick_until(&low, Duration::from_secs(60), ended);
    assert_eq!(lab.task(&low)["state"], "Finished", "{:#}", lab.task(&low));
    let log = lab.0.ok_as(&alice, &["logs", "--stdout", &low]);
    assert_eq!(log.matches("warned").count(), 3, "{log}");
    // Whatever it is by now (it may have run and finished once the victim ended).
    let _ = lab.0.as_user(&bob, &["cancel", &urgent]);
}

/// A stand-in whose `--get-state` takes 10 s to answer, as a tool stuck on a busy GPU.
const SLOW_STAND_IN: &str = r#"#!/bin/sh
echo "$*" >> DIR/argv
sleep 10
echo running
"#;

/// Goal (issue 41, 7): the tick never waits on one job's tool. Method: `cuda-checkpoint`
/// answers after 10 s, the tick's `cuda-checkpoint-budget` is 2 s: the tick that preempts is
/// over within a few seconds, and the victim is requeued instead of suspended, its reason
/// naming the budget. On the code before, each process's `--get-state` had 5 s of its own,
/// one after the other, inside the tick, and the reason said "no answer within 5s".
#[test]
fn a_slow_cuda_checkpoint_costs_the_tick_its_budget_and_requeues_the_victim() {
    if skip_without_users() {
        return;
    }
    let suspend_lab = SuspendLab::new(SLOW_STAND_IN);
    let SuspendLab { lab, bob, victim, pid, .. } = &suspend_lab;
    let config = lab.0.home.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace("[sched.preemption]\n", "[sched.preemption]\ncuda-checkpoint-budget = \"2s\"\n");
    lab.0.home.set_config(&text);
    let urgent = lab.submit(bob, &lab.spec("urgent", SHORT, ""));
    let started = Instant::now();
    lab.tick();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(8), "the tick took {took:?} for a tool that answers after 10 s");
    let preempted = lab.events(victim).into_iter().find(|e| e["kind"] == "Preempted").expect("preempted");
    assert_eq!(
        preempted["data"]["reason"],
        format!(
            "priority 0 preempts priority -1 or lower (priority-gap 1); suspend unavailable (`cuda-checkpoint \
             --get-state --pid {pid}` refused: no answer within the tick's 2 s [sched.preemption] \
             cuda-checkpoint-budget): requeued instead"
        )
    );
    assert!(!suspend_lab.has("Suspended"), "{:?}", lab.kinds(victim));
    lab.tick_until(&urgent, Duration::from_secs(60), running);
    lab.0.home.ok(&["cancel", victim]);
    lab.tick_until(victim, Duration::from_secs(30), ended);
    suspend_lab.finish();
}
