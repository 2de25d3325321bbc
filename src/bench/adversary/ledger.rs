//! What the journal said, in the shape the fifth wave's invariants ask about: the records that
//! are facts about a task's history rather than its state now (the State keeps only the last
//! preemption of an attempt and the last withdrawal, so a count of notices must come from the
//! records). Read after every tick from where the last read stopped; no judgement here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::error::Result;
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::Event;

/// One task's history as the fifth wave's invariants need it.
#[derive(Debug, Clone, Default)]
pub(super) struct History {
    /// (attempt, used MiB) of each MemoryExceeded.
    pub(super) exceeded: Vec<(u32, u64)>,
    /// (attempt, peak MiB the record gives) of each OomDetected.
    pub(super) ooms: Vec<(u32, Option<u64>)>,
    /// (after attempt, recovery queue?, raised requirement) of each Requeued that followed a
    /// memory stop or a corroborated out-of-memory of that attempt.
    pub(super) relaunches: Vec<(u32, bool, Option<u64>)>,
    /// (attempt, journal time ms) of each preemption notice: Preempted or Suspended, the two
    /// of one attempt in the same commit (a suspend that fell back to requeue) counted once.
    pub(super) notices: BTreeSet<(u32, u64)>,
    /// PreemptionWithdrawn records.
    pub(super) withdrawals: u32,
    /// (attempt, from ms, to ms) of each suspension; `to` is `None` while it lasts.
    pub(super) suspensions: Vec<(u32, u64, Option<u64>)>,
}

impl History {
    /// Milliseconds `attempt` spent journaled as suspended, up to `now_ms`.
    pub(super) fn suspended_ms(&self, attempt: u32, now_ms: u64) -> u64 {
        self.suspensions
            .iter()
            .filter(|(a, ..)| *a == attempt)
            .map(|(_, from, to)| to.unwrap_or(now_ms).saturating_sub(*from))
            .sum()
    }
}

/// The records read so far.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// The last sequence number read.
    seq: u64,
    /// Per task.
    pub(super) tasks: BTreeMap<TaskId, History>,
    /// Ids whose spool file the tick refused (Rejected).
    pub(super) rejected: BTreeSet<TaskId>,
    /// The attempt of each task whose end was a memory stop or a corroborated out-of-memory,
    /// not yet followed by its Requeued or Failed.
    pending_relaunch: BTreeMap<TaskId, u32>,
}

impl Ledger {
    /// Reads the records journaled since the last call.
    pub(super) fn read(&mut self, home: &Home) -> Result<()> {
        let from = self.seq + 1;
        let mut records = Vec::new();
        crate::session::read(home, Duration::from_secs(5), |journal, _| {
            journal.for_each(from, |seq, record| {
                records.push((seq, record));
                Ok(true)
            })
        })?;
        for (seq, record) in records {
            self.seq = seq;
            self.fold(record.time_ms, record.event);
        }
        Ok(())
    }

    fn fold(&mut self, time_ms: u64, event: Event) {
        match event {
            Event::Rejected { task: Some(task), .. } => {
                self.rejected.insert(task);
            }
            Event::MemoryExceeded { task, attempt, used_mib, .. } => {
                self.tasks.entry(task.clone()).or_default().exceeded.push((attempt, used_mib));
                self.pending_relaunch.insert(task, attempt);
            }
            Event::OomDetected { task, attempt, peak_mib, .. } => {
                self.tasks.entry(task.clone()).or_default().ooms.push((attempt, peak_mib));
                self.pending_relaunch.insert(task, attempt);
            }
            Event::Requeued { task, recovery, requirement_mib, .. } => {
                if let Some(attempt) = self.pending_relaunch.remove(&task) {
                    self.tasks.entry(task).or_default().relaunches.push((attempt, recovery, requirement_mib));
                }
            }
            Event::Failed { task, .. } | Event::Finished { task, .. } | Event::Cancelled { task, .. } => {
                self.pending_relaunch.remove(&task);
            }
            Event::Preempted { task, attempt, .. } => {
                self.tasks.entry(task).or_default().notices.insert((attempt, time_ms));
            }
            Event::Suspended { task, attempt, .. } => {
                let history = self.tasks.entry(task).or_default();
                history.notices.insert((attempt, time_ms));
                history.suspensions.push((attempt, time_ms, None));
            }
            Event::Resumed { task, attempt, .. } => {
                let history = self.tasks.entry(task).or_default();
                let open =
                    history.suspensions.iter_mut().rev().find(|(a, _, to)| *a == attempt && to.is_none());
                if let Some((_, _, to)) = open {
                    *to = Some(time_ms);
                }
            }
            Event::PreemptionWithdrawn { task, .. } => {
                self.tasks.entry(task).or_default().withdrawals += 1;
            }
            _ => {}
        }
    }

    /// The history of `task` (empty when the journal said nothing about it).
    pub(super) fn of(&self, task: &TaskId) -> History {
        self.tasks.get(task).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    //! Goal: the ledger pairs each relaunch with the memory stop or corroborated out-of-memory
    //! before it (and no other requeue), counts a suspend that fell back to requeue as one
    //! notice, and measures suspensions. Method: records folded in order, as a journal holds
    //! them.
    use super::*;
    use crate::journal::RequeueMode;
    use crate::sched::RecoveryMode;

    fn requeued(task: &TaskId, recovery: bool) -> Event {
        Event::Requeued {
            task: task.clone(),
            recovery,
            requirement_mib: Some(9000),
            recovery_mode: if recovery {
                RequeueMode::Recovery(RecoveryMode::Exclusive)
            } else {
                RequeueMode::Main
            },
            reason: "r".into(),
        }
    }

    #[test]
    fn relaunches_pair_with_their_stop_and_notices_count_once_per_commit() {
        let (a, b) = (TaskId::from_parts(1, 1), TaskId::from_parts(2, 2));
        let mut ledger = Ledger::default();
        // A preemption's requeue is no relaunch; a memory stop's and an OOM's are.
        ledger.fold(
            10,
            Event::Preempted { task: a.clone(), attempt: 1, by: b.clone(), reason: "p".into(), lost_ms: 0 },
        );
        ledger.fold(11, requeued(&a, false));
        ledger.fold(
            20,
            Event::MemoryExceeded {
                task: a.clone(),
                attempt: 2,
                gpu: "GPU-0".into(),
                used_mib: 7168,
                declared_mib: 1024,
                reason: "used".into(),
                share_source: Some(crate::sched::ShareSource::Declared),
            },
        );
        ledger.fold(21, requeued(&a, false));
        ledger.fold(
            30,
            Event::OomDetected {
                task: a.clone(),
                attempt: 3,
                evidence: "oom".into(),
                peak_mib: Some(30_000),
            },
        );
        ledger.fold(30, requeued(&a, true));
        let history = ledger.of(&a);
        assert_eq!(history.relaunches, [(2, false, Some(9000)), (3, true, Some(9000))]);
        assert_eq!(history.exceeded, [(2, 7168)]);
        assert_eq!(history.ooms, [(3, Some(30_000))]);
        // Suspended then Preempted in one commit (a failed suspend) is one notice; a second
        // notice of the same attempt later is another; the suspension lasts until Resumed.
        ledger.fold(40, Event::Suspended { task: b.clone(), attempt: 1, by: a.clone() });
        ledger.fold(40, Event::Resumed { task: b.clone(), attempt: 1 });
        ledger.fold(
            40,
            Event::Preempted { task: b.clone(), attempt: 1, by: a.clone(), reason: "p".into(), lost_ms: 0 },
        );
        ledger.fold(50, Event::Suspended { task: b.clone(), attempt: 1, by: a.clone() });
        ledger.fold(55, Event::PreemptionWithdrawn { task: b.clone(), attempt: 1, reason: "w".into() });
        let history = ledger.of(&b);
        assert_eq!(history.notices.len(), 2);
        assert_eq!(history.withdrawals, 1);
        assert_eq!(history.suspended_ms(1, 70), 20, "0 ms, then 50 to now");
        assert_eq!(ledger.of(&TaskId::from_parts(3, 3)).notices.len(), 0);
    }
}
