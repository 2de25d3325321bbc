//! carma-train: trains, applies and evaluates carma's GPU-memory estimators.
//!
//! ```text
//! carma-train fit --data CSV --estimator gpumemnet|carma --out DIR [--seed N] [--bucket-mib 1000]
//! carma-train predict --data CSV --weights DIR          # CSV row,predicted_mib,upper_mib
//! carma-train eval --data CSV --weights DIR [--json]
//! carma-train cv --data CSV --estimator NAME [--folds 5] [--seed N] [--json]
//! ```
//!
//! `DIR` holds `NAME.bpk` (burnpack weights) and `NAME.json` (scaler, classes, margin,
//! provenance): copy them to `src/estimate/weights/` to embed them in `carma`.

mod data;
mod metrics;
mod train;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use carma::estimate::{carma as carma_est, gpumemnet};
use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::data::Row;
use crate::metrics::{Metrics, Scored, metrics};
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
    /// Epochs without a better validation loss before stopping
    #[arg(long, default_value_t = 30)]
    patience: usize,
    /// Adam learning rate [default: 1e-3 for gpumemnet, as published; 1e-2 for carma]
    #[arg(long)]
    learning_rate: Option<f64>,
    /// Miscoverage of carma's conformal upper bound
    #[arg(long, default_value_t = 0.004)]
    alpha: f64,
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
    },
    /// Score saved weights on a labelled CSV
    Eval {
        #[arg(long)]
        data: PathBuf,
        #[arg(long)]
        weights: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Grouped k-fold cross-validation, re-initialising the model for every fold
    Cv {
        #[arg(long)]
        data: PathBuf,
        #[arg(long)]
        estimator: Which,
        #[arg(long, default_value_t = 5)]
        folds: usize,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        train: TrainArgs,
    },
}

/// A trained model of either kind.
enum Trained {
    GpuMemNet(Box<gpumemnet::Model>),
    Carma(Box<carma_est::Model>),
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
        bail!("{} holds neither gpumemnet.bpk nor carma.bpk", dir.display())
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
        }
    }
}

fn fit(which: Which, rows: &[Row], train: &[usize], settings: &Settings) -> Trained {
    match which {
        Which::Gpumemnet => Trained::GpuMemNet(Box::new(train::fit_gpumemnet(rows, train, settings))),
        Which::Carma => Trained::Carma(Box::new(train::fit_carma(rows, train, settings))),
    }
}

fn settings(args: &TrainArgs, which: Which) -> Settings {
    let learning_rate = if which == Which::Carma { 1e-2 } else { 1e-3 };
    Settings {
        seed: args.seed,
        bucket_mib: args.bucket_mib,
        max_epochs: args.max_epochs,
        patience: args.patience,
        learning_rate: args.learning_rate.unwrap_or(learning_rate),
        alpha: args.alpha,
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

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Fit { data, estimator, out, train } => {
            let rows = data::read(&data)?;
            let all: Vec<usize> = (0..rows.len()).collect();
            let started = Instant::now();
            let model = fit(estimator, &rows, &all, &settings(&train, estimator));
            eprintln!("trained on {} rows in {:.1} s", rows.len(), started.elapsed().as_secs_f64());
            match model {
                Trained::GpuMemNet(m) => train::save_gpumemnet(*m, &out)?,
                Trained::Carma(m) => train::save_carma(*m, &out)?,
            }
        }
        Command::Predict { data, weights } => {
            let rows = data::read(&data)?;
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
        Command::Eval { data, weights, json } => {
            let rows = data::read(&data)?;
            let model = Trained::load(&weights)?;
            let all: Vec<usize> = (0..rows.len()).collect();
            let m = metrics(&scored(&rows, &all, &model.predict(&rows, &all))?);
            if json { println!("{}", serde_json::to_string_pretty(&m)?) } else { print_metrics(&m) }
        }
        Command::Cv { data, estimator, folds, json, train } => {
            let rows = data::read(&data)?;
            let settings = settings(&train, estimator);
            let fold_of = data::grouped_folds(&rows, folds, settings.seed);
            let (mut per_fold, mut seconds, mut all_scored) = (Vec::new(), Vec::new(), Vec::new());
            for fold in 0..folds {
                let train_idx: Vec<usize> = (0..rows.len()).filter(|&i| fold_of[i] != fold).collect();
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
