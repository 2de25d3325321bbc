//! `carma cancel ID...`: stop tasks that have not finished.
//!
//! Permission is checked here, against the published view, so a refusal is immediate (exit
//! 77) rather than a record some tick writes later; the tick checks again when it applies a
//! request, because the request file is a user's. Root and the owner of a personal queue
//! write the journal at once; everyone else files a request the next tick applies.

use std::io::Write;
use std::time::Duration;

use crate::access::users;
use crate::access::{Action, Actor};
use crate::cli::CancelArgs;
use crate::clock::{Clock, SystemClock};
use crate::error::Error;
use crate::home::Home;
use crate::id::TaskId;
use crate::intake::{self, Filed, Verb};
use crate::journal::{Event, Record};
use crate::session;
use crate::tick::{AttemptRunner, ExecRunner};
use crate::view::{self, lookup};

/// A task the user may cancel, as found in the view or the spool.
struct Target {
    id: TaskId,
    name: String,
    /// Still a spool file: only a request can reach it.
    spooled: bool,
}

pub(super) fn run(home: &Home, wait: Duration, args: CancelArgs) -> anyhow::Result<()> {
    home.require_initialized()?;
    let state = view::load(home)?;
    let spooled = lookup::spooled(home, &state);
    let policy = super::act::policy(home);
    let actor = Actor::current(&policy);
    let mut targets = Vec::with_capacity(args.ids.len());
    // An array id names every member; members that already ended are skipped.
    for subject in super::act::subjects(&state, &spooled, &args.ids, actor, Action::Cancel, &policy)? {
        if let Some(task) = subject.task
            && task.status().is_terminal()
        {
            if subject.via_array {
                continue;
            }
            return Err(Error::BadInput(format!(
                "task {} ({}) is already {}; nothing to cancel",
                subject.id,
                subject.name,
                task.status().as_str().to_lowercase()
            ))
            .into());
        }
        if let Some(slurm) = subject.task.and_then(|task| task.slurm.as_ref()) {
            return Err(Error::BadInput(format!(
                "task {} ({}) is Slurm job {}; cancel it with `scancel {}`",
                subject.id, subject.name, slurm.job_id, slurm.job_id
            ))
            .into());
        }
        targets.push(Target { id: subject.id, name: subject.name, spooled: subject.task.is_none() });
    }
    let mut out = std::io::stdout().lock();
    let direct = !args.request && super::act::writes_directly(home);
    for target in targets {
        if direct && !target.spooled {
            let note = cancel_in_journal(home, wait, actor, &target.id)?;
            writeln!(out, "cancelled task {} ({}){note}", target.id, target.name)?;
            continue;
        }
        match intake::request(home, &target.id, Verb::Cancel, "cancel\n")? {
            Filed::Filed => writeln!(
                out,
                "cancel of task {} ({}) requested; the next tick applies it",
                target.id, target.name
            )?,
            Filed::AlreadyWaiting => writeln!(
                out,
                "a cancel of task {} ({}) is already waiting for the next tick",
                target.id, target.name
            )?,
        }
    }
    Ok(())
}

/// Journals the cancel, then tells the supervisor to stop the job. Returns a note for the
/// user.
fn cancel_in_journal(home: &Home, wait: Duration, actor: Actor, id: &TaskId) -> anyhow::Result<&'static str> {
    let (active, terminal) = session::write(home, wait, |journal, state| {
        let Some(task) = state.tasks.get(id) else { return Err(Error::UnknownTask(id.to_string())) };
        if task.status().is_terminal() {
            return Ok((None, true));
        }
        let active = task.active_attempt().map(|a| a.number);
        let reason = format!("cancelled by {}", users::display(actor.uid));
        let record = Record {
            time_ms: SystemClock.now_ms(),
            event: Event::Cancelled { task: id.clone(), by_uid: actor.uid, reason },
        };
        journal.append(&[record], state)?;
        // Under `carma.lock`, like every open of root's vault.
        intake::Private::new(home).forget(std::slice::from_ref(id));
        Ok((active, false))
    })?;
    if terminal {
        return Ok(" (it had just ended)");
    }
    // Journaled first, so no tick relaunches it; then the supervisor is told to stop the
    // job. The next tick records the attempt's end as Stopped.
    let signalled = match active {
        Some(attempt) => ExecRunner::new(home.root(), std::env::current_exe().unwrap_or_default())
            .stop(id.as_str(), attempt)
            .unwrap_or(false),
        None => false,
    };
    Ok(match (active, signalled) {
        (None, _) => "",
        (Some(_), true) => " (its running attempt was sent SIGTERM)",
        (Some(_), false) => " (its attempt had not started yet)",
    })
}
