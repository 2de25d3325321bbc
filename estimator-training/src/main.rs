//! carma-train: trains, applies and evaluates carma's GPU-memory estimators.
//!
//! ```text
//! carma-train fit --data CSV --estimator gpumemnet|carma --out DIR [--seed N] [--bucket-mib 1000]
//! carma-train predict --data CSV --weights DIR          # CSV row,predicted_mib,upper_mib
//! carma-train eval --data CSV --weights DIR [--json]
//! carma-train cv --data CSV --estimator NAME [--folds 5] [--seed N] [--json]
//! ```
//!
//! `--estimator vision` trains carma's real-model networks on timm runs: `--data` is then a
//! CSV `model,batch_size,max_gpu_memory_mib,faketensor_*` and `--summaries DIR` holds
//! `<model>_bs<batch>.json` from dump_model.py. Its `cv` groups folds by architecture family
//! and reports censoring-aware metrics beside FakeTensor's, per family.
//!
//! `DIR` holds `NAME.bpk` (burnpack weights) and `NAME.json` (scaler, classes, margin,
//! provenance): copy them to `src/estimate/weights/` to embed them in `carma`.

mod data;
mod metrics;
mod train;
mod vision_cv;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use carma::estimate::{carma as carma_est, gpumemnet, vision};
use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::data::Row;
use crate::metrics::{Judged, Metrics, RealMetrics, Scored, metrics, real_metrics};
use crate::train::Settings;

#[derive(Parser)]
#[command(name = "carma-train", about = "Train and evaluate carma's GPU-memory estimators")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Which {
    Gpumemnet,
    Carma,
    /// carma's real-model networks (CNNs, vision transformers), trained on timm runs
    Vision,
}

#[derive(clap::Args, Clone)]
struct TrainArgs {
    /// Seed for initial weights, splits and shuffles
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Bucket width for GPUMemNet's classes, MiB
    #[arg(long, default_value_t = 1000)]
    bucket_mib: u64,
    /// Most epochs
    #[arg(long, default_value_t = 600)]
    max_epochs: usize,
    /// Epochs without a better validation loss before stopping [default: 30; vision: 100]
    #[arg(long)]
    patience: Option<usize>,
    /// Adam learning rate [default: 1e-3 for gpumemnet, as published; 1e-2 for carma]
    #[arg(long)]
    learning_rate: Option<f64>,
    /// Miscoverage of the conformal upper bound [default: carma 0.002 (cross) or 0.004 (split); vision 0.005]
    #[arg(long)]
    alpha: Option<f64>,
    /// Quantile level of the vision upper network
    #[arg(long, default_value_t = 0.95)]
    tau: f64,
    /// Ensemble members (pairs of networks; the figure is their median) of the vision estimator
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    members: u32,
    /// Directory of dump_model.py summaries, for --estimator vision
    #[arg(long)]
    summaries: Option<PathBuf>,
    /// Runs measured again (CSV `model,batch_size,a100_equivalent_mib`, e.g.
    /// reports/gpu/h200-relabel-2026-11-26/labels.csv): where the file's peak is off by more
    /// than 25%, the remeasured need is the label
    #[arg(long)]
    remeasured: Option<PathBuf>,
    /// How carma's MLP margin is calibrated: on one 20% split, or cross-conformally
    #[arg(long, value_enum, default_value_t = Calibration::Cross)]
    calibration: Calibration,
}

/// Which upper figure `cv --estimator vision` scores for inputs outside the training spread
/// of their fold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum DomainRule {
    /// The networks' figure everywhere (what the report measured before issue 24)
    Off,
    /// The whole-card bound for every input out of range (carma estimate before issue 24)
    Card,
    /// The physical bound below the spread, the whole card above it (carma estimate now)
    Bounded,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Calibration {
    Split,
    Cross,
}

#[derive(Subcommand)]
enum Command {
    /// Train on every row of CSV and save the weights in DIR
    Fit {
        #[arg(long)]
        data: PathBuf,
        #[arg(long)]
        estimator: Which,
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        train: TrainArgs,
    },
    /// Predict every row: CSV row,predicted_mib,upper_mib (row is the 0-based data row)
    Predict {
        #[arg(long)]
        data: PathBuf,
        #[arg(long)]
        weights: PathBuf,
        /// Directory of dump_model.py summaries, for vision weights
        #[arg(long)]
        summaries: Option<PathBuf>,
    },
    /// Score saved weights on a labelled CSV
    Eval {
        #[arg(long)]
        data: PathBuf,
        #[arg(long)]
        weights: PathBuf,
        /// Directory of dump_model.py summaries, for vision weights
        #[arg(long)]
        summaries: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Grouped k-fold cross-validation, re-initialising the model for every fold
    Cv {
        #[arg(long)]
        data: PathBuf,
        /// Write every row's held-out prediction here (CSV; vision only)
        #[arg(long)]
        predictions: Option<PathBuf>,
        #[arg(long)]
        estimator: Which,
        #[arg(long, default_value_t = 5)]
        folds: usize,
        #[arg(long)]
        json: bool,
        /// vision: the upper figure for inputs outside their fold's training spread
        #[arg(long, value_enum, default_value_t = DomainRule::Bounded)]
        domain: DomainRule,
        #[command(flatten)]
        train: TrainArgs,
    },
}

/// A trained model of either kind.
enum Trained {
    GpuMemNet(Box<gpumemnet::Model>),
    Carma(Box<carma_est::Model>),
    Vision(Box<vision::Model>),
}

impl Trained {
    fn load(dir: &Path) -> Result<Trained> {
        let device = Device::flex();
        let read = |name: &str| -> Result<(Vec<u8>, String)> {
            let weights = std::fs::read(dir.join(format!("{name}.bpk")))
                .with_context(|| format!("{name}.bpk in {}", dir.display()))?;
            let meta = std::fs::read_to_string(dir.join(format!("{name}.json")))?;
            Ok((weights, meta))
        };
        if dir.join("gpumemnet.bpk").exists() {
            let (w, m) = read("gpumemnet")?;
            return Ok(Trained::GpuMemNet(Box::new(
                gpumemnet::Model::load(&w, &m, &device).map_err(anyhow::Error::msg)?,
            )));
        }
        if dir.join("carma.bpk").exists() {
            let (w, m) = read("carma")?;
            return Ok(Trained::Carma(Box::new(
                carma_est::Model::load(&w, &m, &device).map_err(anyhow::Error::msg)?,
            )));
        }
        if dir.join("vision.bpk").exists() {
            let (w, m) = read("vision")?;
            return Ok(Trained::Vision(Box::new(
                vision::Model::load(&w, &m, &device).map_err(anyhow::Error::msg)?,
            )));
        }
        bail!("{} holds none of gpumemnet.bpk, carma.bpk, vision.bpk", dir.display())
    }

    /// (point, upper) MiB for each row index.
    fn predict(&self, rows: &[Row], indices: &[usize]) -> Vec<(f64, f64)> {
        match self {
            Trained::GpuMemNet(model) => {
                let features: Vec<_> =
                    indices.iter().map(|&i| gpumemnet::features(&rows[i].input())).collect();
                model
                    .classes(&features)
                    .into_iter()
                    .map(|c| {
                        let edge = model.bucket_upper_mib(c) as f64;
                        (edge, edge)
                    })
                    .collect()
            }
            Trained::Carma(model) => {
                let inputs: Vec<_> = indices.iter().map(|&i| carma_est::inputs(&rows[i].input())).collect();
                let margin = model.meta.upper_margin_mib;
                model.predict_mib(&inputs).into_iter().map(|p| (p, p + margin)).collect()
            }
            Trained::Vision(model) => {
                let inputs: Vec<_> = indices
                    .iter()
                    .map(|&i| vision::inputs(&rows[i].input()).expect("vision rows carry saved bytes"))
                    .collect();
                let networks = model.predict_mib(&inputs);
                indices
                    .iter()
                    .zip(&inputs)
                    .zip(networks)
                    .map(|((&i, row), p)| {
                        let held = vision_cv::apply_rule(DomainRule::Bounded, model, &rows[i], row, p);
                        (held.point, held.upper)
                    })
                    .collect()
            }
        }
    }
}

fn fit(which: Which, rows: &[Row], train: &[usize], settings: &Settings) -> Trained {
    match which {
        Which::Gpumemnet => Trained::GpuMemNet(Box::new(train::fit_gpumemnet(rows, train, settings))),
        Which::Carma => Trained::Carma(Box::new(train::fit_carma(rows, train, settings))),
        Which::Vision => Trained::Vision(Box::new(train::fit_vision(rows, train, settings))),
    }
}

fn settings(args: &TrainArgs, which: Which) -> Settings {
    let learning_rate = if which == Which::Gpumemnet { 1e-3 } else { 1e-2 };
    let alpha = match which {
        // Half the 1% of under-estimates the estimator is held to: the factor is calibrated on
        // families the networks did not train on, and a new family is not exchangeable with
        // them. 0.015 was the default while the spikes (data::read_timm, rule 4) were in the
        // calibration rows and inflated the factor; without them it missed 1.3 to 1.9%.
        Which::Vision => 0.005,
        Which::Carma if args.calibration == Calibration::Cross => 0.002,
        _ => 0.004,
    };
    Settings {
        seed: args.seed,
        bucket_mib: args.bucket_mib,
        max_epochs: args.max_epochs,
        patience: args.patience.unwrap_or(if which == Which::Vision { 100 } else { 30 }),
        learning_rate: args.learning_rate.unwrap_or(learning_rate),
        alpha: args.alpha.unwrap_or(alpha),
        tau: args.tau,
        cross_calibration: args.calibration == Calibration::Cross,
        members: args.members as usize,
        ..Settings::default()
    }
}

fn scored(rows: &[Row], indices: &[usize], predictions: &[(f64, f64)]) -> Result<Vec<Scored>> {
    indices
        .iter()
        .zip(predictions)
        .map(|(&i, &(point_mib, upper_mib))| {
            let label_mib = rows[i].label_mib.with_context(|| format!("row {i} has no label"))?;
            Ok(Scored { label_mib, point_mib, upper_mib })
        })
        .collect()
}

/// What `cv --json` prints.
#[derive(Serialize)]
struct CvReport {
    estimator: Which,
    folds: usize,
    seed: u64,
    bucket_mib: u64,
    train_seconds_per_fold: Vec<f64>,
    per_fold: Vec<Metrics>,
    overall: Metrics,
}

fn print_metrics(m: &Metrics) {
    println!("rows                        {}", m.rows);
    println!("bucket accuracy @1000 MiB   {:.4}", m.bucket_accuracy_1000);
    println!("bucket accuracy @2000 MiB   {:.4}", m.bucket_accuracy_2000);
    println!("bucket accuracy @8000 MiB   {:.4}", m.bucket_accuracy_8000);
    println!("upper in bucket @1000 MiB   {:.4}", m.upper_bucket_accuracy_1000);
    println!("under-estimates (upper)     {} ({:.4})", m.under_estimates, m.under_estimate_rate);
    println!("over-provisioning mean MiB  {:.1}", m.over_provisioning_mean_mib);
    println!("over-provisioning p95 MiB   {:.1}", m.over_provisioning_p95_mib);
    println!("MAE MiB                     {:.1}", m.mae_mib);
}

/// Reads GPUMemNet-style rows, or timm runs paired with summaries when `summaries` is set.
fn load_rows(
    data: &Path,
    summaries: Option<&Path>,
    remeasured: Option<&Path>,
) -> Result<(Vec<Row>, Option<data::TimmCounts>)> {
    match summaries {
        Some(dir) => {
            let remeasured = remeasured.map(data::read_remeasured).transpose()?.unwrap_or_default();
            let (rows, counts) = data::read_timm(data, dir, &remeasured)?;
            Ok((rows, Some(counts)))
        }
        None => Ok((data::read(data)?, None)),
    }
}

fn judged(rows: &[Row], indices: &[usize], predictions: &[(f64, f64)]) -> Result<Vec<Judged>> {
    indices
        .iter()
        .zip(predictions)
        .map(|(&i, &(point_mib, upper_mib))| {
            let label_mib = rows[i].label_mib.with_context(|| format!("row {i} has no label"))?;
            Ok(Judged { label_mib, censored: rows[i].censored, point_mib, upper_mib })
        })
        .collect()
}

fn print_real(name: &str, m: &RealMetrics) {
    println!(
        "{name:<12} rows {:>5} (censored {:>3})  under {:>4} ({:.2}%, {} censored)  over mean {:>6.0} MiB \
         ({:.1}%)  median {:>6.0} MiB ({:.1}%)  MdAPE {:.1}%",
        m.rows,
        m.censored,
        m.under_estimates,
        100.0 * m.under_estimate_rate,
        m.censored_under_estimates,
        m.over_provisioning_mean_mib,
        m.over_provisioning_mean_pct,
        m.over_provisioning_median_mib,
        m.over_provisioning_median_pct,
        m.point_mdape_pct
    );
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Fit { data, estimator, out, train } => {
            let (rows, _) = load_rows(&data, train.summaries.as_deref(), train.remeasured.as_deref())?;
            // A row set apart is never a target (data::read_timm, rules 4 and 5).
            let all = data::trainable(&rows, 0..rows.len());
            let started = Instant::now();
            let model = fit(estimator, &rows, &all, &settings(&train, estimator));
            eprintln!("trained on {} rows in {:.1} s", all.len(), started.elapsed().as_secs_f64());
            match model {
                Trained::GpuMemNet(m) => train::save_gpumemnet(*m, &out)?,
                Trained::Carma(m) => train::save_carma(*m, &out)?,
                Trained::Vision(mut m) => {
                    m.meta.provenance.push_str(
                        "; workspace spikes and summaries of another input set apart (carma-train rules 4 and 5)",
                    );
                    if let Some(path) = &train.remeasured {
                        let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
                        let parent = path.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy());
                        m.meta.provenance.push_str(&format!(
                            "; peaks a remeasurement contradicts replaced from {}/{name} (our own H200 runs)",
                            parent.unwrap_or_default()
                        ));
                    }
                    train::save_vision(*m, &out)?
                }
            }
        }
        Command::Predict { data, weights, summaries } => {
            let (rows, _) = load_rows(&data, summaries.as_deref(), None)?;
            let model = Trained::load(&weights)?;
            let all: Vec<usize> = (0..rows.len()).collect();
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let written = (|| -> std::io::Result<()> {
                writeln!(out, "row,predicted_mib,upper_mib")?;
                for (i, (point, upper)) in all.iter().zip(model.predict(&rows, &all)) {
                    writeln!(out, "{i},{},{}", point.ceil(), upper.ceil())?;
                }
                out.flush()
            })();
            match written {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other?,
            }
        }
        Command::Eval { data, weights, summaries, json } => {
            let (rows, counts) = load_rows(&data, summaries.as_deref(), None)?;
            let model = Trained::load(&weights)?;
            let all: Vec<usize> = (0..rows.len()).collect();
            let predictions = model.predict(&rows, &all);
            if counts.is_some() {
                let m = real_metrics(&judged(&rows, &all, &predictions)?);
                if json { println!("{}", serde_json::to_string_pretty(&m)?) } else { print_real("carma", &m) }
            } else {
                let m = metrics(&scored(&rows, &all, &predictions)?);
                if json { println!("{}", serde_json::to_string_pretty(&m)?) } else { print_metrics(&m) }
            }
        }
        Command::Cv { data, predictions, estimator, folds, json, domain, train } => {
            if folds < 2 {
                bail!("--folds must be at least 2");
            }
            let (rows, counts) = load_rows(&data, train.summaries.as_deref(), train.remeasured.as_deref())?;
            let settings = settings(&train, estimator);
            if estimator == Which::Vision {
                let counts =
                    counts.context("--estimator vision needs --summaries DIR (dump_model.py output)")?;
                let (report, held_out) = vision_cv::cv_vision(&rows, counts, folds, domain, &settings);
                if let Some(path) = predictions {
                    vision_cv::write_predictions(&path, &rows, &held_out)?;
                }
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    println!(
                        "vision, {folds}-fold CV grouped by architecture family, seed {}",
                        settings.seed
                    );
                    print_real("carma upper", &report.overall);
                    // The same figures against the file's own peaks, and the rows set apart.
                    print_real("file's peaks", &report.overall_file_labels);
                    for (name, m) in [("spikes", &report.spikes), ("other input", &report.summary_mismatch)] {
                        if let Some(m) = m {
                            print_real(name, m);
                        }
                    }
                    let b = &report.bounds;
                    println!(
                        "bounds ({:?}): calibrated {}, below-spread {}, whole-card {}",
                        report.domain, b.calibrated, b.below_spread, b.whole_card
                    );
                    for (name, m) in
                        [("below-spread", &report.below_spread), ("whole-card", &report.whole_card)]
                    {
                        if let Some(m) = m {
                            print_real(name, m);
                        }
                    }
                    if let Some(f) = &report.faketensor {
                        print_real("FakeTensor", f);
                    }
                    for row in &report.per_family {
                        print_real(&row.family, &row.carma);
                    }
                }
                return Ok(());
            }
            if predictions.is_some() {
                bail!("--predictions is written by --estimator vision only");
            }
            let fold_of = data::grouped_folds(&rows, folds, settings.seed);
            let (mut per_fold, mut seconds, mut all_scored) = (Vec::new(), Vec::new(), Vec::new());
            for fold in 0..folds {
                let train_idx = data::trainable(&rows, (0..rows.len()).filter(|&i| fold_of[i] != fold));
                let test_idx: Vec<usize> = (0..rows.len()).filter(|&i| fold_of[i] == fold).collect();
                let started = Instant::now();
                let model = fit(estimator, &rows, &train_idx, &settings);
                seconds.push(started.elapsed().as_secs_f64());
                let s = scored(&rows, &test_idx, &model.predict(&rows, &test_idx))?;
                per_fold.push(metrics(&s));
                all_scored.extend(s);
            }
            let report = CvReport {
                estimator,
                folds,
                seed: settings.seed,
                bucket_mib: settings.bucket_mib,
                train_seconds_per_fold: seconds,
                per_fold,
                overall: metrics(&all_scored),
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("{estimator:?}, {folds}-fold grouped CV, seed {}", settings.seed);
                print_metrics(&report.overall);
            }
        }
    }
    Ok(())
}
