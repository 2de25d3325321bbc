//! Goal: the records a node's hooks journal fold into the State the rest of carma expects —
//! one task per Slurm job across requeues, attempts that open and close, the recovery rule's
//! figures in shards — and the tick's queue never holds a Slurm job.
//! Method: build JobStart/JobEnd values, fold the records into a State like the journal does.

use crate::exec::OomEvidence;
use crate::id::TaskId;
use crate::journal::{Event, Record, State, Status};
use crate::sched::{GpuAtEnd, MemoryAtEnd, RecoveryConfig, SupervisorAtEnd};

use super::comment::CarmaComment;
use super::records::{
    AfterOom, EndDecision, JobEnd, JobStart, decide_end, end_records, start_records, task_exports,
};
use super::shards::ShardRule;

const SUBMIT_MS: u64 = 1_790_000_000_000;

fn start(restart_count: u32, comment: Option<CarmaComment>, shards: u32) -> JobStart {
    JobStart {
        cluster: "lab".into(),
        job_id: 77,
        node: "n1".into(),
        restart_count,
        uid: 1000,
        name: "train resnet".into(),
        workdir: "/home/alice/exp".into(),
        comment,
        // Slurm moves SubmitTime forward on every requeue.
        submit_ms: SUBMIT_MS + u64::from(restart_count) * 60_000,
        started_ms: SUBMIT_MS + 1000 + u64::from(restart_count) * 60_000,
        gpus: vec!["GPU-a".into()],
        shards: Some(shards),
        rule: ShardRule::default(),
        boot_id: "boot".into(),
        array: None,
    }
}

fn mem_comment(mib: u64) -> CarmaComment {
    CarmaComment { mem_mib: Some(mib), need_mib: Some(mib), ..CarmaComment::default() }
}

fn fold(state: &mut State, records: &[Record]) {
    for record in records {
        let seq = state.last_seq + 1;
        state.apply(seq, record);
    }
}

fn kinds(records: &[Record]) -> Vec<&'static str> {
    records.iter().map(|r| r.event.kind()).collect()
}

/// What carma read near the end: GPU-a with `used` of its 16 GiB in use by the journal's
/// readings, and the watcher's peak and GPU reading, when it read any.
fn seen(used: Option<u64>, watcher: Option<(u64, u64)>) -> MemoryAtEnd {
    MemoryAtEnd {
        gpus: vec![GpuAtEnd {
            name: "GPU0".into(),
            used_mib_max: used,
            total_mib: 16384,
            supervisor_used_mib_max: watcher.map(|(_, gpu)| gpu),
        }],
        attempt_peak_mib: None,
        requirement_mib: Some(2048),
        supervisor: watcher.map(|(peak, _)| SupervisorAtEnd {
            peak_mib: Some(peak),
            interval_ms: 500,
            count: 6,
            last_before_exit_ms: Some(300),
        }),
    }
}

/// An out-of-memory end with the GPU full by the journal's readings.
fn oom_end() -> JobEnd {
    let oom =
        OomEvidence { signature: "CUDA out of memory".into(), line: "CUDA out of memory. Tried".into() };
    JobEnd { exit_code: 1, signal: 0, oom: Some(oom), requeueable: true, at_end: seen(Some(16000), None) }
}

fn decide(state: &State, id: &TaskId, end: &JobEnd, per_gpu: Option<u32>) -> EndDecision {
    let task = &state.tasks[id];
    let attempt = task.active_attempt().expect("an active attempt");
    let recovery = RecoveryConfig { step_mib: 2048, ..RecoveryConfig::default() };
    decide_end(task, attempt, end, &ShardRule::default(), &recovery, per_gpu)
}

#[test]
fn a_start_becomes_a_running_slurm_task_the_tick_never_waits_for() {
    let mut state = State::default();
    let (id, records) = start_records(&state, &start(0, Some(mem_comment(3072)), 5));
    let id = id.unwrap();
    assert_eq!(id, TaskId::from_parts(SUBMIT_MS, 77));
    assert_eq!(kinds(&records), ["Submitted", "SlurmPlaced", "Placed", "Launched"]);
    fold(&mut state, &records);
    let task = &state.tasks[&id];
    assert_eq!(task.status(), Status::Running);
    assert_eq!(
        (task.spec.name.as_str(), task.spec.command.as_slice()),
        ("train_resnet", ["slurm:77".to_string()].as_slice())
    );
    assert_eq!((task.spec.memory_mib, task.spec.max_retries, task.submitter_uid), (Some(3072), 3, 1000));
    let slurm = task.slurm.as_ref().unwrap();
    assert_eq!((slurm.job_id, slurm.node.as_str(), slurm.shards), (77, "n1", Some(5)));
    let attempt = task.active_attempt().unwrap();
    // Five shards of 1 GiB cover 3 GiB once the 2 GiB margin is set aside.
    assert_eq!(
        (attempt.requirement_mib, attempt.gpus.as_slice()),
        (Some(3072), ["GPU-a".to_string()].as_slice())
    );
    assert_eq!(attempt.supervisor.as_ref().unwrap().pid, 0);
    // Journaling the same start again (a Prolog run twice) adds nothing.
    assert!(start_records(&state, &start(0, Some(mem_comment(3072)), 5)).1.is_empty());
}

#[test]
fn an_out_of_memory_end_requeues_with_more_shards_under_the_same_task() {
    let mut state = State::default();
    let (id, records) = start_records(&state, &start(0, Some(mem_comment(2048)), 4));
    let id = id.unwrap();
    fold(&mut state, &records);
    let decision = decide(&state, &id, &oom_end(), Some(16));
    let EndDecision::OutOfMemory { then: AfterOom::Requeue { shards, requirement_mib, reason }, .. } =
        &decision
    else {
        panic!("{decision:?}")
    };
    // max(estimate 2 GiB, previous 2 GiB) + 2 GiB step = 4 GiB, + 2 GiB margin = 6 shards.
    assert_eq!((*shards, *requirement_mib), (6, 4096));
    assert!(reason.ends_with("Slurm job requeued with shard:6 (6144 MiB)"), "{reason}");
    let ended = end_records(&id, 1, &decision, None, SUBMIT_MS + 5000);
    assert_eq!(kinds(&ended), ["OomDetected", "Requeued"]);
    fold(&mut state, &ended);
    let task = &state.tasks[&id];
    assert_eq!((task.status(), task.in_recovery(), task.oom_count), (Status::Pending, true, 1));
    assert_eq!(state.waiting().count(), 0, "a requeued Slurm job waits for Slurm, not for the tick");

    // The requeued job starts with a later SubmitTime; the comment's submit= keeps its id.
    let comment = CarmaComment { submit_ms: Some(SUBMIT_MS), ..mem_comment(2048) };
    let (again, records) = start_records(&State::default(), &start(1, Some(comment), 6));
    assert_eq!(again.as_ref(), Some(&id), "another node derives the same id");
    assert_eq!(kinds(&records), ["Submitted", "SlurmPlaced", "Placed", "Launched"]);
    let (same, records) = start_records(&state, &start(1, None, 6));
    assert_eq!(same.as_ref(), Some(&id), "this node finds it by job id");
    assert_eq!(kinds(&records), ["SlurmPlaced", "Placed", "Launched"]);
    fold(&mut state, &records);
    let attempt = state.tasks[&id].active_attempt().unwrap();
    assert_eq!((attempt.number, attempt.requirement_mib), (2, Some(4096)));
    let finished = end_records(&id, 2, &EndDecision::Finished, None, SUBMIT_MS + 90_000);
    fold(&mut state, &finished);
    assert_eq!(state.tasks[&id].status(), Status::Finished);
}

#[test]
fn a_restart_without_an_end_closes_the_old_attempt_first() {
    let mut state = State::default();
    let (id, records) = start_records(&state, &start(0, Some(mem_comment(2048)), 4));
    fold(&mut state, &records);
    let (again, records) = start_records(&state, &start(1, None, 4));
    assert_eq!(again, id);
    assert_eq!(kinds(&records), ["Lost", "Requeued", "SlurmPlaced", "Placed", "Launched"]);
    fold(&mut state, &records);
    let task = &state.tasks[&id.unwrap()];
    assert_eq!((task.attempts.len(), task.lost_count, task.status()), (2, 1, Status::Running));
}

#[test]
fn ends_that_are_not_requeued() {
    let mut state = State::default();
    let (id, records) = start_records(&state, &start(0, Some(mem_comment(2048)), 4));
    let id = id.unwrap();
    fold(&mut state, &records);
    let end = |exit_code, signal| JobEnd {
        exit_code,
        signal,
        oom: None,
        requeueable: true,
        at_end: seen(None, None),
    };
    assert_eq!(decide(&state, &id, &end(0, 0), None), EndDecision::Finished);
    assert_eq!(
        decide(&state, &id, &end(2, 0), None),
        EndDecision::Failed {
            outcome: "exit 2".into(),
            reason: "exit 2 without an out-of-memory message; not retried".into()
        }
    );
    let EndDecision::Failed { outcome, .. } = decide(&state, &id, &end(0, 15), None) else { panic!() };
    assert_eq!(outcome, "killed by signal 15");
    let give_up = |decision: EndDecision| match decision {
        EndDecision::OutOfMemory { then: AfterOom::GiveUp { reason }, .. } => reason,
        other => panic!("{other:?}"),
    };
    // A GPU of 5 shards cannot hold the 6 the retry needs.
    assert!(
        give_up(decide(&state, &id, &oom_end(), Some(5)))
            .ends_with("needs shard:6 and a GPU of this node holds 5")
    );
    let pinned = JobEnd { requeueable: false, ..oom_end() };
    assert!(give_up(decide(&state, &id, &pinned, None)).ends_with("submitted with --no-requeue"));
    let records = end_records(&id, 1, &decide(&state, &id, &oom_end(), None), Some("scontrol: denied"), 9);
    assert!(
        matches!(&records[1].event, Event::Failed { reason, .. } if reason == "requeue failed: scontrol: denied")
    );

    // A job without a carma comment did not ask for requeues.
    let mut state = State::default();
    let (id, records) = start_records(&state, &start(0, None, 4));
    fold(&mut state, &records);
    let reason = give_up(decide(&state, &id.unwrap(), &oom_end(), None));
    assert!(reason.contains("retry limit 0 reached"), "{reason}");
}

#[test]
fn task_prolog_exports_cap_the_share() {
    let rule = ShardRule::default();
    let exports = task_exports(Some("5"), Some("2"), &rule);
    assert_eq!(exports[0], ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(), "0=5120M".to_string()));
    assert_eq!(exports[1].0, "CUDA_MPS_PIPE_DIRECTORY");
    assert_eq!(task_exports(Some("8"), Some("0,1"), &rule)[0].1, "0=4096M,1=4096M");
    assert!(task_exports(None, Some("0"), &rule).is_empty());
    assert!(task_exports(Some("0"), Some("0"), &rule).is_empty());
    assert!(task_exports(Some("x"), None, &rule).is_empty());
}

#[test]
fn every_end_is_journaled_as_slurm_recorded_it() {
    use super::records::end_from_slurm;
    let cases = [
        ("COMPLETED", (0, 0), Status::Finished, "exit 0"),
        ("FAILED", (2, 0), Status::Failed, "exit 2"),
        ("CANCELLED", (0, 15), Status::Cancelled, "cancelled"),
        ("TIMEOUT", (0, 15), Status::Failed, "timeout"),
        ("NODE_FAIL", (0, 0), Status::Failed, "node failure"),
        (
            "PENDING",
            (0, 15),
            Status::Pending,
            "lost: Slurm requeued job 77 (scontrol requeue, or a node failure)",
        ),
    ];
    for (slurm, exit, status, outcome) in cases {
        let mut state = State::default();
        let (id, records) = start_records(&state, &start(0, Some(mem_comment(2048)), 4));
        let id = id.unwrap();
        fold(&mut state, &records);
        let decision = end_from_slurm(77, slurm, Some(exit), Some("None")).unwrap();
        fold(&mut state, &end_records(&id, 1, &decision, None, SUBMIT_MS + 5000));
        let task = &state.tasks[&id];
        assert_eq!((task.status(), task.attempts[0].outcome.as_deref()), (status, Some(outcome)), "{slurm}");
    }
    assert_eq!(end_from_slurm(77, "RUNNING", None, None), None);
}

#[test]
fn pytorch_evidence_is_not_doubled() {
    let mut state = State::default();
    let (id, records) = start_records(&state, &start(0, Some(mem_comment(2048)), 4));
    let id = id.unwrap();
    fold(&mut state, &records);
    let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
    let oom = OomEvidence { signature: "torch.OutOfMemoryError".into(), line: line.into() };
    let end = JobEnd { oom: Some(oom), ..oom_end() };
    let EndDecision::OutOfMemory { evidence, .. } = decide(&state, &id, &end, Some(16)) else { panic!() };
    assert_eq!(evidence, line);
}

/// Goal: a restart's start journaled after the same run was already journaled and ended (the
/// Prolog late behind the follower and the Epilog) adds no second task for the job.
#[test]
fn a_late_start_of_a_journaled_restart_adds_no_task() {
    let mut state = State::default();
    let (id, records) = start_records(&state, &start(0, Some(mem_comment(2048)), 4));
    let id = id.unwrap();
    fold(&mut state, &records);
    let requeued = EndDecision::SlurmRequeued { reason: "requeued".into() };
    fold(&mut state, &end_records(&id, 1, &requeued, None, SUBMIT_MS + 5_000));
    let (again, records) = start_records(&state, &start(1, Some(mem_comment(2048)), 4));
    assert_eq!(again.as_ref(), Some(&id));
    fold(&mut state, &records);
    let finished = Record {
        time_ms: SUBMIT_MS + 70_000,
        event: Event::Finished { task: id.clone(), attempt: 2, exit_ms: SUBMIT_MS + 70_000 },
    };
    fold(&mut state, &[finished]);
    assert_eq!(state.tasks[&id].status(), Status::Finished);
    let (late, records) = start_records(&state, &start(1, Some(mem_comment(2048)), 4));
    assert_eq!((late, records.len()), (None, 0));
    assert_eq!(state.tasks.len(), 1);
}

/// Goal (issue 40): on Slurm a job's out-of-memory line is weighed against carma's own readings
/// by the rule a local attempt's end is judged by. A line with nothing seen near the end is an
/// ordinary failure, in the readings' words, and never a requeue; the watcher's readings alone
/// (the journal saw nothing: the job died between two ticks) corroborate it, and the peak they
/// saw sizes the next run. Fails on the code before: any line requeued.
#[test]
fn an_out_of_memory_line_is_judged_by_carmas_readings() {
    let mut state = State::default();
    let (id, records) = start_records(&state, &start(0, Some(mem_comment(2048)), 4));
    let id = id.unwrap();
    fold(&mut state, &records);
    let printed_only = JobEnd { at_end: seen(Some(300), Some((0, 300))), ..oom_end() };
    let decision = decide(&state, &id, &printed_only, Some(16));
    let EndDecision::Failed { outcome, reason } = &decision else { panic!("{decision:?}") };
    assert_eq!(outcome, "exit 1");
    assert!(
        reason.starts_with("out-of-memory message without evidence: GPU0 had 300 of 16384 MiB used"),
        "{reason}"
    );
    assert!(reason.ends_with("not retried"), "{reason}");
    let ended = end_records(&id, 1, &decision, None, SUBMIT_MS + 5000);
    assert_eq!(kinds(&ended), ["Failed"]);
    let mut failed = state.clone();
    fold(&mut failed, &ended);
    assert_eq!((failed.tasks[&id].status(), failed.tasks[&id].oom_count), (Status::Failed, 0));

    // Nothing journaled near the end, but the watcher saw the job hold 5000 MiB of its 2048.
    let seen_by_watcher = JobEnd { at_end: seen(None, Some((5000, 5200))), ..oom_end() };
    let decision = decide(&state, &id, &seen_by_watcher, Some(16));
    let EndDecision::OutOfMemory {
        peak_mib,
        then: AfterOom::Requeue { shards, requirement_mib, reason },
        ..
    } = &decision
    else {
        panic!("{decision:?}")
    };
    // max(estimate 2 GiB, peak 5000 MiB) + 2 GiB step = 7048 MiB, + 2 GiB margin = 9 shards.
    assert_eq!((*peak_mib, *requirement_mib, *shards), (Some(5000), 7048, 9));
    assert!(
        reason.starts_with(
            "carma's readings: the job held 5000 MiB of its 2048 MiB share, and GPU0 had 5200 MiB used in its supervisor's readings"
        ),
        "{reason}"
    );
    let ended = end_records(&id, 1, &decision, None, SUBMIT_MS + 5000);
    assert_eq!(kinds(&ended), ["OomDetected", "Requeued"]);
}
