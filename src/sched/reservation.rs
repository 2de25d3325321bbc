//! Administrators' GPU reservations (Slurm's `scontrol create reservation`): GPUs held for a
//! window, for a list of users, by name.
//!
//! Not to be confused with the backfill reservation of the blocked head ([`super::Reservation`]),
//! which a decision makes by itself; these are made by an administrator (`carma reserve create`)
//! and journaled.
//!
//! # Rules
//!
//! **Which GPUs.** A reservation of named GPUs holds those (by UUID). A reservation of a count
//! holds the lowest-index whole GPUs that are present and available and not held by a
//! reservation earlier in the list (start, then name) whose window overlaps. A reservation
//! that finds fewer GPUs than it holds is *flagged* ([`Resolved::problem`]) and holds what it
//! found; it is never an error of the decision.
//!
//! **Tasks that name no reservation, or another one, or whose owner is not among its users**
//! are kept off its GPUs while the window is open, and before it opens when they would still
//! run at its start: a task without a time limit would, and one whose `now + limit` passes the
//! start would. A task whose time limit ends by the start may use them (as EASY backfill
//! reasons about the blocked head: it is gone before the GPUs are due). Their reason names the
//! GPUs, the reservation and its start (or end, while open):
//! `Reservation: GPU0,GPU1 held for "paper" from 09:00`.
//!
//! **A task that names a reservation** (`--reservation NAME`) is one of its users' or waits
//! (`Reservation "paper" is not open to this task's submitter`); waits for the window
//! (`Reservation: waits for "paper" from 09:00 (in 3 h)`); during the window is placed only on
//! the reservation's GPUs; and when the window has ended, or the reservation was deleted or
//! never existed, it stays queued and is never placed, as Slurm holds a job whose reservation is
//! gone (its reason says to cancel it). Such a task never blocks the queue: the verdict is the
//! gate's.
//!
//! Property tests (`tests::reserved_gpus_take_no_outsider_inside_the_window` and
//! `..._before_the_window`) hold the first rule against the whole decision.

use super::WaitingTask;
use super::clock::clock_text;
use super::table::{GpuName, GpuSlot};

/// An administrator's reservation, as the decision sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuReservation {
    /// Its name, which tasks give with `--reservation`.
    pub name: String,
    /// Start of the window, ms since the epoch.
    pub start_ms: u64,
    /// End of the window (exclusive), ms since the epoch; after `start_ms`.
    pub end_ms: u64,
    /// The uids whose tasks may run in it.
    pub users: Vec<u32>,
    /// What it holds.
    pub gpus: ReservedGpus,
}

/// The GPUs a reservation holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReservedGpus {
    /// This many whole GPUs, chosen by the decision (lowest index first).
    Count(u32),
    /// These GPUs, by UUID.
    Named(Vec<String>),
}

impl ReservedGpus {
    /// How many GPUs it holds.
    pub fn len(&self) -> usize {
        match self {
            ReservedGpus::Count(count) => *count as usize,
            ReservedGpus::Named(uuids) => uuids.len(),
        }
    }

    /// Holds no GPU (never true of a journaled reservation).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl GpuReservation {
    /// The window is open at `now_ms`.
    pub fn is_open(&self, now_ms: u64) -> bool {
        self.start_ms <= now_ms && now_ms < self.end_ms
    }

    /// The window is over at `now_ms`.
    pub fn has_ended(&self, now_ms: u64) -> bool {
        now_ms >= self.end_ms
    }

    fn overlaps(&self, other: &GpuReservation) -> bool {
        self.start_ms < other.end_ms && other.start_ms < self.end_ms
    }
}

/// Where a reservation's GPUs are now, and whether it can be honoured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The reservation's name.
    pub name: String,
    /// The GPUs it holds now, by name (index order).
    pub gpus: Vec<GpuName>,
    /// Their UUIDs, in the same order.
    pub uuids: Vec<String>,
    /// Why it cannot be honoured in full (a GPU missing, unavailable, or too few GPUs).
    pub problem: Option<String>,
}

/// Which GPUs each reservation that has not ended holds, given the GPUs present (`slots` in
/// index order, as `GpuTable` sorts them; MIG instances never count). Ended reservations are
/// left out. Pure; `carma gpus` and `carma reserve list` show the same answer.
pub fn resolve<'v>(
    reservations: &[GpuReservation],
    views: impl Iterator<Item = (&'v str, GpuName, bool)> + Clone,
    now_ms: u64,
) -> Vec<Resolved> {
    let mut order: Vec<&GpuReservation> = reservations.iter().filter(|r| !r.has_ended(now_ms)).collect();
    order.sort_by(|a, b| (a.start_ms, &a.name).cmp(&(b.start_ms, &b.name)));
    let mut resolved: Vec<(&GpuReservation, Resolved)> = Vec::with_capacity(order.len());
    for reservation in order {
        let taken = |uuid: &str| {
            resolved.iter().any(|(other, r)| other.overlaps(reservation) && r.uuids.iter().any(|u| u == uuid))
        };
        let mut found =
            Resolved { name: reservation.name.clone(), gpus: vec![], uuids: vec![], problem: None };
        match &reservation.gpus {
            ReservedGpus::Named(uuids) => {
                let mut missing = Vec::new();
                for uuid in uuids {
                    match views.clone().find(|(u, name, _)| *u == uuid && name.mig_slot.is_none()) {
                        Some((_, name, true)) => {
                            found.gpus.push(name);
                            found.uuids.push(uuid.clone());
                        }
                        Some((_, name, false)) => {
                            found.gpus.push(name);
                            found.uuids.push(uuid.clone());
                            missing.push(format!("{name} unavailable"));
                        }
                        None => missing.push(format!("{uuid} missing")),
                    }
                }
                if !missing.is_empty() {
                    found.problem = Some(format!("cannot be honoured: {}", missing.join(", ")));
                }
            }
            ReservedGpus::Count(count) => {
                for (uuid, name, available) in views.clone() {
                    if found.uuids.len() == *count as usize {
                        break;
                    }
                    if available && name.mig_slot.is_none() && !taken(uuid) {
                        found.gpus.push(name);
                        found.uuids.push(uuid.to_owned());
                    }
                }
                if found.uuids.len() < *count as usize {
                    found.problem = Some(format!(
                        "cannot be honoured: holds {count} GPUs, {} available",
                        found.uuids.len()
                    ));
                }
            }
        }
        resolved.push((reservation, found));
    }
    resolved.into_iter().map(|(_, r)| r).collect()
}

/// `GPU0,GPU1`.
pub fn gpu_list(gpus: &[GpuName]) -> String {
    gpus.iter().map(GpuName::to_string).collect::<Vec<_>>().join(",")
}

/// The reservations of one decision, resolved against its GPU table.
pub(super) struct Holds<'a> {
    now_ms: u64,
    all: &'a [GpuReservation],
    /// Per table position: the reservations holding it (not ended).
    by_position: Vec<Vec<&'a GpuReservation>>,
    /// Per reservation (same order as `all`): how many GPUs it holds now.
    held_count: Vec<usize>,
}

impl<'a> Holds<'a> {
    pub(super) fn new(all: &'a [GpuReservation], slots: &[GpuSlot<'_>], now_ms: u64) -> Self {
        let views = slots.iter().map(|s| (s.view.uuid.as_str(), s.name(), s.view.unavailable.is_none()));
        let resolved = resolve(all, views, now_ms);
        let mut by_position = vec![Vec::new(); slots.len()];
        let mut held_count = vec![0; all.len()];
        for found in &resolved {
            let Some(index) = all.iter().position(|r| r.name == found.name) else {
                unreachable!("resolve returns only names it was given")
            };
            held_count[index] = found.uuids.len();
            for uuid in &found.uuids {
                if let Some(position) = slots.iter().position(|s| s.view.uuid == *uuid) {
                    by_position[position].push(&all[index]);
                }
            }
        }
        Holds { now_ms, all, by_position, held_count }
    }

    /// Why a task that names a reservation must wait (the gate's `Wait`); `None` to try it
    /// (always for a task that names none).
    pub(super) fn verdict(&self, task: &WaitingTask) -> Option<String> {
        let name = task.gate.reservation.as_deref()?;
        let Some(index) = self.all.iter().position(|r| r.name == name) else {
            return Some(format!(
                "Reservation \"{name}\" does not exist (deleted, or never created): the task stays queued; cancel it (carma cancel {})",
                task.id
            ));
        };
        let reservation = &self.all[index];
        if !reservation.users.contains(&task.gate.user) {
            return Some(format!(
                "Reservation \"{name}\" is not open to this task's submitter (uid {}): the task stays queued; cancel it (carma cancel {})",
                task.gate.user, task.id
            ));
        }
        let now_ms = self.now_ms;
        if reservation.has_ended(now_ms) {
            return Some(format!(
                "Reservation \"{name}\" ended at {}: the task stays queued; cancel it (carma cancel {})",
                clock_text(reservation.end_ms, now_ms),
                task.id
            ));
        }
        let held = self.held_count[index];
        if task.gpus as usize > reservation.gpus.len() {
            return Some(format!(
                "Reservation \"{name}\" holds {} GPUs, the task asks for {}",
                reservation.gpus.len(),
                task.gpus
            ));
        }
        if !reservation.is_open(now_ms) {
            return Some(format!(
                "Reservation: waits for \"{name}\" from {}",
                clock_text(reservation.start_ms, now_ms)
            ));
        }
        if (task.gpus as usize) > held {
            return Some(format!(
                "Reservation \"{name}\" cannot be honoured now: {held} of its {} GPUs available",
                reservation.gpus.len()
            ));
        }
        None
    }

    /// The reservation that keeps `task` off the GPU at `position`, if any. A task that names
    /// a reservation is never kept off its GPUs by another (it runs only in its own: see
    /// [`Holds::eligible`]).
    pub(super) fn keeper(&self, position: usize, task: &WaitingTask) -> Option<&'a GpuReservation> {
        if task.gate.reservation.is_some() {
            return None;
        }
        self.by_position[position].iter().copied().find(|r| self.keeps_off(r, task))
    }

    /// Whether the GPU at `position` may take `task` at all: a task that names a reservation
    /// (and passed `verdict`, so its window is open) takes only that reservation's GPUs.
    pub(super) fn eligible(&self, position: usize, task: &WaitingTask) -> bool {
        match task.gate.reservation.as_deref() {
            Some(own) => self.by_position[position].iter().any(|r| r.name == own),
            None => true,
        }
    }

    /// A task that does not belong in `reservation` must stay off its GPUs now.
    fn keeps_off(&self, reservation: &GpuReservation, task: &WaitingTask) -> bool {
        if reservation.is_open(self.now_ms) {
            return true;
        }
        // Before the window: only a task sure to be gone by the start may use them.
        match task.gate.time_limit_ms {
            Some(limit) => self.now_ms.saturating_add(limit) > reservation.start_ms,
            None => true,
        }
    }
}

/// A reservation keeps the task (by table position: `kept`, with `eligible` its other rules)
/// from so many GPUs that fewer than `gpus` are left: it cannot start before the reservation
/// lets go, so, as the blocked head, it would only keep GPUs idle for nothing.
pub(super) fn too_few_left(kept: &[Option<&GpuReservation>], eligible: &[bool], gpus: u32) -> bool {
    let usable = kept.iter().zip(eligible).filter(|(k, e)| k.is_none() && **e).count();
    kept.iter().any(Option::is_some) && usable < gpus as usize
}

/// `held for "paper" from 09:00` (before the window) or `until 2026-12-05 09:00` (during it).
pub(super) fn held_words(reservation: &GpuReservation, now_ms: u64) -> String {
    let name = &reservation.name;
    if reservation.is_open(now_ms) {
        format!("held for \"{name}\" until {}", clock_text(reservation.end_ms, now_ms))
    } else {
        format!("held for \"{name}\" from {}", clock_text(reservation.start_ms, now_ms))
    }
}
