//! GPU-memory estimators: how much memory a training task will need per GPU, from its model
//! summary and batch size, and how that figure was reached.
//!
//! Four estimators sit behind one [`Estimator`] trait:
//! - `oracle`: the memory the user declared;
//! - `horus`: the Horus formula plus a documented CUDA-context term;
//! - `gpumemnet`: a faithful burn re-implementation of GPUMemNet's MLP-ensemble classifier;
//!   its answer is the upper edge of the predicted 1000-MiB bucket;
//! - `carma`: carma's own estimator: physically informed features, a burn regression and a
//!   conformal upper bound that placement uses.
//!
//! This module is the only one in the crate that knows burn (ARCHITECTURE.md). Weights are
//! embedded in the binary; `carma-train` (estimator-training/) produces them.

pub mod carma;
pub mod domain;
pub mod gpumemnet;
pub mod nets;
pub mod parse;
pub mod physics;
pub mod summary;
pub mod vision;

use std::path::Path;

use serde::Serialize;

pub use domain::Domain;
pub use summary::{Family, Layer, ModelSummary, SummaryStats};

/// Memory of the CUDA context and the framework's start-up allocations, in MiB: the smallest
/// label in the GPUMemNet data (an A100-40GB, PyTorch); every real run pays at least this.
pub const CONTEXT_FLOOR_MIB: u64 = 1443;
/// Largest estimate any estimator returns (1 TiB), so nonsense inputs cannot overflow.
pub const ESTIMATE_MIB_MAX: u64 = 1024 * 1024;
/// Names accepted by `--estimator` and [`by_name`].
pub const ESTIMATOR_NAMES: [&str; 4] = ["oracle", "horus", "gpumemnet", "carma"];
/// The estimator the tick uses for tasks with a model summary.
pub const TICK_ESTIMATOR: &str = "carma";

/// What an estimator gets: the summary, the batch size, and a declared figure if any.
#[derive(Clone, Copy, Debug)]
pub struct EstimateInput<'a> {
    /// The model's summary.
    pub summary: &'a ModelSummary,
    /// Training batch size per GPU.
    pub batch_size: u32,
    /// Memory the user declared, MiB (the `oracle` estimator's answer).
    pub declared_mib: Option<u64>,
}

/// One term of an explanation: a named amount of memory and how it was computed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Term {
    /// Short name ("context", "margin").
    pub name: String,
    /// Its amount, MiB (a correction may be negative).
    pub mib: f64,
    /// How it was computed.
    pub detail: String,
}

/// An estimate per GPU with its explanation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    /// The estimator that made it ([`ESTIMATOR_NAMES`]).
    pub method: String,
    /// Best guess, MiB.
    pub mib: u64,
    /// The figure placement uses, MiB; never below `mib`.
    pub upper_mib: u64,
    /// The terms that add up to `mib`, then the margin that leads to `upper_mib`.
    pub terms: Vec<Term>,
    /// One line on the method and its limits.
    pub note: String,
    /// Why the input lies outside what the estimator was trained on, when it does; the upper
    /// figure is then a conservative bound, not the calibrated one.
    pub outside_domain: Option<String>,
    /// Which upper figure carma's real-model estimator gave; `None` for the other estimators
    /// and carma's other paths.
    pub bound: Option<Bound>,
}

/// How carma's real-model estimator reached its upper figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    /// Inside the training spread: the calibrated quantile networks.
    Calibrated,
    /// Smaller than anything trained on (every out-of-range feature below the spread): the
    /// physical sum (context floor included) times a ratio calibrated on held-out runs, or
    /// the networks' upper figure where that is higher.
    BelowSpread,
    /// Larger than anything trained on, or not an image model: the whole training card (or
    /// more), since nothing smaller has been seen to be enough.
    WholeCard,
}

impl Bound {
    /// The name `--json` writes.
    pub fn name(self) -> &'static str {
        match self {
            Bound::Calibrated => "calibrated",
            Bound::BelowSpread => "below-spread",
            Bound::WholeCard => "whole-card",
        }
    }
}

/// Why an estimator gave no figure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EstimateError {
    /// The estimator does not apply to this input (e.g. oracle without a declared figure).
    #[error("{estimator}: {reason}")]
    NotApplicable {
        /// The estimator's name.
        estimator: String,
        /// Why it does not apply.
        reason: String,
    },
    /// Embedded weights failed to load; a build problem, reported as such.
    #[error("{estimator}: embedded weights unusable: {detail}")]
    Weights {
        /// The estimator's name.
        estimator: String,
        /// What failed.
        detail: String,
    },
}

/// A memory estimator.
pub trait Estimator: Send + Sync {
    /// Short name, as accepted by `--estimator`.
    fn name(&self) -> &'static str;
    /// Estimates one task.
    fn estimate(&self, input: &EstimateInput) -> Result<Estimate, EstimateError>;
}

/// The estimator called `name`, or `None` for an unknown name.
pub fn by_name(name: &str) -> Option<&'static dyn Estimator> {
    match name {
        "oracle" => Some(&physics::Oracle),
        "horus" => Some(&physics::Horus),
        "gpumemnet" => Some(&gpumemnet::GpuMemNet),
        "carma" => Some(&carma::Carma),
        _ => None,
    }
}

impl Estimate {
    /// The explanation as one line, for the journal and `carma show`.
    pub fn explanation(&self) -> String {
        let terms: Vec<String> =
            self.terms.iter().map(|t| format!("{} {:.0} MiB ({})", t.name, t.mib, t.detail)).collect();
        format!("{}; {}", terms.join(" + "), self.note)
    }

    /// Builds an estimate, clamping both figures to [`ESTIMATE_MIB_MAX`] and keeping
    /// `upper_mib >= mib`.
    pub fn new(method: &str, mib: f64, upper_mib: f64, terms: Vec<Term>, note: String) -> Estimate {
        let clamp = |v: f64| {
            if v.is_finite() { v.ceil().clamp(0.0, ESTIMATE_MIB_MAX as f64) as u64 } else { ESTIMATE_MIB_MAX }
        };
        let mib = clamp(mib);
        let upper_mib = clamp(upper_mib).max(mib);
        debug_assert!(upper_mib >= mib);
        Estimate {
            method: method.to_string(),
            mib,
            upper_mib,
            terms,
            note,
            outside_domain: None,
            bound: None,
        }
    }
}

impl Term {
    /// A term named `name` of `mib` MiB, computed as `detail` says.
    pub fn new(name: &str, mib: f64, detail: impl Into<String>) -> Term {
        Term { name: name.to_string(), mib, detail: detail.into() }
    }
}

/// The embedded model in `cell`, loaded by `load` on first use; a load failure (a build
/// problem: the weights are compiled in) is kept and reported as such on every call.
pub(crate) fn load_once<M>(
    cell: &'static std::sync::OnceLock<Result<M, String>>,
    estimator: &str,
    load: impl FnOnce() -> Result<M, String>,
) -> Result<&'static M, EstimateError> {
    cell.get_or_init(load)
        .as_ref()
        .map_err(|detail| EstimateError::Weights { estimator: estimator.into(), detail: detail.clone() })
}

/// Reads and parses a summary file in any supported format (see [`parse`]). Anything but a
/// regular file of at most [`summary::SUMMARY_BYTES_MAX`] bytes is refused without blocking.
pub fn read_summary(path: &Path) -> Result<ModelSummary, String> {
    let text = read_summary_text(path)?;
    parse::parse_any(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The text of a summary file, bounded and never blocking (see [`read_summary`]).
pub fn read_summary_text(path: &Path) -> Result<String, String> {
    let bytes = crate::fsutil::read_regular(path, summary::SUMMARY_BYTES_MAX)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))
}

/// [`read_summary`] for a privileged caller reading a path a user named (a Slurm Epilog or
/// job_submit.lua): only a regular file owned by `uid` is read, bounded, and nothing on the
/// path is opened for real before that is known (`fsutil::open_user_file`: no user's link is
/// followed, no FIFO or device is opened).
pub fn read_summary_owned_by(path: &Path, uid: u32) -> Result<ModelSummary, String> {
    use std::io::Read;
    let shown = path.display();
    let file = crate::fsutil::open_user_file(path, Some(uid)).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => {
            format!("{shown}: not a regular file owned by uid {uid}; summaries must belong to the submitter")
        }
        _ => format!("{shown}: {e}"),
    })?;
    let mut bytes = Vec::new();
    file.take(summary::SUMMARY_BYTES_MAX + 1).read_to_end(&mut bytes).map_err(|e| format!("{shown}: {e}"))?;
    if bytes.len() as u64 > summary::SUMMARY_BYTES_MAX {
        return Err(format!("{shown}: more than the {} bytes allowed", summary::SUMMARY_BYTES_MAX));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown}: not UTF-8 text"))?;
    parse::parse_any(&text).map_err(|e| format!("{shown}: {e}"))
}

/// Parses summary text read earlier (the copy `carma submit` embedded in the spool).
pub fn parse_summary(text: &str) -> Result<ModelSummary, String> {
    parse::parse_any(text)
}

/// The batch size to estimate with: the explicit one, else the summary's, else an error.
pub fn batch_size(summary: &ModelSummary, explicit: Option<u32>) -> Result<u32, String> {
    explicit.or(summary.batch_size).filter(|b| *b > 0).ok_or_else(|| {
        "no batch size: pass --batch-size N or set batch_size in the task spec or the summary".to_string()
    })
}

#[cfg(test)]
mod tests;
