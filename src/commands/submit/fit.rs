//! A warning at submit when a model summary's estimate is more than any GPU of the queue has:
//! the tick would then run the task alone on a whole GPU, where it is likely to run out of
//! memory, and the submitter should hear that now rather than read it in a placement reason.

use crate::estimate::{self, EstimateInput};
use crate::home::Home;
use crate::inventory::Inventory;
use crate::spec::TaskSpec;

/// The warning line for `spec` with summary `text`, if its estimate exceeds every GPU the
/// queue's inventory lists; `None` when it fits, or nothing is known to compare with.
pub(super) fn too_big_warning(home: &Home, spec: &TaskSpec, text: &str) -> Option<String> {
    let largest_mib = Inventory::load(home)?.gpus.iter().map(|g| g.memory_total_mib).max()?;
    let summary = estimate::parse_summary(text).ok()?;
    let batch_size = estimate::batch_size(&summary, spec.batch_size).ok()?;
    let estimator = estimate::by_name(estimate::TICK_ESTIMATOR)?;
    let input = EstimateInput { summary: &summary, batch_size, declared_mib: spec.memory_mib };
    let estimated = estimator.estimate(&input).ok()?;
    (estimated.upper_mib > largest_mib).then(|| {
        format!(
            "warning: the model summary's estimate ({} per GPU) is more than any GPU here has ({}); the task will run alone on a whole GPU and may run out of memory: lower --batch-size, or check the summary",
            crate::commands::render::gib(estimated.upper_mib),
            crate::commands::render::gib(largest_mib)
        )
    })
}
