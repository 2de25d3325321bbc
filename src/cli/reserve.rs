//! `carma reserve`'s arguments: administrators' GPU reservations, as Slurm's
//! `scontrol create reservation`.

use clap::{Args, Subcommand};

/// `carma reserve`'s arguments.
#[derive(Debug, Args)]
pub struct ReserveArgs {
    /// What to do with reservations.
    #[command(subcommand)]
    pub command: ReserveCommand,
}

/// `carma reserve`'s verbs.
#[derive(Debug, Subcommand)]
pub enum ReserveCommand {
    /// Hold GPUs for a window, for some users' tasks that name it (administrators only)
    Create(ReserveCreateArgs),
    /// List reservations: window, GPUs, users, and whether each can be honoured
    List(ReserveListArgs),
    /// Delete a reservation (administrators only); tasks naming it stay queued
    Delete(ReserveDeleteArgs),
}

/// `carma reserve create`'s arguments.
#[derive(Debug, Args)]
pub struct ReserveCreateArgs {
    /// Its name, which tasks give with `--reservation NAME`
    #[arg(long)]
    pub name: String,
    /// How many GPUs it holds (the lowest-index available ones when the window comes)
    #[arg(long, value_name = "N", required_unless_present = "gpu", conflicts_with = "gpu")]
    pub gpus: Option<u32>,
    /// Which GPUs it holds, by index: 0,1
    #[arg(long, value_name = "INDEX,...", value_delimiter = ',')]
    pub gpu: Vec<u32>,
    /// Start of the window: 2026-12-03T09:00, 14:30 (local time), now, now+1hour, or RFC 3339
    #[arg(long, value_name = "TIME")]
    pub start: String,
    /// Length of the window: 2d, 12h, 90m, or Slurm's 2-00:00:00
    #[arg(long, value_name = "DURATION")]
    pub duration: String,
    /// The users whose tasks may run in it: alice,bob (names or uids)
    #[arg(long, value_name = "USER,...", value_delimiter = ',', required = true)]
    pub users: Vec<String>,
}

/// `carma reserve list`'s arguments.
#[derive(Debug, Args)]
pub struct ReserveListArgs {
    /// Machine-readable output (schema/reservations.schema.json)
    #[arg(long)]
    pub json: bool,
}

/// `carma reserve delete`'s arguments.
#[derive(Debug, Args)]
pub struct ReserveDeleteArgs {
    /// The reservation's name
    pub name: String,
}
