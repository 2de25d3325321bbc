//! slurmctld restarted while a carma job runs and an array waits (issue 25's last item).
//!
//! What Debian 12's Slurm 22.05 does, seen here: right after the restart the node shows
//! `Gres=gpu:1,shard:0` until its slurmd registers again (a few seconds); then `shard:8` with
//! `GresUsed=shard:0`, the running job's shards forgotten. The waiting array members are
//! started at once, slurmctld logs "gres/shard: job N node n1 overallocated resources by 1,
//! (9 > 8)" and starts them anyway with no GRES (`JOB_GRES=(null)`): slurmd gives their
//! Prolog and Epilog no `CUDA_VISIBLE_DEVICES`. carma cannot journal a GPU placement Slurm did
//! not make; the hooks say what happened instead of a bare "has no GPU".
//!
//! Goal: the job that ran across the restart is journaled to its end; each array member is
//! either journaled (Slurm kept its shards) or its hooks' line names the dropped shards. It
//! needs root and the daemons; without them it prints "skipped: why" and passes.

mod common;

use std::time::{Duration, Instant};

use common::slurm::{SlurmCluster, skip_without_slurm};
use common::stderr;
use serde_json::Value;

#[test]
fn controller_restart_while_jobs_run_and_wait() {
    if skip_without_slurm() {
        return;
    }
    let started = Instant::now();
    let mut cluster = SlurmCluster::start(1, 1, 8192, 1024);
    // 1 GiB + 2 GiB margin = 3 of 8 shards; the members need 6 each, so they wait.
    let running = cluster.sbatch("running", "1GiB", &[], &["sleep", "12"]);
    cluster.sbatch("array", "4GiB", &["--array=0-1"], &["sleep", "2"]);
    while !cluster.queue().iter().any(|l| l.starts_with(&format!("{running} RUNNING"))) {
        assert!(started.elapsed() < Duration::from_secs(60), "{:?}", cluster.queue());
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    cluster.stop_controller();
    std::thread::sleep(Duration::from_secs(2));
    cluster.start_controller();
    cluster.wait_until_empty(Duration::from_secs(120));
    cluster.wait_for_followers(Duration::from_secs(60));

    let log = std::fs::read_to_string(cluster.nodes[0].home.join("slurm-hooks.log")).unwrap_or_default();
    let homes = cluster.path("homes");
    let out = cluster
        .carma_on(&cluster.nodes[0], &["queue", "--journal", homes.to_str().unwrap(), "--all", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let view: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = view["jobs"].as_array().unwrap();
    let row = |job: u64| rows.iter().find(|r| r["job_id"] == job);
    let first = row(u64::from(running)).expect("the running job is in the view");
    assert_eq!(
        (first["state"].as_str(), first["attempts"].as_u64()),
        (Some("CD"), Some(1)),
        "{view:#}\n{log}"
    );
    let members: Vec<&Value> = rows.iter().filter(|r| r["name"] == "array").collect();
    assert_eq!(members.len(), 2, "{view:#}");
    let mut dropped = 0;
    for member in members {
        let job = member["job_id"].as_u64().unwrap();
        assert!(!log.contains(&format!("job {job} has no GPU")), "a bare skip for a carma job: {log}");
        if member["attempts"].as_u64() == Some(0) {
            let said = format!(
                "job {job}: skipped, job {job} asked for GPU memory (carma comment) but Slurm gave it no GPU"
            );
            assert!(log.contains(&said), "job {job} neither journaled nor explained: {log}");
            dropped += 1;
        }
    }
    eprintln!("array members Slurm started without their shards after the restart: {dropped} of 2");
    eprintln!("slurmctld restart test: {:.1} s", started.elapsed().as_secs_f64());
}
