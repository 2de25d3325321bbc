//! The queue's caps cannot be bypassed by asking for nothing, and fields only carma sets are
//! refused from users (issue 41, items 4 and 5). Each test is a root queue on fake GPUs with
//! a throw-away user, real ticks and real supervisors; without root and useradd it says it
//! skipped.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::stderr;
use common::ticker::Ticker;
use common::users::{SharedQueue, ThrowawayUser, skip_without_users};
use serde_json::Value;

/// A shared queue with `limits` added to its config (and no free-space floor: the tests share
/// a disk whose free space moves).
fn queue_with(limits: &str) -> SharedQueue {
    let lab = SharedQueue::new();
    let config = std::fs::read_to_string(lab.home.path().join("config.toml")).unwrap();
    lab.home.set_config(&format!("{config}\n[limits]\nfree-space-floor = \"0\"\n{limits}"));
    lab
}

/// `carma submit --parsable ARGS` as `user`: the new id.
fn submit(lab: &SharedQueue, user: &ThrowawayUser, args: &[&str]) -> String {
    let mut all = vec!["submit", "--parsable"];
    all.extend_from_slice(args);
    lab.ok_as(user, &all).trim().to_string()
}

/// A file in the queue's folder (world-readable) for the user to submit.
fn readable_file(lab: &SharedQueue, name: &str, text: &str) -> PathBuf {
    let path = lab.home.path().join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path
}

/// `user`'s spool folder and the text of their spool file `id`, still waiting for a tick.
fn spooled(lab: &SharedQueue, user: &ThrowawayUser, id: &str) -> (PathBuf, String) {
    let folder = lab.home.spool_top().join(user.uid.to_string());
    let text = std::fs::read_to_string(folder.join(format!("{id}.toml"))).unwrap();
    (folder, text)
}

/// Writes `text` as a spool file of `user`'s under a fresh id, as the user's own file would be:
/// theirs, 0600. Its file name.
fn forge(folder: &Path, user: &ThrowawayUser, text: &str) -> String {
    let name = format!("{}.toml", carma::id::TaskId::generate(1_800_000_000_000));
    let path = folder.join(&name);
    std::fs::write(&path, text).unwrap();
    std::os::unix::fs::chown(&path, Some(user.uid), Some(user.gid)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    name
}

fn show(lab: &SharedQueue, id: &str) -> Value {
    serde_json::from_str(&lab.home.ok(&["show", id, "--json"])).unwrap()
}

/// The ids of the tasks ingested from the spool files named `names`.
fn ids_of_spool_files(lab: &SharedQueue, names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|name| name.trim_end_matches(".toml").to_string())
        .filter(|id| lab.home.run(&["show", id]).status.success())
        .collect()
}

/// Goal (item 4): on a queue with `[limits] time-limit-max` and no default, a task that asks
/// for no limit runs with the maximum and is stopped at it: no `--time`, `--time 0`,
/// `#SBATCH --time=0`, a held allocation (`carma alloc --no-shell`, never a preemption victim)
/// and a spool file written by hand without a limit. `--dry-run` and `show` say which limit
/// applies and where it came from, and a longer limit is still refused. Method: a 4 s maximum,
/// jobs that would sleep a minute, the real tick every 0.3 s; each must end Failed at its
/// limit within seconds.
#[test]
fn asking_for_no_time_limit_gets_the_queues_maximum_and_is_stopped_at_it() {
    if skip_without_users() {
        return;
    }
    let lab = queue_with("time-limit-max = \"4s\"\n");
    let user = ThrowawayUser::create("capt");
    let source =
        "the queue's [limits] time-limit-max; the task asked for none and the queue has no shorter default";

    let dry = lab.ok_as(&user, &["submit", "--dry-run", "--time", "0", "--", "sleep", "60"]);
    assert!(dry.contains(&format!("time limit: 4s ({source})\n")), "{dry}");
    let dry: Value =
        serde_json::from_str(&lab.ok_as(&user, &["submit", "--dry-run", "--json", "--", "sleep", "60"]))
            .unwrap();
    assert_eq!(dry["time_limit_ms"], serde_json::json!({ "value": 4000, "source": source }));
    let longer = lab.as_user(&user, &["submit", "--time", "1m", "--", "sleep", "60"]);
    assert_eq!(
        (longer.status.code(), stderr(&longer)),
        (Some(2), "error: command line: time_limit 1m is longer than this queue allows (4s); ask for at most that\n".into())
    );

    let plain = submit(&lab, &user, &["--", "sleep", "60"]);
    let zero = submit(&lab, &user, &["--time", "0", "--", "sleep", "60"]);
    let script = readable_file(&lab, "zero.sh", "#!/bin/sh\n#SBATCH --time=0\nsleep 60\n");
    let directive = submit(&lab, &user, &[script.to_str().unwrap()]);
    let (folder, text) = spooled(&lab, &user, &plain);
    assert!(!text.contains("time_limit"), "carma submit leaves the limit to the tick: {text}");
    let forged = forge(&folder, &user, &text);
    let _ticker = Ticker::start(lab.home.path(), Duration::from_millis(300));
    let held = lab.as_user(&user, &["alloc", "--no-shell", "--gpus", "1"]);
    assert_eq!(held.status.code(), Some(0), "{}", stderr(&held));
    let held = stderr(&held).split("carma: task ").nth(1).unwrap().split(' ').next().unwrap().to_string();

    let mut tasks = vec![plain.clone(), zero, directive, held.clone()];
    tasks.extend(ids_of_spool_files(&lab, &[forged]));
    assert_eq!(tasks.len(), 5, "the hand-written spool file was ingested as a task");
    let started = Instant::now();
    for id in &tasks {
        let task = loop {
            let shown = show(&lab, id);
            if shown["task"]["ended_ms"].is_u64() {
                break shown;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "task {id} ran past its limit: {shown:#}");
            std::thread::sleep(Duration::from_millis(200));
        };
        let task = &task["task"];
        assert_eq!(task["spec"]["time_limit_ms"], 4000, "{id}: {task:#}");
        assert_eq!(task["spec"]["time_limit_source"], "queue-max", "{id}");
        assert_eq!(task["status"], "Failed", "{id}: {task:#}");
        assert!(task["end_reason"].as_str().unwrap().contains("time limit"), "{id}: {task:#}");
        let attempt = &task["attempts"][0];
        let ran_ms = attempt["ended_ms"].as_u64().unwrap() - attempt["launched_ms"].as_u64().unwrap();
        assert!(ran_ms < 15_000, "{id} ran {ran_ms} ms under a 4 s limit");
    }
    let shown = lab.home.ok(&["show", &held]);
    assert!(shown.contains(&format!("time limit  4s ({source})\n")), "{shown}");
    assert!(shown.contains("requeue     never (an interactive session is never preempted)\n"), "{shown}");
}

/// Goal (item 5): a field only carma sets is refused from users with its reason, at submit
/// (exit 2, one line) and at ingest (a Rejected record naming it): `interactive` in a spec
/// file, in the `[task]` of a spool file written by hand, and an interactive task that asks to
/// be requeued (`carma alloc --requeue`, or a spool file's `[submit]` mode with `requeue`).
/// A batch task therefore can never show `requeue: yes` while the scheduler spares it.
/// Method: a throw-away user's files and flags against a real tick.
#[test]
fn fields_only_carma_sets_are_refused_from_users() {
    if skip_without_users() {
        return;
    }
    let lab = queue_with("");
    let user = ThrowawayUser::create("capf");
    let spec = readable_file(
        &lab,
        "held.toml",
        "name = \"batch\"\ncommand = [\"sleep\", \"60\"]\ninteractive = \"hold\"\nrequeue = true\n",
    );
    let refused = lab.as_user(&user, &["submit", spec.to_str().unwrap()]);
    let why = "`interactive` is not a spec key: carma alloc and carma run set it (carma alloc gives a shell, carma run one command, carma alloc --no-shell a held allocation); remove it from the spec";
    assert_eq!(
        (refused.status.code(), stderr(&refused)),
        (Some(2), format!("error: {}: {why}\n", spec.display()))
    );
    let refused = lab.as_user(&user, &["alloc", "--no-shell", "--requeue", "--gpus", "1"]);
    assert_eq!(
        (refused.status.code(), stderr(&refused)),
        (
            Some(2),
            "error: an interactive session (carma alloc) is never preempted, so it is never requeued; drop --requeue\n"
                .into()
        )
    );

    let template = submit(&lab, &user, &["--hold", "--", "sleep", "60"]);
    let (folder, text) = spooled(&lab, &user, &template);
    let in_task = forge(
        &folder,
        &user,
        &text.replacen("[task]\n", "[task]\ninteractive = \"hold\"\nrequeue = true\n", 1),
    );
    let requeued = text.replacen("[task]\n", "[task]\nrequeue = true\n", 1).replacen(
        "[submit]\n",
        "[submit]\ninteractive = \"run\"\n",
        1,
    );
    let in_submit = forge(&folder, &user, &requeued);
    lab.home.ok(&["tick"]);
    let rejected: Vec<(String, String)> = lab
        .home
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "Rejected")
        .map(|e| {
            (
                e["data"]["spool_file"].as_str().unwrap().to_string(),
                e["data"]["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let reason_of = |name: &str| rejected.iter().find(|(file, _)| file == name).map(|(_, why)| why.clone());
    assert_eq!(reason_of(&in_task), Some(format!("spool file {in_task}: {why}")), "{rejected:?}");
    assert_eq!(
        reason_of(&in_submit),
        Some(format!(
            "spool file {in_submit}: an interactive session (carma run) is never preempted, so it is never requeued; drop --requeue"
        )),
        "{rejected:?}"
    );
    assert_eq!(
        show(&lab, &template)["task"]["spec"]["interactive"],
        Value::Null,
        "the template is a batch task"
    );
}
