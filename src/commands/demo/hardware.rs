//! The demo's two fake GPUs as hardware: what each running job holds, listed in the fake GPU
//! file the way NVML lists a process, so the tick and each job's supervisor read the demo's
//! GPUs exactly as they read real ones.
//!
//! The demo is the GPU here, and only the GPU: every 100 ms it lists each live job process
//! (from its attempt's `job.json`, on the GPUs of its `plan.json`) with the memory its
//! workload holds, and a GPU's memory in use as their sum; a job that has exited holds
//! nothing, as a real GPU frees a dead process's memory. Nothing in carma knows it is a demo:
//! the out-of-memory task is recovered because the readings show what it held.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::exec::{AttemptPlan, read_job_record, run_dir};

/// How often the hardware refreshes the file.
const REFRESH: Duration = Duration::from_millis(100);
/// Attempts looked at per task (the demo's tasks take at most two).
const ATTEMPTS_MAX: u32 = 4;

/// One of the demo's GPUs.
pub(super) struct Gpu {
    pub uuid: &'static str,
    pub name: &'static str,
    pub total_mib: u64,
}

/// The hardware thread; dropping it stops it.
pub(super) struct Hardware {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Hardware {
    /// Writes `file` with `gpus` idle, then keeps it current, with each task's workload
    /// holding `holds[task]` MiB on each of its GPUs while its job lives.
    pub(super) fn start(
        home: &Path,
        file: &Path,
        gpus: &'static [Gpu],
        holds: BTreeMap<String, u64>,
    ) -> std::io::Result<Hardware> {
        write_gpus(file, gpus, &[])?;
        let stop = Arc::new(AtomicBool::new(false));
        let (home, file, stopped) = (home.to_path_buf(), file.to_path_buf(), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let processes = live_processes(&home, &holds);
                if let Err(err) = write_gpus(&file, gpus, &processes) {
                    eprintln!("carma demo: cannot write {}: {err}", file.display());
                }
                std::thread::sleep(REFRESH);
            }
        });
        Ok(Hardware { stop, thread: Some(thread) })
    }
}

impl Drop for Hardware {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Every live job process: (its GPUs, its pid, what it holds).
fn live_processes(home: &Path, holds: &BTreeMap<String, u64>) -> Vec<(Vec<String>, u32, u64)> {
    let mut live = Vec::new();
    for (task, &mib) in holds {
        for attempt in 1..=ATTEMPTS_MAX {
            let Ok(dir) = run_dir(home, task, attempt) else { continue };
            let (Ok(Some(job)), Ok(plan)) = (read_job_record(&dir), AttemptPlan::read(&dir)) else {
                continue;
            };
            if alive(job.job.pid) {
                live.push((plan.gpu_uuids, job.job.pid, mib));
            }
        }
    }
    live
}

/// A process that exists and has not exited (a zombie holds no GPU memory).
fn alive(pid: u32) -> bool {
    crate::exec::read_proc_stat(pid).is_some_and(|stat| !matches!(stat.state, 'Z' | 'X'))
}

/// Writes the fake GPU file atomically (a tick never reads half of it).
fn write_gpus(file: &Path, gpus: &[Gpu], processes: &[(Vec<String>, u32, u64)]) -> std::io::Result<()> {
    let listed: Vec<serde_json::Value> = gpus
        .iter()
        .map(|gpu| {
            let on: Vec<(u32, u64)> = processes
                .iter()
                .filter(|(uuids, _, _)| uuids.iter().any(|u| u == gpu.uuid))
                .map(|(_, pid, mib)| (*pid, *mib))
                .collect();
            let used: u64 = on.iter().map(|(_, mib)| mib).sum::<u64>().min(gpu.total_mib);
            let processes: Vec<serde_json::Value> =
                on.iter().map(|(pid, mib)| serde_json::json!({"pid": pid, "used_mib": mib})).collect();
            serde_json::json!({
                "uuid": gpu.uuid, "name": gpu.name, "memory_total_mib": gpu.total_mib,
                "memory_used_mib": used, "sm_active": 0.0, "processes": processes,
            })
        })
        .collect();
    let tmp: PathBuf = file.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::Value::Array(listed).to_string())?;
    std::fs::rename(&tmp, file)
}
