//! The shapes carma 0.5 added (host limits, preemption, reservations, interactive sessions).
//! Frozen.

use serde::{Deserialize, Serialize};

/// What a submission says beyond [`SpecV2`](super::SpecV2), [`TimingV3`](super::TimingV3) and
/// [`MailV4`](super::MailV4): its host limits, whether it may be preempted, the reservation it
/// names and, for `carma alloc`/`carma run`, how it is attached. Carried by `SubmittedV5`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtrasV5 {
    /// Host memory for the whole job, MiB (Slurm's `--mem`); frozen.
    pub host_mem_mib: Option<u64>,
    /// CPUs for the whole job (Slurm's `-c` × `--ntasks`); frozen.
    pub cpus: Option<u32>,
    /// `--requeue` (true), `--no-requeue` (false), or the administrator's default; frozen.
    pub requeue: Option<bool>,
    /// The reservation the task runs in (`--reservation`); frozen.
    pub reservation: Option<String>,
    /// `alloc`, `run` or `hold` for an interactive session; `None` for a batch task; frozen.
    pub interactive: Option<String>,
}
