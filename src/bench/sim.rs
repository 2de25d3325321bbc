//! `carma bench sim`: how fast the simulator and the report are.
//!
//! Three measurements: (a) each reference trace simulated in a child process (`carma bench
//! sim-child`), its wall time and peak RSS (VmHWM), when the reference traces are present;
//! (b) a synthetic trace (the trace generator's Philly-like arrivals) on 16 simulated GPUs,
//! with the tick's own measured cost (`TickCompleted.duration_us`: sampling, ingest,
//! reconcile, decision and launches, the last commit excluded) bucketed by the number of
//! tasks waiting after that tick. The simulator hands the State from one tick to the next,
//! so that cost leaves out the State load a `carma tick` process pays first; the cold load of
//! the final journal is timed separately; (c) `carma report` on a journal of a million events shaped
//! like a busy server (the journal benchmark's fill).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::home::Home;
use crate::journal::{Journal, State, Status};
use crate::sim::tracegen::{self, TraceGen};
use crate::sim::{self, Estimator, FaultPlan, GpuSet, ModelParams, Profile, SimOptions};

/// Profiles used when the reference profiles are absent: one workload per class and size.
pub const BUILTIN_PROFILES: &str = include_str!("../../traces/demo-profiles.csv");

/// The simulated GPUs of the synthetic measurement.
pub(super) const SYNTHETIC_GPUS: &str = "16xA100-40GB";

/// One reference trace.
#[derive(Debug, Serialize)]
pub struct ReferenceRow {
    /// The trace's file name (`philly_*.csv` in the shared folder).
    pub trace: String,
    /// Rows in the trace.
    pub tasks: usize,
    /// Child processes that simulated it.
    pub runs: u32,
    /// Median wall time of one simulation of it, s.
    pub wall_s: f64,
    /// Median peak RSS of those children, MiB; `None` when no child reported one.
    pub peak_rss_mib: Option<f64>,
}

/// Ticks whose waiting queue (after the tick) was in `[waiting_min, waiting_max]`.
#[derive(Debug, Serialize)]
pub struct TickBucket {
    /// Smallest waiting-queue length in the bucket (buckets are 0, 1-9, 10-99, …).
    pub waiting_min: u64,
    /// Largest waiting-queue length in the bucket.
    pub waiting_max: u64,
    /// Ticks that fell in the bucket.
    pub ticks: u64,
    /// Median duration of those ticks, as their TickCompleted records say, µs.
    pub median_us: f64,
    /// 95th percentile of those ticks' durations, µs.
    pub p95_us: f64,
}

/// The synthetic trace's simulation.
#[derive(Debug, Serialize)]
pub struct SyntheticBench {
    /// Tasks in the generated trace.
    pub tasks: u32,
    /// The simulated machine, as `COUNTxNAME`.
    pub gpus: String,
    /// Mean time between two submissions of the trace, virtual s.
    pub mean_gap_s: f64,
    /// Where the workload profiles came from: a file's path or `built-in`.
    pub profiles: String,
    /// Real time the simulation took, s.
    pub wall_s: f64,
    /// Ticks the simulation ran.
    pub ticks: u64,
    /// Virtual time the simulation covered, hours.
    pub virtual_h: f64,
    /// Records in its journal.
    pub events: u64,
    /// Size of its journal file, MiB.
    pub journal_mib: f64,
    /// Longest waiting queue after any tick.
    pub waiting_max: u64,
    /// Tick durations by waiting-queue length.
    pub buckets: Vec<TickBucket>,
    /// This process's peak RSS after the simulation (VmHWM; the reference traces ran in
    /// children and the report benchmark comes later).
    pub peak_rss_mib: Option<f64>,
    /// One `load_state` of the final journal (snapshot + tail, median of 3): what a
    /// `carma tick` process pays before deciding, at that journal's size.
    pub cold_load_ms: f64,
}

/// `carma report` on a large journal.
#[derive(Debug, Serialize)]
pub struct ReportBench {
    /// Records in the journal `carma report` read.
    pub events: u64,
    /// Size of that journal file, MiB.
    pub journal_mib: f64,
    /// Times the report was computed.
    pub runs: u32,
    /// Median time of one `report::analyze`, ms.
    pub median_ms: f64,
}

/// Results of `carma bench sim`.
#[derive(Debug, Serialize)]
pub struct SimBench {
    /// One row per reference trace; empty when skipped.
    pub reference: Vec<ReferenceRow>,
    /// Why the reference traces were not simulated, when they were not.
    pub reference_skipped: Option<String>,
    /// The synthetic trace's simulation.
    pub synthetic: SyntheticBench,
    /// `carma report` on a large journal.
    pub report: ReportBench,
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct SimBenchOptions {
    /// The folder holding the reference traces and `workload_profiles.csv`.
    pub shared: PathBuf,
    /// Tasks in the synthetic trace.
    pub tasks: u32,
    /// Mean time between two submissions of the synthetic trace, s.
    pub mean_gap_s: f64,
    /// Records in the journal the report benchmark reads.
    pub report_events: u64,
    /// Repetitions of each reference trace and of the report (0 counts as 1).
    pub runs: u32,
    /// Where the scratch state directories go (removed after each measurement).
    pub scratch: PathBuf,
    /// The carma binary for the child processes (none: the reference traces are skipped).
    pub exe: Option<PathBuf>,
}

/// Runs the three measurements under `options.scratch`.
pub fn sim(options: &SimBenchOptions) -> Result<SimBench> {
    let runs = options.runs.max(1);
    let (reference, reference_skipped) = reference_traces(options, runs)?;
    let synthetic = synthetic(options)?;
    let report = report(options, runs)?;
    Ok(SimBench { reference, reference_skipped, synthetic, report })
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(format!("cannot read {}", path.display()), e))
}

fn reference_traces(options: &SimBenchOptions, runs: u32) -> Result<(Vec<ReferenceRow>, Option<String>)> {
    let profiles = options.shared.join("workload_profiles.csv");
    if !profiles.is_file() {
        return Ok((Vec::new(), Some(format!("{} not found", profiles.display()))));
    }
    let Some(exe) = &options.exe else { return Ok((Vec::new(), Some("no carma binary to run".into()))) };
    let mut traces: Vec<PathBuf> = std::fs::read_dir(&options.shared)
        .map_err(|e| Error::io(format!("cannot list {}", options.shared.display()), e))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "csv")
                && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("philly_"))
        })
        .collect();
    traces.sort();
    let mut rows = Vec::new();
    for trace in traces {
        let tasks = read(&trace)?.lines().skip(1).filter(|l| !l.trim().is_empty()).count();
        let mut walls = Vec::new();
        let mut rss = Vec::new();
        for _ in 0..runs {
            let (wall, peak) = sim_child(exe, &trace, &profiles, &options.scratch)?;
            walls.push(wall);
            rss.extend(peak);
        }
        rows.push(ReferenceRow {
            trace: trace.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned()),
            tasks,
            runs,
            wall_s: median(&mut walls),
            peak_rss_mib: (!rss.is_empty()).then(|| median(&mut rss)),
        });
    }
    Ok((rows, None))
}

fn sim_child(exe: &Path, trace: &Path, profiles: &Path, scratch: &Path) -> Result<(f64, Option<f64>)> {
    let out = std::process::Command::new(exe)
        .args(["bench", "sim-child"])
        .args([trace, profiles, scratch])
        .output()
        .map_err(|e| Error::io(format!("cannot run {} bench sim-child", exe.display()), e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.split_whitespace().map(str::parse::<f64>);
    match (out.status.success(), fields.next()) {
        (true, Some(Ok(wall))) => Ok((wall, fields.next().and_then(|r| r.ok()).filter(|r| r.is_finite()))),
        _ => Err(Error::io(
            format!("simulating {} in a child process failed", trace.display()),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        )),
    }
}

/// The body of `carma bench sim-child`: simulates `trace` the way `carma simulate` does with
/// its defaults (4xA100-40GB, oracle, 5 s ticks, seed 0) in a scratch home under `scratch`,
/// removes it, and returns the wall seconds.
pub fn sim_child_run(trace: &Path, profiles: &Path, scratch: &Path) -> Result<f64> {
    let profiles_map =
        sim::parse_profiles(&profiles.display().to_string(), &read(profiles)?).map_err(Error::BadInput)?;
    let rows = sim::parse_trace(&trace.display().to_string(), &read(trace)?, &profiles_map)
        .map_err(Error::BadInput)?;
    let home_dir = scratch.join(format!("carma-bench-sim-child-{}", std::process::id()));
    let options = sim_options(rows, profiles_map, "4xA100-40GB", home_dir.clone())?;
    let summary = sim::simulate(&options);
    let _ = std::fs::remove_dir_all(&home_dir);
    Ok(summary?.wall.as_secs_f64())
}

fn sim_options(
    trace: Vec<sim::TraceRow>,
    profiles: BTreeMap<String, Profile>,
    gpus: &str,
    home_dir: PathBuf,
) -> Result<SimOptions> {
    Ok(SimOptions {
        trace,
        profiles,
        gpus: GpuSet::parse(gpus).map_err(Error::BadInput)?,
        config: Config::default(),
        estimator: Estimator::Oracle,
        params: ModelParams::default(),
        tick_ms: 5000,
        seed: 0,
        faults: FaultPlan::default(),
        mps_caps: true,
        placement_pause_ms: 0,
        max_retries: 10,
        time_limits: sim::TimeLimits::default(),
        home_dir,
        reservations: Vec::new(),
    })
}

fn synthetic(options: &SimBenchOptions) -> Result<SyntheticBench> {
    let shared_profiles = options.shared.join("workload_profiles.csv");
    let (origin, text) = if shared_profiles.is_file() {
        (shared_profiles.display().to_string(), read(&shared_profiles)?)
    } else {
        ("built-in".to_string(), BUILTIN_PROFILES.to_string())
    };
    let profiles = sim::parse_profiles(&origin, &text).map_err(Error::BadInput)?;
    let generate = TraceGen {
        tasks: options.tasks,
        mean_gap_s: options.mean_gap_s,
        mix: [56.0, 26.0, 8.0],
        seed: 0,
        users: vec![],
    };
    let trace = tracegen::generate(&profiles, &generate).map_err(Error::BadInput)?;
    let home_dir = options.scratch.join(format!("carma-bench-sim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home_dir);
    let sim_options = sim_options(trace, profiles, SYNTHETIC_GPUS, home_dir.clone())?;
    let summary = sim::simulate(&sim_options);
    let peak_rss_mib = super::journal::peak_rss_mib();
    let measured = summary.and_then(|summary| {
        let (samples, events) = tick_costs(&Home::at(&home_dir))?;
        let journal_bytes = std::fs::metadata(&summary.journal).map(|m| m.len()).unwrap_or(0);
        let cold_load_ms = cold_load_ms(&summary.journal)?;
        Ok((summary, samples, events, journal_bytes, cold_load_ms))
    });
    let _ = std::fs::remove_dir_all(&home_dir);
    let (summary, samples, events, journal_bytes, cold_load_ms) = measured?;
    let waiting_max = samples.iter().map(|(w, _)| *w).max().unwrap_or(0);
    Ok(SyntheticBench {
        tasks: options.tasks,
        gpus: SYNTHETIC_GPUS.into(),
        mean_gap_s: options.mean_gap_s,
        profiles: origin,
        wall_s: summary.wall.as_secs_f64(),
        ticks: summary.ticks,
        virtual_h: (summary.end_ms - summary.start_ms) as f64 / 3_600_000.0,
        events,
        journal_mib: journal_bytes as f64 / (1024.0 * 1024.0),
        waiting_max,
        buckets: buckets(samples),
        peak_rss_mib,
        cold_load_ms,
    })
}

fn cold_load_ms(journal: &Path) -> Result<f64> {
    let mut times = Vec::new();
    for _ in 0..3 {
        let mut journal = Journal::open(journal)?;
        let started = Instant::now();
        let state = journal.load_state()?;
        times.push(started.elapsed().as_secs_f64() * 1e3);
        drop(state);
    }
    Ok(median(&mut times))
}

/// (tasks waiting after the tick, the tick's duration µs) for every completed tick, and the
/// number of events, from one pass over the journal.
fn tick_costs(home: &Home) -> Result<(Vec<(u64, u64)>, u64)> {
    let journal = Journal::open(&home.journal_path())?;
    let mut state = State::default();
    let mut waiting: u64 = 0;
    let mut samples = Vec::new();
    let mut events = 0;
    journal.for_each(1, |seq, record| {
        events += 1;
        let task = record.event.task().cloned();
        let before = task.as_ref().and_then(|t| state.tasks.get(t)).map(|t| t.status());
        state.apply(seq, &record);
        let after = task.as_ref().and_then(|t| state.tasks.get(t)).map(|t| t.status());
        let pending = |s: Option<Status>| u64::from(s == Some(Status::Pending));
        waiting = (waiting + pending(after)).saturating_sub(pending(before));
        if let crate::journal::Event::TickCompleted { duration_us, .. } = record.event {
            samples.push((waiting, duration_us));
        }
        Ok(true)
    })?;
    Ok((samples, events))
}

/// Buckets 0, 1-9, 10-99, 100-999, ... with the median and p95 of each.
fn buckets(samples: Vec<(u64, u64)>) -> Vec<TickBucket> {
    let mut by_bucket: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for (waiting, us) in samples {
        let decade = if waiting == 0 { 0 } else { waiting.ilog10() + 1 };
        by_bucket.entry(decade).or_default().push(us as f64);
    }
    by_bucket
        .into_iter()
        .map(|(decade, mut values)| {
            let (min, max) = match decade {
                0 => (0, 0),
                d => (10u64.pow(d - 1), 10u64.pow(d) - 1),
            };
            values.sort_by(f64::total_cmp);
            let p95 = values[(values.len() * 95 / 100).min(values.len() - 1)];
            TickBucket {
                waiting_min: min,
                waiting_max: max,
                ticks: values.len() as u64,
                median_us: values[values.len() / 2],
                p95_us: p95,
            }
        })
        .collect()
}

fn report(options: &SimBenchOptions, runs: u32) -> Result<ReportBench> {
    let root = options.scratch.join(format!("carma-bench-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let home = Home::at(&root);
    let measured = (|| {
        crate::session::init(&home, crate::config::DEFAULT_CONFIG_TOML)?;
        super::journal::fill(&home, options.report_events)?;
        let journal_bytes = std::fs::metadata(home.journal_path()).map(|m| m.len()).unwrap_or(0);
        let mut times = Vec::new();
        let mut events = 0;
        for _ in 0..runs {
            let started = Instant::now();
            let report = crate::report::analyze(&home.journal_path(), "bench", false)?;
            times.push(started.elapsed().as_secs_f64() * 1e3);
            events = report.events;
        }
        Ok(ReportBench {
            events,
            journal_mib: journal_bytes as f64 / (1024.0 * 1024.0),
            runs,
            median_ms: median(&mut times),
        })
    })();
    let _ = std::fs::remove_dir_all(&root);
    measured
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}
