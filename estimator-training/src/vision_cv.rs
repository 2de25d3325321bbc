//! `cv --estimator vision`: grouped cross-validation of the real-model networks, scored
//! against the cleaned labels and, apart, against the data file's own peaks; the held-out
//! predictions CSV. The rows a fold trains on come from `data::trainable`, never a row set apart.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use carma::estimate::{Bound, vision};
use serde::Serialize;

use crate::data::{self, Row};
use crate::metrics::{Judged, RealMetrics, real_metrics};
use crate::train::{self, Settings};
use crate::{DomainRule, Which, judged};

/// One line of the per-family table.
#[derive(Serialize)]
pub(crate) struct FamilyRow {
    pub(crate) family: String,
    pub(crate) carma: RealMetrics,
    pub(crate) faketensor: Option<RealMetrics>,
}

/// What `cv --estimator vision --json` prints.
#[derive(Serialize)]
pub(crate) struct VisionCvReport {
    pub(crate) estimator: Which,
    pub(crate) folds: usize,
    pub(crate) seed: u64,
    pub(crate) tau: f64,
    pub(crate) alpha: f64,
    pub(crate) data: data::TimmCounts,
    pub(crate) train_seconds_per_fold: Vec<f64>,
    pub(crate) upper_factor_per_fold: Vec<f64>,
    /// Every row but the spikes, against the cleaned labels (remeasured where `--remeasured`).
    pub(crate) overall: RealMetrics,
    /// Every row the file's own peaks keep (the rows scored before remeasurement), the
    /// spikes included, against the data file's own labels.
    pub(crate) overall_file_labels: RealMetrics,
    /// The workspace spikes (never trained on), against the file's peaks.
    pub(crate) spikes: Option<RealMetrics>,
    /// The rows whose summary does not describe the run, against the file's peaks.
    pub(crate) summary_mismatch: Option<RealMetrics>,
    /// The rule for inputs outside their fold's training spread.
    pub(crate) domain: DomainRule,
    /// Held-out rows per bound (counted whatever the rule, as `carma estimate` would decide).
    pub(crate) bounds: BoundCounts,
    /// The rows below the spread, scored with the rule's figure.
    pub(crate) below_spread: Option<RealMetrics>,
    /// The rows above the spread.
    pub(crate) whole_card: Option<RealMetrics>,
    pub(crate) faketensor: Option<RealMetrics>,
    pub(crate) per_family: Vec<FamilyRow>,
}

/// FakeTensor's figures for the same rows, as (point, upper) pairs.
fn baseline(rows: &[Row], judged_rows: &[usize]) -> Option<Vec<Judged>> {
    judged_rows
        .iter()
        .map(|&i| {
            let b = rows[i].baseline_mib?;
            Some(Judged {
                label_mib: rows[i].label_mib?,
                censored: rows[i].censored,
                point_mib: b,
                upper_mib: b,
            })
        })
        .collect()
}

/// Held-out predictions as CSV, one line per row, for the per-model tables in reports/.
pub(crate) fn write_predictions(path: &Path, rows: &[Row], held: &[Held]) -> Result<()> {
    let mut text = String::from(
        "model,family,batch_size,label_mib,censored,point_mib,upper_mib,faketensor_mib,bound,file_label_mib,apart\n",
    );
    for (row, Held { point, upper, bound }) in rows.iter().zip(held) {
        let name = row.summary.name.as_deref().unwrap_or("");
        text.push_str(&format!(
            "{},{},{},{},{},{:.0},{:.0},{},{},{},{}\n",
            name.trim_start_matches("timm:"),
            row.group,
            row.batch_size,
            row.label_mib.unwrap_or(f64::NAN),
            row.censored,
            point,
            upper,
            row.baseline_mib.map_or(String::new(), |b| format!("{b:.0}")),
            bound.name(),
            row.file_label_mib.unwrap_or(f64::NAN),
            row.apart.map_or("", data::Apart::name)
        ));
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

pub(crate) fn cv_vision(
    rows: &[Row],
    counts: data::TimmCounts,
    folds: usize,
    rule: DomainRule,
    settings: &Settings,
) -> (VisionCvReport, Vec<Held>) {
    let fold_of = data::grouped_folds(rows, folds, settings.seed);
    let (mut seconds, mut factors) = (Vec::new(), Vec::new());
    let mut held = vec![Held { point: 0.0, upper: 0.0, bound: Bound::Calibrated }; rows.len()];
    for fold in 0..folds {
        let train_idx = data::trainable(rows, (0..rows.len()).filter(|&i| fold_of[i] != fold));
        let test_idx: Vec<usize> = (0..rows.len()).filter(|&i| fold_of[i] == fold).collect();
        let started = Instant::now();
        let model = train::fit_vision(rows, &train_idx, settings);
        seconds.push(started.elapsed().as_secs_f64());
        factors.push(model.meta.upper_factor);
        let inputs: Vec<_> = test_idx
            .iter()
            .map(|&i| vision::inputs(&rows[i].input()).expect("vision rows carry saved bytes"))
            .collect();
        for ((&i, row), p) in test_idx.iter().zip(&inputs).zip(model.predict_mib(&inputs)) {
            held[i] = apply_rule(rule, &model, &rows[i], row, p);
        }
    }
    let predictions: Vec<(f64, f64)> = held.iter().map(|h| (h.point, h.upper)).collect();
    let with_bound =
        |bound: Bound| -> Vec<usize> { (0..rows.len()).filter(|&i| held[i].bound == bound).collect() };
    let bounds = BoundCounts {
        calibrated: with_bound(Bound::Calibrated).len(),
        below_spread: with_bound(Bound::BelowSpread).len(),
        whole_card: with_bound(Bound::WholeCard).len(),
    };
    // Scored against the cleaned labels, spikes apart; and every row against the file's own.
    let all: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].apart.is_none()).collect();
    let apart = |why: data::Apart| -> Vec<usize> {
        (0..rows.len()).filter(|&i| rows[i].apart == Some(why)).collect()
    };
    let against_file = |idx: &[usize]| -> Option<RealMetrics> {
        let judged: Vec<Judged> = idx
            .iter()
            .map(|&i| Judged {
                label_mib: rows[i].file_label_mib.unwrap_or(f64::NAN),
                censored: rows[i].file_censored,
                point_mib: predictions[i].0,
                upper_mib: predictions[i].1,
            })
            .collect();
        Some(judged).filter(|j| !j.is_empty()).map(|j| real_metrics(&j))
    };
    let score = |idx: &[usize]| {
        let preds: Vec<(f64, f64)> = idx.iter().map(|&i| predictions[i]).collect();
        judged(rows, idx, &preds).expect("timm rows are labelled")
    };
    let every: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].file_kept).collect();
    let mut families: Vec<&str> = rows.iter().map(|r| r.group.as_str()).collect();
    families.sort_unstable();
    families.dedup();
    let per_family = families
        .iter()
        .map(|family| {
            let idx: Vec<usize> = all.iter().copied().filter(|&i| rows[i].group == *family).collect();
            FamilyRow {
                family: family.to_string(),
                carma: real_metrics(&score(&idx)),
                faketensor: baseline(rows, &idx).map(|b| real_metrics(&b)),
            }
        })
        .collect();
    let report = VisionCvReport {
        estimator: Which::Vision,
        folds,
        seed: settings.seed,
        tau: settings.tau,
        alpha: settings.alpha,
        data: counts,
        train_seconds_per_fold: seconds,
        upper_factor_per_fold: factors,
        overall: real_metrics(&score(&all)),
        overall_file_labels: against_file(&every).expect("cv has rows"),
        spikes: against_file(&apart(data::Apart::Spike)),
        summary_mismatch: against_file(&apart(data::Apart::SummaryMismatch)),
        domain: rule,
        below_spread: Some(with_bound(Bound::BelowSpread))
            .filter(|i| !i.is_empty())
            .map(|i| real_metrics(&score(&i))),
        whole_card: Some(with_bound(Bound::WholeCard))
            .filter(|i| !i.is_empty())
            .map(|i| real_metrics(&score(&i))),
        bounds,
        faketensor: baseline(rows, &all).map(|b| real_metrics(&b)),
        per_family,
    };
    (report, held)
}

/// One held-out figure and the bound it came from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    pub(crate) point: f64,
    pub(crate) upper: f64,
    pub(crate) bound: Bound,
}

/// How many held-out rows got each bound.
#[derive(Serialize)]
pub(crate) struct BoundCounts {
    pub(crate) calibrated: usize,
    pub(crate) below_spread: usize,
    pub(crate) whole_card: usize,
}

/// The figure `rule` gives a held-out row whose networks said `networks` (point, upper):
/// through [`vision::decide`], as `carma estimate` does.
pub(crate) fn apply_rule(
    rule: DomainRule,
    model: &vision::Model,
    row: &Row,
    inputs: &vision::Inputs,
    networks: (f64, f64),
) -> Held {
    let input = row.input();
    let decision = vision::decide(model, &input, inputs, &carma::estimate::physics::terms(&input), networks);
    let bound = decision.domain.bound();
    let (point, upper) = match (rule, bound) {
        (DomainRule::Off, _) | (_, Bound::Calibrated) => networks,
        (DomainRule::Card, _) => (networks.0, decision.whole_card_mib),
        (DomainRule::Bounded, _) => (decision.point_mib, decision.upper_mib),
    };
    Held { point, upper, bound }
}
