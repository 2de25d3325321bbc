//! carma's real-model estimator: CNNs and vision transformers, learned from measured timm
//! training runs.
//!
//! The MLP network (`carma.rs`) knows nothing of convolutions, attention or the caching
//! allocator's habits on real architectures. This one is trained on real runs (691 timm
//! architectures × 5 batch sizes on an A100-40GB) with summaries from
//! `estimator-training/dump_model.py`, whose `saved_bytes_per_sample` (what autograd keeps
//! for backward, functional operations included) is the physical term that carries most of
//! the signal: across the data, memory grows with the batch at a median 1.07× that figure.
//!
//! Two networks of the same shape as carma's MLP network (a linear map of physical terms plus
//! a small ReLU correction over scaled log features) give:
//! - the point estimate, trained on the relative error;
//! - an upper quantile, trained with the pinball loss at level `tau`, then scaled by a
//!   factor calibrated on held-out architecture families (conformalised quantile regression)
//!   so that at most `alpha` of runs exceed it.
//!
//! Runs that filled the 40 GB card are censored: their need is at least the capacity, so
//! the losses only push estimates below the capacity up, never down.

use std::sync::OnceLock;

use burn::module::Module;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::domain::{self, Domain};
use super::nets::{CarmaNet, Scaler, load_bytes, matrix, to_vec};
use super::physics::{self, PhysicalTerms};
use super::{CONTEXT_FLOOR_MIB, Estimate, EstimateError, EstimateInput, ModelSummary, SummaryStats, Term};

/// The networks' output unit and its conversions are carma's MLP network's: MiB above the
/// context floor, in thousands.
pub use super::domain::{FEATURES, Inputs, PHYSICAL};
pub use super::nets::{OUTPUT_SCALE_MIB, mib_to_output, output_to_mib};

const MIB: f64 = 1024.0 * 1024.0;
const WEIGHTS: &[u8] = include_bytes!("weights/vision.bpk");
const META: &str = include_str!("weights/vision.json");

/// The point and upper networks of every ensemble member, saved as one record.
///
/// Members differ in initial weights and early-stopping split; the figure is their median.
/// One pair alone swung a lot from seed to seed (held-out mean over-provisioning 48–66% with
/// the factor chosen in hindsight), because the tail it must cover is heavy and the networks
/// are small; the median of several is steadier and its point figure more accurate.
#[derive(Module, Debug)]
pub struct VisionNets {
    /// Point networks, one per member.
    pub point: Vec<CarmaNet>,
    /// Upper-quantile networks, one per member.
    pub upper: Vec<CarmaNet>,
}

impl VisionNets {
    /// `members` untrained pairs on `device`.
    pub fn new(members: usize, device: &Device) -> VisionNets {
        let nets = || (0..members).map(|_| CarmaNet::new(PHYSICAL, FEATURES, device)).collect();
        VisionNets { point: nets(), upper: nets() }
    }
}

/// The median of the members' raw outputs, row by row: one member that stopped early in a
/// poor place must not drag the figure (a mean of three did, by 2.6 points of MdAPE). Taken on
/// the host: a few numbers per row, cheaper than concatenating and sorting tensors.
pub(super) fn median_forward(nets: &[CarmaNet], physical: &Tensor<2>, features: &Tensor<2>) -> Vec<f32> {
    let each: Vec<Vec<f32>> =
        nets.iter().map(|net| to_vec(net.forward(physical.clone(), features.clone()))).collect();
    let rows = each.first().map_or(0, Vec::len);
    let mut column = Vec::with_capacity(each.len());
    (0..rows)
        .map(|row| {
            column.clear();
            column.extend(each.iter().map(|member| member[row]));
            column.sort_by(f32::total_cmp);
            let middle = column.len() / 2;
            if column.len() % 2 == 1 { column[middle] } else { (column[middle - 1] + column[middle]) / 2.0 }
        })
        .collect()
}

/// What the training run saved beside the weights.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Format version of this metadata (2: ensembles).
    pub version: u32,
    /// Ensemble members (pairs of networks); version 1 files had one.
    #[serde(default = "one_member")]
    pub members: usize,
    /// The feature scaler fitted on the training rows; its spread is the domain check's.
    pub scaler: Scaler,
    /// Level the upper network was trained for (pinball loss).
    pub tau: f64,
    /// Factor on the upper network's figure, calibrated for miscoverage `alpha`.
    pub upper_factor: f64,
    /// Miscoverage the factor was calibrated for.
    pub alpha: f64,
    /// Held-out rows (censored ones included) the factor was calibrated on.
    pub calibration_rows: usize,
    /// Card capacity that censored rows reached, MiB.
    pub capacity_mib: f64,
    /// Ratio of peak to the physical sum, for inputs below the
    /// training spread ([`domain::below_spread_upper_mib`]); files written before it use
    /// [`domain::BELOW_SPREAD_RATIO_DEFAULT`].
    #[serde(default = "below_spread_ratio_default")]
    pub below_spread_ratio: f64,
    /// Where the training data came from and its licence.
    pub provenance: String,
}

fn one_member() -> usize {
    1
}

fn below_spread_ratio_default() -> f64 {
    domain::BELOW_SPREAD_RATIO_DEFAULT
}

/// Bytes per parameter that exist whatever the optimizer: the weight and its gradient, fp32.
pub const FLOOR_BYTES_PER_PARAM: f64 = 8.0;

/// Whether this estimator applies: a summary with the dumper's saved-bytes measurement.
pub fn applies(summary: &ModelSummary) -> bool {
    summary.saved_bytes_per_sample.is_some()
}

/// The inputs of one estimate; `None` without `saved_bytes_per_sample`.
pub fn inputs(input: &EstimateInput) -> Option<Inputs> {
    let stats = input.summary.stats();
    inputs_with(input, &stats, &physics::terms_with(input, &stats))
}

fn inputs_with(input: &EstimateInput, stats: &SummaryStats, terms: &PhysicalTerms) -> Option<Inputs> {
    let summary = input.summary;
    let saved = summary.saved_bytes_per_sample? as f64;
    let attention =
        summary.attention_bytes_per_sample.unwrap_or(0).min(summary.saved_bytes_per_sample?) as f64;
    let fixed = summary.saved_bytes_fixed.unwrap_or(0) as f64;
    let batch = f64::from(input.batch_size);
    let scale = OUTPUT_SCALE_MIB;
    let side = summary.input_shape.as_ref().and_then(|s| s.last().copied()).unwrap_or(224) as f64;
    let ln = |v: f64| v.max(0.0).ln_1p() as f32;
    Some(Inputs {
        physical: [
            (terms.state_mib / scale) as f32,
            (batch * (saved - attention) / MIB / scale) as f32,
            (batch * attention / MIB / scale) as f32,
            (terms.activations_mib / scale) as f32,
            (fixed / MIB / scale) as f32,
        ],
        features: [
            ln(stats.params as f64),
            ln(saved),
            ln(attention),
            ln(batch),
            ln(batch * saved),
            ln(stats.activations as f64),
            ln(stats.activations_layer_max as f64),
            ln(batch * stats.activations_layer_max as f64),
            ln(f64::from(stats.conv2d_layers)),
            ln(f64::from(stats.linear_layers)),
            ln(f64::from(stats.batchnorm_layers + stats.layernorm_layers)),
            ln(summary.layers.len() as f64),
            (side / 100.0) as f32,
            ln(fixed),
        ],
        floor_mib: CONTEXT_FLOOR_MIB as f64 + stats.params as f64 * FLOOR_BYTES_PER_PARAM / MIB,
    })
}

/// A trained pair of networks ready to predict.
#[derive(Debug)]
pub struct Model {
    /// The ensemble's networks.
    pub nets: VisionNets,
    /// What training saved beside them.
    pub meta: Meta,
    /// The device they run on.
    pub device: Device,
}

impl Model {
    /// Loads weights and metadata saved by `carma-train fit --estimator vision`.
    pub fn load(weights: &[u8], meta_json: &str, device: &Device) -> Result<Model, String> {
        let meta: Meta = serde_json::from_str(meta_json).map_err(|e| format!("metadata: {e}"))?;
        if meta.members == 0 {
            return Err("metadata: an ensemble needs at least one member".into());
        }
        let nets = load_bytes(VisionNets::new(meta.members, device), weights)?.valid();
        Ok(Model { nets, meta, device: device.clone() })
    }

    /// The ensemble's raw point and upper outputs for scaled inputs.
    fn forward(&self, rows: &[Inputs]) -> (Vec<f32>, Vec<f32>) {
        let (physical, features) = batch(rows, &self.meta.scaler, &self.device);
        (
            median_forward(&self.nets.point, &physical, &features),
            median_forward(&self.nets.upper, &physical, &features),
        )
    }

    /// (point, upper) in MiB, one pair per row; the upper figure includes the calibrated
    /// factor and is never below the point.
    pub fn predict_mib(&self, rows: &[Inputs]) -> Vec<(f64, f64)> {
        if rows.is_empty() {
            return Vec::new();
        }
        let (point, upper) = self.forward(rows);
        point
            .into_iter()
            .zip(upper)
            .zip(rows)
            .map(|((p, u), row)| {
                let p = output_to_mib(f64::from(p)).max(row.floor_mib);
                (p, (output_to_mib(f64::from(u)) * self.meta.upper_factor).max(p))
            })
            .collect()
    }
}

/// Rows as the two input matrices, features scaled.
pub fn batch(rows: &[Inputs], scaler: &Scaler, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let mut physical = Vec::with_capacity(rows.len() * PHYSICAL);
    let mut features = Vec::with_capacity(rows.len() * FEATURES);
    for row in rows {
        physical.extend_from_slice(&row.physical);
        let mut scaled = row.features;
        scaler.apply(&mut scaled);
        features.extend_from_slice(&scaled);
    }
    (matrix(physical, PHYSICAL, device), matrix(features, FEATURES, device))
}

/// The embedded model, loaded once per process.
pub fn embedded() -> Result<&'static Model, EstimateError> {
    static MODEL: OnceLock<Result<Model, String>> = OnceLock::new();
    super::load_once(&MODEL, "carma", || Model::load(WEIGHTS, META, &Device::flex()))
}

/// The figures for one row once its place against the training data is known.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Where the row lies against the training data.
    pub domain: Domain,
    /// Point, MiB; below the spread held to the upper figure (the networks' extrapolation is
    /// not trusted there).
    pub point_mib: f64,
    /// The upper figure placement uses, MiB.
    pub upper_mib: f64,
    /// The networks' calibrated upper figure, MiB.
    pub network_upper_mib: f64,
    /// The first-order formula's conservative figure, MiB (part of the whole-card bound).
    pub formula_upper_mib: f64,
    /// The whole-card bound: max(networks' upper, formula, training card), MiB.
    pub whole_card_mib: f64,
}

/// Which upper figure applies to a row whose networks gave `(point, network_upper)`
/// ([`domain::domain`]): the calibrated one inside the training spread; below it the physical
/// bound ([`domain::below_spread_upper_mib`]) or the networks' upper figure, whichever is
/// higher; and the whole-card bound above it or for a
/// non-image input: the highest of the networks' upper figure, the first-order formula's
/// conservative figure and the capacity of the card the networks were trained on (they have
/// seen no run larger, so nothing smaller is trustworthy). `carma estimate` and
/// `carma-train cv` both decide through here, so the cross-validation scores what ships.
pub fn decide(
    model: &Model,
    input: &EstimateInput,
    row: &Inputs,
    physical: &PhysicalTerms,
    (point, network_upper): (f64, f64),
) -> Decision {
    let domain = domain::domain(input.summary, row, &model.meta.scaler);
    let formula_upper =
        super::physics::formula_estimate(physical, input.batch_size, input.summary.family).upper_mib as f64;
    let whole_card = network_upper.max(formula_upper).max(model.meta.capacity_mib);
    let (point_mib, upper_mib) = match domain {
        Domain::Inside => (point, network_upper),
        Domain::Below(_) => {
            let bound = domain::below_spread_upper_mib(row, model.meta.below_spread_ratio).max(network_upper);
            (point.min(bound), bound)
        }
        Domain::Outside(_) => (point, whole_card),
    };
    Decision {
        domain,
        point_mib,
        upper_mib,
        network_upper_mib: network_upper,
        formula_upper_mib: formula_upper,
        whole_card_mib: whole_card,
    }
}

/// carma's estimate for a CNN or transformer summary with saved-bytes figures, its upper
/// figure chosen by [`decide`]. Placement gives a whole-card task a whole GPU of that size,
/// and `memory = "learned"` replaces the figure with the first run's observed peak.
pub fn estimate(input: &EstimateInput, model: &Model) -> Option<Estimate> {
    let stats = input.summary.stats();
    let physical = physics::terms_with(input, &stats);
    let row = inputs_with(input, &stats, &physical)?;
    let decision = decide(model, input, &row, &physical, model.predict_mib(&[row])[0]);
    let (point, upper) = (decision.point_mib, decision.upper_mib);
    let saved_mib = f64::from(input.batch_size) * input.summary.saved_bytes_per_sample? as f64 / MIB;
    let attention_mib =
        f64::from(input.batch_size) * input.summary.attention_bytes_per_sample.unwrap_or(0) as f64 / MIB;
    let fixed_mib = input.summary.saved_bytes_fixed.unwrap_or(0) as f64 / MIB;
    let mut terms = vec![
        Term::new("context", CONTEXT_FLOOR_MIB as f64, "CUDA context floor"),
        Term::new(
            "weights+grads+optimizer",
            physical.state_mib,
            format!("{} params x {} B", physical.params, physical.bytes_per_param),
        ),
        Term::new(
            "saved for backward",
            saved_mib,
            format!(
                "batch {} x saved bytes per sample ({attention_mib:.0} MiB of it attention)",
                input.batch_size
            ),
        ),
        Term::new(
            "saved at any batch",
            fixed_mib,
            "saved for backward whatever the batch (standardised weights)",
        ),
    ];
    let first_order: f64 = terms.iter().map(|t| t.mib).sum();
    terms.push(Term::new(
        "learned correction",
        point - first_order,
        "networks over scaled log features (allocator, workspaces, fused kernels)",
    ));
    let margin_detail = margin_detail(model, &decision, &row);
    terms.push(Term::new("margin", upper - point, margin_detail));
    let note = note(&decision.domain, point);
    let mut estimate = Estimate::new("carma", point, upper, terms, note);
    estimate.bound = Some(decision.domain.bound());
    estimate.outside_domain = decision.domain.why().map(str::to_string);
    Some(estimate)
}

/// How the margin above the point was found, for the estimate's `margin` term.
fn margin_detail(model: &Model, decision: &Decision, row: &Inputs) -> String {
    match &decision.domain {
        Domain::Inside => format!(
            "quantile networks (tau {}, median of {}) x {:.3}, calibrated for alpha {} on {} held-out runs",
            model.meta.tau,
            model.meta.members,
            model.meta.upper_factor,
            model.meta.alpha,
            model.meta.calibration_rows
        ),
        Domain::Below(_) => format!(
            "below the training spread: the higher of {:.2} x physical sum {:.0} MiB (context \
             included; ratio calibrated on measured runs) and the networks' upper {:.0} MiB",
            model.meta.below_spread_ratio,
            domain::physical_sum_mib(row),
            decision.network_upper_mib
        ),
        Domain::Outside(_) => format!(
            "whole-card bound: max(networks' upper {:.0}, formula {:.0}, training card {:.0}) MiB",
            decision.network_upper_mib, decision.formula_upper_mib, model.meta.capacity_mib
        ),
    }
}

/// The estimate's one-line note: which bound applies and why.
fn note(domain: &Domain, point: f64) -> String {
    match domain {
        Domain::Inside => format!(
            "point {point:.0} MiB; upper from calibrated quantile networks; trained on measured timm runs \
             (A100-40GB); in its training domain"
        ),
        Domain::Below(why) => format!(
            "BELOW THE TRAINING SPREAD ({why}): point {point:.0} MiB not trusted, upper is the physical \
             bound or the networks' figure if higher, not the card; declare memory to do better"
        ),
        Domain::Outside(why) => format!(
            "OUTSIDE THE TRAINING DOMAIN ({why}): point {point:.0} MiB not trusted, upper is the \
             whole-card bound; declare memory to do better"
        ),
    }
}
