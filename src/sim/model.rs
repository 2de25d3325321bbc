//! The simulated machine: GPUs and the jobs running on them, advanced in virtual time.
//!
//! This is the only place that knows the truth the scheduler cannot see: each job's actual
//! peak memory, standalone SM activity and exclusive run time. [`SimModel::advance`] moves
//! time forward event by event (start-up ends, memory ramps end, jobs finish), integrating
//! progress and energy exactly between events, so the result does not depend on the tick
//! length. The rules are DESIGN.md's:
//!
//! - a job makes no progress and adds no SM activity during `startup-s`; its memory ramps
//!   linearly to its actual peak over `ramp-s`;
//! - on a GPU with more than one job, a job's slowdown is (1+ε)·max(1, S/η), S the sum of the
//!   standalone SM activity of the jobs past start-up; a multi-GPU job goes at its slowest GPU;
//! - when a job reaches its peak and the GPU's memory exceeds total − fragmentation, the
//!   newest job on that GPU dies with an out-of-memory exit (the paper's observation: the
//!   first job survives, the newcomer dies); under MPS with a pinned memory limit, a job whose
//!   peak exceeds its limit dies alone;
//! - power = idle + (busy − idle)·min(1, S)^γ, integrated into a millijoule counter;
//! - with time limits enforced, a job still running at launch + its declared limit is stopped
//!   there, as the real supervisor stops it.
//!
//! What NVML would report per process ([`SimModel::process_share`]) is the job's standalone SM
//! activity scaled by min(1, 1/S): the shares of a GPU's jobs add up to its SM activity.

use std::collections::{BTreeMap, BTreeSet};

use super::params::{Interference, ModelParams};
use super::resume::{CheckpointPlan, CheckpointTotals, Checkpointing};
use super::workload::{GpuSet, Profile};
use crate::exec::ExitOutcome;
use crate::tick::RunnerError;

/// First pid handed to a simulated supervisor.
const PID_FIRST: u32 = 10_000;

/// A job, i.e. one attempt, on the simulated machine.
#[derive(Debug, Clone)]
pub struct SimJob {
    /// The pid the simulated supervisor reports for this attempt (from 10 000 up).
    pub pid: u32,
    /// Launch order, to find the newest job on a GPU.
    pub seq: u64,
    /// Indices into [`SimModel::gpus`] of the GPUs the attempt was placed on.
    pub gpus: Vec<usize>,
    /// Virtual time the attempt was launched at, Unix ms.
    pub launched_ms: u64,
    /// The workload's exclusive run time from its profile: the progress it needs to finish, ms.
    pub work_ms: f64,
    /// Progress made so far, in exclusive-run ms (grows slower than time when sharing).
    pub done_ms: f64,
    /// The workload's actual peak memory per GPU from its profile (unknown to the scheduler), MiB.
    pub mem_mib: u64,
    /// The workload's standalone SM activity from its profile, 0 to 1.
    pub smact: f64,
    /// The MPS pinned memory limit the tick gave it, MiB; `None` without one or when caps
    /// are not enforced.
    pub cap_mib: Option<u64>,
    /// When the job is stopped at its time limit (only with time limits enforced).
    pub deadline_ms: Option<u64>,
    /// Whether its memory ramp has ended and the out-of-memory check has been done.
    pub peak_checked: bool,
    /// The machine's boot counter when it was launched ([`SimModel::boot`]).
    pub boot: u32,
    /// How and when it ended; `None` while running.
    pub end: Option<JobEnd>,
    /// Where it resumed from, how it checkpoints and its latest checkpoint
    /// ([`resume`](super::resume)); `work_ms` is what was left plus the restart.
    pub checkpointing: Checkpointing,
    /// How often its supervisor reads its GPUs' memory, ms (its plan's `gpu_watch`); `None`:
    /// never ([`readings`](super::readings)).
    pub watch_ms: Option<u64>,
}

/// How and when a job ended.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnd {
    /// Virtual time it ended, Unix ms.
    pub at_ms: u64,
    /// The exit the simulated supervisor records.
    pub outcome: ExitOutcome,
    /// The out-of-memory evidence line its log would show, when the model killed it for memory.
    pub oom: Option<String>,
    /// Fault injection: the exit record never reached the disk.
    pub record_lost: bool,
    /// The tick has seen this end.
    pub reported: bool,
    /// GPU memory the job held when it ran out of memory, MiB (0 for any other end). The
    /// simulated probe reads it, as the job's process, until the tick has seen the end: the
    /// model assumes the tick reads the GPU at the crash, which is what a real tick needs to
    /// corroborate an out-of-memory message (`sched::judge_oom`). With the default model (a
    /// ramp that is a whole number of ticks) every crash falls on a tick anyway.
    pub held_mib: u64,
}

/// One simulated GPU.
#[derive(Debug, Clone)]
pub struct SimGpu {
    /// The UUID the simulated NVML reports (`GPU-sim-0000`, …).
    pub uuid: String,
    /// Its NVML index, 0 up.
    pub index: u32,
    /// The GPU set's model name, with " (simulated)" appended.
    pub name: String,
    /// Its total memory, from the GPU set, MiB.
    pub memory_total_mib: u64,
    /// Energy it has used since the run began, integrated from the power model, mJ.
    pub energy_mj: f64,
}

/// The whole machine.
#[derive(Debug)]
pub struct SimModel {
    /// The model parameters the run uses.
    pub params: ModelParams,
    interference: Interference,
    enforce_caps: bool,
    /// Stop jobs at their declared time limit, as the real supervisor does.
    pub enforce_time_limits: bool,
    /// The machine's GPUs, by index.
    pub gpus: Vec<SimGpu>,
    /// The virtual clock, Unix ms; only [`SimModel::advance`] moves it forward.
    pub now_ms: u64,
    /// By (task id, attempt).
    pub jobs: BTreeMap<(String, u32), SimJob>,
    /// The truth about each task, by task id.
    pub truth: BTreeMap<String, Profile>,
    /// How each requeueable task checkpoints, by task id; a task not named never does.
    pub checkpoint_plans: BTreeMap<String, CheckpointPlan>,
    /// Boot counter, bumped by [`SimModel::reboot`]; part of the reported boot id.
    pub boot: u32,
    /// Attempts whose claim the tick took (abandoned, never to start).
    pub abandoned: BTreeSet<(String, u32)>,
    /// Launch calls for an attempt that had already been started, refused as a real
    /// supervisor's exclusive claim would refuse them.
    pub refused_launches: u32,
    /// Broken invariants seen by the model (e.g. two attempts of a task running at once).
    pub violations: Vec<String>,
    /// Time of the latest job start-up end, peak or end: the state the tick samples changed.
    pub last_change_ms: u64,
    next_pid: u32,
    next_seq: u64,
}

impl SimModel {
    /// An idle machine at `now_ms`.
    pub fn new(params: ModelParams, gpus: &GpuSet, mps: bool, enforce_caps: bool, now_ms: u64) -> Self {
        let interference = if mps { params.mps.clone() } else { params.streams.clone() };
        let gpus = (0..gpus.count)
            .map(|index| SimGpu {
                uuid: format!("GPU-sim-{index:04}"),
                index,
                name: format!("{} (simulated)", gpus.name),
                memory_total_mib: gpus.memory_total_mib,
                energy_mj: 0.0,
            })
            .collect();
        SimModel {
            params,
            interference,
            enforce_caps,
            enforce_time_limits: false,
            gpus,
            now_ms,
            jobs: BTreeMap::new(),
            truth: BTreeMap::new(),
            checkpoint_plans: BTreeMap::new(),
            boot: 0,
            abandoned: BTreeSet::new(),
            refused_launches: 0,
            violations: Vec::new(),
            last_change_ms: now_ms,
            next_pid: PID_FIRST,
            next_seq: 0,
        }
    }

    /// The boot id the simulated machine reports now.
    pub fn boot_id(&self) -> String {
        format!("sim-boot-{}", self.boot)
    }

    fn startup_ms(&self) -> u64 {
        (self.params.job.startup_s * 1000.0).round() as u64
    }

    fn ramp_ms(&self) -> u64 {
        (self.params.job.ramp_s * 1000.0).round() as u64
    }

    /// Starts an attempt; `Err` when it cannot start (unknown task or GPU, already claimed).
    pub fn launch(
        &mut self,
        task: &str,
        attempt: u32,
        uuids: &[String],
        cap: Option<u64>,
        time_limit_ms: Option<u64>,
    ) -> Result<u32, RunnerError> {
        let key = (task.to_string(), attempt);
        if self.jobs.contains_key(&key) || self.abandoned.contains(&key) {
            self.refused_launches += 1;
            return Err(RunnerError::Claimed(format!("attempt {attempt} of {task} is already claimed")));
        }
        if self.jobs.iter().any(|((t, _), j)| t == task && j.end.is_none()) {
            self.violations.push(format!("task {task}: attempt {attempt} launched while another runs"));
        }
        let profile = self
            .truth
            .get(task)
            .ok_or_else(|| RunnerError::Missing(format!("task {task} is not in the trace")))?;
        let gpus = uuids
            .iter()
            .map(|u| {
                self.gpus
                    .iter()
                    .position(|g| &g.uuid == u)
                    .ok_or_else(|| RunnerError::Missing(format!("no GPU {u}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let plan = self.checkpoint_plans.get(task).copied();
        let previous = self.jobs.range((task.to_string(), 0)..key.clone()).next_back();
        let checkpointing = Checkpointing::start(previous.map(|(_, job)| &job.checkpointing), plan);
        let resume = checkpointing.resume;
        let job = SimJob {
            pid: self.next_pid,
            seq: self.next_seq,
            gpus,
            launched_ms: self.now_ms,
            work_ms: profile.exclusive_ms as f64 - resume.from_ms + resume.restart_ms,
            done_ms: 0.0,
            checkpointing,
            mem_mib: profile.mem_actual_mib,
            smact: profile.smact,
            cap_mib: cap.filter(|_| self.enforce_caps),
            deadline_ms: time_limit_ms.filter(|_| self.enforce_time_limits).map(|ms| self.now_ms + ms),
            peak_checked: false,
            boot: self.boot,
            end: None,
            watch_ms: None,
        };
        self.next_pid += 1;
        self.next_seq += 1;
        let pid = job.pid;
        self.jobs.insert(key, job);
        self.last_change_ms = self.now_ms;
        Ok(pid)
    }

    /// Whether `pid` is a job's: pids are handed out in sequence and jobs are never
    /// forgotten, so this needs no scan of every job the run has launched.
    pub fn has_pid(&self, pid: u32) -> bool {
        (PID_FIRST..self.next_pid).contains(&pid)
    }

    /// Summed standalone SM activity and job count per GPU, over jobs past start-up.
    pub fn loads(&self) -> Vec<(f64, u32)> {
        let mut loads = vec![(0.0, 0); self.gpus.len()];
        for job in self.jobs.values().filter(|j| j.end.is_none()) {
            let active = self.now_ms >= job.launched_ms + self.startup_ms();
            for &g in &job.gpus {
                loads[g].1 += 1;
                if active {
                    loads[g].0 += job.smact;
                }
            }
        }
        loads
    }

    /// The SM utilisation NVML would report for `job` on GPU `g`, before noise: its
    /// standalone activity scaled by the GPU's saturation, 0 during start-up.
    pub fn process_share(&self, job: &SimJob, g: usize, loads: &[(f64, u32)]) -> f64 {
        if job.end.is_some() || self.now_ms < job.launched_ms + self.startup_ms() {
            return 0.0;
        }
        let (s, _) = loads[g];
        if s > 1.0 { job.smact / s } else { job.smact }
    }

    fn slowdown(&self, job: &SimJob, loads: &[(f64, u32)]) -> f64 {
        let i = &self.interference;
        job.gpus
            .iter()
            .map(|&g| match loads[g] {
                (_, n) if n <= 1 => 1.0,
                (s, _) => (1.0 + i.epsilon) * (s / i.eta).max(1.0),
            })
            .fold(1.0, f64::max)
    }

    /// Memory a job holds at `now`, per GPU, MiB.
    pub fn mem_now(&self, job: &SimJob) -> u64 {
        if job.end.is_some() {
            return 0;
        }
        let ramp = self.ramp_ms();
        let elapsed = self.now_ms.saturating_sub(job.launched_ms);
        if ramp == 0 || elapsed >= ramp {
            return job.mem_mib;
        }
        (job.mem_mib as f64 * elapsed as f64 / ramp as f64).round() as u64
    }

    /// Moves time to `to_ms`, handling every start-up end, peak and finish on the way.
    pub fn advance(&mut self, to_ms: u64) {
        assert!(to_ms >= self.now_ms, "virtual time goes forward: {} -> {to_ms}", self.now_ms);
        while self.now_ms < to_ms {
            let loads = self.loads();
            let next = self.next_event(&loads).min(to_ms);
            let dt = (next - self.now_ms) as f64;
            for (gpu, (s, _)) in self.gpus.iter_mut().zip(&loads) {
                gpu.energy_mj += self.params.power_w(*s) * dt;
            }
            let startup = self.startup_ms();
            let rates: Vec<f64> = self.jobs.values().map(|j| 1.0 / self.slowdown(j, &loads)).collect();
            for (job, rate) in self.jobs.values_mut().zip(rates) {
                if job.end.is_none() && self.now_ms >= job.launched_ms + startup {
                    job.done_ms += dt * rate;
                }
            }
            self.now_ms = next;
            self.handle_events();
        }
    }

    fn next_event(&self, loads: &[(f64, u32)]) -> u64 {
        let (startup, ramp) = (self.startup_ms(), self.ramp_ms());
        let mut next = u64::MAX;
        for job in self.jobs.values().filter(|j| j.end.is_none()) {
            let started = job.launched_ms + startup;
            if started > self.now_ms {
                next = next.min(started);
            } else {
                let slowdown = self.slowdown(job, loads);
                let remaining = (job.work_ms - job.done_ms).max(0.0);
                let at = self.now_ms + (remaining * slowdown).ceil().max(1.0) as u64;
                next = next.min(at);
                if let Some(done) = job.checkpointing.next_done_ms(job.work_ms) {
                    let to_go = (done - job.done_ms).max(0.0);
                    next = next.min(self.now_ms + (to_go * slowdown).ceil().max(1.0) as u64);
                }
            }
            if !job.peak_checked {
                next = next.min((job.launched_ms + ramp).max(self.now_ms + 1));
            }
            if let Some(deadline) = job.deadline_ms {
                next = next.min(deadline.max(self.now_ms + 1));
            }
        }
        next
    }

    fn handle_events(&mut self) {
        let (now, startup, ramp) = (self.now_ms, self.startup_ms(), self.ramp_ms());
        let mut peaked = Vec::new();
        for (key, job) in self.jobs.iter_mut().filter(|(_, j)| j.end.is_none()) {
            if now == job.launched_ms + startup {
                self.last_change_ms = now;
            }
            if now >= job.launched_ms + startup && job.work_ms - job.done_ms <= 1.0 {
                job.end = Some(JobEnd::new(now, ExitOutcome::Exited { code: 0 }, None));
                self.last_change_ms = now;
            } else if job.deadline_ms.is_some_and(|deadline| now >= deadline) {
                job.end = Some(JobEnd::new(now, ExitOutcome::TimeLimit, None));
                self.last_change_ms = now;
            } else if !job.peak_checked && now >= job.launched_ms + ramp {
                job.peak_checked = true;
                peaked.push(key.clone());
            }
            // A checkpoint changes nothing the GPUs show, only what the tick reads of the
            // run folder: it is not a change of the machine (`last_change_ms`).
            if job.end.is_none() && now >= job.launched_ms + startup {
                job.checkpointing.reach(job.done_ms, job.work_ms, now);
            }
        }
        for key in peaked {
            self.last_change_ms = now;
            self.check_memory(&key);
        }
    }

    /// A job reached its peak: its own MPS limit, then every GPU it is on.
    fn check_memory(&mut self, key: &(String, u32)) {
        let Some(job) = self.jobs.get(key) else { return };
        if let Some(cap) = job.cap_mib.filter(|cap| job.mem_mib > *cap) {
            let evidence = format!(
                "CUDA out of memory (simulated): needs {} MiB, MPS pinned memory limit {cap} MiB",
                job.mem_mib
            );
            self.kill_oom(key.clone(), evidence);
            return;
        }
        for g in job.gpus.clone() {
            self.relieve_gpu(g);
        }
    }

    /// Kills the newest job on GPU `g` while its memory is over the usable limit.
    fn relieve_gpu(&mut self, g: usize) {
        let usable = self.gpus[g].memory_total_mib.saturating_sub(self.params.gpu.fragmentation_mib);
        loop {
            let on_gpu = || self.jobs.iter().filter(|(_, j)| j.end.is_none() && j.gpus.contains(&g));
            let used: u64 = on_gpu().map(|(_, j)| self.mem_now(j)).sum();
            if used <= usable {
                return;
            }
            let Some((key, _)) = on_gpu().max_by_key(|(_, j)| j.seq) else { return };
            let evidence = format!(
                "torch.OutOfMemoryError: CUDA out of memory (simulated): GPU{g} holds {used} MiB of {} MiB usable",
                usable
            );
            self.kill_oom(key.clone(), evidence);
        }
    }

    fn kill_oom(&mut self, key: (String, u32), evidence: String) {
        let now = self.now_ms;
        let held_mib = self.jobs.get(&key).map_or(0, |job| self.mem_now(job));
        if let Some(job) = self.jobs.get_mut(&key) {
            let mut end = JobEnd::new(now, ExitOutcome::Exited { code: 1 }, Some(evidence));
            end.held_mib = held_mib;
            job.end = Some(end);
        }
    }

    /// Jobs that ran out of memory and whose end the tick has not seen yet: their memory is
    /// still read on their GPUs ([`JobEnd::held_mib`]).
    pub fn dying(&self) -> impl Iterator<Item = &SimJob> {
        self.jobs
            .values()
            .filter(|j| j.end.as_ref().is_some_and(|e| e.held_mib > 0 && !e.reported && !e.record_lost))
    }

    /// Reboots the machine: every running job dies without an exit record; new boot id.
    pub fn reboot(&mut self) {
        let now = self.now_ms;
        for job in self.jobs.values_mut().filter(|j| j.end.is_none()) {
            let mut end = JobEnd::new(now, ExitOutcome::Signaled { signal: 9 }, None);
            end.record_lost = true;
            job.end = Some(end);
        }
        self.boot += 1;
        self.last_change_ms = now;
    }

    /// Loses the exit record of one job that ended but was not yet seen by the tick;
    /// `pick` chooses among the candidates. Returns the attempt whose record was lost.
    pub fn lose_exit_record(&mut self, pick: u64) -> Option<(String, u32)> {
        let candidates: Vec<(String, u32)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.end.as_ref().is_some_and(|e| !e.reported && !e.record_lost))
            .map(|(k, _)| k.clone())
            .collect();
        let key = candidates.get((pick % candidates.len().max(1) as u64) as usize)?.clone();
        if let Some(end) = self.jobs.get_mut(&key).and_then(|j| j.end.as_mut()) {
            end.record_lost = true;
        }
        Some(key)
    }

    /// The tick warned a preempted attempt: with `checkpoint-on-warning` a requeueable job
    /// saves a checkpoint now (and is stopped at the end of the grace, as any other); true
    /// when it did.
    pub fn warn(&mut self, task: &str, attempt: u32) -> bool {
        if !self.params.job.checkpoint_on_warning {
            return false;
        }
        let now = self.now_ms;
        match self.jobs.get_mut(&(task.to_string(), attempt)) {
            Some(job) if job.end.is_none() => job.checkpointing.save_now(job.done_ms, now),
            _ => false,
        }
    }

    /// Checkpoints, resumes, restart time and lost work over every job the run launched.
    pub fn checkpoint_totals(&self) -> CheckpointTotals {
        let mut totals = CheckpointTotals::default();
        for job in self.jobs.values() {
            let finished = job.end.as_ref().is_some_and(JobEnd::finished);
            totals.add(&job.checkpointing, job.done_ms, job.gpus.len(), finished);
        }
        totals
    }

    /// Whether any job is still running.
    pub fn busy(&self) -> bool {
        self.jobs.values().any(|j| j.end.is_none())
    }

    /// When the next job start-up end, peak or finish happens if nothing else changes.
    pub fn next_change_ms(&self) -> Option<u64> {
        let next = self.next_event(&self.loads());
        (next != u64::MAX).then_some(next)
    }
}

impl JobEnd {
    fn new(at_ms: u64, outcome: ExitOutcome, oom: Option<String>) -> JobEnd {
        JobEnd { at_ms, outcome, oom, record_lost: false, reported: false, held_mib: 0 }
    }

    /// Whether the job finished its work (exit 0).
    pub fn finished(&self) -> bool {
        self.outcome == ExitOutcome::Exited { code: 0 }
    }
}

#[cfg(test)]
mod tests {
    //! Goal: checkpoints on the machine: a stopped attempt of a requeueable task resumes from
    //! its last checkpoint; one of a task without a plan starts from zero.
    use super::*;
    use crate::sim::resume::Resume;

    /// A 1-GPU workload of one exclusive hour, 1000 MiB, SM 0.5, no checkpoint override.
    fn hour_long_profile() -> crate::sim::Profile {
        crate::sim::Profile {
            workload: "w".into(),
            model: "w".into(),
            batch_size: 1,
            gpus: 1,
            exclusive_ms: 3_600_000,
            class: "heavy".into(),
            mem_actual_mib: 1000,
            est_horus_mib: 1000,
            est_faketensor_mib: 1000,
            est_gpumemnet_mib: 1000,
            smact: 0.5,
            checkpoint_every_ms: None,
            restart_cost_ms: None,
        }
    }

    /// Goal: on the machine, a requeueable task stopped after 40 minutes of progress with a
    /// 15-minute period resumes at 30 minutes, pays its 2-minute restart, and ends 2 + 30
    /// minutes after its second start-up; a task without a plan starts again from zero.
    #[test]
    fn a_stopped_attempt_resumes_from_its_last_checkpoint_on_the_machine() {
        use crate::sim::{GpuSet, ModelParams};
        let gpus = GpuSet::parse("2xA100-40GB").expect("gpus");
        let mut params = ModelParams::default();
        (params.job.startup_s, params.job.ramp_s) = (0.0, 0.0);
        let mut model = SimModel::new(params, &gpus, false, false, 0);
        let profile = hour_long_profile();
        for task in ["a", "b"] {
            model.truth.insert(task.into(), profile.clone());
        }
        model
            .checkpoint_plans
            .insert("a".into(), CheckpointPlan { every_ms: 900_000.0, restart_ms: 120_000.0 });
        let uuid = |g: usize| vec![model.gpus[g].uuid.clone()];
        let (gpu0, gpu1) = (uuid(0), uuid(1));
        model.launch("a", 1, &gpu0, None, None).expect("a");
        model.launch("b", 1, &gpu1, None, None).expect("b");
        model.advance(2_400_000);
        let first = &model.jobs[&("a".to_string(), 1)];
        assert_eq!((first.checkpointing.count, first.checkpointing.at_ms), (2, Some(1_800_000)));
        assert_eq!(model.jobs[&("b".to_string(), 1)].checkpointing.count, 0, "no plan, no checkpoint");
        for task in ["a", "b"] {
            let job = model.jobs.get_mut(&(task.to_string(), 1)).expect("job");
            job.end = Some(JobEnd::new(2_400_000, ExitOutcome::Cancelled, None));
        }
        model.launch("a", 2, &gpu0, None, None).expect("a again");
        model.launch("b", 2, &gpu1, None, None).expect("b again");
        let (a, b) = (&model.jobs[&("a".to_string(), 2)], &model.jobs[&("b".to_string(), 2)]);
        assert_eq!(a.checkpointing.resume, Resume { from_ms: 1_800_000.0, restart_ms: 120_000.0 });
        assert_eq!((a.work_ms, b.work_ms), (1_920_000.0, 3_600_000.0));
        model.advance(2_400_000 + 1_920_000);
        let a = &model.jobs[&("a".to_string(), 2)];
        assert!(a.end.as_ref().is_some_and(JobEnd::finished), "{:?}", a.end);
        let totals = model.checkpoint_totals();
        assert_eq!((totals.checkpoints, totals.resumes, totals.restart_gpu_ms), (3, 1, 120_000.0));
        // a lost 10 minutes, b its 40 and its second attempt's 32 so far (still running).
        assert_eq!(totals.lost_gpu_ms, 600_000.0 + 2_400_000.0 + 1_920_000.0);
    }

    /// Goal: with `checkpoint-on-warning` a warned requeueable attempt saves at the warning,
    /// so a stop right then loses nothing; without it, it loses its progress since its last
    /// periodic checkpoint (10 of 40 minutes), as before.
    #[test]
    fn a_warned_attempt_checkpoints_with_checkpoint_on_warning_only() {
        use crate::sim::{GpuSet, ModelParams};
        let lost = |on_warning: bool| {
            let gpus = GpuSet::parse("1xA100-40GB").expect("gpus");
            let mut params = ModelParams::default();
            (params.job.startup_s, params.job.ramp_s) = (0.0, 0.0);
            params.job.checkpoint_on_warning = on_warning;
            let mut model = SimModel::new(params, &gpus, false, false, 0);
            let profile = hour_long_profile();
            model.truth.insert("a".into(), profile);
            model
                .checkpoint_plans
                .insert("a".into(), CheckpointPlan { every_ms: 900_000.0, restart_ms: 120_000.0 });
            let gpu0 = vec![model.gpus[0].uuid.clone()];
            model.launch("a", 1, &gpu0, None, None).expect("a");
            model.advance(2_400_000);
            assert_eq!(model.warn("a", 1), on_warning);
            let job = model.jobs.get_mut(&("a".to_string(), 1)).expect("job");
            job.end = Some(JobEnd::new(2_400_000, ExitOutcome::Cancelled, None));
            model.checkpoint_totals().lost_gpu_ms
        };
        assert_eq!(lost(true), 0.0);
        assert_eq!(lost(false), 600_000.0);
    }
}
