//! The three edges the simulator swaps into the real tick: a virtual [`Clock`], [`SimGpus`]
//! (a [`GpuProbe`]) and [`SimRunner`] (an [`AttemptRunner`]). The probe and the runner share
//! one [`SimModel`], so what the tick launches is what the GPUs show on the next sample.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use super::faults::Rng;
use super::model::SimModel;
use crate::clock::Clock;
use crate::gpu::{GpuHealth, GpuProbe, GpuProcess, GpuSample, MigInfo, ProbeError, SinceMarks, SmSource};
use crate::journal::ProcessRef;
use crate::tick::{AttemptExit, AttemptLaunch, AttemptRunner, AttemptStatus, RunnerError};

/// Time as the simulator sets it.
#[derive(Debug, Default)]
pub struct VirtualClock {
    now_ms: Cell<u64>,
}

impl VirtualClock {
    /// A clock reading `now_ms`, Unix ms.
    pub fn new(now_ms: u64) -> VirtualClock {
        VirtualClock { now_ms: Cell::new(now_ms) }
    }

    /// Moves the clock; it never goes back.
    pub fn set(&self, now_ms: u64) {
        assert!(now_ms >= self.now_ms.get(), "virtual clock goes back");
        self.now_ms.set(now_ms);
    }
}

impl Clock for VirtualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.get()
    }
}

/// The GPUs of the model, sampled like NVML would be: memory and SM activity per GPU, and per
/// process its memory and SM utilisation ([`SimModel::process_share`] times a seeded noise
/// factor in 1 ± `sm-noise`), which is all a real tick can learn a job's SM activity from.
pub struct SimGpus {
    /// The machine the probe samples, shared with the [`SimRunner`].
    pub model: Rc<RefCell<SimModel>>,
    /// Draws the per-process noise; kept across ticks so that the run is one seeded stream.
    pub noise: Rng,
}

impl GpuProbe for SimGpus {
    fn sample(&mut self, _since: &SinceMarks) -> Result<Vec<GpuSample>, ProbeError> {
        let model = self.model.borrow();
        let loads = model.loads();
        let noise = model.params.job.sm_noise;
        let mut samples = Vec::with_capacity(model.gpus.len());
        // Once, not per GPU: `jobs` keeps every job the run ever launched.
        let running: Vec<_> = model.jobs.values().filter(|j| j.end.is_none()).collect();
        let dying: Vec<_> = model.dying().collect();
        for (g, gpu) in model.gpus.iter().enumerate() {
            let mut processes: Vec<GpuProcess> = running
                .iter()
                .filter(|j| j.gpus.contains(&g))
                .map(|j| {
                    let factor = 1.0 + noise * (2.0 * self.noise.unit() - 1.0);
                    let sm_util = (model.process_share(j, g, &loads) * factor).clamp(0.0, 1.0);
                    GpuProcess { pid: j.pid, used_mib: Some(model.mem_now(j)), sm_util: Some(sm_util as f32) }
                })
                .collect();
            // A job that just ran out of memory still holds it (see `JobEnd::held_mib`); it
            // computes nothing, and draws no noise, so the seeded stream stays as it was.
            processes.extend(dying.iter().filter(|j| j.gpus.contains(&g)).map(|j| GpuProcess {
                pid: j.pid,
                used_mib: j.end.as_ref().map(|e| e.held_mib),
                sm_util: Some(0.0),
            }));
            let used: u64 =
                processes.iter().filter_map(|p| p.used_mib).sum::<u64>().min(gpu.memory_total_mib);
            let (s, _) = loads[g];
            samples.push(GpuSample {
                uuid: gpu.uuid.clone(),
                index: gpu.index,
                name: gpu.name.clone(),
                memory_total_mib: gpu.memory_total_mib,
                memory_used_mib: used,
                memory_free_mib: gpu.memory_total_mib - used,
                memory_reserved_mib: None,
                health: GpuHealth::Healthy,
                util_gpu_mean: Some(if s > 0.0 { 1.0 } else { 0.0 }),
                util_last_timestamp_us: Some(model.now_ms * 1000),
                sm_active: Some(s.min(1.0) as f32),
                sm_active_source: SmSource::Simulated,
                sm_occupancy: None,
                dram_active: None,
                power_mw: Some((model.params.power_w(s) * 1000.0).round() as u32),
                energy_mj: Some(gpu.energy_mj.round() as u64),
                processes,
                mig: MigInfo::not_supported(),
                unavailable: Vec::new(),
            });
        }
        Ok(samples)
    }

    fn describe(&self) -> String {
        let model = self.model.borrow();
        format!("simulated ({} GPUs)", model.gpus.len())
    }
}

/// Jobs of the model, started and inspected like detached supervisors.
pub struct SimRunner {
    /// The machine the runner launches onto, shared with the [`SimGpus`] probe.
    pub model: Rc<RefCell<SimModel>>,
}

impl AttemptRunner for SimRunner {
    fn launch(&mut self, launch: &AttemptLaunch) -> Result<ProcessRef, RunnerError> {
        let plan = &launch.plan;
        let mut model = self.model.borrow_mut();
        let pid = model.launch(
            &plan.task_id,
            plan.attempt,
            &plan.gpu_uuids,
            plan.mps_mem_limit_mib,
            plan.time_limit_ms,
        )?;
        let key = (plan.task_id.clone(), plan.attempt);
        if let Some(job) = model.jobs.get_mut(&key) {
            job.watch_ms = plan.gpu_watch.as_ref().map(|watch| watch.interval_ms);
        }
        Ok(ProcessRef { pid, start_time_ticks: model.now_ms / 10, boot_id: model.boot_id() })
    }

    fn status(&mut self, task: &str, attempt: u32, _recorded: Option<&ProcessRef>) -> AttemptStatus {
        let mut model = self.model.borrow_mut();
        let now = model.now_ms;
        let (boot_id, boot) = (model.boot_id(), model.boot);
        let Some(job) = model.jobs.get_mut(&(task.to_string(), attempt)) else {
            return AttemptStatus::Unclaimed;
        };
        let Some(end) = job.end.as_mut() else {
            return AttemptStatus::Running(ProcessRef {
                pid: job.pid,
                start_time_ticks: job.launched_ms / 10,
                boot_id,
            });
        };
        assert!(end.at_ms <= now, "a job cannot end in the future");
        end.reported = true;
        if end.record_lost {
            let reason = if job.boot != boot {
                "the machine rebooted (boot id changed) while it ran".to_string()
            } else {
                format!("supervisor pid {} is gone and left no exit record", job.pid)
            };
            return AttemptStatus::Vanished { reason };
        }
        let exit = AttemptExit {
            outcome: end.outcome.clone(),
            oom: end.oom.clone(),
            ended_ms: end.at_ms,
            output_truncated: None,
            start: None,
            host_memory: None,
            gpu_readings: None,
        };
        let (job, at_ms) = (job.clone(), exit.ended_ms);
        let gpu_readings =
            job.watch_ms.map(|interval_ms| model.supervisor_readings(&job, at_ms, interval_ms));
        AttemptStatus::Exited(AttemptExit { gpu_readings, ..exit })
    }

    fn stop(&mut self, task: &str, attempt: u32) -> Result<bool, RunnerError> {
        let mut model = self.model.borrow_mut();
        let now = model.now_ms;
        match model.jobs.get_mut(&(task.to_string(), attempt)) {
            Some(job) if job.end.is_none() => {
                job.end = Some(super::model::JobEnd {
                    at_ms: now,
                    outcome: crate::exec::ExitOutcome::Cancelled,
                    oom: None,
                    record_lost: false,
                    reported: false,
                    held_mib: 0,
                });
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn notice_preemption(&mut self, task: &str, attempt: u32) -> Result<bool, RunnerError> {
        Ok(self.model.borrow_mut().warn(task, attempt))
    }

    fn checkpoint_ms(&mut self, task: &str, attempt: u32) -> Option<u64> {
        self.model.borrow().jobs.get(&(task.to_string(), attempt))?.checkpointing.at_ms
    }

    fn abandon(&mut self, task: &str, attempt: u32) -> Result<bool, RunnerError> {
        let mut model = self.model.borrow_mut();
        let key = (task.to_string(), attempt);
        if model.jobs.contains_key(&key) {
            return Ok(false);
        }
        model.abandoned.insert(key);
        Ok(true)
    }

    fn session_of(&self, pid: u32) -> Option<u32> {
        // Each simulated job is its own supervisor's session.
        self.model.borrow().has_pid(pid).then_some(pid)
    }
}
