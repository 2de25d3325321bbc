//! Goal: on a shared GPU the attempt over its share is the one stopped, with its figures, and
//! its end is a relaunch with what it used; its neighbour keeps running, and its neighbour's
//! out-of-memory while it was over uses no retry. Method: a fake runner whose processes belong
//! to their supervisor's session, real State folds, the tick's enforce and reconcile steps in
//! order.
use std::collections::BTreeMap;

use super::*;
use crate::exec::{ExitOutcome, Reaping};
use crate::gpu::GpuProcess;
use crate::gpu::fake::tests::sample_minimal;
use crate::journal::{ProcessRef, Status};
use crate::sched::ShareSource;
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
    running_as(state, n, pid, gpus, Some(requirement), exclusive, "")
}

/// [`running`] with `requirement` (`None`: placed without a figure) and `extra` spec lines.
fn running_as(
    state: &mut State,
    n: u64,
    pid: u32,
    gpus: &[&str],
    requirement: Option<u64>,
    exclusive: bool,
    extra: &str,
) -> TaskId {
    let id = TaskId::from_parts(n, 1);
    let retries = if extra.contains("max_retries") { "" } else { "max_retries = 1\n" };
    let text = format!("name = \"t\"\ncommand = [\"true\"]\n{retries}{extra}");
    let spec = crate::spec::parse_toml("t", &text)
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
                requirement_mib: requirement,
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

/// Fails on the code before relaunches: mallory's task failed at the MemoryExceeded, and its
/// end was only Stopped.
#[test]
fn the_job_over_its_share_is_stopped_and_its_neighbour_keeps_its_retries() {
    let mut state = State::default();
    let mallory = running_as(&mut state, 1, 100, &["GPU-a"], Some(1024), false, "memory = \"1GiB\"\n");
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
            share_source: Some(ShareSource::Declared),
        }]
    );
    assert_eq!(stops, [Action::Stop { task: mallory.clone(), attempt: 1 }]);
    assert_eq!(state.tasks[&mallory].status(), Status::Running, "stopping, to be relaunched");
    assert_eq!(state.tasks[&alice].status(), Status::Running, "the neighbour keeps running");
    // The stop did not take yet: asked for again, with no second record.
    let (events, stops) = tick(&mut state, &mut runner, &samples);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(stops, [Action::Stop { task: mallory.clone(), attempt: 1 }]);

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
    assert_eq!(kinds, ["Stopped", "Requeued", "Stopped", "Requeued"], "{events:?}");
    // mallory declared 1 GiB and used 9.8: back to its place in the main queue, with
    // max(peak, share) + one step.
    let relaunched = "used 9.8 GiB on GPU-a over its 1.0 GiB share (declared); the next attempt gets 14.8 GiB = \
                      max(estimate 1.0 GiB, peak observed 9.8 GiB, share 1.0 GiB) + 5.0 GiB step; back to its \
                      place in the main queue (the user's figure was short) (retry 1 of 1)";
    assert!(
        matches!(&events[1], Event::Requeued { recovery: false, requirement_mib: Some(15_155), reason: words, .. }
            if words == relaunched),
        "{events:?}"
    );
    let requeued = format!(
        "out of GPU memory while task {mallory} was over its share ({reason}); not counted against its retries"
    );
    assert!(matches!(&events[3], Event::Requeued { reason: words, .. } if words == &requeued), "{events:?}");
    let task = &state.tasks[&alice];
    assert_eq!((task.status(), task.oom_count), (Status::Pending, 0), "no retry used");
    assert_eq!(super::super::requeue::retries_used(task), 0);
    let task = &state.tasks[&mallory];
    assert_eq!((task.status(), task.in_recovery()), (Status::Pending, false), "main queue");
    assert_eq!(task.recovery_requirement_mib, Some(15_155));
    assert_eq!(super::super::requeue::retries_used(task), 1, "one retry used");
}

/// Goal: an attempt placed without a figure is held to the queue's default share while it
/// shares, and crossing it is carma's miss: the recovery queue. `--max-retries 0` keeps the
/// old ending, Failed. Fails on the code before default shares (nobody was stopped).
#[test]
fn a_job_with_no_figure_is_held_to_the_default_share_and_relaunched_in_recovery() {
    let mut state = State::default();
    let grower = running_as(&mut state, 1, 100, &["GPU-a"], None, false, "");
    let other = running_as(&mut state, 2, 200, &["GPU-a"], None, false, "max_retries = 0\n");
    let mut runner = Sessions { status: BTreeMap::new() };
    // The default share is the no-figure margin, 5 GiB; + 1 GiB margin: 6144 MiB.
    let samples = [gpu("GPU-a", 0, &[(101, 6145), (201, 6145)])];
    let (events, _) = tick(&mut state, &mut runner, &samples);
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events.iter().all(|e| matches!(e, Event::MemoryExceeded { declared_mib: 5120, share_source: Some(ShareSource::Default), reason, .. }
        if reason == "used 6.0 GiB on GPU0, the queue's default share 5.0 GiB (+ 1.0 GiB margin)")), "{events:?}");
    let cancelled = AttemptStatus::Exited(AttemptExit {
        outcome: ExitOutcome::Cancelled,
        oom: None,
        ended_ms: 45,
        output_truncated: None,
        start: None,
        host_memory: None,
        gpu_readings: None,
    });
    runner.status.insert(grower.to_string(), cancelled.clone());
    runner.status.insert(other.to_string(), cancelled);
    tick(&mut state, &mut runner, &[gpu("GPU-a", 0, &[])]);
    let task = &state.tasks[&grower];
    assert!(task.in_recovery(), "carma's miss: the recovery queue");
    assert_eq!(task.recovery_requirement_mib, Some(6145 + 5120));
    let task = &state.tasks[&other];
    assert_eq!(task.status(), Status::Failed, "--max-retries 0 keeps Failed");
    assert!(
        task.end_reason().is_some_and(|r| r.contains("retry limit 0 reached")),
        "{:?}",
        task.end_reason()
    );
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

/// Goal: a job over its share that dies of out-of-memory before the stop reaches it ends as an
/// out-of-memory (carma's own reading over its share is the evidence), relaunched by the same
/// rule and counted as one memory end, not two.
#[test]
fn a_job_over_its_share_that_runs_out_of_memory_first_is_one_memory_end() {
    let mut state = State::default();
    let hog = running_as(&mut state, 1, 100, &["GPU-a"], Some(1024), false, "memory = \"1GiB\"\n");
    running(&mut state, 2, 200, &["GPU-a"], 4096, false);
    let mut runner = Sessions { status: BTreeMap::new() };
    tick(&mut state, &mut runner, &[gpu("GPU-a", 0, &[(101, 10_035), (201, 4000)])]);
    runner.status.insert(hog.to_string(), oom_exit());
    let (events, _) = tick(&mut state, &mut runner, &[gpu("GPU-a", 0, &[(201, 4000)])]);
    let kinds: Vec<&str> = events.iter().map(Event::kind).collect();
    assert_eq!(kinds, ["OomDetected", "Requeued"], "{events:?}");
    assert!(matches!(&events[1], Event::Requeued { recovery: false, .. }), "the user's miss: {events:?}");
    let task = &state.tasks[&hog];
    assert_eq!(super::super::relaunch::memory_ends(task), 1);
}
