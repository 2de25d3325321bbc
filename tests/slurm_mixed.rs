//! The 100-job mixed run behind `reports/slurm-mixed/`: `cargo test --test slurm_mixed --
//! --ignored` (as root, with Debian's Slurm daemons) starts the two-node test cluster (two
//! fake 16 GiB GPUs per node, 1 GiB shards), submits 100 jobs as `nobody` through `carma
//! sbatch` (fits of 3 to 6 shards, out-of-memory retries, cancels, time limits, `scontrol
//! requeue`s), and writes `reports/slurm-mixed/results.json` and `results.md`: the shards
//! each GPU held over time (from the merged journals' attempts) and every job's carma outcome
//! (`carma queue --journal`) beside Slurm's (`scontrol show job`). It asserts what the report
//! claims: no GPU above its shards at any moment, and every outcome equal.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use common::slurm::{SlurmCluster, skip_without_slurm};
use common::{stderr, stdout};
use serde_json::{Value, json};

const JOBS: usize = 100;
const GPU_MIB: u64 = 16384;
const SHARD_MIB: u64 = 1024;

const JOB_SCRIPT: &str = r#"#!/bin/sh
restart=${SLURM_RESTART_COUNT:-0}
echo "run job=$SLURM_JOB_ID restart=$restart node=$SLURMD_NODENAME"
case "$1" in
  oom)
    # Holds its share of the GPU (carma's watcher reads it), so its line is corroborated.
    carma_gpu_hold $((SLURM_SHARDS_ON_NODE * 1024 - 2048))
    sleep 2
    if [ "$restart" = 0 ]; then
      echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)" >&2
      exit 1
    fi ;;
  requeued)
    if [ "$restart" = 0 ]; then sleep 300; else sleep 1; fi ;;
  *) sleep "$2" ;;
esac
"#;

/// What job `i` of the run does.
fn kind(i: usize) -> &'static str {
    match i % 10 {
        0..=4 => "fit",
        5 | 6 => "oom",
        7 => "cancel",
        8 => "timeout",
        _ => "requeue",
    }
}

#[test]
#[ignore = "a 100-job run of several minutes; writes reports/slurm-mixed/"]
fn mixed_run_of_100_jobs() {
    if skip_without_slurm() {
        return;
    }
    let started = Instant::now();
    let cluster = SlurmCluster::start(2, 2, GPU_MIB, SHARD_MIB);
    let work = cluster.path("work");
    let script = work.join("job.sh");
    std::fs::write(&script, cluster.with_gpu_hold(JOB_SCRIPT)).unwrap();
    let script = script.to_str().unwrap().to_string();
    std::process::Command::new("chmod").args(["755", &script]).status().unwrap();
    let mut jobs: Vec<(String, &'static str, u32)> = Vec::new();
    for i in 0..JOBS {
        let kind = kind(i);
        let name = format!("{kind}{i:03}");
        let mem = format!("{}GiB", 1 + i % 4);
        let output = format!("--output={}/out-{name}.txt", work.display());
        let mode = if i % 2 == 0 { "--open-mode=append" } else { "--open-mode=truncate" };
        let mut argv = vec!["sbatch", "--parsable", "--gpu-mem", &mem, "-J", &name, &output, mode];
        let seconds = (1 + i % 3).to_string();
        let args: Vec<&str> = match kind {
            "fit" => vec!["sleep", &seconds],
            "oom" => vec!["oom"],
            "requeue" => vec!["requeued"],
            _ => vec!["sleep", "300"],
        };
        if kind == "timeout" {
            argv.push("--time=1");
        }
        argv.push("--");
        argv.push(&script);
        argv.extend(args);
        let answer = cluster.as_user("nobody", &cluster.carma, &argv);
        assert!(answer.status.success(), "carma {argv:?}: {}", stderr(&answer));
        jobs.push((name, kind, stdout(&answer).trim().parse().expect("a job id")));
    }
    let submitted_s = started.elapsed().as_secs_f64();
    drive(&cluster, &jobs);
    cluster.wait_for_followers(Duration::from_secs(120));
    let drained_s = started.elapsed().as_secs_f64();

    let homes = cluster.path("homes");
    let homes = homes.to_str().unwrap();
    let carma_json = |args: &[&str]| -> Value {
        let out = cluster.carma_on(&cluster.nodes[0], args);
        assert!(out.status.success(), "carma {args:?}: {}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let view = carma_json(&["queue", "--journal", homes, "--all", "--json"]);
    let report = carma_json(&["report", "--journal", homes, "--merge", "--tasks", "--json"]);
    let attempts = report["reports"][0]["attempts"].as_array().unwrap().clone();

    // Every job: carma's state and attempts beside Slurm's state and restarts.
    let mut outcomes = Vec::new();
    for (name, kind, id) in &jobs {
        let out = cluster.slurm("scontrol").args(["show", "job", &id.to_string()]).output().unwrap();
        let slurm = carma::slurm::scontrol::parse_job(&stdout(&out));
        let slurm_state = slurm.state.clone().unwrap_or_else(|| "unknown".into());
        let row = view["jobs"].as_array().unwrap().iter().find(|r| r["job_id"] == *id);
        let carma_state = row.map_or("missing".to_string(), |r| r["state"].as_str().unwrap().to_string());
        let runs: Vec<&Value> = attempts.iter().filter(|a| a["slurm_job"] == *id).collect();
        let nodes: Vec<String> = runs.iter().map(|a| a["node"].as_str().unwrap_or("-").to_string()).collect();
        let ends: Vec<String> =
            runs.iter().map(|a| a["outcome"].as_str().unwrap_or("-").to_string()).collect();
        outcomes.push(json!({
            "job": id, "name": name, "kind": kind,
            "slurm_state": slurm_state, "slurm_code": carma::slurm::squeue::state_code(&slurm_state),
            "slurm_restarts": slurm.restarts,
            "carma_state": carma_state, "carma_attempts": row.map(|r| r["attempts"].clone()),
            "nodes": nodes, "attempt_outcomes": ends,
        }));
    }
    let equal = outcomes.iter().filter(|o| o["slurm_code"] == o["carma_state"]).count();
    let oom_same = outcomes.iter().filter(|o| o["kind"] == "oom" && o["nodes"][0] == o["nodes"][1]).count();
    let oom_other = outcomes
        .iter()
        .filter(|o| o["kind"] == "oom" && o["nodes"][1].is_string() && o["nodes"][0] != o["nodes"][1])
        .count();

    // Shards each GPU held over time: at every start, the attempts open on that GPU.
    let capacity = GPU_MIB / SHARD_MIB;
    let mut by_gpu: BTreeMap<String, Vec<(f64, f64, u64)>> = BTreeMap::new();
    for a in &attempts {
        let gpu = format!("{}/{}", a["node"].as_str().unwrap_or("-"), a["gpus"][0].as_str().unwrap_or("-"));
        let (Some(start), Some(end)) = (a["start_s"].as_f64(), a["end_s"].as_f64()) else { continue };
        by_gpu.entry(gpu).or_default().push((start, end, a["shards"].as_u64().unwrap_or(0)));
    }
    let held = |runs: &[(f64, f64, u64)], at: f64| -> u64 {
        runs.iter().filter(|(s, e, _)| *s <= at && at < *e).map(|r| r.2).sum()
    };
    let mut gpus = serde_json::Map::new();
    let end_s = by_gpu.values().flatten().map(|r| r.1).fold(0.0, f64::max);
    for (gpu, runs) in &by_gpu {
        let max = runs.iter().map(|&(at, _, _)| held(runs, at)).max().unwrap_or(0);
        let series: Vec<Value> =
            (0..=(end_s as u64)).step_by(5).map(|t| json!([t, held(runs, t as f64)])).collect();
        gpus.insert(
            gpu.clone(),
            json!({"capacity": capacity, "max_held": max, "attempts": runs.len(), "every_5s": series}),
        );
    }
    let over: Vec<&String> =
        by_gpu.keys().filter(|g| gpus[g.as_str()]["max_held"].as_u64() > Some(capacity)).collect();

    let results = json!({
        "jobs": JOBS,
        "nodes": cluster.nodes.len(),
        "gpus_per_node": cluster.gpus_per_node,
        "shards_per_gpu": capacity,
        "submitted_s": submitted_s,
        "drained_s": drained_s,
        "outcomes_equal": equal,
        "oom_retry_same_node": oom_same,
        "oom_retry_other_node": oom_other,
        "gpus": gpus,
        "outcomes": outcomes,
    });
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/slurm-mixed");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&results).unwrap() + "\n").unwrap();
    std::fs::write(dir.join("results.md"), markdown(&results)).unwrap();
    eprintln!(
        "{JOBS} jobs: submitted in {submitted_s:.1} s, drained in {drained_s:.1} s; {equal} outcomes equal; OOM retries {oom_same} same node, {oom_other} other node"
    );
    assert!(over.is_empty(), "GPUs above {capacity} shards: {over:?}");
    assert_eq!(equal, JOBS, "carma and Slurm disagree:\n{:#}\n{}", results["outcomes"], cluster.logs());
}

/// Cancels the cancel jobs and requeues the requeue jobs once they run (letting a requeued job
/// start 3 s after it is pending again, as an administrator would), until the queue is empty.
fn drive(cluster: &SlurmCluster, jobs: &[(String, &'static str, u32)]) {
    let started = Instant::now();
    let mut done: BTreeMap<u32, u32> = BTreeMap::new();
    loop {
        let out = cluster.slurm("squeue").args(["-h", "-o", "%A %T"]).output().unwrap();
        let text = stdout(&out);
        if out.status.success() && text.trim().is_empty() {
            return;
        }
        let states: BTreeMap<u32, String> = text
            .lines()
            .filter_map(|l| {
                let (id, state) = l.split_once(' ')?;
                Some((id.parse().ok()?, state.to_string()))
            })
            .collect();
        for (_, kind, id) in jobs {
            let step = done.get(id).copied().unwrap_or(0);
            let state = states.get(id).map(String::as_str);
            let job = format!("JobId={id}");
            match (*kind, step, state) {
                ("cancel", 0, Some("RUNNING")) => {
                    let _ = cluster.slurm("scancel").arg(id.to_string()).output();
                    done.insert(*id, 1);
                }
                ("requeue", 0, Some("RUNNING")) => {
                    let _ = cluster.slurm("scontrol").args(["requeue", &id.to_string()]).output();
                    done.insert(*id, 1);
                }
                ("requeue", 1, Some("PENDING")) => {
                    let _ = cluster.slurm("scontrol").args(["update", &job, "StartTime=now+3"]).output();
                    done.insert(*id, 2);
                }
                _ => {}
            }
        }
        assert!(started.elapsed() < Duration::from_secs(600), "jobs left after 600 s: {:?}", cluster.queue());
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn markdown(r: &Value) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# 100-job mixed run: results\n");
    let _ = writeln!(
        md,
        "{} jobs on {} nodes x {} GPUs ({} shards each). Submitted in {:.1} s, queue drained and every end journaled {:.1} s after the start.\n",
        r["jobs"],
        r["nodes"],
        r["gpus_per_node"],
        r["shards_per_gpu"],
        r["submitted_s"].as_f64().unwrap_or(0.0),
        r["drained_s"].as_f64().unwrap_or(0.0)
    );
    let _ = writeln!(
        md,
        "- carma's outcome equals Slurm's for **{} of {}** jobs.\n- Out-of-memory retries: {} on the same node, {} on the other node.\n",
        r["outcomes_equal"], r["jobs"], r["oom_retry_same_node"], r["oom_retry_other_node"]
    );
    let _ =
        writeln!(md, "## Shards held per GPU\n\n| GPU | attempts | max held | capacity |\n|---|---|---|---|");
    let gpus = r["gpus"].as_object().unwrap();
    for (gpu, g) in gpus {
        let _ = writeln!(md, "| {gpu} | {} | {} | {} |", g["attempts"], g["max_held"], g["capacity"]);
    }
    let _ = writeln!(md, "\nOver time (shards held every 5 s; the full series is in results.json):\n");
    let names: Vec<&String> = gpus.keys().collect();
    let _ = writeln!(md, "| t (s) | {} |", names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(" | "));
    let _ = writeln!(md, "|---|{}", "---|".repeat(names.len()));
    let len = gpus.values().map(|g| g["every_5s"].as_array().map_or(0, Vec::len)).max().unwrap_or(0);
    for i in 0..len {
        let cells: Vec<String> = gpus
            .values()
            .map(|g| g["every_5s"][i][1].as_u64().map_or("-".into(), |v| v.to_string()))
            .collect();
        let _ = writeln!(md, "| {} | {} |", i * 5, cells.join(" | "));
    }
    let _ = writeln!(
        md,
        "\n## Every job\n\n| job | name | Slurm state | restarts | carma state | attempts | nodes | attempt outcomes |\n|---|---|---|---|---|---|---|---|"
    );
    for o in r["outcomes"].as_array().unwrap() {
        let list = |v: &Value| {
            v.as_array()
                .map_or(String::new(), |a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} ({}) | {} | {} | {} | {} | {} |",
            o["job"],
            o["name"].as_str().unwrap_or(""),
            o["slurm_state"].as_str().unwrap_or(""),
            o["slurm_code"].as_str().unwrap_or(""),
            o["slurm_restarts"],
            o["carma_state"].as_str().unwrap_or(""),
            o["carma_attempts"],
            list(&o["nodes"]),
            list(&o["attempt_outcomes"])
        );
    }
    md
}
