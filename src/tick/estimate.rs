//! The tick's estimate step: one `Estimated` record per waiting task that has a model summary
//! and no estimate yet, from carma's estimator. Placement then uses its upper bound
//! (`place::requirement_mib`).
//!
//! The figure is journaled, so replay never re-runs the model. A summary that cannot be read
//! or estimated produces no record; the task is placed with its declared memory or the
//! no-knowledge margin. FIXME: such a task is retried every tick (bounded by
//! `ESTIMATES_PER_TICK_MAX` and the summary size limit); journal the failure once instead.

use std::path::Path;

use crate::estimate::{self, EstimateInput};
use crate::journal::{Event, Record, State};

/// Most estimates one tick computes, so a flood of submissions cannot stall a tick.
pub const ESTIMATES_PER_TICK_MAX: usize = 64;

/// The Estimated records for this tick.
pub fn estimate_records(state: &State, now_ms: u64) -> Vec<Record> {
    let estimator = estimate::by_name(estimate::TICK_ESTIMATOR).expect("the tick's estimator exists");
    let records: Vec<Record> = state
        .waiting()
        .filter(|task| task.estimate.is_none())
        .filter_map(|task| Some((task, task.spec.model_summary.as_deref()?)))
        .take(ESTIMATES_PER_TICK_MAX)
        .filter_map(|(task, path)| {
            let summary = estimate::read_summary(Path::new(path)).ok()?;
            let batch_size = estimate::batch_size(&summary, task.spec.batch_size).ok()?;
            let input = EstimateInput { summary: &summary, batch_size, declared_mib: task.spec.memory_mib };
            let e = estimator.estimate(&input).ok()?;
            Some(Record {
                time_ms: now_ms,
                event: Event::Estimated {
                    task: task.id.clone(),
                    method: e.method.clone(),
                    mib: e.mib,
                    upper_mib: e.upper_mib,
                    explanation: e.explanation(),
                },
            })
        })
        .collect();
    debug_assert!(records.len() <= ESTIMATES_PER_TICK_MAX);
    records
}
