//! Command-line definitions (clap). Only this module and `commands` know clap.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// carma: a collocation-aware GPU resource manager for deep-learning training.
///
/// Run with no command for a self-contained demo.
#[derive(Debug, Parser)]
#[command(name = "carma", version, about, long_about = None)]
pub struct Cli {
    /// State directory [default: /var/lib/carma as root, ~/.local/share/carma otherwise]
    #[arg(long, global = true, env = "CARMA_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// Longest wait for the state lock before giving up with exit code 75
    #[arg(long, global = true, env = "CARMA_LOCK_TIMEOUT", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub lock_timeout: std::time::Duration,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the state directory: journal, spool/, runs/, config.toml and the lock file
    Init,
    /// Queue a task from a TOML spec, a .rad file, or flags and a command after `--`
    Submit(Box<SubmitArgs>),
    /// Ingest the spool, reconcile running tasks and place waiting ones (run by a timer)
    Tick(TickArgs),
    /// List tasks with their state and pending reason
    Queue(QueueArgs),
    /// Show everything known about one task
    Show(ShowArgs),
    /// Dump the journal
    Events(EventsArgs),
    /// Cancel a task
    Cancel(CancelArgs),
    /// Run one attempt of a task under supervision (started by the tick, detached)
    RunTask(RunTaskArgs),
    /// Print the systemd units (tick service, 5 s timer, MPS daemon), or install them
    Systemd(SystemdArgs),
    /// Measure carma's own speed (medians, side by side with the fsync floor)
    Bench(BenchArgs),
    /// Estimate a training task's GPU memory from a model summary, and show how
    Estimate(EstimateArgs),
    /// Simulate a trace: the real tick against simulated GPUs on a virtual clock
    Simulate(Box<SimulateArgs>),
    /// Metrics from journals: makespan, waiting, JCT, energy, OOMs; several side by side
    Report(ReportArgs),
    /// Traces for the simulator
    Trace(TraceArgs),
    /// Submit a trace in real time (offset / speedup) through the spool, as real tasks
    Replay(Box<ReplayArgs>),
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Trace CSV (offset_s,workload)
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,
    /// Workload profiles CSV (the format of workload_profiles.csv)
    #[arg(long, value_name = "FILE")]
    pub profiles: PathBuf,
    /// Divide the trace's offsets and the {minutes} placeholder by this
    #[arg(long, default_value_t = 1.0)]
    pub speedup: f64,
    /// Declared memory per task from the profile: actual, horus, faketensor, gpumemnet or none
    #[arg(long, default_value = "actual", value_name = "FIGURE")]
    pub memory: String,
    /// Working directory of the tasks [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Retries after out-of-memory or lost attempts [default: the spec default]
    #[arg(long)]
    pub max_retries: Option<u32>,
    /// Print the submissions (time, task, argv) without waiting or submitting
    #[arg(long)]
    pub dry_run: bool,
    /// Print only the task ids
    #[arg(long)]
    pub parsable: bool,
    /// The command template after `--`, one argv; {workload}, {model}, {batch_size},
    /// {minutes} and {mem_mib} are replaced in each argument (no shell)
    #[arg(last = true, value_name = "TEMPLATE")]
    pub template: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Trace CSV (offset_s,workload)
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,
    /// Workload profiles CSV (the format of workload_profiles.csv)
    #[arg(long, value_name = "FILE")]
    pub profiles: PathBuf,
    /// The simulated GPUs, COUNTxNAME-MEMGB
    #[arg(long, default_value = "4xA100-40GB")]
    pub gpus: String,
    /// Collocation policy (overrides the config): exclusive, round-robin, magm, lug, mug, first-fit
    #[arg(long)]
    pub policy: Option<String>,
    /// Memory figure the scheduler sees: oracle, horus, faketensor, gpumemnet-paper or none
    #[arg(long, default_value = "oracle")]
    pub estimator: String,
    /// How jobs share a GPU: streams or mps
    #[arg(long, default_value = "streams")]
    pub sharing: String,
    /// Time between ticks
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub tick: std::time::Duration,
    /// Seed for task ids and faults
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where to leave the journal (a redb file; replaced if it exists)
    #[arg(long, value_name = "OUT")]
    pub journal: PathBuf,
    /// Model parameters [default: the compiled-in ones, documented in traces/sim-model.toml]
    #[arg(long, value_name = "FILE")]
    pub model: Option<PathBuf>,
    /// A carma config.toml for the scheduler ([sched], [sched.recovery], [tick] window)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Faults per tick, e.g. crash:0.02,lost-exit:0.01,reboot:0.002
    #[arg(long, default_value = "none")]
    pub faults: String,
    /// Under MPS, do not hold jobs to their pinned memory limit (the original system set none)
    #[arg(long)]
    pub no_mps_caps: bool,
    /// Emulate the original scheduler's sleep after each placement, e.g. 60s
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub placement_pause: std::time::Duration,
    /// Relaunches allowed per task after OOM or loss
    #[arg(long, default_value_t = 10)]
    pub max_retries: u32,
    /// Print only the summary, not the report
    #[arg(long, short)]
    pub quiet: bool,
    /// Where the scratch state directory goes [default: /dev/shm when present, else next to --journal]
    #[arg(long, value_name = "DIR")]
    pub scratch: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A journal file or state directory (repeat to compare)
    #[arg(long = "journal", value_name = "PATH", required = true)]
    pub journals: Vec<PathBuf>,
    /// A name per journal, in order [default: the file name without extension]
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// The label (or 1-based position) the ratios compare against [default: the first]
    #[arg(long)]
    pub baseline: Option<String>,
    /// Machine-readable output (schema/report.schema.json)
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// CSV output, one row per journal
    #[arg(long)]
    pub csv: bool,
    /// Also write SVG figures into DIR
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub what: TraceWhat,
}

#[derive(Debug, Subcommand)]
pub enum TraceWhat {
    /// Write a synthetic trace with Philly-like arrivals and a light/medium/heavy mix
    Gen {
        /// Workload profiles CSV to draw workloads from
        #[arg(long, value_name = "FILE")]
        profiles: PathBuf,
        /// Number of tasks
        #[arg(long, default_value_t = 90)]
        tasks: u32,
        /// Mean time between submissions
        #[arg(long, default_value = "141s", value_parser = parse_duration)]
        mean_gap: std::time::Duration,
        /// Class weights, light:W,medium:W,heavy:W
        #[arg(long, default_value = "light:56,medium:26,heavy:8")]
        mix: String,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output CSV (offset_s,workload)
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct EstimateArgs {
    /// Model summary: summary JSON, torchsummary text, a module dump with "N params", or a
    /// GPUMemNet Activations-Params list
    #[arg(long, value_name = "FILE")]
    pub summary: PathBuf,
    /// Training batch size [default: the summary's]
    #[arg(long)]
    pub batch_size: Option<u32>,
    /// oracle, horus, gpumemnet, carma, or all
    #[arg(long, default_value = "all", value_name = "NAME")]
    pub estimator: String,
    /// Declared memory per GPU in MiB, for the oracle
    #[arg(long, value_name = "MIB")]
    pub memory_mib: Option<u64>,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunTaskArgs {
    /// Task id
    pub id: String,
    /// Attempt number (from 1)
    #[arg(long)]
    pub attempt: u32,
}

#[derive(Debug, Args)]
pub struct SystemdArgs {
    /// Write the unit files instead of printing them
    #[arg(long)]
    pub install: bool,
    /// Where --install writes
    #[arg(long, value_name = "DIR", default_value = "/etc/systemd/system")]
    pub unit_dir: PathBuf,
    /// The carma binary the units run [default: this binary]
    #[arg(long, value_name = "PATH")]
    pub exe: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Debug, Subcommand)]
pub enum BenchWhat {
    /// Submit latency, ingest of 1,000 spool files, batched appends, fold of a large journal
    Journal {
        /// Events in the large journal that is folded
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Scratch directory (on the disk you want measured) [default: a temp dir]
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Decision time of one tick as the queue grows (no GPU sampling)
    Tick {
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Estimation latency per estimator (median µs per estimate, process start excluded)
    Estimate {
        /// Estimates timed per estimator
        #[arg(long, default_value_t = 2000)]
        iterations: u32,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Simulation speed: reference traces, per-tick cost as the queue grows, report time
    Sim {
        /// Directory with the reference traces (skipped when missing)
        #[arg(long, value_name = "DIR", default_value = "../shared/traces")]
        shared: PathBuf,
        /// Tasks in the synthetic trace (16 simulated GPUs)
        #[arg(long, default_value_t = 10_000)]
        tasks: u32,
        /// Mean gap between the synthetic trace's submissions (short, so a queue builds)
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        mean_gap: std::time::Duration,
        /// Events in the journal `carma report` is timed on
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Runs per measurement (the median is reported)
        #[arg(long, default_value_t = 3)]
        runs: u32,
        /// Scratch directory [default: /dev/shm when present, else a temp dir]
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Internal: fold a journal and print this process's peak RSS in MiB
    #[command(hide = true)]
    FoldChild { home: PathBuf },
    /// Internal: simulate a trace and print the wall seconds and this process's peak RSS in MiB
    #[command(hide = true)]
    SimChild { trace: PathBuf, profiles: PathBuf, scratch: PathBuf },
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Task spec in TOML (see schema/task-spec.schema.json)
    #[arg(value_name = "SPEC", conflicts_with = "rad")]
    pub spec: Option<PathBuf>,
    /// Task in the original system's .rad format
    #[arg(long, value_name = "FILE")]
    pub rad: Option<PathBuf>,
    /// Task name (flag form)
    #[arg(long)]
    pub name: Option<String>,
    /// GPUs the task needs (flag form)
    #[arg(long, allow_negative_numbers = true)]
    pub gpus: Option<i64>,
    /// Declared GPU memory per GPU, e.g. 12GiB (flag form)
    #[arg(long)]
    pub mem: Option<String>,
    /// Working directory [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Environment variable for the job, NAME=VALUE (repeatable)
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Model summary for the memory estimators
    #[arg(long, value_name = "FILE")]
    pub model_summary: Option<PathBuf>,
    /// Batch size for the memory estimators
    #[arg(long, allow_negative_numbers = true)]
    pub batch_size: Option<i64>,
    /// Retries after out-of-memory or lost attempts
    #[arg(long, allow_negative_numbers = true)]
    pub max_retries: Option<i64>,
    /// Wall-clock limit per attempt, e.g. 2h
    #[arg(long)]
    pub time_limit: Option<String>,
    /// Print only the task id
    #[arg(long)]
    pub parsable: bool,
    /// The command to run, after `--` (flag form)
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct TickArgs {
    /// Print what the tick did
    #[arg(long, short)]
    pub verbose: bool,
}

#[derive(Debug, Args)]
pub struct QueueArgs {
    /// Include finished, failed, cancelled and rejected tasks
    #[arg(long)]
    pub all: bool,
    /// Machine-readable output (schema/queue.schema.json)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Task id (or a unique prefix of at least 4 characters)
    pub id: String,
    /// Machine-readable output (schema/task.schema.json)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only events with a sequence number of at least SEQ
    #[arg(long, value_name = "SEQ", default_value_t = 1)]
    pub since: u64,
    /// Only events about this task
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// JSON Lines output, one event per line (schema/event.schema.json)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Task id (or a unique prefix of at least 4 characters)
    pub id: String,
    /// File a cancel request for the next tick instead of writing the journal (the default
    /// for users who cannot write the journal; needs the full task id)
    #[arg(long)]
    pub request: bool,
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e}; use e.g. 10s or 500ms"))
}
