//! The simulation loop: submit the trace through the real spool, advance the model, run the
//! real `tick::run` on the virtual clock, and jump over stretches where nothing can change.
//!
//! **Jumping ahead.** Between changes of the simulated machine (a job starts computing,
//! reaches its peak memory, ends) and arrivals, every sample is identical, so once the SM
//! window and the memory-in-flight grace have passed since the last change, every further tick
//! would take the same decision. The loop then skips to one window (plus a tick) before the
//! next arrival or model change, staying on the tick grid, so the window is full of samples
//! again when the change comes. Energy and progress are integrated by the model, not by the
//! ticks, so jumping changes no result, only the number of MetricSamples.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::edges::{SimGpus, SimRunner, VirtualClock};
use super::faults::{FaultCounts, FaultPlan, Rng, check_invariants};
use super::model::SimModel;
use super::params::ModelParams;
use super::resume::{CheckpointPlan, CheckpointTotals};
use super::workload::{GpuSet, Profile, TraceRow};
use crate::config::{Config, MemorySource, Sharing};
use crate::error::Result;
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::{Event, Journal, Record, State, StateCache};
use crate::session;
use crate::spec::{ReferenceMib, TaskSpec};
use crate::tick::{self, Fault, TickContext};

/// Virtual time of the first submission: 2024-01-01T00:00:00Z, fixed so runs are comparable.
pub const SIM_EPOCH_MS: u64 = 1_704_067_200_000;

/// Which memory figure a simulated task carries (the scheduler's knowledge, not the truth).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimator {
    /// The actual peak memory, declared (the paper's oracle).
    Oracle,
    /// The Horus formula's estimate from the profile (`est_horus_mib`).
    Horus,
    /// The FakeTensor trace's estimate from the profile (`est_faketensor_mib`).
    FakeTensor,
    /// The GPUMemNet figures the original system used (upper bucket edges).
    GpuMemNetPaper,
    /// No figure: recovery only.
    None,
}

/// Everything one simulation needs.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// The submissions, in arrival order.
    pub trace: Vec<TraceRow>,
    /// The workloads the trace names, by workload name: the truth the model runs.
    pub profiles: BTreeMap<String, Profile>,
    /// The simulated machine's GPUs.
    pub gpus: GpuSet,
    /// The tick's configuration (policy, preconditions, recovery); `tick.memory` and
    /// `tick.sharing` are set from `estimator` and the sharing mode, and memory enforcement
    /// (`[enforce]`) is off.
    pub config: Config,
    /// Which memory figure each submitted task declares.
    pub estimator: Estimator,
    /// The interference, memory, power and start-up model.
    pub params: ModelParams,
    /// Virtual time between ticks when something is happening, ms (`carma tick`'s timer period).
    pub tick_ms: u64,
    /// Seed of every random draw (task ids, noise, time limits, faults): the same seed gives
    /// the same journal.
    pub seed: u64,
    /// Probabilities of the faults injected between ticks.
    pub faults: FaultPlan,
    /// Under MPS, whether jobs are held to their pinned memory limit.
    pub mps_caps: bool,
    /// Emulates the original scheduler's sleep after each placement: no tick runs for this
    /// long after a tick that placed something (0: carma's behaviour).
    pub placement_pause_ms: u64,
    /// Relaunches allowed per task (spec `max_retries`).
    pub max_retries: u32,
    /// The time limits the simulated users declare, and whether jobs are stopped at them.
    pub time_limits: TimeLimits,
    /// The state directory to create (must not exist); the journal is left in it.
    pub home_dir: PathBuf,
    /// Administrators' reservations, journaled before the first tick (`sim::reservations`).
    pub reservations: Vec<super::reservations::SimReservation>,
}

/// Time limits as the simulated users declare them: the scheduler's only run-time knowledge
/// besides what it learns from finished runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeLimits {
    /// Each task declares (start-up + exclusive run time) × a factor drawn uniformly in
    /// `[min, max]` from the run's seed; `None`: tasks declare no limit.
    pub factor: Option<(f64, f64)>,
    /// Stop a job at its limit, as the real supervisor does. Off by default: the users'
    /// factors are relative to the exclusive run time, which collocation stretches, so
    /// enforcing them measures the users' guesses as much as the scheduler.
    pub enforce: bool,
}

impl Default for TimeLimits {
    fn default() -> Self {
        TimeLimits { factor: Some(TIME_LIMIT_FACTOR_DEFAULT), enforce: false }
    }
}

/// The factor range of declared time limits, unless told otherwise.
pub const TIME_LIMIT_FACTOR_DEFAULT: (f64, f64) = (1.2, 3.0);
/// The loose regime (`--time-limits loose`): users who round their limits far up.
pub const TIME_LIMIT_FACTOR_LOOSE: (f64, f64) = (1.5, 10.0);

/// Seeds of the run's independent random streams, so that adding a draw to one (a noise
/// sample, a time limit) never changes the others (task ids, faults).
const NOISE_STREAM: u64 = 0x6e6f_6973_6500_0001;
const LIMIT_STREAM: u64 = 0x6c69_6d69_7400_0002;

/// What a simulation did.
#[derive(Debug, Clone)]
pub struct SimSummary {
    /// Tasks submitted: the trace's rows.
    pub tasks: u32,
    /// Ticks run.
    pub ticks: u64,
    /// Virtual time of the first tick ([`SIM_EPOCH_MS`]), Unix ms.
    pub start_ms: u64,
    /// Virtual time of the last tick, Unix ms.
    pub end_ms: u64,
    /// Faults actually injected, by kind.
    pub faults: FaultCounts,
    /// Launches of an already-claimed attempt that the model refused ([`SimModel::refused_launches`](super::model::SimModel::refused_launches)).
    pub refused_launches: u32,
    /// Broken invariants; empty for a correct run.
    pub violations: Vec<String>,
    /// True when the run stopped with work left: at its virtual-time bound, or stalled with
    /// nothing running and tasks that can never start.
    pub bounded: bool,
    /// Real time the run took.
    pub wall: Duration,
    /// The journal file the run left, for `carma report`.
    pub journal: PathBuf,
    /// Checkpoints, resumes, restart time and lost work, from the model's truth.
    pub checkpoints: CheckpointTotals,
}

struct Sim {
    home: Home,
    model: Rc<RefCell<SimModel>>,
    clock: VirtualClock,
    config: Config,
    rng: Rng,
    /// The GPUs the tick samples; one probe for the whole run, so its noise is one stream.
    probe: SimGpus,
    faults: FaultCounts,
    /// The State between ticks: without it every tick decodes the whole snapshot, which
    /// grows with every task ever submitted and made long traces quadratic.
    state_cache: StateCache,
    /// Invariants of the fold broken after some tick (`State::check`), seed and tick named.
    broken: Vec<String>,
}

/// Runs one simulation to the end and checks its invariants.
pub fn simulate(options: &SimOptions) -> Result<SimSummary> {
    let started = Instant::now();
    let mut sim = Sim::new(options)?;
    let arrivals = sim.submissions(options);
    let owners = trace_owners(options)?;
    sim.reserve(options)?;
    let settle_ms = options.config.tick.window.max(options.config.sched.in_flight_grace_ms) + options.tick_ms;
    let work_ms: u64 = arrivals.iter().map(|(_, spec)| options.profiles_ms(spec)).sum();
    let last_offset = options.trace.last().map_or(0, |r| r.offset_ms);
    let bound_ms = SIM_EPOCH_MS + last_offset + 20 * work_ms + 3_600_000;
    let (mut now, mut next_arrival, mut ticks, mut last_activity) = (SIM_EPOCH_MS, 0, 0u64, SIM_EPOCH_MS);
    let mut bounded = false;
    loop {
        while next_arrival < arrivals.len() && arrivals[next_arrival].0.unix_ms() <= now {
            let (id, spec) = &arrivals[next_arrival];
            let submission = crate::spec::Submission::bare(spec.clone());
            match owners[next_arrival] {
                // The trace's users: each gets a spool folder of their own, as if they had
                // submitted themselves.
                Some(uid) => crate::intake::submit_for(&sim.home, &submission, id.clone(), uid)?,
                None => crate::intake::submit_with_id(&sim.home, &submission, id.clone())?,
            };
            next_arrival += 1;
        }
        sim.model.borrow_mut().advance(now);
        sim.clock.set(now);
        let report = sim.tick(options)?;
        ticks += 1;
        // The fold's invariants after every tick, as a deterministic simulator must: the
        // first tick that breaks one is named with the seed, and the run stops there.
        if let Some(Err(broken)) = sim.state_cache.state().map(|s| s.check().and(s.check_decisions())) {
            let at = (now - SIM_EPOCH_MS) / 1000;
            sim.broken.extend(
                broken.into_iter().map(|b| format!("seed {}, tick {ticks} (t = {at} s): {b}", options.seed)),
            );
            break;
        }
        if report.placed + report.launched + report.ingested > 0 || report.crashed_at.is_some() {
            last_activity = now;
        }
        if next_arrival == arrivals.len() && !sim.model.borrow().busy() && sim.all_done()? {
            break;
        }
        // Nothing runs, nothing arrives, and the decision has been the same for a while:
        // the tasks left can never start (e.g. they need more memory than any GPU has).
        let quiet_since = last_activity.max(sim.model.borrow().last_change_ms);
        let window_ahead =
            super::reservations::next_boundary(&options.reservations, SIM_EPOCH_MS, now).is_some();
        let stalled = next_arrival == arrivals.len()
            && !sim.model.borrow().busy()
            && !window_ahead
            && now >= quiet_since + settle_ms;
        if now >= bound_ms || stalled {
            bounded = true;
            break;
        }
        let next_submit = arrivals.get(next_arrival).map(|(id, _)| id.unix_ms());
        now = sim.next_tick(now, options, report.placed > 0, next_submit, last_activity, settle_ms);
    }
    sim.finish(options, ticks, now, bounded, started)
}

/// First uid of the simulated users: trace users get `SIM_USER_UID_BASE + 1`, `+ 2`, ... in
/// the order of their sorted names (alice before bob), so a seed gives the same journal.
pub const SIM_USER_UID_BASE: u32 = 10_000;

/// The uid each trace row is submitted as: `None` for rows without a user (the simulator's
/// own), a synthetic uid per user name otherwise.
///
/// A submission's owner is its spool file's owner: that is what the tick trusts, in a
/// simulation as on a server. So the simulator submits like the users would, as files they
/// own: it writes the file and gives it to the user's uid (`chown`), which only root may do.
/// Nothing in the tick knows about it; a trace with users run by anyone else is refused.
fn trace_owners(options: &SimOptions) -> Result<Vec<Option<u32>>> {
    let mut names: Vec<&str> = options.trace.iter().filter_map(|r| r.user.as_deref()).collect();
    names.sort_unstable();
    names.dedup();
    if !names.is_empty() && crate::access::uid::effective() != 0 {
        return Err(crate::error::Error::BadInput(
            "a trace with a user column must be simulated as root: each user's submissions are spool files given to a uid of their own; run as root or drop the user column".into(),
        ));
    }
    let uid = |name: &str| trace_uid(options, name);
    Ok(options.trace.iter().map(|r| r.user.as_deref().and_then(uid)).collect())
}

/// The simulated uid of the trace user `name` (see [`SIM_USER_UID_BASE`]); `None` when no row
/// of the trace is theirs.
fn trace_uid(options: &SimOptions, name: &str) -> Option<u32> {
    let mut names: Vec<&str> = options.trace.iter().filter_map(|r| r.user.as_deref()).collect();
    names.sort_unstable();
    names.dedup();
    names.iter().position(|n| *n == name).map(|p| SIM_USER_UID_BASE + 1 + p as u32)
}

impl SimOptions {
    fn profiles_ms(&self, spec: &TaskSpec) -> u64 {
        self.profiles.get(&spec.name).map_or(0, |p| p.exclusive_ms)
    }
}

impl Sim {
    fn new(options: &SimOptions) -> Result<Sim> {
        let home = Home::at(&options.home_dir).without_view();
        crate::session::init(&home, crate::config::DEFAULT_CONFIG_TOML)?;
        let mut config = options.config.clone();
        config.tick.gpus = "simulated".into();
        config.tick.memory = match (options.estimator, config.tick.memory) {
            (Estimator::None, _) => MemorySource::None,
            (_, MemorySource::Learned) => MemorySource::Learned,
            _ => MemorySource::Declared,
        };
        // The simulated jobs' memory is the trace's truth and their declared figure an
        // estimator's: a job over it is the estimator's error, not a hostile job, and the
        // reference reports compare estimators by the out-of-memory deaths that follow. So the
        // simulator leaves memory enforcement off; real ticks enforce it.
        config.enforce.enabled = false;
        let mps = config.tick.sharing == Sharing::Mps;
        let mut model =
            SimModel::new(options.params.clone(), &options.gpus, mps, options.mps_caps, SIM_EPOCH_MS);
        model.enforce_time_limits = options.time_limits.enforce;
        let model = Rc::new(RefCell::new(model));
        let probe = SimGpus { model: Rc::clone(&model), noise: Rng::new(options.seed ^ NOISE_STREAM) };
        Ok(Sim {
            home,
            model,
            probe,
            clock: VirtualClock::new(SIM_EPOCH_MS),
            config,
            rng: Rng::new(options.seed),
            faults: FaultCounts::default(),
            state_cache: StateCache::default(),
            broken: Vec::new(),
        })
    }

    /// Journals the run's reservations before its first tick (see `sim::reservations`).
    fn reserve(&mut self, options: &SimOptions) -> Result<()> {
        if options.reservations.is_empty() {
            return Ok(());
        }
        let records = options
            .reservations
            .iter()
            .map(|r| r.record(SIM_EPOCH_MS, |name| trace_uid(options, name)))
            .collect::<Result<Vec<Record>>>()?;
        let wait = Duration::from_secs(10);
        session::write_cached(&self.home, wait, Some(&mut self.state_cache), |journal, state| {
            journal.append(&records, state).map(|_| ())
        })
    }

    /// One spec per trace row, with a seeded id that encodes its submit time; the model
    /// learns each task's truth here.
    fn submissions(&mut self, options: &SimOptions) -> Vec<(TaskId, TaskSpec)> {
        let mut model = self.model.borrow_mut();
        let mut limits = Rng::new(options.seed ^ LIMIT_STREAM);
        let startup_ms = options.params.job.startup_s * 1000.0;
        options
            .trace
            .iter()
            .map(|row| {
                let profile = &options.profiles[&row.workload];
                let id = TaskId::from_parts(SIM_EPOCH_MS + row.offset_ms, self.rng.next_u64() as u32);
                model.truth.insert(id.to_string(), profile.clone());
                let mut spec = task_spec(profile, options.estimator, options.max_retries);
                if requeueable(&spec, &self.config) {
                    model.checkpoint_plans.insert(id.to_string(), checkpoint_plan(profile, &options.params));
                }
                spec.time_limit_ms = options.time_limits.factor.map(|(low, high)| {
                    let factor = low + (high - low) * limits.unit();
                    ((startup_ms + profile.exclusive_ms as f64) * factor).ceil() as u64
                });
                super::reservations::name_in(
                    &mut spec,
                    &options.reservations,
                    row.user.as_deref(),
                    row.offset_ms,
                );
                (id, spec)
            })
            .collect()
    }

    fn tick(&mut self, options: &SimOptions) -> Result<tick::TickReport> {
        let plan = options.faults;
        let mut fault = None;
        if plan.any() {
            self.inject_between_ticks(plan);
            if self.rng.chance(plan.crash) {
                self.faults.crashes += 1;
                let after_launch = self.rng.next_u64() % 2 == 1;
                fault = Some(if after_launch { Fault::CrashAfterLaunch } else { Fault::CrashAfterPlaced });
            }
        }
        let mut runner = SimRunner { model: Rc::clone(&self.model) };
        let mut ctx = TickContext {
            home: &self.home,
            clock: &self.clock,
            lock_wait: Duration::from_secs(10),
            probe: &mut self.probe,
            probe_error: None,
            runner: &mut runner,
            config: &self.config,
            fault,
            state_cache: Some(&mut self.state_cache),
            // The simulated machine has plenty of disk.
            state_free_bytes: None,
        };
        tick::run(&mut ctx)
    }

    fn inject_between_ticks(&mut self, plan: FaultPlan) {
        let mut model = self.model.borrow_mut();
        if self.rng.chance(plan.reboot) && model.busy() {
            model.reboot();
            self.faults.reboots += 1;
        }
        if self.rng.chance(plan.lost_exit) {
            let pick = self.rng.next_u64();
            if model.lose_exit_record(pick).is_some() {
                self.faults.lost_exits += 1;
            }
        }
    }

    /// With preemption on, a task that waits may preempt at any tick: when its head-wait runs
    /// out, a victim's min-run ends or a victim's grace is over, none of which changes the
    /// machine. So no tick is skipped while a task waits, as the real timer skips none; with
    /// preemption off the jumps (and so every decision) are what they were.
    fn preemption_may_act(&self) -> bool {
        self.config.sched.preemption.enabled()
            && self.state_cache.state().is_some_and(|state| {
                state.tasks.values().any(|task| task.status() == crate::journal::Status::Pending)
            })
    }

    fn all_done(&self) -> Result<bool> {
        session::read(&self.home, Duration::from_secs(10), |_, state| {
            Ok(state.tasks.values().all(|t| t.status().is_terminal()))
        })
    }

    /// The next tick time: the next grid point, after a placement pause, or a jump.
    fn next_tick(
        &self,
        now: u64,
        options: &SimOptions,
        placed: bool,
        next_submit: Option<u64>,
        last_activity: u64,
        settle_ms: u64,
    ) -> u64 {
        let tick = options.tick_ms;
        let grid = |t: u64| SIM_EPOCH_MS + (t - SIM_EPOCH_MS).div_ceil(tick) * tick;
        if placed && options.placement_pause_ms > 0 {
            return grid(now + options.placement_pause_ms);
        }
        let model = self.model.borrow();
        let quiet_since = last_activity.max(model.last_change_ms);
        if options.faults.any() || now < quiet_since + settle_ms || self.preemption_may_act() {
            return now + tick;
        }
        let window = super::reservations::next_boundary(&options.reservations, SIM_EPOCH_MS, now);
        let change = [next_submit, model.next_change_ms(), window].into_iter().flatten().min();
        let Some(change) = change else { return now + tick };
        let pre_roll = options.config.tick.window + 2 * tick;
        grid(change.saturating_sub(pre_roll)).max(now + tick)
    }

    fn finish(
        self,
        options: &SimOptions,
        ticks: u64,
        end_ms: u64,
        bounded: bool,
        started: Instant,
    ) -> Result<SimSummary> {
        let (state, records) = read_journal_where(&self.home, super::faults::checked_event)?;
        let model = self.model.borrow();
        let mut violations = self.broken.clone();
        violations.extend(check_invariants(&model, &state, &records, options.seed));
        Ok(SimSummary {
            tasks: options.trace.len() as u32,
            ticks,
            start_ms: SIM_EPOCH_MS,
            end_ms,
            faults: self.faults,
            refused_launches: model.refused_launches,
            violations,
            bounded,
            wall: started.elapsed(),
            journal: self.home.journal_path(),
            checkpoints: model.checkpoint_totals(),
        })
    }
}

/// The State and every record of a simulation's journal.
pub fn read_journal(home: &Home) -> Result<(State, Vec<Record>)> {
    read_journal_where(home, |_| true)
}

/// The State and the records whose event passes `keep`.
fn read_journal_where(home: &Home, keep: impl Fn(&Event) -> bool) -> Result<(State, Vec<Record>)> {
    session::read(home, Duration::from_secs(10), |journal: &Journal, state| {
        let mut records = Vec::new();
        journal.for_each(1, |_, record| {
            if keep(&record.event) {
                records.push(record);
            }
            Ok(true)
        })?;
        Ok((state, records))
    })
}

/// Whether a simulated task may be preempted, and so checkpoints: what its spec says
/// (`requeue`), else the configuration's `[sched.preemption] requeue-default`, as the tick
/// decides it. The trace has no column for it: a configuration is compared whole.
fn requeueable(spec: &TaskSpec, config: &Config) -> bool {
    spec.requeue.unwrap_or(config.sched.preemption.requeue_default)
}

/// How a requeueable task checkpoints: its profile's figures, else the model's.
fn checkpoint_plan(profile: &Profile, params: &ModelParams) -> CheckpointPlan {
    let every_ms = profile.checkpoint_every_ms.map_or(params.job.checkpoint_every_s * 1000.0, |ms| ms as f64);
    let restart_ms = profile.restart_cost_ms.map_or(params.job.restart_cost_s * 1000.0, |ms| ms as f64);
    CheckpointPlan { every_ms: every_ms.max(1.0), restart_ms }
}

/// The spec of one simulated task: the workload's name, a placeholder command (the
/// simulator never runs it), its GPUs, and the memory figure of the chosen estimator.
fn task_spec(profile: &Profile, estimator: Estimator, max_retries: u32) -> TaskSpec {
    let memory_mib = match estimator {
        Estimator::Oracle => Some(profile.mem_actual_mib),
        Estimator::Horus => Some(profile.est_horus_mib),
        Estimator::FakeTensor => Some(profile.est_faketensor_mib),
        Estimator::GpuMemNetPaper => Some(profile.est_gpumemnet_mib),
        Estimator::None => None,
    };
    TaskSpec {
        name: profile.workload.clone(),
        command: vec!["simulated".into(), profile.workload.clone()],
        workdir: "/".into(),
        program: None,
        env_names: Vec::new(),
        export: None,
        output: None,
        error: None,
        gpus: profile.gpus,
        memory_mib: memory_mib.map(|m| m.max(1)),
        model_summary: None,
        batch_size: None,
        max_retries,
        time_limit_ms: None,
        dataset: None,
        policy_hint: None,
        reference: ReferenceMib {
            oracle: Some(profile.mem_actual_mib),
            horus: Some(profile.est_horus_mib),
            faketensor: Some(profile.est_faketensor_mib),
            gpumemnet: Some(profile.est_gpumemnet_mib),
        },
        ..TaskSpec::default()
    }
}
