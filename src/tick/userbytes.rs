//! The bytes carma keeps for a user in the state directory end with the attempt: once the
//! tick has committed an attempt's end, its run-folder logs and script copy are sealed
//! ([`crate::exec::seal`]): root's, readable by the submitter, cut to `log-bytes-max`. After
//! that, nothing of the submitter's in `runs/` can grow.
//!
//! Below the free-space floor, one user's bytes must not stop everyone: the tick first
//! removes quarantine's junk, measures again, then counts each user's bytes here and holds
//! only the users over `[limits] state-bytes-per-user-max`, while the disk keeps
//! `free-space-reserve` ([`holds`], pure). With nobody over the bound, everybody waits.
//!
//! Sealing follows the commit of the end, so a tick killed between the two leaves that
//! attempt's files unsealed (still under the cap the supervisor kept): a crash window of one
//! commit, not a way to choose.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::Config;
use crate::home::Home;
use crate::journal::State;
use crate::journal::state::AttemptRef;

use super::runner::ActiveAttempt;
use super::space::{self, DiskFull};

/// Seals the files of every attempt in `before` (active when the tick began) that `state`
/// (after the commit) has ended. A file that cannot be sealed is named on stderr.
pub(super) fn seal_ended(home: &Home, state: &State, before: &[ActiveAttempt], config: &Config) {
    for ended in ended_attempts(state, before) {
        let Ok(run_dir) = crate::exec::run_dir(home.root(), ended.task.as_str(), ended.attempt) else {
            continue;
        };
        if let Err(why) = crate::exec::seal::seal_ended_attempt(&run_dir, config.limits.log_bytes_max) {
            eprintln!("carma tick: task {} attempt {}: {why}", ended.task, ended.attempt);
        }
    }
}

/// The local attempts of `before` that have ended in `state`.
fn ended_attempts<'a>(state: &State, before: &'a [ActiveAttempt]) -> Vec<&'a ActiveAttempt> {
    before
        .iter()
        .filter(|active| matches!(active.at, AttemptRef::Local(_)))
        .filter(|active| {
            state.tasks.get(&active.task).is_some_and(|task| {
                task.attempts.iter().any(|a| a.number == active.attempt && a.ended_ms.is_some())
            })
        })
        .collect()
}

/// Who waits because the state directory is short of space.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct DiskHolds {
    /// Every task waits: the old hold, for a disk that is full whoever filled it.
    pub all: Option<DiskFull>,
    /// Only these users' tasks wait, each with this reason.
    pub users: BTreeMap<u32, String>,
    /// What the tick says on stderr, if anything.
    pub detail: Option<String>,
}

/// The limits the hold weighs, from `[limits]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SpaceLimits {
    /// `free-space-floor`.
    pub floor_bytes: u64,
    /// `free-space-reserve`, used as at most the floor.
    pub reserve_bytes: u64,
    /// `state-bytes-per-user-max`.
    pub per_user_bytes_max: u64,
}

/// The pure decision: with `free_bytes` at or above the floor nobody waits. Below it, the
/// users whose bytes pass their own bound wait, and only they, as long as the reserve is
/// free; with nobody over the bound, or below the reserve, everybody waits (the disk is full
/// of ordinary use, or too full to start anything).
pub(super) fn holds(
    free_bytes: u64,
    bytes_by_user: &BTreeMap<u32, u64>,
    limits: SpaceLimits,
    dir: &Path,
) -> DiskHolds {
    let Some(full) = space::disk_full(Some(free_bytes), limits.floor_bytes, dir) else {
        return DiskHolds::default();
    };
    let over: Vec<u32> = bytes_by_user
        .iter()
        .filter(|(_, bytes)| **bytes > limits.per_user_bytes_max)
        .map(|(uid, _)| *uid)
        .collect();
    if over.is_empty() || free_bytes < limits.reserve_bytes.min(limits.floor_bytes) {
        let detail = Some(full.detail.clone());
        return DiskHolds { all: Some(full), users: BTreeMap::new(), detail };
    }
    let (floor, bound, reserve) = (
        crate::text::bytes(limits.floor_bytes),
        crate::text::bytes(limits.per_user_bytes_max),
        crate::text::bytes(limits.reserve_bytes.min(limits.floor_bytes)),
    );
    let reason = format!(
        "DiskFull: less than {floor} free in {}, and the submitter's files there hold more than the [limits] state-bytes-per-user-max of {bound}; only their tasks wait: remove their old run folders or raise the bound",
        dir.display()
    );
    let shown: Vec<String> = over.iter().map(u32::to_string).collect();
    let detail = format!(
        "{} free in {}, below the {floor} free-space-floor: the tasks of uid {} (over the {bound} state-bytes-per-user-max) wait; the others start while {reserve} is free",
        crate::text::bytes(free_bytes),
        dir.display(),
        shown.join(", ")
    );
    DiskHolds {
        all: None,
        users: over.into_iter().map(|uid| (uid, reason.clone())).collect(),
        detail: Some(detail),
    }
}

/// Below the floor (`measured` is the free space the caller measured at the tick's start,
/// `None` when it measured nothing): removes quarantine's junk first, measures again, counts
/// each user's bytes in the state directory (their attempts' files, their spool folder), then
/// decides with [`holds`]. With room, it does nothing.
pub(super) fn below_floor(home: &Home, state: &State, config: &Config, measured: Option<u64>) -> DiskHolds {
    let limits = SpaceLimits {
        floor_bytes: config.limits.free_space_floor_bytes,
        reserve_bytes: config.limits.free_space_reserve_bytes,
        per_user_bytes_max: config.limits.state_bytes_per_user_max,
    };
    let Some(free) = measured.filter(|free| *free < limits.floor_bytes) else { return DiskHolds::default() };
    if let Err(err) = crate::intake::empty_quarantine(home) {
        eprintln!("carma tick: {err}");
    }
    let free = space::free_bytes(home.root()).unwrap_or(free);
    holds(free, &bytes_by_user(home, state), limits, home.root())
}

/// The disk bytes each user holds in the state directory: every attempt's logs and script
/// copy (by its task's submitter) and what waits in their spool folder.
fn bytes_by_user(home: &Home, state: &State) -> BTreeMap<u32, u64> {
    let mut bytes = crate::intake::spool_bytes_by_user(home);
    for task in state.tasks.values() {
        for attempt in &task.attempts {
            let Ok(run_dir) = crate::exec::run_dir(home.root(), task.id.as_str(), attempt.number) else {
                continue;
            };
            let held = crate::exec::seal::attempt_disk_bytes(&run_dir);
            let total = bytes.entry(task.submitter_uid).or_default();
            *total = total.saturating_add(held);
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    //! Goal: below the floor only the users over their own bound wait while the reserve is
    //! free; with nobody over it or below the reserve, everybody waits; at the floor nobody.
    //! Method: the pure decision over a table; the reasons pinned.
    use super::*;

    const LIMITS: SpaceLimits =
        SpaceLimits { floor_bytes: 512 << 20, reserve_bytes: 128 << 20, per_user_bytes_max: 1 << 30 };

    #[test]
    fn only_the_user_over_their_bound_waits_while_the_reserve_is_free() {
        let dir = Path::new("/var/lib/carma");
        let users = BTreeMap::from([(1001, 3 << 30), (1002, 10 << 20)]);
        let held = holds(300 << 20, &users, LIMITS, dir);
        assert_eq!(held.all, None);
        assert_eq!(
            held.users,
            BTreeMap::from([(
                1001,
                "DiskFull: less than 512 MiB free in /var/lib/carma, and the submitter's files there hold more than the [limits] state-bytes-per-user-max of 1 GiB; only their tasks wait: remove their old run folders or raise the bound".to_string()
            )])
        );
        assert_eq!(
            held.detail.as_deref(),
            Some(
                "300 MiB free in /var/lib/carma, below the 512 MiB free-space-floor: the tasks of uid 1001 (over the 1 GiB state-bytes-per-user-max) wait; the others start while 128 MiB is free"
            )
        );
        let everyone = holds(100 << 20, &users, LIMITS, dir);
        assert!(everyone.all.is_some() && everyone.users.is_empty(), "below the reserve: {everyone:?}");
        let honest = BTreeMap::from([(1001, 500 << 20), (1002, 10 << 20)]);
        let full = holds(300 << 20, &honest, LIMITS, dir);
        assert!(full.all.is_some() && full.users.is_empty(), "nobody over the bound: {full:?}");
        assert_eq!(holds(512 << 20, &users, LIMITS, dir), DiskHolds::default(), "at the floor is room");
    }
}
