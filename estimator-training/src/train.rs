//! Hand-written training loops (no Learner, to keep the build lean): GPUMemNet's ensemble
//! classifier and carma's regression with its conformal margin.
//!
//! Both loops use Adam at batch 128, up to `max_epochs` epochs, and stop early when the
//! validation loss has not improved for `patience` epochs, keeping the best weights.
//! Everything random is seeded: burn's device seed for the initial weights, a SplitMix64 for
//! the splits and shuffles; a run is reproducible bit for bit on one machine.

use std::io::IsTerminal;

use burn::module::Module;
use burn::nn::loss::{CrossEntropyLossConfig, MseLoss, Reduction};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Int, Tensor, TensorData};
use carma::estimate::carma::{self as carma_est, FEATURES as CARMA_FEATURES, PHYSICAL};
use carma::estimate::gpumemnet::{self, FEATURES as GMN_FEATURES, MEMBER_DEPTHS};
use carma::estimate::nets::{CarmaNet, EnsembleNet, Scaler, matrix, to_vec};
use carma::estimate::vision;

use crate::data::{Rng, Row};

/// Training settings shared by both estimators.
#[derive(Clone, Debug)]
pub struct Settings {
    pub seed: u64,
    pub bucket_mib: u64,
    pub max_epochs: usize,
    pub patience: usize,
    pub batch: usize,
    pub learning_rate: f64,
    /// Miscoverage for carma's conformal margin.
    pub alpha: f64,
    /// Quantile level of the real-model upper network.
    pub tau: f64,
    /// Calibrate carma's MLP margin cross-conformally (every training row out of fold)
    /// instead of on one 20% split.
    pub cross_calibration: bool,
    /// Pairs of networks in the real-model ensemble.
    pub members: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            seed: 1,
            bucket_mib: 1000,
            max_epochs: 600,
            patience: 30,
            batch: 128,
            learning_rate: 1e-3,
            alpha: 0.004,
            tau: 0.95,
            cross_calibration: false,
            members: 1,
        }
    }
}

/// Where the training data came from, recorded in the metadata.
pub const PROVENANCE: &str = "trained on the GPUMemNet MLP dataset (itu-rad/GPUMemNet, mlp_data_step2.csv, \
                              A100-SXM4-40GB, PyTorch), CC BY-NC 4.0: research and evaluation only";

/// Splits row indices by group: the last `fraction` of shuffled groups is held out.
fn split_groups(rows: &[Row], indices: &[usize], fraction: f64, rng: &mut Rng) -> (Vec<usize>, Vec<usize>) {
    let mut groups: Vec<&str> = indices.iter().map(|&i| rows[i].group.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    rng.shuffle(&mut groups);
    let held = ((groups.len() as f64) * fraction).round().max(1.0) as usize;
    let held: std::collections::HashSet<&str> = groups[groups.len() - held..].iter().copied().collect();
    indices.iter().partition(|&&i| !held.contains(rows[i].group.as_str()))
}

/// Progress on stderr, only when it is a terminal.
struct Progress {
    on: bool,
    label: String,
}

impl Progress {
    fn new(label: &str) -> Progress {
        Progress { on: std::io::stderr().is_terminal(), label: label.to_string() }
    }
    fn epoch(&self, epoch: usize, max: usize, loss: f64, best: usize) {
        if self.on {
            let filled = epoch * 30 / max.max(1);
            eprint!(
                "\r{} [{:<30}] epoch {epoch}/{max} val loss {loss:.5} (best at {best})",
                self.label,
                "=".repeat(filled)
            );
        }
    }
    fn done(&self) {
        if self.on {
            eprintln!();
        }
    }
}

/// Trains GPUMemNet on `train` rows (indices into `rows`); 10% of its groups validate.
pub fn fit_gpumemnet(rows: &[Row], train: &[usize], settings: &Settings) -> gpumemnet::Model {
    let mut rng = Rng::new(settings.seed);
    let (fit, val) = split_groups(rows, train, 0.1, &mut rng);
    let features: Vec<Vec<f32>> = rows.iter().map(|r| gpumemnet::features(&r.input()).to_vec()).collect();
    let scaler = Scaler::fit(&fit.iter().map(|&i| features[i].clone()).collect::<Vec<_>>());
    let class = |i: usize| {
        gpumemnet::class_of(rows[i].label_mib.expect("training rows have labels"), settings.bucket_mib)
    };
    let classes = train.iter().map(|&i| class(i)).max().expect("training rows") + 2;
    let scaled = |i: usize| {
        let mut f = features[i].clone();
        scaler.apply(&mut f);
        f
    };

    let device = Device::flex().autodiff();
    device.seed(settings.seed);
    let net = EnsembleNet::new(&MEMBER_DEPTHS, GMN_FEATURES, classes, &device);
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    let batch_of = |idx: &[usize], device: &Device| {
        let x: Vec<f32> = idx.iter().flat_map(|&i| scaled(i)).collect();
        let y: Vec<i64> = idx.iter().map(|&i| class(i) as i64).collect();
        let n = y.len();
        (matrix(x, GMN_FEATURES, device), Tensor::<1, Int>::from_data(TensorData::new(y, [n]), device))
    };
    let (val_x, val_y) = batch_of(&val, &device.clone().without_autodiff());
    let val_loss_fn = CrossEntropyLossConfig::new().init(&val_x.device());
    let best = early_stopped(
        net,
        &fit,
        &mut rng,
        settings,
        "gpumemnet",
        // BatchNorm needs two rows: a last chunk of one is skipped.
        |net, chunk| {
            (chunk.len() > 1).then(|| {
                let (x, y) = batch_of(chunk, &device);
                loss_fn.forward(net.forward(x), y)
            })
        },
        |valid| val_loss_fn.forward(valid.forward(val_x.clone()), val_y.clone()),
    );
    let meta = gpumemnet::Meta {
        version: 1,
        bucket_mib: settings.bucket_mib,
        classes,
        depths: MEMBER_DEPTHS.to_vec(),
        scaler,
        provenance: PROVENANCE.into(),
    };
    let inner = Device::flex();
    gpumemnet::Model { net: best, meta, device: inner }
}

/// Trains carma's network on `train` rows. With cross calibration (the default) the network
/// trains on every row (12.5% of groups held out for early stopping) and the margin comes
/// from out-of-fold residuals of all rows; with split calibration 20% of the groups are held
/// out to calibrate it instead.
pub fn fit_carma(rows: &[Row], train: &[usize], settings: &Settings) -> carma_est::Model {
    if !settings.cross_calibration {
        return fit_carma_once(rows, train, settings, true);
    }
    let residuals = out_of_fold(rows, train, settings.seed, |fit_rows, held| {
        let model = fit_carma_once(rows, fit_rows, settings, false);
        let inputs: Vec<_> = held.iter().map(|&i| carma_est::inputs(&rows[i].input())).collect();
        let predicted = model.predict_mib(&inputs);
        held.iter().zip(predicted).map(|(&i, p)| rows[i].label_mib.expect("labelled") - p).collect()
    });
    let mut model = fit_carma_once(rows, train, settings, false);
    model.meta.calibration_rows = residuals.len();
    if !residuals.is_empty() {
        model.meta.upper_margin_mib = conformal_margin(residuals, settings.alpha);
    }
    model
}

/// One carma network on `train`; with `split_calibration`, 20% of its groups are held out to
/// calibrate the margin (split conformal), otherwise the margin is left at 0.
fn fit_carma_once(
    rows: &[Row],
    train: &[usize],
    settings: &Settings,
    split_calibration: bool,
) -> carma_est::Model {
    let mut rng = Rng::new(settings.seed);
    let (rest, calibration) = if split_calibration {
        split_groups(rows, train, 0.2, &mut rng)
    } else {
        (train.to_vec(), Vec::new())
    };
    let (fit, val) = split_groups(rows, &rest, 0.125, &mut rng);
    let inputs: Vec<carma_est::Inputs> = rows.iter().map(|r| carma_est::inputs(&r.input())).collect();
    let scaler = Scaler::fit(&fit.iter().map(|&i| inputs[i].features.to_vec()).collect::<Vec<_>>());
    let target =
        |i: usize| carma_est::mib_to_output(rows[i].label_mib.expect("training rows have labels")) as f32;

    let device = Device::flex().autodiff();
    device.seed(settings.seed);
    let net = CarmaNet::new(PHYSICAL, CARMA_FEATURES, &device);
    let batch_of = |idx: &[usize], device: &Device| {
        let mut physical = Vec::with_capacity(idx.len() * PHYSICAL);
        let mut features = Vec::with_capacity(idx.len() * CARMA_FEATURES);
        for &i in idx {
            physical.extend_from_slice(&inputs[i].physical);
            let mut f = inputs[i].features;
            scaler.apply(&mut f);
            features.extend_from_slice(&f);
        }
        let y: Vec<f32> = idx.iter().map(|&i| target(i)).collect();
        let n = y.len();
        (
            matrix(physical, PHYSICAL, device),
            matrix(features, CARMA_FEATURES, device),
            Tensor::<2>::from_data(TensorData::new(y, [n, 1]), device),
        )
    };
    let inner = device.clone().without_autodiff();
    let (val_p, val_f, val_y) = batch_of(&val, &inner);
    let mse = |out: Tensor<2>, y: Tensor<2>| MseLoss::new().forward(out, y, Reduction::Mean);
    let best = early_stopped(
        net,
        &fit,
        &mut rng,
        settings,
        "carma",
        |net, chunk| {
            let (p, f, y) = batch_of(chunk, &device);
            Some(mse(net.forward(p, f), y))
        },
        |valid| mse(valid.forward(val_p.clone(), val_f.clone()), val_y.clone()),
    );
    let mut model = carma_est::Model {
        net: best,
        meta: carma_est::Meta {
            version: 1,
            scaler,
            upper_margin_mib: 0.0,
            alpha: settings.alpha,
            calibration_rows: calibration.len(),
            provenance: PROVENANCE.into(),
        },
        device: inner,
    };
    if calibration.is_empty() {
        return model;
    }
    let predicted = model.predict_mib(&calibration.iter().map(|&i| inputs[i]).collect::<Vec<_>>());
    let residuals: Vec<f64> =
        calibration.iter().zip(&predicted).map(|(&i, p)| rows[i].label_mib.expect("labelled") - p).collect();
    model.meta.upper_margin_mib = conformal_margin(residuals, settings.alpha);
    model
}

/// Provenance of the real-model weights.
pub const VISION_PROVENANCE: &str = "trained on timm_runs_dev.csv (GPUMemNet authors' timm training runs, \
                                     A100-SXM4-40GB, PyTorch) with summaries from dump_model.py, \
                                     CC BY-NC 4.0: research and evaluation only";

/// Fits carma's real-model networks: the point network on the relative error, the upper
/// network with the pinball loss at `settings.tau`, both with censored rows only pushed up
/// to the capacity; then the upper factor on held-out families (split conformal on the
/// ratio label / upper).
pub fn fit_vision(rows: &[Row], train: &[usize], settings: &Settings) -> vision::Model {
    // Every training row gets an out-of-fold upper figure from networks that never saw its
    // family, so the factor rests on all training families rather than on the handful a
    // single split would hold out (families differ a lot).
    let ratios = out_of_fold(rows, train, settings.seed, |fit_rows, held| {
        let model = fit_vision_nets(rows, fit_rows, settings);
        let inputs: Vec<_> =
            held.iter().map(|&i| vision::inputs(&rows[i].input()).expect("vision rows")).collect();
        let predicted = model.predict_mib(&inputs);
        held.iter()
            .zip(predicted)
            .map(|(&i, (_, upper))| rows[i].label_mib.expect("labelled") / upper)
            .collect()
    });
    let mut model = fit_vision_nets(rows, train, settings);
    model.meta.calibration_rows = ratios.len();
    if !ratios.is_empty() {
        model.meta.upper_factor = conformal_margin(ratios, settings.alpha).max(0.5);
    }
    if let Some(ratio) = below_spread_ratio(rows, train, settings.alpha) {
        model.meta.below_spread_ratio = ratio;
    }
    model
}

/// The ratio for inputs below the training spread: the conformal (1 − `alpha`) quantile of
/// label / physical sum over the training rows, censored rows at the capacity they reached.
/// The physical sum has no fitted part, so every training row is a held-out row for it.
/// Held to at least 1: no run takes less than its own tensors.
pub fn below_spread_ratio(rows: &[Row], train: &[usize], alpha: f64) -> Option<f64> {
    let ratios: Vec<f64> = train
        .iter()
        .map(|&i| {
            let input = vision::inputs(&rows[i].input()).expect("vision rows");
            rows[i].label_mib.expect("labelled") / carma::estimate::domain::physical_sum_mib(&input)
        })
        .collect();
    (!ratios.is_empty()).then(|| conformal_margin(ratios, alpha).max(1.0))
}

/// Inner folds of the cross-conformal calibration.
const CALIBRATION_FOLDS: usize = 5;

/// Cross-conformal scores: `train` is dealt by group into up to [`CALIBRATION_FOLDS`] inner
/// folds, and `score(fit_rows, held)` fits on the other folds and scores each held-out row.
/// Empty when `train` has fewer than two groups.
fn out_of_fold(
    rows: &[Row],
    train: &[usize],
    seed: u64,
    score: impl Fn(&[usize], &[usize]) -> Vec<f64>,
) -> Vec<f64> {
    let folds = CALIBRATION_FOLDS.min(distinct_groups(rows, train));
    if folds < 2 {
        return Vec::new();
    }
    let fold_of = crate::data::grouped_folds_of(rows, train, folds, seed ^ 0xCA1);
    let mut scores = Vec::with_capacity(train.len());
    for fold in 0..folds {
        let pick = |in_fold: bool| -> Vec<usize> {
            train.iter().zip(&fold_of).filter(|(_, f)| (**f == fold) == in_fold).map(|(i, _)| *i).collect()
        };
        scores.extend(score(&pick(false), &pick(true)));
    }
    scores
}

fn distinct_groups(rows: &[Row], indices: &[usize]) -> usize {
    indices.iter().map(|&i| rows[i].group.as_str()).collect::<std::collections::HashSet<_>>().len()
}

/// Fits `settings.members` pairs of networks on `train`, each with its own seed (initial
/// weights, and the 15% of families held out for its early stopping); the upper factor is
/// left at 1.
fn fit_vision_nets(rows: &[Row], train: &[usize], settings: &Settings) -> vision::Model {
    let inputs: Vec<Option<vision::Inputs>> = rows.iter().map(|r| vision::inputs(&r.input())).collect();
    let input = |i: usize| inputs[i].expect("vision rows carry saved_bytes_per_sample");
    let scaler = Scaler::fit(&train.iter().map(|&i| input(i).features.to_vec()).collect::<Vec<_>>());
    let members = settings.members.max(1);
    let mut nets =
        vision::VisionNets { point: Vec::with_capacity(members), upper: Vec::with_capacity(members) };
    for member in 0..members {
        // Member 0 keeps the run's seed; the others are spread far from it.
        let seed = settings.seed.wrapping_add(member as u64 * 0x9E37_79B9);
        let (point, upper) = fit_vision_member(rows, train, &inputs, &scaler, seed, settings);
        nets.point.push(point);
        nets.upper.push(upper);
    }
    vision::Model {
        nets,
        meta: vision::Meta {
            version: 2,
            members,
            scaler,
            tau: settings.tau,
            upper_factor: 1.0,
            alpha: settings.alpha,
            calibration_rows: 0,
            capacity_mib: crate::data::TIMM_CAPACITY_MIB,
            below_spread_ratio: carma::estimate::domain::BELOW_SPREAD_RATIO_DEFAULT,
            provenance: VISION_PROVENANCE.into(),
        },
        device: Device::flex(),
    }
}

/// One ensemble member: the point network on the relative error and the upper network with
/// the pinball loss, both early-stopped on held-out families.
fn fit_vision_member(
    rows: &[Row],
    train: &[usize],
    inputs: &[Option<vision::Inputs>],
    scaler: &Scaler,
    seed: u64,
    settings: &Settings,
) -> (CarmaNet, CarmaNet) {
    let mut rng = Rng::new(seed);
    let (fit, val) = split_groups(rows, train, 0.15, &mut rng);
    let input = |i: usize| inputs[i].expect("vision rows carry saved_bytes_per_sample");
    let label = |i: usize| rows[i].label_mib.expect("training rows have labels");

    let device = Device::flex().autodiff();
    device.seed(seed);
    let inner = device.clone().without_autodiff();
    // Per row: target in output units, weight 1000 / label (relative error), censored flag.
    let tensors = |idx: &[usize], device: &Device| {
        let rows_in: Vec<vision::Inputs> = idx.iter().map(|&i| input(i)).collect();
        let (p, f) = vision::batch(&rows_in, scaler, device);
        let column = |v: Vec<f32>| {
            let n = v.len();
            Tensor::<2>::from_data(TensorData::new(v, [n, 1]), device)
        };
        let y = column(idx.iter().map(|&i| vision::mib_to_output(label(i)) as f32).collect());
        let w = column(idx.iter().map(|&i| (vision::OUTPUT_SCALE_MIB / label(i)) as f32).collect());
        let c = column(idx.iter().map(|&i| if rows[i].censored { 1.0 } else { 0.0 }).collect());
        (p, f, y, w, c)
    };
    // Relative squared error; a censored row only counts when the estimate is below it.
    let point_loss = |out: Tensor<2>, y: Tensor<2>, w: Tensor<2>, c: Tensor<2>| {
        let diff = out - y;
        let one_sided = diff.clone().clamp_max(0.0);
        let diff = diff.clone() * (c.clone().neg() + 1.0) + one_sided * c;
        (diff * w).powf_scalar(2.0).mean()
    };
    let tau = settings.tau;
    // Pinball loss at tau on the relative error; censored rows count only when under.
    let upper_loss = move |out: Tensor<2>, y: Tensor<2>, w: Tensor<2>, c: Tensor<2>| {
        let under = (y - out) * w; // > 0 when the estimate is below the label
        let over_part = under.clone().clamp_max(0.0).mul_scalar(tau - 1.0) * (c.neg() + 1.0);
        let under_part = under.clamp_min(0.0).mul_scalar(tau);
        (under_part + over_part).mean()
    };
    let (val_p, val_f, val_y, val_w, val_c) = tensors(&val, &inner);
    let mut train_one =
        |label: &str, loss: &dyn Fn(Tensor<2>, Tensor<2>, Tensor<2>, Tensor<2>) -> Tensor<1>| {
            let net = CarmaNet::new(vision::PHYSICAL, vision::FEATURES, &device);
            early_stopped(
                net,
                &fit,
                &mut rng,
                settings,
                label,
                |net, chunk| {
                    let (p, f, y, w, c) = tensors(chunk, &device);
                    Some(loss(net.forward(p, f), y, w, c))
                },
                |valid| {
                    loss(
                        valid.forward(val_p.clone(), val_f.clone()),
                        val_y.clone(),
                        val_w.clone(),
                        val_c.clone(),
                    )
                },
            )
        };
    let point = train_one("vision point", &point_loss);
    let upper = train_one("vision upper", &upper_loss);
    (point, upper)
}

/// Adam over shuffled mini-batches of `fit`, stopped once the validation loss has not improved
/// for `settings.patience` epochs; returns the best network seen, for inference. `batch_loss`
/// scores a chunk of rows with the network in training (`None`: skip the chunk); `val_loss`
/// scores the validation rows with its inference copy.
fn early_stopped<M: Module>(
    mut net: M,
    fit: &[usize],
    rng: &mut Rng,
    settings: &Settings,
    label: &str,
    batch_loss: impl Fn(&M, &[usize]) -> Option<Tensor<1>>,
    val_loss: impl Fn(&M) -> Tensor<1>,
) -> M {
    let progress = Progress::new(label);
    let mut optimizer = AdamConfig::new().init();
    let (mut best, mut best_loss, mut best_epoch) = (net.clone(), f64::INFINITY, 0);
    let mut order = fit.to_vec();
    for epoch in 1..=settings.max_epochs {
        rng.shuffle(&mut order);
        for chunk in order.chunks(settings.batch) {
            let Some(loss) = batch_loss(&net, chunk) else { continue };
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optimizer.step(settings.learning_rate, net, grads);
        }
        let loss = f64::from(to_vec(val_loss(&net.valid()))[0]);
        if loss < best_loss {
            (best, best_loss, best_epoch) = (net.clone(), loss, epoch);
        }
        progress.epoch(epoch, settings.max_epochs, loss, best_epoch);
        if epoch - best_epoch >= settings.patience {
            break;
        }
    }
    progress.done();
    if std::env::var_os("CARMA_TRAIN_DEBUG").is_some() {
        eprintln!("{label}: best epoch {best_epoch}, val loss {best_loss:.6}");
    }
    best.valid()
}

pub fn save_vision(model: vision::Model, dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("vision.json"), serde_json::to_string_pretty(&model.meta)? + "\n")?;
    model.nets.into_record().save(dir.join("vision.bpk")).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// Split-conformal margin: the ⌈(n+1)(1−α)⌉-th smallest residual (label − point), at least 0;
/// with too few rows for that rank, the largest residual.
pub fn conformal_margin(mut residuals: Vec<f64>, alpha: f64) -> f64 {
    assert!(!residuals.is_empty(), "no calibration rows");
    assert!(alpha > 0.0 && alpha < 1.0);
    residuals.sort_by(f64::total_cmp);
    let n = residuals.len();
    let rank = (((n + 1) as f64) * (1.0 - alpha)).ceil() as usize;
    residuals[rank.clamp(1, n) - 1].max(0.0)
}

/// Saves a GPUMemNet model as `gpumemnet.bpk` + `gpumemnet.json` in `dir`.
pub fn save_gpumemnet(model: gpumemnet::Model, dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("gpumemnet.json"), serde_json::to_string_pretty(&model.meta)? + "\n")?;
    model.net.into_record().save(dir.join("gpumemnet.bpk")).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// Saves a carma model as `carma.bpk` + `carma.json` in `dir`.
pub fn save_carma(model: carma_est::Model, dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("carma.json"), serde_json::to_string_pretty(&model.meta)? + "\n")?;
    model.net.into_record().save(dir.join("carma.bpk")).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Goal: both training loops run, save, reload and predict the same figures, and a seed
    //! reproduces a run; on small synthetic data with a known formula, in a few epochs.
    use super::*;
    use crate::data::parse;

    /// Synthetic GPUMemNet-style CSV: label = context + 1.3 × state + 0.8 × activations.
    fn synthetic(rows: usize) -> String {
        let mut rng = Rng::new(7);
        let mut csv =
            String::from("Filename,Activations-Params,Activation Function,Batch Size,Max GPU Memory (MiB)\n");
        for i in 0..rows {
            let width = 64 + rng.next_u64() % 2048;
            let out = 2 + rng.next_u64() % 64;
            let batch = 8 + rng.next_u64() % 1000;
            let (p1, p2) = (784 * width + width, width * out + out);
            let acts = width * 2 + out;
            let mib = 1443.0
                + 1.3 * (16.0 * (p1 + p2) as f64 / 1048576.0)
                + 0.8 * (4.0 * (batch * acts) as f64 / 1048576.0);
            csv.push_str(&format!(
                "input:784_output:{out}_depth:{i}_arch:u_batch:{batch},\"[('linear', {width}, {p1}), ('ReLU', {width}, 0), ('linear', {out}, {p2})]\",ReLU,{batch},{mib:.0}\n"
            ));
        }
        csv
    }

    /// burn's seed is global to the process, so two trainings running at once (tests run in
    /// parallel) would draw from the same generator and differ run to run: serialise them.
    static TRAINING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn tiny() -> Settings {
        Settings { max_epochs: 3, patience: 2, ..Settings::default() }
    }

    #[test]
    fn carma_fits_saves_and_reloads() {
        let _serial = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        let rows = parse(&synthetic(120)).unwrap();
        let all: Vec<usize> = (0..rows.len()).collect();
        let settings = Settings { learning_rate: 1e-2, max_epochs: 40, ..tiny() };
        let model = fit_carma(&rows, &all, &settings);
        assert!(model.meta.upper_margin_mib >= 0.0);
        let inputs: Vec<_> = rows.iter().map(|r| carma_est::inputs(&r.input())).collect();
        let before = model.predict_mib(&inputs);
        let dir = tempfile::tempdir().unwrap();
        save_carma(model, dir.path()).unwrap();
        let weights = std::fs::read(dir.path().join("carma.bpk")).unwrap();
        let meta = std::fs::read_to_string(dir.path().join("carma.json")).unwrap();
        let loaded = carma_est::Model::load(&weights, &meta, &Device::flex()).unwrap();
        assert_eq!(loaded.predict_mib(&inputs), before);
        let again = fit_carma(&rows, &all, &settings);
        assert_eq!(again.predict_mib(&inputs), before, "same seed, same model");
    }

    #[test]
    fn gpumemnet_fits_saves_and_reloads() {
        let _serial = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        let rows = parse(&synthetic(120)).unwrap();
        let all: Vec<usize> = (0..rows.len()).collect();
        let model = fit_gpumemnet(&rows, &all, &tiny());
        assert_eq!(model.meta.depths.len(), 13);
        let features: Vec<_> = rows.iter().map(|r| gpumemnet::features(&r.input())).collect();
        let before = model.classes(&features);
        let dir = tempfile::tempdir().unwrap();
        save_gpumemnet(model, dir.path()).unwrap();
        let weights = std::fs::read(dir.path().join("gpumemnet.bpk")).unwrap();
        let meta = std::fs::read_to_string(dir.path().join("gpumemnet.json")).unwrap();
        let loaded = gpumemnet::Model::load(&weights, &meta, &Device::flex()).unwrap();
        assert_eq!(loaded.classes(&features), before, "BatchNorm running statistics survive the record");
    }

    /// Goal: cross-conformal calibration scores every training row exactly once, from a fit
    /// that never saw the row's group, and gives up (no scores) on a single group.
    #[test]
    fn out_of_fold_scores_each_row_once_from_other_groups() {
        let rows = parse(&synthetic(40)).unwrap();
        // Four rows per group.
        let rows: Vec<Row> =
            rows.into_iter().enumerate().map(|(i, r)| Row { group: format!("g{}", i / 4), ..r }).collect();
        let train: Vec<usize> = (0..rows.len()).filter(|i| i % 5 != 0).collect();
        let seen = std::cell::RefCell::new(Vec::new());
        let scores = out_of_fold(&rows, &train, 3, |fit_rows, held| {
            for &h in held {
                assert!(fit_rows.iter().all(|&f| rows[f].group != rows[h].group), "group split");
            }
            assert_eq!(fit_rows.len() + held.len(), train.len());
            seen.borrow_mut().extend_from_slice(held);
            held.iter().map(|&i| i as f64).collect()
        });
        let mut seen = seen.into_inner();
        seen.sort_unstable();
        assert_eq!(seen, train);
        assert_eq!(scores.len(), train.len());
        let one_group: Vec<usize> = (0..4).collect();
        assert!(out_of_fold(&rows, &one_group, 3, |_, _| unreachable!("no folds")).is_empty());
    }

    /// Goal: with cross calibration carma's margin rests on every training row and the saved
    /// model reproduces; the margin covers all but about alpha of out-of-fold residuals.
    #[test]
    fn carma_cross_calibration_uses_every_row() {
        let _serial = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        let rows = parse(&synthetic(120)).unwrap();
        let all: Vec<usize> = (0..rows.len()).collect();
        let settings = Settings { learning_rate: 1e-2, max_epochs: 40, cross_calibration: true, ..tiny() };
        let model = fit_carma(&rows, &all, &settings);
        assert_eq!(model.meta.calibration_rows, rows.len());
        assert!(model.meta.upper_margin_mib > 0.0, "an untrained-ish network has residuals");
        let again = fit_carma(&rows, &all, &settings);
        assert_eq!(again.meta.upper_margin_mib, model.meta.upper_margin_mib, "same seed, same margin");
    }

    /// Synthetic timm-like rows: a dumper summary per row, label = context + 1.1 × state +
    /// 1.05 × batch × saved bytes, the largest ones censored at the capacity.
    fn synthetic_vision(rows: usize) -> Vec<Row> {
        let mut rng = Rng::new(11);
        (0..rows)
            .map(|i| {
                let params = 1_000_000 + rng.next_u64() % 50_000_000;
                let saved = 1_000_000 + rng.next_u64() % 400_000_000;
                let batch = [8u32, 16, 32, 64, 128][i % 5];
                let summary: carma::estimate::ModelSummary = serde_json::from_value(serde_json::json!({
                    "version": 1, "family": "cnn", "saved_bytes_per_sample": saved,
                    "input_shape": [3, 224, 224],
                    "layers": [{"type": "Conv2d", "activations": saved / 8, "params": params}]
                }))
                .unwrap();
                let mib = 1443.0
                    + 1.1 * (16.0 * params as f64 / 1048576.0)
                    + 1.05 * (f64::from(batch) * saved as f64 / 1048576.0);
                let censored = mib >= crate::data::TIMM_CAPACITY_MIB;
                let label = if censored { crate::data::TIMM_CAPACITY_MIB } else { mib };
                Row::plain(format!("family{}", i / 10), summary, batch, Some(label), censored)
            })
            .collect()
    }

    /// Goal: a two-member ensemble of vision networks trains on censored and labelled rows,
    /// calibrates its factor on every row, keeps upper ≥ point ≥ the parameter floor, and
    /// reloads to the same figures.
    #[test]
    fn vision_fits_calibrates_saves_and_reloads() {
        let _serial = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        let rows = synthetic_vision(150);
        assert!(rows.iter().any(|r| r.censored) && rows.iter().any(|r| !r.censored));
        let all: Vec<usize> = (0..rows.len()).collect();
        let settings = Settings { learning_rate: 1e-2, max_epochs: 30, alpha: 0.05, members: 2, ..tiny() };
        let model = fit_vision(&rows, &all, &settings);
        assert_eq!(model.meta.calibration_rows, rows.len());
        assert_eq!((model.meta.members, model.nets.point.len(), model.nets.upper.len()), (2, 2, 2));
        assert!(model.meta.upper_factor >= 0.5);
        let inputs: Vec<_> = rows.iter().map(|r| vision::inputs(&r.input()).unwrap()).collect();
        let before = model.predict_mib(&inputs);
        for ((point, upper), input) in before.iter().zip(&inputs) {
            assert!(upper >= point && *point >= input.floor_mib, "{point} {upper} {}", input.floor_mib);
        }
        let dir = tempfile::tempdir().unwrap();
        save_vision(model, dir.path()).unwrap();
        let weights = std::fs::read(dir.path().join("vision.bpk")).unwrap();
        let meta = std::fs::read_to_string(dir.path().join("vision.json")).unwrap();
        let loaded = vision::Model::load(&weights, &meta, &Device::flex()).unwrap();
        assert_eq!(loaded.predict_mib(&inputs), before);
    }

    #[test]
    fn conformal_margin_rank() {
        let residuals: Vec<f64> = (1..=99).map(f64::from).collect();
        assert_eq!(conformal_margin(residuals.clone(), 0.1), 90.0);
        assert_eq!(conformal_margin(residuals, 0.001), 99.0);
        assert_eq!(conformal_margin(vec![-5.0, -3.0], 0.5), 0.0);
    }
}
