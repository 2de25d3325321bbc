//! Host limits on cgroup v1, for hosts whose cgroup v2 hierarchy lacks the controller (a
//! hybrid hierarchy: `/sys/fs/cgroup/unified` beside `/sys/fs/cgroup/memory`, older
//! distributions, many containers). Per controller the job gets a cgroup of its own in the v1
//! hierarchy that holds it, `carma.jobs/carma-task-ID-N` below the supervisor's own cgroup
//! there (at the hierarchy's top for a supervisor in its root; below, a job stays inside any
//! limit the supervisor itself runs under):
//! * memory: `memory.limit_in_bytes`, then `memory.memsw.limit_in_bytes` the same where the
//!   kernel accounts swap (so swap is no way out; the order matters: memsw may never be below
//!   the plain limit);
//! * CPUs: `cpu.cfs_quota_us` = CPUs × the cgroup's `cpu.cfs_period_us`.
//!
//! The job moves in between fork and exec, with the v2 cgroup ([`super::cgroup`]), so all it
//! starts is born inside. At its end the supervisor reads `memory.oom_control`'s `oom_kill`
//! (Linux 4.13; before, `memory.failcnt` and a job killed by SIGKILL count as one kill) into
//! the exit record's host memory field, as the v2 path does, then removes the cgroups once the
//! processes are gone. A cgroup that a killed supervisor left is removed by the tick's reaping
//! of the attempt, or by the next supervisor's start ([`sweep`]: every one older than a
//! minute that no live supervisor holds). A supervisor holds its cgroups' folders with
//! `flock` for its whole life, so neither removes one whose job ended a moment ago while its
//! supervisor has yet to read the kill count; `rmdir` of a cgroup that still holds a process
//! fails anyway.
//!
//! Only root's files are read: `/proc/self/mountinfo` and `/proc/self/cgroup` of the
//! supervisor; no path comes from a user.

use std::io::{ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::cgroup::{cgroup_name, own_v1_dir, uses_v1};
use super::hostlimit::{HostLimits, HostMemoryEnd, JOBS_CGROUP};

/// How old an empty job cgroup must be before another supervisor's [`sweep`] removes it: a
/// younger one may be a sibling's, made a moment before its job moves in.
const SWEEP_AGE: Duration = Duration::from_secs(60);

/// One attempt's cgroups in the v1 hierarchies, one per limited controller.
#[derive(Debug, Default)]
pub struct V1Cgroups {
    /// The memory hierarchy's job cgroup, when memory is limited there.
    pub memory: Option<PathBuf>,
    /// The cpu hierarchy's job cgroup, when CPUs are limited there.
    pub cpu: Option<PathBuf>,
    /// The folders, open and locked ([`hold`]) while the supervisor lives.
    pub held: Vec<std::fs::File>,
}

impl V1Cgroups {
    /// The cgroups, memory first.
    fn dirs(&self) -> impl Iterator<Item = &PathBuf> {
        self.memory.iter().chain(self.cpu.iter())
    }

    /// Each cgroup's `cgroup.procs`, opened for the child to write `0` (itself) into.
    pub fn open_procs(&self) -> std::io::Result<Vec<std::fs::File>> {
        self.dirs()
            .map(|dir| std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs")))
            .collect()
    }

    /// Remove the cgroups (empty once the job's processes are gone); what cannot go is said in
    /// the supervisor's log and left to [`sweep`].
    pub fn remove_or_say(&self) {
        for dir in self.dirs() {
            match std::fs::remove_dir(dir) {
                Err(err) if err.kind() != ErrorKind::NotFound => {
                    eprintln!("carma run-task: cannot remove {}: {err}", dir.display())
                }
                _ => {}
            }
        }
    }
}

/// The cgroups with their `cgroup.procs` opened for the child; where one cannot be opened,
/// the cgroups are removed and the supervisor's log says the limits there do not hold.
pub fn with_procs(v1: Option<V1Cgroups>) -> Option<(V1Cgroups, Vec<std::fs::File>)> {
    let v1 = v1?;
    match v1.open_procs() {
        Ok(files) => Some((v1, files)),
        Err(err) => {
            eprintln!(
                "carma run-task: cannot open a cgroup v1's cgroup.procs ({err}); host limits there not enforced"
            );
            v1.remove_or_say();
            None
        }
    }
}

/// The limits of `limits` that carma sets on cgroup v1 here (the rest, if any, on v2).
pub fn v1_part(limits: &HostLimits) -> HostLimits {
    HostLimits {
        mem_mib: limits.mem_mib.filter(|_| uses_v1("memory")),
        cpus: limits.cpus.filter(|_| uses_v1("cpu")),
    }
}

/// The attempt's v1 cgroups ([`create_or_say`]) where a root supervisor outside systemd makes
/// the job's cgroups ([`super::cgroup`]'s conditions); `None` elsewhere (a systemd unit's
/// limits are the unit's properties).
pub fn for_job(task_id: &str, attempt: u32, limits: &HostLimits) -> Option<V1Cgroups> {
    let allowed = crate::access::uid::effective() == 0
        && std::env::var_os(super::cgroup::NO_CGROUP_ENV).is_none()
        && std::env::var_os("INVOCATION_ID").is_none();
    if !allowed {
        return None;
    }
    create_or_say(task_id, attempt, limits)
}

/// What of `limits` is left for cgroup v2 once `v1` holds its part.
pub fn left_for_v2(limits: &HostLimits, v1: Option<&V1Cgroups>) -> HostLimits {
    let Some(v1) = v1 else { return *limits };
    HostLimits {
        mem_mib: limits.mem_mib.filter(|_| v1.memory.is_none()),
        cpus: limits.cpus.filter(|_| v1.cpu.is_none()),
    }
}

/// Make and fill the attempt's v1 cgroups for the part of `limits` v1 holds here; `None`
/// when v1 holds none of it. What fails is said in the supervisor's log, and the job runs
/// without that limit, never silently.
pub fn create_or_say(task_id: &str, attempt: u32, limits: &HostLimits) -> Option<V1Cgroups> {
    let part = v1_part(limits);
    if part.is_empty() {
        return None;
    }
    let name = cgroup_name(task_id, attempt);
    let mut made = V1Cgroups::default();
    if let Some(mib) = part.mem_mib {
        match make("memory", &name, |_| memory_settings(mib)) {
            Ok((dir, held)) => {
                made.memory = Some(dir);
                made.held.push(held);
            }
            Err(why) => {
                eprintln!("carma run-task: host memory not enforced here ({why}); the job runs without it")
            }
        }
    }
    if let Some(cpus) = part.cpus {
        match make("cpu", &name, |dir| cpu_settings(dir, cpus)) {
            Ok((dir, held)) => {
                made.cpu = Some(dir);
                made.held.push(held);
            }
            Err(why) => {
                eprintln!("carma run-task: CPUs not enforced here ({why}); the job runs without them")
            }
        }
    }
    let set: Vec<String> = made.dirs().map(|dir| dir.display().to_string()).collect();
    if !set.is_empty() {
        eprintln!("carma run-task: host limits set on cgroup v1: {}", set.join(" "));
    }
    (made.memory.is_some() || made.cpu.is_some()).then_some(made)
}

/// `memory.limit_in_bytes`, then `memory.memsw.limit_in_bytes`, both `mib` MiB.
fn memory_settings(mib: u64) -> Vec<(&'static str, String)> {
    let bytes = mib.saturating_mul(1024 * 1024).to_string();
    vec![("memory.limit_in_bytes", bytes.clone()), ("memory.memsw.limit_in_bytes", bytes)]
}

/// `cpu.cfs_quota_us` = `cpus` × the cgroup `dir`'s `cpu.cfs_period_us`.
fn cpu_settings(dir: &Path, cpus: u32) -> Vec<(&'static str, String)> {
    let period = std::fs::read_to_string(dir.join("cpu.cfs_period_us"))
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(super::hostlimit::CPU_PERIOD_US);
    vec![("cpu.cfs_quota_us", u64::from(cpus).saturating_mul(period).to_string())]
}

/// `carma.jobs/NAME` below the supervisor's own cgroup in `controller`'s v1 hierarchy, made,
/// the leftovers beside it swept, held ([`hold`]) and `settings` written.
fn make(
    controller: &str,
    name: &str,
    settings: impl FnOnce(&Path) -> Vec<(&'static str, String)>,
) -> Result<(PathBuf, std::fs::File), String> {
    let own = own_v1_dir(controller)
        .ok_or_else(|| format!("no cgroup v1 {controller} hierarchy holds the supervisor"))?;
    let base = own.join(JOBS_CGROUP);
    match std::fs::create_dir(&base) {
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::AlreadyExists => {}
        Err(err) => return Err(format!("cannot create {}: {err}", base.display())),
    }
    sweep(&base, SWEEP_AGE);
    let dir = base.join(name);
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::AlreadyExists => {}
        Err(err) => return Err(format!("cannot create {}: {err}", dir.display())),
    }
    let held = hold(&dir).map_err(|err| format!("cannot hold {}: {err}", dir.display()))?;
    let settings = settings(&dir);
    if let Err(why) = write_settings(&dir, &settings) {
        let _ = std::fs::remove_dir(&dir);
        return Err(why);
    }
    Ok((dir, held))
}

/// The folder `dir` opened and locked (`flock`, exclusive, without waiting): held by its
/// attempt's supervisor while it lives, and taken a moment by whoever removes a leftover, so
/// that nobody removes a folder its supervisor still needs. The kernel drops the lock when
/// the holder dies.
fn hold(dir: &Path) -> std::io::Result<std::fs::File> {
    let folder = std::fs::File::open(dir)?;
    // SAFETY: flock on a descriptor this function owns; no memory is involved.
    if unsafe { libc::flock(folder.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(folder)
}

/// Remove the folder `dir` unless a live supervisor holds it (or a process is in it).
fn remove_unheld(dir: &Path) {
    if let Ok(_held) = hold(dir) {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Write each file in order; `memory.memsw.limit_in_bytes` is skipped on a kernel without
/// swap accounting (no file: no swap to limit).
pub fn write_settings(dir: &Path, settings: &[(&'static str, String)]) -> Result<(), String> {
    for (file, value) in settings {
        let written = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(file))
            .and_then(|mut f| f.write_all(value.as_bytes()));
        match written {
            Ok(()) => {}
            Err(err) if *file == "memory.memsw.limit_in_bytes" && err.kind() == ErrorKind::NotFound => {}
            Err(err) => return Err(format!("cannot write {value} to {}: {err}", dir.join(file).display())),
        }
    }
    Ok(())
}

/// Remove every job cgroup in `base` older than `age` that no live supervisor holds and no
/// process is in (the kernel refuses to remove one that is); a killed supervisor's leftovers
/// go this way.
pub fn sweep(base: &Path, age: Duration) {
    let now = SystemTime::now();
    for entry in std::fs::read_dir(base).into_iter().flatten().flatten() {
        let old = entry
            .metadata()
            .ok()
            .filter(|meta| meta.is_dir())
            .and_then(|meta| meta.modified().ok())
            .is_some_and(|made| now.duration_since(made).is_ok_and(|since| since >= age));
        let named = entry.file_name().to_str().is_some_and(|name| name.starts_with("carma-task-"));
        if old && named {
            remove_unheld(&entry.path());
        }
    }
}

/// Remove the attempt's v1 cgroups where this process (the tick, reaping the attempt of a
/// supervisor that died) would have made them; ones still in use stay.
pub fn remove_attempt(task_id: &str, attempt: u32) {
    for controller in ["memory", "cpu"] {
        if let Some(own) = own_v1_dir(controller) {
            remove_unheld(&own.join(JOBS_CGROUP).join(cgroup_name(task_id, attempt)));
        }
    }
}

/// How the job's host memory ended on cgroup v1, when `limits` has a memory limit: read from
/// the job's own v1 memory cgroup, or, in a systemd unit on a hybrid host, from the unit's
/// (systemd writes `MemoryMax=` as its `memory.limit_in_bytes`). `None` where v1 holds no
/// memory limit of the job's.
pub fn memory_end_of(v1: Option<&V1Cgroups>, limits: &HostLimits, sigkilled: bool) -> Option<HostMemoryEnd> {
    limits.mem_mib?;
    let unit = || {
        std::env::var_os("INVOCATION_ID")?;
        own_v1_dir("memory").filter(|_| uses_v1("memory"))
    };
    let dir = v1.and_then(|v1| v1.memory.clone()).or_else(unit)?;
    memory_end(&dir, sigkilled)
}

/// How the job's host memory ended on its v1 memory cgroup `dir`: the limit it held and
/// `memory.oom_control`'s `oom_kill`; on kernels without that line, `memory.failcnt` above
/// zero and a job killed by SIGKILL count as one kill.
pub fn memory_end(dir: &Path, killed_by_sigkill: bool) -> Option<HostMemoryEnd> {
    let limit = std::fs::read_to_string(dir.join("memory.limit_in_bytes")).ok()?;
    let limit_mib = limit.trim().parse::<u64>().ok()? / (1024 * 1024);
    let control = std::fs::read_to_string(dir.join("memory.oom_control")).unwrap_or_default();
    let oom_kills = super::hostlimit::parse_oom_kill(&control).unwrap_or_else(|| {
        let failcnt = std::fs::read_to_string(dir.join("memory.failcnt")).unwrap_or_default();
        u64::from(killed_by_sigkill && failcnt.trim().parse::<u64>().is_ok_and(|n| n > 0))
    });
    Some(HostMemoryEnd { limit_mib, oom_kills, cgroup_v1: true })
}

#[cfg(test)]
mod tests {
    //! Goal: the limits become exactly
    //! the v1 files in the documented order, the kernel's kill count is read from
    //! `memory.oom_control` (or failcnt and SIGKILL), and only old, empty leftovers no live
    //! supervisor holds are swept.
    use super::*;

    #[test]
    fn limits_become_v1_files_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            memory_settings(64),
            vec![
                ("memory.limit_in_bytes", "67108864".to_string()),
                ("memory.memsw.limit_in_bytes", "67108864".to_string()),
            ]
        );
        // A file shorter than the value: kernel files take a write whole, without truncation.
        std::fs::write(dir.path().join("memory.limit_in_bytes"), "max").expect("write");
        write_settings(dir.path(), &memory_settings(64)).expect("no memsw file: skipped");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("memory.limit_in_bytes")).expect("read"),
            "67108864"
        );
        assert!(!dir.path().join("memory.memsw.limit_in_bytes").exists(), "never created");

        assert_eq!(cpu_settings(dir.path(), 2), vec![("cpu.cfs_quota_us", "200000".to_string())]);
        std::fs::write(dir.path().join("cpu.cfs_period_us"), "50000\n").expect("write");
        assert_eq!(cpu_settings(dir.path(), 3), vec![("cpu.cfs_quota_us", "150000".to_string())]);
        let refused = write_settings(dir.path(), &cpu_settings(dir.path(), 3)).expect_err("no quota file");
        assert!(refused.starts_with("cannot write 150000 to "), "{refused}");
    }

    #[test]
    fn the_kernels_kill_count_from_oom_control_or_failcnt() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("memory.limit_in_bytes"), "67108864\n").expect("write");
        std::fs::write(
            dir.path().join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .expect("write");
        assert_eq!(
            memory_end(dir.path(), false),
            Some(HostMemoryEnd { limit_mib: 64, oom_kills: 2, cgroup_v1: true })
        );
        std::fs::write(dir.path().join("memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\n")
            .expect("write");
        std::fs::write(dir.path().join("memory.failcnt"), "17\n").expect("write");
        assert_eq!(memory_end(dir.path(), true).map(|end| end.oom_kills), Some(1), "failcnt and SIGKILL");
        assert_eq!(memory_end(dir.path(), false).map(|end| end.oom_kills), Some(0), "failcnt, exited");
        let v1 = V1Cgroups { memory: Some(dir.path().to_path_buf()), cpu: None, held: Vec::new() };
        let limits = HostLimits { mem_mib: Some(64), cpus: None };
        assert_eq!(memory_end_of(Some(&v1), &limits, true).map(|end| end.limit_mib), Some(64));
        assert_eq!(memory_end_of(Some(&v1), &HostLimits::default(), true), None, "no memory limit asked");
        std::fs::remove_file(dir.path().join("memory.limit_in_bytes")).expect("rm");
        assert_eq!(memory_end(dir.path(), true), None, "no limit file: no reading");
    }

    #[test]
    fn sweep_removes_only_old_empty_job_cgroups() {
        let base = tempfile::tempdir().expect("tempdir");
        for name in ["carma-task-a-1", "carma-task-b-1", "other"] {
            std::fs::create_dir(base.path().join(name)).expect("mkdir");
        }
        std::fs::write(base.path().join("carma-task-b-1").join("cgroup.procs"), "").expect("write");
        sweep(base.path(), Duration::from_secs(3600));
        assert!(base.path().join("carma-task-a-1").exists(), "young: may be a sibling's, kept");
        std::fs::create_dir(base.path().join("carma-task-c-1")).expect("mkdir");
        let held = hold(&base.path().join("carma-task-c-1")).expect("held");
        sweep(base.path(), Duration::ZERO);
        assert!(!base.path().join("carma-task-a-1").exists(), "old and empty: removed");
        assert!(base.path().join("carma-task-c-1").exists(), "held by its live supervisor: kept");
        drop(held);
        sweep(base.path(), Duration::ZERO);
        assert!(!base.path().join("carma-task-c-1").exists(), "its supervisor gone: removed");
        assert!(base.path().join("carma-task-b-1").exists(), "not empty (stands for in use): kept");
        assert!(base.path().join("other").exists(), "not carma's: kept");
    }
}
