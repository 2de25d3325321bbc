//! End to end, with real supervisors and real processes on two fake 40 GiB GPUs: the everyday
//! workflow of a training queue.
//!
//! Goal: a dependency chain runs in order; an afterok on a failure cancels the dependent with
//! its reason; an array with %2 never runs more than two at once; a held task waits until
//! released; a job script runs with its #CARMA options; a task's end notice runs with the
//! outcome. Method: submit through the CLI, tick every 200 ms, and read what happened from
//! `carma events --json` and the jobs' own output files.

mod common;

use std::time::Duration;

use common::TestHome;
use common::cluster::TWO_A100;
use serde_json::Value;

fn home() -> TestHome {
    TestHome::with_fake_gpus(TWO_A100, "magm")
}

fn submit(home: &TestHome, args: &[&str]) -> String {
    let mut all = vec!["submit", "--parsable"];
    all.extend(args);
    home.ok(&all).trim().to_string()
}

fn queue(home: &TestHome) -> Value {
    serde_json::from_str(&home.ok(&["queue", "--all", "--json"])).unwrap()
}

fn task(queue: &Value, id: &str) -> Value {
    queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).cloned().unwrap_or(Value::Null)
}

/// The time of the first event of `kind` about `id`.
fn time_of(events: &[Value], id: &str, kind: &str) -> Option<u64> {
    events.iter().find(|e| e["task"] == id && e["kind"] == kind).and_then(|e| e["time_ms"].as_u64())
}

#[test]
fn a_three_step_chain_runs_in_order() {
    let home = home();
    let dir = home.path().join("work");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("data");
    let write = |step: &str| format!("sleep 0.3; echo {step} >> {}", file.display());
    let prepare = submit(&home, &["--name", "prepare", "--mem", "1GiB", "--", "sh", "-c", &write("prepare")]);
    let train = submit(
        &home,
        &["--name", "train", "--after", "@", "--mem", "1GiB", "--", "sh", "-c", &write("train")],
    );
    let evaluate = submit(
        &home,
        &[
            "--name",
            "evaluate",
            "--dependency",
            &format!("afterok:{train}"),
            "--",
            "sh",
            "-c",
            &write("evaluate"),
        ],
    );
    home.ok(&["tick"]);
    let waiting = task(&queue(&home), &evaluate);
    assert_eq!(waiting["state"], "Pending");
    assert_eq!(waiting["reason"], format!("Dependency: afterok {train} is pending"));
    assert_eq!(waiting["workflow"]["dependencies"], serde_json::json!([{"kind": "afterok", "task": train}]));
    let tree = home.ok(&["queue", "--tree"]);
    // The table shows ids by their shortest unique prefix (at least 8 characters).
    let under = |marker: &str, id: &str| {
        tree.lines().any(|line| {
            line.strip_prefix(marker)
                .and_then(|rest| rest.split_whitespace().next())
                .is_some_and(|shown| shown.len() >= 8 && id.starts_with(shown))
        })
    };
    assert!(under("└─ ", &train) && under("   └─ ", &evaluate), "{tree}");
    home.tick_until_done(Duration::from_secs(60));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "prepare\ntrain\nevaluate\n");
    let events = home.events();
    for (before, after) in [(&prepare, &train), (&train, &evaluate)] {
        let ended = time_of(&events, before, "Finished").expect("finished");
        let placed = time_of(&events, after, "Placed").expect("placed");
        assert!(ended <= placed, "{after} was placed before {before} finished");
    }
}

#[test]
fn an_afterok_on_a_failing_task_cancels_the_dependent_with_its_reason() {
    let home = home();
    let failing = submit(&home, &["--name", "fails", "--", "sh", "-c", "exit 3"]);
    let dependent = submit(&home, &["--name", "dependent", "--after", &failing, "--", "true"]);
    let kept =
        submit(&home, &["--name", "kept", "--after", &failing, "--keep-on-dependency-failure", "--", "true"]);
    let any = submit(&home, &["--name", "any", "--after", &format!("afterany:{failing}"), "--", "true"]);
    for _ in 0..40 {
        home.ok(&["tick"]);
        if task(&queue(&home), &any)["state"] == "Finished" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let queue = queue(&home);
    assert_eq!(task(&queue, &failing)["state"], "Failed");
    let cancelled = task(&queue, &dependent);
    assert_eq!(cancelled["state"], "Cancelled");
    assert_eq!(cancelled["reason"], format!("DependencyNeverSatisfied: afterok {failing} failed"));
    assert_eq!(task(&queue, &any)["state"], "Finished", "afterany runs after a failure");
    let waiting = task(&queue, &kept);
    assert_eq!(waiting["state"], "Pending");
    assert_eq!(
        waiting["reason"],
        format!("DependencyNeverSatisfied: afterok {failing} failed (kept: --keep-on-dependency-failure)")
    );
    // A new afterok on the failed task is refused at once.
    let out = home.run(&["submit", "--after", &failing, "--", "true"]);
    common::assert_error(
        &out,
        2,
        &format!(
            "dependency {failing}: task {failing} has already failed so afterok can never be met; use afterany:{failing} or drop it"
        ),
    );
}

#[test]
fn an_array_capped_at_two_never_runs_more_than_two_at_once() {
    let home = home();
    let out = home.ok(&[
        "submit",
        "--array",
        "0-9%2",
        "--name",
        "sweep",
        "--mem",
        "1GiB",
        "--",
        "sh",
        "-c",
        "echo $CARMA_ARRAY_INDEX $CARMA_ARRAY_ID; sleep 0.4",
    ]);
    let array =
        out.trim().strip_prefix("submitted array ").and_then(|r| r.split(' ').next()).unwrap().to_string();
    assert_eq!(out, format!("submitted array {array} (sweep): 10 tasks\n"));
    home.ok(&["tick"]);
    let folded = home.ok(&["queue"]);
    assert!(
        folded.lines().any(|line| line.split_whitespace().next().is_some_and(|shown| {
            shown.strip_suffix("[10%2]").is_some_and(|id| id.len() >= 8 && array.starts_with(id))
        })) && folded.contains("2R 8PD"),
        "{folded}"
    );
    assert!(folded.contains("ArrayLimit: 2 of 2 running (%2)"), "{folded}");
    let queue = home.tick_until_done(Duration::from_secs(120));
    let members: Vec<&Value> = queue["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["workflow"]["array_id"] == array.as_str())
        .collect();
    assert_eq!(members.len(), 10);
    // Intervals from placement to end, per member; at no moment more than two overlap.
    let events = home.events();
    let mut edges: Vec<(u64, i32)> = Vec::new();
    let mut indices = Vec::new();
    for member in &members {
        let id = member["id"].as_str().unwrap();
        assert_eq!(member["state"], "Finished");
        edges.push((time_of(&events, id, "Placed").unwrap(), 1));
        edges.push((time_of(&events, id, "Finished").unwrap(), -1));
        let log = std::fs::read_to_string(home.path().join(format!("runs/{id}/1/stdout.log"))).unwrap();
        assert_eq!(log.split_whitespace().nth(1), Some(array.as_str()), "CARMA_ARRAY_ID");
        indices.push(log.split_whitespace().next().unwrap().parse::<u32>().unwrap());
    }
    edges.sort_by_key(|&(t, delta)| (t, delta));
    let mut running = 0;
    for (_, delta) in edges {
        running += delta;
        assert!(running <= 2, "more than two members of a %2 array ran at once");
    }
    indices.sort_unstable();
    assert_eq!(indices, (0..10).collect::<Vec<_>>(), "each index ran once");
}

#[test]
fn a_held_task_stays_pending_until_released() {
    let home = home();
    let held = submit(&home, &["--hold", "--name", "held", "--", "true"]);
    let later = submit(&home, &["--name", "later", "--", "true"]);
    for _ in 0..3 {
        home.ok(&["tick"]);
        std::thread::sleep(Duration::from_millis(300));
    }
    let queue = queue(&home);
    assert_eq!(task(&queue, &held)["state"], "Pending");
    assert_eq!(task(&queue, &held)["reason"], "Held: waits until released (carma release)");
    assert_eq!(task(&queue, &held)["workflow"]["held"], true);
    assert_eq!(task(&queue, &later)["state"], "Finished", "a held task blocks nobody");
    assert_eq!(home.ok(&["release", &held]), format!("released task {held} (held)\n"));
    let out = home.run(&["release", &held]);
    common::assert_error(&out, 2, &format!("task {held} (held) is not held"));
    home.tick_until_done(Duration::from_secs(30));
    let kinds: Vec<String> = common::cluster::kinds(&home.task_events(&held));
    assert_eq!(kinds[..3], ["Submitted", "Pending", "Released"], "{kinds:?}");
    // Holding it again once it ended is refused.
    let out = home.run(&["hold", &held]);
    common::assert_error(&out, 2, &format!("task {held} (held) has already ended (finished)"));
}

#[test]
fn update_changes_a_waiting_task_and_refuses_a_running_one() {
    let home = home();
    let running = submit(&home, &["--name", "long", "--mem", "20GiB", "--", "sleep", "3"]);
    let other = submit(&home, &["--name", "long2", "--mem", "20GiB", "--", "sleep", "3"]);
    let waiting = submit(&home, &["--name", "big", "--mem", "39GiB", "--", "true"]);
    home.ok(&["tick"]);
    assert_eq!(task(&queue(&home), &other)["state"], "Running");
    assert_eq!(task(&queue(&home), &waiting)["state"], "Pending");
    assert_eq!(
        home.ok(&["update", &waiting, "--mem", "10GiB", "--priority", "3", "--time-limit", "10m"]),
        format!("updated task {waiting} (big)\n")
    );
    let updated = home.task_events(&waiting).into_iter().find(|e| e["kind"] == "Updated").unwrap();
    assert_eq!(updated["data"]["memory_mib"], 10240);
    assert_eq!(updated["data"]["priority"], 3);
    assert_eq!(updated["data"]["time_limit_ms"], 600_000);
    let shown: Value = serde_json::from_str(&home.ok(&["show", &waiting, "--json"])).unwrap();
    assert_eq!(shown["task"]["spec"]["memory_mib"], 10240);
    let out = home.run(&["update", &running, "--gpus", "2"]);
    common::assert_error(
        &out,
        2,
        &format!("cannot update task {running} (long): it is running; only waiting tasks can be changed"),
    );
    let out = home.run(&["update", &waiting]);
    common::assert_error(
        &out,
        2,
        "nothing to change; give --priority, --nice, --mem, --time-limit or --gpus",
    );
    // Now 10 GiB, it fits beside a 20 GiB task.
    home.ok(&["tick"]);
    assert_ne!(task(&queue(&home), &waiting)["state"], "Pending");
}

#[test]
fn a_script_with_carma_directives_runs_with_them() {
    let home = home();
    let script = home.path().join("train.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n# a comment first\n#CARMA --gpus 2 --mem 1GiB\n#CARMA --name scripted --env LR=0.1\necho \"$1 $2 lr=$LR gpus=$CUDA_VISIBLE_DEVICES\"\n#CARMA --gpus 1\n",
    )
    .unwrap();
    // carma's flags go before the script; every word after it is the script's (issue 23).
    let id = submit(&home, &["--env", "LR=0.5", script.to_str().unwrap(), "first", "second"]);
    // Edited after submit: the copy taken at submit runs.
    std::fs::write(&script, "#!/bin/sh\necho edited\n").unwrap();
    home.tick_until_done(Duration::from_secs(30));
    let log = std::fs::read_to_string(home.path().join(format!("runs/{id}/1/stdout.log"))).unwrap();
    assert_eq!(log, "first second lr=0.5 gpus=GPU-fake-0000,GPU-fake-0001\n");
    let shown: Value = serde_json::from_str(&home.ok(&["show", &id, "--json"])).unwrap();
    let spec = &shown["task"]["spec"];
    assert_eq!(spec["name"], "scripted");
    assert_eq!(spec["gpus"], 2, "#CARMA lines after the first command are not read");
    assert_eq!(spec["memory_mib"], 1024);
    assert_eq!(spec["script"], script.to_str().unwrap());
    assert_eq!(spec["command"], serde_json::json!([script.to_str().unwrap(), "first", "second"]));
}

#[test]
fn a_notice_runs_when_the_task_ends_with_its_outcome() {
    let home = home();
    let marker = home.path().join("notice");
    let notify = format!("sh -c 'echo $CARMA_TASK_NAME $CARMA_OUTCOME $CARMA_EXIT > {}'", marker.display());
    let id = submit(&home, &["--name", "noticed", "--notify", &notify, "--", "sh", "-c", "exit 4"]);
    home.tick_until_done(Duration::from_secs(30));
    for _ in 0..50 {
        if marker.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "noticed Failed 4\n");
    let events = home.task_events(&id);
    let notified = events.iter().find(|e| e["kind"] == "Notified").expect("a Notified record");
    assert_eq!(notified["data"]["channel"], "command");
    // Mail without a configured sendmail is refused at submit (issue 23), not silence.
    common::assert_error(
        &home.run(&["submit", "--name", "mailed", "--mail-user", "alice@example.org", "--", "true"]),
        2,
        "--mail-user: this queue sends no mail (no [notify] sendmail in its config.toml); ask the administrator to set one, or use --notify CMD",
    );
}

#[test]
fn cancel_hold_and_release_take_an_array_id() {
    let home = home();
    let sweep = ["--param", "lr=0.1,0.01,0.001", "--name-template", "lr{lr}", "--hold", "--", "echo", "{lr}"];
    let array = submit(&home, &sweep);
    home.ok(&["tick"]);
    let members = |queue: &Value| -> Vec<Value> {
        queue["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["workflow"]["array_id"] == array.as_str())
            .cloned()
            .collect()
    };
    let held = members(&queue(&home));
    let names: Vec<&str> = held.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["lr0.1", "lr0.01", "lr0.001"]);
    assert!(held.iter().all(|t| t["workflow"]["held"] == true));
    let first = held[0]["id"].as_str().unwrap().to_string();
    assert_eq!(home.ok(&["release", &first]), format!("released task {first} (lr0.1)\n"));
    for _ in 0..50 {
        home.ok(&["tick"]);
        if task(&queue(&home), &first)["state"] == "Finished" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = home.ok(&["cancel", &array]);
    assert_eq!(out.lines().count(), 2, "the two members still waiting are cancelled: {out}");
    home.tick_until_done(Duration::from_secs(30));
    let states: Vec<String> =
        members(&queue(&home)).iter().map(|t| t["state"].as_str().unwrap().to_string()).collect();
    assert_eq!(states, ["Finished", "Cancelled", "Cancelled"]);
}
