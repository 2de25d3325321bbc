//! Evaluation on many arrival sequences: one configuration and the exclusive baseline, each
//! simulated on the same K copies of a trace whose arrivals are jittered, and the mean and
//! spread of what they did.
//!
//! One trace is one sample of arrivals, and a change of a minute in them moves a makespan by
//! a point or two, so a configuration tuned on one sequence flatters itself. Here copy k
//! (1-based) moves every arrival by a uniform offset in ±`jitter` drawn from the seed of copy
//! k ([`copy_seed`]), clamps at 0 and re-sorts (a stable sort keeps the file's order for equal
//! offsets). The same copy seed also seeds the run itself (task ids, measurement noise,
//! declared time limits), so the configuration and its baseline see the same tasks.
//!
//! The baseline is the paper-reproduction's exclusive row: one task per idle GPU, strict FIFO,
//! no memory figure, no MPS caps, a 60 s sleep after each placement (the original scheduler's).
//! Every number comes from `carma report`'s reading of the run's journal.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::driver::{Estimator, SimOptions, simulate};
use super::faults::Rng;
use super::workload::TraceRow;
use crate::error::{Error, Result};
use crate::sched::{Policy, SchedConfig};

/// Most copies one evaluation runs.
pub const COPIES_MAX: u32 = 1000;
/// Largest jitter, ms (a day).
pub const JITTER_MS_MAX: u64 = 86_400_000;
/// The baseline's sleep after each placement, ms (the original scheduler's).
pub const BASELINE_PAUSE_MS: u64 = 60_000;
/// The JSON output's schema tag (schema/simulate-copies.schema.json).
pub const COPIES_SCHEMA: &str = "carma.simulate-copies/1";

/// How many copies, how far arrivals move, and from which seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopiesPlan {
    /// Copies of the trace to run, 1 to [`COPIES_MAX`].
    pub copies: u32,
    /// Each arrival moves by a uniform offset in ± this, ms (at most [`JITTER_MS_MAX`]).
    pub jitter_ms: u64,
    /// The evaluation's seed; each copy's seed derives from it ([`copy_seed`]).
    pub seed: u64,
}

/// What one run did, from its journal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunMetrics {
    /// From the first submission to the last task's finish, hours (`carma report`'s makespan).
    pub makespan_h: f64,
    /// Mean job completion time, submission to finish over the finished tasks, minutes.
    pub jct_mean_min: f64,
    /// GPU energy the run used, megajoules (MJ, not millijoules).
    pub energy_mj: f64,
    /// Attempts that crashed out of memory.
    pub ooms: u64,
    /// Tasks that did not finish (failed or left unfinished).
    pub lost_tasks: u64,
    /// The longest wait of a one-GPU task, submission to its first start, minutes: what the
    /// queue order costs the small tasks at worst.
    pub wait_1gpu_max_min: f64,
    /// Attempts preempted (the journal's Preempted records).
    pub preemptions: u64,
    /// Checkpoints the jobs reported (the journal's Checkpointed records).
    pub checkpoints: u64,
    /// Attempts that resumed from a checkpoint (the simulated machine's count).
    pub resumes: u64,
    /// GPU-hours of progress thrown away: what each attempt that did not finish had done
    /// since its last checkpoint, all of it without one (the simulated machine's truth).
    pub lost_gpu_h: f64,
    /// GPU-hours spent loading checkpoints on resume (the simulated machine's truth).
    pub restart_gpu_h: f64,
}

/// One copy: its seed, the configuration's run and the baseline's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CopyResult {
    /// The copy's number, 1-based.
    pub copy: u32,
    /// The copy's seed ([`copy_seed`]), used for its jitter and both of its runs.
    pub seed: u64,
    /// What the configuration under test did on this copy.
    pub run: RunMetrics,
    /// What the exclusive baseline ([`baseline`]) did on this copy.
    pub baseline: RunMetrics,
    /// Broken simulator invariants of either run (empty for a correct run).
    pub violations: Vec<String>,
}

/// Mean, sample standard deviation, minimum and maximum of one metric over the copies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Arithmetic mean over the copies.
    pub mean: f64,
    /// Sample standard deviation over the copies (0 for one copy).
    pub sd: f64,
    /// Smallest value over the copies.
    pub min: f64,
    /// Largest value over the copies.
    pub max: f64,
}

/// Every metric's spread, for the configuration, the baseline, and the configuration against
/// the baseline (per copy, `run / baseline − 1`, in percent; OOMs and lost tasks as counts).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricSpreads {
    /// Spread of [`RunMetrics::makespan_h`].
    pub makespan_h: Spread,
    /// Spread of [`RunMetrics::jct_mean_min`].
    pub jct_mean_min: Spread,
    /// Spread of [`RunMetrics::energy_mj`] (MJ).
    pub energy_mj: Spread,
    /// Spread of [`RunMetrics::ooms`].
    pub ooms: Spread,
    /// Spread of [`RunMetrics::lost_tasks`].
    pub lost_tasks: Spread,
    /// Spread of [`RunMetrics::wait_1gpu_max_min`].
    pub wait_1gpu_max_min: Spread,
    /// Spread of [`RunMetrics::preemptions`].
    pub preemptions: Spread,
    /// Spread of [`RunMetrics::lost_gpu_h`].
    pub lost_gpu_h: Spread,
    /// Spread of [`RunMetrics::restart_gpu_h`].
    pub restart_gpu_h: Spread,
}

/// Relative differences against the baseline, percent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VersusBaseline {
    /// Per copy, the makespan's change against the baseline, percent.
    pub makespan_pct: Spread,
    /// Per copy, the mean completion time's change against the baseline, percent.
    pub jct_mean_pct: Spread,
    /// Per copy, the energy's change against the baseline, percent.
    pub energy_pct: Spread,
}

/// The whole evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CopiesSummary {
    /// Always [`COPIES_SCHEMA`].
    pub schema: &'static str,
    /// The trace's name, as the user gave it.
    pub trace: String,
    /// Rows in the trace (the same in every copy).
    pub tasks: u32,
    /// The simulated GPUs, as `COUNTxNAME`.
    pub gpus: String,
    /// Copies run ([`CopiesPlan::copies`]).
    pub copies: u32,
    /// The jitter, seconds ([`CopiesPlan::jitter_ms`]).
    pub jitter_s: f64,
    /// The evaluation's seed ([`CopiesPlan::seed`]).
    pub seed: u64,
    /// What the baseline is, in words.
    pub baseline: &'static str,
    /// Every copy's results, in copy order.
    pub runs: Vec<CopyResult>,
    /// Spreads of the configuration's runs.
    pub run: MetricSpreads,
    /// Spreads of the baseline's runs.
    pub exclusive: MetricSpreads,
    /// Spreads of the configuration against the baseline, per copy.
    pub versus_exclusive: VersusBaseline,
}

/// The seed of copy `copy` (1-based): SplitMix64 of the plan's seed and the copy number, cut
/// to 48 bits so that JSON readers hold it exactly.
pub fn copy_seed(seed: u64, copy: u32) -> u64 {
    let mut rng = Rng::new(seed ^ (u64::from(copy) << 32 | u64::from(copy)));
    rng.next_u64() & ((1 << 48) - 1)
}

/// The trace with every arrival moved by a uniform offset in ±`jitter_ms`, clamped at 0, in
/// arrival order.
pub fn jitter(trace: &[TraceRow], jitter_ms: u64, rng: &mut Rng) -> Vec<TraceRow> {
    let mut rows: Vec<TraceRow> = trace
        .iter()
        .map(|row| {
            let shift = (2.0 * rng.unit() - 1.0) * jitter_ms as f64;
            let offset = (row.offset_ms as f64 + shift).round().max(0.0) as u64;
            TraceRow { offset_ms: offset, workload: row.workload.clone(), user: row.user.clone() }
        })
        .collect();
    rows.sort_by_key(|r| r.offset_ms);
    rows
}

/// The baseline run of `options`: the paper-reproduction's exclusive row on the same trace,
/// GPUs, model, tick and seed.
pub fn baseline(options: &SimOptions) -> SimOptions {
    let mut baseline = options.clone();
    baseline.config.sched = SchedConfig {
        policy: Policy::Exclusive,
        exclusive_first: false,
        // Strict FIFO, as the paper's scheduler (carma's default is backfill).
        backfill: false,
        in_flight_grace_ms: 0,
        ..SchedConfig::default()
    };
    baseline.estimator = Estimator::None;
    baseline.mps_caps = false;
    baseline.placement_pause_ms = BASELINE_PAUSE_MS;
    baseline
}

/// Runs `options` and its baseline on `plan.copies` jittered copies of `options.trace`.
/// Scratch homes go under `scratch` and are removed; with `keep`, each run's journal is
/// copied there first as `run-K.redb` and `exclusive-K.redb`.
pub fn run_copies(
    options: &SimOptions,
    plan: CopiesPlan,
    trace_name: &str,
    scratch: &Path,
    keep: Option<&Path>,
) -> Result<CopiesSummary> {
    assert!(plan.copies >= 1 && plan.copies <= COPIES_MAX, "1..={COPIES_MAX} copies");
    let mut runs = Vec::with_capacity(plan.copies as usize);
    for copy in 1..=plan.copies {
        let seed = copy_seed(plan.seed, copy);
        let mut copy_options = options.clone();
        copy_options.trace = jitter(&options.trace, plan.jitter_ms, &mut Rng::new(seed));
        copy_options.seed = seed;
        let (run, mut violations) = run_one(&copy_options, scratch, keep, &format!("run-{copy}"))?;
        let (base, base_violations) =
            run_one(&baseline(&copy_options), scratch, keep, &format!("exclusive-{copy}"))?;
        violations.extend(base_violations.into_iter().map(|v| format!("exclusive: {v}")));
        runs.push(CopyResult { copy, seed, run, baseline: base, violations });
    }
    Ok(summarize(options, plan, trace_name, runs))
}

fn run_one(
    options: &SimOptions,
    scratch: &Path,
    keep: Option<&Path>,
    label: &str,
) -> Result<(RunMetrics, Vec<String>)> {
    let mut options = options.clone();
    // Root's own scratch (see `scratch`): exclusive, random, 0700; removed on drop.
    let dir = crate::scratch::ScratchDir::new_in(scratch, ".carma-sim")?;
    options.home_dir = dir.path().join(label);
    let outcome = (|| {
        let summary = simulate(&options)?;
        let report = crate::report::analyze(&summary.journal, label, false)?;
        if let Some(dir) = keep {
            let to = dir.join(format!("{label}.redb"));
            crate::scratch::copy_into_place(&summary.journal, &to)
                .map_err(|e| Error::io(format!("cannot copy the journal to {}", to.display()), e))?;
        }
        let metrics = RunMetrics {
            makespan_h: report.makespan_s.unwrap_or(0.0) / 3600.0,
            jct_mean_min: report.jct.mean_s.unwrap_or(0.0) / 60.0,
            energy_mj: report.energy_megajoules,
            ooms: report.oom_crashes,
            lost_tasks: report.tasks.saturating_sub(report.finished),
            wait_1gpu_max_min: wait_1gpu_max_min(&report),
            preemptions: report.preemption.preemptions,
            checkpoints: report.preemption.checkpoints,
            resumes: summary.checkpoints.resumes,
            lost_gpu_h: summary.checkpoints.lost_gpu_ms / 3_600_000.0,
            restart_gpu_h: summary.checkpoints.restart_gpu_ms / 3_600_000.0,
        };
        Ok((metrics, summary.violations))
    })();
    drop(dir);
    outcome
}

/// The longest first wait of a one-GPU task in the report, minutes (0 when none started).
fn wait_1gpu_max_min(report: &crate::report::Report) -> f64 {
    let waits = report.attempts.iter().filter(|a| a.attempt == 1 && a.gpus.len() == 1);
    waits.filter_map(|a| a.wait_s).fold(0.0, f64::max) / 60.0
}

fn summarize(options: &SimOptions, plan: CopiesPlan, trace: &str, runs: Vec<CopyResult>) -> CopiesSummary {
    let spreads = |pick: &dyn Fn(&CopyResult) -> &RunMetrics| MetricSpreads {
        makespan_h: spread(runs.iter().map(|r| pick(r).makespan_h)),
        jct_mean_min: spread(runs.iter().map(|r| pick(r).jct_mean_min)),
        energy_mj: spread(runs.iter().map(|r| pick(r).energy_mj)),
        ooms: spread(runs.iter().map(|r| pick(r).ooms as f64)),
        lost_tasks: spread(runs.iter().map(|r| pick(r).lost_tasks as f64)),
        wait_1gpu_max_min: spread(runs.iter().map(|r| pick(r).wait_1gpu_max_min)),
        preemptions: spread(runs.iter().map(|r| pick(r).preemptions as f64)),
        lost_gpu_h: spread(runs.iter().map(|r| pick(r).lost_gpu_h)),
        restart_gpu_h: spread(runs.iter().map(|r| pick(r).restart_gpu_h)),
    };
    let pct = |run: f64, base: f64| if base > 0.0 { (run / base - 1.0) * 100.0 } else { 0.0 };
    let versus = VersusBaseline {
        makespan_pct: spread(runs.iter().map(|r| pct(r.run.makespan_h, r.baseline.makespan_h))),
        jct_mean_pct: spread(runs.iter().map(|r| pct(r.run.jct_mean_min, r.baseline.jct_mean_min))),
        energy_pct: spread(runs.iter().map(|r| pct(r.run.energy_mj, r.baseline.energy_mj))),
    };
    CopiesSummary {
        schema: COPIES_SCHEMA,
        trace: trace.to_string(),
        tasks: options.trace.len() as u32,
        gpus: format!("{}x{}", options.gpus.count, options.gpus.name),
        copies: plan.copies,
        jitter_s: plan.jitter_ms as f64 / 1000.0,
        seed: plan.seed,
        baseline: "exclusive, strict FIFO, no memory figure, 60 s pause per placement",
        run: spreads(&|r| &r.run),
        exclusive: spreads(&|r| &r.baseline),
        versus_exclusive: versus,
        runs,
    }
}

/// Mean, sample standard deviation (0 for one value), minimum and maximum.
pub fn spread(values: impl Iterator<Item = f64>) -> Spread {
    let values: Vec<f64> = values.collect();
    assert!(!values.is_empty(), "a spread needs at least one value");
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sd = if values.len() > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Spread { mean, sd, min, max }
}

/// Where `carma simulate --copies` leaves journals, when asked to.
/// The directory must be one no other user can change (`scratch::trusted_dir`): the journals
/// are written into it by rename, and a link or another user's folder there is refused.
pub fn journal_dir(path: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(path)
        .map_err(|e| Error::io(format!("cannot create the journal directory {}", path.display()), e))?;
    crate::scratch::trusted_dir(path)?;
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace() -> Vec<TraceRow> {
        [(0, "a"), (30_000, "b"), (30_000, "c"), (600_000, "d")]
            .iter()
            .map(|(offset_ms, workload)| TraceRow {
                offset_ms: *offset_ms,
                workload: workload.to_string(),
                user: None,
            })
            .collect()
    }

    /// Goal: every arrival moves by at most the jitter, never below 0, the result is sorted
    /// and holds the same workloads, and the same seed gives the same copy.
    #[test]
    fn jitter_moves_each_arrival_within_bounds() {
        let rows = trace();
        let copy = jitter(&rows, 60_000, &mut Rng::new(copy_seed(1, 1)));
        assert_eq!(copy, jitter(&rows, 60_000, &mut Rng::new(copy_seed(1, 1))));
        assert_ne!(copy, jitter(&rows, 60_000, &mut Rng::new(copy_seed(1, 2))));
        assert!(copy.windows(2).all(|w| w[0].offset_ms <= w[1].offset_ms));
        let mut names: Vec<&str> = copy.iter().map(|r| r.workload.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["a", "b", "c", "d"]);
        for row in &copy {
            let original = rows.iter().find(|r| r.workload == row.workload).expect("same workloads");
            assert!(row.offset_ms.abs_diff(original.offset_ms) <= 60_000, "{row:?} from {original:?}");
        }
        assert_eq!(jitter(&rows, 0, &mut Rng::new(3)), rows, "no jitter, no change");
    }

    #[test]
    fn spread_is_mean_sd_min_max() {
        let s = spread([1.0, 2.0, 3.0, 6.0].into_iter());
        assert_eq!((s.mean, s.min, s.max), (3.0, 1.0, 6.0));
        assert!((s.sd - (14.0f64 / 3.0).sqrt()).abs() < 1e-12, "{}", s.sd);
        assert_eq!(spread([5.0].into_iter()).sd, 0.0);
    }

    /// Goal: the baseline is the exclusive row whatever the configuration asked.
    #[test]
    fn baseline_is_the_exclusive_row() {
        let profiles = crate::sim::parse_profiles("p", crate::bench::BUILTIN_PROFILES).expect("profiles");
        let mut options = SimOptions {
            trace: Vec::new(),
            profiles,
            gpus: crate::sim::GpuSet::parse("2xA100-40GB").expect("gpus"),
            config: crate::config::Config::default(),
            estimator: Estimator::GpuMemNetPaper,
            params: crate::sim::ModelParams::default(),
            tick_ms: 5000,
            seed: 9,
            faults: crate::sim::FaultPlan::default(),
            mps_caps: true,
            placement_pause_ms: 0,
            max_retries: 10,
            time_limits: crate::sim::TimeLimits::default(),
            home_dir: PathBuf::from("/nonexistent"),
            reservations: Vec::new(),
        };
        options.config.sched.backfill = true;
        let base = baseline(&options);
        assert_eq!(base.config.sched.policy, Policy::Exclusive);
        assert!(!base.config.sched.exclusive_first && !base.config.sched.backfill);
        assert_eq!(
            (base.estimator, base.mps_caps, base.placement_pause_ms),
            (Estimator::None, false, 60_000)
        );
        assert_eq!(base.seed, options.seed);
    }
}
