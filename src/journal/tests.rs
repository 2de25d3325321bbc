//! Journal tests: the fold is total and deterministic, a snapshot plus its tail equals the
//! full fold (at a fixed interval and under the size rule), a cached State is the fold or is
//! not used, and the on-disk encoding does not drift.

use proptest::prelude::*;

use super::event::{Event, ProcessRef, Record, RequeueMode};
use super::frame::{self, DecodeError};
use super::phase::Phase;
use super::state::{State, Status};
use super::store::{Journal, StateCache};
use crate::id::TaskId;
use crate::sched::RecoveryMode;
use crate::spec::{ReferenceMib, TaskSpec};

fn spec(name: &str) -> TaskSpec {
    TaskSpec {
        name: name.into(),
        command: vec!["python".into(), "train.py".into()],
        workdir: "/w".into(),
        program: Some("/usr/bin/python".into()),
        env_names: vec!["A".into()],
        export: Some("ALL".into()),
        output: None,
        error: None,
        gpus: 1,
        memory_mib: Some(1024),
        model_summary: None,
        batch_size: Some(32),
        max_retries: 3,
        time_limit_ms: None,
        dataset: None,
        policy_hint: None,
        reference: ReferenceMib::default(),
        ..TaskSpec::default()
    }
}

fn id(n: u8) -> TaskId {
    TaskId::from_parts(1_700_000_000_000 + u64::from(n), u32::from(n))
}

/// Any event about one of five tasks, in any order: including orders a correct tick would
/// never write, because the fold must survive them.
fn arb_event() -> impl Strategy<Value = Event> {
    let task = (0u8..5).prop_map(id);
    let attempt = 1u32..4;
    prop_oneof![
        task.clone().prop_map(|task| Event::Submitted { task, submitter_uid: 1000, spec: spec("t") }),
        (task.clone(), any::<bool>()).prop_map(|(task, named)| Event::Rejected {
            task: named.then_some(task),
            spool_file: "x.toml".into(),
            submitter_uid: 7,
            reason: "bad".into()
        }),
        task.clone().prop_map(|task| Event::Cancelled { task, by_uid: 0, reason: "stop".into() }),
        task.clone().prop_map(|task| Event::Pending { task, reason: "waiting".into() }),
        (task.clone(), attempt.clone()).prop_map(|(task, attempt)| Event::Placed {
            task,
            attempt,
            gpus: vec!["GPU-0".into()],
            exclusive: false,
            requirement_mib: Some(100),
            reason: "fits".into()
        }),
        (task.clone(), attempt.clone()).prop_map(|(task, attempt)| Event::Launched {
            task,
            attempt,
            supervisor: ProcessRef { pid: 42, start_time_ticks: 9, boot_id: "b".into() },
            adopted: false
        }),
        (task.clone(), attempt.clone()).prop_map(|(task, attempt)| Event::Finished {
            task,
            attempt,
            exit_ms: 5
        }),
        (task.clone(), attempt.clone()).prop_map(|(task, attempt)| Event::Failed {
            task,
            attempt,
            outcome: "exit 3".into(),
            reason: "no".into()
        }),
        (task.clone(), attempt.clone()).prop_map(|(task, attempt)| Event::OomDetected {
            task,
            attempt,
            evidence: "CUDA out of memory".into(),
            peak_mib: Some(9)
        }),
        (task.clone(), attempt.clone()).prop_map(|(task, attempt)| Event::Lost {
            task,
            attempt,
            reason: "reboot".into()
        }),
        (task.clone(), attempt.clone(), proptest::collection::vec(2u32..100, 0..3)).prop_map(
            |(task, attempt, remaining)| Event::Reaped {
                task,
                attempt,
                processes: 2,
                remaining,
                detail: "killed".into()
            }
        ),
        (task.clone(), any::<bool>(), arb_requeue_mode()).prop_map(|(task, recovery, recovery_mode)| {
            Event::Requeued {
                task,
                recovery,
                requirement_mib: Some(2048),
                recovery_mode,
                reason: "oom".into(),
            }
        }),
        (task.clone(), attempt.clone()).prop_map(|(task, attempt)| Event::Stopped {
            task,
            attempt,
            outcome: "signal 15".into()
        }),
        (task.clone(), any::<bool>()).prop_map(|(task, hold)| if hold {
            Event::Held { task, by_uid: 1000 }
        } else {
            Event::Released { task, by_uid: 1000 }
        }),
        task.clone().prop_map(|task| Event::RequeueRequested { task, by_uid: 1000 }),
        (task.clone(), attempt.clone(), any::<bool>()).prop_map(|(task, attempt, relaunch)| {
            Event::MemoryExceeded {
                task,
                attempt,
                gpu: "GPU-a".into(),
                used_mib: 10_035,
                declared_mib: 1024,
                reason: "used 9.8 GiB on GPU0, declared 1.0 GiB (+ 1.0 GiB margin)".into(),
                share_source: relaunch.then_some(crate::sched::ShareSource::Declared),
            }
        }),
        Just(Event::TickCompleted { ingested: 1, rejected: 0, placed: 0, duration_us: 10, rr_cursor: 1 }),
        (task.clone(), 1u32..4, -0.5f32..1.5).prop_map(|(task, attempt, sm_util)| Event::SmObserved {
            task,
            attempt,
            sm_util
        }),
        (task, 1u32..4, 0u64..40_000).prop_map(|(task, attempt, peak_mib)| Event::Usage {
            task,
            attempt,
            peak_mib
        }),
    ]
}

fn arb_requeue_mode() -> impl Strategy<Value = RequeueMode> {
    prop_oneof![
        Just(RequeueMode::Main),
        Just(RequeueMode::User),
        Just(RequeueMode::Recovery(RecoveryMode::Exclusive)),
        Just(RequeueMode::Recovery(RecoveryMode::Looser)),
    ]
}

fn records(events: Vec<Event>) -> Vec<Record> {
    events.into_iter().enumerate().map(|(i, event)| Record { time_ms: 1000 + i as u64, event }).collect()
}

/// Creates a journal at `path`, lets `configure` set its snapshot rule, appends `records` in
/// chunks of `batch`, closes it and opens it again: the State the writer kept, and the reopened
/// journal.
fn append_and_reopen(
    path: &std::path::Path,
    records: &[Record],
    batch: usize,
    configure: impl FnOnce(&mut Journal),
) -> (State, Journal) {
    Journal::create(path).unwrap();
    let mut journal = Journal::open(path).unwrap();
    configure(&mut journal);
    let mut state = journal.load_state().unwrap();
    for chunk in records.chunks(batch) {
        journal.append(chunk, &mut state).unwrap();
    }
    drop(journal);
    (state, Journal::open(path).unwrap())
}

fn fold(records: &[Record]) -> State {
    let mut state = State::default();
    for (i, record) in records.iter().enumerate() {
        state.apply(i as u64 + 1, record);
    }
    state
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any event sequence folds, deterministically, and keeps the task invariants.
    #[test]
    fn fold_is_total_and_keeps_invariants(events in proptest::collection::vec(arb_event(), 0..120)) {
        let records = records(events);
        let state = fold(&records);
        prop_assert_eq!(&state, &fold(&records));
        prop_assert_eq!(state.check(), Ok(()));
        for task in state.tasks.values() {
            let active = task.attempts.iter().filter(|a| a.is_active()).count();
            prop_assert!(active <= 1, "at most one active attempt: {:?}", task.attempts);
            if task.status().is_terminal() {
                prop_assert!(task.ended_ms().is_some());
            }
            if matches!(task.status(), Status::Placed | Status::Running) {
                prop_assert!(task.active_attempt().is_some(), "placed/running has an active attempt");
            }
        }
    }

    /// After every record of any sequence, each task's phase agrees with its attempts and
    /// with the accessors derived from it: the promises of `journal::phase`.
    #[test]
    fn phase_agrees_with_attempts(events in proptest::collection::vec(arb_event(), 0..160)) {
        let mut state = State::default();
        for (i, record) in records(events).iter().enumerate() {
            state.apply(i as u64 + 1, record);
            prop_assert_eq!(state.check(), Ok(()), "after record {}: {:?}", i + 1, record);
            for task in state.tasks.values() {
                let open = task.active_attempt();
                let any_open = task.attempts.iter().any(|a| a.ended_ms.is_none());
                let status = task.status();
                match &task.phase {
                    Phase::Waiting { .. } => prop_assert!(!any_open, "waiting with an open attempt"),
                    Phase::Active { .. } => prop_assert!(open.is_some(), "active without an open attempt"),
                    Phase::Ended { survivors, .. } => {
                        prop_assert!(survivors.is_none() || open.is_some(), "survivors of a closed attempt");
                    }
                }
                prop_assert_eq!(status == Status::Pending, matches!(task.phase, Phase::Waiting { .. }));
                prop_assert_eq!(
                    status == Status::Running,
                    matches!(task.phase, Phase::Active { .. }) && open.is_some_and(|a| a.launched_ms.is_some())
                );
                prop_assert_eq!(status.is_terminal(), task.ended_ms().is_some());
                prop_assert_eq!(task.end_reason().is_some(), matches!(status, Status::Failed | Status::Cancelled));
                prop_assert!(!task.held() || status == Status::Pending, "held while {:?}", status);
                prop_assert!(!task.in_recovery() || status == Status::Pending, "in recovery while {:?}", status);
                prop_assert!(task.requeue_by().is_none() || open.is_some(), "a requeue asked of no attempt");
                prop_assert!(!task.held_by_survivors() || open.is_some());
            }
        }
    }

    /// A journal with snapshots every few events loads the same State as a full fold, and
    /// both equal the in-memory fold the writer kept.
    #[test]
    fn snapshot_plus_tail_equals_full_fold(
        events in proptest::collection::vec(arb_event(), 1..80),
        every in 1u64..9,
        batch in 1usize..7,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let records = records(events);
        let (state, mut reopened) =
            append_and_reopen(&dir.path().join("j.redb"), &records, batch, |j| j.set_snapshot_every(every));
        let loaded = reopened.load_state().unwrap();
        let full = reopened.fold_all().unwrap();
        prop_assert_eq!(&loaded, &full);
        prop_assert_eq!(&loaded, &state);
        prop_assert_eq!(&full, &fold(&records));
    }

    /// Under the size rule (snapshot once the events since the last one outweigh it), snapshot
    /// + tail still equals the full fold.
    #[test]
    fn snapshot_by_size_plus_tail_equals_full_fold(
        events in proptest::collection::vec(arb_event(), 1..160),
        floor in 1u64..9,
        batch in 1usize..7,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (state, mut reopened) = append_and_reopen(&dir.path().join("j.redb"), &records(events), batch, |j| {
            j.set_snapshot_floor_for_test(floor)
        });
        let loaded = reopened.load_state().unwrap();
        prop_assert_eq!(&loaded, &reopened.fold_all().unwrap());
        prop_assert_eq!(&loaded, &state);
    }

    /// Sessions that hand the State on through a cache, with other handles appending in
    /// between, always start from the journal's fold.
    #[test]
    fn cached_state_is_the_fold(
        events in proptest::collection::vec(arb_event(), 1..80),
        batch in 1usize..7,
        others in proptest::collection::vec(any::<bool>(), 1..20),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.redb");
        Journal::create(&path).unwrap();
        let mut cache = StateCache::default();
        for (i, chunk) in records(events).chunks(batch).enumerate() {
            let mut journal = Journal::open(&path).unwrap();
            if others[i % others.len()] {
                // Someone else appends between two sessions of the cache's owner.
                let mut state = journal.load_state().unwrap();
                journal.append(chunk, &mut state).unwrap();
                continue;
            }
            let mut state = journal.load_state_cached(&mut cache).unwrap();
            prop_assert_eq!(&state, &journal.fold_all().unwrap());
            journal.append(chunk, &mut state).unwrap();
            journal.keep_state(state, &mut cache);
        }
        let mut journal = Journal::open(&path).unwrap();
        let state = journal.load_state_cached(&mut cache).unwrap();
        prop_assert_eq!(&state, &journal.fold_all().unwrap());
    }

    /// Decoding arbitrary bytes returns an error or a record, never a panic.
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = frame::decode(1, &bytes);
        for version in [frame::FORMAT_VERSION, frame::LEGACY_FORMAT_VERSION] {
            let mut versioned = vec![version];
            versioned.extend_from_slice(&bytes);
            let _ = frame::decode(1, &versioned);
            let _ = frame::decode_frame(&versioned);
            let _ = frame::probable_task(&versioned);
        }
    }

    /// Goal: no flipped bit goes unnoticed. Method: flip any one bit of an encoded record;
    /// decoding must fail (a CRC-32 detects every single-bit error).
    #[test]
    fn every_single_bit_flip_is_detected(event in arb_event(), seq in 1u64..1_000_000, bit in any::<prop::sample::Index>()) {
        let record = Record { time_ms: 7, event };
        let mut bytes = frame::encode(seq, &record);
        prop_assert_eq!(frame::decode(seq, &bytes), Ok(record));
        let bit = bit.index(bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
        let decoded = frame::decode(seq, &bytes);
        prop_assert!(decoded.is_err(), "flip of bit {} not detected", bit);
        // Never blamed on a newer carma: the version byte is covered by the checksum too.
        prop_assert!(decoded.is_err_and(|e| e.is_damage()), "flip of bit {} not called damage", bit);
    }
}

fn launched_fixture() -> Record {
    Record {
        time_ms: 1_700_000_000_123,
        event: Event::Launched {
            task: TaskId::from_parts(1_700_000_000_000, 7),
            attempt: 2,
            supervisor: ProcessRef { pid: 4321, start_time_ticks: 99, boot_id: "boot".into() },
            adopted: true,
        },
    }
}

#[test]
fn encoding_of_a_fixture_record_does_not_drift() {
    // If this fails, the on-disk format changed: add a wire type or a format version and keep
    // reading the old one, instead of changing the expected bytes.
    let bytes = frame::encode(42, &launched_fixture());
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        hex,
        "0263726d612a0000000000000026000000fd7b68e5cf8b0100000610303635777a736238303030303030303702fbe1106304626f6f7401a2aedbd4"
    );
    assert_eq!(frame::decode(42, &bytes), Ok(launched_fixture()));
}

#[test]
fn carma_0_1_records_still_decode() {
    // The bytes carma 0.1 wrote for the same record (format 1: no frame, no checksum).
    let legacy = "01fd7b68e5cf8b0100000610303635777a736238303030303030303702fbe1106304626f6f7401";
    let bytes: Vec<u8> =
        (0..legacy.len()).step_by(2).map(|i| u8::from_str_radix(&legacy[i..i + 2], 16).unwrap()).collect();
    assert_eq!(frame::decode(5, &bytes), Ok(launched_fixture()));
}

#[test]
fn gpu_samples_are_written_in_the_0_2_shape_and_read_back_whole() {
    let sample = crate::gpu::GpuSample {
        memory_reserved_mib: Some(1536),
        health: crate::gpu::GpuHealth::XidError { xid: 79, detail: "fell off the bus".into() },
        sm_active_source: crate::gpu::SmSource::ProcessUtil,
        sm_active: Some(0.25),
        processes: vec![crate::gpu::GpuProcess { pid: 9, used_mib: Some(100), sm_util: Some(0.25) }],
        mig: crate::gpu::MigInfo {
            enabled: Some(true),
            instances: vec![crate::gpu::MigInstance {
                uuid: "MIG-x-1".into(),
                index: 1,
                profile: Some("1g.10gb".into()),
                memory_total_mib: 9856,
                memory_used_mib: 500,
                processes: vec![crate::gpu::GpuProcess { pid: 10, used_mib: Some(490), sm_util: None }],
            }],
        },
        ..crate::gpu::fake::tests::sample_minimal("GPU-x")
    };
    let record = Record { time_ms: 1, event: Event::MetricSample { sample } };
    let bytes = frame::encode(3, &record);
    let wire: super::wire::WireRecord = bincode::serde::decode_from_slice(
        &bytes[frame::FRAME_HEADER_BYTES..bytes.len() - 4],
        bincode::config::standard(),
    )
    .unwrap()
    .0;
    assert!(matches!(wire.event, super::wire::WireEvent::MetricSampleV2 { .. }), "{wire:?}");
    assert_eq!(frame::decode(3, &bytes), Ok(record));
}

/// Goal: a health change is written as its own 0.2 variant and read back whole.
#[test]
fn gpu_health_changes_round_trip() {
    for health in [
        crate::gpu::GpuHealth::Lost { detail: "NVML_ERROR_GPU_IS_LOST reading memory".into() },
        crate::gpu::GpuHealth::Unreadable { detail: "memory: Unknown".into() },
        crate::gpu::GpuHealth::Healthy,
    ] {
        let record =
            Record { time_ms: 5, event: Event::GpuHealthChanged { uuid: "GPU-y".into(), index: 2, health } };
        let bytes = frame::encode(8, &record);
        assert_eq!(frame::decode(8, &bytes), Ok(record));
    }
}

#[test]
fn decode_errors_are_specific() {
    assert_eq!(frame::decode(1, &[]), Err(DecodeError::Empty));
    assert_eq!(frame::decode(1, &[3, 0]), Err(DecodeError::UnknownVersion { found: 3 }));
    assert!(!DecodeError::UnknownVersion { found: 3 }.is_damage());
    let record = Record {
        time_ms: 1,
        event: Event::TickCompleted { ingested: 0, rejected: 0, placed: 0, duration_us: 0, rr_cursor: 0 },
    };
    let mut bytes = frame::encode(9, &record);
    assert_eq!(frame::decode(10, &bytes), Err(DecodeError::WrongSeq { found: 9 }));
    bytes.push(0);
    assert_eq!(frame::decode(9, &bytes), Err(DecodeError::Trailing(1)));
    bytes.truncate(bytes.len() - 3);
    assert_eq!(frame::decode(9, &bytes), Err(DecodeError::Damaged("the frame is cut short".into())));
    let mut bytes = frame::encode(9, &record);
    let last = bytes.len() - 1;
    bytes[last] ^= 0x10;
    assert_eq!(frame::decode(9, &bytes), Err(DecodeError::Damaged("checksum mismatch".into())));
    assert!(DecodeError::Damaged(String::new()).is_damage());
}

fn submitted(n: u8) -> Record {
    Record {
        time_ms: 1000 + u64::from(n),
        event: Event::Submitted { task: id(n), submitter_uid: 1, spec: spec("t") },
    }
}

#[test]
fn a_cache_is_not_used_on_a_new_journal_at_the_same_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    Journal::create(&path).unwrap();
    let mut cache = StateCache::default();
    let mut journal = Journal::open(&path).unwrap();
    let mut state = journal.load_state_cached(&mut cache).unwrap();
    journal.append(&[submitted(1), submitted(2)], &mut state).unwrap();
    journal.keep_state(state, &mut cache);
    drop(journal);

    // Same path, same number of records, a different last record.
    std::fs::remove_file(&path).unwrap();
    Journal::create(&path).unwrap();
    let mut journal = Journal::open(&path).unwrap();
    let mut state = journal.load_state().unwrap();
    journal.append(&[submitted(1), submitted(3)], &mut state).unwrap();
    drop(journal);

    let mut journal = Journal::open(&path).unwrap();
    let state = journal.load_state_cached(&mut cache).unwrap();
    assert_eq!(state, journal.fold_all().unwrap());
    assert!(state.knows(&id(3)) && !state.knows(&id(2)));
}

#[test]
fn a_failed_session_leaves_the_cache_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    Journal::create(&path).unwrap();
    let mut journal = Journal::open(&path).unwrap();
    let mut state = journal.load_state().unwrap();
    journal.append(&[submitted(1)], &mut state).unwrap();
    // A State ahead of its journal (as after a failed append) is not kept.
    state.apply(2, &submitted(2));
    let mut cache = StateCache::default();
    journal.keep_state(state, &mut cache);
    let state = journal.load_state_cached(&mut cache).unwrap();
    assert!(!state.knows(&id(2)));
    assert_eq!(state, journal.fold_all().unwrap());
}

#[test]
fn snapshots_by_size_are_sparse_on_a_growing_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    Journal::create(&path).unwrap();
    let mut journal = Journal::open(&path).unwrap();
    journal.set_snapshot_floor_for_test(1);
    let mut state = journal.load_state().unwrap();
    // A growing State (one task per record): a fixed interval of 1 would snapshot every time.
    let (mut snapshots, mut last_seen) = (0, 0);
    for n in 0..200u8 {
        journal.append(&[submitted(n)], &mut state).unwrap();
        let seq = journal.snapshot_seq().unwrap();
        if seq != last_seen {
            snapshots += 1;
            last_seen = seq;
        }
    }
    assert!(snapshots > 1, "the size rule still snapshots");
    assert!(snapshots < 20, "{snapshots} snapshots of a growing State in 200 appends");
    drop(journal);
    let mut journal = Journal::open(&path).unwrap();
    assert_eq!(journal.load_state().unwrap(), journal.fold_all().unwrap());
}

/// Goal: State learns each workload from the journal alone: its SM samples (per attempt and
/// per workload, out-of-range values ignored), its finished runs' time and memory peak, and
/// the fraction of their time limit finished attempts used. Method: two runs of the same
/// workload (same submitter, name, command) and one of another, folded.
#[test]
fn workload_history_learns_sm_run_time_and_peak() {
    let mut limited = spec("train");
    limited.time_limit_ms = Some(4_000_000);
    let task = |n: u8, spec: TaskSpec| Event::Submitted { task: id(n), submitter_uid: 1000, spec };
    let placed = |n: u8| Event::Placed {
        task: id(n),
        attempt: 1,
        gpus: vec!["GPU-0".into()],
        exclusive: false,
        requirement_mib: Some(100),
        reason: "fits".into(),
    };
    let launched = |n: u8| Event::Launched {
        task: id(n),
        attempt: 1,
        supervisor: ProcessRef { pid: 40 + u32::from(n), start_time_ticks: 1, boot_id: "b".into() },
        adopted: false,
    };
    let sm = |n: u8, sm_util: f32| Event::SmObserved { task: id(n), attempt: 1, sm_util };
    let events = [
        (0, task(1, limited.clone())),
        (0, task(2, limited)),
        (0, task(3, spec("other"))),
        (1_000, placed(1)),
        (1_000, launched(1)),
        (61_000, sm(1, 0.6)),
        (121_000, sm(1, 0.7)),
        (122_000, sm(1, f32::NAN)),
        (123_000, sm(1, 1.5)),
        (130_000, Event::Usage { task: id(1), attempt: 1, peak_mib: 9000 }),
        (2_001_000, Event::Finished { task: id(1), attempt: 1, exit_ms: 2_001_000 }),
        (2_002_000, placed(3)),
        (2_002_000, launched(3)),
        (2_062_000, sm(3, 0.2)),
    ];
    let records: Vec<Record> = events.into_iter().map(|(time_ms, event)| Record { time_ms, event }).collect();
    let state = fold(&records);
    let first = &state.tasks[&id(1)];
    let attempt = &first.attempts[0];
    assert_eq!((attempt.sm_util_samples, attempt.sm_util_last_ms), (2, Some(121_000)), "NaN and 1.5 ignored");
    assert!((attempt.sm_util_mean().unwrap() - 0.65).abs() < 1e-6);
    let second = &state.tasks[&id(2)];
    assert_eq!(first.workload_key(), second.workload_key(), "same submitter, name and command");
    assert_ne!(first.workload_key(), state.tasks[&id(3)].workload_key());
    let history = &state.workloads[&second.workload_key()];
    assert_eq!((history.runs, history.run_ms_sum, history.peak_mib), (1, 2_000_000, Some(9000)));
    assert!((history.sm_util_mean().unwrap() - 0.65).abs() < 1e-6);
    let other = &state.workloads[&state.tasks[&id(3)].workload_key()];
    assert_eq!((other.runs, other.sm_util_samples), (0, 1), "a running attempt teaches SM, not run time");
    assert_eq!(state.limit_use.runs, 1);
    assert!((state.limit_use.mean().unwrap() - 0.5).abs() < 1e-9, "2000 s of a 4000 s limit");
}

/// Goal: the workload table is bounded; the stalest workload goes first.
#[test]
fn workload_table_keeps_at_most_its_limit() {
    use super::state::WORKLOADS_MAX;
    let mut state = State::default();
    let mut seq = 0;
    for n in 0..=WORKLOADS_MAX as u64 {
        let id = TaskId::from_parts(1_700_000_000_000 + n, n as u32);
        let mut named = spec("t");
        named.name = format!("w{n}");
        for event in [
            Event::Submitted { task: id.clone(), submitter_uid: 1, spec: named },
            Event::Placed {
                task: id.clone(),
                attempt: 1,
                gpus: vec!["GPU-0".into()],
                exclusive: false,
                requirement_mib: None,
                reason: "r".into(),
            },
            Event::SmObserved { task: id.clone(), attempt: 1, sm_util: 0.5 },
        ] {
            seq += 1;
            state.apply(seq, &Record { time_ms: 1_000 + n, event });
        }
    }
    assert_eq!(state.workloads.len(), WORKLOADS_MAX);
    assert!(!state.workloads.keys().any(|k| k.contains("\u{1f}w0\u{1f}")), "the stalest, w0, was dropped");
    assert!(state.workloads.keys().any(|k| k.contains(&format!("\u{1f}w{WORKLOADS_MAX}\u{1f}"))));
}
