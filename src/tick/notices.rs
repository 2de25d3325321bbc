//! Which notices a tick sends: the ends, BEGIN/REQUEUE mails, array summaries and time-limit
//! mails the fold says are due, at most [`NOTIFY_PER_TICK_MAX`] a tick, shared out per user.
//!
//! Why per user: a tick sends a bounded number of notices so a burst of ends cannot make it
//! long, and without a share one user with a thousand notices due would hold every other
//! user's mail back by thirty ticks. Each user with notices due gets an equal share of the
//! tick's bound (round robin, one each in turn, over the submitters' uids); a user's own
//! notices go in the fold's order, so a task's BEGIN is never sent after its end.
//!
//! Pure: what is sent is decided apart from sending it (`notify_records` in the tick).

use std::collections::BTreeMap;

use crate::config::NotifyConfig;
use crate::id::TaskId;
use crate::journal::State;
use crate::notify::{Channel, NOTIFY_PER_TICK_MAX, Prepared};

/// One notice due, before it is prepared: whose it is and what it is.
enum Due<'s> {
    /// A BEGIN, REQUEUE or time-limit mail of a task, by its kind's name.
    Mail(&'s TaskId, &'s str),
    /// The end notices (mail, command) of an ended task.
    End(&'s TaskId),
    /// The summary mail of an array whose last member ended.
    Array(&'s TaskId),
}

/// The notices due this tick, each prepared (or why it cannot be), at most
/// [`NOTIFY_PER_TICK_MAX`] of them, an equal share per user (see the module docs).
pub(super) fn due(state: &State, notify: &NotifyConfig, now_ms: u64) -> Vec<(TaskId, String, Vec<Prepared>)> {
    let candidates = candidates(state, now_ms);
    let uids: Vec<u32> = candidates.iter().map(|(uid, _)| *uid).collect();
    let chosen = fair_share(&uids, NOTIFY_PER_TICK_MAX);
    let mut due = Vec::new();
    for ((_, candidate), take) in candidates.into_iter().zip(chosen) {
        if take {
            due.extend(prepare(state, candidate, notify));
        }
    }
    due
}

/// Every notice due, with its owner's uid, in the order the tick tells them: BEGIN and
/// REQUEUE before the ends, so a task that began and ended within one tick is told in that
/// order; then array summaries, then time-limit mails. Cheap: nothing is prepared here.
fn candidates(state: &State, now_ms: u64) -> Vec<(u32, Due<'_>)> {
    let uid_of = |id: &TaskId| state.tasks.get(id).map(|t| t.submitter_uid);
    let mut out = Vec::new();
    for (id, kind) in &state.mail_due {
        out.extend(uid_of(id).map(|uid| (uid, Due::Mail(id, kind.as_str()))));
    }
    for id in &state.notify_due {
        out.extend(uid_of(id).map(|uid| (uid, Due::End(id))));
    }
    if !state.array_mail_due.is_empty() {
        // An array is one user's: the uid of any member is its owner's.
        let mut owners: BTreeMap<&TaskId, u32> = BTreeMap::new();
        for task in state.tasks.values() {
            if let Some(array) = &task.spec.array {
                owners.entry(&array.id).or_insert(task.submitter_uid);
            }
        }
        for array in &state.array_mail_due {
            // An array with no member left in the State is still tried (its mail says why
            // it cannot be sent), as uid 0's share.
            out.push((owners.get(array).copied().unwrap_or(0), Due::Array(array)));
        }
    }
    // Time-limit mails: only running tasks that named an address can have one due.
    let running = state.tasks.values().filter(|t| t.spec.mail_user.is_some() && t.active_attempt().is_some());
    for task in running {
        for kind in crate::notify::limit_mails_due(task, now_ms) {
            out.push((task.submitter_uid, Due::Mail(&task.id, kind)));
        }
    }
    out
}

/// The notice of one candidate, prepared for sending.
fn prepare(state: &State, due: Due<'_>, notify: &NotifyConfig) -> Option<(TaskId, String, Vec<Prepared>)> {
    match due {
        Due::Mail(id, kind) => {
            let task = state.tasks.get(id)?;
            let notice = crate::notify::mail_notice(task, kind, notify).map_err(|e| (Channel::Mail, e));
            Some((id.clone(), kind.to_string(), vec![notice]))
        }
        Due::End(id) => {
            let task = state.tasks.get(id)?;
            Some((id.clone(), crate::journal::notices::END.into(), crate::notify::notices(task, notify)))
        }
        Due::Array(array) => {
            let notice = crate::notify::array_notice(state, array, notify).map_err(|e| (Channel::Mail, e));
            Some((array.clone(), crate::journal::notices::ARRAY.into(), vec![notice]))
        }
    }
}

/// Which of the candidates owned by `uids` (in order) are taken: at most `max` in all, shared
/// out round robin over the uids, one each in turn, and for each uid its first ones. So a
/// uid with fewer than its equal share takes all of its own and leaves the rest to others.
fn fair_share(uids: &[u32], max: usize) -> Vec<bool> {
    let mut wanted: BTreeMap<u32, usize> = BTreeMap::new();
    for uid in uids {
        *wanted.entry(*uid).or_default() += 1;
    }
    let mut share: BTreeMap<u32, usize> = BTreeMap::new();
    let mut left = max;
    while left > 0 {
        let before = left;
        for (uid, want) in &wanted {
            let given = share.entry(*uid).or_default();
            if left > 0 && *given < *want {
                *given += 1;
                left -= 1;
            }
        }
        if left == before {
            break;
        }
    }
    let mut taken: BTreeMap<u32, usize> = BTreeMap::new();
    uids.iter()
        .map(|uid| {
            let count = taken.entry(*uid).or_default();
            let take = *count < share.get(uid).copied().unwrap_or(0);
            *count += usize::from(take);
            take
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::fair_share;

    /// Goal: a user with a flood of notices due cannot hold another user's back: with 1,000
    /// of uid 1000's ahead of uid 1001's one, uid 1001's is sent in the same tick, and the
    /// rest of the bound goes to uid 1000 in its own order.
    #[test]
    fn one_users_flood_leaves_anothers_notice_in_the_same_tick() {
        let mut uids = vec![1000; 1000];
        uids.push(1001);
        let taken = fair_share(&uids, 32);
        assert!(taken[1000], "uid 1001's notice waits behind uid 1000's");
        assert_eq!(taken.iter().filter(|t| **t).count(), 32);
        assert!(taken[..31].iter().all(|t| *t), "uid 1000's first 31, in order");
        assert!(!taken[31..1000].iter().any(|t| *t));
    }

    proptest! {
        /// The bound holds, nothing is left while there is room, each uid's taken ones are
        /// its first ones, and no uid gets more than another unless that one took all it had.
        #[test]
        fn the_share_is_bounded_equal_and_in_order(
            uids in proptest::collection::vec(0u32..5, 0..120),
            max in 0usize..40,
        ) {
            let taken = fair_share(&uids, max);
            let total = taken.iter().filter(|t| **t).count();
            prop_assert_eq!(total, max.min(uids.len()));
            let mut per: std::collections::BTreeMap<u32, (usize, usize, bool)> = Default::default();
            for (uid, take) in uids.iter().zip(&taken) {
                let (got, had, gap) = per.entry(*uid).or_default();
                *had += 1;
                if *take {
                    prop_assert!(!*gap, "uid {} skipped one of its own and took a later one", uid);
                    *got += 1;
                } else {
                    *gap = true;
                }
            }
            for (uid, (got, had, _)) in &per {
                for (other, (got_other, _, _)) in &per {
                    prop_assert!(
                        got >= had || *got + 1 >= *got_other,
                        "uid {} got {} of {} while uid {} got {}", uid, got, had, other, got_other
                    );
                }
            }
        }
    }
}
