//! The decision core: which waiting task starts on which GPU, and why the
//! others wait.
//!
//! `sched` is pure. [`decide`] takes the windowed GPU view, the waiting and
//! running tasks, the round-robin cursor, the config and `now`, and returns
//! placements plus one plain-words pending reason per task left waiting. It
//! does no I/O, reads no clock, draws no random numbers and depends on no
//! other carma module, so `carma tick` and `carma simulate` get the same
//! answer from the same input, and tests can check it exhaustively.
//!
//! # Rules
//!
//! **Queue order** (`order`). The recovery queue (tasks with
//! [`WaitingTask::recovery`]) comes first, by `submit_seq`, ties by id, except
//! that a recovery task passes at most one task of a user whose fair-share
//! usage is lower than its owner's (`order`'s docs define where it lands). The
//! main queue is ordered by these keys in turn: priority (`priority − nice`,
//! higher first); with fair share on, the submitter's decayed recent GPU time
//! (lower first), then the task's rank among its user's own waiting tasks
//! (users with equal usage alternate); the size key: with `[sched.order] size =
//! "size"`, the submission time less `head-start` per GPU-hour of expected size (GPUs ×
//! expected run time), except that a task that has waited `overtake-max` is passed by
//! no later one; the deprecated `size_order_delay_ms` (D), when positive, is the old key
//! `submitted_ms − D·w`, with `w = size/(size + 1 GPU-hour)` for `size = gpus ×
//! runtime_estimate_ms` (no estimate: `w = 0`); then `submit_seq` and id. A user's own
//! tasks are ranked by the same keys
//! (priority, size-aware key, `submit_seq`). The caller may pass waiting tasks
//! in any order.
//!
//! **The gate** (`gate`), before a task is tried on any GPU: a held
//! task waits (`Held`); a task whose dependencies are not all met waits
//! (`Dependency: ...`), and one whose `afterok`/`afternotok` dependency ended
//! the wrong way is cancelled (or waits, with `keep_on_dependency_failure`);
//! a task that would take its array past its `%N` cap (`ArrayLimit`) or its
//! user past `user_limits` (running tasks, GPUs, reserved GPU memory:
//! `UserLimit`) waits. Caps count running tasks plus this decision's
//! placements. A task the gate stops never blocks the queue.
//!
//! **Strict FIFO** (`backfill = false`). When the first task in queue order cannot be
//! placed, nobody behind it is placed; they get "queued behind ID (strict
//! FIFO)". A task that asks for 0 GPUs or for more GPUs than the machine has
//! can never run: it gets a reason saying so and does not block the queue.
//!
//! **Backfill** (`backfill = true`, the default, EASY-style). The first task that cannot be
//! placed (the *head*) gets a reservation of `gpus` GPUs, chosen among GPUs
//! with no exclusive task: for a head that needs idle GPUs (recovery in
//! exclusive mode, or the exclusive policy) the GPUs with the fewest carma
//! tasks, then least memory used, then lowest index; for any other head the
//! GPUs with the most effective free memory, then lowest index. Later tasks
//! may start, but never on a reserved GPU, so they take none of the memory,
//! SM time or idleness the head is waiting for and cannot delay it. Only the
//! head gets a reservation; later blocked tasks may be overtaken. The
//! reservation is *sticky*: while the same task stays the head, the next
//! decision keeps the GPUs the previous one reserved (passed in as
//! [`GateInput::reservation`]) as long as they are all present and none is
//! held exclusively, so a GPU released by a reservation that moved can never
//! take a backfilled task that then delays the head. The head's *reserved
//! start* (its shadow time) is when every carma task on its reserved GPUs has
//! ended by its time limit (unknown when one has none, or none runs there); a
//! task with a time limit that ends before it may use the reserved GPUs too
//! (EASY backfill), since it is gone before the head could start there. At most
//! `backfill_depth_max` tasks behind the head are tried, which bounds the work.
//!
//! **Backfill with time** (`backfill_by_time`, with backfill). The head's GPUs
//! are instead the ones expected to fit it first: each GPU's running tasks are
//! taken away in the order of their expected ends (`launched_ms +
//! runtime_estimate_ms`), giving back their memory and SM estimate, until the
//! head would pass (idle, for a head that needs idle GPUs); ties go to the most
//! effective free memory. The head's shadow time is the latest of its GPUs' fit
//! times, unknown when a task on the way has no estimate. A task behind the head
//! may use a reserved GPU when `now + runtime_estimate_ms` ≤ the shadow time: it
//! is expected to leave before the head could start; or when the GPU, with the
//! task started on it now and never ending, is still expected to fit the head by
//! the shadow time (memory and SM activity): it leaves the head its room (module
//! `shadow`). While the shadow time is known these expected times replace the
//! time-limit rule above: limits are far longer than run times, so by limits a
//! GPU that already had the head's room was filled again and the reservation
//! chased the next GPU to drain (0.3–0.4 points of makespan on `philly_mix_90`).
//! The reservation stays sticky, with one exception: when other GPUs are expected
//! to fit the head strictly sooner than the kept ones (every fit time known),
//! it moves to them. A task backfilled onto a GPU outside the old reservation
//! counts in the new GPUs' fit times, so the move never expects a later start;
//! keeping GPUs that a finishing neighbour has overtaken only left the head
//! waiting (0.2–0.35 points of makespan on the reference traces).
//!
//! **Effective free memory** of a GPU = `memory_free_mib` − memory in flight
//! − the memory of tasks placed on it earlier in the same decision. A running
//! task is *in flight* for `in_flight_grace_ms` after its launch; during that
//! time it reserves `max(0, requirement − observed)` on each of its GPUs.
//! Requirements and observations are per GPU. A task with no memory figure is
//! assumed to need `margin_without_figure_mib`, the same headroom the gate
//! demanded to place it. This replaces the original's 30–60 s sleeps, so
//! several placements per tick are safe.
//!
//! **Idle GPU**: no running carma task, nothing placed on it in this decision,
//! and `memory_total − memory_free − memory_reserved ≤ idle_used_mib_max`
//! (foreign processes make a GPU busy; the driver's own reservation does not).
//!
//! **Targets.** A [`GpuView`] is a whole GPU or one MIG instance
//! ([`GpuView::mig`], named `GPU1/mig2` in reasons, with its parent's index);
//! the caller never passes a GPU with MIG on as a whole. A target with
//! [`GpuView::unavailable`] (a lost or failing GPU) is never placed on, under
//! any policy; reasons list such GPUs together by cause ("GPU2, GPU5
//! unavailable: lost (...)"). A MIG instance takes only one-GPU tasks (CUDA
//! shows a process one MIG device); a task with a `mig_profile` takes only
//! instances of that profile; a task that can never find enough such targets
//! gets a reason saying so and does not block the queue. Otherwise instances
//! pass the same gates as GPUs.
//!
//! **Whole GPUs.** A task whose figure plus `margin_with_figure_mib` exceeds
//! the memory of all but fewer GPUs than it asks for can never pass the shared
//! memory gate on enough GPUs; it takes idle GPUs (lowest index, not marked
//! exclusive) even without `exclusive_first`, and as the backfill head it waits
//! for idle GPUs. Without this, such a task starved (issue 13).
//!
//! **Exclusive first.** When `exclusive_first` is on and a task finds at least
//! `gpus` idle GPUs, it takes the lowest-index ones without checking memory or
//! SM activity (nobody else is there). An idle MIG instance must still hold
//! the task's memory figure: instances of one GPU differ in size. Such a placement is *not* marked
//! exclusive: later tasks may collocate with it. Only the exclusive policy and
//! exclusive recovery mark placements exclusive, which keeps everyone else off
//! those GPUs while the task runs.
//!
//! **Preconditions** for sharing a GPU: no exclusive task on it; windowed SM
//! activity ≤ `sm_cap`; with `risk_gate`, not (SMACT ≥ 0.8 and (SMOCC ≥ 0.45 or
//! DRAM ≥ 0.40)); effective free ≥ requirement + `margin_with_figure_mib`, or ≥
//! `margin_without_figure_mib` when the task has no figure. A multi-GPU task
//! needs `gpus` GPUs that each pass.
//!
//! **Coarse SM activity.** On GPUs without GPM, `sm_active` is NVML's device
//! or per-process utilisation ([`SmBasis`]); the SM cap and LUG use it as is
//! (it overstates SM activity, so the cap errs on the safe side) and reasons
//! name it: "SmActive 0.86 (device util) > 0.80 on GPU1".
//! **Projected SM gate** (`sm_projected_cap` > 0, replaces the `sm_cap` check):
//! a GPU with carma tasks passes while the standalone SM estimates of its
//! running tasks and of the tasks placed on it earlier in this decision, plus
//! the task's own, sum to at most the cap; a task without an estimate counts as
//! `sm_unknown`. A GPU without carma tasks always passes (`precondition::check_projected`).
//! LUG then ranks by the projected sum.
//!
//! **Unknown metrics.** A GPU whose SM activity is unknown (`None`, e.g. no
//! GPM and no window yet, or a MIG instance) passes the SM cap and the risk gate, as if 0: the
//! memory gate still guards against OOM, and refusing would make such GPUs
//! unshareable. The placement reason says "SmActive unknown", and LUG ranks
//! unknown GPUs after every GPU with a known value. Non-finite values count
//! as unknown.
//!
//! **Picks.** exclusive: idle GPUs only. round-robin: the next GPUs in a
//! cycle starting at `rr_cursor` (a position in the GPU list sorted by
//! index), skipping only GPUs with an exclusive task or reserved for the head;
//! like the paper's RR it checks neither memory nor SM activity; the cursor
//! moves past the last GPU taken. magm: most effective free memory. lug:
//! lowest SM activity. mug: least effective free memory that still fits.
//! first-fit: lowest index. Ties go to the lowest index; a multi-GPU task
//! takes the best `gpus` passing GPUs.
//!
//! **Recovery.** Recovery tasks use `Recovery::requirement_mib` as their
//! requirement. Exclusive mode: idle GPU(s), lowest index, placed exclusive.
//! Looser mode: GPUs passing the SM cap (and risk gate, when on) with
//! effective free ≥ requirement + `recovery.step_mib`, most free first; else
//! idle GPU(s), placed exclusive.
//!
//! **Known limits.** Without the projected gate, a placement made in this
//! decision does not raise the GPU's SM activity (its load is unknown until
//! sampled), so only the memory gate spreads several placements of one tick;
//! LUG may stack them on the least active GPU until its memory is taken. Run-time
//! estimates are guesses: a backfilled task that overruns its estimate delays
//! the head by its overrun. `sample_age_ms` is not judged
//! here: refusing a stale view is the caller's decision.
//!
//! **Limits.** At most `placements_per_tick_max` placements; tasks past it get
//! "placement limit per tick reached". `decide` is O(waiting × gpus · log gpus).
//! Every waiting task ends up in exactly one of placements, pending and
//! cancellations.

mod bench;
mod clock;
mod config;
mod decide;
mod enforce;
mod evidence;
mod gate;
mod order;
mod policy;
mod precondition;
mod preempt;
mod reason;
mod recovery;
mod reservation;
mod shadow;
mod table;
mod window;

#[cfg(test)]
mod tests;

pub use bench::{BENCH_NOW_MS, bench_fixture};
pub use config::{
    FairShareConfig, ParseNameError, Policy, RecoveryConfig, RecoveryMode, SchedConfig, UserLimits, bad_value,
};
pub use decide::decide;
pub use enforce::{AttemptUse, GpuUse, OverShare, over_share};
pub use evidence::{GpuAtEnd, MemoryAtEnd, OomJudgement, SupervisorAtEnd, judge_oom};
pub use gate::{
    ArraySlot, Cancellation, Dependency, DependencyKind, DependencyState, GateInput, Reservation,
    RunningGate, TaskGate, UserUsage,
};
pub use order::{
    ExpectedRun, HEAD_START_MS_DEFAULT, OVERTAKE_MAX_MS_DEFAULT, OrderConfig, RunSource, SizeOrder,
    decayed_gpu_ms, queue_order, size_note,
};
pub use preempt::{
    PreemptInput, Preemptible, Preemption, PreemptionConfig, PreemptionMode, Suspended, Victim, held_room,
    may_resume, preempt, without_victims,
};
pub use recovery::{RecoveryDecision, on_oom};
pub use reservation::{GpuReservation, ReservedGpus, Resolved, gpu_list, resolve};
pub use table::GpuName;
pub use window::{WINDOW_MS_DEFAULT, WindowSample, window};

/// One placement target as the scheduler sees it (a GPU, or a MIG instance):
/// latest memory, windowed activity, whether it can take work.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuView {
    /// Stable identity, also what `CUDA_VISIBLE_DEVICES` gets.
    pub uuid: String,
    /// NVML index; orders GPUs and names them in reasons ("GPU1").
    pub index: u32,
    /// Total memory.
    pub memory_total_mib: u64,
    /// Free memory in the newest sample.
    pub memory_free_mib: u64,
    /// Mean SM activity over the window, 0..1; `None` when unknown.
    pub sm_active: Option<f32>,
    /// Mean SM occupancy over the window, 0..1; `None` when unknown.
    pub sm_occupancy: Option<f32>,
    /// Mean DRAM activity over the window, 0..1; `None` when unknown.
    pub dram_active: Option<f32>,
    /// Age of the newest sample at `now`.
    pub sample_age_ms: u64,
    /// Memory the driver reserves for itself in the newest sample (0 when
    /// unknown): counted in `total − free` but used by no process, so the idle
    /// test leaves it out.
    pub memory_reserved_mib: u64,
    /// What `sm_active` measures: SM activity proper, or a coarser stand-in.
    pub sm_basis: SmBasis,
    /// `Some` when this target is a MIG instance (its `uuid` is the MIG
    /// device's, its `index` the parent GPU's).
    pub mig: Option<MigTarget>,
    /// `Some(why)` when the GPU cannot take work now (lost, XID error,
    /// unreadable, MIG on without instances): never placed on, and pending
    /// reasons name it as `GPU2 unavailable: why`.
    pub unavailable: Option<String>,
}

/// What [`GpuView::sm_active`] was derived from. Only the two coarse sources
/// are named in reasons ("SmActive 0.86 (device util)").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SmBasis {
    /// Fraction of SMs busy (GPM, a fake file, the simulator).
    #[default]
    Measured,
    /// NVML's device utilisation ("a kernel was running"): an upper bound of
    /// SM activity on GPUs without GPM.
    DeviceUtil,
    /// The sum of NVML's per-process SM utilisation, on GPUs without GPM.
    ProcessUtil,
}

/// A placement target that is one MIG instance of a physical GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigTarget {
    /// The instance's slot on its parent; reasons name it `GPU1/mig2`.
    pub slot: u32,
    /// The GPU instance profile, e.g. `1g.10gb`; `None` when unknown.
    pub profile: Option<String>,
}

/// A task waiting in the main queue or the recovery queue.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitingTask {
    /// Task id (time-ordered).
    pub id: String,
    /// Position in submission order; the FIFO key.
    pub submit_seq: u64,
    /// How many GPUs the task needs.
    pub gpus: u32,
    /// Memory per GPU the policy may use (declared, or an estimate's upper
    /// bound); `None` when there is no figure.
    pub requirement_mib: Option<u64>,
    /// `Some` puts the task in the recovery queue.
    pub recovery: Option<Recovery>,
    /// Owner, priority, hold, dependencies, array cap (see `gate`).
    pub gate: TaskGate,
    /// `Some(profile)`: only MIG instances of this profile (e.g. `1g.10gb`)
    /// may take the task. `None`: any GPU without MIG, or (for a one-GPU
    /// task) any MIG instance that passes the same gates.
    pub mig_profile: Option<String>,
    /// Submission time, for the size-aware order's bounded delay.
    pub submitted_ms: u64,
    /// Standalone SM activity the task is expected to add, 0..1 (learned from earlier runs
    /// of its workload); `None`: unknown, `sm_unknown` is assumed.
    pub sm_estimate: Option<f32>,
    /// Expected run time (learned from earlier runs, or from the declared time limit);
    /// `None`: unknown.
    pub runtime_estimate_ms: Option<u64>,
    /// Expected run time for the queue order (`[sched.order]`): `runtime_estimate_ms` with its
    /// source, else a prior from finished tasks as wide; `None`: nothing known. Only the size
    /// order reads it, so that with the order off every decision is as before.
    pub expected_run: Option<ExpectedRun>,
}

/// Why and how a task is in the recovery queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Out-of-memory failures so far.
    pub oom_count: u32,
    /// The raised requirement per GPU (already includes the step).
    pub requirement_mib: u64,
    /// Exclusive or looser.
    pub mode: RecoveryMode,
}

/// A task that holds GPUs now.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningTask {
    /// Task id.
    pub id: String,
    /// UUIDs of its GPUs.
    pub gpus: Vec<String>,
    /// Memory per GPU it was placed with; `None` when it had no figure.
    pub requirement_mib: Option<u64>,
    /// Launch time.
    pub launched_ms: u64,
    /// Peak process memory per GPU observed so far.
    pub observed_mib: Option<u64>,
    /// Placed exclusive: nobody may share its GPUs.
    pub exclusive: bool,
    /// Owner and array, for the caps.
    pub gate: RunningGate,
    /// Standalone SM activity, 0..1 (measured on this attempt, or learned from earlier runs);
    /// `None`: unknown, `sm_unknown` is assumed.
    pub sm_estimate: Option<f32>,
    /// Expected run time from launch; `None`: unknown.
    pub runtime_estimate_ms: Option<u64>,
}

/// Everything one decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct SchedInput<'a> {
    /// The time of the decision.
    pub now_ms: u64,
    /// Windowed GPU view (see [`window`]).
    pub gpus: &'a [GpuView],
    /// Waiting tasks, in any order.
    pub waiting: &'a [WaitingTask],
    /// Running tasks (including launched-but-not-yet-observed ones).
    pub running: &'a [RunningTask],
    /// Round-robin cursor returned by the previous decision.
    pub rr_cursor: u32,
    /// Configuration.
    pub config: &'a SchedConfig,
    /// Usage per user and the previous reservation.
    pub gate: GateInput<'a>,
}

/// The outcome of one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Tasks to launch, in queue order.
    pub placements: Vec<Placement>,
    /// One entry per waiting task not placed, in queue order.
    pub pending: Vec<Pending>,
    /// Round-robin cursor for the next decision.
    pub rr_cursor: u32,
    /// Tasks cancelled because a dependency can never be met, in queue order.
    pub cancellations: Vec<Cancellation>,
    /// The GPUs kept for the blocked head (backfill only).
    pub reservation: Option<Reservation>,
    /// The blocked head: the first task in queue order that was tried and did not fit.
    pub head: Option<String>,
}

/// Start this task on these GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Task id.
    pub task_id: String,
    /// GPU UUIDs, each at most once.
    pub gpus: Vec<String>,
    /// Nobody may share these GPUs while the task runs.
    pub exclusive: bool,
    /// Memory per GPU the decision assumed (recovery: the raised figure).
    pub requirement_mib: Option<u64>,
    /// Plain words: why these GPUs.
    pub reason: String,
}

/// A task left waiting, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Task id.
    pub task_id: String,
    /// Plain words: why it waits.
    pub reason: String,
}
