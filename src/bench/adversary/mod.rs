//! `carma bench adversary`: a hostile lab member against an honest one, seed by seed.
//!
//! **Seeds.** Each seed is one run on a fresh, real state directory (a real redb journal, the
//! real spool, root's `private/`), driven by the real `tick::run` in this process, with one
//! fake GPU (`gpus.json`, rewritten by the harness), real supervisors and real jobs, and a real
//! `carma serve` on an ephemeral loopback port. The seed alone decides every move, so a failing
//! seed replays exactly (`--first-seed S --seeds 1`); what the jobs and the machine's timing do
//! is real and may vary. Run as root: the two users are throw-away system users made for the
//! run (`lab`), or, where `useradd` fails, bare uids that play the spool moves only.
//!
//! **Moves** (`moves`, mallory's, a few per tick, drawn from the seed, between ticks; `Race`
//! also during one). In her spool folder (issue 21): a link in place of her spool file to
//! alice's private copy or to a root-only file; hard links held "not ready"; a FIFO, a
//! directory or a socket-like entry named as a spec; a spec far over the size cap (sparse) and
//! one whose record would pass the journal's limit; malformed and non-UTF-8 specs; floods of
//! requests for unknown ids; a cancel of alice's task; a spec forging membership of alice's
//! array; a dependency on alice's task (allowed: states are public); junk and a squatted folder
//! at the top of `spool/`; a thread that swaps her spec for a link while the tick runs; and,
//! where the scratch directory is a small filesystem with blocks reserved for root (a
//! loop-mounted ext4, as `tests/adversary.rs` makes), a full disk filled as her own uid. Her
//! jobs and her client (issue 32): a job that prints `CUDA out of memory` and exits 1 asking
//! for 100 retries; a requeue loop (exit 99, every time); log-size games (her log made
//! sparse-huge and back, replaced by a FIFO or a link, chmod 000); disk filling through her own
//! folders (real junk in her spool folder, a job writing past the log cap and into the log of
//! her attempt that already ended); a client that pipelines 20,000 requests to the dashboard and
//! never reads; and a job over its declared GPU memory on the shared GPU (a hog declared at
//! 1 GiB beside a neighbour of alice's; the harness lists the hog's pid at 30,000 MiB).
//! The fifth wave's moves (issues 40 and 41): a job that declares little or nothing and then
//! grabs more; a job that grabs memory only between two ticks and then prints an
//! out-of-memory line; out-of-memory lines printed while holding nothing (all in `recovery`);
//! writes into an interactive session's folder, during and after it; SIGCONT of her own
//! suspended job; hold/release loops of a preemptor; unlimited and zero time limits; forged
//! fields that only carma sets (all in `doors`). Each seed's queue has `[limits]
//! time-limit-max`, and preemption on, in `requeue` or `suspend` mode by the seed
//! (`lab::fifth_wave_config`).
//! Alice submits one ordinary task a tick (1 GiB, `true`) carrying a secret environment
//! value, sometimes as an array member.
//!
//! **Invariants** (`invariants`), after every tick: (1) the tick returned without error; (2)
//! each of alice's submissions is journaled within [`INGEST_TICKS_MAX`] ticks; (3) no byte of
//! alice's secret is in anything mallory can read; (4) none of alice's tasks was cancelled or
//! joined by mallory; (5) `carma journal check` calls the journal sound; (6) each of alice's
//! tasks starts within [`invariants::START_TICKS_MAX`] ticks of being journaled, whatever
//! mallory's jobs print; (7) no supervisor dies of anything but a signal from carma (no Lost
//! attempt, no panic or failed allocation in a `supervisor.log`); (8) the bytes carma keeps for
//! each user in the state directory (quarantine, ended attempts' run folders; not the user's own
//! spool folder) stay under [`invariants::USER_STATE_BYTES_MAX`]; (9) the
//! dashboard answers an honest GET within [`invariants::DASHBOARD_ANSWER_MAX`]; (10) the job over
//! its memory is the one stopped (the stop decided at the tick that saw it, its processes gone
//! within [`recovery::STOP_TICKS_MAX`] ticks), and its neighbour is not;
//! (11) no task is requeued more than [`invariants::REQUEUES_MAX`] times; and the fifth wave's
//! (`recovery` and `doors` give each precisely): (12) an out-of-memory is judged on carma's
//! own evidence (nothing held: never recovered; seen by the supervisor: relaunched while
//! retries last); (13) a relaunch of a user-declared figure that was crossed never waits in
//! the recovery queue, ahead of its normal place, and every relaunch after a memory stop gets
//! at least what it used; (14) every such relaunch uses a retry and is charged to fair share;
//! (15) nothing of a user's stays in an ended attempt's run folder (its bytes count in (8));
//! (16) no task past its limit; (17) preemption notices per task at most `max-per-task`,
//! withdrawn or not; (18) no field only carma sets comes from a user; (19) a suspended job is
//! stopped as a whole. Each tick's duration is measured and reported, never asserted.

mod doors;
mod invariants;
mod lab;
mod ledger;
mod moves;
mod recovery;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::clock::SystemClock;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::State;
use crate::session;
use crate::sim::Rng;
use crate::spec::{Submission, TaskSpec};
use crate::tick::{self, TickContext};

/// Ticks within which an honest submission must be journaled.
pub const INGEST_TICKS_MAX: u64 = 2;
const TICKS: u64 = 8;
/// The longest the harness waits between ticks for the short jobs launched to end.
const JOBS_SETTLE_MAX: Duration = Duration::from_millis(1500);

/// What the runs found.
#[derive(Debug, Clone, Serialize)]
pub struct AdversaryBench {
    /// Seeds played, each a fresh state directory.
    pub seeds: u64,
    /// The first seed; the run played `first_seed..first_seed + seeds`.
    pub first_seed: u64,
    /// Ticks run over all seeds.
    pub ticks: u64,
    /// Hostile moves mallory played over all seeds.
    pub moves: u64,
    /// Tasks alice submitted over all seeds, one before each tick (some as array members).
    pub honest_submissions: u64,
    /// Broken invariants, each with its seed and tick.
    pub violations: Vec<String>,
    /// Median duration of one tick over all seeds, wall-clock ms.
    pub tick_ms_median: f64,
    /// 99th percentile of the tick durations, ms.
    pub tick_ms_p99: f64,
    /// Longest tick, ms.
    pub tick_ms_max: f64,
    /// Full-disk moves played: the filesystem left with no byte an ordinary user may use.
    pub full_disks: u64,
    /// Whether the players were real users whose jobs ran (else job moves do nothing).
    pub jobs: bool,
    /// Job moves played (fake OOM, requeue loop, log games, disk filling, GPU memory hog).
    pub job_moves: u64,
    /// Hostile dashboard clients (pipelining, never reading) played.
    pub hostile_clients: u64,
    /// Seeds with a dashboard (`carma serve`) to play against.
    pub dashboards: u64,
    /// Grabs (move 21) listed over their share: declared little or nothing, then used more.
    pub grabs: u64,
    /// Brief grabs (move 22) listed long enough for the supervisor to see them, between ticks.
    pub brief_grabs: u64,
    /// Jobs that printed out-of-memory lines holding nothing (moves 15 and 23).
    pub idle_ooms: u64,
    /// Writes tried into a live interactive session's `attach/` folder, as mallory (move 24).
    pub attach_writes: u64,
    /// Writes tried into an ended session's `attach/` folder, as mallory (move 24).
    pub attach_writes_after: u64,
    /// SIGCONTs mallory sent to a suspended job of hers (move 25).
    pub sigconts: u64,
    /// Holds and releases mallory filed against a preemption in its grace (move 26).
    pub hold_release_loops: u64,
    /// Submissions asking for no or a zero time limit, or one over the maximum (move 27).
    pub unlimited_asks: u64,
    /// Spool files forging a field only carma sets (move 28).
    pub forged_fields: u64,
    /// Of those, the ones the tick refused.
    pub forged_refused: u64,
    /// Relaunches after a memory stop or a corroborated out-of-memory, journaled.
    pub relaunches: u64,
    /// Preemption notices journaled (Preempted or Suspended).
    pub preemption_notices: u64,
    /// Preemptions withdrawn (PreemptionWithdrawn).
    pub withdrawals: u64,
    /// Suspensions journaled (Suspended).
    pub suspensions: u64,
}

/// Runs seeds `first_seed..first_seed + seeds` in scratch folders under `scratch`. `progress`
/// hears, after each seed, how many have been played and how many violations were found.
pub fn adversary(
    first_seed: u64,
    seeds: u64,
    scratch: &Path,
    progress: &dyn Fn(u64, u64),
) -> Result<AdversaryBench> {
    if crate::access::uid::effective() != 0 {
        return Err(Error::BadInput(
            "carma bench adversary plays two users and must run as root; run it with sudo".into(),
        ));
    }
    let users = lab::Users::make();
    let mut bench = AdversaryBench {
        seeds,
        first_seed,
        ticks: 0,
        moves: 0,
        honest_submissions: 0,
        violations: Vec::new(),
        tick_ms_median: 0.0,
        tick_ms_p99: 0.0,
        tick_ms_max: 0.0,
        full_disks: 0,
        jobs: users.players.jobs,
        job_moves: 0,
        hostile_clients: 0,
        dashboards: 0,
        grabs: 0,
        brief_grabs: 0,
        idle_ooms: 0,
        attach_writes: 0,
        attach_writes_after: 0,
        sigconts: 0,
        hold_release_loops: 0,
        unlimited_asks: 0,
        forged_fields: 0,
        forged_refused: 0,
        relaunches: 0,
        preemption_notices: 0,
        withdrawals: 0,
        suspensions: 0,
    };
    // The full-disk move needs a small filesystem of its own with root's reserve; mallory, a
    // user, must be able to reach her folder through it, and jobs their logs by path.
    let small = moves::small_reserved_fs(scratch);
    if small || users.players.jobs {
        std::fs::set_permissions(scratch, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(format!("cannot set the mode of {}", scratch.display()), e))?;
    }
    let tool = lab::CheckpointTool::install()?;
    let mut durations = Vec::new();
    for seed in first_seed..first_seed + seeds {
        let dir = scratch.join(format!("seed-{seed}"));
        let run = Run::new(&dir, seed, small, users.players, &tool)?.play(&mut bench, &mut durations);
        // `CARMA_ADVERSARY_KEEP=1` keeps each seed's state directory beside the scratch
        // folder (`--dir DIR` gives DIR/seed-N) for a look afterwards.
        let kept = std::env::var_os("CARMA_ADVERSARY_KEEP").is_some()
            && scratch
                .parent()
                .is_some_and(|up| std::fs::rename(&dir, up.join(format!("seed-{seed}"))).is_ok());
        if !kept {
            let _ = std::fs::remove_dir_all(&dir);
        }
        run?;
        progress(seed - first_seed + 1, bench.violations.len() as u64);
    }
    durations.sort_by(f64::total_cmp);
    let at =
        |q: f64| durations.get(((durations.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    bench.tick_ms_median = at(0.5);
    bench.tick_ms_p99 = at(0.99);
    bench.tick_ms_max = at(1.0);
    Ok(bench)
}

struct Run {
    home: Home,
    config: Config,
    rng: Rng,
    seed: u64,
    secret: String,
    users: lab::Players,
    /// Alice's submissions: id and the tick it was made before.
    honest: Vec<(TaskId, u64)>,
    alice_array: Option<TaskId>,
    next_ms: u64,
    /// Whether the full-disk move may be played here (see [`moves::small_reserved_fs`]).
    full_disk: bool,
    /// The seed's fake GPU file.
    gpu_file: PathBuf,
    dashboard: Option<lab::Dashboard>,
    /// Mallory's pipelining clients, kept open until the check after the next tick.
    clients: Vec<std::net::TcpStream>,
    /// The processes the harness lists on the fake GPU, pid → (MiB, the task whose job it
    /// is); each stays listed only while that task has an attempt open ([`Run::prune_listing`]).
    listing: BTreeMap<u32, (u64, TaskId)>,
    /// Tasks the harness knows run long (the waits between ticks leave them out).
    long: BTreeSet<TaskId>,
    /// Jobs over their share (moves 20 and 21).
    grabs: Vec<recovery::Grab>,
    /// Brief grabs (move 22).
    briefs: BTreeMap<TaskId, recovery::Brief>,
    /// Jobs that printed out-of-memory lines holding nothing (moves 15 and 23).
    idle_ooms: Vec<TaskId>,
    /// The doors' scenarios (moves 24 to 28).
    doors: doors::Doors,
    /// The journal's records as the fifth wave's invariants read them.
    ledger: ledger::Ledger,
    /// Whether each move is named on stderr as it is played (`CARMA_ADVERSARY_TRACE=1`).
    trace: bool,
    /// The State after the latest tick.
    last_state: Option<State>,
    /// The ticks each of alice's tasks has waited since its first check, those with a
    /// preemption in its grace not counted (`invariants::honest_starts`).
    journaled: BTreeMap<TaskId, u64>,
    /// Violations already reported this seed (one per object, not one per tick).
    reported: BTreeSet<String>,
}

/// The spec of the seeds' ordinary tasks: 1 GiB on one GPU, `command` in /tmp.
fn small_spec(name: &str, command: &[&str]) -> TaskSpec {
    let mut spec = super::journal::sample_spec();
    spec.name = name.into();
    spec.command = command.iter().map(|s| s.to_string()).collect();
    spec.memory_mib = Some(1024);
    spec
}

/// The time limit the harness's long tasks ask for, within the queue's maximum.
const LONG_LIMIT_MS: u64 = 60_000;

/// A [`small_spec`] that asks for [`LONG_LIMIT_MS`]: a task that must outlive the queue's
/// default limit.
fn long_spec(name: &str, command: &[&str]) -> TaskSpec {
    let mut spec = small_spec(name, command);
    spec.time_limit_ms = Some(LONG_LIMIT_MS);
    spec
}

/// What a fake out-of-memory job prints before it exits 1.
pub(super) const FAKE_OOM_LINE: &str =
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";

/// The wall clock, Unix ms.
fn now_ms() -> u64 {
    crate::clock::Clock::now_ms(&SystemClock)
}

impl Run {
    fn new(
        dir: &Path,
        seed: u64,
        full_disk: bool,
        users: lab::Players,
        tool: &lab::CheckpointTool,
    ) -> Result<Run> {
        let _ = std::fs::remove_dir_all(dir);
        let home = Home::at(dir);
        crate::session::init(&home, crate::config::DEFAULT_CONFIG_TOML)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(format!("cannot set the mode of {}", dir.display()), e))?;
        let gpu_file = dir.join("gpus.json");
        lab::write_gpu(&gpu_file, &[])?;
        let mut config = Config::load(&home)?;
        config.tick.gpus = if users.jobs { format!("fake:{}", gpu_file.display()) } else { "none".into() };
        config.limits.log_bytes_max = Some(1 << 20);
        config.limits.free_space_floor_bytes = 8 << 20;
        lab::fifth_wave_config(&mut config, seed, tool);
        let secret = format!("alice-secret-{seed:016x}-{:08x}", Rng::new(seed).next_u64() as u32);
        let dashboard = lab::Dashboard::start(dir);
        Ok(Run {
            home,
            config,
            rng: Rng::new(seed),
            seed,
            secret,
            users,
            honest: Vec::new(),
            alice_array: None,
            next_ms: 1_800_000_000_000 + seed % 1000,
            full_disk,
            gpu_file,
            dashboard,
            clients: Vec::new(),
            listing: BTreeMap::new(),
            long: BTreeSet::new(),
            grabs: Vec::new(),
            briefs: BTreeMap::new(),
            idle_ooms: Vec::new(),
            doors: doors::Doors::default(),
            ledger: ledger::Ledger::default(),
            trace: std::env::var_os("CARMA_ADVERSARY_TRACE").is_some(),
            last_state: None,
            journaled: BTreeMap::new(),
            reported: BTreeSet::new(),
        })
    }

    fn play(mut self, bench: &mut AdversaryBench, durations: &mut Vec<f64>) -> Result<()> {
        bench.dashboards += u64::from(self.dashboard.is_some());
        let played = self.play_ticks(bench, durations);
        self.stop_jobs();
        if played.is_ok() {
            // The seed's ledger is complete once its jobs are stopped (their ends need no tick:
            // the exit records say how long each ran).
            self.limits_kept(bench);
            self.count_doors(bench);
        }
        played
    }

    fn play_ticks(&mut self, bench: &mut AdversaryBench, durations: &mut Vec<f64>) -> Result<()> {
        for tick in 1..=TICKS {
            self.alice(tick)?;
            bench.honest_submissions += 1;
            self.advance(tick, bench)?;
            let moves = 1 + self.rng.next_u64() % 3;
            let mut racers = Vec::new();
            for _ in 0..moves {
                bench.moves += 1;
                racers.extend(self.mallory(tick, bench)?);
            }
            let started = Instant::now();
            let outcome = self.tick();
            durations.push(started.elapsed().as_secs_f64() * 1e3);
            // Every racer stops before the invariants are checked.
            for (stop, handle) in racers {
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = handle.join();
            }
            bench.ticks += 1;
            match outcome {
                Ok(()) => {
                    let state: State =
                        session::read(&self.home, Duration::from_secs(5), |_, state| Ok(state))?;
                    for v in self.check(tick, &state)? {
                        bench.violations.push(format!("seed {} tick {tick}: {v}", self.seed));
                    }
                    self.last_state = Some(state);
                }
                Err(e) => {
                    bench.violations.push(format!("seed {} tick {tick}: the tick failed: {e}", self.seed))
                }
            }
            self.clients.clear();
            self.brief_grabs(bench)?;
            self.settle_jobs();
        }
        Ok(())
    }

    /// Plays the next step of each scenario a move began (a job over its share, a held
    /// allocation, a preemption): once begun, a scenario goes on every tick, as the user
    /// behind it would, whatever the seed draws next.
    fn advance(&mut self, tick: u64, bench: &mut AdversaryBench) -> Result<()> {
        for kind in self.grabs.iter().map(|g| g.kind).collect::<Vec<_>>() {
            let id = self.id();
            self.grab(bench, id, tick, kind)?;
        }
        if self.doors.hold.is_some() {
            let id = self.id();
            self.attach_writes(bench, id)?;
        }
        match self.doors.big {
            Some(doors::Big::Suspend { .. }) => {
                let id = self.id();
                self.sigcont(bench, id)?;
            }
            Some(doors::Big::Loop { .. }) => {
                let id = self.id();
                self.hold_release(bench, id)?;
            }
            None => {}
        }
        Ok(())
    }

    fn id(&mut self) -> TaskId {
        self.next_ms += 1 + self.rng.next_u64() % 50;
        TaskId::from_parts(self.next_ms, self.rng.next_u64() as u32)
    }

    fn folder(&self, uid: u32) -> PathBuf {
        self.home.spool_dir().join(uid.to_string())
    }

    fn runner(&self) -> tick::ExecRunner {
        tick::ExecRunner::new(self.home.root(), std::env::current_exe().unwrap_or_default())
    }

    fn tick(&mut self) -> Result<()> {
        let clock = SystemClock;
        let (mut probe, probe_error): (Box<dyn crate::gpu::GpuProbe>, _) = if self.users.jobs {
            match crate::gpu::FakeProbe::open(&self.gpu_file) {
                Ok(probe) => (Box::new(probe), None),
                Err(e) => (Box::new(crate::gpu::NoGpus), Some(e.to_string())),
            }
        } else {
            (Box::new(crate::gpu::NoGpus), Some("no GPUs in the adversary bench without users".into()))
        };
        let mut runner = self.runner();
        let mut ctx = TickContext {
            home: &self.home,
            clock: &clock,
            lock_wait: Duration::from_secs(5),
            probe: probe.as_mut(),
            probe_error,
            runner: &mut runner,
            config: &self.config,
            fault: None,
            state_cache: None,
            state_free_bytes: tick::free_bytes(self.home.root()),
        };
        tick::run(&mut ctx).map(drop)
    }

    /// Alice submits one ordinary task with her secret in its environment (sometimes an
    /// array member, sometimes the rest of her array; no `%N` cap, so none of hers waits for
    /// another of hers).
    fn alice(&mut self, tick: u64) -> Result<()> {
        let mut submission = Submission::bare(small_spec("bench", &["true"]));
        submission.spec.env_names = vec!["SECRET_TOKEN".into()];
        submission.env.insert("SECRET_TOKEN".into(), self.secret.clone());
        if self.rng.chance(0.3) || self.alice_array.is_some() {
            let array = self.alice_array.clone().unwrap_or_else(|| self.id());
            self.alice_array = Some(array.clone());
            submission.spec.array = Some(crate::spec::ArrayMember {
                id: array,
                index: tick as u32,
                count: TICKS as u32 + 1,
                running_max: None,
                params: Vec::new(),
            });
        }
        let id = self.id();
        crate::intake::submit_for(&self.home, &submission, id.clone(), self.users.alice)?;
        self.honest.push((id, tick));
        Ok(())
    }

    /// MiB the harness lists on the fake GPU.
    fn listed_mib(&self) -> u64 {
        self.listing.values().map(|(mib, _)| mib).sum()
    }

    /// Lists `pid`, a process of `task`'s job, at `mib` (written by [`Run::list_gpu`]).
    fn list(&mut self, pid: u32, mib: u64, task: &TaskId) {
        self.listing.insert(pid, (mib, task.clone()));
    }

    /// Takes off the GPU every process of a task with no attempt open in `state`.
    fn prune_listing(&mut self, state: &State) -> Result<()> {
        let before = self.listing.len();
        self.listing
            .retain(|_, (_, task)| state.tasks.get(task).is_some_and(|t| t.active_attempt().is_some()));
        if self.listing.len() != before { self.list_gpu() } else { Ok(()) }
    }

    /// Writes [`Run::listing`] to the seed's fake GPU file.
    fn list_gpu(&self) -> Result<()> {
        let processes: Vec<lab::GpuProcess> =
            self.listing.iter().map(|(&pid, (mib, _))| (pid, *mib)).collect();
        lab::write_gpu(&self.gpu_file, &processes)
    }

    /// The run folders of the attempts running after the latest tick, the long ones
    /// ([`Run::long`]) left out.
    fn running_dirs(&self, with_long: bool) -> Vec<(TaskId, u32, PathBuf)> {
        let Some(state) = &self.last_state else { return Vec::new() };
        state
            .tasks
            .values()
            .filter(|t| with_long || !self.long.contains(&t.id))
            .filter_map(|t| {
                let attempt = t.active_attempt()?;
                let dir = crate::exec::run_dir(self.home.root(), t.id.as_str(), attempt.number).ok()?;
                Some((t.id.clone(), attempt.number, dir))
            })
            .collect()
    }

    /// Waits (bounded) until the short jobs running have ended, so the next tick sees their
    /// exits as a queue with a real tick interval would.
    fn settle_jobs(&self) {
        let dirs = self.running_dirs(false);
        let deadline = Instant::now() + JOBS_SETTLE_MAX;
        let done = || dirs.iter().all(|(_, _, dir)| dir.join(crate::exec::rundir::EXIT_FILE).exists());
        while !done() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops every attempt still running at the seed's end (SIGTERM through its supervisor, as
    /// `carma cancel` does) and waits a little for them to go.
    fn stop_jobs(&mut self) {
        let mut runner = self.runner();
        let dirs = self.running_dirs(true);
        for (task, attempt, _) in &dirs {
            let _ = tick::AttemptRunner::stop(&mut runner, task.as_str(), *attempt);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        let done = || dirs.iter().all(|(_, _, dir)| dir.join(crate::exec::rundir::EXIT_FILE).exists());
        while !done() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.dashboard = None;
    }
}
