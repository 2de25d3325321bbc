//! What the queue uses outside its state directory: the GPUs, the timer, cgroups, MPS,
//! sendmail, the metrics folders and the disk.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::Finding;
use crate::config::{Config, MetricsConfig, NotifyConfig, Sharing};
use crate::home::Home;

/// A tick older than this means no timer is running (the timer fires every 5 s).
const TICK_STALE_MS: u64 = 60_000;

/// `[tick] gpus`: the probe the tick would build, sampled once.
pub(super) fn gpus(spec: &str) -> Finding {
    let mut probe = match crate::gpu::probe_from_spec(spec) {
        Ok(probe) => probe,
        Err(e) => {
            return Finding::problem(
                "gpus",
                format!("[tick] gpus = {spec:?}: {e}"),
                "install the NVIDIA driver (nvidia-smi must work), or set [tick] gpus = \"none\" to queue without GPUs",
            );
        }
    };
    match probe.sample(&crate::gpu::SinceMarks::default()) {
        Ok(samples) if samples.is_empty() && spec == "none" => Finding::note(
            "gpus",
            "[tick] gpus = \"none\": no GPU is read, tasks that ask for one wait",
            "set [tick] gpus = \"nvml\" on a GPU server",
        ),
        Ok(samples) if samples.is_empty() => Finding::problem(
            "gpus",
            format!("{}: no GPU seen", probe.describe()),
            "check `nvidia-smi`; tasks that ask for a GPU wait until one is seen",
        ),
        Ok(samples) => {
            let unhealthy: Vec<String> = samples
                .iter()
                .filter(|s| !s.health.is_healthy())
                .map(|s| format!("GPU{} {}", s.index, s.state_word()))
                .collect();
            let names: Vec<String> = samples.iter().map(|s| format!("GPU{} {}", s.index, s.name)).collect();
            let detail = format!("{}: {} GPU(s): {}", probe.describe(), samples.len(), names.join(", "));
            if unhealthy.is_empty() {
                Finding::ok("gpus", crate::text::escape(&detail).into_owned())
            } else {
                Finding::problem(
                    "gpus",
                    format!("{detail}; unavailable: {}", unhealthy.join(", ")),
                    "see `carma gpus` and the driver's log (`nvidia-smi -q`); such GPUs take no work",
                )
            }
        }
        Err(e) => Finding::problem(
            "gpus",
            format!("{}: {e}", probe.describe()),
            "check `nvidia-smi` and the driver",
        ),
    }
}

/// The timer: its unit file and the binary it runs, and how long ago the last tick was
/// (`inventory.json`, which every tick rewrites).
pub(super) fn timer(home: &Home) -> Vec<Finding> {
    let mut findings = Vec::new();
    let unit = unit_dirs().into_iter().map(|d| d.join("carma-tick.service")).find(|p| p.is_file());
    match &unit {
        Some(unit) => findings.push(unit_runs(unit, home)),
        None => findings.push(Finding::note(
            "timer",
            "no carma-tick.service unit is installed",
            "`carma systemd --install` (then enable carma-tick.timer), or run `carma tick --every 5s`",
        )),
    }
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    let last = std::fs::metadata(home.inventory_path()).ok().and_then(|m| u64::try_from(m.mtime()).ok());
    findings.push(match last.map(|s| now.saturating_sub(s.saturating_mul(1000))) {
        None => Finding::problem(
            "timer",
            "no tick has run yet",
            "systemctl enable --now carma-tick.timer, or `carma tick --every 5s`",
        ),
        Some(ago) if ago > TICK_STALE_MS => Finding::problem(
            "timer",
            format!(
                "the last tick was {} ago",
                humantime::format_duration(std::time::Duration::from_secs(ago / 1000))
            ),
            "the timer is not running: systemctl status carma-tick.timer (or run `carma tick --every 5s`)",
        ),
        Some(ago) => Finding::ok("timer", format!("the last tick was {} s ago", ago / 1000)),
    });
    findings
}

/// Where a unit of this queue may be: the machine's, or the user's own.
fn unit_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"]
        .iter()
        .map(PathBuf::from)
        .collect();
    if let Some(home) = std::env::var_os("HOME") {
        dirs.insert(0, PathBuf::from(home).join(".config/systemd/user"));
    }
    dirs
}

/// Whether the unit's `ExecStart=` runs an existing binary on this state directory.
fn unit_runs(unit: &Path, home: &Home) -> Finding {
    let text = std::fs::read_to_string(unit).unwrap_or_default();
    let exec = text.lines().find_map(|l| l.strip_prefix("ExecStart=")).unwrap_or_default();
    let mut words = exec.split_whitespace();
    let binary = words.next().unwrap_or_default();
    let root = std::path::absolute(home.root()).unwrap_or_else(|_| home.root().to_path_buf());
    let names_home = exec.contains(&format!("--home {} ", root.display()));
    let runnable = std::fs::metadata(binary).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0);
    let fix = "run `carma systemd --install` with the installed carma, then `systemctl daemon-reload`";
    if !runnable {
        return Finding::problem(
            "timer",
            format!("{} runs {binary:?}, which is not an executable file", unit.display()),
            fix,
        );
    }
    if !names_home {
        return Finding::note(
            "timer",
            format!("{} ticks another state directory: {exec}", unit.display()),
            fix,
        );
    }
    Finding::ok("timer", format!("{} runs {binary} on this queue", unit.display()))
}

/// Host limits (`--mem`, `--cpus-per-task`): whether this machine's cgroups can hold them.
pub(super) fn cgroups() -> Finding {
    let root = crate::home::is_root();
    let missing: Vec<String> = ["memory", "cpu"]
        .into_iter()
        .filter_map(|c| crate::exec::hostlimit::unenforced_here(root, c).map(|why| format!("{c}: {why}")))
        .collect();
    if missing.is_empty() {
        return Finding::ok("cgroups", "the memory and cpu controllers hold jobs' host limits");
    }
    Finding::note(
        "cgroups",
        format!("host limits are noted, not enforced ({})", missing.join("; ")),
        "for a system queue, run the tick as root on a machine with cgroup v2's memory and cpu controllers delegated",
    )
}

/// `sharing = "mps"`: the control program and the daemon's pipe directory.
pub(super) fn mps(config: &Config) -> Vec<Finding> {
    if config.tick.sharing != Sharing::Mps {
        return Vec::new();
    }
    let program = &config.enforce.mps_control;
    if !program.is_empty() && find_program(program).is_none() {
        return vec![Finding::problem(
            "mps",
            format!("[enforce] mps-control {program:?} is not on PATH"),
            "install NVIDIA's MPS (nvidia-cuda-mps-control), or set sharing = \"streams\"",
        )];
    }
    if !Path::new(crate::systemd::MPS_PIPE_DIR).is_dir() {
        return vec![Finding::problem(
            "mps",
            format!(
                "sharing = \"mps\" but {} does not exist: the MPS daemon is not running",
                crate::systemd::MPS_PIPE_DIR
            ),
            "systemctl enable --now carma-mps (from `carma systemd --install`)",
        )];
    }
    vec![Finding::ok("mps", format!("the MPS daemon's pipes are in {}", crate::systemd::MPS_PIPE_DIR))]
}

/// `[notify]`: the sendmail program mails go through.
pub(super) fn sendmail(notify: &NotifyConfig) -> Vec<Finding> {
    if notify.sendmail.is_empty() {
        if notify.mail_submitter {
            return vec![Finding::problem(
                "sendmail",
                "[notify] mail-submitter = true but sendmail is \"\": no mail can be sent",
                "set [notify] sendmail = \"/usr/sbin/sendmail\" (installed by an MTA such as postfix or msmtp-mta)",
            )];
        }
        return vec![Finding::note(
            "sendmail",
            "[notify] sendmail = \"\": --mail-user mails are not sent",
            "set it to send mail",
        )];
    }
    let path = Path::new(&notify.sendmail);
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0) {
        return vec![Finding::problem(
            "sendmail",
            format!("[notify] sendmail {:?} is not an executable file", notify.sendmail),
            "install an MTA (postfix, msmtp-mta) or fix the path",
        )];
    }
    vec![Finding::ok("sendmail", format!("mail goes through {}", notify.sendmail))]
}

/// `[metrics]`: the folders the tick writes into must exist.
pub(super) fn metrics(metrics: &MetricsConfig) -> Vec<Finding> {
    let mut findings = Vec::new();
    let textfile_dir = Path::new(&metrics.textfile).parent().map(Path::to_path_buf);
    let wanted = [
        ("textfile", textfile_dir.filter(|_| !metrics.textfile.is_empty())),
        (
            "job-mapping-dir",
            Some(PathBuf::from(&metrics.job_mapping_dir)).filter(|_| !metrics.job_mapping_dir.is_empty()),
        ),
    ];
    for (key, dir) in wanted {
        let Some(dir) = dir else { continue };
        findings.push(if dir.is_dir() {
            Finding::ok("metrics", format!("[metrics] {key}: {} exists", dir.display()))
        } else {
            Finding::problem(
                "metrics",
                format!("[metrics] {key}: {} does not exist", dir.display()),
                format!("mkdir -p {}", dir.display()),
            )
        });
    }
    findings
}

/// The state directory's free space against `[limits] free-space-floor`.
pub(super) fn disk(home: &Home, config: &Config) -> Finding {
    let floor = config.limits.free_space_floor_bytes;
    match crate::tick::free_bytes(home.root()) {
        None => Finding::note("disk", "the free space could not be measured", ""),
        Some(free) if free < floor => Finding::problem(
            "disk",
            format!(
                "{} free, below [limits] free-space-floor {}: no task starts",
                crate::text::bytes(free),
                crate::text::bytes(floor)
            ),
            "free space there (old run folders: [retention]), or lower the floor",
        ),
        Some(free) => Finding::ok(
            "disk",
            format!("{} free (floor {})", crate::text::bytes(free), crate::text::bytes(floor)),
        ),
    }
}

/// `program` as the tick would run it: an absolute path, or the first match on `PATH`.
fn find_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}
