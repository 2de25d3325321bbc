//! Administrators' GPU reservations in the State: the fold of `ReservationCreated` and
//! `ReservationDeleted`, the rules a new reservation must pass before it is journaled, and the
//! form the decision core reads (`sched::GpuReservation`).
//!
//! A reservation is kept in State (by name) until it is deleted, ended or not, so a task that
//! names an ended one can say so; `carma reserve list` shows the ended ones as such. Bounds:
//! at most [`RESERVATIONS_MAX`] reservations, names as `spec::extras::validate_reservation_name`
//! allows, at most [`USERS_MAX`] users, windows of at most a year.

use std::collections::BTreeMap;

pub use super::state::ReservationEntry;
use super::state::State;
use crate::sched::{GpuName, GpuReservation, ReservedGpus, Resolved};

/// Most reservations the State keeps (ended ones count until deleted).
pub const RESERVATIONS_MAX: usize = 64;
/// Most users one reservation names.
pub const USERS_MAX: usize = 256;
/// Longest window: a year.
pub const WINDOW_MS_MAX: u64 = 366 * 24 * 3_600_000;

impl ReservationEntry {
    /// The form the decision core reads.
    pub fn to_sched(&self) -> GpuReservation {
        GpuReservation {
            name: self.name.clone(),
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            users: self.users.clone(),
            gpus: if self.gpus.is_empty() {
                ReservedGpus::Count(self.gpu_count)
            } else {
                ReservedGpus::Named(self.gpus.clone())
            },
        }
    }
}

/// Every reservation in the State, in the decision core's form.
pub fn for_sched(state: &State) -> Vec<GpuReservation> {
    state.gpu_reservations.values().map(ReservationEntry::to_sched).collect()
}

/// Which GPUs each reservation that has not ended holds now, and whether it can be honoured,
/// from the newest samples in `state` (as the tick's decision would resolve it: only GPUs the
/// last probe saw, healthy and without MIG, are available). For `carma reserve list`,
/// `carma gpus` and the dashboard.
pub fn resolve_now(state: &State, now_ms: u64) -> Vec<Resolved> {
    let newest_ms = state.gpus.values().filter(|g| g.last.is_some()).map(|g| g.last_ms).max();
    let mut gpus: Vec<_> = state.gpus.values().collect();
    gpus.sort_by(|a, b| (a.index, &a.uuid).cmp(&(b.index, &b.uuid)));
    let views = gpus.iter().map(|g| {
        let present = g.last.is_some() && Some(g.last_ms) == newest_ms;
        let usable =
            g.last.as_ref().is_some_and(|s| s.health.reason().is_none() && s.mig.enabled == Some(false));
        (g.uuid.as_str(), GpuName { index: g.index, mig_slot: None }, present && usable)
    });
    crate::sched::resolve(&for_sched(state), views, now_ms)
}

/// A reservation holding a GPU, in words for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The reservation's name.
    pub name: String,
    /// `"paper" from 2026-12-03T09:00:00Z to 2026-12-05T09:00:00Z`.
    pub window: String,
    /// `cannot be honoured: GPU1 unavailable`, when it cannot be in full.
    pub problem: Option<String>,
}

impl Holding {
    /// The window, with the problem in parentheses when there is one.
    pub fn text(&self) -> String {
        match &self.problem {
            Some(problem) => format!("{} ({problem})", self.window),
            None => self.window.clone(),
        }
    }
}

/// The reservations holding GPU `uuid` now (not ended).
pub fn holding(state: &State, resolved: &[Resolved], uuid: &str) -> Vec<Holding> {
    resolved
        .iter()
        .filter(|r| r.uuids.iter().any(|u| u == uuid))
        .filter_map(|r| state.gpu_reservations.get(&r.name).map(|e| (r, e)))
        .map(|(r, e)| {
            let window = format!(
                "\"{}\" from {} to {}",
                e.name,
                crate::clock::format_ms(e.start_ms),
                crate::clock::format_ms(e.end_ms)
            );
            Holding { name: e.name.clone(), window, problem: r.problem.clone() }
        })
        .collect()
}

/// The fold of a reservation's records (called by `State::apply` for those two events only).
pub(super) fn fold(
    reservations: &mut BTreeMap<String, ReservationEntry>,
    time_ms: u64,
    event: &super::Event,
) -> super::Applied {
    use super::{Applied, Event};
    match event {
        Event::ReservationCreated { name, start_ms, end_ms, users, gpu_count, gpus, by_uid } => {
            let entry = ReservationEntry {
                name: name.clone(),
                start_ms: *start_ms,
                end_ms: *end_ms,
                users: users.clone(),
                gpu_count: *gpu_count,
                gpus: gpus.clone(),
                by_uid: *by_uid,
                created_ms: time_ms,
            };
            if fold_created(reservations, entry) {
                Applied::Yes
            } else {
                Applied::Ignored("a reservation of that name exists, or the State holds the most")
            }
        }
        Event::ReservationDeleted { name, .. } if fold_deleted(reservations, name) => Applied::Yes,
        Event::ReservationDeleted { .. } => Applied::Ignored("no reservation of that name"),
        _ => unreachable!("State::apply hands this fold only reservation records"),
    }
}

/// The fold of `ReservationCreated`: false (ignored) when the name is taken or the State is
/// full, so replay never trusts a record a writer should not have written.
pub(super) fn fold_created(
    reservations: &mut BTreeMap<String, ReservationEntry>,
    entry: ReservationEntry,
) -> bool {
    if reservations.contains_key(&entry.name) || reservations.len() >= RESERVATIONS_MAX {
        return false;
    }
    reservations.insert(entry.name.clone(), entry);
    true
}

/// The fold of `ReservationDeleted`: false (ignored) for a name not in the State.
pub(super) fn fold_deleted(reservations: &mut BTreeMap<String, ReservationEntry>, name: &str) -> bool {
    reservations.remove(name).is_some()
}

/// One GPU of the machine, as `carma reserve create` checks a request against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineGpu {
    /// Its index.
    pub index: u32,
    /// Its UUID.
    pub uuid: String,
}

/// Why `entry` cannot be honoured on a machine with `gpus`, next to the reservations already in
/// `state`, at `now_ms`; `None` when it can. The window must be ahead (it may have started),
/// within a year; its GPUs must exist; and at every moment of the window the reservations
/// overlapping it must not hold more GPUs than the machine has, nor the same named GPU twice.
pub fn check_new(
    state: &State,
    entry: &ReservationEntry,
    gpus: &[MachineGpu],
    now_ms: u64,
) -> Option<String> {
    let name = &entry.name;
    if state.gpu_reservations.contains_key(name) {
        return Some(format!("reservation \"{name}\" exists; delete it first (carma reserve delete {name})"));
    }
    if state.gpu_reservations.len() >= RESERVATIONS_MAX {
        return Some(format!(
            "this queue holds {RESERVATIONS_MAX} reservations, the most it keeps; delete ended ones (carma reserve delete NAME)"
        ));
    }
    if entry.end_ms <= now_ms {
        return Some(format!(
            "reservation \"{name}\" would end before now; give a later --start or a longer --duration"
        ));
    }
    if entry.end_ms.saturating_sub(entry.start_ms) > WINDOW_MS_MAX {
        return Some(format!("reservation \"{name}\" lasts more than a year; give a shorter --duration"));
    }
    let machine = gpus.len();
    if entry.gpu_count as usize > machine {
        return Some(format!(
            "reservation \"{name}\" holds {} GPUs, this machine has {machine}; ask for at most {machine}",
            entry.gpu_count
        ));
    }
    if let Some(missing) = entry.gpus.iter().find(|uuid| !gpus.iter().any(|g| g.uuid == **uuid)) {
        return Some(format!("reservation \"{name}\" names GPU {missing}, which this machine does not have"));
    }
    let overlapping: Vec<&ReservationEntry> = state
        .gpu_reservations
        .values()
        .filter(|r| r.start_ms < entry.end_ms && entry.start_ms < r.end_ms)
        .collect();
    for other in &overlapping {
        if let Some(uuid) = entry.gpus.iter().find(|u| other.gpus.contains(u)) {
            let index = gpus.iter().find(|g| g.uuid == *uuid).map_or(0, |g| g.index);
            return Some(format!(
                "GPU{index} is held by reservation \"{}\" in the same window; pick other GPUs or another time",
                other.name
            ));
        }
    }
    let others: u32 = overlapping.iter().fold(0u32, |sum, r| sum.saturating_add(r.gpu_count));
    let held = others.saturating_add(entry.gpu_count);
    if held as usize > machine {
        let names: Vec<String> = overlapping.iter().map(|r| format!("\"{}\"", r.name)).collect();
        return Some(format!(
            "reservation \"{name}\" holds {} GPUs, and {} hold {} in the same window; this machine has {machine}",
            entry.gpu_count,
            names.join(", "),
            others
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    //! Goal: a reservation the machine cannot honour is refused with its reason, and the fold
    //! ignores records a writer should not have written. Method: States built by the fold.
    use super::*;

    const HOUR_MS: u64 = 3_600_000;

    fn entry(name: &str, gpu_count: u32, gpus: &[&str], start_h: u64, hours: u64) -> ReservationEntry {
        ReservationEntry {
            name: name.into(),
            start_ms: start_h * HOUR_MS,
            end_ms: (start_h + hours) * HOUR_MS,
            users: vec![1001],
            gpu_count,
            gpus: gpus.iter().map(|g| g.to_string()).collect(),
            by_uid: 0,
            created_ms: 0,
        }
    }

    fn machine(n: u32) -> Vec<MachineGpu> {
        (0..n).map(|index| MachineGpu { index, uuid: format!("GPU-{index}") }).collect()
    }

    #[test]
    fn an_impossible_reservation_is_refused_with_the_reason() {
        let mut state = State::default();
        let two = machine(2);
        assert_eq!(
            check_new(&state, &entry("paper", 3, &[], 10, 24), &two, 0).as_deref(),
            Some("reservation \"paper\" holds 3 GPUs, this machine has 2; ask for at most 2")
        );
        assert_eq!(
            check_new(&state, &entry("paper", 1, &["GPU-7"], 10, 24), &two, 0).as_deref(),
            Some("reservation \"paper\" names GPU GPU-7, which this machine does not have")
        );
        assert_eq!(check_new(&state, &entry("paper", 2, &[], 10, 24), &two, 0), None);
        assert!(fold_created(&mut state.gpu_reservations, entry("paper", 2, &[], 10, 24)));
        assert_eq!(
            check_new(&state, &entry("talk", 1, &[], 20, 1), &two, 0).as_deref(),
            Some(
                "reservation \"talk\" holds 1 GPUs, and \"paper\" hold 2 in the same window; this machine has 2"
            )
        );
        assert_eq!(check_new(&state, &entry("talk", 1, &[], 34, 1), &two, 0), None, "after paper's window");
        assert_eq!(
            check_new(&state, &entry("old", 1, &[], 1, 1), &two, 3 * HOUR_MS).as_deref(),
            Some("reservation \"old\" would end before now; give a later --start or a longer --duration")
        );
    }

    #[test]
    fn the_fold_ignores_a_second_create_and_an_unknown_delete() {
        let mut reservations = BTreeMap::new();
        assert!(fold_created(&mut reservations, entry("paper", 2, &[], 10, 24)));
        assert!(!fold_created(&mut reservations, entry("paper", 1, &[], 10, 24)));
        assert_eq!(reservations["paper"].gpu_count, 2);
        assert!(!fold_deleted(&mut reservations, "talk"));
        assert!(fold_deleted(&mut reservations, "paper"));
        assert!(reservations.is_empty());
    }
}
