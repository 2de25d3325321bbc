//! The MPS memory limit set where a job cannot unset it: through the MPS control daemon.
//!
//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` is an environment variable, so a job can unset it. Under
//! `sharing = "mps"` the tick (root) therefore also tells the control daemon, before each
//! launch, the limit for the job's user on each of its GPUs:
//!
//! - `set_default_device_pinned_mem_limit DEV LIMIT`: the limit the next MPS server gets;
//! - `set_device_pinned_mem_limit PID DEV LIMIT` for the user's running server, found with
//!   `get_server_list` and the server's owner in `/proc`.
//!
//! MPS runs one server per user, and a server's limit holds for all its clients on that
//! device, so `LIMIT` is the highest cap among that user's jobs on the GPU: a job can take
//! at most what its user's largest job there declared (plus margin), never a neighbour's
//! memory beyond that. Devices are numbered as the daemon sees them; the `carma-mps` unit sets
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID` so that its numbers are NVML's indices.
//!
//! The daemon is reached through [`MpsControl`]: [`ControlProgram`] pipes commands into
//! `nvidia-cuda-mps-control` (`[enforce] mps-control`), bounded in time; tests use a
//! recording stand-in.

use std::time::Duration;

/// Longest wait for one run of the control program.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes of the control program's answer kept.
const ANSWER_BYTES_MAX: usize = 64 * 1024;

/// The MPS control daemon's command interface.
pub trait MpsControl {
    /// Sends `commands` (one per line) and returns what the daemon answered, or why it could
    /// not be reached.
    fn send(&mut self, commands: &str) -> Result<String, String>;
}

/// `nvidia-cuda-mps-control` (or the program `[enforce] mps-control` names), with
/// `CUDA_MPS_PIPE_DIRECTORY` pointing at carma's daemon.
#[derive(Debug, Clone)]
pub struct ControlProgram {
    /// The program, as `[enforce] mps-control` names it.
    pub program: String,
}

impl MpsControl for ControlProgram {
    fn send(&mut self, commands: &str) -> Result<String, String> {
        let handle = duct::cmd(&self.program, Vec::<String>::new())
            .env("CUDA_MPS_PIPE_DIRECTORY", crate::systemd::MPS_PIPE_DIR)
            .stdin_bytes(commands.as_bytes().to_vec())
            .stdout_capture()
            .stderr_capture()
            .unchecked()
            .start()
            .map_err(|e| format!("cannot run {}: {e}", self.program))?;
        let output = match handle.wait_timeout(CONTROL_TIMEOUT) {
            Ok(Some(output)) => output.clone(),
            Ok(None) => {
                let _ = handle.kill();
                return Err(format!(
                    "{} gave no answer within {} s",
                    self.program,
                    CONTROL_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("{}: {e}", self.program)),
        };
        if !output.status.success() {
            return Err(format!("{} failed ({})", self.program, output.status));
        }
        let kept = &output.stdout[..output.stdout.len().min(ANSWER_BYTES_MAX)];
        Ok(String::from_utf8_lossy(kept).into_owned())
    }
}

/// One device's limit for a user, MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimit {
    /// The device's index (NVML's, which the daemon's numbering matches under the unit's
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID`).
    pub device: u32,
    /// The pinned-memory limit, MiB.
    pub mib: u64,
}

/// Sets `limits` for user `uid`'s MPS clients: the default for the next server, and the limit
/// of the user's running server, if any (`owner_of` says who owns a process). Returns what
/// was set, in words.
pub fn set_limits(
    control: &mut dyn MpsControl,
    uid: u32,
    limits: &[DeviceLimit],
    owner_of: &dyn Fn(u32) -> Option<u32>,
) -> Result<String, String> {
    if limits.is_empty() {
        return Ok(String::new());
    }
    let servers = control.send("get_server_list\n")?;
    let own: Vec<u32> = server_pids(&servers).into_iter().filter(|&pid| owner_of(pid) == Some(uid)).collect();
    let mut commands = String::new();
    for limit in limits {
        commands.push_str(&format!("set_default_device_pinned_mem_limit {} {}M\n", limit.device, limit.mib));
        for pid in &own {
            commands
                .push_str(&format!("set_device_pinned_mem_limit {pid} {} {}M\n", limit.device, limit.mib));
        }
    }
    control.send(&commands)?;
    let shown: Vec<String> = limits.iter().map(|l| format!("device {} {} MiB", l.device, l.mib)).collect();
    Ok(format!("MPS limit for uid {uid}: {} ({} running server(s))", shown.join(", "), own.len()))
}

/// The server pids in `get_server_list`'s answer: one number a line; anything else is skipped.
pub fn server_pids(answer: &str) -> Vec<u32> {
    answer.lines().filter_map(|line| line.trim().parse::<u32>().ok()).filter(|&pid| pid > 1).collect()
}

#[cfg(test)]
mod tests {
    //! Goal: the daemon is told the default limit and the user's own server's limit, never
    //! another user's server's. Method: a recording stand-in for the daemon.
    use super::*;

    struct Recording {
        sent: Vec<String>,
        servers: String,
    }

    impl MpsControl for Recording {
        fn send(&mut self, commands: &str) -> Result<String, String> {
            self.sent.push(commands.to_string());
            Ok(if commands.starts_with("get_server_list") { self.servers.clone() } else { String::new() })
        }
    }

    #[test]
    fn the_users_own_server_and_the_default_get_the_limit() {
        let mut daemon = Recording { sent: Vec::new(), servers: "4242\n5151\nnot a pid\n".into() };
        let owner = |pid: u32| match pid {
            4242 => Some(1000),
            5151 => Some(1001),
            _ => None,
        };
        let limits = [DeviceLimit { device: 0, mib: 5120 }, DeviceLimit { device: 2, mib: 3072 }];
        let said = set_limits(&mut daemon, 1000, &limits, &owner).unwrap();
        assert_eq!(
            daemon.sent,
            [
                "get_server_list\n",
                "set_default_device_pinned_mem_limit 0 5120M\nset_device_pinned_mem_limit 4242 0 5120M\n\
                 set_default_device_pinned_mem_limit 2 3072M\nset_device_pinned_mem_limit 4242 2 3072M\n"
            ]
        );
        assert_eq!(
            said,
            "MPS limit for uid 1000: device 0 5120 MiB, device 2 3072 MiB (1 running server(s))"
        );
    }

    #[test]
    fn a_daemon_that_cannot_be_reached_says_so() {
        let mut missing = ControlProgram { program: "/nonexistent/nvidia-cuda-mps-control".into() };
        let error =
            set_limits(&mut missing, 1000, &[DeviceLimit { device: 0, mib: 1 }], &|_| None).unwrap_err();
        assert!(error.starts_with("cannot run /nonexistent/nvidia-cuda-mps-control: "), "{error}");
    }
}
