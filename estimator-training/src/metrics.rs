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

#[cfg(test)]
mod tests {
    use super::*;

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
