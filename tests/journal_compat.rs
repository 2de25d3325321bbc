//! Journals written by carma 0.1.0 (journal format 1) still load, fold to the same tasks and
//! give the same report.
//!
//! Method: the golden journals in `tests/data/v0.1.0/` were written by the 0.1.0 binary, and
//! the JSON next to them is what that binary printed for them. Each test copies a journal into
//! a fresh state directory (or reads it by path), runs today's binary and compares what must
//! not change: every event's seq, time, kind and task, every task's life (state, attempts and
//! their outcomes, reasons), and every report figure. Fields that later formats added are
//! ignored; fields that 0.1.0 printed must print the same, except a Submitted record's spec,
//! whose secrets (environment values) no longer leave the journal.

mod common;

use std::path::{Path, PathBuf};

use common::TestHome;
use serde_json::Value;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v0.1.0").join(name)
}

/// A golden file of carma 0.2's format (`tests/data/v0.2/`).
fn data_v2(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v0.2").join(name)
}

fn golden(name: &str) -> Value {
    let text = std::fs::read_to_string(data(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A state directory whose journal is a copy of the golden `name`.
fn home_with(name: &str) -> TestHome {
    let home = TestHome::new();
    std::fs::copy(data(name), home.path().join("carma.redb")).expect("copy golden journal");
    // What an administrator does after upgrading: `carma init` again (it publishes the view).
    home.ok(&["init"]);
    home
}

/// `expected` ⊆ `actual`: every key of every object in `expected` is in `actual` with the same
/// value (arrays element by element), so a later format may add keys but never change one.
fn assert_contains(actual: &Value, expected: &Value, at: &str) {
    match (expected, actual) {
        (Value::Object(want), Value::Object(got)) => {
            for (key, value) in want {
                let found = got.get(key).unwrap_or_else(|| panic!("{at}.{key}: missing"));
                assert_contains(found, value, &format!("{at}.{key}"));
            }
        }
        (Value::Array(want), Value::Array(got)) => {
            assert_eq!(got.len(), want.len(), "{at}: length");
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert_contains(g, w, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(actual, expected, "{at}"),
    }
}

#[test]
fn events_of_a_real_0_1_journal_read_back_the_same() {
    let home = home_with("tick.redb");
    let events = home.events();
    let text = std::fs::read_to_string(data("tick.events.jsonl")).unwrap();
    let expected: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.len(), expected.len(), "event count");
    for (got, want) in events.iter().zip(&expected) {
        let at = format!("seq {}", want["seq"]);
        for key in ["seq", "time_ms", "kind", "task"] {
            assert_eq!(got[key], want[key], "{at}: {key}");
        }
        if want["kind"] == "Submitted" {
            // The spec's public fields are unchanged; environment values are secrets now.
            let (got_spec, want_spec) = (&got["data"]["spec"], &want["data"]["spec"]);
            for key in ["name", "command", "workdir", "gpus", "memory_mib", "max_retries"] {
                assert_eq!(got_spec[key], want_spec[key], "{at}: spec.{key}");
            }
        } else if want["kind"] == "OomDetected" {
            // The journal keeps the OOM signature; the matched line is the job's output,
            // which only its submitter may read.
            let mut want = want["data"].clone();
            let line = want["evidence"].as_str().unwrap().to_string();
            want["evidence"] = line.split_once(": ").unwrap().0.into();
            assert_contains(&got["data"], &want, &at);
        } else {
            assert_contains(&got["data"], &want["data"], &at);
        }
    }
}

#[test]
fn tasks_of_a_real_0_1_journal_fold_the_same() {
    let home = home_with("tick.redb");
    let expected = golden("tick.tasks.json");
    for want in expected.as_array().unwrap() {
        let id = want["id"].as_str().unwrap();
        let shown: Value = serde_json::from_str(&home.ok(&["show", id, "--json"])).unwrap();
        let got = &shown["task"];
        for key in ["id", "status", "submitter_uid", "submitted_ms", "end_reason", "ended_ms", "oom_count"] {
            assert_eq!(got[key], want[key], "task {id}: {key}");
        }
        let (got_attempts, want_attempts) =
            (got["attempts"].as_array().unwrap(), want["attempts"].as_array().unwrap());
        assert_eq!(got_attempts.len(), want_attempts.len(), "task {id}: attempts");
        for (g, w) in got_attempts.iter().zip(want_attempts) {
            for key in ["number", "gpus", "outcome", "placed_ms", "launched_ms", "ended_ms"] {
                assert_eq!(g[key], w[key], "task {id} attempt {}: {key}", w["number"]);
            }
        }
    }
}

#[test]
fn reports_of_0_1_journals_are_unchanged() {
    for name in ["tick", "sim"] {
        let path = data(&format!("{name}.redb"));
        let out =
            common::TestHome::uninitialised().run(&["report", "--journal", path.to_str().unwrap(), "--json"]);
        assert!(out.status.success(), "{name}: {}", common::stderr(&out));
        let got: Value = serde_json::from_str(&common::stdout(&out)).unwrap();
        let want = golden(&format!("{name}.report.json"));
        // Paths differ between machines; every figure must match.
        let (mut got_reports, mut want_reports) = (got["reports"].clone(), want["reports"].clone());
        for reports in [&mut got_reports, &mut want_reports] {
            for report in reports.as_array_mut().unwrap() {
                report.as_object_mut().unwrap().remove("journal");
            }
        }
        assert_contains(&got_reports, &want_reports, name);
    }
}

#[test]
fn a_simulated_0_1_journal_keeps_every_event_kind() {
    let home = home_with("sim.redb");
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    for event in home.events() {
        *counts.entry(event["kind"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let want: std::collections::BTreeMap<String, u64> =
        serde_json::from_value(golden("sim.kinds.json")).unwrap();
    assert_eq!(counts, want);
}

/// A state directory whose journal is a copy of carma 0.2's golden `name`.
fn home_with_v2(name: &str) -> TestHome {
    let home = TestHome::new();
    std::fs::copy(data_v2(name), home.path().join("carma.redb")).expect("copy golden journal");
    home.ok(&["init"]);
    home
}

#[test]
fn every_event_kind_of_a_0_2_journal_reads_back_the_same() {
    let home = home_with_v2("every.redb");
    let text = std::fs::read_to_string(data_v2("every.events.jsonl")).unwrap();
    let expected: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events = home.events();
    assert_eq!(events.len(), expected.len(), "event count");
    let kinds: std::collections::BTreeSet<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds.len(), 30, "one record of every kind: {kinds:?}");
    for (got, want) in events.iter().zip(&expected) {
        assert_contains(got, want, &format!("seq {}", want["seq"]));
    }
    let check = home.ok(&["journal", "check"]);
    assert!(check.contains(": sound"), "{check}");
}

#[test]
fn a_simulated_0_2_journal_keeps_its_report_and_every_event_kind() {
    let home = home_with_v2("sim.redb");
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    for event in home.events() {
        *counts.entry(event["kind"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let text = std::fs::read_to_string(data_v2("sim.kinds.json")).unwrap();
    let want: std::collections::BTreeMap<String, u64> = serde_json::from_str(&text).unwrap();
    assert_eq!(counts, want);

    let path = data_v2("sim.redb");
    let out =
        common::TestHome::uninitialised().run(&["report", "--journal", path.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let got: Value = serde_json::from_str(&common::stdout(&out)).unwrap();
    let text = std::fs::read_to_string(data_v2("sim.report.json")).unwrap();
    let want: Value = serde_json::from_str(&text).unwrap();
    let (mut got_reports, mut want_reports) = (got["reports"].clone(), want["reports"].clone());
    for reports in [&mut got_reports, &mut want_reports] {
        for report in reports.as_array_mut().unwrap() {
            report.as_object_mut().unwrap().remove("journal");
        }
    }
    assert_contains(&got_reports, &want_reports, "sim");
}

/// A golden file written with carma 0.4's wire shapes (`tests/data/v0.4/`).
fn data_v4(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v0.4").join(name)
}

/// Goal: the 0.4 shapes (a submission's mail types, a notice's kind) read back as written,
/// beside every older kind.
#[test]
fn every_event_kind_of_a_0_4_journal_reads_back_the_same() {
    let home = TestHome::new();
    std::fs::copy(data_v4("every.redb"), home.path().join("carma.redb")).expect("copy golden journal");
    home.ok(&["init"]);
    let text = std::fs::read_to_string(data_v4("every.events.jsonl")).unwrap();
    let expected: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events = home.events();
    assert_eq!(events.len(), expected.len(), "event count");
    for (got, want) in events.iter().zip(&expected) {
        assert_contains(got, want, &format!("seq {}", want["seq"]));
    }
    let mail_types: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "Submitted")
        .filter_map(|e| e["data"]["spec"]["mail_types"].as_str())
        .collect();
    assert!(mail_types.contains(&"BEGIN,TIME_LIMIT_80"), "{mail_types:?}");
    let notices: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["kind"] == "Notified" || e["kind"] == "NotifyFailed")
        .map(|e| (e["kind"].as_str().unwrap(), e["data"]["notice"].as_str().unwrap()))
        .collect();
    assert_eq!(
        notices,
        [("Notified", "END"), ("NotifyFailed", "END"), ("Notified", "BEGIN"), ("NotifyFailed", "ARRAY")]
    );
    let check = home.ok(&["journal", "check"]);
    assert!(check.contains(": sound"), "{check}");
}
