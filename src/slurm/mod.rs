//! carma on Slurm: Slurm places jobs across servers; carma supplies each job's GPU memory
//! figure and acts as the agent on every node. There is no carma scheduler across machines.
//!
//! A GPU is split into Slurm shards of a fixed size (`shard_mib`), so a shard count is an
//! amount of memory. `carma sbatch` and `job_submit.lua` turn a job's declared memory or
//! model summary into a shard request; the node's TaskProlog caps the job at its share under
//! MPS; the Prolog and Epilog journal every job in the node's carma journal, and the Epilog
//! requeues a job that ran out of memory with a larger share, when carma's own readings of the
//! job's memory (its node watcher's, the journal's) corroborate its out-of-memory line. `carma report` reads those
//! journals like any other. The guide is `src/slurm/README.md`.
//!
//! Like the tick, the module is split into pure parts and edges:
//! - pure: `comment` (the `carma:` job comment), `shards` (arithmetic and gres lines),
//!   `scontrol` (reading Slurm's output without being fooled by user text), `records` (the
//!   journal records of a start and an end, the requeue decision, the TaskProlog's exports),
//!   `submit` (the sbatch command line), `setup` (hook scripts and `job_submit.lua`),
//!   `squeue` (reading `squeue --json`, Slurm's state codes), `cluster` (the login node's one
//!   view: node journals merged with squeue);
//! - edges: `request` (reads a summary and runs the estimator), `command` (runs Slurm's
//!   commands through `duct`, argv only, bounded in time; detaches `follow`), `hooks`
//!   (the Prolog and Epilog bodies: environment, scontrol, GPU probe, lock), `follow` (the
//!   Epilog's detached follower: Slurm's final state, requeue, restarts), `output` (where a
//!   run's output starts), `journals` (where a login node finds the node journals: flag,
//!   `CARMA_JOURNALS`, or the system config's `[slurm] journals`), `watch` (the root watcher
//!   the Prolog leaves beside a job: carma's own readings of its GPU memory, which the Epilog
//!   weighs its out-of-memory line against).
//!
//! Invariant: a task with a SlurmPlaced event belongs to Slurm. The tick never places,
//! launches, reconciles or cancels it (`State::waiting` and `tick::reconcile` skip it), and
//! only the node's hooks journal its attempts.

pub mod cluster;
pub mod command;
pub mod comment;
pub mod follow;
pub mod hooks;
pub mod journals;
pub mod output;
pub mod records;
pub mod request;
pub mod scontrol;
pub mod setup;
pub mod shards;
pub mod squeue;
pub mod submit;
pub mod watch;

pub use comment::CarmaComment;
pub use shards::{MARGIN_MIB_DEFAULT, SHARD_MIB_DEFAULT, ShardRule};

#[cfg(test)]
mod tests;
