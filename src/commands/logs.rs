//! `carma logs ID [--attempt N] [--stdout|--stderr] [-f]`: a task's output, as its submitter or
//! root. Both streams by default, as Slurm's one output file has them: the job writes them to
//! two files without line times, so without `-f` stdout comes first, then stderr (said on
//! stderr); with `-f` each poll shows what either gained.
//!
//! The output files belong to the submitter (mode 0600, in run folders others may traverse
//! but not list), or sit where the submitter's `--output`/`--error` template put them; this
//! verb reads them with the reader's own permissions, after checking in the published view
//! that the reader may (`access`), so a refusal names the owner instead of a bare EACCES.
//! With `-f` it follows the attempt until it ends, waiting for a task that has not started.
//! When stdout is a terminal, control characters other than newline, tab and carriage
//! return are escaped (`--raw` passes the bytes through): a job's output must not drive an
//! administrator's terminal.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Duration;

use crate::access::{self, Action, Actor, users};
use crate::cli::LogsArgs;
use crate::error::Error;
use crate::home::Home;
use crate::journal::Task;
use crate::text::escape;
use crate::tick::launch::{Stream, output_path};
use crate::view::{self, lookup};

mod tail;

/// How often `-f` looks for new output and for the attempt's end.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

pub(super) fn run(home: &Home, args: LogsArgs) -> anyhow::Result<()> {
    run_to(home, args, &mut std::io::stdout().lock())
}

/// `run`, writing to `out` (stdout, or `carma mcp`'s answer).
pub(super) fn run_to(home: &Home, args: LogsArgs, mut out: &mut dyn Write) -> anyhow::Result<()> {
    let streams = match (args.stdout, args.stderr) {
        (true, false) => vec![Stream::Stdout],
        (false, true) => vec![Stream::Stderr],
        _ => vec![Stream::Stdout, Stream::Stderr],
    };
    let escape_controls = !args.raw && is_terminal();
    if args.tail.is_some() || args.json {
        let (id, attempt) = wait_for_attempt(home, &args)?;
        return tail::run(home, &args, &id, attempt, &streams, escape_controls, out);
    }
    let (id, attempt) = wait_for_attempt(home, &args)?;
    let mut sources = Vec::with_capacity(streams.len());
    for stream in streams {
        sources.push(Source { path: attempt_path(home, &id, attempt, stream)?, file: None, shown: 0 });
    }
    let mut buffer = vec![0u8; 64 * 1024];
    let mut pass = 0;
    loop {
        for source in &mut sources {
            source.open()?;
        }
        if sources.iter().all(|s| s.file.is_none()) && !args.follow {
            let folder = home.runs_dir().join(id.as_str());
            let in_folder = sources.iter().all(|s| s.path.starts_with(&folder));
            if in_folder && !folder.exists() && attempt_ended(home, &id, attempt)? {
                return Err(Error::BadInput(format!(
                    "task {id} has ended and its run folder {} was removed by the queue's retention ([retention] in {}); its record stays in `carma show {id}` and `carma events`",
                    folder.display(),
                    home.config_path().display()
                ))
                .into());
            }
            return Err(Error::BadInput(format!(
                "task {id} attempt {attempt} has no output yet ({}); carma logs -f {id} waits for it",
                sources[0].path.display()
            ))
            .into());
        }
        // The end is checked before the last read, so output written just before it is shown.
        let ended = args.follow && attempt_ended(home, &id, attempt)?;
        let mut read = 0;
        for source in &mut sources {
            read += source.copy(&mut out, &mut buffer, escape_controls)?;
        }
        if pass == 0 && sources.len() > 1 && sources.iter().all(|s| s.shown > 0) && !args.follow {
            eprintln!(
                "carma logs: stdout, then stderr (two files, lines not timed); --stdout or --stderr shows one"
            );
        }
        pass += 1;
        if !args.follow || (ended && read == 0) {
            return Ok(());
        }
        out.flush()?;
        if read == 0 {
            for source in &mut sources {
                if let Some(file) = &mut source.file {
                    follow_trim(file, &source.path)?;
                }
            }
            std::thread::sleep(FOLLOW_POLL);
        }
    }
}

/// One stream's file, opened once it exists. With both streams and `-f`, each poll shows
/// what either file gained, so lines interleave in the order they were read.
struct Source {
    path: PathBuf,
    file: Option<File>,
    /// Bytes shown so far.
    shown: u64,
}

impl Source {
    fn open(&mut self) -> anyhow::Result<()> {
        if self.file.is_some() {
            return Ok(());
        }
        // The path may be one the task's submitter chose (`--output`) and this may run as root:
        // nothing on it is opened for real before it is known to be a regular file, reached
        // through no user's link (a FIFO would block, a device may act on open). Another user
        // reads with their own rights; a FIFO or device is still refused, never waited on.
        match open_log(&self.path, crate::fsutil::Symlinks::Follow) {
            Ok(file) => self.file = Some(file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("cannot read {}", self.path.display()), e).into()),
        }
        Ok(())
    }

    /// Copies what the file holds beyond what was shown; returns how many bytes.
    fn copy(
        &mut self,
        out: &mut impl Write,
        buffer: &mut [u8],
        escape_controls: bool,
    ) -> anyhow::Result<usize> {
        let Some(file) = &mut self.file else { return Ok(0) };
        let mut total = 0;
        loop {
            let read = file
                .read(buffer)
                .map_err(|e| Error::io(format!("cannot read {}", self.path.display()), e))?;
            if read == 0 {
                self.shown += total as u64;
                return Ok(total);
            }
            write_bytes(out, &buffer[..read], escape_controls)?;
            total += read;
        }
    }
}

/// Opens a log for reading, never blocking on it: a FIFO or device at the path is refused.
/// Run by root, nothing on the path is opened before it is known to be a regular file reached
/// through no user's link (`fsutil::open_user_file`); a job owns its run folder and may put
/// anything there, and a `--output` path is its submitter's choice. Another user reads with
/// their own rights, following a link at the end of the path only when `symlinks` says so.
fn open_log(path: &std::path::Path, symlinks: crate::fsutil::Symlinks) -> std::io::Result<File> {
    match std::path::absolute(path) {
        Ok(path) if crate::home::is_root() => crate::fsutil::open_user_file(&path, None),
        _ => crate::fsutil::open_regular(path, symlinks),
    }
}

/// A run-folder log over `[limits] log-bytes-max` is cut back under the follower (see
/// `exec::logcap`): go on from its new end instead of waiting, silent, for it to regrow
/// past the old offset. The end the cut kept was mostly shown already; what the job wrote
/// since the cut (one poll's worth) is skipped here, and still in the file.
fn follow_trim(file: &mut File, path: &std::path::Path) -> anyhow::Result<()> {
    let cannot = |e| Error::io(format!("cannot read {}", path.display()), e);
    let position = file.stream_position().map_err(cannot)?;
    let len = file.metadata().map_err(cannot)?.len();
    if len < position {
        file.seek(SeekFrom::Start(len)).map_err(cannot)?;
        eprintln!("carma logs: {} was cut to its log-bytes-max; following its new end", path.display());
    }
    Ok(())
}

/// The task and the attempt to show: `--attempt N`, else the latest one; with `-f`, waits
/// until the task has one (it may still be in the spool or waiting for a GPU).
fn wait_for_attempt(home: &Home, args: &LogsArgs) -> anyhow::Result<(crate::id::TaskId, u32)> {
    // Said once on stderr, so a follower of a waiting task knows it waits.
    let mut said = false;
    let mut say = |id: &crate::id::TaskId, why: &str| {
        if !std::mem::replace(&mut said, true) {
            eprintln!(
                "carma logs: task {id} has not started ({why}); its output follows once it does (Ctrl-C stops)"
            );
        }
    };
    loop {
        let state = view::load(home)?;
        let spooled = lookup::spooled(home, &state);
        let found = match lookup::resolve(&state, &spooled, &args.id)? {
            lookup::Target::Task(found) => found,
            lookup::Target::Array { id, members } => {
                return Err(Error::BadInput(format!(
                    "{id} is an array of {} task(s); name one as {id}_INDEX (`carma show {id}` lists them)",
                    members.len()
                ))
                .into());
            }
        };
        check_access(home, &found)?;
        let lookup::Found::Task(task) = found else {
            if args.follow {
                say(found.id(), "it is still in the spool");
                std::thread::sleep(FOLLOW_POLL);
                continue;
            }
            let id = found.id();
            return Err(Error::BadInput(format!(
                "task {id} has not started (it is still in the spool); carma logs -f {id} waits for it"
            ))
            .into());
        };
        if let Some(number) = args.attempt {
            if task.attempts.iter().any(|a| a.number == number) {
                return Ok((task.id.clone(), number));
            }
            let tries = task.attempts.len();
            return Err(Error::BadInput(format!(
                "task {} has no attempt {number} (it has {tries}); carma show {} lists them",
                task.id, task.id
            ))
            .into());
        }
        if let Some(attempt) = task.attempts.last() {
            return Ok((task.id.clone(), attempt.number));
        }
        if !args.follow || task.status().is_terminal() {
            return Err(Error::BadInput(format!(
                "task {} has not started; carma logs -f {} waits for it",
                task.id, task.id
            ))
            .into());
        }
        say(
            &task.id,
            &super::status::reason(task).unwrap_or(std::borrow::Cow::Borrowed("waiting for a GPU")),
        );
        std::thread::sleep(FOLLOW_POLL);
    }
}

fn check_access(home: &Home, found: &lookup::Found<'_>) -> Result<(), Error> {
    let policy = super::act::policy(home);
    let owner_uid = found.owner_uid();
    access::may(&Actor::current(&policy), Action::ReadLogs, access::Target::Task { owner_uid }, &policy)
        .map_err(|_| {
            Error::Denied(format!(
                "cannot read the output of task {} ({}): it belongs to {}; only its submitter or root may {}",
                found.id(),
                escape(found.name()),
                users::display(owner_uid),
                Action::ReadLogs.verb()
            ))
        })
}

/// Where the attempt's stream is: the spec's template, expanded, or the run folder.
fn attempt_path(
    home: &Home,
    id: &crate::id::TaskId,
    attempt: u32,
    stream: Stream,
) -> anyhow::Result<PathBuf> {
    let state = view::load(home)?;
    let task: &Task = state.tasks.get(id).ok_or_else(|| Error::UnknownTask(id.to_string()))?;
    if let Some(path) = output_path(task, attempt, stream) {
        return path.map_err(|reason| Error::BadInput(format!("task {id}: {reason}")).into());
    }
    let name = match stream {
        Stream::Stdout => crate::exec::rundir::STDOUT_LOG,
        Stream::Stderr => crate::exec::rundir::STDERR_LOG,
    };
    Ok(crate::exec::run_dir(home.root(), id.as_str(), attempt)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .join(name))
}

/// Lines of stderr `show` and `wait` print for a failed task.
pub(super) const STDERR_TAIL_LINES: usize = 5;
/// Bytes read from the end of stderr for them.
const STDERR_TAIL_BYTES: u64 = 4096;

/// The last lines of the latest attempt's stderr, escaped, for a reader who may read it, and
/// the file they came from when it is the submitter's own (`--error`, or `--output` with
/// stderr in it, as Slurm's default); `None` when there is none to show. The run folder's
/// `stderr.log` is read never through a symbolic link; a file the submitter chose is read as
/// `carma logs --stderr` reads it (as the reader, or by root only through
/// `fsutil::open_user_file`, a file of the submitter's).
pub(super) fn stderr_tail(home: &Home, task: &Task) -> Option<(Vec<String>, Option<PathBuf>)> {
    let attempt = task.attempts.last()?;
    let policy = super::act::policy(home);
    let target = access::Target::Task { owner_uid: task.submitter_uid };
    access::may(&Actor::current(&policy), Action::ReadLogs, target, &policy).ok()?;
    let chosen = match output_path(task, attempt.number, Stream::Stderr) {
        Some(path) => Some(path.ok()?),
        None => None,
    };
    let mut file = match &chosen {
        Some(path) if crate::home::is_root() => {
            crate::fsutil::open_user_file(path, Some(task.submitter_uid)).ok()?
        }
        Some(path) => open_log(path, crate::fsutil::Symlinks::Follow).ok()?,
        None => {
            let path = crate::exec::run_dir(home.root(), task.id.as_str(), attempt.number)
                .ok()?
                .join(crate::exec::rundir::STDERR_LOG);
            open_log(&path, crate::fsutil::Symlinks::Refuse).ok()?
        }
    };
    let len = file.metadata().ok().filter(std::fs::Metadata::is_file)?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(STDERR_TAIL_BYTES))).ok()?;
    // At most the tail's size, even if the job grows its log meanwhile (its length is its own).
    let mut bytes = Vec::new();
    file.take(STDERR_TAIL_BYTES).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    // A cut at the read's start may leave half a line first.
    if len > STDERR_TAIL_BYTES && lines.len() > 1 {
        lines.remove(0);
    }
    let from = lines.len().saturating_sub(STDERR_TAIL_LINES);
    let tail: Vec<String> = lines[from..].iter().map(|l| escape(l).into_owned()).collect();
    (!tail.is_empty()).then_some((tail, chosen))
}

/// Whether the attempt has ended, as last published.
fn attempt_ended(home: &Home, id: &crate::id::TaskId, attempt: u32) -> anyhow::Result<bool> {
    let state = view::load(home)?;
    let task = state.tasks.get(id).ok_or_else(|| Error::UnknownTask(id.to_string()))?;
    Ok(task.attempts.iter().find(|a| a.number == attempt).is_none_or(|a| a.ended_ms.is_some()))
}

/// Writes output, with C0 controls and DEL escaped (newline, tab and carriage return kept)
/// when `escape_controls`. Byte-wise, so a chunk boundary never splits an escape.
fn write_bytes(out: &mut impl Write, bytes: &[u8], escape_controls: bool) -> std::io::Result<()> {
    if !escape_controls {
        return out.write_all(bytes);
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let control = (b < 0x20 && !matches!(b, b'\n' | b'\t' | b'\r')) || b == 0x7f;
        if control {
            out.write_all(&bytes[start..i])?;
            write!(out, "\\x{b:02x}")?;
            start = i + 1;
        }
    }
    out.write_all(&bytes[start..])
}

fn is_terminal() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(libc::STDOUT_FILENO) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bytes_are_escaped_only_when_asked() {
        let mut out = Vec::new();
        write_bytes(&mut out, b"epoch 1\x1b[2J\tok\r\n", true).unwrap();
        assert_eq!(out, b"epoch 1\\x1b[2J\tok\r\n");
        let mut raw = Vec::new();
        write_bytes(&mut raw, b"a\x1bb", false).unwrap();
        assert_eq!(raw, b"a\x1bb");
    }
}
