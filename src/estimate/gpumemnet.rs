//! GPUMemNet, re-implemented faithfully in burn, with the original's bugs fixed.
//!
//! Features (thesis §5.4.4): number of Linear layers, BatchNorm layers, Dropout layers, batch
//! size, parameters, total activations, and the activation function as (sin, cos) of its
//! alphabetical index over a half circle. The target is a memory bucket (1000 MiB wide by
//! default); the answer is the upper edge of the predicted bucket. The classifier is an
//! ensemble of small MLPs (hidden widths 8, 4, 4, …, each Linear → BatchNorm → ReLU) whose
//! logits are averaged.
//!
//! Fixed here: features are scaled (log of the counts, then z-score; the original fed raw
//! counts up to 1e11); sin/cos stay floats (the original cast them to integers); and
//! cross-validation re-initialises the model per fold (in `carma-train`).
//!
//! The embedded weights were trained on the GPUMemNet MLP data only, so this estimator
//! answers for `family = "mlp"` summaries and declines the others rather than guess.

use std::f32::consts::PI;
use std::sync::OnceLock;

use burn::module::Module;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::nets::{EnsembleNet, Scaler, load_bytes, matrix, to_vec};
use super::summary::ACTIVATION_FUNCTIONS;
use super::{Estimate, EstimateError, EstimateInput, Estimator, Family, Term};

/// Number of input features.
pub const FEATURES: usize = 8;
/// Ensemble member depths: 1 to 7 hidden layers, then 1 to 6 (13 members, as published).
pub const MEMBER_DEPTHS: [usize; 13] = [1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6];

const WEIGHTS: &[u8] = include_bytes!("weights/gpumemnet.bpk");
const META: &str = include_str!("weights/gpumemnet.json");

/// What the training run saved beside the weights.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Format version of this metadata.
    pub version: u32,
    /// Width of one memory class, MiB.
    pub bucket_mib: u64,
    /// Number of memory classes the ensemble predicts.
    pub classes: usize,
    /// Hidden layers of each ensemble member.
    pub depths: Vec<usize>,
    /// The feature scaler fitted on the training rows.
    pub scaler: Scaler,
    /// Where the training data came from and its licence.
    pub provenance: String,
}

/// A trained GPUMemNet ready to predict.
#[derive(Debug)]
pub struct Model {
    /// The trained ensemble.
    pub net: EnsembleNet,
    /// What training saved beside it.
    pub meta: Meta,
    /// The device it runs on.
    pub device: Device,
}

/// The unscaled features of one input.
pub fn features(input: &EstimateInput) -> [f32; FEATURES] {
    let stats = input.summary.stats();
    let (sin, cos) = activation_angle(&stats.activation_function);
    [
        stats.linear_layers as f32,
        stats.batchnorm_layers as f32,
        stats.dropout_layers as f32,
        (input.batch_size as f32).ln_1p(),
        (stats.params as f32).ln_1p(),
        (stats.activations as f32).ln_1p(),
        sin,
        cos,
    ]
}

/// (sin, cos) of the activation function's alphabetical index spread over [0, π]; unknown
/// names are treated as ReLU.
pub fn activation_angle(name: &str) -> (f32, f32) {
    let last = (ACTIVATION_FUNCTIONS.len() - 1) as f32;
    let index = ACTIVATION_FUNCTIONS
        .iter()
        .position(|f| f.eq_ignore_ascii_case(name))
        .or_else(|| ACTIVATION_FUNCTIONS.iter().position(|f| *f == "ReLU"))
        .expect("ReLU is in the list");
    let angle = PI * index as f32 / last;
    (angle.sin(), angle.cos())
}

impl Model {
    /// Loads weights and metadata saved by `carma-train fit --estimator gpumemnet`.
    pub fn load(weights: &[u8], meta_json: &str, device: &Device) -> Result<Model, String> {
        let meta: Meta = serde_json::from_str(meta_json).map_err(|e| format!("metadata: {e}"))?;
        let net = EnsembleNet::new(&meta.depths, FEATURES, meta.classes, device);
        let net = load_bytes(net, weights)?.valid();
        Ok(Model { net, meta, device: device.clone() })
    }

    /// The predicted class (0-based bucket index) of each row of unscaled features.
    pub fn classes(&self, rows: &[[f32; FEATURES]]) -> Vec<usize> {
        if rows.is_empty() {
            return Vec::new();
        }
        let mut values = Vec::with_capacity(rows.len() * FEATURES);
        for row in rows {
            let mut row = *row;
            self.meta.scaler.apply(&mut row);
            values.extend_from_slice(&row);
        }
        let logits = to_vec(self.net.forward(matrix(values, FEATURES, &self.device)));
        logits
            .chunks(self.meta.classes)
            .map(|l| l.iter().enumerate().fold(0, |best, (i, v)| if *v > l[best] { i } else { best }))
            .collect()
    }

    /// The upper edge of a class's bucket, MiB.
    pub fn bucket_upper_mib(&self, class: usize) -> u64 {
        (class as u64 + 1) * self.meta.bucket_mib
    }
}

/// The class of a measured peak: bucket `ceil(mib / width)`, 0-based.
pub fn class_of(mib: f64, bucket_mib: u64) -> usize {
    ((mib / bucket_mib as f64).ceil() as usize).saturating_sub(1)
}

/// The embedded model, loaded once per process.
pub fn embedded() -> Result<&'static Model, EstimateError> {
    static MODEL: OnceLock<Result<Model, String>> = OnceLock::new();
    super::load_once(&MODEL, "gpumemnet", || Model::load(WEIGHTS, META, &Device::flex()))
}

/// The GPUMemNet estimator with the embedded weights.
pub struct GpuMemNet;

impl Estimator for GpuMemNet {
    fn name(&self) -> &'static str {
        "gpumemnet"
    }

    fn estimate(&self, input: &EstimateInput) -> Result<Estimate, EstimateError> {
        if input.summary.family != Family::Mlp {
            return Err(EstimateError::NotApplicable {
                estimator: "gpumemnet".into(),
                reason: format!(
                    "the embedded weights cover MLPs only (trained on the GPUMemNet MLP data); this is a {:?} summary",
                    input.summary.family
                ),
            });
        }
        let model = embedded()?;
        let row = features(input);
        let class = model.classes(&[row])[0];
        let upper = model.bucket_upper_mib(class);
        let bucket = model.meta.bucket_mib;
        let terms = vec![Term::new(
            "bucket",
            upper as f64,
            format!("class {class}: ({}, {upper}] MiB, upper edge", upper - bucket),
        )];
        let note = format!(
            "ensemble of {} MLPs over 8 features (linear {}, bn {}, dropout {}, batch {}, params, activations, activation angle)",
            model.meta.depths.len(),
            row[0],
            row[1],
            row[2],
            input.batch_size
        );
        Ok(Estimate::new("gpumemnet", upper as f64, upper as f64, terms, note))
    }
}
