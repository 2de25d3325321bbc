//! Evaluation metrics over (label, point, upper) triples, all in MiB.
//!
//! - bucket accuracy at width w: ceil(point / w) == ceil(label / w);
//! - under-estimate rate: upper < label;
//! - over-provisioning: max(0, upper − label), as a mean and a 95th percentile over all rows;
//! - MAE: mean |point − label|.

use serde::Serialize;

/// One prediction against its label.
#[derive(Clone, Copy, Debug)]
pub struct Scored {
    pub label_mib: f64,
    pub point_mib: f64,
    pub upper_mib: f64,
}

/// The report `eval` and `cv` print.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Metrics {
    pub rows: usize,
    pub bucket_accuracy_1000: f64,
    pub bucket_accuracy_2000: f64,
    pub bucket_accuracy_8000: f64,
    /// Bucket accuracy at 1000 MiB of the upper bound.
    pub upper_bucket_accuracy_1000: f64,
    pub under_estimate_rate: f64,
    pub under_estimates: usize,
    pub over_provisioning_mean_mib: f64,
    pub over_provisioning_p95_mib: f64,
    pub mae_mib: f64,
}

fn bucket(mib: f64, width: f64) -> i64 {
    (mib / width).ceil() as i64
}

/// Computes the metrics.
pub fn metrics(scored: &[Scored]) -> Metrics {
    assert!(!scored.is_empty(), "no predictions to score");
    let n = scored.len() as f64;
    let accuracy = |w: f64, upper: bool| {
        scored
            .iter()
            .filter(|s| bucket(if upper { s.upper_mib } else { s.point_mib }, w) == bucket(s.label_mib, w))
            .count() as f64
            / n
    };
    let under_estimates = scored.iter().filter(|s| s.upper_mib < s.label_mib).count();
    let mut over: Vec<f64> = scored.iter().map(|s| (s.upper_mib - s.label_mib).max(0.0)).collect();
    over.sort_by(f64::total_cmp);
    let p95 = over[((over.len() as f64 * 0.95).ceil() as usize).clamp(1, over.len()) - 1];
    Metrics {
        rows: scored.len(),
        bucket_accuracy_1000: accuracy(1000.0, false),
        bucket_accuracy_2000: accuracy(2000.0, false),
        bucket_accuracy_8000: accuracy(8000.0, false),
        upper_bucket_accuracy_1000: accuracy(1000.0, true),
        under_estimate_rate: under_estimates as f64 / n,
        under_estimates,
        over_provisioning_mean_mib: over.iter().sum::<f64>() / n,
        over_provisioning_p95_mib: p95,
        mae_mib: scored.iter().map(|s| (s.point_mib - s.label_mib).abs()).sum::<f64>() / n,
    }
}

/// One prediction against a label that may be censored (the run filled the card).
#[derive(Clone, Copy, Debug)]
pub struct Judged {
    /// The measured peak, or for a censored row the capacity it reached.
    pub label_mib: f64,
    pub censored: bool,
    pub point_mib: f64,
    pub upper_mib: f64,
}

/// The real-model report: what placement cares about.
///
/// - an under-estimate is `upper < label`; for a censored row, `upper < capacity` (the job
///   would be placed on a card it cannot fit);
/// - over-provisioning is `max(0, upper − label)` over labelled rows, in MiB and in percent
///   of the label;
/// - MdAPE is the median of `|point − label| / label` over labelled rows.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RealMetrics {
    pub rows: usize,
    pub labelled: usize,
    pub censored: usize,
    pub under_estimates: usize,
    pub under_estimate_rate: f64,
    /// Of `under_estimates`, how many are censored rows.
    pub censored_under_estimates: usize,
    pub over_provisioning_mean_mib: f64,
    pub over_provisioning_median_mib: f64,
    pub over_provisioning_mean_pct: f64,
    pub over_provisioning_median_pct: f64,
    /// The largest over-provisioning, in percent of the label.
    pub over_provisioning_max_pct: f64,
    /// Labelled rows over-provisioned by more than 5× their label (over 500%).
    pub over_by_more_than_5x: usize,
    pub point_mdape_pct: f64,
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() { f64::NAN } else { values.iter().sum::<f64>() / values.len() as f64 }
}

/// Computes the real-model metrics.
pub fn real_metrics(judged: &[Judged]) -> RealMetrics {
    assert!(!judged.is_empty(), "no predictions to score");
    let labelled: Vec<&Judged> = judged.iter().filter(|j| !j.censored).collect();
    let under = |j: &&Judged| j.upper_mib < j.label_mib;
    let censored_under = judged.iter().filter(|j| j.censored).filter(under).count();
    let under_estimates = judged.iter().filter(under).count();
    let over_mib: Vec<f64> = labelled.iter().map(|j| (j.upper_mib - j.label_mib).max(0.0)).collect();
    let over_pct: Vec<f64> =
        labelled.iter().map(|j| 100.0 * (j.upper_mib - j.label_mib).max(0.0) / j.label_mib).collect();
    let ape: Vec<f64> =
        labelled.iter().map(|j| 100.0 * (j.point_mib - j.label_mib).abs() / j.label_mib).collect();
    RealMetrics {
        rows: judged.len(),
        labelled: labelled.len(),
        censored: judged.len() - labelled.len(),
        under_estimates,
        under_estimate_rate: under_estimates as f64 / judged.len() as f64,
        censored_under_estimates: censored_under,
        over_provisioning_mean_mib: mean(&over_mib),
        over_provisioning_median_mib: median(over_mib),
        over_provisioning_mean_pct: mean(&over_pct),
        over_provisioning_max_pct: over_pct.iter().copied().fold(0.0, f64::max),
        over_by_more_than_5x: over_pct.iter().filter(|p| **p > 500.0).count(),
        over_provisioning_median_pct: median(over_pct),
        point_mdape_pct: median(ape),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: censored rows count as under-estimated only below the capacity, and stay out
    /// of over-provisioning and error figures.
    #[test]
    fn real_metrics_with_a_censored_row() {
        let j =
            |label_mib, censored, point_mib, upper_mib| Judged { label_mib, censored, point_mib, upper_mib };
        let m = real_metrics(&[
            j(1000.0, false, 900.0, 1200.0),
            j(2000.0, false, 2200.0, 1900.0),
            j(40000.0, true, 30000.0, 39000.0),
            j(40000.0, true, 41000.0, 45000.0),
            j(1000.0, false, 1000.0, 7000.0),
        ]);
        assert_eq!((m.rows, m.labelled, m.censored), (5, 3, 2));
        assert_eq!((m.under_estimates, m.censored_under_estimates), (2, 1));
        assert!((m.over_provisioning_mean_mib - 6200.0 / 3.0).abs() < 1e-9);
        assert!((m.over_provisioning_mean_pct - 620.0 / 3.0).abs() < 1e-9);
        assert_eq!((m.over_provisioning_max_pct, m.over_by_more_than_5x), (600.0, 1));
        assert!((m.point_mdape_pct - 10.0).abs() < 1e-9);
    }

    /// Goal: each metric on a hand-checked set of three predictions.
    #[test]
    fn metrics_on_three_rows() {
        let s = |label_mib, point_mib, upper_mib| Scored { label_mib, point_mib, upper_mib };
        let m = metrics(&[s(1500.0, 1600.0, 1700.0), s(2500.0, 1900.0, 2000.0), s(3000.0, 3000.0, 3000.0)]);
        assert_eq!(m.under_estimates, 1);
        assert!((m.bucket_accuracy_1000 - 2.0 / 3.0).abs() < 1e-9);
        assert!((m.bucket_accuracy_2000 - 2.0 / 3.0).abs() < 1e-9);
        assert!((m.over_provisioning_mean_mib - 200.0 / 3.0).abs() < 1e-9);
        assert!((m.mae_mib - 700.0 / 3.0).abs() < 1e-9);
        assert_eq!(m.over_provisioning_p95_mib, 200.0);
    }
}
