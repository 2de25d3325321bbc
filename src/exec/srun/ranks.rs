//! The step's tasks as processes: started without a shell, as the job's user (srun runs as
//! them, inside the job), waited for together, with signals passed on and, with `--label`,
//! every line of their output prefixed by its rank.
//!
//! srun keeps the signals it passes on blocked and takes them with `sigtimedwait`, so it
//! learns who sent each. One from inside the job (the batch shell's `trap` that `kill`s srun)
//! is passed to every task, as Slurm's srun does. One from carma's supervisor is not: the
//! supervisor already signals every process of the attempt (a cancel, the time limit, a
//! `--signal` without `B:`), and passing it on would deliver it twice. Signals the kernel sends
//! for a terminal reach the tasks' process group, which is srun's, by themselves.
//!
//! srun exits as Slurm's does: with the highest exit code of its tasks, 128 + N for one killed
//! by signal N, and 2 when the program cannot be started.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::step::Step;

/// The signals srun passes on to its tasks.
const PASSED_ON: [libc::c_int; 6] =
    [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGUSR1, libc::SIGUSR2];
/// How long `--kill-on-bad-exit` waits after SIGTERM before SIGKILL (Slurm's KillWait default).
const KILL_WAIT: Duration = Duration::from_secs(30);
/// How long srun waits between looks at its tasks when no signal comes.
const POLL: Duration = Duration::from_millis(200);
/// Longest line `--label` holds before it prefixes and writes it anyway.
const LINE_BYTES_MAX: usize = 64 * 1024;
/// How long srun waits for `--label`'s output to drain after its tasks ended (a task's own
/// child may keep the pipe open).
const DRAIN_WAIT: Duration = Duration::from_secs(2);

/// One task, running or ended.
struct Task {
    rank: u32,
    child: Child,
    /// Its exit code as srun counts it, once reaped.
    code: Option<i32>,
}

/// Starts the step's tasks running `command` over `inherited`, waits for them all, and
/// returns srun's exit code.
pub(super) fn run(step: &Step, command: &[OsString], inherited: BTreeMap<OsString, OsString>) -> u8 {
    let path_var = inherited.get(OsStr::new("PATH")).cloned().unwrap_or_default();
    let workdir = step.chdir.as_ref().map(PathBuf::from);
    let program = match find_program(&command[0], &path_var, workdir.as_deref()) {
        Ok(program) => program,
        Err(why) => {
            eprintln!("srun: error: {why}");
            return 2;
        }
    };
    let supervisor = supervisor_pid(inherited.get(OsStr::new(crate::exec::ATTEMPT_TAG_ENV)));
    let blocked = block_signals();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let mut tasks = Vec::with_capacity(step.tasks.len());
    for (rank, vars) in step.tasks.iter().enumerate() {
        let mut cmd = Command::new(&program);
        cmd.arg0(&command[0]).args(&command[1..]).env_clear().envs(&inherited);
        cmd.envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        if let Some(dir) = &workdir {
            cmd.current_dir(dir);
        }
        if step.label {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        // SAFETY: scrub_in_child and sigprocmask are async-signal-safe, as a pre_exec hook's
        // calls must be; the task must not keep the signals srun blocks for itself.
        unsafe {
            cmd.pre_exec(|| {
                crate::exec::inherit::scrub_in_child();
                let mut empty: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut empty);
                libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
                Ok(())
            })
        };
        match cmd.spawn() {
            Ok(mut child) => {
                if step.label {
                    relay(&mut child, rank as u32, step.tasks.len(), &done_tx);
                }
                tasks.push(Task { rank: rank as u32, child, code: None });
            }
            Err(error) => {
                eprintln!("srun: error: task {rank}: cannot start {}: {error}", program.display());
                end_all(&mut tasks, libc::SIGKILL);
                wait_all(&mut tasks, &blocked, supervisor, None);
                return 2;
            }
        }
    }
    drop(done_tx);
    let kill_after_bad = step.kill_on_bad_exit.then_some(KILL_WAIT);
    wait_all(&mut tasks, &blocked, supervisor, kill_after_bad);
    let deadline = Instant::now() + DRAIN_WAIT;
    while done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok() {}
    let node = std::env::var("SLURMD_NODENAME").unwrap_or_default();
    for task in &tasks {
        if let Some(code) = task.code.filter(|c| *c != 0) {
            let how = if code > 128 {
                format!("Killed by signal {}", code - 128)
            } else {
                format!("Exited with exit code {code}")
            };
            eprintln!("srun: error: {node}: task {}: {how}", task.rank);
        }
    }
    tasks.iter().filter_map(|t| t.code).max().unwrap_or(0).clamp(0, 255) as u8
}

/// The program for `name`: a path (relative to `workdir` or srun's own), or the first
/// executable of that name on `path_var`, as execvp finds it.
fn find_program(name: &OsStr, path_var: &OsStr, workdir: Option<&Path>) -> Result<PathBuf, String> {
    let shown = name.to_string_lossy();
    let runnable = |p: &Path| {
        let c_path = std::ffi::CString::new(p.as_os_str().as_bytes());
        // SAFETY: a valid NUL-terminated string that outlives the call.
        p.is_file() && c_path.is_ok_and(|c| unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0)
    };
    if name.as_bytes().contains(&b'/') {
        let path = workdir.map_or_else(|| PathBuf::from(name), |d| d.join(name));
        return if runnable(&path) {
            Ok(path)
        } else {
            Err(format!("{shown}: no such program, or not executable"))
        };
    }
    std::env::split_paths(path_var)
        .map(|dir| dir.join(name))
        .find(|candidate| runnable(candidate))
        .ok_or_else(|| format!("{shown}: not found on PATH; give its path or fix PATH (the job's is its submitter's at submit)"))
}

/// The signals to take with `sigtimedwait`: those passed on, and SIGCHLD, blocked in srun
/// (its tasks start with an empty mask: their `pre_exec` empties it).
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset fill a sigset_t on our stack; pthread_sigmask changes only
    // this thread's mask, and srun's other threads (`--label`'s relays) start after it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in PASSED_ON.iter().chain(&[libc::SIGCHLD]) {
            libc::sigaddset(&mut set, *signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits until every task has ended, passing signals on; with `kill_after_bad`, the first task
/// that ends badly ends the others (SIGTERM, then SIGKILL after that long).
fn wait_all(
    tasks: &mut [Task],
    blocked: &libc::sigset_t,
    supervisor: Option<u32>,
    kill_after_bad: Option<Duration>,
) {
    let mut kill_at: Option<Instant> = None;
    while tasks.iter().any(|t| t.code.is_none()) {
        if let Some((signal, Some(sender))) = next_signal(blocked)
            && signal != libc::SIGCHLD
            && Some(sender) != supervisor
        {
            end_all(tasks, signal);
        }
        for task in tasks.iter_mut().filter(|t| t.code.is_none()) {
            if let Ok(Some(status)) = task.child.try_wait() {
                task.code = Some(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
            }
        }
        let bad = tasks.iter().any(|t| t.code.is_some_and(|c| c != 0));
        if let (Some(wait), true, None) = (kill_after_bad, bad, kill_at) {
            eprintln!("srun: error: a task failed and --kill-on-bad-exit is set: ending the others");
            end_all(tasks, libc::SIGTERM);
            kill_at = Some(Instant::now() + wait);
        }
        if kill_at.is_some_and(|at| Instant::now() >= at) {
            end_all(tasks, libc::SIGKILL);
        }
    }
}

/// The next blocked signal within [`POLL`], with its sender's pid when a process sent it
/// (`None` for the kernel's, e.g. a terminal's, which reached the tasks themselves).
fn next_signal(blocked: &libc::sigset_t) -> Option<(libc::c_int, Option<u32>)> {
    let timeout = libc::timespec { tv_sec: 0, tv_nsec: POLL.as_nanos() as libc::c_long };
    // SAFETY: siginfo_t is plain data; sigtimedwait fills it for the signal it returns.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: pointers to our own set, info and timeout, valid for the call.
    let signal = unsafe { libc::sigtimedwait(blocked, &mut info, &timeout) };
    if signal <= 0 {
        return None;
    }
    let from_process = matches!(info.si_code, libc::SI_USER | libc::SI_QUEUE | libc::SI_TKILL);
    if !from_process {
        return Some((signal, None));
    }
    // SAFETY: for a signal a process sent, si_pid is set (the union's kill member).
    let sender = unsafe { info.si_pid() };
    Some((signal, u32::try_from(sender).ok()))
}

/// Sends `signal` to every task still running.
fn end_all(tasks: &mut [Task], signal: libc::c_int) {
    for task in tasks.iter().filter(|t| t.code.is_none()) {
        if let Ok(pid) = libc::pid_t::try_from(task.child.id()) {
            // SAFETY: kill with our own unreaped child's pid: it cannot have been reused.
            unsafe { libc::kill(pid, signal) };
        }
    }
}

/// The carma supervisor above srun: the nearest ancestor that is not of this attempt (its
/// environment lacks the attempt's tag, or is not ours to read: a root supervisor's). `None`
/// outside a carma job.
fn supervisor_pid(tag: Option<&OsString>) -> Option<u32> {
    let tag = tag?;
    let mut wanted = crate::exec::ATTEMPT_TAG_ENV.as_bytes().to_vec();
    wanted.push(b'=');
    wanted.extend_from_slice(tag.as_bytes());
    // SAFETY: getppid cannot fail.
    let mut pid = u32::try_from(unsafe { libc::getppid() }).ok()?;
    for _ in 0..64 {
        if pid <= 1 {
            return None;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if !environ.split(|b| *b == 0).any(|entry| entry == wanted.as_slice()) {
            return Some(pid);
        }
        pid = crate::exec::read_proc_stat(pid)?.ppid;
    }
    None
}

/// With `--label`: a thread per stream of `child` that writes each line as `RANK: line`.
fn relay(child: &mut Child, rank: u32, tasks: usize, done: &std::sync::mpsc::Sender<()>) {
    let width = tasks.saturating_sub(1).to_string().len();
    let prefix = format!("{rank:>width$}: ").into_bytes();
    if let Some(out) = child.stdout.take() {
        let (prefix, done) = (prefix.clone(), done.clone());
        std::thread::spawn(move || relay_lines(out, &prefix, &mut std::io::stdout(), done));
    }
    if let Some(err) = child.stderr.take() {
        let done = done.clone();
        std::thread::spawn(move || relay_lines(err, &prefix, &mut std::io::stderr(), done));
    }
}

/// Copies `input` to `output` a line at a time, each prefixed; a line longer than
/// [`LINE_BYTES_MAX`] is written in pieces. Says `done` when the input ends.
fn relay_lines(
    mut input: impl Read,
    prefix: &[u8],
    output: &mut dyn Write,
    done: std::sync::mpsc::Sender<()>,
) {
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    let write_line = |line: &[u8], output: &mut dyn Write| {
        let mut bytes = Vec::with_capacity(prefix.len() + line.len() + 1);
        bytes.extend_from_slice(prefix);
        bytes.extend_from_slice(line);
        if !line.ends_with(b"\n") {
            bytes.push(b'\n');
        }
        let _ = output.write_all(&bytes).and_then(|()| output.flush());
    };
    loop {
        let read = match input.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&chunk[..read]);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            write_line(&line, output);
        }
        if pending.len() >= LINE_BYTES_MAX {
            write_line(&std::mem::take(&mut pending), output);
        }
    }
    if !pending.is_empty() {
        write_line(&pending, output);
    }
    drop(done);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: `--label` prefixes every line, a last line without a newline included, and cuts a
    /// line over the cap rather than holding it.
    #[test]
    fn labelled_lines_are_prefixed_and_bounded() {
        let (tx, _rx) = std::sync::mpsc::channel();
        let mut out = Vec::new();
        relay_lines(&b"a\nbb\nlast"[..], b"3: ", &mut out, tx.clone());
        assert_eq!(out, b"3: a\n3: bb\n3: last\n");
        let long = vec![b'x'; LINE_BYTES_MAX + 10];
        let mut out = Vec::new();
        relay_lines(&long[..], b"0: ", &mut out, tx);
        assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 2, "cut once at the cap");
    }

    /// Goal: a program is found as execvp finds it, and a missing one is named with the fix.
    #[test]
    fn programs_are_found_on_the_path() {
        let path = OsString::from("/nonexistent:/bin:/usr/bin");
        assert!(find_program(OsStr::new("sh"), &path, None).is_ok());
        assert_eq!(
            find_program(OsStr::new("no-such-program-here"), &path, None).unwrap_err(),
            "no-such-program-here: not found on PATH; give its path or fix PATH (the job's is its submitter's at submit)"
        );
    }
}
