//! The nodes' fake GPU files, kept moving while jobs run: the fake GPUs as hardware.
//!
//! A job "holds" GPU memory by writing a ledger file (`GPU_HOLD_FUNCTION`: the MiB it holds,
//! named by its node, GPU index and pid, in the cluster's world-writable `gpu-ledger/`), as a
//! CUDA allocation would; every 200 ms the meter lists each live process with what it holds on
//! its GPU, the way NVML lists it, and a GPU's memory in use as their sum. A process that has
//! exited holds nothing, as a real GPU frees a dead process's memory. carma reads these files
//! as it reads NVML (its tick, and each job's watcher), and nothing in carma knows a test wrote
//! them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::SlurmCluster;

/// GPU index → the (pid, MiB) processes a test lists on it.
type GpuProcesses = BTreeMap<u32, Vec<(u32, u64)>>;

/// The ledger folder in the cluster's directory.
pub const LEDGER: &str = "gpu-ledger";

/// A shell function (`carma_gpu_hold MIB`) that makes the calling job's shell hold `MIB` of
/// GPU memory on its first visible GPU until it exits; `@LEDGER@` is the ledger folder.
const GPU_HOLD_FUNCTION: &str =
    r#"carma_gpu_hold() { echo "$1" > "@LEDGER@/$SLURMD_NODENAME-${CUDA_VISIBLE_DEVICES%%,*}-$$"; }"#;

/// A node's fake GPUs as carma's fake-GPU file describes them.
pub(super) struct FakeGpus {
    pub(super) node: String,
    pub(super) gpus: u32,
    pub(super) gpu_mib: u64,
}

impl FakeGpus {
    /// The file with every GPU's energy counter at `energy_mj` and the processes `(GPU index
    /// → [(pid, MiB)])` the test placed on them.
    pub(super) fn json(&self, energy_mj: u64, processes: &GpuProcesses) -> String {
        let gpus: Vec<String> = (0..self.gpus)
            .map(|i| {
                let mine = processes.get(&i).cloned().unwrap_or_default();
                let used: u64 = mine.iter().map(|(_, mib)| mib).sum();
                let list: Vec<String> =
                    mine.iter().map(|(pid, mib)| format!(r#"{{"pid": {pid}, "used_mib": {mib}}}"#)).collect();
                format!(
                    r#"{{"uuid": "GPU-{}-{i}", "name": "Fake-{}GiB", "memory_total_mib": {}, "memory_used_mib": {used}, "sm_active": 0.0, "power_w": 50.0, "energy_mj": {energy_mj}, "processes": [{}]}}"#,
                    self.node,
                    self.gpu_mib / 1024,
                    self.gpu_mib,
                    list.join(", ")
                )
            })
            .collect();
        format!("[{}]\n", gpus.join(",\n"))
    }
}

pub(super) fn write_atomically(path: &Path, text: &str) {
    try_write_atomically(path, text).unwrap();
}

fn try_write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let temporary = path.with_extension("json.tmp");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

/// The ledger's live entries: node → GPU index → (pid, MiB).
fn ledger_processes(ledger: &Path) -> BTreeMap<String, GpuProcesses> {
    let mut listed: BTreeMap<String, GpuProcesses> = BTreeMap::new();
    for entry in std::fs::read_dir(ledger).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let mut parts = name.rsplitn(3, '-');
        let (Some(pid), Some(gpu), Some(node)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let (Ok(pid), Ok(gpu)) = (pid.parse::<u32>(), gpu.parse::<u32>()) else { continue };
        let Ok(mib) = std::fs::read_to_string(entry.path()).unwrap_or_default().trim().parse::<u64>() else {
            continue;
        };
        if alive(pid) {
            listed.entry(node.to_string()).or_default().entry(gpu).or_default().push((pid, mib));
        }
    }
    listed
}

/// A process that exists and has not exited (a zombie holds no GPU memory).
fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
    state.is_some_and(|s| !matches!(s, 'Z' | 'X' | 'x'))
}

/// Keeps the nodes' fake GPU files moving while jobs run: every 200 ms each GPU's energy
/// counter grows by 50 W x 0.2 s, and the live GPU processes a test set or the jobs' ledger
/// holds are listed. Stops on drop.
pub struct GpuMeter {
    stop: Arc<AtomicBool>,
    processes: Arc<Mutex<BTreeMap<String, GpuProcesses>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GpuMeter {
    /// Lists process `pid` holding `mib` on GPU `gpu` of `node` from now on.
    pub fn set_process(&self, node: &str, gpu: u32, pid: u32, mib: u64) {
        let mut processes = self.processes.lock().unwrap();
        processes.entry(node.to_string()).or_default().entry(gpu).or_default().push((pid, mib));
    }

    /// Waits until the files list what [`Self::set_process`] set.
    pub fn flush(&self) {
        std::thread::sleep(Duration::from_millis(450));
    }
}

impl Drop for GpuMeter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl SlurmCluster {
    /// `script` (a `sh` script, with or without its `#!` line) with `carma_gpu_hold` defined
    /// first, so the job can hold fake GPU memory.
    pub fn with_gpu_hold(&self, script: &str) -> String {
        let function = GPU_HOLD_FUNCTION.replace("@LEDGER@", &self.path(LEDGER).display().to_string());
        match script.strip_prefix("#!") {
            Some(rest) => {
                let (shebang, body) = rest.split_once('\n').unwrap_or((rest, ""));
                format!("#!{shebang}\n{function}\n{body}")
            }
            None => format!("{function}\n{script}"),
        }
    }

    /// Starts the meter on every node's fake GPU file (the cluster does, once: [`Self::meter`]).
    pub(super) fn start_meter(&self) -> GpuMeter {
        let stop = Arc::new(AtomicBool::new(false));
        let processes = Arc::new(Mutex::new(BTreeMap::new()));
        let nodes: Vec<(FakeGpus, PathBuf)> = self
            .nodes
            .iter()
            .map(|n| {
                let fake = FakeGpus { node: n.name.clone(), gpus: self.gpus_per_node, gpu_mib: self.gpu_mib };
                (fake, n.home.join("gpus.json"))
            })
            .collect();
        let (stop_flag, listed) = (stop.clone(), processes.clone());
        let ledger = self.path(LEDGER);
        std::fs::create_dir_all(&ledger).unwrap();
        std::fs::set_permissions(&ledger, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
        let thread = std::thread::spawn(move || {
            let mut energy_mj = 1000;
            while !stop_flag.load(Ordering::Relaxed) {
                energy_mj += 10_000;
                let mut listed: BTreeMap<String, GpuProcesses> = listed.lock().unwrap().clone();
                for gpus in listed.values_mut() {
                    for processes in gpus.values_mut() {
                        processes.retain(|&(pid, _)| alive(pid));
                    }
                }
                for (node, gpus) in ledger_processes(&ledger) {
                    for (gpu, processes) in gpus {
                        listed.entry(node.clone()).or_default().entry(gpu).or_default().extend(processes);
                    }
                }
                for (fake, file) in &nodes {
                    // The cluster's directory may be going away under a test that failed.
                    let _ = try_write_atomically(
                        file,
                        &fake.json(energy_mj, &listed.get(&fake.node).cloned().unwrap_or_default()),
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        GpuMeter { stop, processes, thread: Some(thread) }
    }
}
