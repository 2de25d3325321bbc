//! The machine's processes as `/proc` shows them, and signals that cannot
//! reach a recycled pid.
//!
//! [`read_table`] is a snapshot: by the time a signal is sent, a listed
//! process may have exited and its pid been given to another. So
//! [`signal_entry`] opens a pidfd first, then checks that the pid still has
//! the start time the snapshot saw, then signals through the pidfd: the
//! pidfd names that one process for as long as it is open, so the signal
//! reaches the listed process or nobody.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use super::liveness::read_proc_stat;

/// Most bytes of `/proc/PID/environ` read when looking for a tag.
const ENVIRON_BYTES_MAX: u64 = 8 * 1024 * 1024;

/// One process as seen in `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEntry {
    /// Its pid.
    pub pid: u32,
    /// Its parent's pid.
    pub ppid: u32,
    /// Its process group.
    pub pgrp: i32,
    /// Its session.
    pub session: i32,
    /// R, S, D, Z, T, …
    pub state: char,
    /// Start time in clock ticks since boot.
    pub start_time_ticks: u64,
    /// The owner of `/proc/PID`: its effective uid, or 0 when it is not
    /// dumpable (a setuid program, or one that said so with prctl).
    pub owner_uid: u32,
}

impl ProcEntry {
    /// A zombie (or dying) process: it has exited and holds nothing but its
    /// pid until its parent reaps it.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Every process in `/proc` (threads are not listed there). A process that
/// exits while the table is read is left out.
pub fn read_table() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut table = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else {
            continue;
        };
        table.extend(read_entry(pid));
    }
    table
}

/// One process as [`read_table`] lists it; `None` when it does not exist (or exits meanwhile).
pub fn read_entry(pid: u32) -> Option<ProcEntry> {
    let meta = std::fs::symlink_metadata(format!("/proc/{pid}")).ok()?;
    let stat = read_proc_stat(pid)?;
    Some(ProcEntry {
        pid,
        ppid: stat.ppid,
        pgrp: stat.pgrp,
        session: stat.session,
        state: stat.state,
        start_time_ticks: stat.start_time_ticks,
        owner_uid: meta.uid(),
    })
}

/// True when `/proc/PID/environ` holds exactly `entry` (`NAME=value`) as one
/// of its variables. Unreadable (another user's process, or gone) is false.
pub fn environ_contains(pid: u32, entry: &str) -> bool {
    let Ok(file) = File::open(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let mut bytes = Vec::new();
    if file.take(ENVIRON_BYTES_MAX).read_to_end(&mut bytes).is_err() {
        return false;
    }
    bytes.split(|byte| *byte == 0).any(|variable| variable == entry.as_bytes())
}

/// What [`signal_entry`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// The signal was delivered to the listed process.
    Delivered,
    /// The process is gone (or its pid now names another process).
    Gone,
}

/// Send `signal` to the process `entry` describes, and only to it.
pub fn signal_entry(entry: &ProcEntry, signal: i32) -> std::io::Result<Sent> {
    let pid = libc::pid_t::try_from(entry.pid).unwrap_or(0);
    if pid <= 1 {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ESRCH) => Ok(Sent::Gone),
            // Kernels before 5.3: check, then kill; the window is a few µs.
            Some(libc::ENOSYS) => kill_if_same(entry, pid, signal),
            _ => Err(err),
        };
    }
    // SAFETY: `raw` is a descriptor pidfd_open just returned to us.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
    if !same_process(entry) {
        return Ok(Sent::Gone);
    }
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if sent == 0 {
        return Ok(Sent::Delivered);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) { Ok(Sent::Gone) } else { Err(err) }
}

/// True while `entry.pid` is still the process with `entry`'s start time.
fn same_process(entry: &ProcEntry) -> bool {
    read_proc_stat(entry.pid).is_some_and(|stat| stat.start_time_ticks == entry.start_time_ticks)
}

fn kill_if_same(entry: &ProcEntry, pid: libc::pid_t, signal: i32) -> std::io::Result<Sent> {
    if !same_process(entry) {
        return Ok(Sent::Gone);
    }
    // SAFETY: kill has no memory effects.
    if unsafe { libc::kill(pid, signal) } == 0 {
        return Ok(Sent::Delivered);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) { Ok(Sent::Gone) } else { Err(err) }
}

/// Sends `signal` to each live process of process group `pgid` that descends from this
/// process (a supervisor is its job's subreaper, so every process of the job does), each
/// through its pidfd; returns how many were reached. Unlike `kill(-pgid)`, a group id that the
/// kernel handed to someone else once the job's group had ended reaches nobody.
pub fn signal_own_group(pgid: i32, signal: i32) -> usize {
    if pgid <= 1 {
        return 0;
    }
    let table = read_table();
    let parents: std::collections::BTreeMap<u32, u32> = table.iter().map(|e| (e.pid, e.ppid)).collect();
    let me = std::process::id();
    let descends = |pid: u32| {
        let mut at = pid;
        // A chain longer than the table is a loop in a changing snapshot: not ours.
        for _ in 0..=table.len() {
            match parents.get(&at) {
                Some(&parent) if parent == me => return true,
                Some(&parent) if parent > 1 => at = parent,
                _ => return false,
            }
        }
        false
    };
    table
        .iter()
        .filter(|entry| entry.pgrp == pgid && !entry.is_dead() && entry.pid != me && descends(entry.pid))
        .filter(|entry| signal_entry(entry, signal).is_ok_and(|sent| sent == Sent::Delivered))
        .count()
}

/// Reap `entry` if it is a zombie child of this process; other processes'
/// children are left alone (in a test binary they belong to other tests).
pub fn reap_if_own_zombie(entry: &ProcEntry) {
    if !entry.is_dead() || entry.ppid != std::process::id() {
        return;
    }
    let pid = libc::pid_t::try_from(entry.pid).unwrap_or(0);
    if pid > 1 {
        let mut status: libc::c_int = 0;
        // SAFETY: waits for one specific child without blocking.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

/// Most bytes of a process environment read to find its Slurm job.
pub const SLURM_ENVIRON_BYTES_MAX: u64 = 256 * 1024;

/// The Slurm job named in a process environment (`/proc/PID/environ`: NUL-separated
/// `NAME=value`): `SLURM_CLUSTER_NAME` (empty when absent) and `SLURM_JOB_ID`.
pub fn slurm_job_in_environ(environ: &[u8]) -> Option<(String, u32)> {
    let mut cluster = String::new();
    let mut job = None;
    for entry in environ.split(|&b| b == 0) {
        if let Some(value) = entry.strip_prefix(b"SLURM_JOB_ID=") {
            job = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
        } else if let Some(value) = entry.strip_prefix(b"SLURM_CLUSTER_NAME=") {
            cluster = String::from_utf8_lossy(value).into_owned();
        }
    }
    Some((cluster, job?))
}

#[cfg(test)]
mod tests {
    //! Goal: the table lists real processes with their parents, the environ
    //! test matches whole variables only, and a signal for a process whose
    //! start time changed goes nowhere.
    use super::*;

    #[test]
    fn table_environ_and_safe_signals() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("CARMA_PROBE_TAG", "x/1")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let table = read_table();
        let entry = table.iter().find(|e| e.pid == pid).expect("child listed").clone();
        assert_eq!(entry.ppid, std::process::id());
        assert!(!entry.is_dead());
        assert!(environ_contains(pid, "CARMA_PROBE_TAG=x/1"));
        assert!(!environ_contains(pid, "CARMA_PROBE_TAG=x/"), "prefixes must not match");
        assert!(!environ_contains(pid, "CARMA_PROBE_TAG=x/10"));

        let stale = ProcEntry { start_time_ticks: entry.start_time_ticks + 1, ..entry.clone() };
        assert_eq!(signal_entry(&stale, libc::SIGKILL).expect("stale"), Sent::Gone);
        assert!(read_proc_stat(pid).is_some_and(|s| s.state != 'Z'), "a stale entry must not be signalled");

        assert_eq!(signal_entry(&entry, libc::SIGKILL).expect("kill"), Sent::Delivered);
        let status = child.wait().expect("wait");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        assert_eq!(signal_entry(&entry, libc::SIGKILL).expect("gone"), Sent::Gone);
    }

    /// Goal: a hang-up for the job's process group reaches only processes descending from the
    /// supervisor: a group id that now names a stranger's group (the job's reaped and reused)
    /// reaches nobody, where `kill(-pgid)` would end it. Method: our own child in its own
    /// group, and an orphan (`setsid`, its parent gone) leading another.
    #[test]
    fn a_group_signal_reaches_only_our_descendants() {
        use std::os::unix::process::CommandExt;
        let mut own = std::process::Command::new("sleep").arg("30").process_group(0).spawn().expect("sleep");
        let dir = tempfile::tempdir().expect("tempdir");
        let pid_file = dir.path().join("stranger.pid");
        let script = format!("setsid sleep 30 & echo $! > {}", pid_file.display());
        std::process::Command::new("sh").args(["-c", &script]).status().expect("sh");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let stranger: u32 = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse().ok())
                && read_proc_stat(pid).is_some_and(|s| s.pgrp == pid as i32)
            {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "the stranger never led its group");
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(signal_own_group(stranger as i32, libc::SIGTERM), 0, "not ours: untouched");
        assert!(read_proc_stat(stranger).is_some_and(|s| s.state != 'Z'), "the stranger lives");
        // kill(-pgid) would have reached it: the group exists.
        // SAFETY: signal 0 only checks that the group exists.
        assert_eq!(unsafe { libc::kill(-(stranger as i32), 0) }, 0);
        assert_eq!(signal_own_group(own.id() as i32, libc::SIGTERM), 1, "our child's group");
        let status = own.wait().expect("wait");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGTERM));
        // SAFETY: ending the stranger this test started, by its pid.
        unsafe { libc::kill(stranger as libc::pid_t, libc::SIGKILL) };
    }
}
