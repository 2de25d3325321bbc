//! `carma cancel ID`: stop a task that has not finished.

use std::io::Write;
use std::time::Duration;

use crate::cli::CancelArgs;
use crate::clock::{Clock, SystemClock};
use crate::error::Error;
use crate::home::{Home, is_root};
use crate::journal::{Event, Record, Status, session};

pub fn run(home: &Home, wait: Duration, args: CancelArgs) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let (id, was) = session::write(home, wait, |journal, state| {
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
        let record = Record {
            time_ms: SystemClock.now_ms(),
            event: Event::Cancelled {
                task: id.clone(),
                by_uid: uid,
                reason: format!("cancelled by uid {uid}"),
            },
        };
        journal.append(&[record], state)?;
        Ok((id, was))
    })?;
    let note = if was == Status::Pending { "" } else { " (its running attempt will be stopped)" };
    writeln!(std::io::stdout().lock(), "cancelled task {id}{note}")?;
    Ok(())
}
