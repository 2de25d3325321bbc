//! `carma cancel ID`: stop a task that has not finished.

use std::io::Write;
use std::time::Duration;

use crate::cli::CancelArgs;
use crate::clock::{Clock, SystemClock};
use crate::error::Error;
use crate::home::{Home, is_root};
use crate::id::TaskId;
use crate::journal::{Event, Record, Status, session};
use crate::spool;
use crate::tick::{AttemptRunner, ExecRunner};

/// Whether this user may open the journal for writing (root, or the owner of a personal
/// state directory). Other users go through the spool like `carma submit` does.
fn journal_writable(home: &Home) -> bool {
    let Ok(path) = std::ffi::CString::new(home.journal_path().as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(path.as_ptr(), libc::W_OK) == 0 }
}

pub fn run(home: &Home, wait: Duration, args: CancelArgs) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    home.require_initialized()?;
    if args.request || !journal_writable(home) {
        let id = TaskId::parse(&args.id).ok_or_else(|| {
            Error::BadInput(format!(
                "{:?} is not a full task id; a cancel request needs the id `carma submit` printed",
                args.id
            ))
        })?;
        spool::request_cancel(home, &id)?;
        writeln!(std::io::stdout().lock(), "cancel request for task {id} filed; the next tick applies it")?;
        return Ok(());
    }
    let (id, was, signalled) = session::write(home, wait, |journal, state| {
        let task = state.find(&args.id).ok_or_else(|| Error::UnknownTask(args.id.clone()))?;
        if task.status.is_terminal() {
            return Err(Error::BadInput(format!(
                "task {} is already {}; nothing to cancel",
                task.id,
                task.status.as_str().to_lowercase()
            )));
        }
        if !is_root() && task.submitter_uid != uid {
            return Err(Error::BadInput(format!(
                "task {} belongs to uid {}; only its submitter or root may cancel it",
                task.id, task.submitter_uid
            )));
        }
        let (id, was) = (task.id.clone(), task.status);
        let active = task.active_attempt().map(|a| a.number);
        let record = Record {
            time_ms: SystemClock.now_ms(),
            event: Event::Cancelled {
                task: id.clone(),
                by_uid: uid,
                reason: format!("cancelled by uid {uid}"),
            },
        };
        journal.append(&[record], state)?;
        // Journaled first, so no tick relaunches it; then the supervisor is told to stop
        // the job's process group. The next tick records the attempt's end as Stopped.
        let signalled = match active {
            Some(attempt) => ExecRunner::new(home.root(), std::env::current_exe().unwrap_or_default())
                .stop(id.as_str(), attempt)
                .unwrap_or(false),
            None => false,
        };
        Ok((id, was, signalled))
    })?;
    let note = match (was, signalled) {
        (Status::Pending, _) => "",
        (_, true) => " (its running attempt was sent SIGTERM)",
        (_, false) => " (its attempt had not started yet)",
    };
    writeln!(std::io::stdout().lock(), "cancelled task {id}{note}")?;
    Ok(())
}
