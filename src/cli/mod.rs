//! Command-line definitions (clap). Only this module and `commands` know clap.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod reserve;
mod tools;
pub use reserve::*;
pub use tools::*;

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

    /// The verb; none runs the self-contained demo.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Shown after `carma submit --help`.
const SUBMIT_EXAMPLES: &str = "Examples:
  carma submit --gpus 1 --gpu-mem 12GiB -- python train.py --bs 64
  carma submit job.toml --after @ --priority 0          (spec file plus workflow flags)
  carma submit train.sh arg1                            (job script with #CARMA lines)
  carma submit --after @ -- python eval.py              (after your latest submission succeeds)
  carma submit --array 0-9%2 -- python train.py         (10 tasks, at most 2 at once)
  carma submit --param lr=0.001,0.01 --name-template 'lr{lr}' -- python train.py --lr {lr}
  carma submit -t 2h --signal USR1@120 train.sh          (SIGUSR1 two minutes before the limit)
A job that exits with code 99 is queued again (not a failure, no retry used): write a
checkpoint, exit 99, and the next attempt resumes. `carma requeue ID` does the same from outside.
The README's \"Workflow\" section explains each flag.";

/// carma's verbs. Each variant's doc comment is its line in `carma --help`.
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
    /// Stop running tasks and queue them again, as scontrol requeue (no retry is used)
    Requeue(HoldArgs),
    /// From inside a job: say it has just written a checkpoint (touches $CARMA_CHECKPOINT_FILE)
    Checkpointed,
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
    /// Verify the journal, back it up while ticks run, or copy what is readable of a damaged
    /// one into a new journal
    Journal(JournalArgs),
    /// Check config.toml and the state directory without ticking (`carma config check`)
    Config(ConfigArgs),
    /// Serve a read-only web dashboard of the queue, the GPUs and /metrics (localhost by default)
    Serve(ServeArgs),
    /// Reserve GPUs for a window and some users, list reservations, delete one (as Slurm's)
    Reserve(ReserveArgs),
    /// Serve the Model Context Protocol on stdin/stdout for your agent: carma's verbs as tools,
    /// run as you, with your rights (register `carma mcp` as an MCP server)
    Mcp,
    /// A shell on a GPU, as salloc: waits for the GPU, then runs your login shell (or the
    /// command after `--`) as a task attached to this terminal
    Alloc(Box<AllocArgs>),
    /// One command on a GPU attached to this terminal, as srun --pty
    Run(Box<RunArgs>),
    /// Inside a job: start its tasks as Slurm's srun does on one node (SLURM_PROCID 0 to N-1);
    /// a job finds it on its PATH as `srun`
    #[command(disable_help_flag = true)]
    Srun(SrunArgs),
}

/// `carma srun`'s words: srun's options and the program, read with srun's own rules.
#[derive(Debug, Args)]
pub struct SrunArgs {
    /// srun's options (`-n N`, `--gpus-per-task N`, `--label`, ...), then the program and its
    /// arguments
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "WORDS")]
    pub words: Vec<OsString>,
}

/// `carma alloc`'s arguments: `carma submit`'s flags; the command after `--` replaces the
/// login shell.
#[derive(Debug, Args)]
pub struct AllocArgs {
    /// The same flags as `carma submit`.
    #[command(flatten)]
    pub submit: SubmitArgs,
    /// Hold the allocation without a shell (as salloc --no-shell); run commands in it with
    /// `carma run --attach ID -- CMD`, end it with `carma cancel ID`
    #[arg(long)]
    pub no_shell: bool,
}

/// `carma run`'s arguments: `carma submit`'s flags and the command after `--`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The same flags as `carma submit`.
    #[command(flatten)]
    pub submit: SubmitArgs,
    /// Run the command in your allocation ID (from `carma alloc --no-shell`) instead of
    /// submitting a task
    #[arg(long, value_name = "ID")]
    pub attach: Option<String>,
}

/// `carma serve`'s arguments.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address and port to listen on; another address than loopback exposes what every local
    /// user may see to whoever reaches it
    #[arg(long, value_name = "ADDR", default_value = crate::serve::LISTEN_DEFAULT)]
    pub listen: String,
}

/// `carma submit` reads job scripts' `#CARMA` lines with the same flags as its command line.
#[derive(Debug, Parser)]
#[command(name = "#CARMA", no_binary_name = true, disable_help_flag = true, disable_version_flag = true)]
pub struct Directive {
    /// The same flags as `carma submit`'s command line.
    #[command(flatten)]
    pub args: SubmitArgs,
}

/// `carma submit`'s arguments (and a job script's `#CARMA` lines').
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
    pub gpu_mem: Option<String>,
    /// The old spelling of --gpu-mem: GPU memory in carma 0.x, host memory from the next
    /// release (as Slurm's --mem); warns
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
    /// %u (user), %%, {array} (the array's id) and {index} (the array index) [default:
    /// runs/ID/N/stdout.log in the state directory; see `carma logs`]
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
    /// Wall-clock limit per attempt, e.g. 2h, or Slurm's 48:00:00 or 1-12:00 [default: none]
    #[arg(long, short = 't', visible_alias = "time", value_name = "DURATION")]
    pub time_limit: Option<String>,
    /// Send SIG SECONDS before the time limit, as sbatch's --signal=[B:]SIG@SECONDS (e.g.
    /// USR1@60: time to checkpoint). B: signals only the job's first process (carma runs no
    /// batch shell), without it every process of the job [default SECONDS: 60]
    #[arg(long, value_name = "[B:]SIG@SECONDS")]
    pub signal: Option<String>,
    /// Start no earlier than this: now+1hour, now+30s, HH:MM[:SS] (the next such time),
    /// YYYY-MM-DD[THH:MM[:SS]] (local time), as sbatch's --begin
    #[arg(long, short = 'b', value_name = "TIME")]
    pub begin: Option<String>,
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
    /// Mail this address when the task ends, or as --mail-type says (through the sendmail
    /// the administrator set in config.toml)
    #[arg(long, value_name = "ADDRESS")]
    pub mail_user: Option<String>,
    /// Which mails, as sbatch's --mail-type: NONE, BEGIN, END, FAIL, REQUEUE, ALL (the four
    /// before), TIME_LIMIT, TIME_LIMIT_90, TIME_LIMIT_80, TIME_LIMIT_50, ARRAY_TASKS (a mail
    /// per array member, not one summary per array), joined by commas [default: END]
    #[arg(long, value_name = "TYPE[,TYPE...]")]
    pub mail_type: Option<String>,
    /// Show the tasks that would be submitted (argv and name of each), submit nothing
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: print it as JSON (schema/dry-run.schema.json)
    #[arg(long, requires = "dry_run")]
    pub json: bool,
    /// Host memory for the whole job, e.g. 16G (as Slurm's --mem: 16g, 16G, 16GB; a bare
    /// number is MiB): its cgroup's memory.max, no swap, where the queue can set it (--dry-run
    /// says); over it the kernel kills the job, which fails and is not retried
    #[arg(long, allow_hyphen_values = true, value_name = "SIZE")]
    pub host_mem: Option<String>,
    /// CPUs for the whole job (one task, as sbatch's -c): a quota on its cgroup where the
    /// queue can set it (--dry-run says); the job sees SLURM_CPUS_PER_TASK
    #[arg(long, short = 'c', allow_hyphen_values = true, value_name = "N")]
    pub cpus_per_task: Option<String>,
    /// The task may be preempted and requeued, as sbatch's --requeue
    #[arg(long, conflicts_with = "no_requeue")]
    pub requeue: bool,
    /// Never requeue the task, as sbatch's --no-requeue: it is not preempted, and a lost
    /// attempt (a reboot, a killed supervisor) is not retried; a GPU out-of-memory still goes
    /// to carma's recovery
    #[arg(long)]
    pub no_requeue: bool,
    /// Run only on a MIG instance of this profile, e.g. 1g.10gb (one-GPU tasks)
    #[arg(long, value_name = "PROFILE")]
    pub mig_profile: Option<String>,
    /// Run in this reservation (`carma reserve list`): only in its window, only on its GPUs
    #[arg(long, value_name = "NAME")]
    pub reservation: Option<String>,
    /// Print only the task id (the array id for an array or sweep)
    #[arg(long)]
    pub parsable: bool,
    /// An sbatch option typed on the command line (`--gres=gpu:2`, `-N 1`), a word each;
    /// carma puts them here itself, and reads them as sbatch reads its command line
    #[arg(long = "sbatch-option", hide = true, allow_hyphen_values = true, value_name = "WORD")]
    pub sbatch_options: Vec<String>,
    /// The command to run, after `--` (flag form); a job script's arguments may go here too
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `carma tick`'s arguments.
#[derive(Debug, Args)]
pub struct TickArgs {
    /// Print what the tick did
    #[arg(long, short)]
    pub verbose: bool,
    /// Tick again and again, one tick every DURATION, in the foreground until interrupted
    /// (SIGINT, SIGTERM): a personal queue's timer without systemd, e.g. --every 5s
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub every: Option<std::time::Duration>,
}

/// `carma queue`'s arguments.
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
    /// Only tasks in these states: submitted, pending, placed, running, suspended, finished, failed,
    /// cancelled, or squeue's codes SU, PD, CF, R, S, CD, F, CA (comma-separated)
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
    /// No header line, as squeue's: the rows alone (`carma queue --me -o id --noheader | xargs
    /// carma cancel`); lines under the table go to stderr
    #[arg(long)]
    pub noheader: bool,
    /// Machine-readable output (schema/queue.schema.json; with --journal,
    /// schema/slurm-queue.schema.json)
    #[arg(long)]
    pub json: bool,
    /// The Slurm cluster's queue: the node journals in DIR (the nodes' state directories, or
    /// journal files) merged with squeue's pending jobs [default: $CARMA_JOURNALS, else
    /// `[slurm] journals` in /etc/carma/carma.toml]
    #[arg(long, value_name = "DIR")]
    pub journal: Vec<std::path::PathBuf>,
}

/// `carma gpus`' arguments.
#[derive(Debug, Args)]
pub struct GpusArgs {
    /// Machine-readable output (schema/gpus.schema.json)
    #[arg(long)]
    pub json: bool,
}

/// `carma show`'s arguments.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Task id (or a unique prefix of at least 4 characters)
    pub id: String,
    /// Machine-readable output (schema/task.schema.json)
    #[arg(long)]
    pub json: bool,
}

/// `carma events`' arguments.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only events since then: a sequence number (120), a duration ago (10m, 2h) or a time
    /// (11:40:20, the latest such local time; 2026-11-25T20:00; 2026-11-25T20:00:00Z)
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
    /// Print the last 10 events (with --since: every one since then), then new ones as ticks
    /// journal them, until interrupted (as `tail -f`)
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// JSON Lines output, one event per line (schema/event.schema.json)
    #[arg(long)]
    pub json: bool,
}

/// `carma cancel`'s arguments.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Task ids, array ids (every member), or unique prefixes of at least 4 characters; with
    /// filters, only those of them the filters keep. `ID`, queue's header, is skipped
    #[arg(value_name = "ID")]
    pub ids: Vec<String>,
    /// Every waiting or running task of mine (as scancel --me)
    #[arg(long)]
    pub me: bool,
    /// Every waiting or running task of these users (login names or uids, comma-separated)
    #[arg(long, short = 'u', value_name = "USER[,USER]")]
    pub user: Option<String>,
    /// Only tasks in these states: submitted, pending, placed, running (or SU, PD, CF, R)
    #[arg(long, short = 't', value_name = "STATE[,STATE]")]
    pub state: Option<String>,
    /// Only tasks whose name contains this, or matches it with * and ? globs
    #[arg(long, short = 'n', value_name = "PATTERN")]
    pub name: Option<String>,
    /// File a cancel request for the next tick instead of writing the journal (what users
    /// who cannot write the journal always do)
    #[arg(long)]
    pub request: bool,
}

/// The arguments of `carma hold`, `release` and `requeue`: which tasks.
#[derive(Debug, Args)]
pub struct HoldArgs {
    /// Task ids, array ids (every member), or unique prefixes of at least 4 characters
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// File a request for the next tick instead of writing the journal
    #[arg(long)]
    pub request: bool,
}

/// `carma update`'s arguments.
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
    /// New declared GPU memory per GPU, e.g. 12GiB (as submit's --gpu-mem; --mem is its old
    /// spelling)
    #[arg(long = "gpu-mem", alias = "mem", value_name = "SIZE")]
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

/// `carma init`'s arguments.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Make this the machine's system queue, the one every user finds without --home: write
    /// /etc/carma/carma.toml (root; done by default for root's default /var/lib/carma)
    #[arg(long)]
    pub system: bool,
}

/// `carma logs`' arguments.
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
    /// Only the last N lines of each stream (as `tail -n`), from at most its last 64 KiB
    #[arg(long, short = 'n', value_name = "N", conflicts_with = "follow")]
    pub tail: Option<u32>,
    /// Machine-readable output (schema/logs.schema.json): each stream's tail as text, from at
    /// most its last 64 KiB
    #[arg(long, conflicts_with = "follow")]
    pub json: bool,
}

/// `carma wait`'s arguments.
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

/// `carma completions`' arguments.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell
    pub shell: clap_complete::Shell,
}

pub(crate) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e}; use e.g. 10s or 500ms"))
}
