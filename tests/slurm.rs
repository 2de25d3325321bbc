//! carma on Slurm.
//!
//! `carma_on_a_real_slurm_cluster` starts Debian's Slurm daemons (two nodes in network
//! namespaces when possible, else one) with fake GPUs split into shards, carma's hooks and
//! job_submit.lua, submits jobs through `carma sbatch` and plain `sbatch --comment carma:...`
//! as an ordinary user, and checks placement, memory caps, out-of-memory requeue and the
//! cluster report from the node journals. It needs root and the daemons; without them it
//! says how to run it and passes. The other tests need neither: the tick leaves Slurm tasks
//! alone, hooks never fail, and the commands refuse bad input with one line.

mod common;

use common::skip::{Need, skip};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use carma::journal::{Journal, Record};
use carma::slurm::CarmaComment;
use carma::slurm::records::{AfterOom, EndDecision, JobStart, end_records, start_records};
use common::cluster::TWO_A100;
use common::slurm::meter::GpuMeter;
use common::slurm::{SlurmCluster, pid_of_job, unavailable};
use common::{TestHome, assert_error, stderr, stdout};
use serde_json::Value;

const SKIP: &str = "it needs root and Debian's Slurm daemons; as root run \
                    `apt-get install -y --no-install-recommends slurmctld slurmd munge`, then \
                    `cargo test --test slurm -- --nocapture` (.ci/run does both)";

/// Each job prints what it saw and sleeps; `oom` jobs then fail once with PyTorch's
/// out-of-memory line.
const JOB_SCRIPT: &str = r#"#!/bin/sh
echo "seen job=$SLURM_JOB_ID node=$SLURMD_NODENAME gpu=$CUDA_VISIBLE_DEVICES shards=$SLURM_SHARDS_ON_NODE restart=${SLURM_RESTART_COUNT:-0} limit=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
sleep "$2"
if [ "$1" = oom ] && [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)" >&2
  exit 1
fi
"#;

/// What the out-of-memory job's first attempt is seen to hold on its GPU, MiB.
const OOM_PEAK_MIB: u64 = 5000;

const GPU_MIB: u64 = 16384;
const SHARD_MIB: u64 = 1024;

#[test]
fn carma_on_a_real_slurm_cluster() {
    if let Some(why) = unavailable() {
        return skip(Need::Slurm, &format!("{SKIP} ({why})"));
    }
    let started = Instant::now();
    let cluster = SlurmCluster::start(2, 2, GPU_MIB, SHARD_MIB);
    let setup_s = started.elapsed().as_secs_f64();
    if let Some(why) = &cluster.single_node_reason {
        eprintln!("one node only: {why}");
    }
    let work = cluster.path("work");
    std::fs::write(work.join("job.sh"), JOB_SCRIPT).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/examples/model-summary.mlp.json"),
        work.join("mlp.json"),
    )
    .unwrap();
    for file in ["job.sh", "mlp.json"] {
        std::process::Command::new("chown")
            .args(["nobody", work.join(file).to_str().unwrap()])
            .status()
            .unwrap();
    }
    std::process::Command::new("chmod")
        .args(["755", work.join("job.sh").to_str().unwrap()])
        .status()
        .unwrap();
    let meter = cluster.meter();
    let submitted = submit_jobs(&cluster);
    observe_oom_peak(&cluster, meter, submitted["oom"]);
    refusals(&cluster);
    cluster.wait_until_empty(Duration::from_secs(150));
    // Ends are journaled by the Epilogs' followers once Slurm has recorded them.
    cluster.wait_for_followers(Duration::from_secs(60));
    let run_s = started.elapsed().as_secs_f64() - setup_s;

    let report = merged_report(&cluster);
    let attempts = report["attempts"].as_array().unwrap().clone();
    print_timeline(&attempts);
    check_report(&report, &attempts, submitted.len());
    check_sharing(&cluster, &attempts);
    check_outputs(&cluster, &attempts, &submitted);
    check_oom_requeue(&attempts);
    check_per_node_reports(&cluster);
    eprintln!(
        "slurm test: {} node(s), cluster up in {setup_s:.1} s, jobs done {run_s:.1} s later, {:.1} s in all",
        cluster.nodes.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Six jobs through `carma sbatch` (declared memory and model summaries, one that runs out of
/// memory once) and two through plain sbatch with a carma comment (job_submit.lua). Returns
/// job name → job id.
fn submit_jobs(cluster: &SlurmCluster) -> BTreeMap<String, u32> {
    let work = cluster.path("work");
    let (script, summary) = (work.join("job.sh"), work.join("mlp.json"));
    let (script, summary) = (script.to_str().unwrap(), summary.to_str().unwrap());
    let out = |name: &str| format!("--output={}/out-{name}.txt", work.display());
    let mut ids = BTreeMap::new();
    let mut carma_sbatch = |name: &str, memory: &[&str], command: &[&str]| {
        let mut args = vec!["sbatch", "--parsable"];
        args.extend_from_slice(memory);
        let output = out(name);
        args.extend(["-J", name, &output, "--open-mode=append", "--"]);
        args.extend_from_slice(command);
        let answer = cluster.as_user("nobody", &cluster.carma, &args);
        assert!(answer.status.success(), "carma {args:?}: {}", stderr(&answer));
        ids.insert(name.to_string(), stdout(&answer).trim().parse::<u32>().expect("a job id"));
    };
    let mem3 = ["--gpu-mem", "3GiB"];
    let mlp = ["--model-summary", summary, "--batch-size", "32"];
    carma_sbatch("a1", &mem3, &[script, "ok", "6"]);
    carma_sbatch("a2", &mem3, &[script, "ok", "6"]);
    carma_sbatch("a3", &mem3, &[script, "ok", "6"]);
    carma_sbatch("b1", &mlp, &[script, "ok", "6"]);
    // Not a script: carma wraps the argv in a quoting /bin/sh script.
    carma_sbatch("b2", &mlp, &["sh", script, "ok", "6"]);
    carma_sbatch("oom", &["--gpu-mem", "2GiB"], &[script, "oom", "3"]);
    for (name, comment) in
        [("l1", "carma:mem=10GiB".to_string()), ("l2", format!("carma:summary={summary},bs=32"))]
    {
        let comment = format!("--comment={comment}");
        let output = out(name);
        let args = ["--parsable", &comment, "-J", name, &output, "--open-mode=append", script, "ok", "4"];
        let answer = cluster.as_user("nobody", Path::new("sbatch"), &args);
        assert!(answer.status.success(), "sbatch {args:?}: {}", stderr(&answer));
        ids.insert(name.to_string(), stdout(&answer).trim().parse::<u32>().expect("a job id"));
    }
    ids
}

/// While the out-of-memory job's first attempt runs, its GPU lists its process with
/// [`OOM_PEAK_MIB`] and the node's `carma tick` charges that to the job (a Usage record), as
/// it would with NVML; the job's watcher reads it too. Those readings corroborate the job's
/// out-of-memory line (it held more than its share), and the Epilog's recovery starts from
/// the observed peak.
fn observe_oom_peak(cluster: &SlurmCluster, meter: &GpuMeter, job_id: u32) {
    let output = cluster.path("work/out-oom.txt");
    let started = Instant::now();
    let seen = loop {
        let text = std::fs::read_to_string(&output).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.starts_with("seen ")) {
            break line.to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the oom job did not start: {:?}",
            cluster.queue()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let field = |key: &str| seen.split(' ').find_map(|w| w.strip_prefix(key)).unwrap().to_string();
    let (node_name, gpu) = (field("node="), field("gpu=").parse::<u32>().unwrap());
    let pid = pid_of_job(job_id).expect("the oom job's process");
    meter.set_process(&node_name, gpu, pid, OOM_PEAK_MIB);
    meter.flush();
    let node = cluster.nodes.iter().find(|n| n.name == node_name).unwrap();
    let tick = cluster.carma_on(node, &["tick"]);
    assert!(tick.status.success(), "carma tick on {node_name}: {}", stderr(&tick));
    let events = cluster.carma_on(node, &["events", "--json"]);
    let usage = stdout(&events)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["kind"] == "Usage")
        .expect("the tick journaled the job's GPU memory");
    assert_eq!(usage["data"]["peak_mib"], OOM_PEAK_MIB);
}

/// What can never run is refused at submission, in one line, by both paths.
fn refusals(cluster: &SlurmCluster) {
    let too_big = "40960 MiB + 2048 MiB margin needs shard:42, but one GPU holds 16 shards of 1024 MiB; lower the memory or the batch size";
    let lua = cluster.as_user("nobody", Path::new("sbatch"), &["--comment=carma:mem=40GiB", "--wrap=true"]);
    assert!(!lua.status.success());
    assert_eq!(stderr(&lua).lines().next(), Some(format!("sbatch: error: carma: {too_big}").as_str()));
    let shell = cluster.as_user(
        "nobody",
        Path::new("sbatch"),
        &["--comment=carma:summary=/tmp/x;rm,bs=1", "--wrap=true"],
    );
    assert_eq!(
        stderr(&shell).lines().next(),
        Some(
            "sbatch: error: carma: summary path /tmp/x;rm must be absolute, at most 1024 bytes, and use only letters, digits, '.', '_', '-' and '/'"
        )
    );
    let typo =
        cluster.as_user("nobody", Path::new("sbatch"), &["--comment=carma:memory=4GiB", "--wrap=true"]);
    assert_eq!(
        stderr(&typo).lines().next(),
        Some("sbatch: error: carma: unknown key memory; use mem, summary, bs, need, retries or submit")
    );
    // carma sbatch asks sinfo how many shards a GPU holds.
    let own = cluster.as_user("nobody", &cluster.carma, &["sbatch", "--gpu-mem", "40GiB", "--", "true"]);
    assert_eq!(own.status.code(), Some(2));
    assert_eq!(stderr(&own), format!("error: {}\n", too_big.replace("MiB + ", "MiB (declared) + ")));
    assert!(cluster.queue().len() <= 8, "a refused job was queued: {:?}", cluster.queue());
}

fn merged_report(cluster: &SlurmCluster) -> Value {
    let homes = cluster.path("homes");
    let out = cluster.carma_on(
        &cluster.nodes[0],
        &["report", "--journal", homes.to_str().unwrap(), "--merge", "--tasks", "--json"],
    );
    assert!(out.status.success(), "carma report: {}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let table = cluster
        .carma_on(&cluster.nodes[0], &["report", "--journal", homes.to_str().unwrap(), "--merge", "--tasks"]);
    eprintln!("{}", stdout(&table));
    json["reports"][0].clone()
}

fn print_timeline(attempts: &[Value]) {
    eprintln!("timeline (seconds since the first submission):");
    eprintln!(
        "  {:<5} {:>4} {:>3} {:<4} {:>3} {:>6} {:>9} {:>6} {:>6}  outcome",
        "job", "id", "try", "node", "GPU", "shards", "MPS cap", "start", "end"
    );
    for a in attempts {
        eprintln!(
            "  {:<5} {:>4} {:>3} {:<4} {:>3} {:>6} {:>9} {:>6.1} {:>6.1}  {}",
            a["name"].as_str().unwrap(),
            a["slurm_job"].to_string(),
            a["attempt"].to_string(),
            a["node"].as_str().unwrap_or("-"),
            a["gpus"][0].as_str().unwrap_or("-"),
            a["shards"].to_string(),
            format!("{} MiB", a["memory_mib"]),
            a["start_s"].as_f64().unwrap_or(f64::NAN),
            a["end_s"].as_f64().unwrap_or(f64::NAN),
            a["outcome"].as_str().unwrap_or("-")
        );
    }
}

fn check_report(report: &Value, attempts: &[Value], jobs: usize) {
    assert_eq!(report["tasks"], jobs, "{report:#}");
    assert_eq!(report["finished"], jobs, "{report:#}");
    assert_eq!(
        (report["oom_crashes"].as_u64(), report["relaunches"].as_u64()),
        (Some(1), Some(1)),
        "{report:#}"
    );
    assert_eq!(attempts.len(), jobs + 1, "one attempt per job, two for the one that ran out of memory");
    assert_eq!(report["waiting"]["count"], jobs);
    assert!(
        report["energy_megajoules"].as_f64().unwrap() > 0.0,
        "the GPUs' energy counters moved: {report:#}"
    );
    for a in attempts {
        let wait = a["wait_s"].as_f64().unwrap();
        assert!((0.0..60.0).contains(&wait), "wait of {a}");
        assert!(a["slurm_job"].is_u64() && a["node"].is_string() && a["shards"].is_u64(), "{a}");
        assert_eq!(a["memory_mib"].as_u64(), Some(a["shards"].as_u64().unwrap() * SHARD_MIB), "{a}");
    }
}

/// At least three jobs shared one GPU at one moment, and no GPU was ever promised more
/// memory than it has.
fn check_sharing(cluster: &SlurmCluster, attempts: &[Value]) {
    // (node, GPU) → (start s, end s, MiB promised) of every attempt on it.
    type Intervals = Vec<(f64, f64, u64)>;
    let mut by_gpu: BTreeMap<(String, String), Intervals> = BTreeMap::new();
    for a in attempts {
        let key = (a["node"].as_str().unwrap().to_string(), a["gpus"][0].as_str().unwrap().to_string());
        let interval =
            (a["start_s"].as_f64().unwrap(), a["end_s"].as_f64().unwrap(), a["memory_mib"].as_u64().unwrap());
        by_gpu.entry(key).or_default().push(interval);
    }
    let mut most_at_once = 0;
    for (gpu, intervals) in &by_gpu {
        for &(at, _, _) in intervals {
            let running: Vec<_> =
                intervals.iter().filter(|(start, end, _)| *start <= at && at < *end).collect();
            let promised: u64 = running.iter().map(|(_, _, mib)| mib).sum();
            assert!(promised <= GPU_MIB, "GPU {gpu:?} was promised {promised} MiB at {at} s: {intervals:?}");
            most_at_once = most_at_once.max(running.len());
        }
    }
    assert!(most_at_once >= 3, "at most {most_at_once} jobs shared a GPU: {by_gpu:?}");
    if cluster.nodes.len() > 1 {
        assert!(by_gpu.keys().any(|(node, _)| node == "n2"), "nothing ran on n2: {by_gpu:?}");
    }
    eprintln!("most jobs on one GPU at once: {most_at_once}");
}

/// Every attempt's job saw the shards the journal recorded, and the MPS cap they stand for.
fn check_outputs(cluster: &SlurmCluster, attempts: &[Value], submitted: &BTreeMap<String, u32>) {
    for (name, id) in submitted {
        let text = std::fs::read_to_string(cluster.path(&format!("work/out-{name}.txt"))).unwrap();
        let seen: Vec<&str> = text.lines().filter(|l| l.starts_with("seen ")).collect();
        let mine: Vec<&Value> = attempts.iter().filter(|a| a["slurm_job"] == *id).collect();
        assert_eq!(seen.len(), mine.len(), "{name}: {text}");
        for (line, attempt) in seen.iter().zip(&mine) {
            let shards = attempt["shards"].as_u64().unwrap();
            let expected = format!(
                "seen job={id} node={} gpu={} shards={shards} restart={} limit=0={}M",
                attempt["node"].as_str().unwrap(),
                attempt["gpus"][0].as_str().unwrap(),
                attempt["attempt"].as_u64().unwrap() - 1,
                shards * SHARD_MIB
            );
            assert_eq!(*line, expected, "{name}");
        }
    }
    let shards_of = |name: &str| {
        let id = submitted[name];
        attempts.iter().find(|a| a["slurm_job"] == id).unwrap()["shards"].as_u64().unwrap()
    };
    // 3 GiB + 2 GiB margin; the MLP's upper bound (1647 MiB) + margin; job_submit.lua alike.
    assert_eq!((shards_of("a1"), shards_of("b1"), shards_of("b2")), (5, 4, 4));
    assert_eq!((shards_of("l1"), shards_of("l2")), (12, 4));
}

fn check_oom_requeue(attempts: &[Value]) {
    let tries: Vec<&Value> = attempts.iter().filter(|a| a["name"] == "oom").collect();
    let summary: Vec<(u64, u64, &str)> = tries
        .iter()
        .map(|a| {
            (a["attempt"].as_u64().unwrap(), a["shards"].as_u64().unwrap(), a["outcome"].as_str().unwrap())
        })
        .collect();
    // 2 GiB declared: 4 shards; after the OOM: max(estimate 2048, peak 5000, previous 2048)
    // + 2048 step = 7048 MiB, + 2048 margin = 9096 MiB: 9 shards.
    assert_eq!(summary, [(1, 4, "out of memory"), (2, 9, "exit 0")]);
    assert_eq!(tries[0]["task"], tries[1]["task"], "one task across the requeue");
    let wait = tries[1]["wait_s"].as_f64().unwrap();
    assert!(wait < 30.0, "the requeued job waited {wait} s (StartTime=now should start it at once)");
}

/// Without --merge, a directory of node journals gives one report per node.
fn check_per_node_reports(cluster: &SlurmCluster) {
    let homes = cluster.path("homes");
    let out =
        cluster.carma_on(&cluster.nodes[0], &["report", "--journal", homes.to_str().unwrap(), "--json"]);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let labels: Vec<&str> =
        json["reports"].as_array().unwrap().iter().map(|r| r["label"].as_str().unwrap()).collect();
    let names: Vec<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(labels, names);
}

fn append(home: &TestHome, records: &[Record]) {
    let mut journal = Journal::open(&home.path().join("carma.redb")).unwrap();
    let mut state = journal.load_state().unwrap();
    journal.append(records, &mut state).unwrap();
}

/// Goal: a Slurm job in a node's journal is never placed, launched, reconciled or cancelled
/// by the tick, running or waiting to be requeued, and `carma cancel` points at scancel.
/// Method: journal a start through the hooks' record builder into a home with fake GPUs,
/// tick, journal an out-of-memory requeue, tick again, compare the events.
#[test]
fn the_tick_leaves_slurm_jobs_to_slurm() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let start = JobStart {
        cluster: "lab".into(),
        job_id: 77,
        node: "n1".into(),
        restart_count: 0,
        uid: 1000,
        name: "train".into(),
        workdir: "/tmp".into(),
        comment: Some(CarmaComment { mem_mib: Some(2048), need_mib: Some(2048), ..CarmaComment::default() }),
        submit_ms: 1_790_000_000_000,
        started_ms: 1_790_000_001_000,
        gpus: vec!["GPU-fake-0000".into()],
        shards: Some(4),
        rule: carma::slurm::ShardRule::default(),
        boot_id: "boot".into(),
        array: None,
    };
    let (id, records) = start_records(&carma::journal::State::default(), &start);
    let id = id.unwrap();
    append(&home, &records);
    let task_kinds = |home: &TestHome| common::cluster::kinds(&home.task_events(id.as_str()));
    home.ok(&["tick"]);
    home.ok(&["tick"]);
    assert_eq!(
        task_kinds(&home),
        ["Submitted", "SlurmPlaced", "Placed", "Launched"],
        "the tick reconciled a Slurm job"
    );
    let decision = EndDecision::OutOfMemory {
        evidence: "CUDA out of memory".into(),
        peak_mib: None,
        then: AfterOom::Requeue { shards: 6, requirement_mib: 4096, reason: "requeued".into() },
    };
    append(&home, &end_records(&id, 1, &decision, None, 1_790_000_009_000));
    home.ok(&["tick"]);
    home.ok(&["tick"]);
    assert_eq!(
        task_kinds(&home),
        ["Submitted", "SlurmPlaced", "Placed", "Launched", "OomDetected", "Requeued"],
        "the tick placed a Slurm job"
    );
    let queue: Value = serde_json::from_str(&home.ok(&["queue", "--json"])).unwrap();
    assert_eq!(queue["tasks"][0]["state"], "Pending");
    let cancel = home.run(&["cancel", id.as_str()]);
    assert_error(&cancel, 2, &format!("task {id} (train) is Slurm job 77; cancel it with `scancel 77`"));
    let shown = home.ok(&["show", id.as_str()]);
    assert!(shown.contains("slurm       job 77 of cluster \"lab\" on n1, shard:4 of 1024 MiB"), "{shown}");
    // The requeue journaled above used one retry already.
    assert!(shown.contains("retries     1 used of 3 (oom 1, lost 0)"), "{shown}");
}

/// Goal: a hook never fails the node: bad environments and unreachable Slurm are one logged
/// line and exit 0. The TaskProlog prints the MPS cap of the shards granted.
#[test]
fn hooks_always_exit_zero_and_log_why() {
    let home = TestHome::new();
    let bare = home.cmd().args(["slurm", "prolog"]).env_remove("SLURM_JOB_ID").output().unwrap();
    assert_eq!(bare.status.code(), Some(0));
    assert_eq!(
        stderr(&bare),
        "carma slurm prolog: error: SLURM_JOB_ID is not set; run this as a Slurm Prolog/Epilog (see `carma slurm hooks`)\n"
    );
    let no_slurm = home
        .cmd()
        .args(["slurm", "epilog"])
        .envs([
            ("SLURM_JOB_ID", "5"),
            ("SLURMD_NODENAME", "n1"),
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("PATH", "/nonexistent"),
        ])
        .output()
        .unwrap();
    assert_eq!(no_slurm.status.code(), Some(0));
    let line = "carma slurm epilog: error: `scontrol show job -d 5` failed: scontrol is not on PATH; install Slurm's clients (slurm-client)";
    assert_eq!(stderr(&no_slurm), format!("{line}\n"));
    let log = std::fs::read_to_string(home.path().join("slurm-hooks.log")).unwrap();
    assert!(log.lines().last().unwrap().ends_with(line), "{log}");
    let no_gpu = home
        .cmd()
        .args(["slurm", "prolog"])
        .envs([("SLURM_JOB_ID", "6"), ("SLURMD_NODENAME", "n1")])
        .output()
        .unwrap();
    assert_eq!(stderr(&no_gpu), "carma slurm prolog: job 6: skipped, job 6 has no GPU\n");
    let exports = home
        .cmd()
        .args(["slurm", "task-prolog", "--shard-mib", "512"])
        .envs([("SLURM_SHARDS_ON_NODE", "10"), ("CUDA_VISIBLE_DEVICES", "3")])
        .output()
        .unwrap();
    assert_eq!(exports.status.code(), Some(0));
    assert_eq!(
        stdout(&exports),
        "export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=5120M\nexport CUDA_MPS_PIPE_DIRECTORY=/run/carma-mps/pipe\n\
         export CUDA_MPS_LOG_DIRECTORY=/var/log/carma-mps\nexport CARMA_SLURM_SHARD_MIB=512\n"
    );
}

/// Goal: the Slurm commands refuse bad input with one line and exit code 2.
#[test]
fn slurm_commands_refuse_bad_input() {
    let home = TestHome::new();
    assert_error(
        &home.run(&["sbatch", "--", "true"]),
        2,
        "no memory figure; carma sbatch hands a job to a Slurm cluster with one: give --gpu-mem 12GiB, or --model-summary FILE --batch-size N (to queue a script on this server, carma submit SCRIPT)",
    );
    assert_error(
        &home.run(&["sbatch", "--gpu-mem", "1GiB", "--gres=gpu:1", "--", "true"]),
        2,
        "carma sbatch sets --gres=gpu:1 itself from the memory figure; remove it",
    );
    assert_error(
        &home.run(&["sbatch", "--gpu-mem", "1GiB", "--dry-run"]),
        2,
        "no command; give it after `--`, e.g. carma sbatch --gpu-mem 12GiB -- python train.py",
    );
    assert_error(
        &home.run(&["slurm", "shards", "--mem", "40GiB", "--shards-per-gpu", "16"]),
        2,
        "40960 MiB (declared) + 2048 MiB margin needs shard:42, but one GPU holds 16 shards of 1024 MiB; lower the memory or the batch size",
    );
    assert_error(
        &home.run(&["slurm", "shards", "--mem", "1GiB", "--shard-mib", "8"]),
        2,
        "--shard-mib 8 is too small; use at least 64",
    );
    let summary = home.path().join("mine.json");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/examples/model-summary.mlp.json"),
        &summary,
    )
    .unwrap();
    let foreign =
        home.run(&["slurm", "shards", "--model-summary", summary.to_str().unwrap(), "--owner-uid", "4242"]);
    assert_error(
        &foreign,
        2,
        &format!(
            "{}: not a regular file owned by uid 4242; summaries must belong to the submitter",
            summary.display()
        ),
    );
    let empty = tempfile::tempdir().unwrap();
    assert_error(
        &home.run(&["report", "--journal", empty.path().to_str().unwrap()]),
        2,
        &format!(
            "{} holds no journal (no *.redb file, no state directory with carma.lock); give a journal or a state directory",
            empty.path().display()
        ),
    );
    let dry =
        home.ok(&["sbatch", "--gpu-mem", "2GiB", "--dry-run", "-J", "x", "--", "python", "-c", "print(1)"]);
    assert_eq!(
        dry,
        "carma: shard:4 = 2048 MiB (declared) + 2048 MiB margin, 1024 MiB per shard\n\
         sbatch -J x --gres=shard:4 --requeue --comment=carma:mem=2048MiB,need=2048\n\
         #!/bin/sh\n# written by carma sbatch: runs the command below as given, without shell expansion\n\
         exec 'python' '-c' 'print(1)'\n"
    );
}

/// Goal: `carma sbatch` speaks sbatch: carma's options anywhere among sbatch's, `--dry-run`
/// never reaching sbatch, `--mem` (sbatch's host memory) never taken for GPU memory, `#CARMA`
/// lines read, a GPU request in `#SBATCH` lines refused in one line, and an unreachable
/// controller one line with the next step, never a skipped check.
#[test]
fn carma_sbatch_speaks_sbatch() {
    let home = TestHome::new();
    // No sbatch on PATH: a dry run that reached it would fail.
    let run = |args: &[&str]| home.cmd().args(args).env("PATH", "/nonexistent").output().unwrap();
    assert_error(
        &run(&["sbatch", "-J", "x", "--mem", "3GiB", "--", "true"]),
        2,
        "--mem is sbatch's host memory; give the GPU memory as --gpu-mem 12GiB (or --model-summary FILE --batch-size N)",
    );
    let dry =
        run(&["sbatch", "-J", "x", "--gpu-mem=2GiB", "-t", "5", "--dry-run", "--mem", "4G", "--", "true"]);
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));
    let lines: Vec<String> = stdout(&dry).lines().map(String::from).collect();
    assert_eq!(
        lines[1],
        "sbatch -J x -t 5 --mem 4G --gres=shard:4 --requeue --comment=carma:mem=2048MiB,need=2048"
    );
    let script = home.path().join("train.sh");
    std::fs::write(&script, "#!/bin/sh\n#SBATCH -J s\n#CARMA --mem 6GiB --max-retries 1\n\necho go\n")
        .unwrap();
    let path = script.to_str().unwrap();
    let dry = run(&["sbatch", "--dry-run", "--", path]);
    assert_eq!(
        stdout(&dry).lines().nth(1),
        Some(
            format!("sbatch --gres=shard:8 --requeue --comment=carma:mem=6144MiB,need=6144,retries=1 {path}")
                .as_str()
        ),
        "{}",
        stderr(&dry)
    );
    // The command line wins over #CARMA.
    let dry = run(&["sbatch", "--gpu-mem", "1GiB", "--dry-run", "--", path]);
    assert!(stdout(&dry).contains("--gres=shard:3 "), "{}", stdout(&dry));
    std::fs::write(&script, "#!/bin/sh\n#SBATCH -J s\n#SBATCH --gpus=1\necho go\n").unwrap();
    assert_error(
        &run(&["sbatch", "--gpu-mem", "1GiB", "--dry-run", "--", path]),
        2,
        &format!(
            "{path}:3: #SBATCH --gpus=1: carma sbatch requests the GPU share itself (--gres=shard:N); remove the line"
        ),
    );
    std::fs::write(&script, "#!/bin/sh\n#CARMA -J s\necho go\n").unwrap();
    assert_error(
        &run(&["sbatch", "--dry-run", "--", path]),
        2,
        &format!("{path}:2: #CARMA -J is not a carma sbatch option; put sbatch's options in #SBATCH lines"),
    );
    // A controller that does not answer: Slurm's own sinfo, against a port nothing serves.
    if common::slurm::unavailable().is_some() {
        return skip(
            Need::Slurm,
            "the unreachable-controller case needs Slurm's sinfo (slurm-client) and root",
        );
    }
    let conf = home.path().join("slurm.conf");
    std::fs::write(
        &conf,
        "ClusterName=gone\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\nAuthType=auth/munge\n\
         NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=ALL Default=YES\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let down = home
        .cmd()
        .args(["sbatch", "--gpu-mem", "40GiB", "--", "true"])
        .env("SLURM_CONF", &conf)
        .output()
        .unwrap();
    // Slurm's client retries for about 9 s before it says "connect failure"; carma stops at 5.
    assert_error(
        &down,
        1,
        "`sinfo` failed: no answer within 5 s; is slurmctld up (`systemctl status slurmctld`, `scontrol ping`)? retry then, or give --shards-per-gpu N",
    );
    eprintln!("carma sbatch with the controller unreachable: {:.1} s", started.elapsed().as_secs_f64());
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "the 5 s bound was not kept");
}

/// Goal: without NVML, `carma slurm gres` says how to describe the GPUs instead.
#[test]
fn gres_without_nvml_points_at_fake_gpus() {
    let home = TestHome::new();
    let out = home.run(&["slurm", "gres", "--gpus", "nvml"]);
    if out.status.success() {
        return skip(Need::NoNvml, "NVML answers on this machine");
    }
    assert_error(
        &out,
        2,
        "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded); without NVML, describe the GPUs with --gpus fake:FILE (schema/fake-gpus.schema.json)",
    );
}
