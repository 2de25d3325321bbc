//! `carma alloc` and `carma run`: interactive tasks, as Slurm's `salloc` and `srun --pty`.
//!
//! The client is the user's own process and decides nothing about the task: it submits an
//! ordinary task through the spool, exactly as `carma submit` does (the same flags, the same
//! checks, the same environment capture), marked `interactive`; the tick places it, and its
//! supervisor runs the shell or command as the user on a terminal of its own
//! ([`crate::exec::interactive`]). Meanwhile the client reads the published view and says
//! what the task waits for, in `carma queue`'s words; Ctrl-C then cancels it. Once the
//! attempt runs, the client connects to its socket (which lets in only the submitter) and
//! relays this terminal both ways ([`terminal`]), then exits with the job's exit status.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cli::{AllocArgs, CancelArgs, RunArgs, SubmitArgs};
use crate::error::Error;
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::Status;
use crate::view;

mod attach;
mod terminal;

use crate::exec::interactive::HOLD;

/// How often the view is read while the task waits.
const POLL: Duration = Duration::from_millis(250);
/// How long the client looks for the session's socket once the attempt is launched.
const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// The exit status after Ctrl-C while waiting (128 + SIGINT, as a shell reports it).
const EXIT_INTERRUPTED: i32 = 130;
/// The exit status when the connection ended without the job's.
const EXIT_LOST: i32 = 1;

/// Set by the SIGINT/SIGTERM/SIGHUP handler while the task waits.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// `carma alloc`: a shell (the user's login shell, or the command after `--`) on a GPU.
pub(super) fn run_alloc(home: &Home, wait: Duration, args: AllocArgs) -> anyhow::Result<()> {
    let mut submit = args.submit;
    if args.no_shell {
        if !submit.command.is_empty() || submit.spec.is_some() {
            return Err(Error::BadInput(
                "--no-shell holds the allocation without a command; run commands in it with carma run --attach ID -- CMD".into(),
            )
            .into());
        }
        // The held allocation's first process: idle until the limit or `carma cancel`.
        submit.command = crate::spec::carma_only::HOLD_COMMAND.map(Into::into).to_vec();
        return session(home, wait, submit, HOLD);
    }
    if submit.command.is_empty() && submit.spec.is_none() {
        submit.command = vec![login_shell()?.into()];
    }
    session(home, wait, submit, "alloc")
}

/// `carma run`: one command on a GPU, attached to this terminal.
pub(super) fn run_command(home: &Home, wait: Duration, args: RunArgs) -> anyhow::Result<()> {
    if let Some(query) = &args.attach {
        return attach::run(home, query, &args.submit.command);
    }
    if args.submit.command.is_empty() && args.submit.spec.is_none() {
        return Err(Error::BadInput(
            "carma run needs a command after `--`, e.g. carma run --gpus 1 -- python debug.py".into(),
        )
        .into());
    }
    session(home, wait, args.submit, "run")
}

/// Submits the interactive task, waits for its GPUs, then relays the terminal; exits with
/// the job's exit status.
fn session(home: &Home, wait: Duration, args: SubmitArgs, kind: &str) -> anyhow::Result<()> {
    if args.array.is_some() || !args.params.is_empty() {
        return Err(Error::BadInput(format!(
            "carma {kind} runs one task; --array and --param are for carma submit"
        ))
        .into());
    }
    let ids = super::submit::submit(home, args, Some(kind))?;
    // `--dry-run` printed the task and wrote nothing.
    let Some(id) = ids.into_iter().next() else { return Ok(()) };
    terminal::note(&format!("carma: task {id} submitted"), false);
    catch_interrupts(true);
    let granted = wait_for_grant(home, &id);
    catch_interrupts(false);
    let Some(attempt) = granted? else {
        terminal::note(&format!("carma: cancelling task {id}"), false);
        cancel(home, wait, &id)?;
        std::process::exit(EXIT_INTERRUPTED);
    };
    if kind == HOLD {
        let hint = format!(
            "carma: run commands in it with: carma run --attach {id} -- CMD; end it with: carma cancel {id}"
        );
        terminal::note(&hint, false);
        return Ok(());
    }
    let stream = connect(home, &id, attempt)?;
    let code = match terminal::relay(stream, None)? {
        terminal::Ending::Exit(code) => code,
        terminal::Ending::Lost => {
            terminal::note(&format!("carma: the session of task {id} ended; see carma show {id}"), false);
            EXIT_LOST
        }
    };
    std::process::exit(code & 0xff)
}

/// The user's login shell from the user database (not `$SHELL`, which anyone can set).
fn login_shell() -> Result<String, Error> {
    let uid = crate::access::uid::effective();
    let shell = crate::access::users::entry(uid).map(|entry| entry.shell).unwrap_or_default();
    if shell.is_empty() {
        return Err(Error::BadInput(format!(
            "uid {uid} has no login shell in the user database; give the command after `--`, e.g. carma alloc -- bash"
        )));
    }
    Ok(shell)
}

/// Reads the view until the task's attempt runs, saying what it waits for whenever that
/// changes; the attempt's number, or `None` when the user interrupted the wait.
fn wait_for_grant(home: &Home, id: &TaskId) -> anyhow::Result<Option<u32>> {
    let mut said = String::new();
    loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let state = view::load(home)?;
        if let Some(rejection) = state.rejections.iter().rev().find(|r| r.task.as_ref() == Some(id)) {
            let reason = &rejection.reason;
            return Err(Error::BadInput(format!("task {id} was refused: {reason}")).into());
        }
        let task = state.tasks.get(id);
        match task.map(|task| (task, task.status())) {
            Some((task, Status::Pending)) => {
                let reason = super::status::reason(task).unwrap_or_default();
                if !reason.is_empty() && reason != said {
                    terminal::note(&format!("carma: queued and waiting: {reason}"), false);
                    said = reason.to_string();
                }
            }
            Some((task, Status::Running)) => {
                if let Some(attempt) = task.active_attempt().filter(|a| a.launched_ms.is_some()) {
                    let gpus: Vec<String> = attempt.gpus.iter().map(|uuid| gpu_name(&state, uuid)).collect();
                    let on = if gpus.is_empty() { "no GPU".to_string() } else { gpus.join(",") };
                    terminal::note(&format!("carma: granted {on} (task {id})"), false);
                    return Ok(Some(attempt.number));
                }
            }
            Some((task, status)) if status.is_terminal() => {
                let why = super::status::reason(task).map(|r| format!(": {r}")).unwrap_or_default();
                let status = status.as_str().to_lowercase();
                return Err(Error::TasksFailed(format!("task {id} {status} before it started{why}")).into());
            }
            // Placed (being launched), or still in the spool.
            _ => {}
        }
        std::thread::sleep(POLL);
    }
}

/// `GPU0`, or the UUID when State does not know it.
fn gpu_name(state: &crate::journal::state::State, uuid: &str) -> String {
    state
        .gpus
        .values()
        .find(|gpu| gpu.uuid == uuid)
        .map_or_else(|| uuid.to_string(), |gpu| format!("GPU{}", gpu.index))
}

/// Connects to the attempt's session, waiting a little for its supervisor to listen.
pub(super) fn connect(
    home: &Home,
    id: &TaskId,
    attempt: u32,
) -> anyhow::Result<std::os::unix::net::UnixStream> {
    let run_dir = crate::exec::rundir::run_dir(home.root(), id.as_str(), attempt)?;
    let path: PathBuf = crate::exec::interactive::socket_path(&run_dir);
    let started = Instant::now();
    loop {
        match std::os::unix::net::UnixStream::connect(&path) {
            Ok(stream) => return Ok(stream),
            Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(Error::Denied(format!(
                    "cannot attach to task {id}: {} is not yours; only the task's submitter can attach",
                    path.display()
                ))
                .into());
            }
            Err(err) if started.elapsed() >= CONNECT_WAIT => {
                return Err(Error::io(
                    format!("cannot attach to task {id} at {}; see carma show {id}", path.display()),
                    err,
                )
                .into());
            }
            Err(_) => {
                let state = view::load(home)?;
                if let Some(task) = state.tasks.get(id).filter(|task| task.status().is_terminal()) {
                    let why = super::status::reason(task).map(|r| format!(": {r}")).unwrap_or_default();
                    let status = task.status().as_str().to_lowercase();
                    return Err(Error::TasksFailed(format!(
                        "task {id} {status} before its terminal was attached{why}"
                    ))
                    .into());
                }
                std::thread::sleep(POLL);
            }
        }
    }
}

/// Cancels the task as `carma cancel ID` does.
fn cancel(home: &Home, wait: Duration, id: &TaskId) -> anyhow::Result<()> {
    let args = CancelArgs {
        ids: vec![id.to_string()],
        me: false,
        user: None,
        state: None,
        name: None,
        request: false,
    };
    super::cancel::run(home, wait, args)
}

/// While waiting, Ctrl-C (and a hang-up or SIGTERM) sets [`INTERRUPTED`]; afterwards the
/// defaults come back, so a lost terminal ends the client and with it the session.
fn catch_interrupts(on: bool) {
    extern "C" fn on_interrupt(_signal: libc::c_int) {
        INTERRUPTED.store(true, Ordering::SeqCst);
    }
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe); sigaction gets a
        // fully initialised struct.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction =
                if on { on_interrupt as *const () as libc::sighandler_t } else { libc::SIG_DFL };
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}
