//! `carma estimate` and the tick's estimate step, through the binary.
//!
//! Goal: the command explains each estimator's figure; a task submitted with a model summary
//! gets exactly one Estimated event from carma's estimator, and placement uses its upper bound.

mod common;

use common::TestHome;
use common::cluster::{TWO_A100, kinds};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/examples/model-summary.mlp.json");

#[test]
fn estimate_json_gives_every_estimator_with_terms() {
    let home = TestHome::new();
    let out = home.ok(&["estimate", "--summary", EXAMPLE, "--memory-mib", "3000", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["family"], "mlp");
    assert_eq!(v["batch_size"], 996);
    let by = |name: &str| {
        v["estimates"].as_array().unwrap().iter().find(|e| e["estimator"] == name).unwrap().clone()
    };
    assert_eq!(by("oracle")["estimate"]["mib"], 3000);
    let gpumemnet = by("gpumemnet")["estimate"]["mib"].as_u64().unwrap();
    assert_eq!(gpumemnet % 1000, 0, "a bucket edge: {gpumemnet}");
    let carma = &by("carma")["estimate"];
    let (point, upper) = (carma["mib"].as_u64().unwrap(), carma["upper_mib"].as_u64().unwrap());
    assert!((1443..4000).contains(&point), "{carma}");
    assert!(upper > point && upper - point < 500, "{carma}");
    let names: Vec<&str> =
        carma["terms"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["context", "weights+grads+optimizer", "activations", "learned correction", "margin"]);
    // Horus: 4 B x (996 x 7430 + 3560152 + 996 x 3560152) + 1443 MiB context.
    let horus = by("horus")["estimate"]["mib"].as_u64().unwrap();
    let expected =
        (4.0 * (996.0 * 7430.0 + 3560152.0 + 996.0 * 3560152.0) / 1048576.0 + 1443.0_f64).ceil() as u64;
    assert_eq!(horus, expected);
}

/// Goal: `carma estimate` says which upper figure applies, in words and in `--json`: a model
/// smaller than every training model (timm's test_vit) gets the below-spread bound, not the
/// card; resnet50 the calibrated one.
#[test]
fn estimate_says_which_bound_applies() {
    let home = TestHome::new();
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/estimator-training/fixtures");
    let tiny = format!("{fixtures}/small-models/test_vit_bs8.json");
    let text = home.ok(&["estimate", "--summary", &tiny, "--estimator", "carma"]);
    assert!(text.contains("bound: below-spread (smaller than every training model"), "{text}");
    let v: serde_json::Value =
        serde_json::from_str(&home.ok(&["estimate", "--summary", &tiny, "--json"])).unwrap();
    let carma = v["estimates"].as_array().unwrap().iter().find(|e| e["estimator"] == "carma").unwrap();
    assert_eq!(carma["estimate"]["bound"], "below-spread");
    assert!(v["upper_mib"].as_u64().unwrap() < 5_000, "{v}");
    let resnet = format!("{fixtures}/paper-models/resnet50_bs32.json");
    let v: serde_json::Value =
        serde_json::from_str(&home.ok(&["estimate", "--summary", &resnet, "--estimator", "carma", "--json"]))
            .unwrap();
    assert_eq!(v["estimates"][0]["estimate"]["bound"], "calibrated");
    let mlp: serde_json::Value =
        serde_json::from_str(&home.ok(&["estimate", "--summary", EXAMPLE, "--estimator", "horus", "--json"]))
            .unwrap();
    assert_eq!(mlp["estimates"][0]["estimate"]["bound"], serde_json::Value::Null);
}

#[test]
fn estimate_rejects_unknown_estimator_and_missing_batch() {
    let home = TestHome::new();
    common::assert_error(
        &home.run(&["estimate", "--summary", EXAMPLE, "--estimator", "magic"]),
        2,
        "unknown estimator \"magic\"\nhint: use one of oracle, horus, gpumemnet, carma or all",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.txt");
    std::fs::write(&path, "[('linear', 4, 20), ('ReLU', 4, 0)]").unwrap();
    common::assert_error(
        &home.run(&["estimate", "--summary", path.to_str().unwrap()]),
        2,
        "no batch size: pass --batch-size N or set batch_size in the task spec or the summary",
    );
    let text = home.ok(&[
        "estimate",
        "--summary",
        path.to_str().unwrap(),
        "--batch-size",
        "8",
        "--estimator",
        "carma",
    ]);
    assert!(text.starts_with(&format!("{} (Mlp, batch 8", path.display())), "{text}");
}

#[test]
fn tick_journals_one_estimate_and_places_with_its_upper_bound() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let id = home
        .ok(&[
            "submit",
            "--parsable",
            "--name",
            "mlp",
            "--model-summary",
            EXAMPLE,
            "--batch-size",
            "996",
            "--",
            "sleep",
            "0.1",
        ])
        .trim()
        .to_string();
    home.ok(&["tick"]);
    home.ok(&["tick"]);
    let events = home.task_events(&id);
    let estimated: Vec<_> = events.iter().filter(|e| e["kind"] == "Estimated").collect();
    assert_eq!(estimated.len(), 1, "one estimate per task: {:?}", kinds(&events));
    let data = &estimated[0]["data"];
    assert_eq!(data["method"], "carma");
    let placed = events.iter().find(|e| e["kind"] == "Placed").expect("placed");
    assert_eq!(placed["data"]["requirement_mib"], data["upper_mib"], "{placed}");
    let order = kinds(&events);
    let at = |k: &str| order.iter().position(|x| x == k).unwrap();
    assert!(at("Estimated") < at("Placed"), "{order:?}");
}

/// Goal: the summary is captured when the task is submitted, as sbatch captures its script:
/// the tick never opens the user's file, so breaking it (or swapping it for a FIFO) after
/// submission changes nothing; the estimate is journaled once, at ingest.
#[test]
fn the_summary_is_captured_at_submit_and_estimated_once() {
    let home = TestHome::new(); // no GPUs: the task stays waiting across ticks
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.json");
    std::fs::copy(EXAMPLE, &path).unwrap();
    let id = home
        .ok(&["submit", "--parsable", "--name", "m", "--model-summary", path.to_str().unwrap(), "--", "true"])
        .trim()
        .to_string();
    std::fs::remove_file(&path).unwrap();
    let fifo = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    for _ in 0..3 {
        home.ok(&["tick"]);
    }
    let events = home.task_events(&id);
    assert_eq!(events.iter().filter(|e| e["kind"] == "Estimated").count(), 1, "{:?}", kinds(&events));
    assert!(events.iter().all(|e| e["kind"] != "EstimateFailed"), "{:?}", kinds(&events));
    let shown: serde_json::Value = serde_json::from_str(&home.ok(&["show", &id, "--json"])).unwrap();
    assert_eq!(shown["task"]["estimate"]["method"], "carma");
}

/// Goal: a summary whose estimate is more than any GPU of the queue has is not taken in
/// silence: submit warns in one line on stderr and still submits (issue 23); one that fits
/// gets no warning.
#[test]
fn submit_warns_when_the_estimate_exceeds_every_gpu() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    home.ok(&["tick"]); // the inventory: two 40 GiB GPUs
    let resnet =
        concat!(env!("CARGO_MANIFEST_DIR"), "/estimator-training/fixtures/paper-models/resnet50_bs32.json");
    let submit = |batch: &str| {
        home.run(&["submit", "--parsable", "--model-summary", resnet, "--batch-size", batch, "--", "true"])
    };
    let big = submit("512");
    assert!(big.status.success(), "{}", common::stderr(&big));
    assert_eq!(
        common::stderr(&big),
        "warning: the model summary's estimate (67.5 GiB per GPU) is more than any GPU here has (40.0 GiB); the task will run alone on a whole GPU and may run out of memory: lower --batch-size, or check the summary\n"
    );
    let fits = submit("32");
    assert!(fits.status.success());
    assert_eq!(common::stderr(&fits), "");
}
