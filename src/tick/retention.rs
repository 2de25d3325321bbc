//! Retention: the run folders of ended tasks go once they are older than `[retention]
//! runs-keep` or past the submitter's `runs-per-user-max` latest ended tasks.
//!
//! Observe, decide, apply, as the rest of the tick: [`prune`] lists `runs/` once (the
//! observation: a folder already gone costs nothing, and a tick whose `runs/` holds no task's
//! folder, as the simulator's, stops there); [`decide`] is pure (State, the folders present,
//! the config and now in; the tasks whose folders go out, oldest end first), counts each
//! submitter's folders, and never names a task with an attempt still open (a running task, or
//! a cancelled one whose processes are still being stopped); [`apply`] removes at most
//! [`FOLDERS_PER_TICK_MAX`] folders and [`ENTRIES_PER_TICK_MAX`] entries a tick through
//! `exec::prune` (no link followed); what does not fit waits for the next tick. Nothing is
//! journaled: the journal keeps every fact, the run folder only the files.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::RetentionConfig;
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::State;

/// Run folders removed in one tick at most.
pub(super) const FOLDERS_PER_TICK_MAX: usize = 32;
/// Files, links and folders removed in one tick at most (a folder's owner may have filled it).
pub(super) const ENTRIES_PER_TICK_MAX: u64 = 4096;
/// Names of `runs/` read in one tick at most.
const RUNS_LISTED_MAX: usize = 1 << 16;

/// Retention's whole step: observe `runs/`, decide, apply (module docs).
pub(super) fn prune(home: &Home, state: &State, config: &RetentionConfig, now_ms: u64) {
    let present = listed(home);
    if !present.is_empty() {
        apply(home, &decide(state, &present, config, now_ms));
    }
}

/// The ended tasks among `present` (the task folders in `runs/`) whose run folders go at
/// `now_ms`, oldest end first (then by id): each submitter's folders beyond their
/// `runs_per_user_max` latest-ended, and every one of a task ended more than `runs_keep_ms`
/// ago. A task with an open attempt is never among them, nor a folder the State has no task
/// for.
pub(super) fn decide(
    state: &State,
    present: &BTreeSet<String>,
    config: &RetentionConfig,
    now_ms: u64,
) -> Vec<TaskId> {
    let mut ended_by_user: BTreeMap<u32, Vec<(u64, &TaskId)>> = BTreeMap::new();
    let tasks = present.iter().filter_map(|name| state.tasks.get_key_value(&TaskId::parse(name)?));
    for (id, task) in tasks {
        let Some(ended_ms) = task.ended_ms() else { continue };
        if task.attempts.iter().any(|a| a.ended_ms.is_none()) {
            continue;
        }
        ended_by_user.entry(task.submitter_uid).or_default().push((ended_ms, id));
    }
    let mut chosen: Vec<(u64, &TaskId)> = Vec::new();
    for (_, mut ended) in ended_by_user {
        // Latest first: the first `runs_per_user_max` are kept by the count.
        ended.sort_by(|a, b| b.cmp(a));
        let kept = match config.runs_per_user_max {
            0 => ended.len(),
            max => ended.len().min(max as usize),
        };
        for (i, (ended_ms, id)) in ended.into_iter().enumerate() {
            let too_old = config.runs_keep_ms.is_some_and(|keep| ended_ms.saturating_add(keep) < now_ms);
            if i >= kept || too_old {
                chosen.push((ended_ms, id));
            }
        }
    }
    chosen.sort();
    chosen.into_iter().map(|(_, id)| id.clone()).collect()
}

/// Removes the folders of `chosen`, within this tick's bounds. Returns how many went whole; a
/// failure is said on stderr and the tick goes on.
fn apply(home: &Home, chosen: &[TaskId]) -> usize {
    let mut entries_left = ENTRIES_PER_TICK_MAX;
    let mut gone = 0;
    for id in chosen.iter().take(FOLDERS_PER_TICK_MAX) {
        if entries_left == 0 {
            break;
        }
        match crate::exec::prune::remove_run_folder(&home.runs_dir(), id.as_str(), entries_left) {
            Ok(pruned) => {
                entries_left = entries_left.saturating_sub(pruned.entries);
                gone += usize::from(pruned.gone);
            }
            Err(e) => eprintln!("carma tick: run folder of ended task {id}: {e}; [retention] leaves it"),
        }
    }
    gone
}

/// The names in `runs/` (at most [`RUNS_LISTED_MAX`]); none when it cannot be read.
fn listed(home: &Home) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(home.runs_dir()) else { return BTreeSet::new() };
    entries
        .take(RUNS_LISTED_MAX)
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| TaskId::parse(name).is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    //! Goal: retention counts per submitter, honours the age, and never names a task with an
    //! open attempt. Method: random States of ended, running and cancelled-but-stopping tasks
    //! of a few users; the decision is checked against the rules it states. Fails on the code
    //! before retention (nothing is ever chosen, so the count bound is broken).
    use proptest::prelude::*;

    use super::*;

    const HOUR: u64 = 3_600_000;

    /// (submitter, ended hours ago or None for running, the end a cancel of a running attempt
    /// whose processes are still being stopped), folded from records as the tick would.
    fn state_of(tasks: &[(u32, Option<u64>, bool)], now_ms: u64) -> State {
        use crate::journal::{Event, ProcessRef, Record};
        let spec = crate::spec::parse_toml("t", "name = \"t\"\ncommand = [\"true\"]\n")
            .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
            .unwrap();
        let supervisor = ProcessRef { pid: 100, start_time_ticks: 1, boot_id: "b".into() };
        let mut state = State::default();
        let mut seq = 0;
        for (i, (uid, ended_ago, stopping)) in tasks.iter().enumerate() {
            let task = TaskId::from_parts(1_000 + i as u64, i as u32);
            let start = now_ms - 500 * HOUR;
            let mut records = vec![
                (start, Event::Submitted { task: task.clone(), submitter_uid: *uid, spec: spec.clone() }),
                (
                    start,
                    Event::Placed {
                        task: task.clone(),
                        attempt: 1,
                        gpus: vec!["GPU-a".into()],
                        exclusive: false,
                        requirement_mib: None,
                        reason: "fits".into(),
                    },
                ),
                (
                    start,
                    Event::Launched {
                        task: task.clone(),
                        attempt: 1,
                        supervisor: supervisor.clone(),
                        adopted: false,
                    },
                ),
            ];
            if let Some(ago) = ended_ago {
                let at = now_ms - ago * HOUR;
                let end = if *stopping {
                    Event::Cancelled { task: task.clone(), by_uid: *uid, reason: "cancelled".into() }
                } else {
                    Event::Finished { task: task.clone(), attempt: 1, exit_ms: at }
                };
                records.push((at, end));
            }
            for (time_ms, event) in records {
                seq += 1;
                state.apply(seq, &Record { time_ms, event });
            }
        }
        state
    }

    proptest! {
        #[test]
        fn decide_keeps_the_latest_per_user_and_never_an_open_attempt(
            tasks in proptest::collection::vec((0u32..3, proptest::option::of(0u64..400), any::<bool>()), 0..40),
            per_user in 0u32..5,
            keep_h in proptest::option::of(1u64..300),
        ) {
            let now = 1_000 * HOUR;
            let state = state_of(&tasks, now);
            let config = RetentionConfig { runs_keep_ms: keep_h.map(|h| h * HOUR), runs_per_user_max: per_user };
            // Every task's folder is there, but for the odd ones' (never launched, say).
            let present: BTreeSet<String> =
                state.tasks.keys().enumerate().filter(|(i, _)| i % 3 != 1).map(|(_, id)| id.to_string()).collect();
            let chosen = decide(&state, &present, &config, now);
            prop_assert_eq!(&chosen, &decide(&state, &present, &config, now), "pure");
            let chosen: BTreeSet<&TaskId> = chosen.iter().collect();
            for (id, task) in &state.tasks {
                let open = task.attempts.iter().any(|a| a.ended_ms.is_none()) || task.ended_ms().is_none();
                prop_assert!(!(open && chosen.contains(id)), "{} has an open attempt", id);
                prop_assert!(present.contains(id.as_str()) || !chosen.contains(id), "{} has no folder", id);
            }
            for uid in 0..3 {
                let mut ended: Vec<(u64, &TaskId)> = state.tasks.iter()
                    .filter(|(id, _)| present.contains(id.as_str()))
                    .filter(|(_, t)| t.submitter_uid == uid && t.ended_ms().is_some() && t.attempts.iter().all(|a| a.ended_ms.is_some()))
                    .map(|(id, t)| (t.ended_ms().unwrap(), id)).collect();
                ended.sort_by(|a, b| b.cmp(a));
                for (i, (ended_ms, id)) in ended.iter().enumerate() {
                    let over_count = per_user > 0 && i >= per_user as usize;
                    let too_old = keep_h.is_some_and(|h| ended_ms + h * HOUR < now);
                    prop_assert_eq!(chosen.contains(id), over_count || too_old, "user {} task {} (#{})", uid, id, i);
                }
            }
        }
    }
}
