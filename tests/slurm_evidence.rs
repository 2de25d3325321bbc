//! A Slurm job's out-of-memory is judged by carma's own readings (issue 40).
//!
//! Goal: on Slurm, as on one server, a job's out-of-memory line is its word. The Prolog starts
//! a root watcher beside the job that reads its GPU memory every `supervisor-sample-ms`, and the
//! Epilog weighs the line against those readings (and the journal's) by `sched::judge_oom`:
//! - a job seen holding its memory before it printed the line is requeued with the raised
//!   share, and finishes on its next run;
//! - a job that only prints the line, holding nothing, is an ordinary failure, not requeued,
//!   its reason giving what carma read.
//!
//! Method: Debian's real Slurm daemons, one node with one fake 16 GiB GPU (1 GiB shards); no
//! `carma tick` runs, so the watcher's readings are all there is between the job's start and
//! its end. The fake GPU lists a job's shell with the memory it "holds" (the test cluster's
//! ledger, `carma_gpu_hold`), as NVML lists a CUDA process, and frees it when the job exits.
//! Before this issue both jobs were requeued on the line alone. Needs root and the daemons;
//! without them it says how to run it and passes.

mod common;

use std::time::{Duration, Instant};

use common::slurm::{SlurmCluster, skip_without_slurm};
use common::{stderr, stdout};
use serde_json::Value;

/// `held` holds 3000 MiB (its share is 1 GiB: 3 shards less the 2 GiB margin) for two seconds,
/// then prints PyTorch's line on its first run, and succeeds on the next; `printed` prints the
/// line every time and holds nothing.
const JOB_SCRIPT: &str = r#"#!/bin/sh
restart=${SLURM_RESTART_COUNT:-0}
echo "run job=$SLURM_JOB_ID restart=$restart shards=$SLURM_SHARDS_ON_NODE"
case "$1" in
  held)
    if [ "$restart" = 0 ]; then
      carma_gpu_hold 3000
      sleep 2
      echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)" >&2
      exit 1
    fi ;;
  printed)
    sleep 2
    echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)" >&2
    exit 1 ;;
esac
"#;

#[test]
fn a_slurm_jobs_out_of_memory_is_judged_by_carmas_own_readings() {
    if skip_without_slurm() {
        return;
    }
    let started = Instant::now();
    let cluster = SlurmCluster::start(1, 1, 16384, 1024);
    let work = cluster.path("work");
    let script = work.join("job.sh");
    std::fs::write(&script, cluster.with_gpu_hold(JOB_SCRIPT)).unwrap();
    let script = script.to_str().unwrap();
    std::process::Command::new("chmod").args(["755", script]).status().unwrap();
    let held = cluster.sbatch("held", "1GiB", &[], &[script, "held"]);
    let printed = cluster.sbatch("printed", "1GiB", &[], &[script, "printed"]);
    cluster.wait_until_empty(Duration::from_secs(150));
    cluster.wait_for_followers(Duration::from_secs(60));

    let node = &cluster.nodes[0];
    let events: Vec<Value> = stdout(&cluster.carma_on(node, &["events", "--json"]))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let of = |job: u32| -> Vec<&Value> {
        let task = events
            .iter()
            .find(|e| e["kind"] == "SlurmPlaced" && e["data"]["job_id"] == job)
            .map(|e| e["task"].clone())
            .unwrap_or_else(|| panic!("job {job} journaled: {}", cluster.logs()));
        events.iter().filter(|e| e["task"] == task).collect()
    };
    let kinds = |events: &[&Value]| -> Vec<String> {
        events.iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };

    // Seen holding 3000 MiB of its 1024 MiB share: requeued with max(1024, 3000) + 2048 step
    // = 5048 MiB, + 2048 margin: 7 shards; then finished.
    let held_events = of(held);
    assert_eq!(
        kinds(&held_events),
        [
            "Submitted",
            "SlurmPlaced",
            "Placed",
            "Launched",
            "OomDetected",
            "Requeued",
            "SlurmPlaced",
            "Placed",
            "Launched",
            "Finished"
        ],
        "{held_events:#?}\n{}",
        cluster.logs()
    );
    let requeued = held_events.iter().find(|e| e["kind"] == "Requeued").unwrap();
    let reason = requeued["data"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(
            "carma's readings: the job held 3000 MiB of its 1024 MiB share, and GPU0 had 3000 MiB used"
        ),
        "{reason}"
    );
    assert!(reason.ends_with("Slurm job requeued with shard:7 (7168 MiB)"), "{reason}");
    let oom = held_events.iter().find(|e| e["kind"] == "OomDetected").unwrap();
    assert_eq!(oom["data"]["peak_mib"], 3000, "{oom}");
    let shards: Vec<u64> = held_events
        .iter()
        .filter(|e| e["kind"] == "SlurmPlaced")
        .map(|e| e["data"]["shards"].as_u64().unwrap())
        .collect();
    assert_eq!(shards, [3, 7]);

    // Printed the line with nothing in use: an ordinary failure, not requeued.
    let printed_events = of(printed);
    assert_eq!(
        kinds(&printed_events),
        ["Submitted", "SlurmPlaced", "Placed", "Launched", "Failed"],
        "{printed_events:#?}\n{}",
        cluster.logs()
    );
    let failed = printed_events.last().unwrap();
    assert_eq!(failed["data"]["outcome"], "exit 1");
    let reason = failed["data"]["reason"].as_str().unwrap();
    // Its neighbour's memory on the GPU (the held job's, when they overlapped) is no evidence.
    assert!(reason.starts_with("out-of-memory message without evidence: GPU0 had "), "{reason}");
    assert!(
        reason.contains("the job's own memory was never seen, against its 1024 MiB share (90 % would be)"),
        "{reason}"
    );
    assert!(reason.contains("its supervisor read its GPUs"), "the watcher's readings are named: {reason}");
    assert!(reason.ends_with("not retried"), "{reason}");
    let slurm = cluster.slurm("scontrol").args(["show", "job", &printed.to_string()]).output().unwrap();
    let view = carma::slurm::scontrol::parse_job(&stdout(&slurm));
    assert_eq!((view.state.as_deref(), view.restarts), (Some("FAILED"), Some(0)), "{}", stderr(&slurm));

    // Every watcher handed its readings over and is gone; nothing is left in its folder.
    let left: Vec<_> = std::fs::read_dir(node.home.join("slurm-watch")).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
    let log = std::fs::read_to_string(node.home.join("slurm-hooks.log")).unwrap();
    assert!(log.contains(&format!("carma slurm watch: job {held} run 0: ")), "{log}");
    eprintln!("slurm evidence test: {:.1} s", started.elapsed().as_secs_f64());
}
