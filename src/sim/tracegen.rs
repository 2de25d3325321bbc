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
/// Mixed into the seed of the users' random stream.
const USER_STREAM: u64 = 0x7573_6572_735f_7331;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceGen {
    /// Rows to generate.
    pub tasks: u32,
    /// Mean time between two submissions, s ([`PHILLY_MEAN_GAP_S`] for Philly-like load).
    pub mean_gap_s: f64,
    /// Weights of the light, medium and heavy classes.
    pub mix: [f64; 3],
    /// Seed of the arrivals, workloads and users: the same seed gives the same trace.
    pub seed: u64,
    /// Submitters and their weights; empty: no `user` column.
    pub users: Vec<(String, f64)>,
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
    // Users come from a stream of their own, so a trace with users has the same arrivals and
    // workloads as the same seed without.
    let mut user_rng = Rng::new(options.seed ^ USER_STREAM);
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
        let user = pick_user(&options.users, &mut user_rng);
        rows.push(TraceRow {
            offset_ms: (offset_s.round() as u64) * 1000,
            workload: workload.to_string(),
            user,
        });
    }
    Ok(rows)
}

/// A user drawn by weight, or `None` without users.
fn pick_user(users: &[(String, f64)], rng: &mut Rng) -> Option<String> {
    let total: f64 = users.iter().map(|(_, w)| w).sum();
    if users.is_empty() || total <= 0.0 {
        return None;
    }
    let mut pick = rng.unit() * total;
    let chosen = users.iter().find(|(_, w)| {
        pick -= w;
        pick < 0.0
    });
    Some(chosen.unwrap_or(&users[users.len() - 1]).0.clone())
}

/// Parses `--users NAME:W,NAME:W` (weights non-negative, not all zero).
pub fn parse_users(text: &str) -> Result<Vec<(String, f64)>, String> {
    let hint = "use NAME:WEIGHT[,NAME:WEIGHT...], e.g. alice:0.9,bob:0.1";
    let mut users: Vec<(String, f64)> = Vec::new();
    for part in text.split(',') {
        let (name, weight) = part.split_once(':').ok_or_else(|| format!("--users part {part:?}: {hint}"))?;
        let weight: f64 =
            weight.trim().parse().ok().filter(|w: &f64| w.is_finite() && *w >= 0.0).ok_or_else(|| {
                format!("--users part {part:?}: the weight is not a non-negative number; {hint}")
            })?;
        let name = name.trim();
        if !crate::access::users::is_user_name(name) || users.iter().any(|(n, _)| n == name) {
            return Err(format!("--users part {part:?}: {name:?} is not a new user name; {hint}"));
        }
        users.push((name.to_string(), weight));
    }
    if users.iter().all(|(_, w)| *w == 0.0) {
        return Err(format!("--users {text:?}: every weight is 0; {hint}"));
    }
    Ok(users)
}

/// The trace as `offset_s,workload` CSV, with a `user` column when a row has a user.
pub fn to_csv(rows: &[TraceRow]) -> String {
    let with_user = rows.iter().any(|r| r.user.is_some());
    let mut out = String::from(if with_user { "offset_s,workload,user\n" } else { "offset_s,workload\n" });
    for row in rows {
        match (&row.user, with_user) {
            (_, false) => out.push_str(&format!("{},{}\n", row.offset_ms / 1000, row.workload)),
            (user, true) => out.push_str(&format!(
                "{},{},{}\n",
                row.offset_ms / 1000,
                row.workload,
                user.as_deref().unwrap_or("root")
            )),
        }
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
        let options =
            TraceGen { tasks: 2000, mean_gap_s: 141.0, mix: [1.0, 0.0, 0.0], seed: 3, users: vec![] };
        let rows = generate(&profiles, &options).expect("generates");
        assert_eq!(rows, generate(&profiles, &options).expect("again"));
        assert!(rows.windows(2).all(|w| w[0].offset_ms <= w[1].offset_ms));
        assert!(rows.iter().all(|r| r.workload == "a"));
        let mean_gap_s = rows.last().expect("rows").offset_ms as f64 / 1000.0 / 1999.0;
        assert!((mean_gap_s - 141.0).abs() < 15.0, "{mean_gap_s}");
        let medium = TraceGen { mix: [0.0, 1.0, 0.0], ..options.clone() };
        assert!(generate(&profiles, &medium).is_err());
        // Users have a stream of their own: the same seed gives the same arrivals and workloads.
        let users = TraceGen { users: parse_users("alice:0.9,bob:0.1").unwrap(), ..options };
        let with_users = generate(&profiles, &users).expect("generates");
        let bob = with_users.iter().filter(|r| r.user.as_deref() == Some("bob")).count();
        assert!((100..300).contains(&bob), "about 10% of 2000 rows are bob's: {bob}");
        assert!(
            with_users.iter().zip(&rows).all(|(a, b)| a.offset_ms == b.offset_ms && a.workload == b.workload)
        );
        assert!(to_csv(&with_users).starts_with("offset_s,workload,user\n0,a,"));
        assert!(parse_users("alice:x").unwrap_err().contains("not a non-negative number"));
        assert!(parse_users("alice:1,alice:2").unwrap_err().contains("not a new user name"));
    }
}
