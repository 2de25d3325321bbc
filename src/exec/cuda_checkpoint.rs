//! NVIDIA's `cuda-checkpoint` (driver 550 or newer): whether a job's CUDA processes can be
//! suspended, asked the way the tool answers (`--get-state --pid PID` prints `running`,
//! `locked`, `checkpointed` or `failed`).
//!
//! The tick runs as root, so the binary is the administrator's: the path configured in
//! `[sched.preemption] cuda-checkpoint`, or the first `cuda-checkpoint` in the tick's own
//! `PATH` (root's, never a user's), and either must be a regular file owned by root that only
//! root can write. Every answer other than "all of them are running" is a reason, one line,
//! that the Preempted record carries before "requeued instead".

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one `--get-state` may take before the tick gives up on it.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// How long one `--toggle` may take (it copies the GPU memory to host memory, or back).
const TOGGLE_WITHIN: Duration = Duration::from_secs(120);
/// The most of its output the tick reads.
const OUTPUT_MAX: u64 = 4096;

/// The binary to run: the configured path, or `cuda-checkpoint` in the tick's `PATH`.
pub fn locate(configured: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = configured {
        return trusted(path).map(|()| path.to_path_buf());
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path_var).filter(|d| d.is_absolute()) {
        let candidate = dir.join("cuda-checkpoint");
        if candidate.is_file() {
            return trusted(&candidate).map(|()| candidate);
        }
    }
    Err("cuda-checkpoint not found in root's PATH; install it (NVIDIA driver 550 or newer) or set \
         [sched.preemption] cuda-checkpoint"
        .to_string())
}

/// Whether root may run `path`: a regular file owned by root, executable, written only by root.
fn trusted(path: &Path) -> Result<(), String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("cuda-checkpoint at {shown}: {e}"))?;
    if !meta.is_file() || meta.mode() & 0o111 == 0 {
        return Err(format!("cuda-checkpoint at {shown} is not an executable file"));
    }
    if meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(format!("cuda-checkpoint at {shown} is not owned and written only by root"));
    }
    Ok(())
}

/// Why the processes `pids` (a job's GPU processes) cannot be suspended, or `None` when each
/// of them answers `running` to `cuda-checkpoint --get-state`.
pub fn refusal(configured: Option<&Path>, pids: &[u32]) -> Option<String> {
    let binary = match locate(configured) {
        Ok(binary) => binary,
        Err(why) => return Some(why),
    };
    if pids.is_empty() {
        return Some("no CUDA process of the job seen on its GPUs".to_string());
    }
    for &pid in pids {
        match get_state(&binary, pid) {
            Ok(state) if state == "running" => {}
            Ok(state) => return Some(format!("process {pid} is {state}, not running CUDA")),
            Err(why) => return Some(format!("`cuda-checkpoint --get-state --pid {pid}` refused: {why}")),
        }
    }
    None
}

/// `cuda-checkpoint --get-state --pid PID`'s answer (its first word), or why there is none.
pub fn get_state(binary: &Path, pid: u32) -> Result<String, String> {
    let out = run(binary, &["--get-state", "--pid", &pid.to_string()], ANSWER_WITHIN)?;
    match out.split_whitespace().next() {
        Some(word) => Ok(word.to_ascii_lowercase()),
        None => Err("it printed no state".to_string()),
    }
}

/// `cuda-checkpoint --toggle --pid PID`: a running process's CUDA state is suspended (its GPU
/// memory copied to host memory and released), a suspended one's restored.
pub fn toggle(binary: &Path, pid: u32) -> Result<(), String> {
    run(binary, &["--toggle", "--pid", &pid.to_string()], TOGGLE_WITHIN).map(drop)
}

/// Runs `binary args` (no shell), waits at most `within`, and gives its first line of output,
/// or why it failed in one line.
fn run(binary: &Path, args: &[&str], within: Duration) -> Result<String, String> {
    let mut child = Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < within => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {}s", within.as_secs()));
            }
        }
    };
    let read = |pipe: Option<&mut dyn Read>| {
        let mut text = String::new();
        if let Some(pipe) = pipe {
            let _ = pipe.take(OUTPUT_MAX).read_to_string(&mut text);
        }
        crate::text::escape(text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim()).into_owned()
    };
    let out = read(child.stdout.as_mut().map(|p| p as &mut dyn Read));
    if status.success() {
        return Ok(out);
    }
    let err = read(child.stderr.as_mut().map(|p| p as &mut dyn Read));
    let said = if err.is_empty() { out } else { err };
    Err(if said.is_empty() { status.to_string() } else { format!("{status}: {said}") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in `cuda-checkpoint` that records its argv and answers `--get-state` with
    /// `answer` (exit `code`), as the real tool does.
    fn stand_in(dir: &Path, answer: &str, code: i32) -> PathBuf {
        let path = dir.join("cuda-checkpoint");
        let log = dir.join("argv");
        let script = format!("#!/bin/sh\necho \"$*\" >> {}\necho '{answer}'\nexit {code}\n", log.display());
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn a_missing_binary_is_the_reason() {
        let why = refusal(Some(Path::new("/nonexistent/cuda-checkpoint")), &[1]).unwrap();
        assert_eq!(
            why,
            "cuda-checkpoint at /nonexistent/cuda-checkpoint: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn running_processes_allow_suspend_and_each_is_asked() {
        if !root() {
            eprintln!("skipped: the stand-in must be owned by root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let binary = stand_in(dir.path(), "running", 0);
        assert_eq!(refusal(Some(&binary), &[41, 42]), None);
        let argv = std::fs::read_to_string(dir.path().join("argv")).unwrap();
        assert_eq!(argv, "--get-state --pid 41\n--get-state --pid 42\n");
    }

    #[test]
    fn a_process_not_running_cuda_or_a_refusal_is_the_reason() {
        if !root() {
            eprintln!("skipped: the stand-in must be owned by root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let binary = stand_in(dir.path(), "checkpointed", 0);
        assert_eq!(refusal(Some(&binary), &[7]).unwrap(), "process 7 is checkpointed, not running CUDA");
        let binary = stand_in(dir.path(), "Could not get state: OPERATION_NOT_SUPPORTED", 1);
        assert_eq!(
            refusal(Some(&binary), &[7]).unwrap(),
            "`cuda-checkpoint --get-state --pid 7` refused: exit status: 1: Could not get state: OPERATION_NOT_SUPPORTED"
        );
        assert_eq!(refusal(Some(&binary), &[]).unwrap(), "no CUDA process of the job seen on its GPUs");
    }

    #[test]
    fn a_binary_others_can_write_is_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let binary = stand_in(dir.path(), "running", 0);
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = refusal(Some(&binary), &[1]).unwrap();
        assert_eq!(
            why,
            format!("cuda-checkpoint at {} is not owned and written only by root", binary.display())
        );
        assert!(!dir.path().join("argv").exists());
    }
}
