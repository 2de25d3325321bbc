//! `--begin`: a task waits for its begin time with a BeginTime reason, measured against the
//! decision's `now` (never the wall clock), and blocks nobody behind it.

use super::*;

#[test]
fn a_task_waits_for_its_begin_time_and_blocks_nobody() {
    let mut fixture = Fixture::new(Policy::Magm).gpu(40.0, Some(0.0));
    fixture = fixture.task("later", 1, Some(2.0)).task("now", 1, Some(2.0));
    // 11.5 minutes ahead: the coarse countdown says 12.
    fixture.waiting[0].gate.begin_ms = Some(NOW_MS + 11 * 60_000 + 30_000);
    let decision = fixture.decide();
    let placed: Vec<&str> = decision.placements.iter().map(|p| p.task_id.as_str()).collect();
    assert_eq!(placed, ["now"], "the task behind a delayed one starts");
    let reason = &decision.pending.iter().find(|p| p.task_id == "later").expect("later waits").reason;
    assert!(reason.starts_with("BeginTime: starts at "), "{reason}");
    assert!(reason.ends_with(" (in 12 min)"), "{reason}");
    assert!(decision.reservation.is_none(), "a delayed task keeps no GPU: {:?}", decision.reservation);

    // At its begin time it is placed like any other task.
    fixture.waiting[0].gate.begin_ms = Some(NOW_MS);
    let placed: Vec<String> = fixture.decide().placements.into_iter().map(|p| p.task_id).collect();
    assert!(placed.contains(&"later".to_string()), "{placed:?}");
}

#[test]
fn the_countdown_is_in_minutes_then_hours() {
    let reason = crate::sched::gate::begin_reason(NOW_MS + 3 * 3_600_000, NOW_MS);
    assert!(reason.ends_with(" (in 3 h)"), "{reason}");
    let reason = crate::sched::gate::begin_reason(NOW_MS + 1, NOW_MS);
    assert!(reason.ends_with(" (in 1 min)"), "{reason}");
}

/// Issue 33, defect 11: a begin time 300 days away read "(in 7200 h)"; from two days on the
/// countdown is in days.
#[test]
fn a_countdown_of_days_is_in_days() {
    let reason = crate::sched::gate::begin_reason(NOW_MS + 300 * 86_400_000, NOW_MS);
    assert!(reason.ends_with(" (in 300 days)"), "{reason}");
    let reason = crate::sched::gate::begin_reason(NOW_MS + 47 * 3_600_000, NOW_MS);
    assert!(reason.ends_with(" (in 47 h)"), "{reason}");
    let reason = crate::sched::gate::begin_reason(NOW_MS + 48 * 3_600_000, NOW_MS);
    assert!(reason.ends_with(" (in 2 days)"), "{reason}");
}
