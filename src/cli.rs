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

/// Shown after `carma submit --help`.
const SUBMIT_EXAMPLES: &str = "Examples:
  carma submit --gpus 1 --mem 12GiB -- python train.py --bs 64
  carma submit job.toml --after @ --priority 0          (spec file plus workflow flags)
  carma submit train.sh arg1                            (job script with #CARMA lines)
  carma submit --after @ -- python eval.py              (after your latest submission succeeds)
  carma submit --array 0-9%2 -- python train.py         (10 tasks, at most 2 at once)
  carma submit --param lr=0.001,0.01 --name-template 'lr{lr}' -- python train.py --lr {lr}
The README's \"Workflow\" section explains each flag.";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the state directory: journal, spool/, runs/, config.toml and the lock file
    Init(InitArgs),
    /// Queue a task (or an array or sweep) from a TOML spec, a job script, a .rad file, or flags
    /// and a command after `--`
    #[command(after_help = SUBMIT_EXAMPLES)]
    Submit(Box<SubmitArgs>),
    /// Ingest the spool, reconcile running tasks and place waiting ones (run by a timer)
    Tick(TickArgs),
    /// List tasks with their state and pending reason
    Queue(QueueArgs),
    /// List GPUs and MIG instances: memory, SM activity, power, health, tasks
    Gpus(GpusArgs),
    /// Show everything known about one task
    Show(ShowArgs),
    /// Dump the journal
    Events(EventsArgs),
    /// Cancel tasks (yours; root: anyone's; an array id cancels every member)
    Cancel(CancelArgs),
    /// Keep waiting tasks from starting until released
    Hold(HoldArgs),
    /// Let held tasks start again
    Release(HoldArgs),
    /// Change a waiting task's priority, memory, time limit or GPU count
    Update(UpdateArgs),
    /// Print a task's output (yours; root: anyone's); -f follows it until the attempt ends
    Logs(LogsArgs),
    /// Wait until tasks end; exit 0 when all finished, 1 when one failed or was cancelled
    Wait(WaitArgs),
    /// Print shell completions: carma completions bash > /etc/bash_completion.d/carma
    Completions(CompletionsArgs),
    /// Print the man page (roff); `carma systemd --install` installs it
    Man,
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
    /// Submit a Slurm batch job whose GPU share (shards) comes from its memory figure
    Sbatch(Box<SbatchArgs>),
    /// carma on Slurm: node setup, shard counts, and the hooks slurmd runs
    Slurm(SlurmArgs),
    /// Verify the journal, or copy what is readable of a damaged one into a new journal
    Journal(JournalArgs),
}

/// The cluster-wide shard size and margin; every node, `job_submit.lua` and `carma sbatch`
/// must use the same values.
#[derive(Debug, Clone, Copy, Args)]
pub struct ShardArgs {
    /// GPU memory of one Slurm shard, MiB
    #[arg(long, env = "CARMA_SHARD_MIB", default_value_t = crate::slurm::SHARD_MIB_DEFAULT, value_name = "MIB")]
    pub shard_mib: u64,
    /// Memory kept above a job's figure, MiB (carma's margin-with-figure-mib)
    #[arg(long, env = "CARMA_MARGIN_MIB", default_value_t = crate::slurm::MARGIN_MIB_DEFAULT, value_name = "MIB")]
    pub margin_mib: u64,
}

#[derive(Debug, Args)]
pub struct SbatchArgs {
    /// Declared GPU memory per GPU, e.g. 12GiB (`--mem` is sbatch's host memory)
    #[arg(long, value_name = "SIZE")]
    pub gpu_mem: Option<String>,
    /// Model summary; carma's estimate (upper bound) sets the share
    #[arg(long, value_name = "FILE")]
    pub model_summary: Option<PathBuf>,
    /// Batch size for the estimate [default: the summary's]
    #[arg(long)]
    pub batch_size: Option<u32>,
    /// Out-of-memory requeues allowed [default: 3]
    #[arg(long)]
    pub max_retries: Option<u32>,
    #[command(flatten)]
    pub shards: ShardArgs,
    /// Shards one GPU holds [default: asked from sinfo]
    #[arg(long, value_name = "N")]
    pub shards_per_gpu: Option<u32>,
    /// Print the sbatch command (and its script) instead of running it
    #[arg(long)]
    pub dry_run: bool,
    /// Print only the job id
    #[arg(long)]
    pub parsable: bool,
    /// sbatch's own options (carma's may come among them), then `--` and the command: a
    /// batch script and its arguments, or any program (run without a shell)
    #[arg(allow_hyphen_values = true, value_name = "SBATCH_OPTION")]
    pub sbatch_options: Vec<String>,
    /// The command, after `--`
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SlurmArgs {
    #[command(subcommand)]
    pub what: SlurmWhat,
}

#[derive(Debug, Subcommand)]
pub enum SlurmWhat {
    /// Print this node's gres.conf lines and the Gres= of its slurm.conf NodeName line
    Gres {
        /// GPUs: nvml, or fake:FILE [default: the config's [tick] gpus]
        #[arg(long, value_name = "SPEC")]
        gpus: Option<String>,
        /// The node's name in slurm.conf [default: this host's short name]
        #[arg(long)]
        node: Option<String>,
        /// Where the GPUs' device files are
        #[arg(long, value_name = "DIR", default_value = "/dev")]
        dev_dir: String,
        #[command(flatten)]
        shards: ShardArgs,
        /// Machine-readable output (schema/slurm-gres.schema.json)
        #[arg(long)]
        json: bool,
    },
    /// The shard count for a memory figure, as carma sbatch and job_submit.lua compute it
    Shards {
        /// Declared GPU memory per GPU, e.g. 12GiB
        #[arg(long)]
        mem: Option<String>,
        /// Model summary to estimate
        #[arg(long, value_name = "FILE")]
        model_summary: Option<PathBuf>,
        /// Batch size for the estimate [default: the summary's]
        #[arg(long)]
        batch_size: Option<u32>,
        /// Read the summary only if this user owns it (job_submit.lua passes the submitter)
        #[arg(long, value_name = "UID")]
        owner_uid: Option<u32>,
        /// Refuse a count above this (shards one GPU holds)
        #[arg(long, value_name = "N")]
        shards_per_gpu: Option<u32>,
        #[command(flatten)]
        shards: ShardArgs,
        /// Print `SHARDS NEED_MIB` only (for job_submit.lua)
        #[arg(long, conflicts_with = "json")]
        parsable: bool,
        /// Machine-readable output (schema/slurm-shards.schema.json)
        #[arg(long)]
        json: bool,
    },
    /// Print the Prolog, Epilog and TaskProlog scripts, job_submit.lua and the slurm.conf
    /// lines, or write the files with --install (the scripts use --home, %n = node name)
    Hooks {
        /// Write the files into DIR instead of printing them
        #[arg(long, value_name = "DIR")]
        install: Option<PathBuf>,
        /// Where the files live, for the slurm.conf lines [default: the --install DIR, else /etc/slurm]
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The carma binary the hooks run [default: this binary]
        #[arg(long, value_name = "PATH")]
        exe: Option<PathBuf>,
        /// Shards one GPU holds, for job_submit.lua's refusal [default: this node's count, from --gpus]
        #[arg(long, value_name = "N")]
        shards_per_gpu: Option<u32>,
        /// GPUs to count shards on: nvml, or fake:FILE [default: the config's [tick] gpus]
        #[arg(long, value_name = "SPEC")]
        gpus: Option<String>,
        #[command(flatten)]
        shards: ShardArgs,
    },
    /// Slurm Prolog (run by slurmd as root): journal the job's start on this node
    Prolog {
        #[command(flatten)]
        shards: ShardArgs,
    },
    /// Slurm TaskProlog (run as the job's user): print the job's MPS memory cap as exports
    TaskProlog {
        #[command(flatten)]
        shards: ShardArgs,
    },
    /// Slurm Epilog (run by slurmd as root): journal the end; requeue an out-of-memory job
    /// with more shards
    Epilog {
        #[command(flatten)]
        shards: ShardArgs,
    },
    /// Internal (started by the Epilog): once the job has completed, journal its end as
    /// Slurm recorded it, or finish an out-of-memory requeue; then watch a requeued job
    #[command(hide = true)]
    Follow {
        #[arg(long)]
        job: u32,
        #[arg(long, default_value = "")]
        cluster: String,
        #[arg(long)]
        node: String,
        /// The attempt whose end the Epilog left to the follower
        #[arg(long)]
        attempt: Option<u32>,
        /// Shards of the next run, after an out-of-memory requeue
        #[arg(long, requires = "comment")]
        shards: Option<u32>,
        #[arg(long)]
        comment: Option<String>,
        /// When the run ended (the Epilog's time), Unix ms
        #[arg(long)]
        ended_ms: Option<u64>,
        #[command(flatten)]
        rule: ShardArgs,
    },
}

#[derive(Debug, Args)]
pub struct JournalArgs {
    #[command(subcommand)]
    pub what: JournalWhat,
}

#[derive(Debug, Subcommand)]
pub enum JournalWhat {
    /// Verify every record, the snapshot and redb's pages; exit 3 when damage is found
    Check {
        /// A journal file or state directory [default: the state directory's journal]
        #[arg(long, value_name = "PATH")]
        journal: Option<PathBuf>,
        /// Machine-readable output (schema/journal-check.schema.json)
        #[arg(long)]
        json: bool,
    },
    /// Copy every readable record of a damaged journal into a new journal, and say what was lost
    Salvage {
        /// The new journal (never overwritten)
        #[arg(long, value_name = "NEW")]
        out: PathBuf,
        /// A journal file or state directory [default: the state directory's journal]
        #[arg(long, value_name = "PATH")]
        journal: Option<PathBuf>,
        /// Machine-readable output (schema/journal-salvage.schema.json)
        #[arg(long)]
        json: bool,
    },
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
    /// Where to leave the journal (a redb file; replaced if it exists). With --copies, a
    /// directory that receives run-K.redb and exclusive-K.redb (optional)
    #[arg(long, value_name = "OUT", required_unless_present = "copies")]
    pub journal: Option<PathBuf>,
    /// Simulate K copies of the trace with jittered arrivals, this configuration and the
    /// exclusive baseline on each, and print the mean and spread against exclusive
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub copies: Option<u32>,
    /// With --copies, move each arrival by a uniform offset within plus or minus this
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION", requires = "copies")]
    pub jitter: std::time::Duration,
    /// With --copies, print the evaluation as JSON (schema/simulate-copies.schema.json)
    #[arg(long, requires = "copies")]
    pub json: bool,
    /// Time limits the simulated users declare: (start-up + exclusive run time) times a factor
    /// drawn uniformly in MIN:MAX per task, or none
    #[arg(long, default_value = "1.2:3", value_name = "MIN:MAX")]
    pub time_limits: String,
    /// Stop each job at its declared time limit, as the real supervisor does
    #[arg(long)]
    pub enforce_time_limits: bool,
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
    /// A journal file or state directory (repeat to compare); a directory of those (a
    /// cluster's node journals) stands for each of them [default: the queue's]
    #[arg(long = "journal", value_name = "PATH")]
    pub journals: Vec<PathBuf>,
    /// Only tasks submitted since then (a duration ago, e.g. 24h, or a time such as
    /// 2026-11-01T00:00:00Z), and GPU readings since then
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only this user's tasks (GPU figures stay the machine's)
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// One report over all the journals (the nodes of a cluster) instead of one per journal
    #[arg(long, conflicts_with = "baseline")]
    pub merge: bool,
    /// List every attempt: task, Slurm job, node, GPU, shards, wait, start, end, outcome
    #[arg(long)]
    pub tasks: bool,
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
        /// Submitters and their shares of the tasks, NAME:W[,NAME:W...] (adds a `user`
        /// column; `carma simulate` submits each user's rows as a uid of its own)
        #[arg(long, value_name = "USERS")]
        users: Option<String>,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output CSV (offset_s,workload[,user])
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
    /// Where --install writes the man page carma.1 (the units' Documentation=man:carma(1))
    #[arg(long, value_name = "DIR", default_value = "/usr/local/share/man/man1")]
    pub man_dir: PathBuf,
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
        /// Spool files the burst tick finds at once
        #[arg(long, default_value_t = 4000)]
        burst: u32,
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
    /// A hostile user against an honest one, seed by seed, on real state directories (root)
    Adversary {
        /// Runs, one per seed
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// The first seed; runs take FIRST to FIRST+SEEDS-1
        #[arg(long, default_value_t = 1)]
        first_seed: u64,
        /// Scratch directory [default: /dev/shm when present, else a temp dir]
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Seeded simulations under crash, lost-exit and reboot faults, counting broken invariants
    Faults {
        /// Runs, one per seed
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// The first seed; runs take FIRST to FIRST+SEEDS-1
        #[arg(long, default_value_t = 1)]
        first_seed: u64,
        /// Runs at the same time (threads)
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// Tasks in each run's generated trace (2 simulated A100-40GB)
        #[arg(long, default_value_t = 12)]
        tasks: u32,
        /// Faults per tick (lost-exit: per tick, on a job that ended since the last one)
        #[arg(long, default_value = "crash:0.05,lost-exit:0.3,reboot:0.01")]
        faults: String,
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

/// `carma submit` reads job scripts' `#CARMA` lines with the same flags as its command line.
#[derive(Debug, Parser)]
#[command(name = "#CARMA", no_binary_name = true, disable_help_flag = true, disable_version_flag = true)]
pub struct Directive {
    #[command(flatten)]
    pub args: SubmitArgs,
}

#[derive(Debug, Default, Args)]
pub struct SubmitArgs {
    /// Task spec in TOML (see schema/task-spec.schema.json), or a job script (a file starting
    /// with #!) run by its interpreter, with `#CARMA` option lines at its top
    #[arg(value_name = "SPEC|SCRIPT", conflicts_with = "rad")]
    pub spec: Option<PathBuf>,
    /// A job script's arguments (for a TOML spec: words that belong after `--`)
    #[arg(value_name = "ARGS")]
    pub stray: Vec<OsString>,
    /// Task in the original system's .rad format
    #[arg(long, value_name = "FILE")]
    pub rad: Option<PathBuf>,
    /// Task name (flag form) [default: the program's name]
    #[arg(long, short = 'J', visible_alias = "job-name")]
    pub name: Option<String>,
    /// GPUs the task needs (flag form) [default: 1]
    #[arg(long, allow_hyphen_values = true, value_name = "N")]
    pub gpus: Option<String>,
    /// Declared GPU memory per GPU, e.g. 12GiB (flag form)
    #[arg(long, allow_hyphen_values = true, value_name = "SIZE")]
    pub mem: Option<String>,
    /// Working directory [default: the current directory]
    #[arg(long, short = 'D', visible_alias = "chdir", value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Which of your environment variables the job gets, as sbatch: ALL, NONE, or
    /// NAME[,NAME=value...] [default: ALL]
    #[arg(long, value_name = "WHICH")]
    pub export: Option<String>,
    /// Environment variable for the job, NAME=VALUE (repeatable; added to --export's)
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Standard output file: a path template with %j (task id), %a (attempt), %x (name),
    /// %u (user), %% [default: runs/ID/N/stdout.log in the state directory; see `carma logs`]
    #[arg(long, short = 'o', value_name = "TEMPLATE")]
    pub output: Option<String>,
    /// Standard error file, the same template form [default: runs/ID/N/stderr.log]
    #[arg(long, short = 'e', value_name = "TEMPLATE")]
    pub error: Option<String>,
    /// Model summary for the memory estimators
    #[arg(long, value_name = "FILE")]
    pub model_summary: Option<PathBuf>,
    /// Batch size for the memory estimators
    #[arg(long, allow_hyphen_values = true, value_name = "N")]
    pub batch_size: Option<String>,
    /// Retries after out-of-memory or lost attempts [default: 3]
    #[arg(long, allow_hyphen_values = true, value_name = "N")]
    pub max_retries: Option<String>,
    /// Wall-clock limit per attempt, e.g. 2h [default: none]
    #[arg(long, short = 't', visible_alias = "time", value_name = "DURATION")]
    pub time_limit: Option<String>,
    /// Start only after other tasks: ID[,ID...] (each must finish with exit 0), or Slurm's
    /// afterok:ID[:ID...], afterany:ID, afternotok:ID joined by commas; @ is your latest
    /// submission, @~1 the one before (an array counts as one); an array id means all of it
    #[arg(long, short = 'd', visible_alias = "dependency", value_name = "DEPS")]
    pub after: Option<String>,
    /// Keep the task waiting when an afterok (afternotok) dependency fails (succeeds) instead
    /// of cancelling it
    #[arg(long)]
    pub keep_on_dependency_failure: bool,
    /// Submit an array: 0-9, 0-9:2, 1,4,7, with %N to run at most N at once (0-9%2); each
    /// task gets CARMA_ARRAY_INDEX, CARMA_ARRAY_ID and CARMA_ARRAY_COUNT. With --param, a
    /// bare %N caps the sweep
    #[arg(long, value_name = "INDICES")]
    pub array: Option<String>,
    /// Sweep a parameter: NAME=V1,V2,... (repeatable; one task per combination); {NAME} in the
    /// command's arguments is replaced by the value, never through a shell
    #[arg(long = "param", value_name = "NAME=VALUES")]
    pub params: Vec<String>,
    /// Name of each array or sweep task, with {NAME} replaced by its parameter value and
    /// {index} by its index
    #[arg(long, value_name = "TEMPLATE")]
    pub name_template: Option<String>,
    /// Order in the queue: higher goes first [default: 0; users may set at most the queue's
    /// user-priority-max, 0 unless the administrator raised it]
    #[arg(long, allow_hyphen_values = true, value_name = "N")]
    pub priority: Option<String>,
    /// Lower the task's priority by N, as Slurm's --nice [default: 0; below 0 is root's]
    #[arg(long, allow_hyphen_values = true, value_name = "N")]
    pub nice: Option<String>,
    /// Submit held: the task waits until `carma release ID`
    #[arg(long, short = 'H')]
    pub hold: bool,
    /// Run this command as you when the task ends (split into words without a shell), with
    /// CARMA_TASK_ID, CARMA_TASK_NAME, CARMA_OUTCOME, CARMA_EXIT, CARMA_REASON in its
    /// environment
    #[arg(long, value_name = "CMD")]
    pub notify: Option<String>,
    /// Mail this address when the task ends (through the sendmail the administrator set in
    /// config.toml)
    #[arg(long, value_name = "ADDRESS")]
    pub mail_user: Option<String>,
    /// Show the tasks that would be submitted (argv and name of each), submit nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Run only on a MIG instance of this profile, e.g. 1g.10gb (one-GPU tasks)
    #[arg(long, value_name = "PROFILE")]
    pub mig_profile: Option<String>,
    /// Print only the task id (the array id for an array or sweep)
    #[arg(long)]
    pub parsable: bool,
    /// The command to run, after `--` (flag form); a job script's arguments may go here too
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
    #[arg(long, short = 'a')]
    pub all: bool,
    /// Show dependency chains as trees
    #[arg(long)]
    pub tree: bool,
    /// One line per array or sweep task instead of one per array
    #[arg(long, short = 'r', visible_alias = "array")]
    pub expand: bool,
    /// Only these users' tasks (login names or uids, comma-separated)
    #[arg(long, short = 'u', value_name = "USER[,USER]")]
    pub user: Option<String>,
    /// Only my tasks
    #[arg(long)]
    pub me: bool,
    /// Only tasks in these states: submitted, pending, placed, running, finished, failed,
    /// cancelled, or squeue's codes SU, PD, CF, R, CD, F, CA (comma-separated)
    #[arg(long, short = 't', value_name = "STATE[,STATE]")]
    pub state: Option<String>,
    /// Only tasks whose name contains this, or matches it with * and ? globs
    #[arg(long, short = 'n', value_name = "PATTERN")]
    pub name: Option<String>,
    /// Columns to show, comma-separated, from: id, index (an array member's ARRAY_INDEX),
    /// name, user, st, state, gpus, mem, submit,
    /// start, end, time, age, tries, gpu, reason [default: id,name,user,st,gpus,mem,start,time,reason;
    /// with --expand, index after id]
    #[arg(long, short = 'o', value_name = "FIELDS")]
    pub format: Option<String>,
    /// Machine-readable output (schema/queue.schema.json)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct GpusArgs {
    /// Machine-readable output (schema/gpus.schema.json)
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
    /// Only events since then: a sequence number (120), a duration ago (10m, 2h) or a time
    /// (2026-11-25T20:00:00Z)
    #[arg(long, value_name = "SEQ|DURATION|TIME")]
    pub since: Option<String>,
    /// Only events about this task (an id, a prefix, ARRAY_INDEX, @, or an array: its members)
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// Only events of these kinds, comma-separated (e.g. Failed,OomDetected)
    #[arg(long, value_name = "KIND[,KIND]")]
    pub kind: Option<String>,
    /// Only events about these users' tasks (login names or uids, comma-separated)
    #[arg(long, short = 'u', value_name = "USER[,USER]")]
    pub user: Option<String>,
    /// Include MetricSample and TickCompleted, hidden by default (--json always has them)
    #[arg(long, short = 'a')]
    pub all: bool,
    /// Keep printing new events as ticks journal them, until interrupted
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// JSON Lines output, one event per line (schema/event.schema.json)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Task ids, array ids (every member), or unique prefixes of at least 4 characters
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// File a cancel request for the next tick instead of writing the journal (what users
    /// who cannot write the journal always do)
    #[arg(long)]
    pub request: bool,
}

#[derive(Debug, Args)]
pub struct HoldArgs {
    /// Task ids, array ids (every member), or unique prefixes of at least 4 characters
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// File a request for the next tick instead of writing the journal
    #[arg(long)]
    pub request: bool,
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// Task ids, array ids (every member), or unique prefixes of at least 4 characters
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// New priority (higher goes first)
    #[arg(long, allow_hyphen_values = true, value_name = "N")]
    pub priority: Option<String>,
    /// New nice value
    #[arg(long, allow_hyphen_values = true, value_name = "N")]
    pub nice: Option<String>,
    /// New declared GPU memory per GPU, e.g. 12GiB
    #[arg(long, value_name = "SIZE")]
    pub mem: Option<String>,
    /// New wall-clock limit per attempt, e.g. 2h
    #[arg(long, short = 't', visible_alias = "time", value_name = "DURATION")]
    pub time_limit: Option<String>,
    /// New GPU count
    #[arg(long, value_name = "N")]
    pub gpus: Option<String>,
    /// File a request for the next tick instead of writing the journal
    #[arg(long)]
    pub request: bool,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Make this the machine's system queue, the one every user finds without --home: write
    /// /etc/carma/carma.toml (root; done by default for root's default /var/lib/carma)
    #[arg(long)]
    pub system: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Task id (or a unique prefix of at least 4 characters)
    pub id: String,
    /// Which attempt [default: the latest]
    #[arg(long, short = 'a', value_name = "N")]
    pub attempt: Option<u32>,
    /// Only standard output [default: both streams: stdout, then stderr; interleaved as they
    /// grow with -f]
    #[arg(long, short = 'o', conflicts_with = "stderr")]
    pub stdout: bool,
    /// Only standard error
    #[arg(long, short = 'e')]
    pub stderr: bool,
    /// Follow the output until the attempt ends (waits for a task that has not started)
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Do not escape control characters (they are escaped when stdout is a terminal)
    #[arg(long)]
    pub raw: bool,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Task ids (or unique prefixes of at least 4 characters)
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// Give up after this long, with exit code 124
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<std::time::Duration>,
    /// Print nothing; only the exit code tells
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell
    pub shell: clap_complete::Shell,
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e}; use e.g. 10s or 500ms"))
}
