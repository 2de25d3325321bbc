//! From State to the decision core and back: build `sched`'s input, turn its decision into
//! Placed and Pending records.
//!
//! This is the only place that knows both State and `sched`'s types; `sched` itself stays
//! ignorant of the journal.

use std::collections::BTreeMap;

use crate::config::{Config, MemorySource};
use crate::gpu::{GpuSample, MigInstance, SmSource};
use crate::id::TaskId;
use crate::journal::state::GpuState;

use super::learned;
use crate::journal::{Event, Record, State, Task};
use crate::sched::{
    self, GateInput, GpuView, MigTarget, Recovery, RunningTask, SchedInput, SmBasis, WaitingTask,
    WindowSample,
};

use super::gate::{reservation_input, running_gate, task_gate, usage_by_user};

/// An attempt the decision placed, to be launched after its Placed record is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedAttempt {
    /// The task to start.
    pub task: TaskId,
    /// Its attempt number (1 for the first).
    pub attempt: u32,
    /// The GPUs (or MIG instances) placed on, by UUID.
    pub gpus: Vec<String>,
    /// The GPU memory the placement counted for it, MiB, if it declared or was estimated any.
    pub requirement_mib: Option<u64>,
}

/// What one decision produced.
#[derive(Debug, Default)]
pub struct Placed {
    /// The records of the decision (commit B): Placed, changed reasons, Cancelled, Reserved.
    pub records: Vec<Record>,
    /// The attempts to launch once the records are committed.
    pub attempts: Vec<PlannedAttempt>,
    /// The round-robin cursor after this decision, journaled in TickCompleted.
    pub rr_cursor: u32,
    /// Tasks the decision cancelled (a dependency that can never be met): their private
    /// copies go once the records are committed.
    pub cancelled: Vec<TaskId>,
    /// Attempts preempted by this decision, to warn once the records are committed.
    pub preempt_notices: Vec<(TaskId, u32)>,
}

/// Runs the decision core on `state` and returns the records to commit before launching.
/// `present` are this tick's samples (GPUs that can take work now); `observed_mib` is each
/// running task's memory on its busiest GPU, from the same samples. With `disk_full` (the
/// state directory is below its free-space floor) nothing is placed and every waiting task
/// gets that reason, as with no GPUs. The waiting tasks of the users in `held_users` (over
/// their own bytes in the state directory, below the floor) get their user's reason and are
/// left out of the decision; the others' go on.
#[allow(clippy::too_many_arguments)] // one input per edge the tick observed, as before
pub fn place(
    state: &State,
    present: &[GpuSample],
    observed_mib: &BTreeMap<TaskId, u64>,
    config: &Config,
    now_ms: u64,
    no_gpu_reason: Option<&str>,
    disk_full: Option<&str>,
    held_users: &BTreeMap<u32, String>,
) -> Placed {
    let held = |task: &&Task| held_users.contains_key(&task.submitter_uid);
    let mut placed = place_waiting(
        state,
        state.waiting().filter(|task| !held(task)).collect(),
        (present, observed_mib, config, now_ms),
        no_gpu_reason,
        disk_full,
    );
    for task in state.waiting().filter(held) {
        let reason = &held_users[&task.submitter_uid];
        placed.records.extend(pending_record(task, reason, now_ms));
    }
    placed
}

/// [`place`] over `waiting_refs` (sorted by id, State's order, so a pending reason can find
/// its task by binary search).
fn place_waiting(
    state: &State,
    waiting_refs: Vec<&Task>,
    (present, observed_mib, config, now_ms): (&[GpuSample], &BTreeMap<TaskId, u64>, &Config, u64),
    no_gpu_reason: Option<&str>,
    disk_full: Option<&str>,
) -> Placed {
    let waiting = waiting_tasks(state, &waiting_refs, config, now_ms);
    if waiting.is_empty() {
        return Placed { rr_cursor: state.rr_cursor, ..Placed::default() };
    }
    if let Some(reason) = held_reason(present, no_gpu_reason, disk_full) {
        let records = waiting_refs.iter().filter_map(|task| pending_record(task, &reason, now_ms)).collect();
        return Placed { records, rr_cursor: state.rr_cursor, ..Placed::default() };
    }
    let gpus = gpu_views(state, present, now_ms, config.tick.window);
    let mut running = running_tasks(state, observed_mib);
    running.extend(held_rooms(state, observed_mib, now_ms));
    let usage = usage_by_user(state, &config.sched, now_ms);
    let reservation = reservation_input(state);
    let gpu_reservations = crate::journal::reservations::for_sched(state);
    let input = SchedInput {
        now_ms,
        gpus: &gpus,
        waiting: &waiting,
        running: &running,
        rr_cursor: state.rr_cursor,
        config: &config.sched,
        gate: GateInput {
            usage: &usage,
            reservation: reservation.as_ref(),
            gpu_reservations: &gpu_reservations,
        },
    };
    let decided = super::preempt::decide(state, &input, config, now_ms);
    let decision = decided.decision;
    let mut placed = Placed { rr_cursor: decision.rr_cursor, ..Placed::default() };
    placed.records.extend(super::gate::decision_records(state, &decision, now_ms));
    placed.records.extend(decided.records);
    placed.preempt_notices = decided.notices;
    placed.cancelled = decision.cancellations.iter().filter_map(|c| TaskId::parse(&c.task_id)).collect();
    for placement in decision.placements {
        add_placement(&mut placed, state, placement, now_ms);
    }
    // sched walks the queue by submit order, which is almost always id order too: try the
    // task after the last one found before searching.
    let mut next = 0;
    for pending in decision.pending {
        let at = match waiting_refs.get(next) {
            Some(task) if task.id.as_str() == pending.task_id => next,
            _ => match waiting_refs.binary_search_by(|t| t.id.as_str().cmp(&pending.task_id)) {
                Ok(found) => found,
                Err(_) => unreachable!("sched left {} pending which is not a waiting task", pending.task_id),
            },
        };
        next = at + 1;
        let reason = match config.sched.order.by_size() {
            // Under the size order a task's place rests on its expected size: say it, and whence.
            true => format!("{}; {}", pending.reason, sched::size_note(&waiting[at])),
            false => pending.reason,
        };
        placed.records.extend(pending_record(waiting_refs[at], &reason, now_ms));
    }
    placed
}

/// One placement of the decision: its Placed record and the attempt to launch after commit.
fn add_placement(placed: &mut Placed, state: &State, placement: sched::Placement, now_ms: u64) {
    let Some(task) = TaskId::parse(&placement.task_id).and_then(|id| state.tasks.get(&id)) else {
        unreachable!("sched placed {} which is not a waiting task", placement.task_id)
    };
    let attempt = task.next_attempt_number();
    placed.records.push(Record {
        time_ms: now_ms,
        event: Event::Placed {
            task: task.id.clone(),
            attempt,
            gpus: placement.gpus.clone(),
            exclusive: placement.exclusive,
            requirement_mib: placement.requirement_mib,
            reason: placement.reason,
        },
    });
    placed.attempts.push(PlannedAttempt {
        task: task.id.clone(),
        attempt,
        gpus: placement.gpus,
        requirement_mib: placement.requirement_mib,
    });
}

/// Why no task can be placed at all this tick, if so. A full disk comes first: it is the
/// operator's to fix, and GPUs would not help.
fn held_reason(
    present: &[GpuSample],
    no_gpu_reason: Option<&str>,
    disk_full: Option<&str>,
) -> Option<String> {
    let no_gpus = || format!("no GPUs available: {}", no_gpu_reason.unwrap_or("the probe found none"));
    disk_full.map(str::to_string).or_else(|| present.is_empty().then(no_gpus))
}

/// A Pending record only when the reason changed, so a queue that waits for hours does not
/// write a record per task per tick.
fn pending_record(task: &Task, reason: &str, now_ms: u64) -> Option<Record> {
    (task.pending_reason() != Some(reason)).then(|| Record {
        time_ms: now_ms,
        event: Event::Pending { task: task.id.clone(), reason: reason.to_string() },
    })
}

// The figure lives with the Task, below both the tick and the Slurm hooks that use it.
pub use crate::journal::state::requirement_mib;

fn waiting_tasks(state: &State, waiting: &[&Task], config: &Config, now_ms: u64) -> Vec<WaitingTask> {
    let learned = config.tick.memory == MemorySource::Learned;
    // Only the size order reads the expected run; without it the pass over the tasks is saved.
    let by_size = config.sched.order.by_size();
    let priors = if by_size { learned::width_priors(state) } else { BTreeMap::new() };
    let peaks = if learned {
        learned::running_peaks(state, now_ms, config.sched.in_flight_grace_ms)
    } else {
        BTreeMap::new()
    };
    waiting
        .iter()
        .map(|task| {
            let mut requirement = requirement_mib(task, config.tick.memory);
            if learned {
                requirement = learned::memory_mib(state, task, &peaks).or(requirement);
            }
            // The mode was decoded once, by the fold, from the Requeued record.
            let recovery = task.recovery_mode().map(|mode| Recovery {
                oom_count: task.oom_count,
                requirement_mib: task
                    .recovery_requirement_mib
                    .or(requirement)
                    .unwrap_or(config.sched.recovery.step_mib),
                mode,
            });
            WaitingTask {
                // Not to_string(): the formatter showed in the profile of a long queue.
                id: task.id.as_str().to_owned(),
                submit_seq: task.submit_seq,
                gpus: task.spec.gpus,
                requirement_mib: requirement,
                recovery,
                gate: task_gate(state, task),
                mig_profile: task.spec.mig_profile.clone(),
                submitted_ms: task.submitted_ms,
                sm_estimate: learned::sm_estimate(state, task, None),
                runtime_estimate_ms: learned::runtime_estimate_ms(state, task),
                expected_run: if by_size { learned::expected_run(state, task, &priors) } else { None },
            }
        })
        .collect()
}

/// The placement targets: every healthy GPU without MIG (windowed from its history), every
/// MIG instance of a healthy GPU with MIG on (from this tick's sample), and every GPU that
/// cannot take work, marked unavailable with the reason pending tasks will show. A GPU with
/// MIG on is never a target itself.
pub(super) fn gpu_views(state: &State, present: &[GpuSample], now_ms: u64, window_ms: u64) -> Vec<GpuView> {
    let mut views = Vec::with_capacity(present.len());
    for sample in present {
        let Some(gpu) = state.gpus.get(&sample.uuid) else { continue };
        if let Some(why) = unavailable_reason(sample) {
            views.push(unavailable_view(sample, why));
        } else if sample.mig.is_on() {
            views.extend(sample.mig.instances.iter().map(|instance| mig_view(sample, instance)));
        } else {
            views.extend(sched::window(&window_samples(gpu), now_ms, window_ms));
        }
    }
    views
}

/// Why a GPU (with everything on it) takes no work now, or `None`.
fn unavailable_reason(sample: &GpuSample) -> Option<String> {
    if let Some(reason) = sample.health.reason() {
        return Some(reason);
    }
    match (sample.mig.enabled, sample.mig.instances.is_empty()) {
        // A GPU whose MIG mode is unknown may be in MIG mode, where the whole GPU shows CUDA
        // no device: not placed on until the mode reads again.
        (None, _) => Some("MIG mode unreadable; see `carma gpus`".to_string()),
        (Some(true), true) => Some(
            "MIG on but no MIG instance exists; create some (nvidia-smi mig -cgi PROFILE -C)".to_string(),
        ),
        _ => None,
    }
}

fn unavailable_view(sample: &GpuSample, why: String) -> GpuView {
    GpuView {
        uuid: sample.uuid.clone(),
        index: sample.index,
        memory_total_mib: sample.memory_total_mib,
        memory_free_mib: sample.memory_free_mib.min(sample.memory_total_mib),
        sm_active: None,
        sm_occupancy: None,
        dram_active: None,
        sample_age_ms: 0,
        memory_reserved_mib: sample.memory_reserved_mib.unwrap_or(0),
        sm_basis: SmBasis::Measured,
        mig: None,
        unavailable: Some(why),
    }
}

/// One MIG instance as a target of its own: its memory, its UUID (what CUDA_VISIBLE_DEVICES
/// gets), its parent's index. NVML measures no SM activity per instance, so it is unknown.
fn mig_view(parent: &GpuSample, instance: &MigInstance) -> GpuView {
    GpuView {
        uuid: instance.uuid.clone(),
        index: parent.index,
        memory_total_mib: instance.memory_total_mib,
        memory_free_mib: instance.memory_total_mib.saturating_sub(instance.memory_used_mib),
        sm_active: None,
        sm_occupancy: None,
        dram_active: None,
        sample_age_ms: 0,
        memory_reserved_mib: 0,
        sm_basis: SmBasis::Measured,
        mig: Some(MigTarget { slot: instance.index, profile: instance.profile.clone() }),
        unavailable: None,
    }
}

fn window_samples(gpu: &GpuState) -> Vec<WindowSample> {
    gpu.history
        .iter()
        .map(|p| WindowSample {
            uuid: gpu.uuid.clone(),
            index: gpu.index,
            at_ms: p.time_ms,
            memory_total_mib: p.memory_total_mib,
            memory_free_mib: p.memory_free_mib,
            memory_reserved_mib: p.memory_reserved_mib,
            sm_active: p.sm_active,
            sm_basis: match p.sm_active_source {
                SmSource::DeviceUtil => SmBasis::DeviceUtil,
                SmSource::ProcessUtil => SmBasis::ProcessUtil,
                _ => SmBasis::Measured,
            },
            sm_occupancy: p.sm_occupancy,
            dram_active: p.dram_active,
        })
        .collect()
}

/// The running tasks as the scheduler sees them; a suspended attempt holds no GPU memory and
/// is not among them (`mode = "suspend"`; its room is [`held_rooms`]). An attempt resumed
/// counts as launched at its resume: its memory comes back while in flight.
pub(super) fn running_tasks(state: &State, observed_mib: &BTreeMap<TaskId, u64>) -> Vec<RunningTask> {
    state
        .tasks
        .values()
        .filter_map(|task| {
            let attempt = task.active_attempt().filter(|a| a.suspended.is_none())?;
            let launched_ms = attempt.launched_ms.unwrap_or(attempt.placed_ms);
            Some(RunningTask {
                id: task.id.as_str().to_owned(),
                gpus: attempt.gpus.clone(),
                requirement_mib: attempt.requirement_mib,
                launched_ms: launched_ms.max(attempt.resumed_ms.unwrap_or(0)),
                observed_mib: observed_mib.get(&task.id).copied(),
                exclusive: attempt.exclusive,
                gate: running_gate(task),
                sm_estimate: learned::sm_estimate(state, task, Some(attempt)),
                runtime_estimate_ms: learned::runtime_estimate_ms(state, task),
            })
        })
        .collect()
}

/// The room each suspended attempt keeps on its GPUs for its resume once its preemptor no
/// longer waits (`sched::held_room`), as running tasks in flight.
pub(super) fn held_rooms(
    state: &State,
    observed_mib: &BTreeMap<TaskId, u64>,
    now_ms: u64,
) -> Vec<RunningTask> {
    state
        .tasks
        .values()
        .filter_map(|task| {
            let attempt = task.active_attempt()?;
            let suspended = suspended_view(state, task, attempt, observed_mib)?;
            let template = RunningTask {
                id: String::new(),
                gpus: Vec::new(),
                requirement_mib: None,
                launched_ms: now_ms,
                observed_mib: None,
                exclusive: attempt.exclusive,
                gate: running_gate(task),
                sm_estimate: learned::sm_estimate(state, task, Some(attempt)),
                runtime_estimate_ms: learned::runtime_estimate_ms(state, task),
            };
            sched::held_room(&suspended, template, now_ms)
        })
        .collect()
}

/// A suspended attempt as `sched`'s resume rules see it; `None` when it is not suspended.
pub(super) fn suspended_view(
    state: &State,
    task: &Task,
    attempt: &crate::journal::state::Attempt,
    observed_mib: &BTreeMap<TaskId, u64>,
) -> Option<sched::Suspended> {
    let suspension = attempt.suspended.as_ref()?;
    let preemptor_waiting =
        state.tasks.get(&suspension.by).is_some_and(|p| p.status() == crate::journal::Status::Pending);
    Some(sched::Suspended {
        id: task.id.as_str().to_string(),
        gpus: attempt.gpus.clone(),
        requirement_mib: attempt.requirement_mib,
        preemptor_waiting,
        observed_mib: observed_mib.get(&task.id).copied(),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::gpu::fake::tests::sample_minimal;
    use crate::gpu::{GpuHealth, MigInfo};

    const NOW_MS: u64 = 1_000_000;

    /// State after one tick that journaled these samples.
    fn state_with(samples: &[GpuSample]) -> State {
        let mut state = State::default();
        let mut seq = 0;
        for sample in samples {
            for event in [
                Event::GpuDiscovered {
                    uuid: sample.uuid.clone(),
                    index: sample.index,
                    name: sample.name.clone(),
                    memory_total_mib: sample.memory_total_mib,
                },
                Event::MetricSample { sample: sample.clone() },
            ] {
                seq += 1;
                state.apply(seq, &Record { time_ms: NOW_MS, event });
            }
        }
        state
    }

    /// Goal: below the free-space floor nothing is placed and every waiting task gets the
    /// DiskFull reason word for word, recorded once; with room, the same state places as
    /// before. Method: one idle GPU and one small task, `place` called both ways.
    #[test]
    fn a_full_disk_places_nothing_and_says_why() {
        let mut state = state_with(&[sample_minimal("GPU-a")]);
        let task = TaskId::from_parts(NOW_MS, 1);
        let spec = crate::spec::parse_toml("t", "name = \"t\"\ncommand = [\"true\"]\nmemory = \"1GiB\"\n")
            .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
            .expect("spec");
        let submitted = Event::Submitted { task: task.clone(), submitter_uid: 1000, spec };
        state.apply(state.last_seq + 1, &Record { time_ms: NOW_MS, event: submitted });
        let present = [sample_minimal("GPU-a")];
        let config = Config::default();
        let reason =
            crate::tick::disk_full(Some(310 << 20), 512 << 20, std::path::Path::new("/var/lib/carma"))
                .expect("below the floor")
                .reason;
        let held =
            place(&state, &present, &BTreeMap::new(), &config, NOW_MS, None, Some(&reason), &BTreeMap::new());
        assert!(held.attempts.is_empty(), "{:?}", held.attempts);
        let expected = "DiskFull: less than 512 MiB free in /var/lib/carma, the [limits] free-space-floor; free space there or lower the floor";
        let events: Vec<Event> = held.records.iter().map(|r| r.event.clone()).collect();
        assert_eq!(events, [Event::Pending { task: task.clone(), reason: expected.into() }]);

        let placed = place(&state, &present, &BTreeMap::new(), &config, NOW_MS, None, None, &BTreeMap::new());
        assert_eq!(placed.attempts.len(), 1, "with room the task is placed");
        assert_eq!(placed.attempts[0].gpus, ["GPU-a"]);

        // Recorded once: the next tick below the floor journals nothing new for the task.
        for record in &held.records {
            state.apply(state.last_seq + 1, record);
        }
        let again = place(
            &state,
            &present,
            &BTreeMap::new(),
            &config,
            NOW_MS + 5000,
            None,
            Some(&reason),
            &BTreeMap::new(),
        );
        assert!(again.records.is_empty() && again.attempts.is_empty());
    }

    fn instance(uuid: &str, slot: u32, profile: &str, total: u64, used: u64) -> MigInstance {
        MigInstance {
            uuid: uuid.to_string(),
            index: slot,
            profile: Some(profile.to_string()),
            memory_total_mib: total,
            memory_used_mib: used,
            processes: Vec::new(),
        }
    }

    /// Goal: a MIG GPU is replaced by its instances, an unhealthy GPU is kept but unavailable
    /// with its reason, a MIG GPU without instances is unavailable, and reserved memory and a
    /// coarse SM source reach the view.
    #[test]
    fn views_follow_mig_and_health() {
        let mut mig = sample_minimal("GPU-mig");
        mig.mig = MigInfo {
            enabled: Some(true),
            instances: vec![
                instance("MIG-a", 0, "3g.20gb", 20_000, 1000),
                instance("MIG-b", 2, "1g.5gb", 5000, 0),
            ],
        };
        let mut lost = sample_minimal("GPU-lost");
        lost.index = 1;
        lost.health = GpuHealth::Lost { detail: "NVML_ERROR_GPU_IS_LOST reading memory".into() };
        let mut empty_mig = sample_minimal("GPU-empty");
        empty_mig.index = 2;
        empty_mig.mig = MigInfo { enabled: Some(true), instances: Vec::new() };
        let mut plain = sample_minimal("GPU-plain");
        plain.index = 3;
        plain.memory_free_mib = 40960 - 1536;
        plain.memory_reserved_mib = Some(1536);
        (plain.sm_active, plain.sm_active_source) = (Some(0.5), SmSource::DeviceUtil);
        let samples = [mig, lost, empty_mig, plain];
        let views = gpu_views(&state_with(&samples), &samples, NOW_MS, 90_000);
        let summary: Vec<(&str, u32, Option<u32>, Option<&str>)> = views
            .iter()
            .map(|v| (v.uuid.as_str(), v.index, v.mig.as_ref().map(|m| m.slot), v.unavailable.as_deref()))
            .collect();
        assert_eq!(
            summary,
            [
                ("MIG-a", 0, Some(0), None),
                ("MIG-b", 0, Some(2), None),
                ("GPU-lost", 1, None, Some("lost (NVML_ERROR_GPU_IS_LOST reading memory)")),
                (
                    "GPU-empty",
                    2,
                    None,
                    Some("MIG on but no MIG instance exists; create some (nvidia-smi mig -cgi PROFILE -C)")
                ),
                ("GPU-plain", 3, None, None),
            ]
        );
        assert_eq!((views[0].memory_total_mib, views[0].memory_free_mib), (20_000, 19_000));
        assert_eq!(views[1].mig.as_ref().and_then(|m| m.profile.as_deref()), Some("1g.5gb"));
        assert_eq!((views[4].memory_reserved_mib, views[4].sm_basis), (1536, SmBasis::DeviceUtil));
    }

    fn arb_sample() -> impl Strategy<Value = GpuSample> {
        let health = prop_oneof![
            4 => Just(GpuHealth::Healthy),
            1 => Just(GpuHealth::Lost { detail: "gone".into() }),
            1 => Just(GpuHealth::XidError { xid: 79, detail: "bus".into() }),
            1 => Just(GpuHealth::Unreadable { detail: "memory".into() }),
        ];
        let mig = prop_oneof![Just(Some(false)), Just(Some(true)), Just(None)];
        (health, mig, 0usize..4).prop_map(|(health, enabled, count)| {
            let mut sample = sample_minimal("GPU-x");
            sample.health = health;
            let instances = if enabled == Some(true) {
                (0..count).map(|slot| instance("MIG-x", slot as u32, "1g.5gb", 5000, 0)).collect()
            } else {
                Vec::new()
            };
            sample.mig = MigInfo { enabled, instances };
            sample
        })
    }

    proptest! {
        /// Goal: whatever mix of health and MIG the probe reports, a GPU with MIG on (or with
        /// its mode unknown) and an unhealthy GPU are never available targets, no instance of
        /// an unhealthy GPU is a target, and every instance of a healthy MIG GPU is one.
        #[test]
        fn mig_parents_and_unhealthy_gpus_are_never_available(mut samples in prop::collection::vec(arb_sample(), 1..6)) {
            for (index, sample) in samples.iter_mut().enumerate() {
                sample.index = index as u32;
                sample.uuid = format!("GPU-{index}");
                for instance in &mut sample.mig.instances {
                    instance.uuid = format!("MIG-{index}-{}", instance.index);
                }
            }
            let views = gpu_views(&state_with(&samples), &samples, NOW_MS, 90_000);
            for sample in &samples {
                let whole = views.iter().find(|v| v.uuid == sample.uuid);
                let usable_whole = sample.health.is_healthy() && sample.mig.enabled == Some(false);
                prop_assert_eq!(whole.is_some_and(|v| v.unavailable.is_none()), usable_whole, "{:?}", sample);
                for instance in &sample.mig.instances {
                    let target = views.iter().find(|v| v.uuid == instance.uuid);
                    prop_assert_eq!(target.is_some(), sample.health.is_healthy(), "{:?}", instance);
                }
            }
        }
    }
}
