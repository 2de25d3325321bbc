//! What the tick learns and how it caps: per-process SM samples, the learned SM, run time and
//! memory of a workload, and the MPS memory cap. Method: State built by folding the events a
//! tick would have journaled, GPU samples written by hand, a runner whose supervisors are their
//! own sessions.

use proptest::prelude::*;

use super::learned;
use super::usage::{self, SM_SAMPLE_EVERY_MS};
use super::{AttemptLaunch, AttemptRunner, AttemptStatus, PlannedAttempt, RunnerError};
use crate::config::{Config, MpsCap, Sharing};
use crate::gpu::{GpuHealth, GpuProcess, GpuSample, MigInfo, SmSource};
use crate::id::TaskId;
use crate::journal::{Event, ProcessRef, Record, State};

/// A runner whose only job here is to say that pid N is its own session.
struct Sessions;

impl AttemptRunner for Sessions {
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
    fn session_of(&self, pid: u32) -> Option<u32> {
        (pid >= 100).then_some(pid)
    }
}

fn id(n: u8) -> TaskId {
    TaskId::from_parts(1_700_000_000_000 + u64::from(n), u32::from(n))
}

fn spec(name: &str, memory: &str, time_limit: Option<&str>) -> crate::spec::TaskSpec {
    let limit = time_limit.map_or(String::new(), |l| format!("time_limit = \"{l}\"\n"));
    let text =
        format!("name = \"{name}\"\ncommand = [\"python\", \"{name}.py\"]\nmemory = \"{memory}\"\n{limit}");
    crate::spec::parse_toml("t", &text)
        .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
        .unwrap()
}

/// Folds `events` at the given times into a fresh State.
fn state_of(events: Vec<(u64, Event)>) -> State {
    let mut state = State::default();
    for (i, (time_ms, event)) in events.into_iter().enumerate() {
        state.apply(i as u64 + 1, &Record { time_ms, event });
    }
    state
}

/// Submitted, Placed on `gpus` with `requirement_mib`, Launched with supervisor pid 100 + n.
fn running(n: u8, name: &str, gpus: &[&str], requirement_mib: u64, at_ms: u64) -> Vec<(u64, Event)> {
    vec![
        (at_ms, Event::Submitted { task: id(n), submitter_uid: 1000, spec: spec(name, "8GiB", None) }),
        (
            at_ms,
            Event::Placed {
                task: id(n),
                attempt: 1,
                gpus: gpus.iter().map(|g| g.to_string()).collect(),
                exclusive: false,
                requirement_mib: Some(requirement_mib),
                reason: "fits".into(),
            },
        ),
        (
            at_ms,
            Event::Launched {
                task: id(n),
                attempt: 1,
                supervisor: ProcessRef { pid: 100 + u32::from(n), start_time_ticks: 1, boot_id: "b".into() },
                adopted: false,
            },
        ),
    ]
}

fn sample(uuid: &str, free_mib: u64, processes: &[(u32, f32)]) -> GpuSample {
    GpuSample {
        uuid: uuid.into(),
        index: 0,
        name: "A100".into(),
        memory_total_mib: 40960,
        memory_used_mib: 40960 - free_mib,
        memory_free_mib: free_mib,
        memory_reserved_mib: None,
        health: GpuHealth::Healthy,
        util_gpu_mean: None,
        util_last_timestamp_us: None,
        sm_active: None,
        sm_active_source: SmSource::Simulated,
        sm_occupancy: None,
        dram_active: None,
        power_mw: None,
        energy_mj: None,
        processes: processes
            .iter()
            .map(|&(pid, sm)| GpuProcess { pid, used_mib: Some(1000), sm_util: Some(sm) })
            .collect(),
        mig: MigInfo::not_supported(),
        unavailable: Vec::new(),
    }
}

/// Goal: a task's SM sample is its processes' sum on its busiest GPU that is below
/// saturation; saturated GPUs, zeros and foreign processes teach nothing; and a sample is
/// journaled at most once a minute per attempt.
#[test]
fn sm_samples_come_from_unsaturated_gpus_only() {
    let mut events = running(1, "a", &["GPU-0"], 8000, 0);
    events.extend(running(2, "b", &["GPU-1"], 8000, 0));
    events.extend(running(3, "c", &["GPU-1"], 8000, 0));
    events.extend(running(4, "d", &["GPU-2"], 8000, 0));
    let state = state_of(events);
    let samples = [
        // a: two processes, 0.3 + 0.2, next to a foreign one (pid 7) at 0.1: 0.6 in all.
        sample("GPU-0", 30_000, &[(101, 0.3), (101, 0.2), (7, 0.1)]),
        // b and c saturate GPU-1: no sample for either.
        sample("GPU-1", 20_000, &[(102, 0.55), (103, 0.45)]),
        // d is starting up: 0.
        sample("GPU-2", 30_000, &[(104, 0.0)]),
    ];
    let observed = usage::observed_sm(&state, &samples, &Sessions);
    assert_eq!(observed.len(), 1, "{observed:?}");
    assert!((observed[&id(1)] - 0.5).abs() < 1e-6, "{observed:?}");
    let records = usage::sm_records(&state, &observed, 61_000);
    assert_eq!(records.len(), 1);
    let mut state = state;
    state.apply(100, &records[0]);
    assert!(usage::sm_records(&state, &observed, 61_000 + SM_SAMPLE_EVERY_MS - 1).is_empty(), "rate limited");
    assert_eq!(usage::sm_records(&state, &observed, 61_000 + SM_SAMPLE_EVERY_MS).len(), 1);
}

/// Goal: the figures the core gets. SM: the attempt's own samples before its workload's;
/// run time: the workload's finished runs, else the limit scaled by the fraction of their
/// limits finished attempts used, else the limit; memory: the workload's settled peak (plus
/// the journaling step), else nothing (the declared figure stands).
#[test]
fn learned_figures_follow_their_sources_in_order() {
    let mut events = vec![(
        0,
        Event::Submitted { task: id(1), submitter_uid: 1000, spec: spec("a", "8GiB", Some("100m")) },
    )];
    events.extend(running(1, "a", &["GPU-0"], 8000, 0).into_iter().skip(1));
    events.push((60_000, Event::SmObserved { task: id(1), attempt: 1, sm_util: 0.4 }));
    events.push((90_000, Event::Usage { task: id(1), attempt: 1, peak_mib: 6000 }));
    events.push((3_000_000, Event::Finished { task: id(1), attempt: 1, exit_ms: 3_000_000 }));
    events.push((
        3_000_000,
        Event::Submitted { task: id(2), submitter_uid: 1000, spec: spec("a", "8GiB", Some("100m")) },
    ));
    events.push((
        3_000_000,
        Event::Submitted { task: id(3), submitter_uid: 1000, spec: spec("b", "8GiB", Some("100m")) },
    ));
    events.extend(running(4, "c", &["GPU-1"], 8000, 3_000_000));
    events.push((3_060_000, Event::SmObserved { task: id(4), attempt: 1, sm_util: 0.9 }));
    events.push((3_070_000, Event::Usage { task: id(4), attempt: 1, peak_mib: 12_000 }));
    let state = state_of(events);
    let (again, other, busy) = (&state.tasks[&id(2)], &state.tasks[&id(3)], &state.tasks[&id(4)]);
    assert_eq!(learned::sm_estimate(&state, again, None), Some(0.4), "from the workload's history");
    assert_eq!(learned::sm_estimate(&state, other, None), None, "never seen");
    assert_eq!(learned::sm_estimate(&state, busy, busy.active_attempt()), Some(0.9), "its own samples");
    assert_eq!(learned::runtime_estimate_ms(&state, again), Some(3_000_000), "the finished run");
    // b has no history: its 100 min limit times the 50% of its limit that a used.
    assert_eq!(learned::runtime_estimate_ms(&state, other), Some(3_000_000));
    let fresh = state_of(vec![(
        0,
        Event::Submitted { task: id(5), submitter_uid: 1, spec: spec("d", "1GiB", Some("10m")) },
    )]);
    assert_eq!(learned::runtime_estimate_ms(&fresh, &fresh.tasks[&id(5)]), Some(600_000), "the limit itself");
    let settle = learned::PEAK_SETTLE_MS;
    let early = learned::running_peaks(&state, 3_000_000 + settle - 1, 0);
    assert!(early.is_empty(), "c's peak is not settled yet");
    let peaks = learned::running_peaks(&state, 3_000_000 + settle, 0);
    assert_eq!(peaks.get(&busy.workload_key()), Some(&12_000));
    let step = usage::PEAK_STEP_MIB;
    assert_eq!(learned::memory_mib(&state, again, &peaks), Some(6000 + step), "a's finished peak");
    assert_eq!(learned::memory_mib(&state, other, &peaks), None);
}

fn mps_config(cap: MpsCap) -> Config {
    let mut config = Config::default();
    config.tick.sharing = Sharing::Mps;
    config.tick.mps_cap = cap;
    config
}

fn plan_cap(state: &State, task: u8, gpus: &[&str], requirement_mib: u64, config: &Config) -> Option<u64> {
    let attempt = PlannedAttempt {
        task: id(task),
        attempt: 1,
        gpus: gpus.iter().map(|g| g.to_string()).collect(),
        requirement_mib: Some(requirement_mib),
    };
    super::plan_for(state, &state.tasks[&id(task)], &attempt, config, Default::default())
        .unwrap()
        .mps_mem_limit_mib
}

/// GPU-0 sampled with `free_mib` free, a co-runner on it that reserved 16000 + margin and
/// has allocated 6000, and the new task 9 placed next to it.
fn with_corunner(free_mib: u64) -> State {
    let mut events = running(1, "co", &["GPU-0"], 16_000, 0);
    events.push((1_000, Event::Usage { task: id(1), attempt: 1, peak_mib: 6000 }));
    events.push((
        0,
        Event::GpuDiscovered { uuid: "GPU-0".into(), index: 0, name: "A100".into(), memory_total_mib: 40960 },
    ));
    events.push((2_000, Event::MetricSample { sample: sample("GPU-0", free_mib, &[(101, 0.3)]) }));
    events.extend(running(9, "new", &["GPU-0"], 16_000, 2_000).into_iter().take(2));
    state_of(events)
}

/// Goal: issue 15's Inception3: a 16000 MiB figure for a 19018 MiB job. With the requirement
/// cap it is capped at 18048 MiB and dies even alone; with the room cap it gets the free
/// memory minus what its co-runner reserved and has not allocated, and never less than
/// requirement + margin.
#[test]
fn room_cap_protects_reservations_without_killing_a_job_that_fits() {
    let state = with_corunner(34_000);
    let margin = Config::default().sched.margin_with_figure_mib;
    assert_eq!(
        plan_cap(&state, 9, &["GPU-0"], 16_000, &mps_config(MpsCap::Requirement)),
        Some(16_000 + margin)
    );
    // 34000 free − (16000 + 2048 − 6000) not yet allocated by the co-runner.
    let room = 34_000 - (16_000 + margin - 6000);
    assert_eq!(plan_cap(&state, 9, &["GPU-0"], 16_000, &mps_config(MpsCap::Room)), Some(room));
    assert!(room > 19_018, "the under-estimated job fits");
    let crowded = with_corunner(20_000);
    assert_eq!(
        plan_cap(&crowded, 9, &["GPU-0"], 16_000, &mps_config(MpsCap::Room)),
        Some(16_000 + margin),
        "floor"
    );
    let unknown = with_corunner(34_000);
    assert_eq!(
        plan_cap(&unknown, 9, &["GPU-0", "GPU-9"], 16_000, &mps_config(MpsCap::Room)),
        Some(16_000 + margin),
        "a GPU never sampled gives no room"
    );
}

proptest! {
    /// Goal: the room cap is never below requirement + margin, and above it only by room the
    /// co-runners have not reserved: cap + their unallocated reservations <= free memory.
    #[test]
    fn room_cap_is_floored_and_leaves_reservations_alone(
        free_mib in 0u64..40_960,
        requirement_mib in 1u64..40_000,
        co_requirement_mib in 1u64..30_000,
        co_peak_mib in 0u64..30_000,
    ) {
        let mut events = running(1, "co", &["GPU-0"], co_requirement_mib, 0);
        events.push((1_000, Event::Usage { task: id(1), attempt: 1, peak_mib: co_peak_mib.max(1) }));
        events.push((2_000, Event::GpuDiscovered { uuid: "GPU-0".into(), index: 0, name: "A".into(), memory_total_mib: 40960 }));
        events.push((2_000, Event::MetricSample { sample: sample("GPU-0", free_mib, &[]) }));
        events.extend(running(9, "new", &["GPU-0"], requirement_mib, 2_000).into_iter().take(2));
        let state = state_of(events);
        let margin = Config::default().sched.margin_with_figure_mib;
        let cap = plan_cap(&state, 9, &["GPU-0"], requirement_mib, &mps_config(MpsCap::Room)).unwrap();
        prop_assert!(cap >= requirement_mib + margin);
        let unallocated = (co_requirement_mib + margin).saturating_sub(co_peak_mib.max(1));
        if cap > requirement_mib + margin {
            prop_assert!(cap + unallocated <= free_mib, "cap {} + {} > {}", cap, unallocated, free_mib);
        }
    }
}

/// Goal: the queue order's expected run and the source `show` and the pending reason name:
/// the workload's history, else the scaled limit, else the mean run of finished tasks of the
/// same width, else nothing. Method: a 1-GPU workload that finished in 50 min and a 2-GPU
/// one in 90 min; then first-seen tasks without a limit of each width and of a third width.
#[test]
fn expected_run_falls_back_to_the_width_prior() {
    use crate::sched::{ExpectedRun, RunSource};
    let mut events = running(1, "a", &["GPU-0"], 8000, 0);
    events.push((3_000_000, Event::Finished { task: id(1), attempt: 1, exit_ms: 3_000_000 }));
    let mut wide = running(2, "w", &["GPU-1", "GPU-2"], 8000, 0);
    if let Event::Submitted { spec, .. } = &mut wide[0].1 {
        spec.gpus = 2;
    }
    events.extend(wide);
    events.push((5_400_000, Event::Finished { task: id(2), attempt: 1, exit_ms: 5_400_000 }));
    let mut later = vec![
        (6_000_000, Event::Submitted { task: id(3), submitter_uid: 1000, spec: spec("a", "8GiB", None) }),
        (6_000_000, Event::Submitted { task: id(4), submitter_uid: 1000, spec: spec("b", "8GiB", None) }),
        (
            6_000_000,
            Event::Submitted { task: id(5), submitter_uid: 1000, spec: spec("c", "8GiB", Some("100m")) },
        ),
    ];
    let mut second_wide = spec("x", "8GiB", None);
    second_wide.gpus = 2;
    later.push((6_000_000, Event::Submitted { task: id(6), submitter_uid: 1000, spec: second_wide }));
    let mut four = spec("y", "8GiB", None);
    four.gpus = 4;
    later.push((6_000_000, Event::Submitted { task: id(7), submitter_uid: 1000, spec: four }));
    events.extend(later);
    let state = state_of(events);
    let priors = learned::width_priors(&state);
    assert_eq!(priors, [(1, 3_000_000), (2, 5_400_000)].into_iter().collect(), "one mean per width");
    let run = |n: u8| learned::expected_run(&state, &state.tasks[&id(n)], &priors);
    let of = |ms, source| Some(ExpectedRun { ms, source });
    assert_eq!(run(3), of(3_000_000, RunSource::History), "a's own earlier run");
    assert_eq!(run(4), of(3_000_000, RunSource::Width), "first-seen b: 1-GPU tasks' mean");
    assert_eq!(run(5), of(6_000_000, RunSource::Limit), "c's limit (nobody had one to scale by)");
    assert_eq!(run(6), of(5_400_000, RunSource::Width), "first-seen x: 2-GPU tasks' mean");
    assert_eq!(run(7), None, "no 4-GPU task has finished");
}
