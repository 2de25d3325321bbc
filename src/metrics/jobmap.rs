//! Per-GPU job mapping for dcgm-exporter's `--hpc-job-mapping-dir`: one file per GPU index,
//! named by the index, listing the ids of the carma tasks placed or running on that GPU, one a
//! line (an idle GPU's file is empty). dcgm-exporter then labels that GPU's DCGM metrics with
//! the task ids, so a DCGM panel can be joined with carma's.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::Result;
use crate::journal::State;

/// Task ids per GPU index, for every GPU State knows (idle ones with none), ids in order.
pub fn mapping(state: &State) -> BTreeMap<u32, Vec<String>> {
    let mut by_gpu: BTreeMap<u32, Vec<String>> = state.gpus.values().map(|g| (g.index, Vec::new())).collect();
    for task in state.tasks.values() {
        for uuid in task.active_attempt().map(|a| a.gpus.as_slice()).unwrap_or_default() {
            if let Some(gpu) = state.gpus.get(uuid) {
                by_gpu.entry(gpu.index).or_default().push(task.id.as_str().to_string());
            }
        }
    }
    by_gpu
}

/// Writes `mapping` into `dir` (which must exist), each file replaced atomically, mode 0644.
pub fn write(dir: &Path, mapping: &BTreeMap<u32, Vec<String>>) -> Result<()> {
    for (index, ids) in mapping {
        let text: String = ids.iter().map(|id| format!("{id}\n")).collect();
        crate::exec::write_atomic(&dir.join(index.to_string()), text.as_bytes(), 0o644)?;
    }
    Ok(())
}
