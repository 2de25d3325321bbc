//! carma's own estimator: physically informed regression with a conformal upper bound.
//!
//! The network (`nets::CarmaNet`) adds a linear map of the physical terms (weights + grads +
//! Adam state at 16 B per parameter, batch × activations × 4 B, the largest layer's output)
//! to a small ReLU network over scaled log features that learns what the first-order terms
//! miss (allocator rounding, per-layer workspaces). Its output is the point estimate. The
//! upper bound adds a margin calibrated on held-out rows (split conformal at level
//! `1 - alpha`), so placement almost never under-estimates.
//!
//! The embedded weights were trained on the GPUMemNet MLP data (A100-40GB, PyTorch). CNN and
//! transformer summaries written by the dumper (they carry `saved_bytes_per_sample`) go to
//! the real-model networks in [`vision`], trained on measured timm runs. Other summaries
//! (torchsummary text, module dumps) use the physical terms with a documented conservative
//! margin instead ([`physics::formula_estimate`]); that path is uncalibrated and says so.

use std::sync::OnceLock;

use burn::module::Module;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::gpumemnet::activation_angle;
pub use super::nets::mib_to_output;
use super::nets::{CarmaNet, OUTPUT_SCALE_MIB, Scaler, load_bytes, matrix, output_to_mib, to_vec};
use super::physics::{self, formula_estimate};
use super::vision;
use super::{Estimate, EstimateError, EstimateInput, Estimator, Family, Term};

/// Physical inputs: state, activations, largest layer (units of `OUTPUT_SCALE_MIB`).
pub const PHYSICAL: usize = 3;
/// Scaled feature inputs.
pub const FEATURES: usize = 10;

const WEIGHTS: &[u8] = include_bytes!("weights/carma.bpk");
const META: &str = include_str!("weights/carma.json");

/// What the training run saved beside the weights.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Format version of this metadata.
    pub version: u32,
    /// The feature scaler fitted on the training rows.
    pub scaler: Scaler,
    /// Margin added to the point estimate for the upper bound, MiB.
    pub upper_margin_mib: f64,
    /// Miscoverage the margin was calibrated for.
    pub alpha: f64,
    /// Held-out rows the margin was calibrated on.
    pub calibration_rows: usize,
    /// Where the training data came from and its licence.
    pub provenance: String,
}

/// A trained carma network ready to predict.
#[derive(Debug)]
pub struct Model {
    /// The trained network.
    pub net: CarmaNet,
    /// What training saved beside it.
    pub meta: Meta,
    /// The device it runs on.
    pub device: Device,
}

/// One row of inputs: the physical terms (unscaled) and the features (unscaled).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Inputs {
    /// Physical terms, units of `OUTPUT_SCALE_MIB`.
    pub physical: [f32; PHYSICAL],
    /// Features before scaling.
    pub features: [f32; FEATURES],
}

/// The inputs of one estimate.
pub fn inputs(input: &EstimateInput) -> Inputs {
    let stats = input.summary.stats();
    let terms = physics::terms(input);
    let scale = OUTPUT_SCALE_MIB as f32;
    let (sin, cos) = activation_angle(&stats.activation_function);
    let batch = input.batch_size as f32;
    Inputs {
        physical: [
            terms.state_mib as f32 / scale,
            terms.activations_mib as f32 / scale,
            terms.activations_layer_max_mib as f32 / scale,
        ],
        features: [
            (stats.params as f32).ln_1p(),
            (stats.activations as f32).ln_1p(),
            batch.ln_1p(),
            (batch * stats.activations as f32).ln_1p(),
            (batch * stats.activations_layer_max as f32).ln_1p(),
            stats.linear_layers as f32,
            stats.batchnorm_layers as f32,
            stats.dropout_layers as f32,
            sin,
            cos,
        ],
    }
}

impl Model {
    /// Loads weights and metadata saved by `carma-train fit --estimator carma`.
    pub fn load(weights: &[u8], meta_json: &str, device: &Device) -> Result<Model, String> {
        let meta: Meta = serde_json::from_str(meta_json).map_err(|e| format!("metadata: {e}"))?;
        let net = load_bytes(CarmaNet::new(PHYSICAL, FEATURES, device), weights)?.valid();
        Ok(Model { net, meta, device: device.clone() })
    }

    /// Point estimates in MiB, one per row.
    pub fn predict_mib(&self, rows: &[Inputs]) -> Vec<f64> {
        if rows.is_empty() {
            return Vec::new();
        }
        let mut physical = Vec::with_capacity(rows.len() * PHYSICAL);
        let mut features = Vec::with_capacity(rows.len() * FEATURES);
        for row in rows {
            physical.extend_from_slice(&row.physical);
            let mut scaled = row.features;
            self.meta.scaler.apply(&mut scaled);
            features.extend_from_slice(&scaled);
        }
        let out = self
            .net
            .forward(matrix(physical, PHYSICAL, &self.device), matrix(features, FEATURES, &self.device));
        to_vec(out).into_iter().map(|v| output_to_mib(f64::from(v))).collect()
    }
}

/// The embedded model, loaded once per process.
pub fn embedded() -> Result<&'static Model, EstimateError> {
    static MODEL: OnceLock<Result<Model, String>> = OnceLock::new();
    super::load_once(&MODEL, "carma", || Model::load(WEIGHTS, META, &Device::flex()))
}

/// carma's estimator with the embedded weights.
pub struct Carma;

impl Estimator for Carma {
    fn name(&self) -> &'static str {
        "carma"
    }

    fn estimate(&self, input: &EstimateInput) -> Result<Estimate, EstimateError> {
        if input.summary.family != Family::Mlp {
            if vision::applies(input.summary)
                && let Some(estimate) = vision::estimate(input, vision::embedded()?)
            {
                return Ok(estimate);
            }
            return Ok(formula_estimate(&physics::terms(input), input.batch_size, input.summary.family));
        }
        let physical = physics::terms(input);
        let model = embedded()?;
        let point = model.predict_mib(&[inputs(input)])[0];
        let mut terms = physical.explain(input.batch_size);
        let first_order: f64 = terms.iter().map(|t| t.mib).sum();
        terms.push(Term::new("learned correction", point - first_order, "network over scaled log features"));
        terms.push(Term::new(
            "margin",
            model.meta.upper_margin_mib,
            format!("conformal, alpha {} on {} held-out runs", model.meta.alpha, model.meta.calibration_rows),
        ));
        let note =
            format!("point {point:.0} MiB, upper = point + margin; trained on GPUMemNet MLP runs (A100)");
        Ok(Estimate::new("carma", point, point + model.meta.upper_margin_mib, terms, note))
    }
}
