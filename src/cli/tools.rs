//! The arguments of the administrators' and tools' verbs: Slurm, the journal, replay,
//! simulation, reports, traces, estimates, the supervisor, systemd and the benchmarks. The
//! users' everyday verbs are in the parent module.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::parse_duration;

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

/// `carma sbatch`'s arguments.
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
    /// The cluster's shard size and margin.
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

/// `carma slurm`'s arguments: which of its verbs.
#[derive(Debug, Args)]
pub struct SlurmArgs {
    /// The `carma slurm` verb.
    #[command(subcommand)]
    pub what: SlurmWhat,
}

/// `carma slurm`'s verbs. Each variant's doc comment is its `--help` line.
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
        /// The cluster's shard size and margin.
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
        /// The cluster's shard size and margin.
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
        /// The cluster's shard size and margin.
        #[command(flatten)]
        shards: ShardArgs,
    },
    /// Slurm Prolog (run by slurmd as root): journal the job's start on this node
    Prolog {
        /// The cluster's shard size and margin.
        #[command(flatten)]
        shards: ShardArgs,
    },
    /// Slurm TaskProlog (run as the job's user): print the job's MPS memory cap as exports
    TaskProlog {
        /// The cluster's shard size and margin.
        #[command(flatten)]
        shards: ShardArgs,
    },
    /// Slurm Epilog (run by slurmd as root): journal the end; requeue an out-of-memory job
    /// with more shards
    Epilog {
        /// The cluster's shard size and margin.
        #[command(flatten)]
        shards: ShardArgs,
    },
    /// Internal (started by the Epilog): once the job has completed, journal its end as
    /// Slurm recorded it, or finish an out-of-memory requeue; then watch a requeued job
    #[command(hide = true)]
    Follow {
        /// The Slurm job to follow
        #[arg(long)]
        job: u32,
        /// The job's cluster (SLURM_CLUSTER_NAME)
        #[arg(long, default_value = "")]
        cluster: String,
        /// This node: starts elsewhere are the other node's business
        #[arg(long)]
        node: String,
        /// The attempt whose end the Epilog left to the follower
        #[arg(long)]
        attempt: Option<u32>,
        /// Shards of the next run, after an out-of-memory requeue
        #[arg(long, requires = "comment")]
        shards: Option<u32>,
        /// The job's new comment, after an out-of-memory requeue
        #[arg(long)]
        comment: Option<String>,
        /// When the run ended (the Epilog's time), Unix ms
        #[arg(long)]
        ended_ms: Option<u64>,
        /// The cluster's shard size and margin.
        #[command(flatten)]
        rule: ShardArgs,
    },
}

/// `carma config`'s arguments: which of its verbs.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The `carma config` verb.
    #[command(subcommand)]
    pub what: ConfigWhat,
}

/// `carma config`'s verbs.
#[derive(Debug, Subcommand)]
pub enum ConfigWhat {
    /// Check config.toml and the state directory without ticking: parts and modes, GPUs, the
    /// timer, cgroups, MPS, sendmail, metrics, disk; exit 78 when a problem is found
    Check {
        /// Machine-readable output (schema/config-check.schema.json)
        #[arg(long)]
        json: bool,
    },
}

/// `carma journal`'s arguments: which of its verbs.
#[derive(Debug, Args)]
pub struct JournalArgs {
    /// The `carma journal` verb.
    #[command(subcommand)]
    pub what: JournalWhat,
}

/// `carma journal`'s verbs.
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
    /// Copy the journal (with config.toml and root's vault) into a new folder while ticks run,
    /// then check the copy; exit 3 when the copy is not sound
    Backup {
        /// The new backup folder (never overwritten; made 0700)
        #[arg(value_name = "DEST")]
        dest: PathBuf,
        /// Machine-readable output (schema/journal-backup.schema.json)
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

/// `carma replay`'s arguments.
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

/// `carma simulate`'s arguments.
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
    /// drawn uniformly in MIN:MAX per task; default (1.2:3), loose (1.5:10) or none
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
    /// A GPU reservation the trace's users submit into: NAME:GPUS@START+DURATION:USER,...
    /// (times after the trace's start), e.g. paper:2@1h+2h:alice,bob; repeatable
    #[arg(long, value_name = "RESERVATION")]
    pub reservation: Vec<String>,
    /// Print only the summary, not the report
    #[arg(long, short)]
    pub quiet: bool,
    /// Where the scratch state directory goes [default: /dev/shm when present, else next to --journal]
    #[arg(long, value_name = "DIR")]
    pub scratch: Option<PathBuf>,
}

/// `carma report`'s arguments.
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
    /// One report over all the journals (the nodes of a cluster) instead of one per journal;
    /// a Slurm job is one task across them. Without --journal: $CARMA_JOURNALS, else
    /// `[slurm] journals` in /etc/carma/carma.toml, else the queue's journal
    #[arg(long, conflicts_with = "baseline")]
    pub merge: bool,
    /// List every attempt: task, Slurm job, node, GPU, shards, wait, start, end, outcome
    #[arg(long)]
    pub tasks: bool,
    /// Accounting per user, as sreport: tasks and how they ended, GPU-hours, relaunches,
    /// out-of-memory ends and waits (with --csv: one row per user; --json has them as `users`)
    #[arg(long, conflicts_with = "tasks")]
    pub by_user: bool,
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

/// `carma trace`'s arguments: which of its verbs.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The `carma trace` verb.
    #[command(subcommand)]
    pub what: TraceWhat,
}

/// `carma trace`'s verbs.
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
        /// Seed of the arrivals, workloads and users: the same seed writes the same trace
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output CSV (offset_s,workload[,user])
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

/// `carma estimate`'s arguments.
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

/// `carma run-task`'s arguments (the tick starts it).
#[derive(Debug, Args)]
pub struct RunTaskArgs {
    /// Task id
    pub id: String,
    /// Attempt number (from 1)
    #[arg(long)]
    pub attempt: u32,
}

/// `carma systemd`'s arguments.
#[derive(Debug, Args)]
pub struct SystemdArgs {
    /// Write the unit files instead of printing them (as a user: user units for
    /// `systemctl --user`, serving your personal queue)
    #[arg(long)]
    pub install: bool,
    /// Where --install writes [default: /etc/systemd/system as root, else
    /// ~/.config/systemd/user]
    #[arg(long, value_name = "DIR")]
    pub unit_dir: Option<PathBuf>,
    /// Where --install writes the man page carma.1 (the units' Documentation=man:carma(1))
    /// [default: /usr/local/share/man/man1 as root, else ~/.local/share/man/man1]
    #[arg(long, value_name = "DIR")]
    pub man_dir: Option<PathBuf>,
    /// The carma binary the units run, an absolute path [default: this binary]
    #[arg(long, value_name = "PATH")]
    pub exe: Option<PathBuf>,
    /// Install units that run this binary even though it is in a cargo build folder or not
    /// root's alone
    #[arg(long)]
    pub force: bool,
    /// The machine's units (tick, timer, MPS daemon) even when not run as root: for building
    /// a package (packaging/deb/build.sh)
    #[arg(long)]
    pub system: bool,
}

/// `carma bench`'s arguments: which benchmark.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The benchmark to run.
    #[command(subcommand)]
    pub what: BenchWhat,
}

/// `carma bench`'s benchmarks.
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
    /// What the supervisor's own GPU memory readings cost: real supervisors, readings off and on
    Supervisor {
        /// The GPU source read: `nvml` (the driver, or NVIDIA's mock through LD_LIBRARY_PATH) or
        /// `fake:PATH` [default: a fake GPU file the bench writes]
        #[arg(long, value_name = "SPEC")]
        gpus: Option<String>,
        /// The cadence measured, ms
        #[arg(long, default_value_t = crate::exec::gpu_watch::INTERVAL_MS_DEFAULT)]
        interval_ms: u64,
        /// How long each job (`sleep`) runs, s
        #[arg(long, default_value_t = 10)]
        job_s: u64,
        /// Runs of each side (the median is reported)
        #[arg(long, default_value_t = 5)]
        runs: u32,
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
    FoldChild {
        /// The state directory whose journal is folded
        home: PathBuf,
    },
    /// Internal: simulate a trace and print the wall seconds and this process's peak RSS in MiB
    #[command(hide = true)]
    SimChild {
        /// Trace CSV (offset_s,workload)
        trace: PathBuf,
        /// Workload profiles CSV
        profiles: PathBuf,
        /// Where the scratch state directory goes
        scratch: PathBuf,
    },
}
