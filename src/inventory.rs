//! `inventory.json`: the GPUs the last tick saw, so `carma submit` can refuse a task that
//! asks for more GPUs than the machine has without opening the journal.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::home::Home;

/// The machine's GPUs as of the last tick.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Always [`INVENTORY_SCHEMA`].
    pub schema: String,
    /// When the tick wrote it, Unix ms.
    pub updated_ms: u64,
    /// Every GPU the tick saw, by index.
    pub gpus: Vec<InventoryGpu>,
}

/// One GPU in the inventory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InventoryGpu {
    /// Its NVML index.
    pub index: u32,
    /// Its UUID.
    pub uuid: String,
    /// Its model name.
    pub name: String,
    /// Its total memory, MiB: what `carma submit` checks a memory figure against.
    pub memory_total_mib: u64,
    /// NVML utilisation timestamp of the last sample, so the next tick reads only newer ones.
    #[serde(default)]
    pub util_last_timestamp_us: Option<u64>,
}

/// Schema tag of the file.
pub const INVENTORY_SCHEMA: &str = "carma.inventory/1";

impl Inventory {
    /// Reads the inventory; `None` when no tick has written one or it is unreadable (the
    /// tick re-checks at ingest, so a missing inventory only delays the error).
    pub fn load(home: &Home) -> Option<Inventory> {
        let text = std::fs::read_to_string(home.inventory_path()).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// What a submission may ask of this machine.
    pub fn limits(&self) -> crate::spec::Limits {
        crate::spec::Limits {
            machine_gpus: (!self.gpus.is_empty()).then_some(self.gpus.len() as u32),
            largest_gpu_mib: self.gpus.iter().map(|g| g.memory_total_mib).max(),
            time_limit_max_ms: None,
            retries_max: None,
            machine_host: (None, None),
        }
    }

    /// Writes the inventory atomically, readable by every submitter.
    pub fn store(&self, home: &Home) -> Result<()> {
        let text = serde_json::to_string_pretty(self).unwrap_or_default();
        crate::exec::write_atomic(&home.inventory_path(), text.as_bytes(), 0o644)
    }
}
