//! A job's share of a GPU from what its user knows: declared memory, or a model summary and a
//! batch size estimated with the tick's estimator. Used by `carma sbatch`, by `carma slurm
//! shards` (which `job_submit.lua` calls) and nowhere else, so both paths agree.

use std::path::Path;

use crate::error::{Error, Result};
use crate::estimate::{self, EstimateInput};

use super::comment::{CarmaComment, safe_path};
use super::shards::{Fit, ShardRule};

/// What the user gave.
#[derive(Clone, Debug, Default)]
pub struct MemoryInput<'a> {
    /// Declared memory per GPU, e.g. `12GiB`.
    pub mem: Option<&'a str>,
    /// `--model-summary`: a model summary file to estimate from.
    pub model_summary: Option<&'a Path>,
    /// `--batch-size` for the summary's estimate.
    pub batch_size: Option<u32>,
    /// Read the summary only if this user owns it (`job_submit.lua` runs as SlurmUser).
    pub owner_uid: Option<u32>,
}

/// The figure a share is computed from, and how it was found.
#[derive(Clone, Debug, PartialEq)]
pub struct Need {
    /// MiB per GPU: the estimate's upper bound, or the declared memory.
    pub mib: u64,
    /// `declared`, or the estimator's name.
    pub source: String,
    /// One line on how the figure was reached.
    pub explanation: String,
    /// The summary's absolute path and the batch size used, for the job's comment.
    pub summary: Option<(String, u32)>,
    /// The declared memory per GPU, MiB, when one was given.
    pub declared_mib: Option<u64>,
}

/// The figure for a job: the tick's estimator when a summary is given (the same rule as the
/// tick: an estimate wins over a declared figure), else the declared memory.
pub fn need(input: &MemoryInput) -> Result<Need> {
    let declared_mib = input.mem.map(crate::spec::parse_memory_mib).transpose().map_err(Error::BadInput)?;
    let Some(path) = input.model_summary else {
        let mib = declared_mib.ok_or_else(|| {
            Error::BadInput(
                "no memory figure; give --mem 12GiB, or --model-summary FILE --batch-size N".into(),
            )
        })?;
        return Ok(Need {
            mib,
            source: "declared".into(),
            explanation: "declared".into(),
            summary: None,
            declared_mib,
        });
    };
    let absolute =
        std::path::absolute(path).map_err(|e| Error::io(format!("cannot resolve {}", path.display()), e))?;
    let text =
        absolute.to_str().ok_or_else(|| Error::BadInput(format!("{} is not UTF-8", path.display())))?;
    // The path goes into the job's comment, which job_submit.lua may hand to a shell.
    let text = safe_path(text).map_err(Error::BadInput)?;
    let summary = match input.owner_uid {
        Some(uid) => estimate::read_summary_owned_by(&absolute, uid),
        None => estimate::read_summary(&absolute),
    }
    .map_err(Error::BadInput)?;
    let batch_size = estimate::batch_size(&summary, input.batch_size).map_err(Error::BadInput)?;
    let estimator = estimate::by_name(estimate::TICK_ESTIMATOR).expect("the tick's estimator exists");
    let estimate = estimator
        .estimate(&EstimateInput { summary: &summary, batch_size, declared_mib })
        .map_err(|e| Error::BadInput(format!("{}: {e}", absolute.display())))?;
    Ok(Need {
        mib: estimate.upper_mib,
        source: estimate.method.clone(),
        explanation: format!(
            "{} estimate {} MiB, upper bound {} MiB, batch {batch_size}",
            estimate.method, estimate.mib, estimate.upper_mib
        ),
        summary: Some((text, batch_size)),
        declared_mib,
    })
}

/// The shards for `need`, refused with one line when no GPU of `per_gpu` shards holds them.
pub fn shards(need: &Need, rule: &ShardRule, per_gpu: Option<u32>) -> Result<u32> {
    match rule.fit(need.mib, per_gpu) {
        Fit::Fits { shards } => Ok(shards),
        Fit::Never { shards, per_gpu } => Err(Error::BadInput(format!(
            "{} MiB ({}) + {} MiB margin needs shard:{shards}, but one GPU holds {per_gpu} shards of {} MiB; lower the memory or the batch size",
            need.mib, need.source, rule.margin_mib, rule.shard_mib
        ))),
    }
}

/// The comment `carma sbatch` gives a job: what the user said, plus the figure used.
pub fn comment_for(need: &Need, retries: Option<u32>) -> CarmaComment {
    CarmaComment {
        mem_mib: need.declared_mib,
        summary: need.summary.as_ref().map(|(path, _)| path.clone()),
        batch_size: need.summary.as_ref().map(|(_, bs)| *bs),
        need_mib: Some(need.mib),
        retries,
        submit_ms: None,
    }
}
