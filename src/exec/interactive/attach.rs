//! A held allocation (`carma alloc --no-shell`, interactive mode `hold`) and the commands run
//! in it (`carma run --attach ID -- CMD`).
//!
//! The held attempt's job is an idle process the client submitted (`sleep infinity`); the
//! supervisor listens on the attempt's socket ([`super::listen`]: the submitter's, in a folder
//! of root's) and lets in only the submitter ([`super::accept`]). Each client sends its hello and one
//! command; the supervisor runs it as the submitter, in the attempt's cgroup, with the job's
//! environment and working directory, on a pseudo-terminal of its own, relays it, and sends
//! its exit status. The command is the user's own, run as the user, inside what the tick
//! already gave the task: the client chooses nothing else. When the attempt ends its
//! containment ends these commands with the rest.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::frame::{self, Decoder, Frame, PAYLOAD_MAX};
use super::{accept, no_echo, open_pty, poll_fd, set_window};
use crate::exec::cgroup::JobCgroup;
use crate::exec::plan::AttemptPlan;
use crate::exec::spawn::{JobCredentials, spawn_job};

/// How long a client may take to send its hello and command.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Most commands attached to one allocation at once: each holds a thread and a terminal of
/// root's supervisor, so the submitter cannot make it hold more.
const ATTACHED_MAX: usize = 16;

/// The attached commands running now: their exit statuses are their threads' to collect,
/// not the supervisor's reaper's ([`is_attached`]).
static ATTACHED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// True when `pid` is a command attached to the allocation, which its own thread reaps.
pub(crate) fn is_attached(pid: u32) -> bool {
    ATTACHED.lock().is_ok_and(|pids| pids.contains(&pid))
}

/// What a command run in the allocation gets: the attempt's plan, environment, user and
/// cgroup.
struct Held {
    /// The attempt's plan (its workdir; the argv is the client's).
    plan: AttemptPlan,
    /// The job's environment, as built for its first process.
    env: BTreeMap<String, String>,
    /// The submitter.
    credentials: JobCredentials,
    /// The attempt's cgroup, when it has one.
    cgroup: Option<JobCgroup>,
    /// Its cgroup v1 folders where host limits are set there: an attached command joins them
    /// too, so it is held to the allocation's host memory and CPUs.
    v1_dirs: Vec<std::path::PathBuf>,
}

/// The listening allocation; [`Holder::finish`] stops it.
pub(crate) struct Holder {
    wake: OwnedFd,
    thread: JoinHandle<()>,
}

/// For a held allocation's attempt (mode [`super::HOLD`]), starts listening for `carma run
/// --attach` in `run_dir`; `None` for any other attempt.
pub(crate) fn hold(
    run_dir: &Path,
    plan: &AttemptPlan,
    env: &BTreeMap<String, String>,
    credentials: &JobCredentials,
    cgroup: Option<&JobCgroup>,
    v1: Option<&crate::exec::hostlimit_v1::V1Cgroups>,
) -> Option<Result<Holder, String>> {
    if plan.interactive.as_deref() != Some(super::HOLD) {
        return None;
    }
    let held = Held {
        plan: plan.clone(),
        env: env.clone(),
        credentials: credentials.clone(),
        cgroup: cgroup.cloned(),
        v1_dirs: v1.map_or_else(Vec::new, |v1| v1.memory.iter().chain(v1.cpu.iter()).cloned().collect()),
    };
    Some(listen_held(run_dir, held))
}

fn listen_held(run_dir: &Path, held: Held) -> Result<Holder, String> {
    let (uid, gid) = (held.credentials.uid, held.credentials.gid);
    let listener = super::listen(run_dir, held.credentials.switch_user.then_some((uid, gid)))?;
    let mut ends = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(format!("cannot make the allocation's pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 returned two fresh descriptors that nothing else owns.
    let (wake_read, wake) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let held = Arc::new(held);
    let thread = std::thread::Builder::new()
        .name("carma-hold".into())
        .spawn(move || serve_all(&listener, &wake_read, &held))
        .map_err(|err| format!("cannot start the allocation's listener: {err}"))?;
    Ok(Holder { wake, thread })
}

impl Holder {
    /// Stops accepting; commands still running are the containment's to end.
    pub(crate) fn finish(self) {
        // SAFETY: a one-byte write to our own pipe.
        unsafe { libc::write(self.wake.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        let _ = self.thread.join();
    }
}

fn serve_all(listener: &UnixListener, wake: &OwnedFd, held: &Arc<Held>) {
    loop {
        let mut fds = [poll_fd(wake, libc::POLLIN), poll_fd(listener, libc::POLLIN)];
        // SAFETY: poll over two initialised pollfd structs.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, 1000) };
        if fds[0].revents != 0 {
            return;
        }
        if fds[1].revents == 0 {
            continue;
        }
        let Some(mut client) = accept(listener, &held.plan.task_id, held.credentials.uid, None) else {
            continue;
        };
        if Arc::strong_count(held) > ATTACHED_MAX {
            let line = format!(
                "carma: refused: task {} already runs {ATTACHED_MAX} attached commands",
                held.plan.task_id
            );
            refuse(&mut client, &line);
            continue;
        }
        let held = Arc::clone(held);
        // Each command on a thread of its own, which also stays its parent until it ends; the
        // thread's clone of `held` counts it.
        let _ = std::thread::Builder::new().name("carma-attach".into()).spawn(move || serve(client, &held));
    }
}

/// One `carma run --attach`: its command started and relayed until it ends.
fn serve(mut client: UnixStream, held: &Held) {
    let _ = client.set_read_timeout(Some(HELLO_TIMEOUT));
    let mut decoder = Decoder::default();
    let mut hello = None;
    let argv = loop {
        match decoder.next_frame() {
            Ok(Some(Frame::Hello { tty, rows, cols })) => hello = Some((tty, rows, cols)),
            Ok(Some(Frame::Command(argv))) if hello.is_some() => break argv,
            Ok(None) => {
                let mut buffer = [0u8; 4096];
                match client.read(&mut buffer[..decoder.room().clamp(1, 4096)]) {
                    Ok(n) if n > 0 => decoder.push(&buffer[..n]),
                    _ => return,
                }
            }
            _ => return refuse(&mut client, "carma: refused: expected a hello and a command"),
        }
    };
    let _ = client.set_read_timeout(None);
    if let Some(why) = frame::command_refusal(&argv) {
        return refuse(&mut client, &format!("carma: refused: {why}"));
    }
    let (master, slave) = match open_pty(
        held.credentials.switch_user.then_some((held.credentials.uid, held.credentials.gid)),
    ) {
        Ok(pty) => pty,
        Err(why) => return refuse(&mut client, &format!("carma: {why}")),
    };
    if let Some((tty, rows, cols)) = hello {
        set_window(&master, rows, cols);
        if !tty {
            no_echo(&master);
        }
    }
    let plan = AttemptPlan { argv: argv.clone(), ..held.plan.clone() };
    let procs = held.cgroup.as_ref().and_then(|cgroup| cgroup.open_procs().ok());
    let v1_procs: Vec<std::fs::File> = held
        .v1_dirs
        .iter()
        .filter_map(|dir| std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs")).ok())
        .collect();
    let files: Vec<&std::fs::File> = procs.iter().chain(v1_procs.iter()).collect();
    let nulls = (std::fs::File::open("/dev/null"), std::fs::File::open("/dev/null"));
    let (Ok(null_out), Ok(null_err)) = nulls else {
        return refuse(&mut client, "carma: cannot open /dev/null");
    };
    let program = Path::new(&argv[0]);
    let spawned =
        spawn_job(&plan, program, &held.env, &held.credentials, (null_out, null_err), &files, Some(&slave));
    drop(slave);
    let mut child = match spawned {
        Ok(child) => child,
        Err(why) => return refuse(&mut client, &format!("carma: {why}")),
    };
    if let Ok(mut pids) = ATTACHED.lock() {
        pids.push(child.id());
    }
    let code = relay(&mut client, &master, &mut child, decoder);
    if let Ok(mut pids) = ATTACHED.lock() {
        pids.retain(|pid| *pid != child.id());
    }
    let _ = client.write_all(&frame::encode(&Frame::Exit(code)));
}

fn refuse(client: &mut UnixStream, line: &str) {
    let _ = client.write_all(&frame::encode(&Frame::Note(line.to_string())));
}

/// Relays the command's terminal until the command has ended; its exit status.
fn relay(
    client: &mut UnixStream,
    master: &OwnedFd,
    child: &mut std::process::Child,
    mut decoder: Decoder,
) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    let mut connected = true;
    let mut master_open = true;
    let mut buffer = vec![0u8; PAYLOAD_MAX];
    // Frames that came with the command.
    take_frames(&mut decoder, master);
    loop {
        // An error: the command was reaped before it was registered; its status is lost.
        let ended = match child.try_wait() {
            Ok(Some(status)) => Some(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))),
            Ok(None) => None,
            Err(_) => Some(1),
        };
        if let Some(code) = ended {
            // What it wrote last, then its status.
            while master_open && let Ok(n) = usize::try_from(read(master, &mut buffer)) {
                if n == 0
                    || !connected
                    || client.write_all(&frame::encode(&Frame::Output(buffer[..n].to_vec()))).is_err()
                {
                    break;
                }
            }
            return code;
        }
        let mut fds = vec![];
        if connected {
            fds.push(poll_fd(client, libc::POLLIN));
        }
        if master_open {
            fds.push(poll_fd(master, libc::POLLIN));
        }
        // SAFETY: poll over a vector of initialised pollfd structs of that length.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
        if connected && fds[0].revents != 0 {
            match client.read(&mut buffer[..decoder.room().clamp(1, PAYLOAD_MAX)]) {
                Ok(n) if n > 0 => decoder.push(&buffer[..n]),
                _ => {
                    // The client went away: hang the command up, as a lost terminal does.
                    connected = false;
                    let pgid = libc::pid_t::try_from(child.id()).unwrap_or(0);
                    // Only processes that are still this command's (the supervisor's
                    // descendants) are reached, whatever became of the group id.
                    crate::exec::proctable::signal_own_group(pgid, libc::SIGHUP);
                }
            }
            take_frames(&mut decoder, master);
        }
        if master_open && fds.last().is_some_and(|fd| fd.revents != 0) {
            match usize::try_from(read(master, &mut buffer)) {
                Ok(n) if n > 0 => {
                    if connected
                        && client.write_all(&frame::encode(&Frame::Output(buffer[..n].to_vec()))).is_err()
                    {
                        connected = false;
                    }
                }
                Err(_) if std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) => {}
                _ => master_open = false,
            }
        }
    }
}

/// Acts on the client's decoded frames.
fn take_frames(decoder: &mut Decoder, master: &OwnedFd) {
    while let Ok(Some(frame)) = decoder.next_frame() {
        match frame {
            // A short write only drops typed bytes the command would not read.
            Frame::Input(bytes) => {
                let _ = write(master, &bytes);
            }
            Frame::Resize { rows, cols } => set_window(master, rows, cols),
            Frame::EndOfInput => {
                let _ = write(master, &[4]);
            }
            _ => {}
        }
    }
}

fn read(fd: &OwnedFd, buffer: &mut [u8]) -> isize {
    // SAFETY: a read into our buffer from our own descriptor.
    unsafe { libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) }
}

fn write(fd: &OwnedFd, bytes: &[u8]) -> isize {
    // SAFETY: a write from our buffer to our own descriptor.
    unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) }
}
