//! `carma bench estimate`: time per estimate for each estimator, in one process, after a
//! warm-up that loads the embedded weights (process start and loading are excluded).

use serde::Serialize;

use crate::estimate::parse::{self, activations_params};
use crate::estimate::{self, ESTIMATOR_NAMES, EstimateInput};

/// One estimator's timing on one summary.
#[derive(Debug, Serialize)]
pub struct EstimateBenchRow {
    /// "mlp" (the GPUMemNet-shaped MLP) or "vit-l" (timm's ViT-L as dump_model.py writes it).
    pub case: String,
    /// The estimator timed, by its `carma estimate --estimator` name.
    pub estimator: String,
    /// Median time of one estimate after the first call, µs.
    pub median_us: f64,
    /// 95th percentile of the time of one estimate, µs.
    pub p95_us: f64,
    /// Time of the first call, which loads the embedded weights.
    pub first_call_us: f64,
}

/// All rows.
#[derive(Debug, Serialize)]
pub struct EstimateBench {
    /// Estimates timed per row.
    pub iterations: u32,
    /// What the two model summaries are, in words.
    pub summary: String,
    /// One row per case and estimator.
    pub rows: Vec<EstimateBenchRow>,
    /// Median time to parse and validate the ViT-L summary JSON (already in memory), µs:
    /// what `carma estimate` and the tick pay before estimating.
    pub vit_parse_median_us: f64,
    /// Size of the ViT-L summary JSON, bytes.
    pub vit_summary_bytes: usize,
}

/// timm's vit_large_patch16_224 at batch 8, as estimator-training/dump_model.py writes it.
const VIT_LARGE: &str = include_str!("../../schema/examples/model-summary.vit.json");

/// A 6-layer MLP in the GPUMemNet data's shape, with BatchNorm and dropout.
const BENCH_LAYERS: &str = "[('linear', 1173, 2753031), ('batch_normalization', 1173, 2346), ('ReLU', 1173, 0), \
    ('dropout', 1173, 0), ('linear', 586, 687964), ('batch_normalization', 586, 1172), ('ReLU', 586, 0), \
    ('dropout', 586, 0), ('linear', 197, 115639), ('Softmax', 197, 0)]";

/// Times every estimator `iterations` times on one MLP summary at batch 996, then carma and
/// Horus on the ViT-L summary at batch 8 (the real-model networks), and the parse of that
/// summary on its own.
pub fn estimate(iterations: u32) -> EstimateBench {
    assert!(iterations > 0);
    let summary = activations_params(BENCH_LAYERS).expect("the bench summary parses");
    let input = EstimateInput { summary: &summary, batch_size: 996, declared_mib: Some(4000) };
    let mut rows = time_estimators("mlp", &ESTIMATOR_NAMES, &input, iterations);
    let vit = parse::parse_any(VIT_LARGE).expect("the bundled ViT-L summary parses");
    let vit_input = EstimateInput { summary: &vit, batch_size: 8, declared_mib: None };
    rows.extend(time_estimators("vit-l", &["horus", "carma"], &vit_input, iterations));
    let vit_parse_median_us = super::median_us(iterations.min(2_000) as usize, || {
        let parsed = parse::parse_any(std::hint::black_box(VIT_LARGE))?;
        std::hint::black_box(parsed);
        Ok::<(), String>(())
    })
    .expect("the bundled ViT-L summary parses");
    EstimateBench {
        iterations,
        summary:
            "mlp: 3 Linear + 2 BatchNorm + 2 dropout MLP, batch 996; vit-l: vit_large_patch16_224, batch 8"
                .into(),
        rows,
        vit_parse_median_us,
        vit_summary_bytes: VIT_LARGE.len(),
    }
}

fn time_estimators(
    case: &str,
    names: &[&str],
    input: &EstimateInput,
    iterations: u32,
) -> Vec<EstimateBenchRow> {
    names
        .iter()
        .map(|name| {
            let estimator = estimate::by_name(name).expect("known name");
            let started = std::time::Instant::now();
            let _ = std::hint::black_box(estimator.estimate(input));
            let first_call_us = started.elapsed().as_secs_f64() * 1e6;
            let mut samples: Vec<f64> = (0..iterations)
                .map(|_| {
                    let started = std::time::Instant::now();
                    let _ = std::hint::black_box(estimator.estimate(std::hint::black_box(input)));
                    started.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            samples.sort_by(f64::total_cmp);
            let p95 = samples[(samples.len() * 95 / 100).min(samples.len() - 1)];
            EstimateBenchRow {
                case: case.to_string(),
                estimator: name.to_string(),
                median_us: samples[samples.len() / 2],
                p95_us: p95,
                first_call_us,
            }
        })
        .collect()
}
