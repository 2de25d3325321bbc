//! The nodes' fake GPU files, kept moving while jobs run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::SlurmCluster;

/// GPU index → the (pid, MiB) processes a test lists on it.
type GpuProcesses = BTreeMap<u32, Vec<(u32, u64)>>;

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
    let temporary = path.with_extension("json.tmp");
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

/// Keeps the nodes' fake GPU files moving while jobs run: every 200 ms each GPU's energy
/// counter grows by 50 W x 0.2 s, and the GPU processes a test set are listed. Stops on drop.
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
    /// Starts the meter on every node's fake GPU file.
    pub fn start_meter(&self) -> GpuMeter {
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
        let thread = std::thread::spawn(move || {
            let mut energy_mj = 1000;
            while !stop_flag.load(Ordering::Relaxed) {
                energy_mj += 10_000;
                let listed: BTreeMap<String, GpuProcesses> = listed.lock().unwrap().clone();
                for (fake, file) in &nodes {
                    write_atomically(
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
