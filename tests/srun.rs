//! carma's `srun` as a batch script calls it: the real binary, run as `srun` (its name on a
//! job's PATH) and as `carma srun`, with the variables a carma job has, starting real
//! processes (`/bin/sh` scripts as the tasks; srun itself never runs a shell).
//!
//! Goal: its tasks get their ranks, `--label` prefixes their lines, srun exits with the
//! highest exit code (128 + N for a signal, 2 for what cannot start), `--kill-on-bad-exit`
//! ends the others, a signal sent to srun from inside the job reaches every task, what needs
//! Slurm is refused in one line, and in a root queue a user's job runs it as the user.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::stderr;

/// `srun ARGS` as a job runs it: through a link named `srun`, inside a carma job's variables.
fn srun(dir: &std::path::Path, args: &[&str]) -> Command {
    let link = dir.join("srun");
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_carma"), &link).unwrap();
    }
    let mut cmd = Command::new(&link);
    cmd.args(args)
        .current_dir(dir)
        .env("SLURM_JOB_ID", "01jtest0000000000")
        .env("SLURM_NTASKS", "1")
        .env("SLURMD_NODENAME", "node1")
        .env("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b,GPU-c")
        .env("SLURM_JOB_GPUS", "0,1,2")
        .env_remove("CARMA_ATTEMPT_TAG")
        .env_remove("SLURM_GPUS_PER_TASK");
    cmd
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Goal: `-n 3 --label` starts three tasks with ranks 0 to 2 and prefixes their lines; srun
/// exits with the highest exit code and names each failed task.
#[test]
fn tasks_get_their_ranks_and_srun_exits_with_the_highest_code() {
    let dir = tempfile::tempdir().unwrap();
    let out = srun(
        dir.path(),
        &[
            "-n",
            "3",
            "--label",
            "sh",
            "-c",
            "echo rank $SLURM_PROCID of $SLURM_NTASKS local $SLURM_LOCALID; exit $SLURM_PROCID",
        ],
    )
    .output()
    .unwrap();
    let stdout = text(&out);
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        ["0: rank 0 of 3 local 0", "1: rank 1 of 3 local 1", "2: rank 2 of 3 local 2"],
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(2), "the highest task exit code");
    assert_eq!(
        stderr(&out),
        "srun: error: node1: task 1: Exited with exit code 1\nsrun: error: node1: task 2: Exited with exit code 2\n"
    );
    // `carma srun` is the same launcher.
    let out = Command::new(env!("CARGO_BIN_EXE_carma"))
        .args([
            "srun",
            "--ntasks=2",
            "--gpus-per-task=1",
            "sh",
            "-c",
            "echo $SLURM_PROCID=$CUDA_VISIBLE_DEVICES",
        ])
        .env("SLURM_JOB_ID", "x")
        .env("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b")
        .output()
        .unwrap();
    let mut lines: Vec<String> = text(&out).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, ["0=GPU-a", "1=GPU-b"], "{}", stderr(&out));
    assert!(out.status.success());
}

/// Goal: without `-n` a step is the job's `SLURM_NTASKS` copies, each seeing every GPU.
#[test]
fn a_bare_srun_starts_the_jobs_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let out = srun(dir.path(), &["sh", "-c", "echo $SLURM_PROCID $CUDA_VISIBLE_DEVICES"])
        .env("SLURM_NTASKS", "2")
        .output()
        .unwrap();
    let mut lines: Vec<String> = text(&out).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, ["0 GPU-a,GPU-b,GPU-c", "1 GPU-a,GPU-b,GPU-c"]);
}

/// Goal: `--kill-on-bad-exit` ends the other tasks once one fails (they would sleep a minute).
#[test]
fn kill_on_bad_exit_ends_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = srun(
        dir.path(),
        &["-n", "2", "-K", "sh", "-c", "if [ $SLURM_PROCID = 0 ]; then exit 3; fi; exec sleep 60"],
    )
    .output()
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the sleeping task was ended: {:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("srun: error: a task failed and --kill-on-bad-exit is set: ending the others\n")
    );
}

/// Goal: a signal sent to srun from inside the job (the batch shell's `kill`, as
/// `trap '...; kill -USR1 $srun_pid' USR1` scripts do) reaches every task.
#[test]
fn a_signal_to_srun_reaches_every_task() {
    let dir = tempfile::tempdir().unwrap();
    let task = "trap 'echo got-usr1-$SLURM_PROCID; kill $!; exit 0' USR1; sleep 30 >/dev/null 2>&1 & echo ready > ready_$SLURM_PROCID; wait";
    let child = srun(dir.path(), &["-n", "2", "sh", "-c", task]).stdout(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(dir.path().join("ready_0").exists() && dir.path().join("ready_1").exists()) {
        assert!(Instant::now() < deadline, "the tasks started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill with our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) };
    let out = child.wait_with_output().unwrap();
    let mut lines: Vec<String> = text(&out).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, ["got-usr1-0", "got-usr1-1"]);
    assert!(out.status.success());
}

/// Goal: what needs Slurm, or a program that is not there, is refused in one line, exit 2.
#[test]
fn what_cannot_be_had_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &["-N", "2", "true"],
            "srun: error: --nodes=2: this server is one node; start the tasks on it with -n N\n",
        ),
        (
            &["--pty", "bash"],
            "srun: error: --pty: no terminal inside a batch job; for an interactive command use carma run, outside a job\n",
        ),
        (&["--frobnicate", "x"], "srun: error: --frobnicate is not an srun option\n"),
        (
            &["no-such-program-anywhere"],
            "srun: error: no-such-program-anywhere: not found on PATH; give its path or fix PATH (the job's is its submitter's at submit)\n",
        ),
        (
            &["-n", "2", "--gpus-per-task=2", "true"],
            "srun: error: 2 tasks × 2 GPU(s) per task need 4 GPUs; the job has 3: start fewer tasks (-n) or give the job more GPUs\n",
        ),
    ];
    for (args, message) in cases {
        let out = srun(dir.path(), args).output().unwrap();
        assert_eq!((stderr(&out).as_str(), out.status.code()), (message, Some(2)), "{args:?}");
    }
    let out = srun(dir.path(), &["true"]).env_remove("SLURM_JOB_ID").output().unwrap();
    assert_eq!(
        stderr(&out),
        "srun: error: not inside a carma job (no SLURM_JOB_ID); submit the script with carma submit, or run one command on a GPU with carma run\n"
    );
    let out = srun(dir.path(), &["-p", "gpu", "true"]).output().unwrap();
    assert_eq!(stderr(&out), "srun: note: --partition: only matters on a cluster; ignored\n");
    assert!(out.status.success());
}

/// Goal: in a root queue, a user's job runs the root-made `srun` link as the user: its tasks
/// are the user's processes, and srun's exit code (the highest task's) is the job's. Method:
/// a throw-away user's job on a shared queue, run by real ticks; root only.
#[test]
fn a_users_job_runs_srun_as_the_user_in_a_root_queue() {
    if common::users::skip_without_users() {
        return;
    }
    let queue = common::users::SharedQueue::new();
    let user = common::users::ThrowawayUser::create("srun");
    let job = "srun -n 2 sh -c 'echo rank $SLURM_PROCID as $(id -u)'; srun -n 2 sh -c 'exit $SLURM_PROCID'";
    let id = queue.ok_as(&user, &["submit", "--parsable", "--gpus", "1", "--", "sh", "-c", job]);
    let id = id.trim();
    queue.tick_until_done(Duration::from_secs(60));
    let mut lines: Vec<String> =
        queue.ok_as(&user, &["logs", "--stdout", id]).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, [format!("rank 0 as {}", user.uid), format!("rank 1 as {}", user.uid)]);
    let task = queue.queue()["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).cloned().unwrap();
    assert_eq!(task["state"], "Failed", "{task:#}");
    let events = queue.home.events();
    let failed = events.iter().find(|e| e["kind"] == "Failed" && e["data"]["task"] == id).unwrap();
    assert_eq!(failed["data"]["outcome"], "exit 1", "srun's exit code is its highest task's");
}
