//! Memory estimates from model summaries, journaled so that replay never re-runs a model.
//!
//! `carma submit` reads the summary as the submitter (a regular file, bounded, never
//! blocking) and embeds its text in the spool file; ingest estimates from that text
//! ([`from_text`]) and journals one `Estimated` or `EstimateFailed` record with the task's
//! `Submitted`. The tick therefore never opens a file a user controls: a FIFO or `/dev/zero`
//! named as a summary is refused at submit, where it only costs the submitter.
//!
//! Tasks submitted by carma 0.1 carry only a path; for them [`estimate_records`] journals one
//! `EstimateFailed` saying so, and they are placed with their declared memory or the
//! no-knowledge margin.

use crate::estimate::{self, EstimateInput};
use crate::id::TaskId;
use crate::journal::{Event, Record, State};
use crate::spec::TaskSpec;

/// Most records [`estimate_records`] writes per tick.
pub const ESTIMATES_PER_TICK_MAX: usize = 64;

/// The estimate for a submission whose summary text was captured at submit.
pub(super) fn from_text(id: &TaskId, spec: &TaskSpec, text: &str) -> Event {
    let estimator = estimate::by_name(estimate::TICK_ESTIMATOR).expect("the tick's estimator exists");
    let estimated = estimate::parse_summary(text).and_then(|summary| {
        summary.validate()?;
        let batch_size = estimate::batch_size(&summary, spec.batch_size)?;
        let input = EstimateInput { summary: &summary, batch_size, declared_mib: spec.memory_mib };
        estimator.estimate(&input).map_err(|e| e.to_string())
    });
    match estimated {
        Ok(e) => Event::Estimated {
            task: id.clone(),
            method: e.method.clone(),
            mib: e.mib,
            upper_mib: e.upper_mib,
            explanation: e.explanation(),
        },
        Err(reason) => Event::EstimateFailed { task: id.clone(), reason, summary_stamp: 0 },
    }
}

/// EstimateFailed records for waiting tasks that name a summary file but carry no text (they
/// were submitted by carma 0.1), once per task.
pub fn estimate_records(state: &State, now_ms: u64) -> Vec<Record> {
    state
        .waiting()
        .filter(|task| task.spec.model_summary.is_some() && task.estimate.is_none() && task.estimate_failure.is_none())
        .take(ESTIMATES_PER_TICK_MAX)
        .map(|task| Record {
            time_ms: now_ms,
            event: Event::EstimateFailed {
                task: task.id.clone(),
                reason: "its model summary was not captured at submit (submitted by carma 0.1); resubmit the task to have it estimated".into(),
                summary_stamp: 0,
            },
        })
        .collect()
}
