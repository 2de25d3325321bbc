//! A job's host limits: its memory (`memory.max`, and no swap: `memory.swap.max` 0) and its
//! CPUs (`cpu.max`, a quota of `cpus` × the period), on a cgroup v2 of its own, and the
//! kernel's word that the limit was hit (`memory.events`' `oom_kill` counter).
//!
//! Where they are set:
//! * **a systemd unit** (the system queue's tick is a service, so each supervisor is a
//!   `systemd-run` unit): the launcher passes `MemoryMax=`, `MemorySwapMax=0` and
//!   `CPUQuota=` ([`HostLimits::systemd_properties`]); systemd owns the unit's cgroup and
//!   delegates the controllers. `OOMPolicy=continue` keeps the supervisor alive when the
//!   kernel kills the job, so it writes the exit record that names host memory;
//! * **the job's own cgroup** ([`super::cgroup`], a root supervisor outside systemd): a job
//!   with limits gets its cgroup below `carma.jobs` at the top of the hierarchy
//!   ([`limited_base`]), not below the supervisor's own: the kernel enables a controller for
//!   a cgroup's children only when that cgroup holds no process (the "no internal processes"
//!   rule), and `carma.jobs` never does. The hierarchy's root must delegate the controllers
//!   (`cgroup.subtree_control`, as systemd's does); then the supervisor writes the files
//!   ([`apply`]). Where anything fails, the job runs without the limits, and the
//!   supervisor's log says why.
//!
//! * **the job's own cgroup v1** ([`super::hostlimit_v1`]), for each controller the v2
//!   hierarchy lacks and a v1 hierarchy holds (a hybrid host).
//!
//! Nowhere else: a personal queue's tick is not root, and a host with the controller on
//! neither hierarchy (most containers) cannot limit it. `carma submit
//! --dry-run` and `carma show` say "not enforced here (why)" ([`unenforced_here`]); the job
//! still runs, never silently unlimited.
//!
//! A job killed over its host memory is the kernel's verdict, read from `memory.events`
//! ([`oom_kills`]) by the supervisor before it removes the cgroup; the tick ends it Failed
//! with a reason that names host memory, never as a GPU out-of-memory.

use std::io::{ErrorKind, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The cgroup v2 CPU period carma uses, in microseconds (the kernel's default).
pub const CPU_PERIOD_US: u64 = 100_000;

/// What one attempt may use of the host.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostLimits {
    /// Host memory for the whole job in MiB (`host_mem`), swap excluded; `None`: unlimited.
    #[serde(default)]
    pub mem_mib: Option<u64>,
    /// CPUs for the whole job (`cpus`), a quota per period; `None`: unlimited.
    #[serde(default)]
    pub cpus: Option<u32>,
}

/// How an attempt's host memory ended, from the supervisor's reading of the job's cgroup.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemoryEnd {
    /// The limit the job ran under, in MiB.
    pub limit_mib: u64,
    /// `memory.events`' `oom_kill`: processes the kernel killed at that limit.
    pub oom_kills: u64,
    /// Read from a cgroup v1 (`memory.oom_control`) rather than v2 (`memory.events`).
    #[serde(default)]
    pub cgroup_v1: bool,
}

impl HostLimits {
    /// No limit at all.
    pub fn is_empty(&self) -> bool {
        self.mem_mib.is_none() && self.cpus.is_none()
    }

    /// The cgroup v2 files to write and their values, in order.
    pub fn cgroup_settings(&self) -> Vec<(&'static str, String)> {
        let mut settings = Vec::new();
        if let Some(mib) = self.mem_mib {
            settings.push(("memory.max", mib.saturating_mul(1024 * 1024).to_string()));
            settings.push(("memory.swap.max", "0".to_string()));
        }
        if let Some(cpus) = self.cpus {
            let quota = u64::from(cpus).saturating_mul(CPU_PERIOD_US);
            settings.push(("cpu.max", format!("{quota} {CPU_PERIOD_US}")));
        }
        settings
    }

    /// `systemd-run --property=` values for a supervisor's unit.
    pub fn systemd_properties(&self) -> Vec<String> {
        let mut properties = Vec::new();
        if let Some(mib) = self.mem_mib {
            properties.push(format!("MemoryMax={mib}M"));
            properties.push("MemorySwapMax=0".to_string());
            properties.push("OOMPolicy=continue".to_string());
        }
        if let Some(cpus) = self.cpus {
            properties.push(format!("CPUQuota={}%", u64::from(cpus) * 100));
        }
        properties
    }

    /// The controllers the limits need.
    fn controllers(&self) -> Vec<&'static str> {
        let mut controllers = Vec::new();
        if self.mem_mib.is_some() {
            controllers.push("memory");
        }
        if self.cpus.is_some() {
            controllers.push("cpu");
        }
        controllers
    }
}

/// The folder of limited jobs' cgroups, `carma.jobs` at the top of the cgroup v2 hierarchy,
/// made if missing, with the limits' controllers enabled for its children; `Err` says why not.
pub fn limited_base(limits: &HostLimits) -> Result<std::path::PathBuf, String> {
    let (mount, _) = super::cgroup::cgroup2_mount().ok_or("no cgroup v2 hierarchy is mounted")?;
    let delegated = std::fs::read_to_string(mount.join("cgroup.subtree_control")).unwrap_or_default();
    let controllers = limits.controllers();
    if let Some(missing) = controllers.iter().find(|c| !delegated.split_whitespace().any(|d| d == **c)) {
        return Err(not_delegated(missing));
    }
    let base = mount.join(JOBS_CGROUP);
    match std::fs::create_dir(&base) {
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::AlreadyExists => {}
        Err(err) => return Err(format!("cannot create {}: {err}", base.display())),
    }
    enable(&base, limits)?;
    Ok(base)
}

/// [`limited_base`] for a job with limits, the reason it fails in the supervisor's log;
/// `None` without limits or on failure.
pub fn limited_base_or_say(limits: &HostLimits) -> Option<std::path::PathBuf> {
    if limits.is_empty() {
        return None;
    }
    limited_base(limits).map_err(|why| eprintln!("carma run-task: no cgroup with host limits ({why})")).ok()
}

/// `carma.jobs`: the cgroup below which jobs with host limits get theirs.
pub const JOBS_CGROUP: &str = "carma.jobs";

/// Why a controller is not enforced when the hierarchy's root does not delegate it.
fn not_delegated(controller: &str) -> String {
    format!(
        "the cgroup v2 hierarchy's root does not delegate the {controller} controller in cgroup.subtree_control"
    )
}

/// Enables the limits' controllers for the children of the cgroup `dir`.
fn enable(dir: &Path, limits: &HostLimits) -> Result<(), String> {
    let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    for controller in limits.controllers() {
        if enabled.split_whitespace().any(|c| c == controller) {
            continue;
        }
        write(dir, "cgroup.subtree_control", &format!("+{controller}")).map_err(|err| {
            let why = match err.raw_os_error() {
                Some(libc::EBUSY) => {
                    "it holds processes, so the kernel delegates no controller below it".to_string()
                }
                Some(libc::ENOENT) => format!("the hierarchy has no {controller} controller"),
                _ => err.to_string(),
            };
            format!("cannot enable the {controller} controller in {}: {why}", dir.display())
        })?;
    }
    Ok(())
}

/// Sets `limits` on the job's cgroup `dir` before the job is moved in: its parent must give
/// it their controllers (`carma.jobs` does, [`limited_base`]; the supervisor's own cgroup,
/// where the job's falls back to, is never changed), then each file is written.
/// `memory.swap.max` is skipped on a kernel without swap accounting (no file: no swap to
/// limit). `Err` says why not, in words for the supervisor's log.
pub fn apply(dir: &Path, limits: &HostLimits) -> Result<(), String> {
    let parent = dir.parent().ok_or("the job's cgroup has no parent")?;
    let given = std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
    if let Some(missing) =
        limits.controllers().into_iter().find(|c| !given.split_whitespace().any(|g| g == *c))
    {
        return Err(format!("{} gives its children no {missing} controller", parent.display()));
    }
    for (file, value) in limits.cgroup_settings() {
        match write(dir, file, &value) {
            Ok(()) => {}
            Err(err) if file == "memory.swap.max" && err.kind() == ErrorKind::NotFound => {}
            Err(err) => return Err(format!("cannot write {value} to {}: {err}", dir.join(file).display())),
        }
    }
    Ok(())
}

/// [`apply`] on the job's cgroup, or, without one, the unit's limits (set by systemd); what
/// is not enforced is said in the supervisor's log, never silently dropped.
pub fn apply_or_say(limits: &HostLimits, job_cgroup: Option<&Path>) {
    if limits.is_empty() {
        return;
    }
    let outcome = match job_cgroup {
        Some(dir) => apply(dir, limits),
        None if std::env::var_os("INVOCATION_ID").is_some() => Ok(()),
        None => Err("the job has no cgroup of its own".to_string()),
    };
    let set: Vec<String> = match job_cgroup {
        Some(_) => limits.cgroup_settings().iter().map(|(file, value)| format!("{file}={value}")).collect(),
        None => limits.systemd_properties(),
    };
    match outcome {
        Ok(()) => eprintln!("carma run-task: host limits set: {}", set.join(" ")),
        Err(why) => {
            eprintln!("carma run-task: host limits not enforced here ({why}); the job runs without them")
        }
    }
}

fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new().write(true).open(dir.join(file))?.write_all(value.as_bytes())
}

/// How the job's host memory ended: the limit its cgroup held and the kernel's kills at it,
/// read before the cgroup is removed. `job_cgroup` is the job's own cgroup; without one, a
/// supervisor in a systemd unit reads its unit's (the limit is the unit's). `None` when no
/// memory limit was asked for or none is in force.
pub fn memory_end(limits: &HostLimits, job_cgroup: Option<&Path>) -> Option<HostMemoryEnd> {
    limits.mem_mib?;
    let unit = || {
        std::env::var_os("INVOCATION_ID")?;
        super::cgroup::own_cgroup_dir()
    };
    let dir = job_cgroup.map(Path::to_path_buf).or_else(unit)?;
    Some(HostMemoryEnd { limit_mib: memory_max_mib(&dir)?, oom_kills: oom_kills(&dir)?, cgroup_v1: false })
}

/// The `oom_kill` counter of the cgroup `dir`'s `memory.events`; `None` without the file.
pub fn oom_kills(dir: &Path) -> Option<u64> {
    parse_oom_kill(&std::fs::read_to_string(dir.join("memory.events")).ok()?)
}

/// `oom_kill N` from a `memory.events` text.
pub fn parse_oom_kill(text: &str) -> Option<u64> {
    text.lines().find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse().ok())
}

/// The memory limit a cgroup `dir` holds now (`memory.max`), in MiB; `None` for `max` or
/// without the file.
pub fn memory_max_mib(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("memory.max")).ok()?;
    text.trim().parse::<u64>().ok().map(|bytes| bytes / (1024 * 1024))
}

/// Whether the queue whose state directory is `home` has a root tick: root's `carma init`
/// made it, so it belongs to root (a personal queue belongs to its user).
pub fn queue_tick_is_root(home: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(home).is_ok_and(|meta| meta.uid() == 0)
}

/// Why host limits would not be enforced for this queue's jobs, `None` where they would:
/// `tick_is_root` is whether the queue's tick (which starts the supervisors) runs as root.
/// Read from this machine's cgroup v2 hierarchy, as any user may, and where it lacks the
/// controller, from the cgroup v1 hierarchies ([`super::hostlimit_v1`]).
pub fn unenforced_here(tick_is_root: bool, controller: &str) -> Option<String> {
    if !tick_is_root {
        return Some(
            "a personal queue: its tick does not run as root, and only root sets a job's cgroup".into(),
        );
    }
    if super::cgroup::uses_v1(controller) {
        return None;
    }
    let Some((mount, _)) = super::cgroup::cgroup2_mount() else {
        return Some("no cgroup v2 hierarchy is mounted".into());
    };
    let has = |file: &str| {
        let text = std::fs::read_to_string(mount.join(file)).unwrap_or_default();
        text.split_whitespace().any(|c| c == controller)
    };
    unenforced_by(has("cgroup.controllers"), has("cgroup.subtree_control"), controller)
}

/// `enforced by the job's cgroup v1` or `… v2`: the words for a limit of `controller` that
/// holds here ([`unenforced_here`] is `None`), naming the mechanism.
pub fn enforced_words(controller: &str) -> String {
    let version = if super::cgroup::uses_v1(controller) { "v1" } else { "v2" };
    format!("enforced by the job's cgroup {version}")
}

/// The words of [`unenforced_here`] from what it read: whether the hierarchy offers the
/// controller, and whether its root delegates it (systemd's does; a job's cgroup below
/// `carma.jobs` or in a unit needs that).
fn unenforced_by(offered: bool, delegated: bool, controller: &str) -> Option<String> {
    match (offered, delegated) {
        (false, _) => Some(format!(
            "the cgroup v2 hierarchy has no {controller} controller, and no cgroup v1 hierarchy is mounted with it"
        )),
        (true, false) => Some(not_delegated(controller)),
        (true, true) => None,
    }
}

/// This machine's online CPUs and its memory in MiB (`/proc/meminfo`'s MemTotal), what no
/// job here can have more of; `None` when either cannot be read.
pub fn machine() -> Option<(u32, u64)> {
    // SAFETY: sysconf has no preconditions.
    let cpus =
        u32::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).ok().filter(|n| *n >= 1)?;
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some((cpus, kib / 1024))
}

#[cfg(test)]
mod tests {
    //! Goal: the limits become exactly the cgroup files and systemd properties documented,
    //! and the kernel's `oom_kill` counter is read from `memory.events` as the kernel writes it.
    use super::*;

    #[test]
    fn limits_become_cgroup_files_and_unit_properties() {
        let limits = HostLimits { mem_mib: Some(512), cpus: Some(2) };
        assert_eq!(
            limits.cgroup_settings(),
            vec![
                ("memory.max", "536870912".to_string()),
                ("memory.swap.max", "0".to_string()),
                ("cpu.max", "200000 100000".to_string()),
            ]
        );
        assert_eq!(
            limits.systemd_properties(),
            vec!["MemoryMax=512M", "MemorySwapMax=0", "OOMPolicy=continue", "CPUQuota=200%"]
        );
        assert!(HostLimits::default().is_empty());
        assert!(HostLimits::default().cgroup_settings().is_empty());
        assert!(HostLimits::default().systemd_properties().is_empty());
    }

    #[test]
    fn apply_writes_the_files_where_the_parent_gives_the_controllers() {
        // A cgroup's files stand in a temporary folder: the kernel's files exist before a
        // write, so `apply` opens them without creating any.
        let parent = tempfile::tempdir().expect("tempdir");
        let job = parent.path().join("carma-task-abc-1");
        std::fs::create_dir(&job).expect("mkdir");
        for file in ["memory.max", "cpu.max"] {
            std::fs::write(job.join(file), "max").expect("write");
        }
        let limits = HostLimits { mem_mib: Some(64), cpus: Some(2) };
        std::fs::write(parent.path().join("cgroup.subtree_control"), "memory\n").expect("write");
        let refused = apply(&job, &limits).expect_err("no cpu controller given");
        assert_eq!(refused, format!("{} gives its children no cpu controller", parent.path().display()));
        std::fs::write(parent.path().join("cgroup.subtree_control"), "cpu memory pids\n").expect("write");
        apply(&job, &limits).expect("applied, no swap file to limit");
        assert_eq!(std::fs::read_to_string(job.join("memory.max")).expect("read"), "67108864");
        assert_eq!(std::fs::read_to_string(job.join("cpu.max")).expect("read"), "200000 100000");
        assert!(!job.join("memory.swap.max").exists(), "never created");

        std::fs::write(job.join("memory.events"), "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n")
            .expect("write");
        std::fs::write(job.join("memory.max"), "67108864\n").expect("write");
        assert_eq!(
            memory_end(&limits, Some(&job)),
            Some(HostMemoryEnd { limit_mib: 64, oom_kills: 1, cgroup_v1: false })
        );
        assert_eq!(memory_end(&HostLimits { mem_mib: None, ..limits }, Some(&job)), None, "no memory limit");
    }

    #[test]
    fn oom_kill_counter() {
        let events = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_oom_kill(events), Some(1));
        assert_eq!(parse_oom_kill("low 0\n"), None);
        assert_eq!(parse_oom_kill("oom_kill x\n"), None);
        assert_eq!(parse_oom_kill("oom_group_kill 3\n"), None);
    }

    #[test]
    fn why_not_enforced() {
        assert_eq!(unenforced_by(true, true, "memory"), None);
        assert_eq!(
            unenforced_by(true, false, "cpu").as_deref(),
            Some(
                "the cgroup v2 hierarchy's root does not delegate the cpu controller in cgroup.subtree_control"
            )
        );
        assert_eq!(
            unenforced_by(false, false, "memory").as_deref(),
            Some(
                "the cgroup v2 hierarchy has no memory controller, and no cgroup v1 hierarchy is mounted with it"
            )
        );
        assert_eq!(
            unenforced_here(false, "memory").as_deref(),
            Some("a personal queue: its tick does not run as root, and only root sets a job's cgroup")
        );
    }
}
