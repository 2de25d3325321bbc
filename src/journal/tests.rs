//! Journal tests: the fold is total and deterministic, a snapshot plus its tail equals the
//! full fold (at a fixed interval and under the size rule), a cached State is the fold or is
//! not used, and the on-disk encoding does not drift.

use proptest::prelude::*;

use super::event::{self, DecodeError, Event, ProcessRef, Record};
use super::state::{State, Status};
use super::store::{Journal, StateCache};
use crate::id::TaskId;
use crate::spec::{ReferenceMib, TaskSpec};

fn spec(name: &str) -> TaskSpec {
    TaskSpec {
        name: name.into(),
        command: vec!["python".into(), "train.py".into()],
        workdir: "/w".into(),
        env: vec![("A".into(), "1".into())],
        gpus: 1,
        memory_mib: Some(1024),
        model_summary: None,
        batch_size: Some(32),
        max_retries: 3,
        time_limit_ms: None,
        dataset: None,
        policy_hint: None,
        reference: ReferenceMib::default(),
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
        (task.clone(), attempt).prop_map(|(task, attempt)| Event::Lost {
            task,
            attempt,
            reason: "reboot".into()
        }),
        (task, any::<bool>()).prop_map(|(task, recovery)| Event::Requeued {
            task,
            recovery,
            requirement_mib: Some(2048),
            recovery_mode: "exclusive".into(),
            reason: "oom".into()
        }),
        Just(Event::TickCompleted { ingested: 1, rejected: 0, placed: 0, duration_us: 10, rr_cursor: 1 }),
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
        for task in state.tasks.values() {
            let active = task.attempts.iter().filter(|a| a.is_active()).count();
            prop_assert!(active <= 1, "at most one active attempt: {:?}", task.attempts);
            if task.status.is_terminal() {
                prop_assert!(task.ended_ms.is_some());
            }
            if matches!(task.status, Status::Placed | Status::Running) {
                prop_assert!(task.active_attempt().is_some(), "placed/running has an active attempt");
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
        let _ = event::decode(&bytes);
        let mut versioned = vec![event::FORMAT_VERSION];
        versioned.extend_from_slice(&bytes);
        let _ = event::decode(&versioned);
    }
}

#[test]
fn encoding_of_a_fixture_record_does_not_drift() {
    // If this fails, the on-disk format changed: bump FORMAT_VERSION and add an upgrade
    // path instead of changing the expected bytes.
    let record = Record {
        time_ms: 1_700_000_000_123,
        event: Event::Launched {
            task: TaskId::from_parts(1_700_000_000_000, 7),
            attempt: 2,
            supervisor: ProcessRef { pid: 4321, start_time_ticks: 99, boot_id: "boot".into() },
            adopted: true,
        },
    };
    let bytes = event::encode(&record);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, "01fd7b68e5cf8b0100000610303635777a736238303030303030303702fbe1106304626f6f7401");
    assert_eq!(event::decode(&bytes), Ok(record));
}

#[test]
fn decode_errors_are_specific() {
    assert_eq!(event::decode(&[]), Err(DecodeError::Empty));
    assert_eq!(event::decode(&[2, 0]), Err(DecodeError::UnknownVersion { found: 2 }));
    let mut bytes = event::encode(&Record {
        time_ms: 1,
        event: Event::TickCompleted { ingested: 0, rejected: 0, placed: 0, duration_us: 0, rr_cursor: 0 },
    });
    bytes.push(0);
    assert_eq!(event::decode(&bytes), Err(DecodeError::Trailing(1)));
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
