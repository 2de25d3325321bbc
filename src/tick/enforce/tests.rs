//! Goal: on a shared GPU the attempt over its declared memory is the one stopped, with its
//! figures as the task's end; its neighbour keeps running, and its neighbour's out-of-memory
//! while it was over uses no retry. Method: a fake runner whose processes belong to their
//! supervisor's session, real State folds, the tick's enforce and reconcile steps in order.
use std::collections::BTreeMap;

use super::*;
use crate::exec::{ExitOutcome, Reaping};
use crate::gpu::GpuProcess;
use crate::gpu::fake::tests::sample_minimal;
use crate::journal::{ProcessRef, Status};
use crate::tick::runner::{AttemptExit, AttemptLaunch, Observation, RunnerError};

/// Process `pid` belongs to the session `pid / 100 * 100` (supervisors 100, 200, ...).
struct Sessions {
    status: BTreeMap<String, AttemptStatus>,
}

impl AttemptRunner for Sessions {
    fn launch(&mut self, _: &AttemptLaunch) -> Result<ProcessRef, RunnerError> {
        Err(RunnerError::Refused("not in this test".into()))
    }
    fn status(&mut self, task: &str, _: u32, recorded: Option<&ProcessRef>) -> AttemptStatus {
        let running = AttemptStatus::Running(recorded.cloned().expect("launched"));
        self.status.get(task).cloned().unwrap_or(running)
    }
    fn stop(&mut self, _: &str, _: u32) -> Result<bool, RunnerError> {
        Ok(true)
    }
    fn abandon(&mut self, _: &str, _: u32) -> Result<bool, RunnerError> {
        Ok(false)
    }
    fn session_of(&self, pid: u32) -> Option<u32> {
        Some(pid / 100 * 100)
    }
}

fn apply(state: &mut State, events: Vec<Event>) {
    for event in events {
        let seq = state.last_seq + 1;
        assert!(matches!(state.apply(seq, &Record { time_ms: 50, event }), crate::journal::Applied::Yes));
    }
}

/// A task placed on `gpus` with `requirement` MiB per GPU, launched under supervisor `pid`.
fn running(state: &mut State, n: u64, pid: u32, gpus: &[&str], requirement: u64, exclusive: bool) -> TaskId {
    let id = TaskId::from_parts(n, 1);
    let spec = crate::spec::parse_toml("t", "name = \"t\"\ncommand = [\"true\"]\nmax_retries = 1\n")
        .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
        .expect("spec");
    let supervisor = ProcessRef { pid, start_time_ticks: 1, boot_id: "b".into() };
    apply(
        state,
        vec![
            Event::Submitted { task: id.clone(), submitter_uid: 1000, spec },
            Event::Placed {
                task: id.clone(),
                attempt: 1,
                gpus: gpus.iter().map(|g| g.to_string()).collect(),
                exclusive,
                requirement_mib: Some(requirement),
                reason: "fits".into(),
            },
            Event::Launched { task: id.clone(), attempt: 1, supervisor, adopted: false },
        ],
    );
    id
}

fn gpu(uuid: &str, index: u32, processes: &[(u32, u64)]) -> GpuSample {
    let mut sample = sample_minimal(uuid);
    sample.index = index;
    sample.processes =
        processes.iter().map(|&(pid, mib)| GpuProcess { pid, used_mib: Some(mib), sm_util: None }).collect();
    sample
}

/// One tick's enforce and reconcile, folded; returns the records and the stops.
fn tick(state: &mut State, runner: &mut Sessions, samples: &[GpuSample]) -> (Vec<Event>, Vec<Action>) {
    let config = Config::default();
    let mut seen = runner.observe(&super::super::reconcile::active(state));
    let enforced = enforce(state, samples, runner, &seen, &[], &config, 50);
    seen.over_share.clone_from(&enforced.over_share);
    let effects = super::super::reconcile::decide(state, &seen, &config, 50);
    let reconciled = super::super::reconcile::take_claims(effects, runner, 50);
    let mut events: Vec<Event> = enforced.records.into_iter().map(|r| r.event).collect();
    events.extend(reconciled.records.into_iter().map(|r| r.event));
    apply(state, events.clone());
    (events, enforced.stops)
}

fn oom_exit() -> AttemptStatus {
    AttemptStatus::Exited(AttemptExit {
        outcome: ExitOutcome::Exited { code: 1 },
        oom: Some("CUDA out of memory".into()),
        ended_ms: 55,
        output_truncated: None,
        start: None,
        host_memory: None,
        gpu_readings: None,
    })
}

#[test]
fn the_job_over_its_share_is_stopped_and_its_neighbour_keeps_its_retries() {
    let mut state = State::default();
    let mallory = running(&mut state, 1, 100, &["GPU-a"], 1024, false);
    let alice = running(&mut state, 2, 200, &["GPU-a"], 4096, false);
    let mut runner = Sessions { status: BTreeMap::new() };
    let samples = [gpu("GPU-a", 0, &[(101, 6000), (102, 4035), (201, 4000)])];

    let (events, stops) = tick(&mut state, &mut runner, &samples);
    let reason = "used 9.8 GiB on GPU0, declared 1.0 GiB (+ 1.0 GiB margin)";
    assert_eq!(
        events,
        [Event::MemoryExceeded {
            task: mallory.clone(),
            attempt: 1,
            gpu: "GPU-a".into(),
            used_mib: 10_035,
            declared_mib: 1024,
            reason: reason.into(),
        }]
    );
    assert_eq!(stops, [Action::Stop { task: mallory.clone(), attempt: 1 }]);
    assert_eq!(state.tasks[&mallory].status(), Status::Failed);
    assert_eq!(state.tasks[&mallory].end_reason(), Some(reason));
    assert_eq!(state.tasks[&alice].status(), Status::Running, "the neighbour keeps running");

    // Next tick: mallory's job has stopped; alice's died of out-of-memory meanwhile.
    runner.status.insert(
        mallory.to_string(),
        AttemptStatus::Exited(AttemptExit {
            outcome: ExitOutcome::Cancelled,
            oom: None,
            ended_ms: 45,
            output_truncated: None,
            start: None,
            host_memory: None,
            gpu_readings: None,
        }),
    );
    runner.status.insert(alice.to_string(), oom_exit());
    let (events, stops) = tick(&mut state, &mut runner, &[gpu("GPU-a", 0, &[])]);
    assert!(stops.is_empty());
    let kinds: Vec<&str> = events.iter().map(Event::kind).collect();
    assert_eq!(kinds, ["Stopped", "Stopped", "Requeued"], "{events:?}");
    let requeued = format!(
        "out of GPU memory while task {mallory} was over its share ({reason}); not counted against its retries"
    );
    assert!(matches!(&events[2], Event::Requeued { reason: words, .. } if words == &requeued), "{events:?}");
    let task = &state.tasks[&alice];
    assert_eq!((task.status(), task.oom_count), (Status::Pending, 0), "no retry used");
    assert_eq!(super::super::requeue::retries_used(task), 0);
    assert_eq!(state.tasks[&mallory].status(), Status::Failed);
    assert_eq!(state.tasks[&mallory].end_reason(), Some(reason));
}

#[test]
fn within_its_share_alone_or_exclusive_nobody_is_stopped() {
    let mut state = State::default();
    let within = running(&mut state, 1, 100, &["GPU-a"], 4096, false);
    running(&mut state, 2, 200, &["GPU-a"], 4096, false);
    running(&mut state, 3, 300, &["GPU-b"], 1024, false);
    running(&mut state, 4, 400, &["GPU-c"], 1024, true);
    let mut runner = Sessions { status: BTreeMap::new() };
    let samples = [
        gpu("GPU-a", 0, &[(101, 5120), (201, 100)]),
        gpu("GPU-b", 1, &[(301, 30_000)]),
        gpu("GPU-c", 2, &[(401, 30_000)]),
    ];
    let (events, stops) = tick(&mut state, &mut runner, &samples);
    assert!(events.is_empty() && stops.is_empty(), "{events:?}");
    assert_eq!(state.tasks[&within].status(), Status::Running);
}

#[test]
fn a_job_on_a_gpu_it_was_not_given_is_stopped_there() {
    let mut state = State::default();
    let trespasser = running(&mut state, 1, 100, &["GPU-a"], 1024, true);
    running(&mut state, 2, 200, &["GPU-b"], 4096, false);
    let mut runner = Sessions { status: BTreeMap::new() };
    let samples = [gpu("GPU-a", 0, &[(101, 900)]), gpu("GPU-b", 1, &[(102, 2048), (201, 4000)])];
    let (events, _) = tick(&mut state, &mut runner, &samples);
    assert!(matches!(&events[..], [Event::MemoryExceeded { task, reason, declared_mib: 0, .. }]
        if task == &trespasser && reason == "used 2.0 GiB on GPU1, which it was not given (+ 1.0 GiB margin)"));
}

/// Goal: an attempt the runner does not report Running (here: never claimed) is not judged,
/// whatever its GPU holds.
#[test]
fn nothing_is_decided_without_a_running_observation() {
    let mut state = State::default();
    running(&mut state, 1, 100, &["GPU-a"], 1024, false);
    running(&mut state, 2, 200, &["GPU-a"], 1024, false);
    let samples = [gpu("GPU-a", 0, &[(101, 30_000)])];
    let runner = Sessions { status: BTreeMap::new() };
    let mut seen = Observed::default();
    let unclaimed = Observation { status: AttemptStatus::Unclaimed, reaping: Reaping::default() };
    seen.attempts.insert((TaskId::from_parts(1, 1), 1), unclaimed);
    let enforced = enforce(&state, &samples, &runner, &seen, &[], &Config::default(), 50);
    assert!(enforced.records.is_empty());
}
