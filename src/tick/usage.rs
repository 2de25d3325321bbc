//! Which GPU memory and SM time belong to which running task, from this tick's process lists.
//!
//! NVML lists the processes on each GPU with their memory and SM utilisation. Every process of
//! an attempt runs in its supervisor's session (the supervisor calls setsid), so a process
//! whose session id is an attempt's supervisor pid belongs to that attempt, whatever its
//! children do with process groups. A Slurm job's processes carry `SLURM_JOB_ID` in their
//! environment.
//!
//! **SM samples.** A process's SM utilisation is its share of the GPU's SM time. While the
//! GPU's processes together use less than [`SM_SATURATED`] of it, nobody waits for SMs, so a
//! job's share is what it would use alone: its standalone SM activity, the figure the
//! projected-SM gate needs. Samples taken on a saturated GPU, or of 0 (start-up, data
//! loading), say nothing about it and are skipped. One sample per attempt per
//! [`SM_SAMPLE_EVERY_MS`] is journaled (SmObserved), whatever the configuration: the
//! projected-SM gate learns from them, and `show`'s efficiency reports their mean.

use std::collections::BTreeMap;

use crate::gpu::GpuSample;
use crate::id::TaskId;
use crate::journal::{Event, Record, State};

use super::runner::AttemptRunner;

/// A new peak is journaled only when it grows by at least this, to bound the records.
pub(super) const PEAK_STEP_MIB: u64 = 256;

/// A GPU whose processes' SM utilisation sums to at least this is saturated: their shares no
/// longer measure what each would use alone.
pub const SM_SATURATED: f32 = 0.95;

/// At most one SM sample per attempt this often, to bound the records.
pub const SM_SAMPLE_EVERY_MS: u64 = 60_000;

/// Below this a process is not computing (start-up, data loading): no sample.
const SM_UTIL_MIN: f32 = 0.01;

/// SmObserved records for running attempts with an informative sample this tick and none
/// journaled in the last [`SM_SAMPLE_EVERY_MS`].
pub(super) fn sm_records(state: &State, observed: &BTreeMap<TaskId, f32>, now_ms: u64) -> Vec<Record> {
    observed
        .iter()
        .filter_map(|(id, &sm_util)| {
            let attempt = state.tasks.get(id)?.active_attempt()?;
            let due = attempt.sm_util_last_ms.is_none_or(|last| now_ms >= last + SM_SAMPLE_EVERY_MS);
            due.then(|| Record {
                time_ms: now_ms,
                event: Event::SmObserved { task: id.clone(), attempt: attempt.number, sm_util },
            })
        })
        .collect()
}

/// Each running task's SM utilisation on its busiest unsaturated GPU (the sum over its
/// processes there), when that is informative (see the module docs).
pub(super) fn observed_sm(
    state: &State,
    samples: &[GpuSample],
    runner: &dyn AttemptRunner,
) -> BTreeMap<TaskId, f32> {
    let by_supervisor = supervisors(state);
    let mut observed: BTreeMap<TaskId, f32> = BTreeMap::new();
    if by_supervisor.is_empty() {
        return observed;
    }
    for sample in samples {
        let total: f32 = sample.processes.iter().filter_map(|p| p.sm_util).filter(|u| u.is_finite()).sum();
        let gpu_saturated = sample.sm_active.is_some_and(|a| a >= SM_SATURATED);
        if total >= SM_SATURATED || gpu_saturated {
            continue;
        }
        let mut per_task: BTreeMap<&TaskId, f32> = BTreeMap::new();
        for process in &sample.processes {
            let Some(util) = process.sm_util.filter(|u| u.is_finite() && *u >= 0.0) else { continue };
            let Some(session) = runner.session_of(process.pid) else { continue };
            if let Some(task) = by_supervisor.get(&session) {
                *per_task.entry(task).or_default() += util;
            }
        }
        for (task, util) in per_task.into_iter().filter(|(_, u)| *u >= SM_UTIL_MIN) {
            let entry = observed.entry(task.clone()).or_default();
            *entry = entry.max(util.min(1.0));
        }
    }
    observed
}

/// Running attempts carma started, by supervisor pid.
fn supervisors(state: &State) -> BTreeMap<u32, &TaskId> {
    state
        .tasks
        .values()
        // A Slurm job's attempt carries pid 0: carma did not start it.
        .filter(|t| t.slurm.is_none())
        .filter_map(|t| Some((t.active_attempt()?.supervisor.as_ref()?.pid, &t.id)))
        .collect()
}

/// Usage records for attempts whose observed memory reached a new peak.
pub(super) fn peak_records(state: &State, observed: &BTreeMap<TaskId, u64>, now_ms: u64) -> Vec<Record> {
    observed
        .iter()
        .filter_map(|(id, &mib)| {
            let attempt = state.tasks.get(id)?.active_attempt()?;
            let grew = attempt.peak_observed_mib.is_none_or(|peak| mib >= peak + PEAK_STEP_MIB);
            (grew && mib > 0).then(|| Record {
                time_ms: now_ms,
                event: Event::Usage { task: id.clone(), attempt: attempt.number, peak_mib: mib },
            })
        })
        .collect()
}

/// The running Slurm job a GPU process belongs to: its environment names the job, and it
/// runs as the job's submitter (so a process cannot charge its memory to someone else's job).
fn slurm_task_of<'a>(state: &'a State, runner: &dyn AttemptRunner, pid: u32) -> Option<&'a TaskId> {
    let (cluster, job_id, uid) = runner.slurm_job_of(pid)?;
    let task = state.slurm_task(&cluster, job_id)?;
    (task.submitter_uid == uid && task.active_attempt().is_some()).then_some(&task.id)
}

/// Each running task's memory on its busiest GPU, in MiB (per-GPU, as `sched` expects).
/// Processes of carma's attempts are found by their supervisor's session; processes of Slurm
/// jobs (carma on Slurm) by the job named in their environment, so the node's Epilog can
/// raise an out-of-memory job's share from its observed peak.
pub(super) fn observed_mib(
    state: &State,
    samples: &[GpuSample],
    runner: &dyn AttemptRunner,
) -> BTreeMap<TaskId, u64> {
    let by_supervisor = supervisors(state);
    let slurm_running = state.tasks.values().any(|t| t.slurm.is_some() && t.active_attempt().is_some());
    let mut per_gpu: BTreeMap<(&TaskId, &str), u64> = BTreeMap::new();
    if by_supervisor.is_empty() && !slurm_running {
        return BTreeMap::new();
    }
    // A MIG instance is a target of its own: its processes count against its UUID.
    let targets = samples.iter().flat_map(|sample| {
        let instances = sample.mig.instances.iter().map(|m| (m.uuid.as_str(), &m.processes));
        std::iter::once((sample.uuid.as_str(), &sample.processes)).chain(instances)
    });
    for (uuid, processes) in targets {
        for process in processes {
            let supervised =
                runner.session_of(process.pid).and_then(|session| by_supervisor.get(&session).copied());
            let task = match supervised {
                Some(task) => task,
                None if slurm_running => match slurm_task_of(state, runner, process.pid) {
                    Some(task) => task,
                    None => continue,
                },
                None => continue,
            };
            *per_gpu.entry((task, uuid)).or_default() += process.used_mib.unwrap_or(0);
        }
    }
    let mut observed: BTreeMap<TaskId, u64> = BTreeMap::new();
    for ((task, _), mib) in per_gpu {
        let entry = observed.entry(task.clone()).or_default();
        *entry = (*entry).max(mib);
    }
    observed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::fake::tests::sample_minimal;
    use crate::gpu::{FakeProbe, GpuProbe, SinceMarks};
    use crate::gpu::{GpuProcess, MigInfo, MigInstance};
    use crate::journal::ProcessRef;
    use crate::slurm::records::{JobStart, start_records};
    use crate::tick::runner::{AttemptLaunch, AttemptStatus, RunnerError};

    /// Every process belongs to the session of supervisor 100.
    struct OneSession;

    impl AttemptRunner for OneSession {
        fn launch(&mut self, _: &AttemptLaunch) -> Result<ProcessRef, RunnerError> {
            Err(RunnerError::Refused("not in this test".into()))
        }
        fn status(&mut self, _: &str, _: u32, _: Option<&ProcessRef>) -> AttemptStatus {
            AttemptStatus::Unclaimed
        }
        fn stop(&mut self, _: &str, _: u32) -> Result<bool, RunnerError> {
            Ok(false)
        }
        fn abandon(&mut self, _: &str, _: u32) -> Result<bool, RunnerError> {
            Ok(false)
        }
        fn session_of(&self, _pid: u32) -> Option<u32> {
            Some(100)
        }
    }

    /// Goal: memory of a task on a MIG instance is read from the instance's processes, so
    /// Usage peaks and the out-of-memory recovery see it.
    #[test]
    fn mig_instance_processes_count_for_their_task() {
        let id = TaskId::from_parts(1, 1);
        let spec = crate::spec::parse_toml("t", "name = \"t\"\ncommand = [\"true\"]\n")
            .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
            .unwrap();
        let mut state = State::default();
        let supervisor = ProcessRef { pid: 100, start_time_ticks: 1, boot_id: "b".into() };
        for (seq, event) in [
            Event::Submitted { task: id.clone(), submitter_uid: 0, spec },
            Event::Placed {
                task: id.clone(),
                attempt: 1,
                gpus: vec!["MIG-a".into()],
                exclusive: false,
                requirement_mib: None,
                reason: "fits".into(),
            },
            Event::Launched { task: id.clone(), attempt: 1, supervisor, adopted: false },
        ]
        .into_iter()
        .enumerate()
        {
            state.apply(seq as u64 + 1, &Record { time_ms: 1, event });
        }
        let mut gpu = sample_minimal("GPU-p");
        let process = |pid, mib| GpuProcess { pid, used_mib: Some(mib), sm_util: None };
        gpu.mig = MigInfo {
            enabled: Some(true),
            instances: vec![MigInstance {
                uuid: "MIG-a".into(),
                index: 0,
                profile: None,
                memory_total_mib: 20_000,
                memory_used_mib: 7000,
                processes: vec![process(200, 4000), process(201, 3000)],
            }],
        };
        let observed = observed_mib(&state, &[gpu], &OneSession);
        assert_eq!(observed.get(&id), Some(&7000));
    }

    struct Environments;

    impl AttemptRunner for Environments {
        fn launch(&mut self, _: &AttemptLaunch) -> Result<ProcessRef, RunnerError> {
            unreachable!("usage never launches")
        }
        fn status(&mut self, _: &str, _: u32, _: Option<&ProcessRef>) -> AttemptStatus {
            unreachable!("usage never asks for a status")
        }
        fn stop(&mut self, _: &str, _: u32) -> Result<bool, RunnerError> {
            unreachable!("usage never stops")
        }
        fn abandon(&mut self, _: &str, _: u32) -> Result<bool, RunnerError> {
            unreachable!("usage never abandons")
        }
        fn session_of(&self, _: u32) -> Option<u32> {
            None
        }
        fn slurm_job_of(&self, pid: u32) -> Option<(String, u32, u32)> {
            match pid {
                99 => Some(("lab".into(), 77, 1000)),
                // Names the same job but runs as another user.
                100 => Some(("lab".into(), 77, 1001)),
                _ => None,
            }
        }
    }

    #[test]
    fn a_slurm_jobs_processes_become_its_peak() {
        let start = JobStart {
            cluster: "lab".into(),
            job_id: 77,
            node: "n1".into(),
            restart_count: 0,
            uid: 1000,
            name: "train".into(),
            workdir: "/".into(),
            comment: None,
            submit_ms: 1_000,
            started_ms: 2_000,
            gpus: vec!["GPU-a".into()],
            shards: Some(4),
            rule: crate::slurm::ShardRule::default(),
            boot_id: String::new(),
            array: None,
        };
        let mut state = State::default();
        let (id, records) = start_records(&state, &start);
        for (seq, record) in records.iter().enumerate() {
            state.apply(seq as u64 + 1, record);
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gpus.json");
        std::fs::write(
            &file,
            r#"[{"uuid": "GPU-a", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 6000,
                 "sm_active": 0.5, "processes": [{"pid": 99, "used_mib": 5000}, {"pid": 100, "used_mib": 700}]}]"#,
        )
        .unwrap();
        let samples = FakeProbe::open(&file).unwrap().sample(&SinceMarks::new()).unwrap();
        let observed = observed_mib(&state, &samples, &Environments);
        let id = id.unwrap();
        assert_eq!(observed, BTreeMap::from([(id.clone(), 5000)]));
        let records = peak_records(&state, &observed, 3_000);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].event, Event::Usage { task: id, attempt: 1, peak_mib: 5000 });
    }
}
