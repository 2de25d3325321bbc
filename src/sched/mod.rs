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
//! **Queue order.** The recovery queue (tasks with [`WaitingTask::recovery`])
//! comes first, then the FIFO main queue; each by `submit_seq`, ties by id.
//! The caller may pass waiting tasks in any order.
//!
//! **Strict FIFO** (default). When the first task in queue order cannot be
//! placed, nobody behind it is placed; they get "queued behind ID (strict
//! FIFO)". A task that asks for 0 GPUs or for more GPUs than the machine has
//! can never run: it gets a reason saying so and does not block the queue.
//!
//! **Backfill** (`backfill = true`, EASY-style). The first task that cannot be
//! placed (the *head*) gets a reservation of `gpus` GPUs, chosen among GPUs
//! with no exclusive task: for a head that needs idle GPUs (recovery in
//! exclusive mode, or the exclusive policy) the GPUs with the fewest carma
//! tasks, then least memory used, then lowest index; for any other head the
//! GPUs with the most effective free memory, then lowest index. Later tasks
//! may start, but never on a reserved GPU, so in this decision they take none
//! of the memory, SM time or idleness the head is waiting for and cannot
//! delay it. Only the head gets a reservation; later blocked tasks may be
//! overtaken. The reservation is recomputed every tick. At most
//! `backfill_depth_max` tasks behind the head are tried, which bounds the work.
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
//! and `memory_total − memory_free ≤ idle_used_mib_max` (foreign processes
//! make a GPU busy).
//!
//! **Exclusive first.** When `exclusive_first` is on and a task finds at least
//! `gpus` idle GPUs, it takes the lowest-index ones without checking memory or
//! SM activity (nobody else is there). Such a placement is *not* marked
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
//! **Unknown metrics.** A GPU whose SM activity is unknown (`None`, e.g. no
//! GPM and no window yet) passes the SM cap and the risk gate, as if 0: the
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
//! **Known limits.** A placement made in this decision does not raise the
//! GPU's SM activity (its load is unknown until sampled), so only the memory
//! gate spreads several placements of one tick; LUG may stack them on the
//! least active GPU until its memory is taken. `sample_age_ms` is not judged
//! here: refusing a stale view is the caller's decision.
//!
//! **Limits.** At most `placements_per_tick_max` placements; tasks past it get
//! "placement limit per tick reached". `decide` is O(waiting × gpus · log gpus).

mod bench;
mod config;
mod decide;
mod policy;
mod precondition;
mod reason;
mod recovery;
mod table;
mod window;

#[cfg(test)]
mod tests;

pub use bench::{BENCH_NOW_MS, bench_fixture};
pub use config::{ParseNameError, Policy, RecoveryConfig, RecoveryMode, SchedConfig};
pub use decide::decide;
pub use recovery::{RecoveryDecision, on_oom};
pub use window::{WINDOW_MS_DEFAULT, WindowSample, window};

/// One GPU as the scheduler sees it: latest memory, windowed activity.
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
}

/// A task waiting in the main queue or the recovery queue.
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
