//! Every option of sbatch's man page, placed in one of three groups. `carma submit` reads
//! `#SBATCH` lines with it, `--dry-run` shows what each became, and the README's "Slurm
//! users" table is this table (a test compares them).

/// What carma does with an sbatch option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// Read and honoured: it becomes carma words (or, for a value this server cannot give,
    /// a refusal with the reason).
    Honoured,
    /// Meaningless on one server (or not carma's to do): accepted with one note.
    Noted,
    /// Cannot be honoured here: refused with the reason.
    Refused,
}

impl Group {
    /// The group's name in the README's table.
    pub fn label(self) -> &'static str {
        match self {
            Group::Honoured => "honoured",
            Group::Noted => "noted",
            Group::Refused => "refused",
        }
    }
}

/// One sbatch option.
#[derive(Clone, Copy, Debug)]
pub struct SlurmOption {
    /// Its long name, without `--`.
    pub long: &'static str,
    /// Its one-letter name, if it has one.
    pub short: Option<char>,
    /// Whether it takes a value (`--time=1:00:00`, `-t 60`).
    pub takes_value: bool,
    /// What carma does with it.
    pub group: Group,
    /// The carma words it becomes, or the note or refusal's reason.
    pub carma: &'static str,
}

const fn o(
    long: &'static str,
    short: Option<char>,
    takes_value: bool,
    group: Group,
    carma: &'static str,
) -> SlurmOption {
    SlurmOption { long, short, takes_value, group, carma }
}

use Group::{Honoured as H, Noted as N, Refused as R};

/// sbatch's options (Slurm 24), in the man page's order.
pub const OPTIONS: &[SlurmOption] = &[
    o("account", Some('A'), true, N, "accounts: only matter on a cluster; ignored"),
    o("acctg-freq", None, true, N, "accounting sampling: carma samples every GPU each tick; ignored"),
    o("array", Some('a'), true, H, "--array INDICES (%N caps how many run at once)"),
    o("batch", None, true, N, "node features: only matter on a cluster; ignored"),
    o("bb", None, true, N, "burst buffers: none on this server; ignored"),
    o("bbf", None, true, N, "burst buffers: none on this server; ignored"),
    o("begin", Some('b'), true, H, "--begin TIME"),
    o("chdir", Some('D'), true, H, "--workdir DIR"),
    o("cluster-constraint", None, true, N, "clusters: only matter on a cluster; ignored"),
    o("clusters", Some('M'), true, N, "clusters: only matter on a cluster; ignored"),
    o("comment", None, true, N, "comments are not kept; ignored"),
    o("constraint", Some('C'), true, N, "node features: only matter on a cluster; ignored"),
    o("container", None, true, R, "carma runs no OCI containers; start the container from the script"),
    o("container-id", None, true, R, "carma runs no OCI containers; start the container from the script"),
    o("contiguous", None, false, N, "node placement: only matters on a cluster; ignored"),
    o("core-spec", Some('S'), true, N, "core specialisation: only matters on a cluster; ignored"),
    o("cores-per-socket", None, true, N, "CPU layout: CPUs are not reserved on this server; ignored"),
    o("cpu-freq", None, true, N, "CPU frequency: not set by carma; ignored"),
    o("cpus-per-gpu", None, true, N, "CPUs are not reserved or limited on this server; ignored"),
    o(
        "cpus-per-task",
        Some('c'),
        true,
        H,
        "--cpus-per-task N×ntasks: a CPU quota (cpu.max) where the queue sets cgroups, else noted",
    ),
    o("deadline", None, true, N, "carma has no deadline; the task waits until it can start"),
    o("delay-boot", None, true, N, "node reboots: only matter on a cluster; ignored"),
    o("dependency", Some('d'), true, H, "--after DEPS (afterok, afterany, afternotok)"),
    o("distribution", Some('m'), true, N, "task distribution: only matters on a cluster; ignored"),
    o("error", Some('e'), true, H, "--error TEMPLATE (%A %a %j %x %u %N %% as Slurm)"),
    o("exclude", Some('x'), true, N, "node lists: only matter on a cluster; ignored"),
    o("exclusive", None, false, N, "whole nodes: only matter on a cluster; GPUs given to a task are its own"),
    o("export", None, true, H, "--export WHICH"),
    o("export-file", None, true, R, "environment files are not read; give --export NAME=value,..."),
    o("extra", None, true, N, "node features: only matter on a cluster; ignored"),
    o("extra-node-info", Some('B'), true, N, "CPU layout: CPUs are not reserved on this server; ignored"),
    o("get-user-env", None, false, N, "carma takes your environment at submit (--export); ignored"),
    o("gid", None, true, R, "the job runs as you, in your groups; drop --gid"),
    o("gpu-bind", None, true, N, "GPU binding: CUDA_VISIBLE_DEVICES names the task's GPUs; ignored"),
    o("gpu-freq", None, true, N, "GPU clocks: not set by carma; ignored"),
    o("gpus", Some('G'), true, H, "--gpus N ([type:]N; the type is checked against this server's GPUs)"),
    o("gpus-per-node", None, true, H, "--gpus N (one node)"),
    o("gpus-per-socket", None, true, R, "GPUs per socket: carma counts GPUs per task; write --gpus N"),
    o(
        "gpus-per-task",
        None,
        true,
        H,
        "--gpus N×ntasks (one node); srun in the script gives each task its own N",
    ),
    o("gres", None, true, H, "--gpus N for gpu[:type]:N; other resources: noted"),
    o("gres-flags", None, true, N, "GRES binding: only matters on a cluster; ignored"),
    o("help", Some('h'), false, N, "a command-line option; ignored in a script"),
    o("hint", None, true, N, "CPU layout: CPUs are not reserved on this server; ignored"),
    o("hold", Some('H'), false, H, "--hold"),
    o("ignore-pbs", None, false, N, "carma reads no #PBS lines; ignored"),
    o("input", Some('i'), true, R, "jobs read no standard input here; read the file from the script"),
    o("job-name", Some('J'), true, H, "--name NAME"),
    o("kill-on-invalid-dep", None, true, H, "yes: the default; no: --keep-on-dependency-failure"),
    o("licenses", Some('L'), true, N, "licenses: only matter on a cluster; ignored"),
    o("mail-type", None, true, H, "--mail-type TYPES"),
    o("mail-user", None, true, H, "--mail-user ADDRESS"),
    o("mcs-label", None, true, N, "MCS labels: only matter on a cluster; ignored"),
    o(
        "mem",
        None,
        true,
        H,
        "--host-mem SIZE: host memory (memory.max, no swap) where the queue sets cgroups, else noted; 0: no limit; GPU memory is --gpu-mem",
    ),
    o("mem-bind", None, true, N, "memory binding: not set by carma; ignored"),
    o("mem-per-cpu", None, true, H, "--host-mem SIZE×CPUs (-c × -n), as --mem"),
    o(
        "mem-per-gpu",
        None,
        true,
        H,
        "host memory per GPU: --env SLURM_MEM_PER_GPU=MiB (not limited: noted; --mem limits); GPU memory is --gpu-mem",
    ),
    o("mincpus", None, true, N, "CPUs are not reserved on this server; ignored"),
    o("network", None, true, N, "networks: only matter on a cluster; ignored"),
    o("nice", None, true, H, "--nice N"),
    o("no-kill", Some('k'), false, N, "node failures: only matter on a cluster; ignored"),
    o(
        "no-requeue",
        None,
        false,
        H,
        "--no-requeue: never requeued (not preempted, a lost attempt not retried); GPU out-of-memory recovery still retries",
    ),
    o("nodefile", Some('F'), true, N, "node lists: only matter on a cluster; ignored"),
    o("nodelist", Some('w'), true, N, "node lists: only matter on a cluster; ignored"),
    o("nodes", Some('N'), true, H, "1: noted (always one node); more than one: refused"),
    o(
        "ntasks",
        Some('n'),
        true,
        H,
        "--env SLURM_NTASKS=N: the script runs once, as sbatch runs it; srun in it starts N tasks",
    ),
    o("ntasks-per-core", None, true, N, "CPU layout: CPUs are not reserved on this server; ignored"),
    o("ntasks-per-gpu", None, true, N, "task layout: give --gpus N; ignored"),
    o(
        "ntasks-per-node",
        None,
        true,
        H,
        "--env SLURM_NTASKS_PER_NODE=N (the task count without -n); -n over it is a node count: more than one node refused",
    ),
    o("ntasks-per-socket", None, true, N, "CPU layout: CPUs are not reserved on this server; ignored"),
    o(
        "oom-kill-step",
        None,
        true,
        N,
        "carma ends the attempt on a GPU out-of-memory and retries it (--max-retries N); ignored",
    ),
    o(
        "open-mode",
        None,
        true,
        H,
        "truncate: the first attempt truncates; append: noted (later attempts append, keeping a requeued job's output)",
    ),
    o("output", Some('o'), true, H, "--output TEMPLATE (%A %a %j %x %u %N %% as Slurm)"),
    o("overcommit", Some('O'), false, N, "CPUs are not reserved on this server; ignored"),
    o("oversubscribe", Some('s'), false, N, "carma shares GPUs by memory on its own; ignored"),
    o("parsable", None, false, H, "--parsable"),
    o("partition", Some('p'), true, N, "partitions: only matter on a cluster; ignored"),
    o("power", None, true, N, "power plugins: only matter on a cluster; ignored"),
    o("prefer", None, true, N, "node features: only matter on a cluster; ignored"),
    o("priority", None, true, H, "--priority N"),
    o("profile", None, true, N, "profiling: carma samples every GPU each tick; ignored"),
    o("propagate", None, true, N, "resource limits are not propagated; ignored"),
    o("qos", Some('q'), true, N, "QOS: only matters on a cluster; ignored"),
    o("quiet", Some('Q'), false, N, "a command-line option; ignored in a script"),
    o("reboot", None, false, N, "node reboots: only matter on a cluster; ignored"),
    o("requeue", None, false, H, "--requeue: may be preempted and requeued; lost attempts are retried"),
    o("reservation", None, true, H, "--reservation NAME (one reservation; `carma reserve list`)"),
    o("resv-ports", None, true, N, "port reservations: only matter on a cluster; ignored"),
    o("segment", None, true, N, "node segments: only matter on a cluster; ignored"),
    o("signal", None, true, H, "--signal [B:]SIG@SECONDS"),
    o("sockets-per-node", None, true, N, "CPU layout: CPUs are not reserved on this server; ignored"),
    o("spread-job", None, false, N, "node placement: only matters on a cluster; ignored"),
    o("stepmgr", None, false, N, "job steps: there are none here; ignored"),
    o("switches", None, true, N, "network switches: only matter on a cluster; ignored"),
    o("test-only", None, false, H, "--dry-run"),
    o("thread-spec", None, true, N, "CPU layout: CPUs are not reserved on this server; ignored"),
    o("threads-per-core", None, true, N, "CPU layout: CPUs are not reserved on this server; ignored"),
    o("time", Some('t'), true, H, "--time-limit DURATION (every Slurm form; a bare number is minutes)"),
    o("time-min", None, true, N, "carma does not shorten a time limit to start a task earlier; ignored"),
    o("tmp", None, true, N, "temporary disk is not reserved on this server; ignored"),
    o("tres-bind", None, true, N, "resource binding: CUDA_VISIBLE_DEVICES names the task's GPUs; ignored"),
    o("tres-per-task", None, true, N, "give GPUs with --gpus N; ignored"),
    o("uid", None, true, R, "the job runs as you; drop --uid"),
    o("usage", None, false, N, "a command-line option; ignored in a script"),
    o("use-min-nodes", None, false, N, "always one node here; ignored"),
    o("verbose", Some('v'), false, N, "a command-line option; ignored in a script"),
    o("version", Some('V'), false, N, "a command-line option; ignored in a script"),
    o("wait", Some('W'), false, N, "a command-line option; use carma wait ID"),
    o("wait-all-nodes", None, true, N, "always one node here; ignored"),
    o("wckey", None, true, N, "workload keys: only matter on a cluster; ignored"),
    o("wrap", None, true, R, "a script brings its own command; drop --wrap"),
];

/// The option named `long` (its full name or, as getopt reads it, a prefix of only one).
pub fn by_long(long: &str) -> Option<&'static SlurmOption> {
    // sbatch's own aliases, which getopt reads as full names.
    let long = match long {
        "cluster" => "clusters",
        other => other,
    };
    getopt_long(OPTIONS, long, |o| o.long)
}

/// The entry of `options` named `long` as getopt_long reads a name: its full name, or a
/// prefix of only one (sbatch's and srun's tables both).
pub fn getopt_long<T>(options: &'static [T], long: &str, name: impl Fn(&T) -> &str) -> Option<&'static T> {
    if let Some(exact) = options.iter().find(|o| name(o) == long) {
        return Some(exact);
    }
    let mut prefixed = options.iter().filter(|o| !long.is_empty() && name(o).starts_with(long));
    match (prefixed.next(), prefixed.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// The option whose one-letter name is `short`.
pub fn by_short(short: char) -> Option<&'static SlurmOption> {
    OPTIONS.iter().find(|o| o.short == Some(short))
}

/// The README's table: one row per option.
pub fn markdown() -> String {
    let mut out = String::from("| sbatch option | carma | what carma does |\n|---|---|---|\n");
    for option in OPTIONS {
        let short = option.short.map_or(String::new(), |s| format!(", `-{s}`"));
        let carma = option.carma.replace('|', "\\|");
        out.push_str(&format!("| `--{}`{short} | {} | {carma} |\n", option.long, option.group.label()));
    }
    out
}

/// The sbatch option nearest to `written` (an unknown `--name`), by edit distance, when
/// near enough to be a typo.
pub fn nearest(written: &str) -> Option<&'static SlurmOption> {
    let best = OPTIONS.iter().map(|o| (distance(written, o.long), o)).min_by_key(|(d, _)| *d)?;
    let allowed = (written.len() / 3).clamp(1, 3);
    (best.0 <= allowed).then_some(best.1)
}

/// Levenshtein distance, by characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_prefixes_read_as_getopt_reads_them() {
        for (i, a) in OPTIONS.iter().enumerate() {
            for b in &OPTIONS[i + 1..] {
                assert_ne!(a.long, b.long);
                assert!(a.short.is_none() || a.short != b.short, "{} and {}", a.long, b.long);
            }
        }
        assert_eq!(by_long("ntasks-per-n").map(|o| o.long), Some("ntasks-per-node"));
        assert_eq!(by_long("ntasks").map(|o| o.long), Some("ntasks"), "exact wins over prefixes");
        assert!(by_long("mem-per").is_none(), "ambiguous");
        assert_eq!(by_long("cluster").map(|o| o.long), Some("clusters"));
        assert_eq!(by_short('G').map(|o| o.long), Some("gpus"));
    }

    #[test]
    fn typos_find_slurm_options_not_carma_flags() {
        assert_eq!(nearest("node").map(|o| o.long), Some("nodes"));
        assert_eq!(nearest("clusters").map(|o| o.long), Some("clusters"));
        assert_eq!(nearest("gpu").map(|o| o.long), Some("gpus"));
        assert_eq!(nearest("partion").map(|o| o.long), Some("partition"));
        assert!(nearest("model-summary").is_none());
    }
}
