//! The node agent's own readings of a Slurm job's GPU memory (edge): `carma slurm watch`,
//! root, one per run of a job on this node.
//!
//! A job's out-of-memory line is its word. On one server the attempt's root supervisor reads
//! its GPUs every `[enforce] supervisor-sample-ms` and keeps what it saw in its root-owned
//! exit record; a Slurm job has no carma supervisor (slurmstepd runs it), so this watcher is
//! that supervisor's sampler for it:
//!
//! - **who starts it:** the Prolog, as root, right after it journaled the start, detached in a
//!   session of its own (slurmd kills a hook's process group when the hook exits); and the
//!   follower for a restart slurmd ran without the Prolog;
//! - **what it reads:** the job's GPUs (their UUIDs from the Prolog's probe), through the
//!   sampler the supervisor uses (`exec::gpu_watch`) and the node's GPU source (`[tick] gpus`:
//!   NVML, opened once, or the fake file), at the same cadence;
//! - **whose processes:** a GPU process is the job's when it runs as the job's user under a
//!   root `slurmstepd` of this job (its executable `slurmstepd`, its title
//!   `slurmstepd: [JOBID.STEP]`): the kernel's parent links, which a job cannot forge, never
//!   the job's environment;
//! - **where its readings go:** when the Epilog asks (`JOBID.stop`), it writes them to
//!   `JOBID.json` in `HOME/slurm-watch/` (root's, 0700; `JOBID.pid` names the live watcher),
//!   which the Epilog reads and removes: the job can neither write nor name those files;
//! - **how long it lives:** until the Epilog asks, or [`ORPHAN_AFTER`] after the job's last
//!   step left the node (an Epilog that never came), so it never outlives a job by much.
//!
//! The Epilog weighs these readings with the journal's by `sched::judge_oom`, as the tick
//! weighs a local attempt's supervisor's. Without a watcher (readings off, no GPU source, a
//! watcher that could not start) the line is weighed against the journal's readings alone.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::exec::gpu_watch::{Owner, Watch};
use crate::exec::proctable::{ProcEntry, read_entry};
use crate::exec::{GpuReadings, WatchPlan};
use crate::home::Home;

use super::command::spawn_detached_clean;

/// The watchers' folder in the state directory.
pub const WATCH_DIR: &str = "slurm-watch";
/// The longest the Epilog waits for a watcher to hand over its readings.
pub const STOP_WAIT: Duration = Duration::from_secs(3);
/// A watcher stops on its own once no step of its job has been on the node for this long.
pub const ORPHAN_AFTER: Duration = Duration::from_secs(120);
/// The most bytes of a readings file the Epilog reads (16 readings of a few GPUs are a few KiB).
const RECORD_BYTES_MAX: u64 = 1 << 20;
/// How often the watcher looks for the Epilog's request.
const POLL: Duration = Duration::from_millis(50);
/// How often the watcher looks for its job's steps.
const STEPS_EVERY: Duration = Duration::from_secs(2);
/// Ancestors walked from a GPU process to its job's step, at most.
const ANCESTORS_MAX: usize = 256;

/// The run of a job a watcher reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchJob {
    /// Slurm's job number.
    pub job_id: u32,
    /// `SLURM_JOB_RESTART_COUNT` of this run: the Epilog takes only its own run's readings.
    pub restart_count: u32,
    /// The job's user: only its processes are the job's.
    pub uid: u32,
    /// The job's GPUs (UUIDs as the node's probe names them).
    pub gpus: Vec<String>,
}

/// `JOBID.json`: what a watcher read of one run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct WatchRecord {
    /// The job.
    pub job_id: u32,
    /// The run (`SLURM_JOB_RESTART_COUNT`).
    pub restart_count: u32,
    /// The sampler's readings, as a supervisor's exit record carries them.
    pub readings: GpuReadings,
}

/// The sampler's plan on this node: its GPU source and cadence, `None` when readings are off
/// (`[enforce] supervisor-sample-ms = 0`) or the source reads no memory (`none`).
pub fn plan_of(config: &Config) -> Option<WatchPlan> {
    let interval_ms = config.enforce.supervisor_sample_ms;
    let source = match config.tick.gpus.as_str() {
        "nvml" => "nvml".to_string(),
        spec => {
            let path = spec.strip_prefix("fake:").filter(|path| !path.is_empty())?;
            format!("fake:{}", std::path::absolute(path).ok()?.display())
        }
    };
    (interval_ms > 0).then_some(WatchPlan { source, interval_ms })
}

/// Starts the watcher of `job` detached (the Prolog's and the follower's side); `Ok(None)`
/// when this node takes no readings.
/// `log` is the hook log the watcher's own words go to (the caller's: the Prolog's).
pub fn start(home: &Home, exe: &Path, config: &Config, job: &WatchJob, log: &Path) -> Result<Option<u32>> {
    if plan_of(config).is_none() || job.gpus.is_empty() {
        return Ok(None);
    }
    let mut args = vec![
        "--home".to_string(),
        home.root().display().to_string(),
        "slurm".into(),
        "watch".into(),
        "--job".into(),
        job.job_id.to_string(),
        "--restart".into(),
        job.restart_count.to_string(),
        "--uid".into(),
        job.uid.to_string(),
    ];
    for gpu in &job.gpus {
        args.extend(["--gpu".to_string(), gpu.clone()]);
    }
    spawn_detached_clean(exe, &args, log).map(Some)
}

/// The watcher's body (`carma slurm watch`): reads the job's GPUs until the Epilog asks for
/// the readings or the job's steps are long gone, then writes them; returns its log line.
pub fn watch(home: &Home, job: &WatchJob) -> Result<String> {
    let config = Config::load(home)?;
    let plan = plan_of(&config)
        .ok_or_else(|| Error::BadInput("this node takes no GPU memory readings; nothing to watch".into()))?;
    let files = Files::of(home, job.job_id)?;
    // A request or readings left from an earlier run of this job are not this run's.
    let _ = std::fs::remove_file(&files.stop);
    let _ = std::fs::remove_file(&files.record);
    let me = crate::exec::read_proc_stat(std::process::id()).map_or(0, |stat| stat.start_time_ticks);
    crate::exec::write_atomic(&files.pid, format!("{} {me}\n", std::process::id()).as_bytes(), 0o600)?;
    let owner = SlurmSteps { job_id: job.job_id, uid: job.uid };
    let watch = Watch::start(Some(&plan), Some(crate::gpu::open_memory_source), &job.gpus, owner)
        .ok_or_else(|| Error::BadInput(format!("job {}: the GPU sampler did not start", job.job_id)))?;
    let asked = wait_for_request(&files, job.job_id);
    let readings = watch.finish();
    let record = WatchRecord { job_id: job.job_id, restart_count: job.restart_count, readings };
    let bytes = serde_json::to_vec(&record).expect("plain data serialises");
    crate::exec::write_atomic(&files.record, &bytes, 0o600)?;
    let _ = std::fs::remove_file(&files.pid);
    let peak = record.readings.peak_mib.map_or("none seen".to_string(), |mib| format!("{mib} MiB"));
    let why = if asked { "the Epilog asked" } else { "its job left the node" };
    Ok(format!(
        "job {} run {}: {} reading(s) every {} ms, the job's peak {peak}; handed over ({why})",
        job.job_id, job.restart_count, record.readings.count, record.readings.interval_ms
    ))
}

/// Waits for the Epilog's request (true) or for [`ORPHAN_AFTER`] without a step of the job on
/// the node (false).
fn wait_for_request(files: &Files, job_id: u32) -> bool {
    let mut steps_seen = Instant::now();
    let mut steps_checked = Instant::now();
    loop {
        if files.stop.exists() {
            return true;
        }
        if steps_checked.elapsed() >= STEPS_EVERY {
            steps_checked = Instant::now();
            if job_has_steps(job_id) {
                steps_seen = Instant::now();
            } else if steps_seen.elapsed() >= ORPHAN_AFTER {
                return false;
            }
        }
        std::thread::sleep(POLL);
    }
}

/// The Epilog's side: asks the job's watcher for its readings, waits for them while it lives
/// (at most [`STOP_WAIT`]), and returns them when they are this run's; the files are removed.
/// Without a live watcher it does not wait.
pub fn collect(home: &Home, job_id: u32, restart_count: u32) -> Option<GpuReadings> {
    let files = Files::of(home, job_id).ok()?;
    if !files.record.exists() && watcher_lives(&files.pid) {
        crate::exec::write_atomic(&files.stop, b"", 0o600).ok()?;
        let asked = Instant::now();
        while !files.record.exists() && asked.elapsed() < STOP_WAIT && watcher_lives(&files.pid) {
            std::thread::sleep(POLL);
        }
    }
    let _ = std::fs::remove_file(&files.pid);
    let bytes = read_record(&files.record);
    let _ = std::fs::remove_file(&files.stop);
    let _ = std::fs::remove_file(&files.record);
    let record: WatchRecord = serde_json::from_slice(&bytes.ok()?).ok()?;
    (record.job_id == job_id && record.restart_count == restart_count).then_some(record.readings)
}

/// The readings file, only when it is a regular file (no link followed) of at most
/// [`RECORD_BYTES_MAX`]: root's folder, but root reads nothing unbounded.
fn read_record(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = crate::fsutil::open_regular(path, crate::fsutil::Symlinks::Refuse)?;
    let mut bytes = Vec::new();
    file.take(RECORD_BYTES_MAX).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Whether the watcher the pid file names (`PID START_TICKS`) still runs: the same pid, started
/// at the same time, so a pid handed out again is no watcher.
fn watcher_lives(pid_file: &Path) -> bool {
    let text = read_record(pid_file).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let mut words = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    let (Some(Some(pid)), Some(Some(start))) = (words.next(), words.next()) else { return false };
    let Ok(pid) = u32::try_from(pid) else { return false };
    crate::exec::read_proc_stat(pid).is_some_and(|stat| stat.start_time_ticks == start && stat.state != 'Z')
}

/// A watcher's files in `HOME/slurm-watch/`.
struct Files {
    pid: PathBuf,
    stop: PathBuf,
    record: PathBuf,
}

impl Files {
    /// The job's files, the folder made (root's, 0700) when missing.
    fn of(home: &Home, job_id: u32) -> Result<Files> {
        let dir = home.root().join(WATCH_DIR);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(format!("cannot create {}", dir.display()), e)),
        }
        Ok(Files {
            pid: dir.join(format!("{job_id}.pid")),
            stop: dir.join(format!("{job_id}.stop")),
            record: dir.join(format!("{job_id}.json")),
        })
    }
}

/// A Slurm job's processes: its user's, under one of its root `slurmstepd`s.
#[derive(Clone, Debug)]
pub(crate) struct SlurmSteps {
    /// The job.
    pub job_id: u32,
    /// Its user.
    pub uid: u32,
}

impl Owner for SlurmSteps {
    fn judge(&self, pid: u32) -> Option<(ProcEntry, bool)> {
        let entry = read_entry(pid)?;
        if entry.owner_uid != self.uid || entry.is_dead() {
            return Some((entry, false));
        }
        let mut next = entry.ppid;
        for _ in 0..ANCESTORS_MAX {
            if next <= 1 {
                break;
            }
            let Some(above) = read_entry(next) else { break };
            if above.owner_uid == 0 && is_step_of(next, self.job_id) {
                return Some((entry, true));
            }
            next = above.ppid;
        }
        Some((entry, false))
    }
}

/// Whether any `slurmstepd` of `job_id` runs on this node.
fn job_has_steps(job_id: u32) -> bool {
    crate::exec::proctable::read_table()
        .iter()
        .any(|entry| entry.owner_uid == 0 && !entry.is_dead() && is_step_of(entry.pid, job_id))
}

/// Whether root's process `pid` is a `slurmstepd` of `job_id`: its executable is
/// `slurmstepd` (Debian's is `slurmstepd-wlm`) and its title `slurmstepd: [JOBID.STEP]`.
fn is_step_of(pid: u32, job_id: u32) -> bool {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if !is_stepd_binary(name.trim_end_matches(" (deleted)")) {
        return false;
    }
    use std::io::Read;
    let mut title = Vec::with_capacity(64);
    let read =
        std::fs::File::open(format!("/proc/{pid}/cmdline")).and_then(|f| f.take(64).read_to_end(&mut title));
    read.is_ok() && title_names_job(&title, job_id)
}

/// Whether an executable's file name is slurmstepd's: `slurmstepd`, or a packaging's variant
/// of it (`slurmstepd-wlm`).
fn is_stepd_binary(name: &str) -> bool {
    name == "slurmstepd" || name.starts_with("slurmstepd-")
}

/// Whether a `slurmstepd` title (`/proc/PID/cmdline`) names a step of `job_id`.
pub fn title_names_job(title: &[u8], job_id: u32) -> bool {
    title.starts_with(format!("slurmstepd: [{job_id}.").as_bytes())
}

#[cfg(test)]
mod tests {
    //! Goal: a step's title names only its own job; the Epilog gets the readings of its own run
    //! and nothing else; a process counts as a job's only under a root `slurmstepd` of it (this
    //! test's own processes, outside any job, never do). Method: the handshake on a real state
    //! directory with a watcher's files written as a watcher writes them.
    use super::*;

    #[test]
    fn a_title_names_its_own_job_only() {
        assert!(title_names_job(b"slurmstepd: [42.batch]\0", 42));
        assert!(title_names_job(b"slurmstepd: [42.0]", 42));
        assert!(!title_names_job(b"slurmstepd: [421.batch]", 42));
        assert!(!title_names_job(b"slurmstepd: [4.batch]", 42));
        assert!(!title_names_job(b"python train.py slurmstepd: [42.batch]", 42));
        assert!(is_stepd_binary("slurmstepd") && is_stepd_binary("slurmstepd-wlm"));
        assert!(!is_stepd_binary("python3") && !is_stepd_binary("my-slurmstepd"));
    }

    #[test]
    fn processes_outside_a_job_are_never_its() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn sleep");
        let me = crate::access::uid::effective();
        let owner = SlurmSteps { job_id: 7, uid: me };
        let (entry, ours) = owner.judge(child.id()).expect("listed");
        assert_eq!(entry.pid, child.id());
        assert!(!ours, "no slurmstepd above this test's own child");
        let _ = child.kill();
        let _ = child.wait();
        assert!(owner.judge(u32::MAX - 1).is_none());
    }

    #[test]
    fn the_epilog_takes_its_own_runs_readings_and_removes_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Home::at(dir.path());
        let files = Files::of(&home, 9).expect("folder");
        let readings =
            GpuReadings { interval_ms: 500, count: 3, peak_mib: Some(1500), last: vec![], error: None };
        let write = |restart_count| {
            let record = WatchRecord { job_id: 9, restart_count, readings: readings.clone() };
            std::fs::write(&files.record, serde_json::to_vec(&record).unwrap()).unwrap();
        };
        write(1);
        assert_eq!(collect(&home, 9, 1), Some(readings.clone()));
        assert!(!files.record.exists() && !files.stop.exists(), "handed over once");
        write(0);
        assert_eq!(collect(&home, 9, 1), None, "an earlier run's readings are not this run's");
        // No live watcher (none, or its pid file names a process that is not it): no wait.
        std::fs::write(&files.pid, format!("{} 1\n", std::process::id())).unwrap();
        let asked = Instant::now();
        assert_eq!(collect(&home, 9, 1), None);
        assert!(asked.elapsed() < STOP_WAIT, "{:?}", asked.elapsed());
        assert!(!files.pid.exists());
        // A live watcher (this process stands for it) is asked and waited for, at most STOP_WAIT.
        let me = crate::exec::read_proc_stat(std::process::id()).unwrap().start_time_ticks;
        std::fs::write(&files.pid, format!("{} {me}\n", std::process::id())).unwrap();
        let asked = Instant::now();
        assert_eq!(collect(&home, 9, 1), None);
        assert!(asked.elapsed() >= STOP_WAIT && asked.elapsed() < STOP_WAIT * 3);
        let mode = std::fs::metadata(dir.path().join(WATCH_DIR)).unwrap().permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o700);
    }
}
