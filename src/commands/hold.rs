//! `carma hold ID...` and `carma release ID...`: keep waiting tasks from starting, and let
//! them go again. A held task waits with the reason `Held`; holding a placed or running task
//! is refused (as `scontrol hold` refuses a running job). An array id holds every member
//! still waiting.

use std::io::Write;
use std::time::Duration;

use super::act::{self, Subject};
use crate::access::{Action, Actor};
use crate::cli::HoldArgs;
use crate::error::Error;
use crate::home::Home;
use crate::intake::Verb;
use crate::journal::{Event, Status};
use crate::view;

/// Hold (`hold = true`) or release the tasks named in `args`.
pub(super) fn run(home: &Home, wait: Duration, args: HoldArgs, hold: bool) -> anyhow::Result<()> {
    run_to(home, wait, args, hold, &mut std::io::stdout().lock())
}

/// `run`, writing to `out` (stdout, or `carma mcp`'s answer).
pub(super) fn run_to(
    home: &Home,
    wait: Duration,
    args: HoldArgs,
    hold: bool,
    mut out: &mut dyn Write,
) -> anyhow::Result<()> {
    home.require_initialized()?;
    let state = view::load(home)?;
    let spooled = view::lookup::spooled(home, &state);
    let policy = super::act::policy(home);
    let actor = Actor::current(&policy);
    let action = if hold { Action::Hold } else { Action::Release };
    let verb = if hold { Verb::Hold } else { Verb::Release };
    let word = if hold { "held" } else { "released" };
    let mut subjects = act::subjects(&state, &spooled, &args.ids, actor, action, &policy)?;
    let mut skipped = Vec::new();
    subjects.retain(|s| match applies(s, hold) {
        Ok(()) => true,
        Err(why) => {
            skipped.push((s.id.clone(), s.name.clone(), s.via_array, why));
            false
        }
    });
    for (id, name, via_array, why) in &skipped {
        if !via_array && subjects.is_empty() && skipped.len() == 1 {
            return Err(Error::BadInput(format!("task {id} ({name}) {why}")).into());
        }
        writeln!(out, "task {id} ({name}) {why}; skipped")?;
    }
    if !args.request && super::act::writes_directly(home) {
        let (journaled, spooled): (Vec<&Subject<'_>>, Vec<&Subject<'_>>) =
            subjects.iter().partition(|s| s.task.is_some());
        let events = journaled
            .iter()
            .map(|s| {
                let (task, by_uid) = (s.id.clone(), actor.uid);
                if hold { Event::Held { task, by_uid } } else { Event::Released { task, by_uid } }
            })
            .collect();
        let written = act::write_direct(home, wait, events)?;
        for subject in journaled.iter().filter(|s| written.contains(&s.id)) {
            writeln!(out, "{word} task {} ({})", subject.id, subject.name)?;
        }
        for subject in spooled {
            act::file_request(home, subject, verb, "\n", &mut out)?;
        }
        return Ok(());
    }
    for subject in &subjects {
        act::file_request(home, subject, verb, "\n", &mut out)?;
    }
    Ok(())
}

/// Why the verb does not apply to the task now, if it does not.
fn applies(subject: &Subject<'_>, hold: bool) -> Result<(), String> {
    let Some(task) = subject.task else { return Ok(()) };
    if task.status().is_terminal() {
        return Err(format!("has already ended ({})", task.status().as_str().to_lowercase()));
    }
    if hold && (task.status() != Status::Pending || task.active_attempt().is_some()) {
        return Err(format!(
            "is {}; only waiting tasks can be held (cancel it instead)",
            task.status().as_str().to_lowercase()
        ));
    }
    if hold && task.held() {
        return Err("is held already".into());
    }
    if !hold && !task.held() {
        return Err("is not held".into());
    }
    Ok(())
}
