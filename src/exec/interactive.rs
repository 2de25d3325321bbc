//! Interactive attempts (`carma alloc`, `carma run`): the supervisor's side of the session.
//!
//! An interactive task is an ordinary attempt: the tick places and launches it, the
//! supervisor runs it as the submitter in its cgroup with the job's environment, holds it to
//! its time limit and ends its leftovers. Only its standard streams differ: the supervisor
//! opens a pseudo-terminal ([`Terminal::open`]), the job gets the slave side as its
//! controlling terminal in a session of its own, and a relay thread carries the master side
//! to the one client that connects to `runs/ID/N/attach/sock`:
//! - the socket is the submitter's, mode 0600, so no other user may connect to it, in a folder
//!   of root's (0711: reachable, not listable, and nobody else can add anything to it, so no
//!   byte of a user's lands in root's state directory through it); and whoever connects is
//!   asked for credentials by the kernel (`SO_PEERCRED`): a peer that is not the submitter
//!   gets one refusal line and nothing of the terminal;
//! - when the session ends the supervisor removes the socket and its folder ([`close`]); what
//!   a killed supervisor leaves, the tick's seal removes (exec/seal.rs);
//! - the job starts only once its client is attached ([`Terminal::await_client`]), so no
//!   byte of a short command is lost and the terminal has the client's size from the start;
//!   a client that never comes within [`ATTACH_WAIT_MS`] ends the attempt before it starts;
//! - one client per session, once: a second connection is refused, and when the client goes
//!   away (its terminal hung up) the relay hangs the terminal up too (SIGHUP to the job's
//!   process group, the master closed), as a lost terminal ends salloc's shell;
//! - before the time limit a warning line goes to the client (at most a minute before it,
//!   at most halfway); the supervisor stops an interactive attempt with SIGHUP, what a
//!   shell takes as the end of its terminal;
//! - what the job writes also goes to the attempt's stdout log, which `carma logs` reads.
//!
//! The client's words are data only: bytes typed, a window size, the end of its input. It
//! chooses nothing about the job, which the tick placed from the spool like any task.

pub(crate) mod attach;
pub mod frame;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use frame::{Decoder, Frame, PAYLOAD_MAX};

use super::record::ExitOutcome;

/// The interactive mode of a held allocation (`carma alloc --no-shell`): no terminal of its
/// own, commands attached with `carma run --attach` ([`attach`]).
pub const HOLD: &str = "hold";
pub use super::rundir::ATTACH_DIR;
/// The session's socket in [`ATTACH_DIR`] (the submitter's, 0600).
pub const ATTACH_SOCKET: &str = "sock";
/// How long an interactive attempt waits for its client before it gives up, in ms.
pub const ATTACH_WAIT_MS: u64 = 120_000;
/// The warning goes this long before the time limit at most (and at most halfway), in ms.
pub const WARN_BEFORE_MS_MAX: u64 = 60_000;
/// Typed bytes held for a job that does not read them; past it the client is not read.
const INPUT_PENDING_MAX: usize = 64 * 1024;
/// How long a write to the client may block before the client counts as gone.
const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes drained from the terminal after the job ended.
const DRAIN_BYTES_MAX: usize = 1024 * 1024;
/// The exit status the client gets when the time limit ended the session (as `timeout`).
pub const EXIT_TIME_LIMIT: i32 = 124;

/// Where the session of the attempt in `run_dir` listens.
pub fn socket_path(run_dir: &Path) -> PathBuf {
    run_dir.join(ATTACH_DIR).join(ATTACH_SOCKET)
}

/// The terminal and the socket of one interactive attempt, made before the job starts.
pub(crate) struct Terminal {
    master: OwnedFd,
    slave: OwnedFd,
    listener: UnixListener,
    /// The submitter's client, once [`Terminal::await_client`] let it in.
    client: Option<UnixStream>,
    /// What the client sent after its hello.
    decoder: Decoder,
}

/// What the relay needs to know about the attempt.
pub(crate) struct Session {
    /// The task's id, for the lines the user reads.
    pub task_id: String,
    /// The submitter: the only peer let in.
    pub owner_uid: u32,
    /// The time limit, for the warning.
    pub time_limit_ms: Option<u64>,
    /// The job's process group (its first process's pid), hung up when the client goes.
    pub job_pgid: i32,
    /// The attempt's stdout log, which gets a copy of the terminal's output.
    pub log: Option<File>,
}

/// Why the session ended, for the client's last line (`None`: the job's own end), and the
/// exit code the client exits with.
type Ending = (Option<String>, i32);

/// The running relay; [`Relay::finish`] ends it once the attempt has ended.
pub(crate) struct Relay {
    thread: JoinHandle<()>,
    wake: OwnedFd,
    ending: Arc<Mutex<Option<Ending>>>,
}

impl Terminal {
    /// Opens the pseudo-terminal (the slave owned by the submitter, 0600) and the socket
    /// (`attach/` root's 0711, `attach/sock` the submitter's 0600) in `run_dir`, a folder
    /// of root's that no one else can change.
    pub(crate) fn open(run_dir: &Path, uid: u32, gid: u32, switch_user: bool) -> Result<Terminal, String> {
        let owner = switch_user.then_some((uid, gid));
        let (master, slave) = open_pty(owner)?;
        let listener = listen(run_dir, owner)?;
        Ok(Terminal { master, slave, listener, client: None, decoder: Decoder::default() })
    }

    /// The terminal of an interactive attempt (`alloc` or `run`), opened and with its client
    /// attached ([`Terminal::await_client`]); `None` for a batch attempt or a held one.
    pub(crate) fn for_attempt(
        run_dir: &Path,
        plan: &super::plan::AttemptPlan,
        credentials: &super::spawn::JobCredentials,
        cancel: &AtomicBool,
    ) -> Result<Option<Terminal>, String> {
        match plan.interactive.as_deref() {
            Some(mode) if mode != HOLD => {
                let (uid, gid) = (credentials.uid, credentials.gid);
                let mut terminal = Terminal::open(run_dir, uid, gid, credentials.switch_user)?;
                terminal.await_client(&plan.task_id, uid, cancel)?;
                Ok(Some(terminal))
            }
            _ => Ok(None),
        }
    }

    /// Waits, before the job starts, for the submitter's client (refusing anyone else) and
    /// its hello; `Err` when none came within [`ATTACH_WAIT_MS`] or `cancel` became true.
    pub(crate) fn await_client(
        &mut self,
        task_id: &str,
        owner_uid: u32,
        cancel: &AtomicBool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_millis(ATTACH_WAIT_MS);
        while self.client.is_none() {
            if cancel.load(Ordering::SeqCst) {
                return Err("cancelled before a terminal was attached".into());
            }
            if Instant::now() >= deadline {
                return Err(format!("no terminal attached within {} s", ATTACH_WAIT_MS / 1000));
            }
            let mut fds = [poll_fd(&self.listener, libc::POLLIN)];
            // SAFETY: poll over one initialised pollfd.
            if unsafe { libc::poll(fds.as_mut_ptr(), 1, 200) } > 0 {
                self.client = accept(&self.listener, task_id, owner_uid, None);
            }
        }
        let (Some(client), master) = (&mut self.client, &self.master) else { return Ok(()) };
        let _ = client.set_read_timeout(Some(CLIENT_WRITE_TIMEOUT));
        let mut buffer = [0u8; 64];
        // The hello comes first: the window size the job starts with.
        loop {
            match self.decoder.next_frame() {
                Ok(Some(Frame::Hello { tty, rows, cols })) => {
                    set_window(master, rows, cols);
                    if !tty {
                        no_echo(master);
                    }
                    break;
                }
                Ok(Some(_)) => return Err("the client did not start with a hello".into()),
                Err(why) => return Err(format!("the client broke the session: {why}")),
                Ok(None) => match client.read(&mut buffer) {
                    Ok(n) if n > 0 => self.decoder.push(&buffer[..n]),
                    _ => return Err("the terminal went away before the job started".into()),
                },
            }
        }
        let _ = client.set_read_timeout(None);
        Ok(())
    }

    /// The slave side, which the job gets as its stdin, stdout, stderr and controlling
    /// terminal.
    pub(crate) fn slave(&self) -> &OwnedFd {
        &self.slave
    }

    /// Starts the relay once the job runs; the supervisor's copy of the slave is closed, so
    /// the terminal ends when the job's processes have all let it go.
    pub(crate) fn start(self, session: Session) -> Result<Relay, String> {
        let Terminal { master, slave, listener, client, decoder } = self;
        drop(slave);
        let mut ends = [-1; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(format!("cannot make the relay's pipe: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: pipe2 returned two fresh descriptors that nothing else owns.
        let (wake_read, wake) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        let ending = Arc::new(Mutex::new(None));
        let mut state = RelayState::new(session, master, listener, wake_read, Arc::clone(&ending));
        state.client = client;
        state.decoder = decoder;
        let thread = std::thread::Builder::new()
            .name("carma-relay".into())
            .spawn(move || state.run())
            .map_err(|err| format!("cannot start the terminal relay: {err}"))?;
        Ok(Relay { thread, wake, ending })
    }
}

impl Relay {
    /// Tells the client how the attempt ended (a line, then its exit status) and waits for
    /// the relay to stop; called once every process of the attempt has ended.
    pub(crate) fn finish(self, task_id: &str, outcome: &ExitOutcome, time_limit_ms: Option<u64>) {
        let ending = match outcome {
            ExitOutcome::Exited { code } => (None, *code),
            ExitOutcome::Signaled { signal } => (None, 128 + signal),
            ExitOutcome::TimeLimit => {
                let limit = time_limit_ms.map(words_of_ms).unwrap_or_default();
                (Some(format!("carma: task {task_id} reached its time limit ({limit})")), EXIT_TIME_LIMIT)
            }
            ExitOutcome::Cancelled => {
                (Some(format!("carma: task {task_id} was cancelled")), 128 + libc::SIGHUP)
            }
            ExitOutcome::SpawnFailed { reason } => {
                (Some(format!("carma: the job did not start: {reason}")), 1)
            }
        };
        if let Ok(mut slot) = self.ending.lock() {
            *slot = Some(ending);
        }
        // SAFETY: a one-byte write to our own pipe.
        unsafe { libc::write(self.wake.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        if self.thread.join().is_err() {
            eprintln!("carma run-task: the terminal relay panicked");
        }
    }
}

/// A pseudo-terminal: the master non-blocking, both close-on-exec, the slave the submitter's
/// (mode 0600) when `owner` is given.
pub(crate) fn open_pty(owner: Option<(u32, u32)>) -> Result<(OwnedFd, OwnedFd), String> {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors; the name, termios and size are optional.
    let opened = unsafe {
        libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null())
    };
    if opened != 0 {
        return Err(format!("cannot open a pseudo-terminal: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: openpty returned two fresh descriptors that nothing else owns.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    for fd in [&master, &slave] {
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    // SAFETY: as above; the master is read and written without blocking the relay.
    unsafe { libc::fcntl(master.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&slave, Some(uid), Some(gid))
            .map_err(|err| format!("cannot chown the job's terminal: {err}"))?;
        // SAFETY: fchmod on a descriptor we own.
        unsafe { libc::fchmod(slave.as_raw_fd(), 0o600) };
    }
    Ok((master, slave))
}

/// The session's socket, non-blocking: `attach/sock` (0600) in `run_dir`, the submitter's when
/// `owner` is given, in `attach/`: root's and 0711 then (the submitter may reach the socket and
/// write nothing there), else this process's user's and 0700.
pub(crate) fn listen(run_dir: &Path, owner: Option<(u32, u32)>) -> Result<UnixListener, String> {
    let dir = run_dir.join(ATTACH_DIR);
    let mode = if owner.is_some() { 0o711 } else { 0o700 };
    std::fs::DirBuilder::new()
        .mode(mode)
        .create(&dir)
        .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    // The umask may have taken the others' search bit: the mode is set as it must be.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
        .map_err(|err| format!("cannot chmod {}: {err}", dir.display()))?;
    let path = dir.join(ATTACH_SOCKET);
    let listener =
        UnixListener::bind(&path).map_err(|err| format!("cannot listen on {}: {err}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|err| format!("cannot chmod {}: {err}", path.display()))?;
    if let Some((uid, gid)) = owner {
        // Only the socket is theirs: connecting needs write permission on it, and nobody
        // else has it.
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid))
            .map_err(|err| format!("cannot chown {}: {err}", path.display()))?;
    }
    listener.set_nonblocking(true).map_err(|err| format!("cannot set up {}: {err}", path.display()))?;
    Ok(listener)
}

/// Removes the session's socket and its folder from `run_dir` once the session has ended, so
/// nothing of it stays in root's state directory; a folder that is not there is fine. What is
/// left (a folder an older carma made the submitter's) is the tick's seal's (exec/seal.rs).
pub(crate) fn close(run_dir: &Path) {
    let dir = run_dir.join(ATTACH_DIR);
    let _ = std::fs::remove_file(dir.join(ATTACH_SOCKET));
    match std::fs::remove_dir(&dir) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            eprintln!("carma run-task: cannot remove {}: {err}", dir.display());
        }
        _ => {}
    }
}

/// `2h`, `90m`, `45s`: a limit as people write it.
fn words_of_ms(ms: u64) -> String {
    match ms {
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms => format!("{}s", ms.div_ceil(1000)),
    }
}

/// When the warning goes, and its words.
fn warning(time_limit_ms: Option<u64>, started: Instant) -> Option<(Instant, String)> {
    let limit = time_limit_ms?;
    let before = WARN_BEFORE_MS_MAX.min(limit / 2);
    let at = started + Duration::from_millis(limit - before);
    let line = format!("carma: this session ends in {} s (time limit {})", before / 1000, words_of_ms(limit));
    Some((at, line))
}

/// The relay thread's state: waiting for its client, attached, or hung up.
struct RelayState {
    session: Session,
    master: Option<OwnedFd>,
    listener: UnixListener,
    wake: OwnedFd,
    ending: Arc<Mutex<Option<Ending>>>,
    client: Option<UnixStream>,
    decoder: Decoder,
    input: Vec<u8>,
    warn: Option<(Instant, String)>,
}

impl RelayState {
    fn new(
        session: Session,
        master: OwnedFd,
        listener: UnixListener,
        wake: OwnedFd,
        ending: Arc<Mutex<Option<Ending>>>,
    ) -> RelayState {
        RelayState {
            warn: warning(session.time_limit_ms, Instant::now()),
            session,
            master: Some(master),
            listener,
            wake,
            ending,
            client: None,
            decoder: Decoder::default(),
            input: Vec::new(),
        }
    }

    /// Relays until the supervisor says the attempt ended, then says so to the client.
    fn run(mut self) {
        self.decoded_frames();
        loop {
            let mut fds = vec![poll_fd(&self.wake, libc::POLLIN), poll_fd(&self.listener, libc::POLLIN)];
            if let Some(client) = &self.client
                && self.input.len() < INPUT_PENDING_MAX
            {
                fds.push(poll_fd(client, libc::POLLIN));
            }
            if let (Some(master), Some(_)) = (&self.master, &self.client) {
                let out = if self.input.is_empty() { 0 } else { libc::POLLOUT };
                fds.push(poll_fd(master, libc::POLLIN | out));
            }
            // SAFETY: poll over a vector of initialised pollfd structs of that length.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 200) };
            if fds[0].revents != 0 {
                break;
            }
            if fds[1].revents != 0 {
                // The client came before the job started: every later connection is refused.
                let ended = self.master.is_none();
                accept(&self.listener, &self.session.task_id, self.session.owner_uid, Some(ended));
            }
            self.pump_client();
            self.pump_master();
            self.timers();
        }
        self.end();
    }

    /// Reads what the client sent and acts on each frame; a client gone hangs the session up.
    fn pump_client(&mut self) {
        let Some(client) = &mut self.client else { return };
        if self.input.len() >= INPUT_PENDING_MAX || !readable(client) {
            return;
        }
        let mut buffer = vec![0u8; self.decoder.room().clamp(1, PAYLOAD_MAX)];
        match client.read(&mut buffer) {
            Ok(0) | Err(_) => return self.hang_up(),
            Ok(n) => self.decoder.push(&buffer[..n]),
        }
        self.decoded_frames();
    }

    /// Acts on every whole frame decoded so far (some may have come with the hello).
    fn decoded_frames(&mut self) {
        loop {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => self.on_frame(frame),
                Ok(None) => return,
                Err(why) => {
                    eprintln!("carma run-task: the client broke the session: {why}");
                    return self.hang_up();
                }
            }
        }
    }

    fn on_frame(&mut self, frame: Frame) {
        let Some(master) = &self.master else { return };
        match frame {
            Frame::Hello { tty, rows, cols } => {
                set_window(master, rows, cols);
                if !tty {
                    no_echo(master);
                }
            }
            Frame::Resize { rows, cols } => set_window(master, rows, cols),
            Frame::Input(bytes) => self.input.extend(bytes),
            // The terminal's end-of-file character, as a user typing ^D at a line's start.
            Frame::EndOfInput => self.input.push(4),
            // Kinds only the supervisor sends: a confused client, ignored.
            Frame::Output(_) | Frame::Note(_) | Frame::Exit(_) | Frame::Command(_) => {}
        }
    }

    /// Carries the job's output to the client (and its log), and typed bytes to the job.
    fn pump_master(&mut self) {
        let (Some(master), Some(_)) = (&self.master, &self.client) else { return };
        if !self.input.is_empty() {
            // SAFETY: a write from our buffer to our own descriptor.
            let wrote =
                unsafe { libc::write(master.as_raw_fd(), self.input.as_ptr().cast(), self.input.len()) };
            if let Ok(n) = usize::try_from(wrote) {
                self.input.drain(..n);
            }
        }
        let mut buffer = vec![0u8; PAYLOAD_MAX];
        // SAFETY: a read into our buffer from our own non-blocking descriptor.
        let read = unsafe { libc::read(master.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
        match usize::try_from(read) {
            Ok(0) => self.master = None,
            Ok(n) => self.send_output(&buffer[..n]),
            // EIO: every process let the terminal go (nothing more will come); EAGAIN:
            // nothing yet.
            Err(_) if std::io::Error::last_os_error().raw_os_error() == Some(libc::EIO) => self.master = None,
            Err(_) => {}
        }
    }

    fn send_output(&mut self, bytes: &[u8]) {
        if let Some(log) = &mut self.session.log {
            let _ = log.write_all(bytes);
        }
        self.send(&Frame::Output(bytes.to_vec()));
    }

    /// A client that cannot take a frame within the timeout is gone.
    fn send(&mut self, frame: &Frame) {
        let Some(client) = &mut self.client else { return };
        if client.write_all(&frame::encode(frame)).is_err() {
            self.hang_up();
        }
    }

    fn timers(&mut self) {
        let now = Instant::now();
        let due = self.client.is_some() && self.warn.as_ref().is_some_and(|(at, _)| now >= *at);
        if let Some((_, line)) = self.warn.take_if(|_| due) {
            if let Some(log) = &mut self.session.log {
                let _ = writeln!(log, "{line}");
            }
            self.send(&Frame::Note(line));
        }
    }

    /// The terminal is gone: the job's process group gets SIGHUP and the master is closed,
    /// which hangs the terminal up for the job's session. The group's processes are checked
    /// to still be the job's (descendants of this supervisor, their subreaper): once the job
    /// has ended its group id may name someone else's.
    fn hang_up(&mut self) {
        self.client = None;
        if self.master.take().is_some() {
            super::proctable::signal_own_group(self.session.job_pgid, libc::SIGHUP);
        }
    }

    /// The attempt ended: the last output, the ending line and the exit status go to the
    /// client.
    fn end(mut self) {
        let mut drained = 0;
        while let (Some(master), Some(_)) = (&self.master, &self.client) {
            let mut buffer = vec![0u8; PAYLOAD_MAX];
            // SAFETY: a read into our buffer from our own non-blocking descriptor.
            let read = unsafe { libc::read(master.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
            match usize::try_from(read) {
                Ok(n) if n > 0 && drained < DRAIN_BYTES_MAX => {
                    drained += n;
                    self.send_output(&buffer[..n]);
                }
                _ => break,
            }
        }
        let ending = self.ending.lock().ok().and_then(|mut slot| slot.take());
        let (line, code) = ending.unwrap_or((None, 1));
        if let Some(line) = line {
            self.send(&Frame::Note(line));
        }
        self.send(&Frame::Exit(code));
    }
}

/// Accepts one connection: the submitter's, while no client is attached (`attached` is
/// `None`), is returned; anyone else, or anyone once a client was attached (`Some(ended)`:
/// whether the session has ended), gets one refusal line.
pub(crate) fn accept(
    listener: &UnixListener,
    task: &str,
    owner_uid: u32,
    attached: Option<bool>,
) -> Option<UnixStream> {
    let (mut stream, _) = listener.accept().ok()?;
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT));
    let refusal = match (peer_uid(&stream), attached) {
        (Some(uid), _) if uid != owner_uid => {
            format!("carma: refused: task {task} belongs to uid {owner_uid}, not to uid {uid}")
        }
        (None, _) => format!("carma: refused: cannot tell who is connecting to task {task}"),
        (Some(_), Some(true)) => format!("carma: refused: the session of task {task} has ended"),
        (Some(_), Some(false)) => format!("carma: refused: task {task} already has a terminal attached"),
        (Some(_), None) => return Some(stream),
    };
    let _ = stream.write_all(&frame::encode(&Frame::Note(refusal)));
    None
}

pub(crate) fn poll_fd(fd: &impl AsFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd { fd: fd.as_fd().as_raw_fd(), events, revents: 0 }
}

pub(crate) fn readable(stream: &UnixStream) -> bool {
    let mut fds = [poll_fd(stream, libc::POLLIN)];
    // SAFETY: poll over one initialised pollfd, without waiting.
    unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) > 0 }
}

/// The connecting process's uid, as the kernel recorded it at `connect`.
fn peer_uid(stream: &UnixStream) -> Option<u32> {
    // SAFETY: ucred is plain data; getsockopt fills at most `len` bytes of it.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `cred`, which lives across the call.
    let got = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (got == 0 && len as usize == std::mem::size_of::<libc::ucred>()).then_some(cred.uid)
}

pub(crate) fn set_window(master: &OwnedFd, rows: u16, cols: u16) {
    if rows == 0 || cols == 0 {
        return;
    }
    let size = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer.
    unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
}

/// For a client whose stdin is not a terminal: no echo of what it pipes in, and output
/// without the terminal's `\r\n`.
pub(crate) fn no_echo(master: &OwnedFd) {
    // SAFETY: termios is plain data; tcgetattr fills it and tcsetattr reads it.
    unsafe {
        let mut termios: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(master.as_raw_fd(), &mut termios) == 0 {
            termios.c_lflag &= !(libc::ECHO | libc::ECHONL);
            termios.c_oflag &= !libc::ONLCR;
            libc::tcsetattr(master.as_raw_fd(), libc::TCSANOW, &termios);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_comes_a_minute_before_the_limit_or_halfway() {
        let start = Instant::now();
        let (at, line) = warning(Some(7_200_000), start).expect("a limit");
        assert_eq!(at, start + Duration::from_millis(7_140_000));
        assert_eq!(line, "carma: this session ends in 60 s (time limit 2h)");
        let (at, line) = warning(Some(20_000), start).expect("a limit");
        assert_eq!(at, start + Duration::from_millis(10_000));
        assert_eq!(line, "carma: this session ends in 10 s (time limit 20s)");
        assert!(warning(None, start).is_none());
    }
}
