//! The GPU source of the supervisor's own memory readings ([`crate::exec::gpu_watch`]): the
//! same source the tick samples (`nvml`, `fake:FILE`), read memory only.
//!
//! `exec` sits below `gpu`, so the sampler names its source by a trait
//! ([`MemorySource`]) and the binary hands it [`open_memory_source`]. NVML is initialised
//! once per supervisor, when the sampler's thread opens it; each reading is then a few NVML
//! calls per GPU (memory, compute processes, MIG mode). The fake file is re-read at every
//! reading, as the tick re-reads it at every tick, so a test (or the demo) that writes it is
//! the GPU both see.

use super::{FakeProbe, GpuProbe, GpuSample, NvmlProbe, SinceMarks};
use crate::exec::{MemoryNow, MemorySource};

/// Opens the source `spec` names for the supervisor's readings: `nvml` or `fake:PATH`; any
/// other spec (`none`) has no readings, in words.
pub fn open_memory_source(spec: &str) -> Result<Box<dyn MemorySource>, String> {
    match spec {
        "nvml" => Ok(Box::new(NvmlProbe::init().map_err(|error| error.to_string())?)),
        _ => match spec.strip_prefix("fake:") {
            Some(path) if !path.is_empty() => {
                Ok(Box::new(FakeProbe::open(path).map_err(|error| error.to_string())?))
            }
            _ => Err(format!("GPU source `{spec}` has no memory readings; use `nvml` or `fake:PATH`")),
        },
    }
}

impl MemorySource for NvmlProbe {
    fn read(&mut self) -> Result<Vec<MemoryNow>, String> {
        self.read_memory().map_err(|error| error.to_string())
    }
}

impl MemorySource for FakeProbe {
    fn read(&mut self) -> Result<Vec<MemoryNow>, String> {
        let samples = self.sample(&SinceMarks::new()).map_err(|error| error.to_string())?;
        Ok(memory_of(&samples))
    }
}

/// Each GPU's memory in use as the tick counts it (total − free, `tick::oom_evidence`) and
/// each MIG instance's, with their processes.
pub fn memory_of(samples: &[GpuSample]) -> Vec<MemoryNow> {
    let mut gpus = Vec::new();
    for sample in samples {
        gpus.push(MemoryNow {
            uuid: sample.uuid.clone(),
            used_mib: sample.memory_total_mib.saturating_sub(sample.memory_free_mib),
            total_mib: sample.memory_total_mib,
            processes: sample.processes.iter().map(|p| (p.pid, p.used_mib.unwrap_or(0))).collect(),
        });
        gpus.extend(sample.mig.instances.iter().map(|mig| MemoryNow {
            uuid: mig.uuid.clone(),
            used_mib: mig.memory_used_mib,
            total_mib: mig.memory_total_mib,
            processes: mig.processes.iter().map(|p| (p.pid, p.used_mib.unwrap_or(0))).collect(),
        }));
    }
    gpus
}

#[cfg(test)]
mod tests {
    //! Goal: the fake file reads as the tick reads it (used = total − free, reserved memory
    //! included; MIG instances with their processes), and a spec without readings says so.
    use super::*;

    #[test]
    fn the_fake_file_reads_as_the_tick_reads_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("gpus.json");
        std::fs::write(
            &file,
            r#"[{"uuid": "GPU-a", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 30000,
                 "memory_reserved_mib": 512, "processes": [{"pid": 42, "used_mib": 7680}]},
                {"uuid": "GPU-b", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 0,
                 "mig_instances": [{"uuid": "MIG-b-0", "memory_total_mib": 19968, "memory_used_mib": 900,
                                    "processes": [{"pid": 43, "used_mib": 900}]}]}]"#,
        )
        .expect("write");
        let mut source = open_memory_source(&format!("fake:{}", file.display())).expect("opens");
        let read = source.read().expect("reads");
        let now = |uuid: &str, used_mib, total_mib, processes| MemoryNow {
            uuid: uuid.into(),
            used_mib,
            total_mib,
            processes,
        };
        assert_eq!(
            read,
            [
                now("GPU-a", 30512, 40960, vec![(42, 7680)]),
                now("GPU-b", 0, 40960, vec![]),
                now("MIG-b-0", 900, 19968, vec![(43, 900)])
            ]
        );
        // The file is re-read at every reading.
        std::fs::write(
            &file,
            r#"[{"uuid": "GPU-a", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 1}]"#,
        )
        .expect("rewrite");
        assert_eq!(source.read().expect("reads")[0].used_mib, 1);
        let refused = open_memory_source("none").err().expect("none has no readings");
        assert_eq!(refused, "GPU source `none` has no memory readings; use `nvml` or `fake:PATH`");
    }
}
