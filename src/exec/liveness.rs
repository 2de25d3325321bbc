//! Is a recorded process still the same process? A pid alone is not enough:
//! pids are reused, and after a reboot every recorded pid is meaningless.
//! A [`ProcessIdentity`] is pid + start time (in clock ticks since boot,
//! field 22 of `/proc/PID/stat`) + boot id; it is alive only if all three
//! match and the process is not a zombie.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ExecError;

/// Where the kernel publishes the boot id.
pub const BOOT_ID_PATH_DEFAULT: &str = "/proc/sys/kernel/random/boot_id";
/// Env var overriding the boot id file (reboot tests).
pub const BOOT_ID_PATH_ENV: &str = "CARMA_BOOT_ID_PATH";

/// A process, identified robustly across pid reuse and reboots.
///
/// JSON: `{"pid": 4242, "start_time_ticks": 123456, "boot_id": "…"}`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// The process id.
    pub pid: u32,
    /// Start time in clock ticks since boot (`/proc/PID/stat` field 22).
    pub start_time_ticks: u64,
    /// The boot id at the time it was identified.
    pub boot_id: String,
}

/// Where to read the current boot id from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootIdSource {
    /// The file holding the boot id.
    pub path: PathBuf,
}

/// The fields of `/proc/PID/stat` carma needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: R, S, D, Z, T, X, …
    pub state: char,
    /// Field 4: parent pid (0 for the kernel's own roots).
    pub ppid: u32,
    /// Field 5: process group id.
    pub pgrp: i32,
    /// Field 6: session id.
    pub session: i32,
    /// Field 22: start time in clock ticks since boot.
    pub start_time_ticks: u64,
}

impl Default for BootIdSource {
    fn default() -> Self {
        BootIdSource { path: PathBuf::from(BOOT_ID_PATH_DEFAULT) }
    }
}

impl BootIdSource {
    /// The kernel's boot id file, or `$CARMA_BOOT_ID_PATH` when set.
    pub fn from_env() -> Self {
        match std::env::var_os(BOOT_ID_PATH_ENV) {
            Some(path) if !path.is_empty() => BootIdSource { path: PathBuf::from(path) },
            _ => BootIdSource::default(),
        }
    }

    /// The current boot id, trimmed.
    pub fn current(&self) -> Result<String, ExecError> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|source| ExecError::BootId { path: self.path.clone(), source })?;
        let boot_id = text.trim();
        if boot_id.is_empty() {
            let source = std::io::Error::new(std::io::ErrorKind::InvalidData, "file is empty");
            return Err(ExecError::BootId { path: self.path.clone(), source });
        }
        Ok(boot_id.to_string())
    }
}

/// The identity of the live process `pid`, or `None` if it does not exist
/// (or the boot id cannot be read).
pub fn identify(pid: u32, boot_id: &BootIdSource) -> Option<ProcessIdentity> {
    let stat = read_proc_stat(pid)?;
    let boot_id = boot_id.current().ok()?;
    Some(ProcessIdentity { pid, start_time_ticks: stat.start_time_ticks, boot_id })
}

/// True if `identity` is still running: same boot, a process with that pid
/// and the same start time, and it is not a zombie (or dead, `X`).
pub fn is_alive(identity: &ProcessIdentity, boot_id: &BootIdSource) -> bool {
    match boot_id.current() {
        Ok(current) if current == identity.boot_id => {}
        _ => return false,
    }
    match read_proc_stat(identity.pid) {
        Some(stat) => stat.start_time_ticks == identity.start_time_ticks && !matches!(stat.state, 'Z' | 'X'),
        None => false,
    }
}

/// Read and parse `/proc/PID/stat`; `None` if the process does not exist.
pub fn read_proc_stat(pid: u32) -> Option<ProcStat> {
    if pid == 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_proc_stat(&text)
}

/// Parse the text of `/proc/PID/stat`. `comm` (field 2) is in parentheses
/// and may itself hold spaces and `)`, so the fields after it are found by
/// splitting at the *last* `)`.
pub fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let (_, after_comm) = text.rsplit_once(')')?;
    // after_comm holds fields 3, 4, 5, …; field N is at index N - 3.
    let fields: Vec<&str> = after_comm.split_ascii_whitespace().collect();
    let mut state_chars = fields.first()?.chars();
    let state = state_chars.next()?;
    if state_chars.next().is_some() {
        return None;
    }
    Some(ProcStat {
        state,
        ppid: fields.get(4 - 3)?.parse().ok()?,
        pgrp: fields.get(5 - 3)?.parse().ok()?,
        session: fields.get(6 - 3)?.parse().ok()?,
        start_time_ticks: fields.get(22 - 3)?.parse().ok()?,
    })
}

/// Whether process `pid` catches `signal` (has a handler for it), from the `SigCgt` mask of
/// `/proc/PID/status`; `None` when that cannot be read. The kernel's word, not the process's.
pub fn catches_signal(pid: u32, signal: i32) -> Option<bool> {
    let bit = u32::try_from(signal).ok()?.checked_sub(1)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_sig_caught(&status, bit)
}

/// The `SigCgt` line of a `/proc/PID/status` text, bit `bit` (signal number − 1).
fn parse_sig_caught(status: &str, bit: u32) -> Option<bool> {
    let mask = status.lines().find_map(|line| line.strip_prefix("SigCgt:"))?.trim();
    let mask = u64::from_str_radix(mask, 16).ok()?;
    Some(bit < 64 && mask & (1u64 << bit) != 0)
}

#[cfg(test)]
mod tests {
    //! Goal: liveness is false for a changed boot id, a dead pid and a
    //! reused pid, and the stat parser survives hostile `comm` values.
    use super::*;

    fn stat_line(comm: &str, state: char, start: u64) -> String {
        let mut fields = vec![state.to_string(), "1".into(), "77".into(), "77".into()];
        fields.extend((7..22).map(|n| n.to_string()));
        fields.push(start.to_string());
        fields.extend(["123".to_string(), "456".to_string()]);
        format!("4242 ({comm}) {}\n", fields.join(" "))
    }

    #[test]
    fn parses_hostile_comm() {
        for comm in ["python", "a) (b", "x ) S 1 2 3", ")", "tricky)(", ""] {
            let stat = parse_proc_stat(&stat_line(comm, 'S', 987654)).expect(comm);
            assert_eq!(
                stat,
                ProcStat { state: 'S', ppid: 1, pgrp: 77, session: 77, start_time_ticks: 987654 },
                "{comm}"
            );
        }
        assert_eq!(parse_proc_stat("4242 (short) S 1"), None);
        assert_eq!(parse_proc_stat("no paren"), None);
        assert_eq!(parse_proc_stat(&stat_line("z", 'Z', 5)).map(|s| s.state), Some('Z'));
    }

    #[test]
    fn self_is_alive_and_changes_are_noticed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let boot_path = dir.path().join("boot_id");
        std::fs::write(&boot_path, "boot-a\n").expect("write boot id");
        let boot = BootIdSource { path: boot_path.clone() };
        let me = identify(std::process::id(), &boot).expect("identify self");
        assert_eq!(me.boot_id, "boot-a");
        assert!(is_alive(&me, &boot));

        let reused = ProcessIdentity { start_time_ticks: me.start_time_ticks + 1, ..me.clone() };
        assert!(!is_alive(&reused, &boot), "pid reuse must not look alive");

        std::fs::write(&boot_path, "boot-b\n").expect("rewrite boot id");
        assert!(!is_alive(&me, &boot), "a reboot must not look alive");
        std::fs::remove_file(&boot_path).expect("remove");
        assert!(!is_alive(&me, &boot), "unreadable boot id must not look alive");
    }

    #[test]
    fn dead_and_zombie_processes_are_not_alive() {
        let boot = BootIdSource::default();
        let mut child = std::process::Command::new("/bin/true").spawn().expect("spawn true");
        let pid = child.id();
        // Before reaping it is a zombie with the same identity.
        let identity = identify(pid, &boot).expect("identify child");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while read_proc_stat(pid).map(|s| s.state) != Some('Z') && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!is_alive(&identity, &boot), "zombie must not look alive");
        child.wait().expect("reap");
        assert!(!is_alive(&identity, &boot), "reaped process must not look alive");
    }

    #[test]
    fn boot_id_source_reads_default() {
        let boot = BootIdSource::default();
        let current = boot.current().expect("kernel boot id");
        assert_eq!(current.len(), 36, "{current}");
    }

    #[test]
    fn the_caught_signals_mask_is_read_from_the_kernel() {
        assert_eq!(parse_sig_caught("Name:\tx\nSigCgt:\t0000000000000800\n", 11), Some(true), "SIGUSR2");
        assert_eq!(parse_sig_caught("SigCgt:\t0000000000004000\n", 11), Some(false));
        assert_eq!(parse_sig_caught("SigCgt:\tzz\n", 11), None, "damaged");
        assert_eq!(parse_sig_caught("Name:\tx\n", 11), None, "no line");
        // A process with the default action for SIGUSR2 (as a supervisor from before
        // preemption) does not catch it; one with a handler does.
        let mut plain = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let mut trapping = std::process::Command::new("sh")
            .args(["-c", "trap 'exit 0' USR2; while :; do sleep 0.1; done"])
            .spawn()
            .expect("sh");
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(catches_signal(plain.id(), libc::SIGUSR2), Some(false));
        assert_eq!(catches_signal(trapping.id(), libc::SIGUSR2), Some(true));
        let _ = plain.kill();
        let _ = trapping.kill();
        let _ = plain.wait();
        let _ = trapping.wait();
        assert_eq!(catches_signal(u32::MAX, libc::SIGUSR2), None, "no such process");
    }
}
