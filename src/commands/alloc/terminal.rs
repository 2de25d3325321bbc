//! The client's end of an interactive session: this process's terminal in raw mode (put back
//! as it was on every way out), its size sent at the start and on every SIGWINCH, typed bytes
//! to the supervisor's socket, the job's output to stdout and carma's lines to stderr.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::exec::interactive::frame::{self, Decoder, Frame, PAYLOAD_MAX};

/// Set by the SIGWINCH handler: the terminal changed size.
static RESIZED: AtomicBool = AtomicBool::new(false);

/// How a session ended for the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// The supervisor sent the job's exit status.
    Exit(i32),
    /// The connection closed without one (the supervisor died, or refused us).
    Lost,
}

/// The terminal's settings before raw mode; dropping it puts them back.
struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    /// Raw mode on stdin's terminal, as ssh and salloc's srun --pty set it.
    fn enter() -> Option<RawMode> {
        // SAFETY: termios is plain data; tcgetattr fills it, cfmakeraw and tcsetattr read it.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(libc::STDIN_FILENO, &mut saved) != 0 {
                return None;
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            (libc::tcsetattr(libc::STDIN_FILENO, libc::TCSADRAIN, &raw) == 0).then_some(RawMode { saved })
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: tcsetattr reads the settings saved by `enter`.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSADRAIN, &self.saved) };
    }
}

/// True when stdin is a terminal.
pub(super) fn stdin_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(libc::STDIN_FILENO) == 1 }
}

/// Stdin's terminal size, `(rows, cols)`; zeros when it has none.
fn window() -> (u16, u16) {
    // SAFETY: TIOCGWINSZ writes one winsize into a valid pointer.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    if unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCGWINSZ, &mut size) } != 0 {
        return (0, 0);
    }
    (size.ws_row, size.ws_col)
}

/// Relays this terminal and the session until it ends; `command` is for a held allocation.
pub(super) fn relay(mut stream: UnixStream, command: Option<Vec<String>>) -> std::io::Result<Ending> {
    let tty = stdin_is_tty();
    let (rows, cols) = window();
    stream.write_all(&frame::encode(&Frame::Hello { tty, rows, cols }))?;
    if let Some(argv) = command {
        stream.write_all(&frame::encode(&Frame::Command(argv)))?;
    }
    if tty {
        watch_resizes();
    }
    let raw = if tty { RawMode::enter() } else { None };
    let ending = pump(&mut stream, tty, raw.is_some());
    drop(raw);
    ending
}

/// The loop: stdin to the socket, the socket to stdout and stderr.
fn pump(stream: &mut UnixStream, tty: bool, raw: bool) -> std::io::Result<Ending> {
    let mut stdin_open = true;
    let mut decoder = Decoder::default();
    let mut buffer = vec![0u8; PAYLOAD_MAX];
    loop {
        let mut fds = vec![libc::pollfd { fd: stream.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        if stdin_open {
            fds.push(libc::pollfd { fd: libc::STDIN_FILENO, events: libc::POLLIN, revents: 0 });
        }
        // SAFETY: poll over a vector of initialised pollfd structs of that length.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 200) };
        if tty && RESIZED.swap(false, Ordering::SeqCst) {
            let (rows, cols) = window();
            stream.write_all(&frame::encode(&Frame::Resize { rows, cols }))?;
        }
        if fds.get(1).is_some_and(|fd| fd.revents != 0) {
            let n = std::io::stdin().lock().read(&mut buffer).unwrap_or(0);
            let frame = if n == 0 { Frame::EndOfInput } else { Frame::Input(buffer[..n].to_vec()) };
            stdin_open = n > 0;
            stream.write_all(&frame::encode(&frame))?;
        }
        if fds[0].revents == 0 {
            continue;
        }
        let n = stream.read(&mut buffer[..decoder.room().clamp(1, PAYLOAD_MAX)])?;
        if n == 0 {
            return Ok(Ending::Lost);
        }
        decoder.push(&buffer[..n]);
        while let Some(frame) = decoder.next_frame().map_err(std::io::Error::other)? {
            match frame {
                Frame::Output(bytes) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(&bytes)?;
                    out.flush()?;
                }
                Frame::Note(line) => note(&line, raw),
                Frame::Exit(code) => return Ok(Ending::Exit(code)),
                // Kinds only a client sends.
                Frame::Hello { .. }
                | Frame::Input(_)
                | Frame::Resize { .. }
                | Frame::EndOfInput
                | Frame::Command(_) => {}
            }
        }
    }
}

/// One of carma's lines, on a line of its own even in raw mode.
pub(super) fn note(line: &str, raw: bool) {
    let line = crate::text::escape(line);
    let mut err = std::io::stderr().lock();
    let _ = if raw { write!(err, "\r\n{line}\r\n") } else { writeln!(err, "{line}") };
}

fn watch_resizes() {
    extern "C" fn on_winch(_signal: libc::c_int) {
        RESIZED.store(true, Ordering::SeqCst);
    }
    // SAFETY: the handler only stores to an atomic (async-signal-safe); sigaction gets a
    // fully initialised struct.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_winch as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGWINCH, &action, std::ptr::null_mut());
    }
}
