//! Goal: each tick finishes what the journal says of a suspension and the jobs do not show, a
//! suspension someone continued is stopped again, one past `suspend-max` ends, and an ended
//! suspension's attempt is requeued, not failed. Method: records folded into a real State,
//! then the pure `decide` over made-up observations, and `verdict`.

use super::*;
use crate::journal::ProcessRef;

const NOW_MS: u64 = 1_800_000_000_000;

fn id(n: u8) -> TaskId {
    TaskId::from_parts(1_700_000_000_000 + u64::from(n), u32::from(n))
}

fn submitted(n: u8) -> Event {
    let text = format!("name = \"t{n}\"\ncommand = [\"true\"]\nmemory = \"8GiB\"\nrequeue = true\n");
    let spec = crate::spec::parse_toml("t", &text)
        .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
        .expect("spec");
    Event::Submitted { task: id(n), submitter_uid: 1000, spec }
}

/// Task 1 running since two hours ago, suspended for task 2 at `suspended_ms`; then `more`.
fn state(suspended_ms: u64, more: Vec<Event>) -> State {
    let supervisor = ProcessRef { pid: 4242, start_time_ticks: 1, boot_id: "b".into() };
    let mut records = vec![
        (NOW_MS - 7_200_000, submitted(1)),
        (NOW_MS - 7_200_000, submitted(2)),
        (
            NOW_MS - 7_200_000,
            Event::Placed {
                task: id(1),
                attempt: 1,
                gpus: vec!["GPU-a".into()],
                exclusive: false,
                requirement_mib: Some(8192),
                reason: "fits".into(),
            },
        ),
        (NOW_MS - 7_200_000, Event::Launched { task: id(1), attempt: 1, supervisor, adopted: false }),
        (suspended_ms, Event::Suspended { task: id(1), attempt: 1, by: id(2) }),
    ];
    records.extend(more.into_iter().map(|event| (suspended_ms + 1, event)));
    let mut state = State::default();
    for (seq, (time_ms, event)) in records.into_iter().enumerate() {
        state.apply(seq as u64 + 1, &Record { time_ms, event });
    }
    state
}

fn job(processes: &[(u32, char)], frozen: bool, marked: bool) -> Seen {
    Seen::Suspended(JobStop { frozen, processes: processes.to_vec(), marked })
}

fn steps(state: &State, seen: Seen) -> Vec<Step> {
    let config = Config::default();
    decide(state, &[(id(1), 1, seen)], &config, NOW_MS).into_iter().map(|(_, _, step)| step).collect()
}

#[test]
fn a_suspension_the_jobs_do_not_show_is_finished_and_a_continued_one_stopped_again() {
    let fresh = state(NOW_MS - 60_000, vec![]);
    // Killed before it had stopped the job (no mark): the suspension is applied now.
    assert_eq!(steps(&fresh, job(&[(10, 'S'), (11, 'S')], false, false)), [Step::Complete]);
    // Applied and wholly stopped, frozen or every process T: nothing to do.
    assert!(steps(&fresh, job(&[(10, 'T'), (11, 'T')], false, true)).is_empty());
    assert!(steps(&fresh, job(&[(10, 'T'), (11, 'S')], true, true)).is_empty(), "a frozen cgroup holds it");
    // Its owner continued a worker: stopped again.
    assert_eq!(steps(&fresh, job(&[(10, 'T'), (11, 'S')], false, true)), [Step::Restop(vec![11])]);
    // Its job is gone: reconcile's.
    assert!(steps(&fresh, job(&[], false, true)).is_empty());
}

#[test]
fn a_suspension_past_suspend_max_ends_and_its_attempt_is_requeued() {
    let old = state(NOW_MS - 3_600_000, vec![]);
    let ended = steps(&old, job(&[(10, 'T')], true, true));
    assert_eq!(ended, [Step::End("suspended for 1h, past [sched.preemption] suspend-max (1h)".into())]);
    let just_inside = state(NOW_MS - 3_599_999, vec![]);
    assert!(steps(&just_inside, job(&[(10, 'T')], true, true)).is_empty());

    let reason = "suspended for 1h, past [sched.preemption] suspend-max (1h)".to_string();
    let ending = Event::SuspensionEnded { task: id(1), attempt: 1, reason: reason.clone() };
    let state = state(NOW_MS - 3_600_000, vec![ending]);
    let task = &state.tasks[&id(1)];
    let attempt = task.active_attempt().expect("still open until stopped");
    assert_eq!(
        (attempt.suspended.as_ref(), attempt.suspension_ended.as_deref()),
        (None, Some(reason.as_str()))
    );
    let records = verdict(task, 1, "signal 15").expect("a requeue");
    let Event::Requeued { recovery_mode, reason: why, .. } = &records[1] else { panic!("{records:?}") };
    assert_eq!(*recovery_mode, RequeueMode::User);
    assert_eq!(why, &format!("its suspension ended: {reason}; not counted as a retry"));
    assert!(
        matches!(&records[0], Event::Stopped { outcome, .. } if outcome == "signal 15: its suspension ended")
    );
}

#[test]
fn a_resume_the_job_does_not_show_is_finished() {
    let resumed = state(NOW_MS - 60_000, vec![Event::Resumed { task: id(1), attempt: 1 }]);
    assert_eq!(steps(&resumed, Seen::Marked), [Step::Continue]);
    let ending = Event::SuspensionEnded { task: id(1), attempt: 1, reason: "r".into() };
    let ended = state(NOW_MS - 60_000, vec![ending]);
    assert_eq!(steps(&ended, Seen::Marked), [Step::Release]);
    // A suspended attempt seen as only marked is not the resume's.
    assert!(steps(&state(NOW_MS - 60_000, vec![]), Seen::Marked).is_empty());
}
