//! `carma requeue ID...`: stop a running task and queue it again, as `scontrol requeue`. The
//! stopped attempt is neither a failure nor a retry; `events` and `show` say who asked.
//!
//! Like `cancel`: permission is checked here at once (exit 77); root and a personal queue's
//! owner journal a RequeueRequested record and tell the supervisor to stop the job, everyone
//! else files a request the next tick applies. The tick records the attempt's end as Stopped
//! and the task as Requeued.

use std::io::Write;
use std::time::Duration;

use super::act::{self, Subject};
use crate::access::{Action, Actor};
use crate::cli::HoldArgs;
use crate::error::Error;
use crate::home::Home;
use crate::intake::Verb;
use crate::journal::{Event, Status};
use crate::tick::{AttemptRunner, ExecRunner};
use crate::view;

pub(super) fn run(home: &Home, wait: Duration, args: HoldArgs) -> anyhow::Result<()> {
    home.require_initialized()?;
    let state = view::load(home)?;
    let spooled = view::lookup::spooled(home, &state);
    let policy = act::policy(home);
    let actor = Actor::current(&policy);
    let subjects = act::subjects(&state, &spooled, &args.ids, actor, Action::Requeue, &policy)?;
    let mut out = std::io::stdout().lock();
    let mut running = Vec::new();
    for subject in subjects {
        match applies(&subject) {
            Ok(attempt) => running.push((subject, attempt)),
            Err(why) if subject.via_array => {
                writeln!(out, "task {} ({}) {why}; skipped", subject.id, subject.name)?
            }
            Err(why) => {
                return Err(Error::BadInput(format!("task {} ({}) {why}", subject.id, subject.name)).into());
            }
        }
    }
    if args.request || !act::writes_directly(home) {
        for (subject, _) in &running {
            act::file_request(home, subject, Verb::Requeue, "\n", &mut out)?;
        }
        return Ok(());
    }
    let events = running
        .iter()
        .map(|(s, _)| Event::RequeueRequested { task: s.id.clone(), by_uid: actor.uid })
        .collect();
    let written = act::write_direct(home, wait, events)?;
    // Journaled first, so the attempt's end is read as a requeue; then the supervisor stops
    // the job (SIGTERM, grace, SIGKILL) and the next tick queues the task again.
    let mut runner = ExecRunner::new(home.root(), std::env::current_exe().unwrap_or_default());
    for (subject, attempt) in running.iter().filter(|(s, _)| written.contains(&s.id)) {
        let signalled = runner.stop(subject.id.as_str(), *attempt).unwrap_or(false);
        let note = if signalled { "its attempt was sent SIGTERM" } else { "its attempt had ended meanwhile" };
        writeln!(
            out,
            "requeue of task {} ({}): {note}; the next tick queues it again",
            subject.id, subject.name
        )?;
    }
    Ok(())
}

/// The running attempt to stop, or why the task cannot be requeued now.
fn applies(subject: &Subject<'_>) -> Result<u32, String> {
    let Some(task) = subject.task else {
        return Err("is not in the queue yet; nothing to requeue".into());
    };
    match (task.status(), task.active_attempt()) {
        (status, _) if status.is_terminal() => {
            Err(format!("has already ended ({}); submit it again instead", status.as_str().to_lowercase()))
        }
        _ if task.requeue_by().is_some() => Err("is being requeued already".into()),
        (Status::Running, Some(attempt)) => Ok(attempt.number),
        (Status::Placed, _) => {
            Err("is placed but not running yet; requeue it once it runs, or cancel it".into())
        }
        _ => Err("is waiting already; nothing to requeue".into()),
    }
}
