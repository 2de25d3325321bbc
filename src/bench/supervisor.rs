//! `carma bench supervisor`: what the supervisor's own GPU memory readings
//! ([`crate::exec::gpu_watch`]) cost, measured on real supervisors side by side with the
//! readings off.
//!
//! Each run starts a real `carma run-task` (this binary) on a scratch run folder whose plan
//! runs `sleep SECONDS` on one GPU of the source (`--gpus`: a fake file the bench writes, or
//! `nvml`: the driver, or NVIDIA's mock library through `LD_LIBRARY_PATH`, which the child
//! inherits), once with `gpu_watch` off and once at the cadence asked for, alternately, so both
//! see the same machine. The child's CPU time (user + system) and peak resident memory come
//! from `wait4`'s rusage, the kernel's account of exactly that process and its reaped
//! children (the `sleep`, the same in both). Medians over `--runs` of each.

use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::exec::{AttemptPlan, WatchPlan, create_run_dir, read_exit_record};

/// What to run.
#[derive(Debug, Clone)]
pub struct SupervisorBenchOptions {
    /// The GPU source: `fake:PATH`, `nvml`, or `None` for a fake file the bench writes.
    pub gpus: Option<String>,
    /// The cadence measured, ms.
    pub interval_ms: u64,
    /// How long each job runs, s.
    pub job_s: u64,
    /// Runs of each side.
    pub runs: u32,
    /// The `carma` binary to run as the supervisor.
    pub exe: PathBuf,
    /// Scratch state directory.
    pub scratch: PathBuf,
}

/// One side's medians.
#[derive(Debug, Clone, Serialize)]
pub struct SupervisorSide {
    /// The cadence, ms; 0: readings off.
    pub interval_ms: u64,
    /// Median CPU time of the supervisor (user + system), ms.
    pub cpu_ms: f64,
    /// That per second of the job's run, as a share of one core, %.
    pub cpu_percent: f64,
    /// Median peak resident memory of the supervisor, MiB.
    pub peak_rss_mib: f64,
    /// Median wall time of the run, s.
    pub wall_s: f64,
    /// Median readings taken (from the exit record).
    pub readings: u64,
}

/// The result of `carma bench supervisor`.
#[derive(Debug, Clone, Serialize)]
pub struct SupervisorBench {
    /// The GPU source, as the plans named it.
    pub source: String,
    /// The GPU the job was given.
    pub gpu: String,
    /// How long each job ran, s.
    pub job_s: u64,
    /// Runs of each side.
    pub runs: u32,
    /// Readings off, then on.
    pub sides: [SupervisorSide; 2],
}

/// A fake GPU with a few processes listed, as a shared GPU shows them.
const BENCH_GPUS: &str = r#"[{"uuid": "GPU-bench-0000", "name": "A100-SXM4-40GB (fake)", "memory_total_mib": 40960,
  "memory_used_mib": 20000, "sm_active": 0.5,
  "processes": [{"pid": 1, "used_mib": 10000}, {"pid": 2, "used_mib": 10000}]}]"#;

/// Runs the bench (see the module docs).
pub fn supervisor(options: &SupervisorBenchOptions) -> Result<SupervisorBench> {
    let source = match &options.gpus {
        Some(spec) => spec.clone(),
        None => {
            let file = options.scratch.join("gpus.json");
            std::fs::write(&file, BENCH_GPUS)
                .map_err(|e| Error::io(format!("cannot write {}", file.display()), e))?;
            format!("fake:{}", file.display())
        }
    };
    let gpu = first_gpu(&source)?;
    let mut samples: [Vec<(f64, f64, f64, u64)>; 2] = [Vec::new(), Vec::new()];
    for run in 0..options.runs.max(1) {
        for (side, interval_ms) in [(0usize, 0u64), (1, options.interval_ms)] {
            let watch = (interval_ms > 0).then(|| WatchPlan { source: source.clone(), interval_ms });
            samples[side].push(one_run(options, &gpu, watch, run * 2 + side as u32 + 1)?);
        }
    }
    let sides = [0usize, 1].map(|side| {
        let median = |pick: fn(&(f64, f64, f64, u64)) -> f64| {
            let mut values: Vec<f64> = samples[side].iter().map(pick).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let cpu_ms = median(|s| s.0);
        let wall_s = median(|s| s.2);
        SupervisorSide {
            interval_ms: if side == 0 { 0 } else { options.interval_ms },
            cpu_ms,
            cpu_percent: cpu_ms / 10.0 / wall_s.max(1e-9),
            peak_rss_mib: median(|s| s.1),
            wall_s,
            readings: median(|s| s.3 as f64) as u64,
        }
    });
    Ok(SupervisorBench { source, gpu, job_s: options.job_s, runs: options.runs.max(1), sides })
}

/// The first GPU the source lists, for the plan.
fn first_gpu(source: &str) -> Result<String> {
    let mut opened = crate::gpu::open_memory_source(source).map_err(Error::BadInput)?;
    let listed = opened.read().map_err(|why| Error::BadInput(format!("GPU source {source}: {why}")))?;
    let first = listed.into_iter().next().ok_or_else(|| {
        Error::BadInput(format!("GPU source {source} lists no GPU; give --gpus a source with one"))
    })?;
    Ok(first.uuid)
}

/// One supervisor: (CPU ms, peak RSS MiB, wall s, readings).
fn one_run(
    options: &SupervisorBenchOptions,
    gpu: &str,
    watch: Option<WatchPlan>,
    attempt: u32,
) -> Result<(f64, f64, f64, u64)> {
    const TASK: &str = "0benchsupervisor";
    let run_dir =
        create_run_dir(&options.scratch, TASK, attempt).map_err(|e| Error::BadInput(e.to_string()))?;
    let plan = AttemptPlan {
        task_id: TASK.into(),
        attempt,
        argv: vec!["/bin/sleep".into(), options.job_s.to_string()],
        env: Default::default(),
        workdir: options.scratch.clone(),
        uid: crate::access::uid::effective(),
        gid: None,
        gpu_uuids: vec![gpu.to_string()],
        mps_mem_limit_mib: None,
        time_limit_ms: None,
        stdout_path: None,
        stderr_path: None,
        script: None,
        log_bytes_max: None,
        signal: None,
        interactive: None,
        host_limits: Default::default(),
        gpu_watch: watch,
    };
    plan.write_atomic(&run_dir).map_err(|e| Error::BadInput(e.to_string()))?;
    let started = Instant::now();
    let child = std::process::Command::new(&options.exe)
        .args(["run-task", TASK, "--attempt", &attempt.to_string()])
        .env("CARMA_HOME", &options.scratch)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| Error::io(format!("cannot run {}", options.exe.display()), e))?;
    let usage = wait_with_usage(child.id())?;
    let wall_s = started.elapsed().as_secs_f64();
    let readings = read_exit_record(&run_dir)
        .ok()
        .flatten()
        .and_then(|record| record.gpu_readings)
        .map_or(0, |readings| readings.count);
    Ok((usage.0, usage.1, wall_s, readings))
}

/// Waits for `pid` and returns its CPU ms (user + system) and peak RSS MiB.
fn wait_with_usage(pid: u32) -> Result<(f64, f64)> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| Error::BadInput(format!("pid {pid} out of range")))?;
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills; `pid` is our own unreaped child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if waited != pid {
        return Err(Error::io("cannot wait for the supervisor", std::io::Error::last_os_error()));
    }
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    Ok((ms(usage.ru_utime) + ms(usage.ru_stime), usage.ru_maxrss as f64 / 1024.0))
}
