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
    run_to(home, wait, args, &mut std::io::stdout().lock())
}

/// `run`, writing to `out` (stdout, or `carma mcp`'s answer).
pub(super) fn run_to(
    home: &Home,
    wait: Duration,
    args: CancelArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    home.require_initialized()?;
    let state = view::load(home)?;
    let spooled = lookup::spooled(home, &state);
    let policy = super::act::policy(home);
    let actor = Actor::current(&policy);
    let Some(ids) = chosen(&state, &spooled, &args)? else {
        writeln!(out, "no waiting or running task matches; nothing to cancel")?;
        return Ok(());
    };
    // Tasks chosen by a filter that ended meanwhile are skipped, as an array's members are.
    let filtered = filtered(&args);
    let mut targets = Vec::with_capacity(ids.len());
    // An array id names every member; members that already ended are skipped.
    for subject in super::act::subjects(&state, &spooled, &ids, actor, Action::Cancel, &policy)? {
        if let Some(task) = subject.task
            && task.status().is_terminal()
        {
            if subject.via_array || filtered {
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

/// The ids to cancel: those given (less `ID`, `carma queue`'s header, which no task id can
/// be: a prefix has at least 4 characters), kept or chosen by scancel's filters (`--me`,
/// `--user`, `--state`, `--name`); `None` when the filters keep no task.
fn chosen(
    state: &crate::journal::State,
    spooled: &[lookup::Spooled],
    args: &CancelArgs,
) -> anyhow::Result<Option<Vec<String>>> {
    let ids: Vec<String> = args.ids.iter().filter(|id| id.as_str() != "ID").cloned().collect();
    if !filtered(args) {
        if ids.is_empty() {
            return Err(Error::BadInput(
                "nothing to cancel: give task ids, or choose tasks with --me, --user, --state or --name"
                    .into(),
            )
            .into());
        }
        return Ok(Some(ids));
    }
    let filter = super::select::Filter::new(
        false,
        args.me,
        args.user.as_deref(),
        args.state.as_deref(),
        args.name.clone(),
    )?;
    let mut kept: Vec<String> = super::queue::matching(state, spooled.to_vec(), &filter)
        .into_iter()
        .map(|id| id.to_string())
        .collect();
    if !ids.is_empty() {
        // Ids and filters: the named tasks (an array: its members) that the filters keep.
        let mut named = Vec::new();
        for query in &ids {
            match lookup::resolve(state, spooled, query)? {
                lookup::Target::Task(found) => named.push(found.id().to_string()),
                lookup::Target::Array { members, .. } => {
                    named.extend(members.iter().map(|m| m.id().to_string()))
                }
            }
        }
        kept.retain(|id| named.contains(id));
    }
    Ok((!kept.is_empty()).then_some(kept))
}

/// Whether scancel's filters choose the tasks.
fn filtered(args: &CancelArgs) -> bool {
    args.me || args.user.is_some() || args.state.is_some() || args.name.is_some()
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
