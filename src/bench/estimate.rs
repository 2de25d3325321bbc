//! `carma bench estimate`: time per estimate for each estimator, in one process, after a
//! warm-up that loads the embedded weights (process start and loading are excluded).

use serde::Serialize;

use crate::estimate::parse::activations_params;
use crate::estimate::{self, ESTIMATOR_NAMES, EstimateInput};

/// One estimator's timing.
#[derive(Debug, Serialize)]
pub struct EstimateBenchRow {
    pub estimator: String,
    pub median_us: f64,
    pub p95_us: f64,
    /// Time of the first call, which loads the embedded weights.
    pub first_call_us: f64,
}

/// All rows.
#[derive(Debug, Serialize)]
pub struct EstimateBench {
    pub iterations: u32,
    pub summary: String,
    pub rows: Vec<EstimateBenchRow>,
}

/// A 6-layer MLP in the GPUMemNet data's shape, with BatchNorm and dropout.
const BENCH_LAYERS: &str = "[('linear', 1173, 2753031), ('batch_normalization', 1173, 2346), ('ReLU', 1173, 0), \
    ('dropout', 1173, 0), ('linear', 586, 687964), ('batch_normalization', 586, 1172), ('ReLU', 586, 0), \
    ('dropout', 586, 0), ('linear', 197, 115639), ('Softmax', 197, 0)]";

/// Times every estimator `iterations` times on one MLP summary at batch 996.
pub fn estimate(iterations: u32) -> EstimateBench {
    assert!(iterations > 0);
    let summary = activations_params(BENCH_LAYERS).expect("the bench summary parses");
    let input = EstimateInput { summary: &summary, batch_size: 996, declared_mib: Some(4000) };
    let rows = ESTIMATOR_NAMES
        .iter()
        .map(|name| {
            let estimator = estimate::by_name(name).expect("known name");
            let started = std::time::Instant::now();
            let _ = std::hint::black_box(estimator.estimate(&input));
            let first_call_us = started.elapsed().as_secs_f64() * 1e6;
            let mut samples: Vec<f64> = (0..iterations)
                .map(|_| {
                    let started = std::time::Instant::now();
                    let _ = std::hint::black_box(estimator.estimate(std::hint::black_box(&input)));
                    started.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            samples.sort_by(f64::total_cmp);
            let p95 = samples[(samples.len() * 95 / 100).min(samples.len() - 1)];
            EstimateBenchRow {
                estimator: name.to_string(),
                median_us: samples[samples.len() / 2],
                p95_us: p95,
                first_call_us,
            }
        })
        .collect();
    EstimateBench { iterations, summary: "3 Linear + 2 BatchNorm + 2 dropout MLP, batch 996".into(), rows }
}
