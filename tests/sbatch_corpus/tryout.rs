//! Issue 42's tryout: ten more GPU scripts (26 to 35 in tests/data/sbatch/), five of them
//! starting their program with `srun`, and the classes sbatch takes that carma refused or
//! misread: names with spaces and `*`, getopt's prefixes, node counts implied by `--ntasks`
//! over `--ntasks-per-node`, a missing `#!` interpreter beside the other problems, a missing
//! output folder, and options typed on the command line, which win over `#SBATCH`.
//!
//! Method: the real binary on the parent's four fake A100s: `carma submit --dry-run` for
//! what each script becomes, and the single-node DDP script (and one binding a GPU to each
//! task) submitted for real and run by real ticks, its "python" a shim that writes the
//! variables each rank sees.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::common::{assert_error, stderr, stdout};
use super::{corpus, cpus_unenforced, home, note, value};

const ONE_NODE: &str = "this server is one node; always so here";

/// An accepted script: its file, GPUs, name and time limit as the dry run words them, and
/// its notes (`LINE: #SBATCH OPTION: text`, those that apply here).
type Case = (&'static str, &'static str, &'static str, &'static str, Vec<Option<String>>);

/// Goal: the accepted scripts of the tryout get Slurm's GPUs, name and time, with every note
/// in exact words (a bare `srun` line needs none: it works).
#[test]
fn the_tryout_scripts_get_what_slurms_rules_give() {
    let home = home();
    let cases: [Case; 6] = [
        ("26_ddp_srun_four_ranks.sh", "4", "ddp-4", "10m", vec![Some(format!("3: #SBATCH --nodes=1: {ONE_NODE}"))]),
        (
            "27_srun_gpus_per_task.sh",
            "2",
            "gpt-per-task",
            "30m",
            vec![
                Some("4: #SBATCH --gpus-per-task=1: 1 per task × 2 tasks on one node".into()),
                note("5: #SBATCH -c 1", &[Some("1 CPUs per task × 2 tasks on one node".into()), cpus_unenforced(2)]),
            ],
        ),
        (
            "29_srun_label_kill_on_bad_exit.sh",
            "2",
            "pretrain-345m",
            "2h",
            vec![
                Some(format!("2: #SBATCH -N 1: {ONE_NODE}")),
                Some("7: #SBATCH --exclusive: whole nodes: only matter on a cluster; GPUs given to a task are its own".into()),
            ],
        ),
        ("30_job_name_with_spaces.sh", "1", "bert large *", "45m", vec![]),
        ("31_option_prefixes.sh", "1", "prefixed", "20m", vec![note("5: #SBATCH --cpus-per-t=2", &[cpus_unenforced(2)])]),
        ("33_srun_mpi_pmix.sh", "2", "horovod-2", "1h", vec![Some(format!("2: #SBATCH --nodes=1: {ONE_NODE}"))]),
    ];
    for (file, gpus, name, time, notes) in cases {
        let out = home.cmd().current_dir(corpus()).args(["submit", "--dry-run", file]).output().unwrap();
        let (text, err) = (stdout(&out), stderr(&out));
        assert!(out.status.success(), "{file}: {err}");
        let notes: String = notes.into_iter().flatten().map(|n| format!("note: {file}:{n}\n")).collect();
        assert_eq!(err, notes, "{file}: notes");
        assert_eq!(value(&text, "GPUs"), gpus, "{file}");
        assert_eq!(value(&text, "name"), name, "{file}");
        assert_eq!(value(&text, "time limit"), time, "{file}");
    }
}

/// Goal: each refused script of the tryout names every problem in one run, a missing `#!`
/// interpreter and a node count implied by `--ntasks` included, and exits 2.
#[test]
fn the_tryout_refusals_come_in_one_run() {
    let home = home();
    let refused = |file: &str| home.cmd().current_dir(corpus()).args(["submit", file]).output().unwrap();
    let file = "28_ntasks_implies_two_nodes.sh";
    assert_eq!(
        stderr(&refused(file)),
        format!(
            "error: {file}: 2 problem(s) in its directives; nothing submitted:\n  \
             {file}:3: #SBATCH --ntasks=8: 8 tasks at 4 per node (--ntasks-per-node=4) is 2 nodes: this server is one node; ask for at most 4 tasks\n  \
             {file}:5: #SBATCH --gpus-per-task=1: 8 GPUs: this server has 4; ask for at most --gpus 4 (on the command line it wins over this line)\n"
        )
    );
    let file = "35_missing_interpreter_two_nodes.sh";
    let out = refused(file);
    assert_eq!(
        stderr(&out),
        format!(
            "error: {file}: 2 problem(s) in its directives; nothing submitted:\n  \
             {file}:1: interpreter /opt/conda/envs/train/bin/python from its #! line is not a program you can run; fix the #! line\n  \
             {file}:2: #SBATCH --nodes=2: 2 nodes: this server is one node; ask for the GPUs one node has with --gpus N\n"
        )
    );
    assert_eq!(out.status.code(), Some(2));
    let file = "34_gpu_type_elsewhere.sh";
    assert_error(
        &refused(file),
        2,
        &format!(
            "{file}:2: #SBATCH --gres=gpu:v100:4: this server has no v100 GPU (it has NVIDIA A100-SXM4-80GB); drop the type (--gres=gpu:4), or give --gpus N on the command line, which wins"
        ),
    );
    let results = corpus().join("results");
    assert!(!results.exists(), "the corpus has no results/ folder");
    assert_error(
        &refused("32_missing_output_folder.sh"),
        2,
        &format!(
            "--output results/%x_0.out: folder {0} is missing; create it (mkdir -p {0}) or choose another path",
            results.display()
        ),
    );
    assert_eq!(home.ok(&["queue", "--all"]), "", "nothing submitted");
}

/// Goal: command-line options win over `#SBATCH`, as sbatch's do: `--gpus 2` over a GPU type
/// this server lacks (a note says so), an sbatch option typed on the command line
/// (`--gres=gpu:2`, `-n 1`, a getopt prefix) read as sbatch reads it, and an impossible one
/// refused with its reason.
#[test]
fn command_line_options_win_over_sbatch_lines() {
    let home = home();
    let file = "34_gpu_type_elsewhere.sh";
    let lacks = "#SBATCH --gres=gpu:v100:4: this server has no v100 GPU (it has NVIDIA A100-SXM4-80GB); drop the type (--gres=gpu:4), or give --gpus N on the command line, which wins";
    let dry = |args: &[&str]| {
        home.cmd().current_dir(corpus()).args(["submit", "--dry-run"]).args(args).output().unwrap()
    };
    let out = dry(&["--gpus", "2", file]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), format!("note: {file}:2: {lacks}; overridden by the command line's --gpus 2\n"));
    assert!(stdout(&out).contains("\nGPUs: 2 (command line)\n"), "{}", stdout(&out));
    let out = dry(&["--gres=gpu:2", "-n", "1", file]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!("note: {file}:2: {lacks}; overridden by the command line's --gres=gpu:2\n")
    );
    assert!(stdout(&out).contains("\nGPUs: 2 (command line --gres=gpu:2)\n"), "{}", stdout(&out));
    let out = dry(&["--gpus-per-n=3", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(value(&stdout(&out), "GPUs"), "3");
    assert_error(
        &dry(&["--nodes", "2", "--", "true"]),
        2,
        "command line: --nodes 2: 2 nodes: this server is one node; ask for the GPUs one node has with --gpus N",
    );
    let out = dry(&["-p", "gpu", "--", "true"]);
    assert_eq!(stderr(&out), "note: command line: -p gpu: partitions: only matter on a cluster; ignored\n");
}

/// The "python" of the real runs: writes the variables its rank sees into `rank_<PROCID>.env`
/// in the working directory.
const PYTHON_SHIM: &str = "#!/bin/sh\nenv | grep -E '^(SLURM_|CUDA_VISIBLE_DEVICES=)' | sort > \"rank_${SLURM_PROCID}_$SLURM_JOB_ID.env\"\n";

/// Goal: a single-node DDP script's `srun python train.py` starts 4 ranks, told
/// `SLURM_PROCID` and `SLURM_LOCALID` 0 to 3, `SLURM_NODEID` 0, `SLURM_NTASKS` 4, each seeing
/// the job's 4 GPUs (Slurm's default); with `--gpus-per-task=1`, each of 2 ranks sees its own
/// one. Method: both scripts submitted unchanged and run by real ticks on fake GPUs.
#[test]
fn a_single_node_ddp_script_starts_four_ranks_with_slurms_variables() {
    // No reservation here (the other tests' queue keeps a GPU for one): the job takes all four.
    let home = super::common::TestHome::with_fake_gpus(super::FOUR_A100, "magm");
    home.ok(&["tick"]);
    let work = home.path().join("work");
    let bin = work.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let python = bin.join("python");
    std::fs::write(&python, PYTHON_SHIM).unwrap();
    std::fs::set_permissions(&python, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut ids = Vec::new();
    for file in ["26_ddp_srun_four_ranks.sh", "27_srun_gpus_per_task.sh"] {
        std::fs::copy(corpus().join(file), work.join(file)).unwrap();
        let out = home
            .cmd()
            .current_dir(&work)
            .env("PATH", &path)
            .args(["submit", "--parsable", file])
            .output()
            .unwrap();
        assert!(out.status.success(), "{file}: {}", stderr(&out));
        ids.push(stdout(&out).trim().to_string());
    }
    let queue = home.tick_until_done(Duration::from_secs(90));
    let gpus_of = |id: &str| -> Vec<String> {
        let task = queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).unwrap();
        assert_eq!(task["state"], "Finished", "{task:#}");
        let events = home.events();
        let placed = events.iter().find(|e| e["kind"] == "Placed" && e["data"]["task"] == id).unwrap();
        placed["data"]["gpus"].as_array().unwrap().iter().map(|g| g.as_str().unwrap().to_string()).collect()
    };
    let ranks = |id: &str, n: usize| -> Vec<BTreeMap<String, String>> {
        (0..n)
            .map(|rank| {
                let text = std::fs::read_to_string(work.join(format!("rank_{rank}_{id}.env")))
                    .unwrap_or_else(|e| {
                        panic!("rank {rank} of {id} wrote nothing ({e}): {}", logs(&work, id))
                    });
                text.lines()
                    .filter_map(|l| l.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .collect()
    };
    let (ddp, per_task) = (&ids[0], &ids[1]);
    let job_gpus = gpus_of(ddp).join(",");
    for (rank, vars) in ranks(ddp, 4).iter().enumerate() {
        for (key, want) in [
            ("SLURM_PROCID", rank.to_string()),
            ("SLURM_LOCALID", rank.to_string()),
            ("SLURM_NODEID", "0".to_string()),
            ("SLURM_NTASKS", "4".to_string()),
            ("SLURM_NTASKS_PER_NODE", "4".to_string()),
            ("SLURM_JOB_ID", ddp.clone()),
            ("CUDA_VISIBLE_DEVICES", job_gpus.clone()),
        ] {
            assert_eq!(vars.get(key), Some(&want), "rank {rank}: {key} in {vars:?}");
        }
    }
    assert!(!work.join(format!("rank_4_{ddp}.env")).exists(), "4 ranks, no more");
    let job_gpus = gpus_of(per_task);
    let seen: Vec<String> = ranks(per_task, 2).iter().map(|v| v["CUDA_VISIBLE_DEVICES"].clone()).collect();
    assert_eq!(seen, job_gpus, "--gpus-per-task=1: rank r sees the job's GPU r");
}

/// The job's output file, for a failure message.
fn logs(work: &Path, id: &str) -> String {
    ["ddp", "per-task"]
        .iter()
        .filter_map(|prefix| std::fs::read_to_string(work.join(format!("{prefix}-{id}.out"))).ok())
        .collect()
}
