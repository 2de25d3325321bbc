//! The suspended attempt in the placement decision (`mode = "suspend"`). Method: State built by
//! folding the records a tick would have journaled (one 40 GiB GPU whose sample shows the
//! victim's memory released), then `place::place` and `suspend::resume_due` as the tick calls
//! them.

use std::collections::BTreeMap;

use super::super::place::place;
use super::resume_due;
use crate::config::Config;
use crate::gpu::GpuSample;
use crate::gpu::fake::tests::sample_minimal;
use crate::id::TaskId;
use crate::journal::{Event, ProcessRef, Record, State};
use crate::sched::PreemptionMode;

const NOW_MS: u64 = 1_800_000_000_000;
const GPU: &str = "GPU-a";

fn id(n: u8) -> TaskId {
    TaskId::from_parts(1_700_000_000_000 + u64::from(n), u32::from(n))
}

fn submitted(n: u8, memory: &str, extra: &str) -> Event {
    let text = format!("name = \"t{n}\"\ncommand = [\"true\"]\nmemory = \"{memory}\"\n{extra}");
    let spec = crate::spec::parse_toml("t", &text)
        .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
        .expect("spec");
    Event::Submitted { task: id(n), submitter_uid: 1000, spec }
}

/// Placed on the GPU with `requirement_mib` and launched an hour ago (long out of flight).
fn started(n: u8, requirement_mib: u64) -> [Event; 2] {
    [
        Event::Placed {
            task: id(n),
            attempt: 1,
            gpus: vec![GPU.into()],
            exclusive: false,
            requirement_mib: Some(requirement_mib),
            reason: "fits".into(),
        },
        Event::Launched {
            task: id(n),
            attempt: 1,
            supervisor: ProcessRef { pid: 100 + u32::from(n), start_time_ticks: 1, boot_id: "b".into() },
            adopted: false,
        },
    ]
}

/// The GPU with `free_mib` free, as this tick's sample.
fn sample(free_mib: u64) -> GpuSample {
    let mut sample = sample_minimal(GPU);
    sample.memory_free_mib = free_mib;
    sample.memory_used_mib = 40_960 - free_mib;
    sample
}

/// Folds `events` (an hour ago, then the GPU sample now) into a fresh State.
fn state_of(events: Vec<Event>, free_mib: u64) -> State {
    let mut state = State::default();
    let discovered =
        Event::GpuDiscovered { uuid: GPU.into(), index: 0, name: "A100".into(), memory_total_mib: 40_960 };
    let timed = std::iter::once((NOW_MS - 3_600_000, discovered))
        .chain(events.into_iter().map(|e| (NOW_MS - 3_600_000, e)))
        .chain(std::iter::once((NOW_MS, Event::MetricSample { sample: sample(free_mib) })));
    for (seq, (time_ms, event)) in timed.enumerate() {
        state.apply(seq as u64 + 1, &Record { time_ms, event });
    }
    state
}

fn suspend_config() -> Config {
    let mut config = Config::default();
    config.sched.preemption.mode = PreemptionMode::Suspend;
    config
}

fn placed_ids(state: &State, free_mib: u64) -> Vec<TaskId> {
    let placed = place(
        state,
        &[sample(free_mib)],
        &BTreeMap::new(),
        &suspend_config(),
        NOW_MS,
        None,
        None,
        &BTreeMap::new(),
    );
    placed.attempts.into_iter().map(|a| a.task).collect()
}

fn suspended(victim: u8, by: u8) -> Event {
    Event::Suspended { task: id(victim), attempt: 1, by: id(by) }
}

/// Goal: once its preemptor started, a suspended attempt keeps its room on its GPU: a newcomer
/// that would take it waits; the victim resumes as soon as the preemptor ends, and its memory
/// coming back counts in flight, so the newcomer does not take it that tick either. Method:
/// victim 1 (30 GiB) suspended for 2 (20 GiB), which runs on the GPU (20 GiB free); newcomer 3
/// asks for 12 GiB (14 with the margin).
#[test]
fn a_suspended_attempt_keeps_its_room_once_its_preemptor_started() {
    let mut events = vec![submitted(1, "30GiB", "nice = 5\n")];
    events.extend(started(1, 30_720));
    events.extend([suspended(1, 2), submitted(2, "20GiB", "")]);
    events.extend(started(2, 20_480));
    events.push(submitted(3, "12GiB", ""));
    let state = state_of(events.clone(), 20_480);
    // The code before put 3 in the victim's room (20 GiB free, 14 GiB asked).
    assert_eq!(placed_ids(&state, 20_480), Vec::<TaskId>::new(), "3 waits for the victim's resume");
    let resumed = resume_due(&state, &[sample(20_480)], &BTreeMap::new(), &suspend_config(), NOW_MS);
    assert!(resumed.is_empty(), "no room for the victim yet: {resumed:?}");

    // The preemptor ended: the victim resumes.
    events.push(Event::Finished { task: id(2), attempt: 1, exit_ms: NOW_MS - 60_000 });
    let mut state = state_of(events, 40_960);
    let resumed = resume_due(&state, &[sample(40_960)], &BTreeMap::new(), &suspend_config(), NOW_MS);
    let expected = Event::Resumed { task: id(1), attempt: 1 };
    assert_eq!(resumed.iter().map(|r| &r.event).collect::<Vec<_>>(), [&expected]);
    let seq = state.last_seq + 1;
    state.apply(seq, &resumed[0]);
    // 40 GiB free in the sample, 30 GiB of it coming back to the victim: 3 still waits.
    assert_eq!(placed_ids(&state, 40_960), Vec::<TaskId>::new());
}

/// Goal: a newcomer that asks more than what is left beyond a suspended attempt's room waits,
/// whatever the sample says is free. Method: the preemptor 2 ended and was not yet followed
/// by the resume; newcomer 3 asks for 20 GiB of the 40 GiB the sample shows free.
#[test]
fn a_newcomer_does_not_take_the_room_of_a_suspended_attempt() {
    let mut events = vec![submitted(1, "30GiB", "nice = 5\n")];
    events.extend(started(1, 30_720));
    events.extend([
        suspended(1, 2),
        Event::Cancelled { task: id(2), by_uid: 1000, reason: "by its user".into() },
    ]);
    events.push(submitted(3, "20GiB", ""));
    let state = state_of(events, 40_960);
    assert_eq!(placed_ids(&state, 40_960), Vec::<TaskId>::new());
}

/// Goal: after a suspension the preemptor is decided first, as after a requeue: a task ahead
/// of it in the queue does not take the room the victim gave. Method: victim 1 suspended for
/// 3; 2 (same priority, submitted before 3) and 3 both ask for 30 GiB of the 40 GiB free.
#[test]
fn after_a_suspension_the_preemptor_is_decided_first() {
    let mut events = vec![submitted(1, "30GiB", "nice = 5\n")];
    events.extend(started(1, 30_720));
    events.extend([submitted(2, "30GiB", ""), submitted(3, "30GiB", ""), suspended(1, 3)]);
    let state = state_of(events, 40_960);
    assert_eq!(placed_ids(&state, 40_960), [id(3)]);
}
