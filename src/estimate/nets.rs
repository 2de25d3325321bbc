//! The burn networks behind `gpumemnet` and `carma`, the feature scaler, and weight loading.
//!
//! Both networks are small enough that they run on burn's pure-Rust `flex` CPU device; the
//! training crate builds the same modules on an autodiff device.

use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::store::ModuleRecord;
use burn::tensor::activation::relu;
use burn::tensor::{Bytes, Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::CONTEXT_FLOOR_MIB;

/// Z-score scaling fitted on training rows: `(x - mean) / std`, per feature.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scaler {
    /// Training mean of each feature.
    pub mean: Vec<f32>,
    /// Training standard deviation of each feature (1 where it was constant).
    pub std: Vec<f32>,
}

impl Scaler {
    /// Fits on rows of equal width; a constant feature gets std 1.
    pub fn fit(rows: &[Vec<f32>]) -> Scaler {
        assert!(!rows.is_empty(), "cannot fit a scaler on no rows");
        let width = rows[0].len();
        let n = rows.len() as f64;
        let mut mean = vec![0f64; width];
        for row in rows {
            assert_eq!(row.len(), width);
            for (m, v) in mean.iter_mut().zip(row) {
                *m += f64::from(*v) / n;
            }
        }
        let mut var = vec![0f64; width];
        for row in rows {
            for ((s, v), m) in var.iter_mut().zip(row).zip(&mean) {
                *s += (f64::from(*v) - m).powi(2) / n;
            }
        }
        let std = var.iter().map(|v| if *v > 1e-12 { v.sqrt() as f32 } else { 1.0 }).collect();
        Scaler { mean: mean.iter().map(|m| *m as f32).collect(), std }
    }

    /// Scales one row in place.
    pub fn apply(&self, row: &mut [f32]) {
        debug_assert_eq!(row.len(), self.mean.len());
        for ((v, m), s) in row.iter_mut().zip(&self.mean).zip(&self.std) {
            *v = (*v - m) / s;
        }
    }
}

/// A row-major batch as a `[rows, width]` tensor.
pub fn matrix(values: Vec<f32>, width: usize, device: &Device) -> Tensor<2> {
    assert!(
        width > 0 && values.len().is_multiple_of(width),
        "matrix of {} values is not {width} wide",
        values.len()
    );
    let rows = values.len() / width;
    Tensor::from_data(TensorData::new(values, [rows, width]), device)
}

/// Reads a tensor back as a flat vector.
pub fn to_vec<const D: usize>(tensor: Tensor<D>) -> Vec<f32> {
    let data = tensor.into_data();
    data.as_slice::<f32>().map(<[f32]>::to_vec).expect("estimator tensors are f32")
}

/// Applies burnpack bytes (as embedded with `include_bytes!`) to a freshly built module.
pub fn load_bytes<M: Module>(module: M, bytes: &[u8]) -> Result<M, String> {
    let record =
        ModuleRecord::from_bytes(Bytes::from_bytes_vec(bytes.to_vec())).map_err(|e| e.to_string())?;
    module.try_load_record(record).map_err(|e| e.to_string())
}

/// One GPUMemNet ensemble member: (Linear → BatchNorm → ReLU) per hidden layer, then a
/// Linear to the class logits.
#[derive(Module, Debug)]
pub struct MemberNet {
    /// Hidden linear layers, input first.
    pub hidden: Vec<Linear>,
    /// One batch norm after each hidden layer.
    pub norms: Vec<BatchNorm>,
    /// The layer to the class logits.
    pub output: Linear,
}

/// The GPUMemNet ensemble: the members' logits are averaged.
#[derive(Module, Debug)]
pub struct EnsembleNet {
    /// The members, in [`super::gpumemnet::MEMBER_DEPTHS`] order.
    pub members: Vec<MemberNet>,
}

/// Hidden widths of a member of `depth` hidden layers: 8, then 4s (GPUMemNet's shape).
pub fn member_widths(depth: usize) -> Vec<usize> {
    (0..depth).map(|i| if i == 0 { 8 } else { 4 }).collect()
}

impl EnsembleNet {
    /// Builds an untrained ensemble, one member per entry of `depths`.
    pub fn new(depths: &[usize], inputs: usize, classes: usize, device: &Device) -> EnsembleNet {
        assert!(!depths.is_empty() && classes >= 2);
        let members = depths
            .iter()
            .map(|&depth| {
                let widths = member_widths(depth);
                let mut hidden = Vec::new();
                let mut norms = Vec::new();
                let mut previous = inputs;
                for &width in &widths {
                    hidden.push(LinearConfig::new(previous, width).init(device));
                    norms.push(BatchNormConfig::new(width).init(device));
                    previous = width;
                }
                MemberNet { hidden, norms, output: LinearConfig::new(previous, classes).init(device) }
            })
            .collect();
        EnsembleNet { members }
    }

    /// Averaged logits, `[rows, classes]`.
    pub fn forward(&self, input: Tensor<2>) -> Tensor<2> {
        let count = self.members.len() as f64;
        let mut sum: Option<Tensor<2>> = None;
        for member in &self.members {
            let mut x = input.clone();
            for (linear, norm) in member.hidden.iter().zip(&member.norms) {
                x = relu(norm.forward(linear.forward(x)));
            }
            let logits = member.output.forward(x);
            sum = Some(match sum {
                Some(s) => s + logits,
                None => logits,
            });
        }
        sum.expect("an ensemble has members").div_scalar(count)
    }
}

/// carma's network: a linear map of the physical terms plus a small ReLU network over the
/// scaled log features that corrects it. Output is in units of `output_scale_mib` above the
/// context floor.
#[derive(Module, Debug)]
pub struct CarmaNet {
    /// The linear map of the physical terms.
    pub physical: Linear,
    /// First hidden layer of the correction, over the scaled features.
    pub hidden: Linear,
    /// Second hidden layer of the correction.
    pub hidden2: Linear,
    /// The correction's output.
    pub output: Linear,
}

/// Width of CarmaNet's hidden layers.
pub const CARMA_HIDDEN: usize = 16;

impl CarmaNet {
    /// Builds an untrained network.
    pub fn new(physical_inputs: usize, feature_inputs: usize, device: &Device) -> CarmaNet {
        CarmaNet {
            physical: LinearConfig::new(physical_inputs, 1).init(device),
            hidden: LinearConfig::new(feature_inputs, CARMA_HIDDEN).init(device),
            hidden2: LinearConfig::new(CARMA_HIDDEN, CARMA_HIDDEN).init(device),
            output: LinearConfig::new(CARMA_HIDDEN, 1).init(device),
        }
    }

    /// Predictions, `[rows, 1]`.
    pub fn forward(&self, physical: Tensor<2>, features: Tensor<2>) -> Tensor<2> {
        let correction = self.output.forward(relu(self.hidden2.forward(relu(self.hidden.forward(features)))));
        self.physical.forward(physical) + correction
    }
}

/// The network's output unit, MiB.
pub const OUTPUT_SCALE_MIB: f64 = 1000.0;

/// The network's output unit to MiB; never below the context floor.
pub fn output_to_mib(output: f64) -> f64 {
    (CONTEXT_FLOOR_MIB as f64 + output * OUTPUT_SCALE_MIB).max(CONTEXT_FLOOR_MIB as f64)
}

/// A measured peak in the network's output unit.
pub fn mib_to_output(mib: f64) -> f64 {
    (mib - CONTEXT_FLOOR_MIB as f64) / OUTPUT_SCALE_MIB
}
