//! What a job's supervisor would have read of a simulated job's GPU memory: the readings
//! `exec::gpu_watch` writes into a real exit record, from the model's true memory.
//!
//! A real supervisor reads its GPUs at its launch and then every `interval_ms` until its
//! job's first process exits, and a reading taken after the exit would show the memory freed.
//! So the simulated sampler reads at `launch + k · interval` for every such time strictly
//! before the job's end: the job's own memory on its ramp then (`mem_mib · elapsed / ramp`,
//! as [`SimModel::mem_now`]), and each GPU's memory in use, the other jobs on it at that time
//! included. A job that runs out of memory before its first reading after the ramp has begun
//! shows what it held then, no more: a simulated out-of-memory is corroborated by these
//! readings only when a 500 ms sampler would have seen it.

use super::model::{SimJob, SimModel};
use crate::exec::GpuReadings;
use crate::exec::gpu_watch::{GpuReading, LAST_READINGS_MAX, Reading};

impl SimModel {
    /// The supervisor's readings of `job`, which ended at `end_ms`, every `interval_ms`.
    pub fn supervisor_readings(&self, job: &SimJob, end_ms: u64, interval_ms: u64) -> GpuReadings {
        let interval_ms = interval_ms.max(1);
        let ran_ms = end_ms.saturating_sub(job.launched_ms);
        // Readings at launch + k·interval < end: k = 0 ..= (ran − 1) / interval; none when the
        // job ended at its launch.
        let count = if ran_ms == 0 { 0 } else { (ran_ms - 1) / interval_ms + 1 };
        let first_kept = count.saturating_sub(LAST_READINGS_MAX as u64);
        let last: Vec<Reading> = (first_kept..count)
            .map(|k| {
                let time_ms = job.launched_ms + k * interval_ms;
                Reading {
                    time_ms,
                    gpus: job.gpus.iter().map(|&g| self.gpu_reading(job, g, time_ms)).collect(),
                }
            })
            .collect();
        // The ramp only grows: the latest reading holds the peak.
        let peak_mib = last.last().map(|r| self.mem_at(job, r.time_ms)).filter(|&mib| mib > 0);
        GpuReadings { interval_ms, count, peak_mib, last, error: None }
    }

    /// GPU `g` at `time_ms`, as a reading of `job`'s supervisor.
    fn gpu_reading(&self, job: &SimJob, g: usize, time_ms: u64) -> GpuReading {
        let gpu = &self.gpus[g];
        let used: u64 = self
            .jobs
            .values()
            .filter(|other| other.gpus.contains(&g) && ran_at(other, time_ms))
            .map(|other| self.mem_at(other, time_ms))
            .sum();
        GpuReading {
            uuid: gpu.uuid.clone(),
            used_mib: used.min(gpu.memory_total_mib),
            total_mib: gpu.memory_total_mib,
            attempt_mib: self.mem_at(job, time_ms),
        }
    }

    /// What `job` held per GPU at `time_ms` (on its ramp from its launch), whether or not it
    /// has ended since.
    fn mem_at(&self, job: &SimJob, time_ms: u64) -> u64 {
        let ramp = (self.params.job.ramp_s * 1000.0).round() as u64;
        let elapsed = time_ms.saturating_sub(job.launched_ms);
        if ramp == 0 || elapsed >= ramp {
            return job.mem_mib;
        }
        (job.mem_mib as f64 * elapsed as f64 / ramp as f64).round() as u64
    }
}

/// Whether `job` was running at `time_ms`.
fn ran_at(job: &SimJob, time_ms: u64) -> bool {
    job.launched_ms <= time_ms && job.end.as_ref().is_none_or(|end| end.at_ms > time_ms)
}

#[cfg(test)]
mod tests {
    //! Goal: the simulated sampler reads as the real one: at launch and every interval before
    //! the end (none at or after it), the job on its ramp, the GPU with its other jobs, the
    //! last 16 kept.
    use crate::sim::{GpuSet, ModelParams, Profile};

    fn profile(mem_actual_mib: u64) -> Profile {
        Profile {
            workload: "w".into(),
            model: "w".into(),
            batch_size: 8,
            gpus: 1,
            exclusive_ms: 600_000,
            class: "heavy".into(),
            mem_actual_mib,
            est_horus_mib: 1,
            est_faketensor_mib: 1,
            est_gpumemnet_mib: 1,
            smact: 0.5,
            checkpoint_every_ms: None,
            restart_cost_ms: None,
        }
    }

    #[test]
    fn reads_every_interval_before_the_end_the_job_on_its_ramp() {
        let gpus = GpuSet::parse("1xA100-40GB").expect("gpus");
        let mut params = ModelParams::default();
        params.job.ramp_s = 10.0;
        let mut model = super::SimModel::new(params, &gpus, false, false, 1_000_000);
        model.truth.insert("a".into(), profile(10_000));
        model.truth.insert("b".into(), profile(20_000));
        let uuid = vec![model.gpus[0].uuid.clone()];
        model.launch("b", 1, &uuid, None, None).expect("launch b");
        model.advance(1_020_000);
        model.launch("a", 1, &uuid, None, None).expect("launch a");
        let job = model.jobs[&("a".to_string(), 1)].clone();
        let readings = model.supervisor_readings(&job, 1_022_000, 500);
        assert_eq!(readings.count, 4, "at 0, 500, 1000 and 1500 ms; not at the end, 2000 ms");
        let last = readings.last.last().expect("a reading");
        assert_eq!(last.time_ms, 1_021_500);
        assert_eq!(last.gpus[0].attempt_mib, 1_500, "15 % of the way up a 10 s ramp");
        assert_eq!(last.gpus[0].used_mib, 21_500, "b at its peak beside it");
        assert_eq!(readings.peak_mib, Some(1_500));
        let long = model.supervisor_readings(&job, 1_040_000, 500);
        assert_eq!((long.count, long.last.len()), (40, 16));
        assert_eq!(long.peak_mib, Some(10_000));
        assert_eq!(model.supervisor_readings(&job, 1_020_000, 500).count, 0);
    }
}
