//! The estimate step: one `Estimated` record per waiting task that has a model summary and no
//! estimate yet, from carma's estimator.
//!
//! The figure is journaled, so replay never re-runs the model. A summary that cannot be read
//! or estimated gets one `EstimateFailed` record naming the reason and the summary file's
//! version (size and modification time); the task is placed with its declared memory or the
//! no-knowledge margin, and the summary is tried again only once the file changes.

use std::path::Path;

use crate::estimate::{self, EstimateInput};
use crate::journal::{Event, Record, State, Task};

/// Most estimates one tick computes, so a flood of submissions cannot stall a tick.
pub const ESTIMATES_PER_TICK_MAX: usize = 64;

/// The version of a summary file: its size and modification time, mixed; 0 when it cannot be
/// read (a missing file that reappears then counts as changed).
pub fn summary_stamp(path: &Path) -> u64 {
    let Ok(meta) = std::fs::metadata(path) else { return 0 };
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    // SplitMix64's finaliser, so that a change of size or of time moves the whole stamp.
    let mut z = modified ^ meta.len().rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)).max(1)
}

/// Whether the tick should (re)try this task's summary: no estimate yet, and no failure
/// recorded for the file as it is now.
fn wants_estimate(task: &Task, path: &str) -> bool {
    task.estimate.is_none()
        && task.estimate_failure.as_ref().is_none_or(|f| f.summary_stamp != summary_stamp(Path::new(path)))
}

/// The Estimated and EstimateFailed records for this tick.
pub fn estimate_records(state: &State, now_ms: u64) -> Vec<Record> {
    let estimator = estimate::by_name(estimate::TICK_ESTIMATOR).expect("the tick's estimator exists");
    let records: Vec<Record> = state
        .waiting()
        .filter_map(|task| Some((task, task.spec.model_summary.as_deref()?)))
        .filter(|(task, path)| wants_estimate(task, path))
        .take(ESTIMATES_PER_TICK_MAX)
        .map(|(task, path)| {
            // The version is taken before reading, so a file changed mid-read is tried again.
            let stamp = summary_stamp(Path::new(path));
            let event = match estimate_one(task, path, estimator) {
                Ok(e) => Event::Estimated {
                    task: task.id.clone(),
                    method: e.method.clone(),
                    mib: e.mib,
                    upper_mib: e.upper_mib,
                    explanation: e.explanation(),
                },
                Err(reason) => Event::EstimateFailed { task: task.id.clone(), reason, summary_stamp: stamp },
            };
            Record { time_ms: now_ms, event }
        })
        .collect();
    debug_assert!(records.len() <= ESTIMATES_PER_TICK_MAX);
    records
}

fn estimate_one(
    task: &Task,
    path: &str,
    estimator: &dyn estimate::Estimator,
) -> Result<estimate::Estimate, String> {
    let summary = estimate::read_summary(Path::new(path))?;
    summary.validate()?;
    let batch_size = estimate::batch_size(&summary, task.spec.batch_size)?;
    let input = EstimateInput { summary: &summary, batch_size, declared_mib: task.spec.memory_mib };
    estimator.estimate(&input).map_err(|e| e.to_string())
}
