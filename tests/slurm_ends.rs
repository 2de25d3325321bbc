//! carma on a one-node Slurm: every out-of-memory requeue runs again on the node it left, and
//! every end is journaled as what Slurm recorded.
//!
//! `one_node_requeues_and_ends` starts Debian's Slurm daemons with one node (two fake 16 GiB
//! GPUs, 1 GiB shards) and submits, as `nobody`, through `carma sbatch`:
//! - [`OOM_JOBS`] jobs that run out of memory once and then succeed, half with
//!   `--open-mode=append`, half truncating: every retry lands on the node it left, where
//!   slurmd refuses a launch in the second its last run's credential was revoked;
//! - one that runs out of memory, then fails with another error (appended to the same file):
//!   the second end must not be read as out of memory again;
//! - one cancelled with scancel, one past its time limit, one requeued with `scontrol
//!   requeue` while it runs.
//!
//! Each job's carma outcome is compared with Slurm's JobState. It needs root and the daemons;
//! without them it prints "skipped: why" and passes.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::slurm::{SlurmCluster, skip_without_slurm};
use common::{stderr, stdout};
use serde_json::Value;

/// Out-of-memory requeues in a row on one node.
const OOM_JOBS: usize = 20;

const JOB_SCRIPT: &str = r#"#!/bin/sh
restart=${SLURM_RESTART_COUNT:-0}
echo "run job=$SLURM_JOB_ID restart=$restart node=$SLURMD_NODENAME shards=$SLURM_SHARDS_ON_NODE"
case "$1" in
  oom)
    # Holds its share of the GPU (carma's watcher reads it), so its line is corroborated.
    carma_gpu_hold $((SLURM_SHARDS_ON_NODE * 1024 - 2048))
    sleep 2
    if [ "$restart" = 0 ]; then
      echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)" >&2
      exit 1
    fi ;;
  oom-then-error)
    carma_gpu_hold $((SLURM_SHARDS_ON_NODE * 1024 - 2048))
    sleep 2
    if [ "$restart" = 0 ]; then
      echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)" >&2
    else
      echo "ValueError: bad learning rate" >&2
    fi
    exit 1 ;;
  requeued)
    if [ "$restart" = 0 ]; then sleep 300; else sleep 1; fi ;;
  *) sleep "$2" ;;
esac
"#;

#[test]
fn one_node_requeues_and_ends() {
    if skip_without_slurm() {
        return;
    }
    let started = Instant::now();
    let cluster = SlurmCluster::start(1, 2, 16384, 1024);
    let work = cluster.path("work");
    std::fs::write(work.join("job.sh"), cluster.with_gpu_hold(JOB_SCRIPT)).unwrap();
    let job_sh = work.join("job.sh");
    let job_sh_text = job_sh.to_str().unwrap();
    std::process::Command::new("chmod").args(["755", job_sh_text]).status().unwrap();
    std::process::Command::new("chown").args(["nobody", job_sh_text]).status().unwrap();
    let script = work.join("job.sh");
    let script = script.to_str().unwrap();
    let submit = |name: &str, extra: &[&str], args: &[&str]| -> u32 {
        let output = format!("--output={}/out-{name}.txt", work.display());
        let mut argv = vec!["sbatch", "--parsable", "--gpu-mem", "1GiB", "-J", name, &output];
        argv.extend_from_slice(extra);
        argv.push("--");
        argv.push(script);
        argv.extend_from_slice(args);
        let answer = cluster.as_user("nobody", &cluster.carma, &argv);
        assert!(answer.status.success(), "carma {argv:?}: {}", stderr(&answer));
        stdout(&answer).trim().parse().expect("a job id")
    };
    let mut jobs: BTreeMap<String, u32> = BTreeMap::new();
    jobs.insert("cancel".into(), submit("cancel", &[], &["sleep", "300"]));
    jobs.insert("timeout".into(), submit("timeout", &["--time=1"], &["sleep", "300"]));
    jobs.insert("requeued".into(), submit("requeued", &["--open-mode=append"], &["requeued"]));
    jobs.insert("error".into(), submit("error", &["--open-mode=append", "--mem=100M"], &["oom-then-error"]));
    for i in 0..OOM_JOBS {
        let name = format!("oom{i:02}");
        let mode = if i % 2 == 0 { "--open-mode=append" } else { "--open-mode=truncate" };
        jobs.insert(name.clone(), submit(&name, &[mode], &["oom"]));
    }
    // Cancel and requeue once those two run.
    wait_running(&cluster, jobs["cancel"]);
    wait_running(&cluster, jobs["requeued"]);
    let out = cluster.slurm("scancel").arg(jobs["cancel"].to_string()).output().unwrap();
    assert!(out.status.success(), "scancel: {}", stderr(&out));
    let out = cluster.slurm("scontrol").args(["requeue", &jobs["requeued"].to_string()]).output().unwrap();
    assert!(out.status.success(), "scontrol requeue: {}", stderr(&out));
    // Slurm holds a requeued job back for the credential lifetime (about two minutes); as
    // an administrator would, let it start a few seconds after it is pending again.
    wait_state(&cluster, jobs["requeued"], "PENDING");
    let job = format!("JobId={}", jobs["requeued"]);
    let out = cluster.slurm("scontrol").args(["update", &job, "StartTime=now+3"]).output().unwrap();
    assert!(out.status.success(), "scontrol update: {}", stderr(&out));
    cluster.wait_until_empty(Duration::from_secs(240));
    let drained_s = started.elapsed().as_secs_f64();
    cluster.wait_for_followers(Duration::from_secs(60));
    eprintln!(
        "queue empty {drained_s:.1} s after the start, followers done {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let node = &cluster.nodes[0];
    let slurm = slurm_states(&cluster, &jobs);
    let queue = cluster.carma_on(node, &["queue", "--all", "--json"]);
    assert!(queue.status.success(), "carma queue: {}", stderr(&queue));
    let queue: Value = serde_json::from_slice(&queue.stdout).unwrap();
    let report = cluster.carma_on(node, &["report", "--tasks", "--json"]);
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let attempts = report["reports"][0]["attempts"].as_array().unwrap().clone();
    let tasks = queue["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), jobs.len(), "one carma task per Slurm job: {queue:#}\n{}", cluster.logs());
    let outcomes = |name: &str| -> Vec<String> {
        attempts
            .iter()
            .filter(|a| a["name"] == name)
            .map(|a| a["outcome"].as_str().unwrap_or("-").to_string())
            .collect()
    };
    let state = |name: &str| -> String {
        tasks
            .iter()
            .find(|t| t["name"] == name)
            .map_or("missing".into(), |t| t["state"].as_str().unwrap().into())
    };
    let mut ran_again = 0;
    for i in 0..OOM_JOBS {
        let name = format!("oom{i:02}");
        assert_eq!(slurm[&name], ("COMPLETED".to_string(), 1), "{name} in Slurm\n{}", cluster.logs());
        assert_eq!(state(&name), "Finished", "{name}");
        assert_eq!(outcomes(&name), ["out of memory", "exit 0"], "{name}");
        ran_again += 1;
    }
    eprintln!("{ran_again}/{OOM_JOBS} out-of-memory requeues on one node ran again and finished");
    // Append: the second run's error is its own, not the first run's out-of-memory line.
    assert_eq!(slurm["error"], ("FAILED".to_string(), 1));
    assert_eq!(
        (state("error"), outcomes("error")),
        ("Failed".into(), vec!["out of memory".into(), "exit 1".into()])
    );
    assert_eq!(slurm["cancel"].0, "CANCELLED");
    assert_eq!((state("cancel"), outcomes("cancel")), ("Cancelled".into(), vec!["cancelled".to_string()]));
    assert_eq!(slurm["timeout"].0, "TIMEOUT");
    assert_eq!((state("timeout"), outcomes("timeout")), ("Failed".into(), vec!["timeout".to_string()]));
    assert_eq!(slurm["requeued"], ("COMPLETED".to_string(), 1));
    let requeued = outcomes("requeued");
    assert_eq!(requeued.len(), 2, "{requeued:?}");
    assert_eq!(requeued[0], "lost", "{requeued:?}");
    assert_eq!((state("requeued"), &requeued[1]), ("Finished".into(), &"exit 0".to_string()));
    // Truncate: the first run's output is kept in the node's state directory.
    let kept = node.home.join(format!("slurm-output/{}.1.out", jobs["oom01"]));
    let text = std::fs::read_to_string(&kept).unwrap_or_default();
    assert!(text.contains("restart=0") && text.contains("OutOfMemoryError"), "{}: {text:?}", kept.display());
    let now = std::fs::read_to_string(work.join("out-oom01.txt")).unwrap();
    assert!(now.contains("restart=1") && !now.contains("restart=0"), "truncated: {now:?}");
    // Starts on the node journaled while the job runs: no GPU above its 16 shards.
    check_shards(&attempts);
    eprintln!("one-node Slurm test: {:.1} s", started.elapsed().as_secs_f64());
}

fn wait_running(cluster: &SlurmCluster, job: u32) {
    wait_state(cluster, job, "RUNNING");
    // The batch script itself, not only the allocation.
    std::thread::sleep(Duration::from_millis(500));
}

fn wait_state(cluster: &SlurmCluster, job: u32, state: &str) {
    let started = Instant::now();
    loop {
        let out = cluster.slurm("squeue").args(["-h", "-j", &job.to_string(), "-o", "%T"]).output().unwrap();
        if stdout(&out).trim() == state {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "job {job} never {state}: {:?}",
            cluster.queue()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Slurm's JobState and restart count of every job (kept MinJobAge after the end).
fn slurm_states(cluster: &SlurmCluster, jobs: &BTreeMap<String, u32>) -> BTreeMap<String, (String, u32)> {
    jobs.iter()
        .map(|(name, id)| {
            let out = cluster.slurm("scontrol").args(["show", "job", &id.to_string()]).output().unwrap();
            let view = carma::slurm::scontrol::parse_job(&stdout(&out));
            (name.clone(), (view.state.unwrap_or_default(), view.restarts.unwrap_or(0)))
        })
        .collect()
}

/// At no moment did the journaled attempts on one GPU hold more than its 16 shards.
fn check_shards(attempts: &[Value]) {
    let mut by_gpu: BTreeMap<String, Vec<(f64, f64, u64)>> = BTreeMap::new();
    for a in attempts {
        let gpu = a["gpus"][0].as_str().unwrap_or("-").to_string();
        let (Some(start), Some(end)) = (a["start_s"].as_f64(), a["end_s"].as_f64()) else { continue };
        by_gpu.entry(gpu).or_default().push((start, end, a["shards"].as_u64().unwrap_or(0)));
    }
    for (gpu, runs) in &by_gpu {
        for &(at, _, _) in runs {
            let held: u64 = runs.iter().filter(|(s, e, _)| *s <= at && at < *e).map(|r| r.2).sum();
            assert!(held <= 16, "GPU {gpu} held {held} shards at {at} s: {runs:?}");
        }
    }
}
