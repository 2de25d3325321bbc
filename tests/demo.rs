//! The demo (`carma` with no verb), the first thing a newcomer runs, tells the truth: its
//! first part narrates "the OOM task was recovered on an idle GPU", and its table and journal
//! show exactly that, reached through the same evidence as on a server (its fake GPUs list
//! each job's process with its memory while it runs, and the supervisor and the tick read
//! them), with no special case.
//!
//! Fails on the code before issue 40: bert-base's row read `F ... out-of-memory message without
//! evidence ... not retried` under that narration, as its fake GPUs never showed its memory.

mod common;

use std::process::Command;

#[test]
fn the_demos_out_of_memory_task_is_recovered_as_its_narration_says() {
    let demo = Command::new(env!("CARGO_BIN_EXE_carma")).env_remove("CARMA_HOME").output().unwrap();
    let text = common::stdout(&demo);
    assert!(demo.status.success(), "the demo runs: {}", common::stderr(&demo));
    let state = text.split("(state in ").nth(1).and_then(|rest| rest.split(')').next()).unwrap().to_string();
    let part1 = text.split("the OOM task was recovered on an idle GPU").nth(1).expect("the narration");
    let table = part1.split("Everything above came from the journal").next().unwrap();
    let row = |name: &str| {
        table.lines().find(|line| line.contains(name)).unwrap_or_else(|| panic!("no {name} row:\n{table}"))
    };
    let state_of = |name: &str| row(name).split_whitespace().nth(3).unwrap().to_string();
    assert_eq!(state_of("bert-base"), "CD", "the OOM task finished:\n{table}");
    assert_eq!(state_of("broken-script"), "F", "the broken one failed:\n{table}");
    for name in ["resnet18-cifar", "resnet34-cifar", "mobilenet-cifar", "gpt2-large"] {
        assert_eq!(state_of(name), "CD", "{name}:\n{table}");
    }
    let events = Command::new(env!("CARGO_BIN_EXE_carma"))
        .args(["--home", &state, "events", "--json"])
        .output()
        .unwrap();
    let events: Vec<serde_json::Value> =
        common::stdout(&events).lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let _ = std::fs::remove_dir_all(&state);
    let id = events
        .iter()
        .find(|e| e["kind"] == "Submitted" && e["data"]["spec"]["name"] == "bert-base")
        .map(|e| e["task"].clone())
        .expect("bert-base was submitted");
    let bert: Vec<&serde_json::Value> = events.iter().filter(|e| e["task"] == id).collect();
    let kinds: Vec<&str> = bert.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    let oom = kinds.iter().position(|k| *k == "OomDetected").unwrap_or_else(|| panic!("{kinds:?}"));
    assert_eq!(kinds[oom + 1], "Requeued", "{kinds:?}");
    assert_eq!(bert[oom + 1]["data"]["recovery"], true);
    assert_eq!(kinds.last(), Some(&"Finished"), "{kinds:?}");
    assert_eq!(bert.last().unwrap()["data"]["attempt"], 2);
}
