//! Running Slurm's commands (edge): argv through `duct`, never a shell, each bounded in time,
//! and the detached `carma slurm follow` the Epilog leaves behind.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::error::{Error, Result};

/// Longest wait for one Slurm command before it is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `argv` (with `SLURM_TIME_FORMAT=%s`, so scontrol prints Unix seconds) and returns
/// its stdout; a non-zero exit, a missing program or a timeout is [`Error::Slurm`] with the
/// first line of its stderr.
pub fn run(argv: &[String], stdin: Option<&[u8]>, timeout: Duration) -> Result<String> {
    let shown = shown(argv);
    let Some((program, args)) = argv.split_first() else { unreachable!("a Slurm command has a program") };
    let mut expression = duct::cmd(program, args)
        .env("SLURM_TIME_FORMAT", "%s")
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .before_spawn(|command| {
            // SAFETY: the scrub is async-signal-safe (see `exec::inherit`).
            unsafe {
                command.pre_exec(|| {
                    crate::exec::inherit::scrub_in_child();
                    Ok(())
                });
            }
            Ok(())
        });
    expression = match stdin {
        Some(bytes) => expression.stdin_bytes(bytes.to_vec()),
        None => expression.stdin_null(),
    };
    let handle = expression.start().map_err(|e| Error::Slurm {
        command: shown.clone(),
        detail: match e.kind() {
            std::io::ErrorKind::NotFound => {
                format!("{program} is not on PATH; install Slurm's clients (slurm-client)")
            }
            _ => e.to_string(),
        },
    })?;
    let output = match handle.wait_timeout(timeout) {
        Ok(Some(output)) => output.clone(),
        Ok(None) => {
            let _ = handle.kill();
            let detail =
                format!("no answer within {} s; check slurmctld with `scontrol ping`", timeout.as_secs());
            return Err(Error::Slurm { command: shown, detail });
        }
        Err(e) => return Err(Error::Slurm { command: shown, detail: e.to_string() }),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        let detail = if first.is_empty() { format!("{}", output.status) } else { escape(first) };
        return Err(Error::Slurm { command: shown, detail });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `argv` as one line for messages, control characters escaped.
pub fn shown(argv: &[String]) -> String {
    escape(&argv.join(" "))
}

/// `text` with control characters (newlines, escape sequences) shown as escapes, so output
/// from Slurm or a job cannot rewrite a terminal line (see `text::escape`).
pub fn escape(text: &str) -> String {
    crate::text::escape(text).into_owned()
}

/// Starts `exe args` in a session of its own, stdin and stdout on `/dev/null` and stderr
/// appended to `log`, and does not wait for it. slurmd kills the process group of a hook
/// when it exits, so a plain child would die with the Epilog; `setsid` runs before `exec`,
/// and `spawn` returns only after the `exec`, so there is no window in which it could.
pub fn spawn_detached(exe: &Path, args: &[String], log: &Path) -> Result<u32> {
    spawn_detached_with(exe, args, log, false)
}

/// [`spawn_detached`] with an empty environment but `PATH`: for a long-lived root process (the
/// job's watcher) that needs nothing of the hook's environment, and should carry none of the
/// job's (`SLURM_JOB_ID` in a root process would make it look like one of the job's).
pub fn spawn_detached_clean(exe: &Path, args: &[String], log: &Path) -> Result<u32> {
    spawn_detached_with(exe, args, log, true)
}

fn spawn_detached_with(exe: &Path, args: &[String], log: &Path, clean: bool) -> Result<u32> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| Error::io(format!("cannot open {}", log.display()), e))?;
    let mut command = Command::new(exe);
    command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
    if clean {
        command.env_clear().env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    }
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            crate::exec::inherit::scrub_in_child();
            Ok(())
        });
    }
    let child = command.spawn().map_err(|e| Error::io(format!("cannot start {}", exe.display()), e))?;
    Ok(child.id())
}

#[cfg(test)]
mod tests {
    //! Goal: failures come back as one line naming the command; timeouts kill the command.
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn output_errors_and_timeouts() {
        assert_eq!(run(&argv(&["printf", "a b"]), None, COMMAND_TIMEOUT).unwrap(), "a b");
        assert_eq!(run(&argv(&["cat"]), Some(b"in"), COMMAND_TIMEOUT).unwrap(), "in");
        let Err(Error::Slurm { command, detail }) =
            run(&argv(&["sh", "-c", "echo bad >&2; exit 3"]), None, COMMAND_TIMEOUT)
        else {
            panic!("a failing command is an error")
        };
        assert_eq!((command.as_str(), detail.as_str()), ("sh -c echo bad >&2; exit 3", "bad"));
        let missing = run(&argv(&["carma-no-such-program"]), None, COMMAND_TIMEOUT).unwrap_err();
        assert_eq!(
            missing.to_string(),
            "`carma-no-such-program` failed: carma-no-such-program is not on PATH; install Slurm's clients (slurm-client)"
        );
        let started = std::time::Instant::now();
        let slow = run(&argv(&["sleep", "30"]), None, Duration::from_millis(200)).unwrap_err();
        assert!(slow.to_string().contains("no answer within 0 s"), "{slow}");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(run(&argv(&["printenv", "SLURM_TIME_FORMAT"]), None, COMMAND_TIMEOUT).unwrap(), "%s\n");
    }
}
