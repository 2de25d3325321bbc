//! `carma bench faults`: many seeded simulations of a small synthetic trace under tick
//! crashes, lost exit records and reboots, counting the invariant violations by kind.
//!
//! Each seed generates its own trace (the trace generator's arrivals and class mix, from the
//! built-in profiles) and drives the real tick through `sim::simulate`, whose fault plan and
//! task ids come from the same seed, so `--seeds 1 --first-seed SEED` replays a failing run
//! exactly (see [`FaultsBench::replay`]), and [`seed_options`] makes it a regression test. The runs are independent: `jobs` threads
//! take seeds from a shared counter, each with its scratch state directory in memory.
//!
//! **Time-compressed profiles.** Faults strike per tick, and with faults the simulator cannot
//! jump over quiet stretches, so a run costs about one tick per 5 virtual seconds. The
//! profiles' run times are divided by [`TIME_COMPRESSION`] (a 12-minute job runs 72 virtual
//! seconds after its 40 s start-up, still a dozen ticks of start-up, memory ramp and run), so
//! that 10,000 seeds take minutes; memory, classes and GPU counts are unchanged.
//!
//! **Kinds.** `sim::faults::check_invariants` returns sentences; [`classify`] sorts them into
//! double launch, lost task, unrecovered OOM and other, and [`starvation`] adds the tasks
//! that fit an empty machine but were still waiting when the run stopped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::sim::BUILTIN_PROFILES;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::home::Home;
use crate::sched::Policy;
use crate::session;
use crate::sim::tracegen::{self, TraceGen};
use crate::sim::{
    self, Estimator, FaultCounts, FaultPlan, GpuSet, ModelParams, Profile, SimOptions, SimSummary,
};

/// Run times of the built-in profiles are divided by this (see the module docs).
pub(super) const TIME_COMPRESSION: u64 = 10;
/// The simulated machine.
pub(super) const FAULTS_GPUS: &str = "2xA100-40GB";
/// Mean gap between submissions: short, so a queue builds and jobs share GPUs.
pub(super) const FAULTS_MEAN_GAP_S: f64 = 30.0;
/// Light, medium and heavy weights of the generated traces.
pub(super) const FAULTS_MIX: [f64; 3] = [5.0, 3.0, 2.0];
/// Relaunches allowed per task: generous, so a task is never failed for its retries alone.
pub(super) const FAULTS_MAX_RETRIES: u32 = 20;

/// What to run.
#[derive(Debug, Clone)]
pub struct FaultsBenchOptions {
    /// Seeds to run, one simulation each.
    pub seeds: u64,
    /// The first seed; the runs are `first_seed..first_seed + seeds`.
    pub first_seed: u64,
    /// Threads running seeds at once (0 counts as 1).
    pub jobs: usize,
    /// Tasks in each seed's generated trace.
    pub tasks: u32,
    /// Per-tick probabilities of the injected faults, the same for every seed.
    pub faults: FaultPlan,
    /// Where the scratch state directories go (one per run, removed after it).
    pub scratch: PathBuf,
}

/// Runs with at least one violation of a kind, and the violations in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct KindCount {
    /// Runs with at least one violation of this kind.
    pub runs: u64,
    /// Violations of this kind over all runs.
    pub violations: u64,
}

/// Violations by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Violations {
    /// An attempt launched while another attempt of its task ran, or launched twice.
    pub double_launch: KindCount,
    /// A task missing from the journal, or left placed or running at the end.
    pub lost_task: KindCount,
    /// An out-of-memory crash neither relaunched nor finally recorded, or a relaunch after a
    /// memory stop given less than the stopped attempt used.
    pub unrecovered_oom: KindCount,
    /// A task that fits an empty machine but was still pending when the run stopped.
    pub starvation: KindCount,
    /// Any other broken invariant.
    pub other: KindCount,
}

/// One failing run: its seed and what broke.
#[derive(Debug, Clone, Serialize)]
pub struct FailingRun {
    /// The run's seed ([`FaultsBench::replay`] gives the command that replays it).
    pub seed: u64,
    /// What broke, one sentence each (or the error that stopped the run).
    pub violations: Vec<String>,
}

/// What the runs did.
#[derive(Debug, Clone, Serialize)]
pub struct FaultsBench {
    /// Seeds run ([`FaultsBenchOptions::seeds`]).
    pub seeds: u64,
    /// The first seed run.
    pub first_seed: u64,
    /// Threads that ran seeds.
    pub jobs: usize,
    /// Tasks in each seed's trace.
    pub tasks: u32,
    /// The simulated machine, as `COUNTxNAME`.
    pub gpus: &'static str,
    /// The placement policy every run used.
    pub policy: &'static str,
    /// The memory figure tasks declared (`none`: the tick learns memory from crashes).
    pub estimator: &'static str,
    /// Mean time between two submissions of a generated trace, virtual s.
    pub mean_gap_s: f64,
    /// Divisor of the built-in profiles' run times (see the module docs).
    pub time_compression: u64,
    /// Per-tick probabilities of the injected faults.
    pub faults: FaultRates,
    /// Real time all runs took together, s.
    pub wall_s: f64,
    /// Wall time of one run, mean over the runs (each on one thread).
    pub run_mean_ms: f64,
    /// Ticks per run, mean over the runs that ran.
    pub ticks_mean: f64,
    /// Faults actually injected, over all runs.
    pub injected: Injected,
    /// What the tick journaled recovering, over all runs.
    pub recovered: Recovered,
    /// Runs that ended at their virtual-time bound or stalled with work left.
    pub bounded_runs: u64,
    /// Runs with at least one violation.
    pub runs_with_violations: u64,
    /// Violations by kind, over all runs.
    pub violations: Violations,
    /// Every failing seed, ascending, with its violations (the first 10 of each run).
    pub failing: Vec<FailingRun>,
    /// Runs that could not run at all (an error, not a violation), with the error.
    pub errors: Vec<FailingRun>,
}

/// The fault probabilities the runs used, per tick.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FaultRates {
    /// Probability per tick that the tick dies mid-way.
    pub crash: f64,
    /// Probability per tick that an ended job loses its exit record.
    pub lost_exit: f64,
    /// Probability per tick that the machine reboots.
    pub reboot: f64,
}

/// Faults injected, by kind.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Injected {
    /// Ticks made to die mid-way.
    pub crashes: u64,
    /// Exit records lost.
    pub lost_exits: u64,
    /// Reboots of the machine.
    pub reboots: u64,
}

/// What the tick journaled recovering from the faults and from memory-blind placement.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Recovered {
    /// `OomDetected` records: attempts that ran out of memory.
    pub oom_crashes: u64,
    /// `Lost` records: attempts whose supervisor vanished (a reboot, a lost exit record).
    pub lost_attempts: u64,
    /// Attempts stopped over their share (`MemoryExceeded`): since issue 40 the bench's
    /// tasks, which have no memory figure, mostly meet their memory this way, not by crashing.
    pub memory_stops: u64,
    /// Of those, the ones whose task was placed again (the relaunch rule; the rest used up
    /// their retries or had exited 0 before the stop reached them). One placed with less than
    /// the stopped attempt used is a violation (`unrecovered_oom`), not counted apart here.
    pub memory_relaunches: u64,
}

impl FaultsBench {
    /// The command line that replays `seed`'s run alone.
    pub fn replay(&self, seed: u64) -> String {
        format!(
            "carma bench faults --seeds 1 --first-seed {seed} --tasks {} --faults crash:{},lost-exit:{},reboot:{}",
            self.tasks, self.faults.crash, self.faults.lost_exit, self.faults.reboot
        )
    }
}

/// Runs the seeds and counts. `progress` hears, after each run, how many have finished and how
/// many of those broke an invariant (or could not run).
pub fn faults(options: &FaultsBenchOptions, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<FaultsBench> {
    let profiles = compressed_profiles()?;
    std::fs::create_dir_all(&options.scratch)
        .map_err(|e| Error::io(format!("cannot create {}", options.scratch.display()), e))?;
    let started = Instant::now();
    let next = AtomicU64::new(options.first_seed);
    let failing = AtomicU64::new(0);
    let end = options.first_seed.saturating_add(options.seeds);
    let results: Mutex<Vec<(u64, Result<RunOutcome>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..options.jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end {
                        return;
                    }
                    let outcome = run_seed(options, &profiles, seed);
                    let bad = u64::from(!outcome.as_ref().is_ok_and(|run| run.violations.is_empty()));
                    let failed = failing.fetch_add(bad, Ordering::Relaxed) + bad;
                    let done = {
                        let mut results = results.lock().expect("no worker panics holding the lock");
                        results.push((seed, outcome));
                        results.len() as u64
                    };
                    progress(done, failed);
                }
            });
        }
    });
    let mut results = results.into_inner().expect("no worker panicked holding the lock");
    results.sort_by_key(|(seed, _)| *seed);
    Ok(tally(options, results, started.elapsed().as_secs_f64()))
}

/// One run's result, reduced to what the tally needs.
struct RunOutcome {
    violations: Vec<String>,
    kinds: Violations,
    bounded: bool,
    ticks: u64,
    faults: FaultCounts,
    /// OOM crashes and lost attempts the tick journaled: what the faults made it recover from.
    ooms: u64,
    lost: u64,
    /// Memory stops and, of them, relaunches ([`Recovered`]).
    stops: u64,
    relaunches: u64,
    wall_ms: f64,
}

fn run_seed(
    options: &FaultsBenchOptions,
    profiles: &BTreeMap<String, Profile>,
    seed: u64,
) -> Result<RunOutcome> {
    let home_dir = options.scratch.join(format!("seed-{seed}"));
    let sim_options = seed_options(options, profiles, seed, home_dir.clone())?;
    let summary = sim::simulate(&sim_options);
    let recovered = summary.as_ref().ok().map(|_| {
        session::read(&Home::at(&home_dir), Duration::from_secs(10), |_, state| {
            let ooms = state.tasks.values().map(|t| u64::from(t.oom_count)).sum();
            let lost = state.tasks.values().map(|t| u64::from(t.lost_count)).sum();
            let (mut stops, mut relaunches) = (0, 0);
            for task in state.tasks.values() {
                let last = task.attempts.iter().map(|a| a.number).max().unwrap_or(0);
                for attempt in task.attempts.iter().filter(|a| a.memory_exceeded.is_some()) {
                    stops += 1;
                    relaunches += u64::from(attempt.number < last);
                }
            }
            Ok([ooms, lost, stops, relaunches])
        })
    });
    let _ = std::fs::remove_dir_all(&home_dir);
    let summary = summary?;
    let [ooms, lost, stops, relaunches] = recovered.transpose()?.unwrap_or_default();
    let kinds = classify(&summary);
    Ok(RunOutcome {
        violations: summary.violations.clone(),
        kinds,
        bounded: summary.bounded,
        ticks: summary.ticks,
        faults: summary.faults,
        ooms,
        lost,
        stops,
        relaunches,
        wall_ms: summary.wall.as_secs_f64() * 1e3,
    })
}

/// The simulation of `seed`: its own trace, its own faults.
pub(super) fn seed_options(
    options: &FaultsBenchOptions,
    profiles: &BTreeMap<String, Profile>,
    seed: u64,
    home_dir: PathBuf,
) -> Result<SimOptions> {
    let generate = TraceGen {
        tasks: options.tasks,
        mean_gap_s: FAULTS_MEAN_GAP_S,
        mix: FAULTS_MIX,
        seed,
        users: Vec::new(),
    };
    let trace = tracegen::generate(profiles, &generate).map_err(Error::BadInput)?;
    let mut config = Config::default();
    config.sched.policy = Policy::Magm;
    Ok(SimOptions {
        trace,
        profiles: profiles.clone(),
        gpus: GpuSet::parse(FAULTS_GPUS).map_err(Error::BadInput)?,
        config,
        estimator: Estimator::None,
        params: ModelParams::default(),
        tick_ms: 5000,
        seed,
        faults: options.faults,
        mps_caps: true,
        placement_pause_ms: 0,
        max_retries: FAULTS_MAX_RETRIES,
        home_dir,
        reservations: Vec::new(),
        time_limits: crate::sim::TimeLimits::default(),
    })
}

/// The built-in profiles with their run times divided by [`TIME_COMPRESSION`].
pub(super) fn compressed_profiles() -> Result<BTreeMap<String, Profile>> {
    let mut profiles = sim::parse_profiles("built-in", BUILTIN_PROFILES).map_err(Error::BadInput)?;
    for profile in profiles.values_mut() {
        profile.exclusive_ms = (profile.exclusive_ms / TIME_COMPRESSION).max(1);
    }
    Ok(profiles)
}

/// Sorts a run's violations into kinds. A task still waiting or running when the run stopped
/// is counted by [`starvation`], not here.
pub(super) fn classify(summary: &SimSummary) -> Violations {
    let mut kinds = Violations::default();
    let starved = starvation(summary);
    for violation in &summary.violations {
        let kind =
            if violation.contains("launched while another runs") || violation.contains("recorded Launched") {
                &mut kinds.double_launch
            } else if violation.contains("never in the journal") || violation.contains(" at the end") {
                if starved.iter().any(|s| s == violation) {
                    continue;
                }
                &mut kinds.lost_task
            } else if violation.contains("OOM") || violation.contains("memory stop") {
                &mut kinds.unrecovered_oom
            } else {
                &mut kinds.other
            };
        kind.violations += 1;
        kind.runs = 1;
    }
    kinds.starvation = KindCount { runs: u64::from(!starved.is_empty()), violations: starved.len() as u64 };
    kinds
}

/// The tasks that fit an empty machine but never ran: in a run that stopped with work left
/// (`bounded`), every task still `Pending` at the end (every built-in profile fits the
/// simulated machine). A task still `Placed` or `Running` is a lost task instead: the tick
/// lost track of an attempt. This is the one place to point at a liveness invariant in
/// `sim::faults` once there is one.
pub(super) fn starvation(summary: &SimSummary) -> Vec<String> {
    if !summary.bounded {
        return Vec::new();
    }
    summary.violations.iter().filter(|v| v.ends_with("still Pending at the end")).cloned().collect()
}

fn tally(options: &FaultsBenchOptions, results: Vec<(u64, Result<RunOutcome>)>, wall_s: f64) -> FaultsBench {
    let mut bench = FaultsBench {
        seeds: options.seeds,
        first_seed: options.first_seed,
        jobs: options.jobs.max(1),
        tasks: options.tasks,
        gpus: FAULTS_GPUS,
        policy: Policy::Magm.name(),
        estimator: "none",
        mean_gap_s: FAULTS_MEAN_GAP_S,
        time_compression: TIME_COMPRESSION,
        faults: FaultRates {
            crash: options.faults.crash,
            lost_exit: options.faults.lost_exit,
            reboot: options.faults.reboot,
        },
        wall_s,
        run_mean_ms: 0.0,
        ticks_mean: 0.0,
        injected: Injected::default(),
        recovered: Recovered::default(),
        bounded_runs: 0,
        runs_with_violations: 0,
        violations: Violations::default(),
        failing: Vec::new(),
        errors: Vec::new(),
    };
    let (mut runs, mut wall_ms, mut ticks) = (0u64, 0.0, 0u64);
    for (seed, result) in results {
        let run = match result {
            Ok(run) => run,
            Err(e) => {
                bench.errors.push(FailingRun { seed, violations: vec![e.to_string()] });
                continue;
            }
        };
        runs += 1;
        wall_ms += run.wall_ms;
        ticks += run.ticks;
        bench.injected.crashes += u64::from(run.faults.crashes);
        bench.injected.lost_exits += u64::from(run.faults.lost_exits);
        bench.injected.reboots += u64::from(run.faults.reboots);
        bench.recovered.oom_crashes += run.ooms;
        bench.recovered.lost_attempts += run.lost;
        bench.recovered.memory_stops += run.stops;
        bench.recovered.memory_relaunches += run.relaunches;
        bench.bounded_runs += u64::from(run.bounded);
        add(&mut bench.violations, &run.kinds);
        if !run.violations.is_empty() {
            bench.runs_with_violations += 1;
            bench
                .failing
                .push(FailingRun { seed, violations: run.violations.into_iter().take(10).collect() });
        }
    }
    bench.run_mean_ms = wall_ms / runs.max(1) as f64;
    bench.ticks_mean = ticks as f64 / runs.max(1) as f64;
    bench
}

fn add(total: &mut Violations, run: &Violations) {
    for (t, r) in [
        (&mut total.double_launch, run.double_launch),
        (&mut total.lost_task, run.lost_task),
        (&mut total.unrecovered_oom, run.unrecovered_oom),
        (&mut total.starvation, run.starvation),
        (&mut total.other, run.other),
    ] {
        t.runs += r.runs;
        t.violations += r.violations;
    }
}

/// The scratch directory for the runs' state directories, in `/dev/shm` when present: root's
/// own (exclusive, random name, 0700; see `scratch`), removed when dropped.
pub fn faults_scratch(dir: Option<&Path>) -> Result<crate::scratch::ScratchDir> {
    let base = dir.map(Path::to_path_buf).unwrap_or_else(|| {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
    });
    crate::scratch::ScratchDir::new_in(&base, "carma-bench-faults")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(bounded: bool, violations: &[&str]) -> SimSummary {
        SimSummary {
            tasks: 3,
            ticks: 1,
            start_ms: 0,
            end_ms: 0,
            faults: FaultCounts::default(),
            refused_launches: 0,
            violations: violations.iter().map(|v| v.to_string()).collect(),
            bounded,
            wall: std::time::Duration::ZERO,
            journal: PathBuf::new(),
            checkpoints: crate::sim::resume::CheckpointTotals::default(),
        }
    }

    /// Goal: each sentence `check_invariants` and the model write lands in its kind, and a
    /// waiting task counts as starvation only when the run stopped with work left.
    #[test]
    fn violations_are_sorted_into_kinds() {
        let kinds = classify(&summary(
            true,
            &[
                "task a: attempt 1 launched while another runs",
                "task a: attempt 1 recorded Launched 2 times",
                "task b: submitted but never in the journal",
                "task c: still Running at the end",
                "task d: still Pending at the end",
                "task e: OOM of attempt 2 neither relaunched nor recorded failed",
                "task e: attempt 3 placed with no figure after the memory stop of attempt 2 at 7000 MiB",
                "task f: failed without a reason",
            ],
        ));
        assert_eq!(kinds.double_launch, KindCount { runs: 1, violations: 2 });
        assert_eq!(kinds.lost_task, KindCount { runs: 1, violations: 2 });
        assert_eq!(kinds.starvation, KindCount { runs: 1, violations: 1 });
        assert_eq!(kinds.unrecovered_oom, KindCount { runs: 1, violations: 2 });
        assert_eq!(kinds.other, KindCount { runs: 1, violations: 1 });
        let unbounded = classify(&summary(false, &["task d: still Pending at the end"]));
        assert_eq!(unbounded.starvation, KindCount::default());
        assert_eq!(unbounded.lost_task, KindCount { runs: 1, violations: 1 });
    }

    /// Goal: a short seeded run is deterministic and, with faults, sound (a smoke test; the
    /// figures come from `carma bench faults`).
    #[test]
    fn a_few_seeds_run_and_agree_with_themselves() {
        let scratch = faults_scratch(None).expect("scratch");
        let options = FaultsBenchOptions {
            seeds: 2,
            first_seed: 1,
            jobs: 2,
            tasks: 4,
            faults: FaultPlan { crash: 0.05, lost_exit: 0.05, reboot: 0.01 },
            scratch: scratch.path().to_path_buf(),
        };
        let first = faults(&options, &|_, _| ()).expect("runs");
        let again = faults(&options, &|_, _| ()).expect("runs again");
        drop(scratch);
        assert!(first.errors.is_empty(), "{:?}", first.errors);
        assert_eq!(first.violations, Violations::default(), "{:?}", first.failing);
        assert_eq!((first.injected.crashes, first.ticks_mean), (again.injected.crashes, again.ticks_mean));
    }
}
