//! Where a summary lies against what carma's real-model networks were trained on, and which
//! upper figure that calls for.
//!
//! Three cases:
//! - inside the training spread: the calibrated quantile networks;
//! - smaller than anything seen (every feature out of range lies below the spread): the
//!   physical sum (context floor, weights, gradients, optimizer state, what autograd saves)
//!   times a ratio calibrated on measured runs, or the networks' upper figure where that is
//!   higher. Being smaller than every training model is no reason to reserve a whole card,
//!   and the physical sum is the part of the figure that does not need the networks. The
//!   ratio multiplies the context too: the smallest measured runs take 300-800 MiB above the
//!   context floor whatever their tensors (cuBLAS workspace, the allocator's first segments),
//!   so a ratio on the tensors alone would have to grow without bound as the model shrinks.
//!   "Below" is often below in *shape* only: a VGG has no norm layers and few layers, so
//!   against folds without VGGs it lies below the spread while its 133M parameters are well
//!   inside it. The physical ratio is one pooled quantile and knows nothing of the model; the
//!   networks saw models of that size, so the bound never goes under their figure (in
//!   cross-validation the physical bound alone missed VGG runs the networks covered);
//! - larger than anything seen, or not an image model: the whole training card (or more),
//!   since no smaller figure has been seen to be enough.

use super::ModelSummary;
use super::nets::OUTPUT_SCALE_MIB;
use super::nets::Scaler;
use super::{Bound, CONTEXT_FLOOR_MIB};

/// Physical inputs: state, saved activations without attention, attention probabilities,
/// leaf-module outputs, batch-independent saved bytes (units of `OUTPUT_SCALE_MIB`).
pub const PHYSICAL: usize = 5;

/// Scaled feature inputs.
pub const FEATURES: usize = 14;

/// One row of the real-model networks' inputs (the features the domain check measures).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Inputs {
    /// Physical terms ([`PHYSICAL`] of them), units of `OUTPUT_SCALE_MIB`.
    pub physical: [f32; PHYSICAL],
    /// Features before scaling, named by [`FEATURE_NAMES`].
    pub features: [f32; FEATURES],
    /// Least memory any run of this model can take, MiB: the context floor plus the weights
    /// and their gradients. Both figures are held to it, so that a model far from the
    /// training data (a large language model) cannot be estimated below its own parameters.
    pub floor_mib: f64,
}

/// How far a feature may lie from the training mean, in training standard deviations,
/// before the input counts as outside the training data. Measured on the features as the
/// networks see them: logarithms (`ln(1 + x)`) of counts and bytes, z-scored with the
/// training scaler, so that a model ten times smaller moves a feature by `ln 10 / sd`.
pub const DOMAIN_Z_MAX: f32 = 4.0;

/// The ratio of a run's peak to its physical sum, used below the training spread when the
/// metadata carries none (files written before it did): its 98.5th percentile over the timm
/// runs, as `carma-train fit` computes it (`reports/estimator/real-models.md`).
pub const BELOW_SPREAD_RATIO_DEFAULT: f64 = 1.91;

/// The feature names, in input order, for the domain explanation.
pub const FEATURE_NAMES: [&str; FEATURES] = [
    "parameters",
    "saved bytes per sample",
    "attention bytes per sample",
    "batch size",
    "saved bytes per batch",
    "activations per sample",
    "largest layer",
    "largest layer per batch",
    "conv2d layers",
    "linear layers",
    "norm layers",
    "layers",
    "input side",
    "saved bytes at any batch",
];

/// Where an input lies against the training data; the text says why, for the note.
#[derive(Clone, Debug, PartialEq)]
pub enum Domain {
    /// Every feature within the training spread.
    Inside,
    /// Every feature out of range lies below the spread.
    Below(String),
    /// A feature above the spread, or not an image model.
    Outside(String),
}

impl Domain {
    /// Why the input lies outside the training data, if it does.
    pub fn why(&self) -> Option<&str> {
        match self {
            Domain::Inside => None,
            Domain::Below(why) | Domain::Outside(why) => Some(why),
        }
    }

    /// The upper figure this case calls for.
    pub fn bound(&self) -> Bound {
        match self {
            Domain::Inside => Bound::Calibrated,
            Domain::Below(_) => Bound::BelowSpread,
            Domain::Outside(_) => Bound::WholeCard,
        }
    }
}

/// Where the input lies: the networks saw only image models (inputs `[channels, height,
/// width]`: timm's CNNs and vision transformers), each feature within the spread of theirs.
/// The training rows themselves are not in the repository, so the spread is the one the
/// scaler recorded: a feature more than [`DOMAIN_Z_MAX`] standard deviations from the
/// training mean is out of range.
pub fn domain(summary: &ModelSummary, row: &Inputs, scaler: &Scaler) -> Domain {
    if !is_vision(summary) {
        let what = match (summary.sequence_length, summary.input_shape.as_deref()) {
            (Some(tokens), _) => format!("a sequence of {tokens} tokens"),
            (None, Some(shape)) => format!("an input of shape {shape:?}"),
            (None, None) => "an input of unknown shape".to_string(),
        };
        return Domain::Outside(format!(
            "{what}, not an image: the networks were trained on image models only"
        ));
    }
    let mut scaled = row.features;
    scaler.apply(&mut scaled);
    // A non-finite feature (from a nonsense summary) is not known to be small.
    if let Some(i) = scaled.iter().position(|z| !z.is_finite()) {
        return Domain::Outside(format!("{} is not a finite number", FEATURE_NAMES[i]));
    }
    let mut out: Vec<(usize, f32)> =
        scaled.iter().enumerate().filter(|(_, z)| z.abs() > DOMAIN_Z_MAX).map(|(i, z)| (i, *z)).collect();
    if out.is_empty() {
        return Domain::Inside;
    }
    out.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
    if let Some(&(above, z)) = out.iter().find(|(_, z)| *z > 0.0) {
        return Domain::Outside(format!(
            "{} is {z:.1} standard deviations above the training mean (limit {DOMAIN_Z_MAX}, on the \
             scaled features the networks see)",
            FEATURE_NAMES[above]
        ));
    }
    let listed: Vec<String> = out.iter().map(|(i, z)| format!("{} {:.1}", FEATURE_NAMES[*i], -z)).collect();
    Domain::Below(format!(
        "smaller than every training model: {} standard deviations below the training mean \
         (limit {DOMAIN_Z_MAX}, on the scaled features the networks see)",
        listed.join(", ")
    ))
}

/// The physical sum, MiB: the context floor, weights, gradients and optimizer state,
/// batch × saved bytes per sample (attention included), and the bytes saved at any batch.
pub fn physical_sum_mib(row: &Inputs) -> f64 {
    let [state, saved, attention, _outputs, fixed] = row.physical;
    CONTEXT_FLOOR_MIB as f64 + f64::from(state + saved + attention + fixed) * OUTPUT_SCALE_MIB
}

/// The upper figure below the training spread: `ratio` × the physical sum, held to the row's
/// floor (context + weights and gradients).
pub fn below_spread_upper_mib(row: &Inputs, ratio: f64) -> f64 {
    (ratio * physical_sum_mib(row)).max(row.floor_mib)
}

/// Image input (`[channels, height, width]`) rather than tokens.
fn is_vision(summary: &ModelSummary) -> bool {
    summary.input_shape.as_ref().is_some_and(|s| s.len() == 3)
}
