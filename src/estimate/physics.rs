//! The physical terms of training memory, and the two estimators that are pure formulas.
//!
//! Training memory is, to first order: the CUDA context and framework start-up; the weights,
//! their gradients and the optimizer state (16 bytes per parameter for Adam in fp32); and the
//! activations kept for the backward pass (batch × activations × 4 bytes). The caching
//! allocator, cuDNN workspaces and temporary buffers add on top of that.

use super::{
    CONTEXT_FLOOR_MIB, Estimate, EstimateError, EstimateInput, Estimator, Family, SummaryStats, Term,
};

const MIB: f64 = 1024.0 * 1024.0;

/// The first-order terms for one input, in MiB.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhysicalTerms {
    /// Weights + gradients + optimizer state.
    pub state_mib: f64,
    /// Batch × activations per sample × bytes per value.
    pub activations_mib: f64,
    /// Batch × the largest layer's output × bytes per value.
    pub activations_layer_max_mib: f64,
    /// Parameters of the model.
    pub params: u64,
    /// Output elements of every layer per sample.
    pub activations: u64,
    /// Bytes of state per parameter: weight, gradient and optimizer state.
    pub bytes_per_param: u64,
    /// Bytes per activation value at the training precision.
    pub activation_bytes: u64,
}

/// Computes the first-order terms.
pub fn terms(input: &EstimateInput) -> PhysicalTerms {
    terms_with(input, &input.summary.stats())
}

/// The first-order terms from stats already computed (they walk every layer).
pub fn terms_with(input: &EstimateInput, stats: &SummaryStats) -> PhysicalTerms {
    let bytes_per_param = input.summary.bytes_per_param();
    let activation_bytes = input.summary.activation_bytes();
    let batch = f64::from(input.batch_size);
    PhysicalTerms {
        state_mib: stats.params as f64 * bytes_per_param as f64 / MIB,
        activations_mib: batch * stats.activations as f64 * activation_bytes as f64 / MIB,
        activations_layer_max_mib: batch * stats.activations_layer_max as f64 * activation_bytes as f64 / MIB,
        params: stats.params,
        activations: stats.activations,
        bytes_per_param,
        activation_bytes,
    }
}

impl PhysicalTerms {
    /// The explanation terms: context, state, activations.
    pub fn explain(&self, batch_size: u32) -> Vec<Term> {
        vec![
            Term::new("context", CONTEXT_FLOOR_MIB as f64, "CUDA context floor"),
            Term::new(
                "weights+grads+optimizer",
                self.state_mib,
                format!("{} params x {} B", self.params, self.bytes_per_param),
            ),
            Term::new(
                "activations",
                self.activations_mib,
                format!("batch {batch_size} x {} per sample x {} B", self.activations, self.activation_bytes),
            ),
        ]
    }
}

/// The memory the user declared (`memory = "12GiB"`), the paper's "oracle".
pub struct Oracle;

impl Estimator for Oracle {
    fn name(&self) -> &'static str {
        "oracle"
    }

    fn estimate(&self, input: &EstimateInput) -> Result<Estimate, EstimateError> {
        let Some(declared) = input.declared_mib else {
            return Err(EstimateError::NotApplicable {
                estimator: "oracle".into(),
                reason: "no declared memory (set memory in the task spec or pass --memory-mib)".into(),
            });
        };
        let terms = vec![Term::new("declared", declared as f64, "the user's figure")];
        Ok(Estimate::new("oracle", declared as f64, declared as f64, terms, "taken as given".into()))
    }
}

/// Horus (Yeung et al.): bytes = 4·(batch·A + P + batch·P), where A is activations per
/// sample and P parameters, as the original system used it. Horus counts neither the CUDA
/// context nor the optimizer state; carma adds the context floor so that its figure is
/// comparable with `nvidia-smi` peaks, and says so in the explanation.
pub struct Horus;

impl Estimator for Horus {
    fn name(&self) -> &'static str {
        "horus"
    }

    fn estimate(&self, input: &EstimateInput) -> Result<Estimate, EstimateError> {
        let stats = input.summary.stats();
        let batch = f64::from(input.batch_size);
        let (a, p) = (stats.activations as f64, stats.params as f64);
        let formula_mib = 4.0 * (batch * a + p + batch * p) / MIB;
        let terms = vec![
            Term::new("formula", formula_mib, format!("4 B x (batch x {a} + {p} + batch x {p})")),
            Term::new("context", CONTEXT_FLOOR_MIB as f64, "CUDA context floor, added by carma"),
        ];
        let total = formula_mib + CONTEXT_FLOOR_MIB as f64;
        Ok(Estimate::new("horus", total, total, terms, "Horus formula; no margin".into()))
    }
}

/// Activations are multiplied by this for non-MLP families: PyTorch keeps the forward
/// outputs and, during backward, gradient buffers of about the same size for the widest
/// layers; 1.5 covers that without calibration data.
pub const FORMULA_ACTIVATION_FACTOR: f64 = 1.5;
/// Extra margin on the non-MLP formula, as a fraction of the total.
pub const FORMULA_MARGIN: f64 = 0.10;

/// The physical terms with a conservative margin, for families without training data:
/// point = context + state + activations; upper = (context + state + 1.5 × activations +
/// 2 × largest layer) × 1.10.
pub fn formula_estimate(physical: &PhysicalTerms, batch_size: u32, family: Family) -> Estimate {
    let context = CONTEXT_FLOOR_MIB as f64;
    let point = context + physical.state_mib + physical.activations_mib;
    let extra_activations = (FORMULA_ACTIVATION_FACTOR - 1.0) * physical.activations_mib;
    let widest = 2.0 * physical.activations_layer_max_mib;
    let upper = (point + extra_activations + widest) * (1.0 + FORMULA_MARGIN);
    let mut terms = physical.explain(batch_size);
    terms.push(Term::new(
        "margin",
        upper - point,
        format!(
            "+{:.1} x activations, +2 x largest layer, then +{:.0}%",
            FORMULA_ACTIVATION_FACTOR - 1.0,
            FORMULA_MARGIN * 100.0
        ),
    ));
    let note = format!(
        "{family:?}: first-order formula with a conservative margin, not calibrated (no training data)"
    );
    Estimate::new("carma", point, upper, terms, note)
}
