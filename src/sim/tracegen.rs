//! Synthetic traces with Philly-like arrivals and a chosen light/medium/heavy mix.
//!
//! The Philly trace's submissions are bursty: many arrive within seconds of each other, with
//! long quiet gaps between bursts. A two-phase hyper-exponential reproduces that: with
//! probability `BURST_SHARE` the gap is exponential with mean `BURST_MEAN_S`, otherwise
//! exponential with the mean that makes the overall mean gap the requested one. The reference
//! traces have a mean gap of about 141 s (3.48 h over 89 gaps). Workloads are drawn uniformly
//! within their class, from the profiles file, so every generated row has a profile.

use std::collections::BTreeMap;

use super::faults::Rng;
use super::workload::{Profile, TraceRow};

/// Share of gaps that belong to a burst.
pub const BURST_SHARE: f64 = 0.35;
/// Mean gap inside a burst, s.
pub const BURST_MEAN_S: f64 = 8.0;
/// Mean gap of the reference traces, s.
pub const PHILLY_MEAN_GAP_S: f64 = 141.0;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceGen {
    pub tasks: u32,
    pub mean_gap_s: f64,
    /// Weights of the light, medium and heavy classes.
    pub mix: [f64; 3],
    pub seed: u64,
}

/// Generates the trace; `Err` when a class with weight has no workload in `profiles`.
pub fn generate(profiles: &BTreeMap<String, Profile>, options: &TraceGen) -> Result<Vec<TraceRow>, String> {
    let classes = ["light", "medium", "heavy"];
    let by_class: Vec<Vec<&str>> = classes
        .iter()
        .map(|c| profiles.values().filter(|p| p.class == *c).map(|p| p.workload.as_str()).collect())
        .collect();
    for (i, class) in classes.iter().enumerate() {
        if options.mix[i] > 0.0 && by_class[i].is_empty() {
            return Err(format!("the profiles have no {class} workload, but the mix asks for some"));
        }
    }
    let total: f64 = options.mix.iter().sum();
    if !(total > 0.0 && options.mix.iter().all(|w| *w >= 0.0)) {
        return Err("the mix weights must be non-negative and not all zero".into());
    }
    let slow_mean_s = ((options.mean_gap_s - BURST_SHARE * BURST_MEAN_S) / (1.0 - BURST_SHARE)).max(1.0);
    let mut rng = Rng::new(options.seed);
    let mut offset_s = 0.0;
    let mut rows = Vec::with_capacity(options.tasks as usize);
    for i in 0..options.tasks {
        if i > 0 {
            let mean = if rng.chance(BURST_SHARE) { BURST_MEAN_S } else { slow_mean_s };
            offset_s += -mean * (1.0 - rng.unit()).ln();
        }
        let mut pick = rng.unit() * total;
        let class = (0..3).find(|&c| {
            pick -= options.mix[c];
            pick < 0.0
        });
        let names = &by_class[class.unwrap_or(2)];
        let workload = names[(rng.next_u64() % names.len() as u64) as usize];
        rows.push(TraceRow { offset_ms: (offset_s.round() as u64) * 1000, workload: workload.to_string() });
    }
    Ok(rows)
}

/// The trace as `offset_s,workload` CSV.
pub fn to_csv(rows: &[TraceRow]) -> String {
    let mut out = String::from("offset_s,workload\n");
    for row in rows {
        out.push_str(&format!("{},{}\n", row.offset_ms / 1000, row.workload));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::workload::parse_profiles;

    /// Goal: a generated trace is deterministic, sorted, has the requested mean gap within
    /// sampling error, and only names workloads of the requested classes.
    #[test]
    fn generated_trace_has_requested_shape() {
        let text = "workload,model,batch_size,gpus,exclusive_minutes,class,mem_actual_mib,est_horus_mib,est_faketensor_mib,est_gpumemnet_mib,smact_assumed\n\
            a,m,1,1,2,light,100,1,1,1,0.1\nb,m,1,1,2,heavy,100,1,1,1,0.8\n";
        let profiles = parse_profiles("p", text).expect("profiles");
        let options = TraceGen { tasks: 2000, mean_gap_s: 141.0, mix: [1.0, 0.0, 0.0], seed: 3 };
        let rows = generate(&profiles, &options).expect("generates");
        assert_eq!(rows, generate(&profiles, &options).expect("again"));
        assert!(rows.windows(2).all(|w| w[0].offset_ms <= w[1].offset_ms));
        assert!(rows.iter().all(|r| r.workload == "a"));
        let mean_gap_s = rows.last().expect("rows").offset_ms as f64 / 1000.0 / 1999.0;
        assert!((mean_gap_s - 141.0).abs() < 15.0, "{mean_gap_s}");
        let medium = TraceGen { mix: [0.0, 1.0, 0.0], ..options };
        assert!(generate(&profiles, &medium).is_err());
    }
}
