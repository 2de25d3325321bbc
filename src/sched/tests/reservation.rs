//! Administrators' reservations in the decision: who may use the held GPUs, before and during
//! the window, and what a task that names one waits for. Method: small fixtures with exact
//! reasons, then a property over random reservations, tasks and clocks against the whole
//! decision.

use proptest::prelude::*;

use super::*;
use crate::sched::clock::clock_text;
use crate::sched::reservation::{GpuReservation, ReservedGpus};
use crate::sched::{GateInput, GpuName, resolve};

const ALICE: u32 = 1001;
const BOB: u32 = 1002;
const CAROL: u32 = 1003;
const HOUR_MS: u64 = 3_600_000;

/// "paper": two GPUs for alice and bob, from an hour after now, for a day.
fn paper(gpus: ReservedGpus) -> GpuReservation {
    GpuReservation {
        name: "paper".into(),
        start_ms: NOW_MS + HOUR_MS,
        end_ms: NOW_MS + 25 * HOUR_MS,
        users: vec![ALICE, BOB],
        gpus,
    }
}

fn decide_with(fixture: &Fixture, reservations: &[GpuReservation], now_ms: u64) -> Decision {
    decide(&SchedInput {
        now_ms,
        gpus: &fixture.gpus,
        waiting: &fixture.waiting,
        running: &fixture.running,
        rr_cursor: fixture.rr_cursor,
        config: &fixture.config,
        gate: GateInput { gpu_reservations: reservations, ..Default::default() },
    })
}

fn four_gpus() -> Fixture {
    Fixture::new(Policy::FirstFit)
        .gpu(40.0, Some(0.0))
        .gpu(40.0, Some(0.0))
        .gpu(40.0, Some(0.0))
        .gpu(40.0, Some(0.0))
}

/// The last waiting task's owner, time limit (minutes) and reservation.
fn owned(mut fixture: Fixture, user: u32, limit_min: Option<u64>, reservation: Option<&str>) -> Fixture {
    let task = fixture.waiting.last_mut().expect("a waiting task");
    task.gate.user = user;
    task.gate.time_limit_ms = limit_min.map(|m| m * 60_000);
    task.gate.reservation = reservation.map(str::to_owned);
    fixture
}

fn placed_on(decision: &Decision, id: &str) -> Option<Vec<String>> {
    decision.placements.iter().find(|p| p.task_id == id).map(|p| p.gpus.clone())
}

fn reason_of<'d>(decision: &'d Decision, id: &str) -> &'d str {
    &decision
        .pending
        .iter()
        .find(|p| p.task_id == id)
        .unwrap_or_else(|| panic!("{id} waits: {decision:?}"))
        .reason
}

#[test]
fn a_task_without_a_limit_stays_off_the_held_gpus_before_the_window() {
    let fixture = owned(four_gpus().task("long", 3, Some(2.0)), CAROL, None, None);
    let decision = decide_with(&fixture, &[paper(ReservedGpus::Count(2))], NOW_MS);
    let start = clock_text(NOW_MS + HOUR_MS, NOW_MS);
    assert_eq!(
        reason_of(&decision, "long"),
        format!("needs 3 GPUs, 2 pass (GPU2, GPU3); Reservation: GPU0,GPU1 held for \"paper\" from {start}")
    );
    let fixture = owned(four_gpus().task("long", 2, Some(2.0)), CAROL, None, None);
    let decision = decide_with(&fixture, &[paper(ReservedGpus::Count(2))], NOW_MS);
    assert_eq!(placed_on(&decision, "long"), Some(vec!["GPU-2".into(), "GPU-3".into()]));
}

#[test]
fn a_task_whose_limit_ends_before_the_start_backfills_and_one_past_it_does_not() {
    let fixture = owned(four_gpus().task("short", 4, Some(2.0)), CAROL, Some(60), None);
    let decision = decide_with(&fixture, &[paper(ReservedGpus::Count(2))], NOW_MS);
    assert_eq!(placed_on(&decision, "short").map(|g| g.len()), Some(4), "{decision:?}");
    let fixture = owned(four_gpus().task("past", 4, Some(2.0)), CAROL, Some(61), None);
    let decision = decide_with(&fixture, &[paper(ReservedGpus::Count(2))], NOW_MS);
    assert!(placed_on(&decision, "past").is_none(), "{decision:?}");
}

#[test]
fn a_user_of_the_reservation_waits_for_it_then_runs_only_on_its_gpus() {
    let named = ReservedGpus::Named(vec!["GPU-1".into(), "GPU-3".into()]);
    let fixture = owned(four_gpus().task("mine", 2, Some(2.0)), ALICE, None, Some("paper"));
    let decision = decide_with(&fixture, &[paper(named.clone())], NOW_MS);
    let start = clock_text(NOW_MS + HOUR_MS, NOW_MS);
    assert_eq!(reason_of(&decision, "mine"), format!("Reservation: waits for \"paper\" from {start}"));
    assert!(decision.reservation.is_none(), "a task waiting for its window blocks nobody");

    let at_start = NOW_MS + HOUR_MS;
    let decision = decide_with(&fixture, &[paper(named.clone())], at_start);
    assert_eq!(placed_on(&decision, "mine"), Some(vec!["GPU-1".into(), "GPU-3".into()]));

    // A one-GPU task in it takes a reserved GPU even when lower-index GPUs are free.
    let fixture = owned(four_gpus().task("one", 1, Some(2.0)), BOB, None, Some("paper"));
    let decision = decide_with(&fixture, &[paper(named)], at_start);
    assert_eq!(placed_on(&decision, "one"), Some(vec!["GPU-1".into()]));
}

#[test]
fn during_the_window_outsiders_and_tasks_naming_nothing_stay_off() {
    let at = NOW_MS + 2 * HOUR_MS;
    let mut fixture = owned(four_gpus().task("carol", 3, Some(2.0)), CAROL, Some(1), None);
    fixture = owned(fixture.task("alice-plain", 3, Some(2.0)), ALICE, Some(1), None);
    fixture = owned(fixture.task("carol-in", 1, Some(2.0)), CAROL, None, Some("paper"));
    let decision = decide_with(&fixture, &[paper(ReservedGpus::Count(2))], at);
    let end = clock_text(NOW_MS + 25 * HOUR_MS, at);
    let held = format!("Reservation: GPU0,GPU1 held for \"paper\" until {end}");
    assert_eq!(reason_of(&decision, "carol"), format!("needs 3 GPUs, 2 pass (GPU2, GPU3); {held}"));
    assert!(reason_of(&decision, "alice-plain").ends_with(&held), "{decision:?}");
    assert_eq!(
        reason_of(&decision, "carol-in"),
        format!(
            "Reservation \"paper\" is not open to this task's submitter (uid {CAROL}): the task stays queued; cancel it (carma cancel carol-in)"
        )
    );
}

#[test]
fn after_the_window_or_without_the_reservation_a_task_naming_it_stays_queued() {
    let fixture = owned(four_gpus().task("late", 1, Some(2.0)), ALICE, None, Some("paper"));
    let after = NOW_MS + 26 * HOUR_MS;
    let decision = decide_with(&fixture, &[paper(ReservedGpus::Count(2))], after);
    let end = clock_text(NOW_MS + 25 * HOUR_MS, after);
    assert_eq!(
        reason_of(&decision, "late"),
        format!("Reservation \"paper\" ended at {end}: the task stays queued; cancel it (carma cancel late)")
    );
    let decision = decide_with(&fixture, &[], NOW_MS);
    assert_eq!(
        reason_of(&decision, "late"),
        "Reservation \"paper\" does not exist (deleted, or never created): the task stays queued; cancel it (carma cancel late)"
    );
    // After the window the GPUs are everyone's again.
    let fixture = owned(four_gpus().task("any", 4, Some(2.0)), CAROL, None, None);
    assert_eq!(
        placed_on(&decide_with(&fixture, &[paper(ReservedGpus::Count(2))], after), "any").map(|g| g.len()),
        Some(4)
    );
}

#[test]
fn a_reservation_short_of_gpus_is_flagged_and_holds_what_it_finds() {
    let views = |available: [bool; 2]| {
        (0..2u32).map(move |i| {
            let uuid: &'static str = ["GPU-0", "GPU-1"][i as usize];
            (uuid, GpuName { index: i, mig_slot: None }, available[i as usize])
        })
    };
    let three = paper(ReservedGpus::Count(3));
    let found = resolve(std::slice::from_ref(&three), views([true, true]), NOW_MS);
    assert_eq!(found[0].uuids, ["GPU-0", "GPU-1"]);
    assert_eq!(found[0].problem.as_deref(), Some("cannot be honoured: holds 3 GPUs, 2 available"));
    let named = paper(ReservedGpus::Named(vec!["GPU-1".into(), "GPU-9".into()]));
    let found = resolve(std::slice::from_ref(&named), views([true, false]), NOW_MS);
    assert_eq!(found[0].problem.as_deref(), Some("cannot be honoured: GPU1 unavailable, GPU-9 missing"));
    // An ended reservation is not resolved at all.
    assert!(resolve(&[three], views([true, true]), NOW_MS + 30 * HOUR_MS).is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No task outside a reservation's users, or naming none, is ever placed on one of its
    /// GPUs while its window is open; before it opens, only a task whose time limit ends by
    /// the start is.
    #[test]
    fn reserved_gpus_take_no_outsider(
        gpu_count in 1u32..=5,
        held in 1u32..=3,
        named in any::<bool>(),
        offset_min in -120i64..=180,
        tasks in prop::collection::vec((0u32..3, 1u32..=3, prop::option::of(1u64..=240), any::<bool>()), 1..8),
    ) {
        let mut fixture = Fixture::new(Policy::FirstFit);
        for _ in 0..gpu_count {
            fixture = fixture.gpu(40.0, Some(0.0));
        }
        let users = [ALICE, BOB, CAROL];
        // Each task: (user, GPUs, time limit in minutes or none, names the reservation).
        for (i, &(user, gpus, limit_min, in_it)) in tasks.iter().enumerate() {
            fixture = fixture.task(&format!("t{i}"), gpus, Some(1.0));
            fixture = owned(fixture, users[user as usize], limit_min, in_it.then_some("paper"));
        }
        let gpus = if named {
            ReservedGpus::Named((0..held).map(|i| format!("GPU-{}", i * 2)).collect())
        } else {
            ReservedGpus::Count(held)
        };
        let reservation = paper(gpus);
        let now_ms = (reservation.start_ms as i64 + offset_min * 60_000) as u64;
        let decision = decide_with(&fixture, std::slice::from_ref(&reservation), now_ms);
        let views = fixture.gpus.iter().map(|v| (v.uuid.as_str(), GpuName::of(v), true));
        let holds = resolve(std::slice::from_ref(&reservation), views, now_ms);
        let reserved: Vec<String> = holds.first().map(|r| r.uuids.clone()).unwrap_or_default();
        for placement in &decision.placements {
            let task = fixture.waiting.iter().find(|t| t.id == placement.task_id).expect("a waiting task");
            let member = task.gate.reservation.as_deref() == Some("paper")
                && reservation.users.contains(&task.gate.user);
            if task.gate.reservation.is_some() {
                prop_assert!(member && reservation.is_open(now_ms), "{placement:?} outside its window");
                prop_assert!(placement.gpus.iter().all(|g| reserved.contains(g)), "{placement:?} off its GPUs");
                continue;
            }
            let on_held = placement.gpus.iter().any(|g| reserved.contains(g));
            if on_held {
                prop_assert!(!reservation.is_open(now_ms), "{placement:?} inside the window");
                let ends = task.gate.time_limit_ms.map(|l| now_ms + l);
                prop_assert!(ends.is_some_and(|e| e <= reservation.start_ms), "{placement:?} still runs at the start");
            }
        }
    }
}

#[test]
fn a_task_a_reservation_keeps_from_enough_gpus_blocks_nobody() {
    let at = NOW_MS + 2 * HOUR_MS;
    let mut fixture = owned(four_gpus().task("wide", 3, Some(2.0)), CAROL, None, None);
    fixture = owned(fixture.task("narrow", 2, Some(2.0)), CAROL, None, None);
    let decision = decide_with(&fixture, &[paper(ReservedGpus::Count(2))], at);
    assert!(placed_on(&decision, "wide").is_none());
    assert_eq!(placed_on(&decision, "narrow"), Some(vec!["GPU-2".into(), "GPU-3".into()]));
    assert!(decision.reservation.is_none(), "no backfill reservation: {:?}", decision.reservation);
}
