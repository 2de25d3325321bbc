//! `carma update ID... --priority N --nice N --gpu-mem SIZE --time-limit D --gpus N`: change
//! waiting tasks, as `scontrol update` does. The change is journaled (Updated); a placed or
//! running task is refused with its state, and so is a memory change for a task whose memory
//! comes from its model summary's estimate. An array id updates every member still waiting.

use std::io::Write;
use std::time::Duration;

use super::act;
use crate::access::{Action, Actor};
use crate::cli::UpdateArgs;
use crate::error::Error;
use crate::home::Home;
use crate::intake::Verb;
use crate::inventory::Inventory;
use crate::journal::Event;
use crate::spec::workflow::Changes;
use crate::view;

pub(super) fn run(home: &Home, wait: Duration, args: UpdateArgs) -> anyhow::Result<()> {
    home.require_initialized()?;
    let changes = changes(home, &args)?;
    let state = view::load(home)?;
    let spooled = view::lookup::spooled(home, &state);
    let policy = super::act::policy(home);
    let actor = Actor::current(&policy);
    let mut subjects = act::subjects(&state, &spooled, &args.ids, actor, Action::Update, &policy)?;
    let mut out = std::io::stdout().lock();
    let single = subjects.len() == 1 && !subjects[0].via_array;
    let mut kept = Vec::with_capacity(subjects.len());
    for subject in subjects.drain(..) {
        let refusal = subject.task.and_then(|task| crate::tick::updatable(task, &changes).err());
        match refusal {
            None => kept.push(subject),
            Some(why) if single => {
                return Err(Error::BadInput(format!(
                    "cannot update task {} ({}): {why}",
                    subject.id, subject.name
                ))
                .into());
            }
            Some(why) => writeln!(out, "task {} ({}) not updated: {why}", subject.id, subject.name)?,
        }
    }
    if !args.request && super::act::writes_directly(home) {
        let (journaled, spooled): (Vec<_>, Vec<_>) = kept.iter().partition(|s| s.task.is_some());
        let events = journaled
            .iter()
            .map(|s| Event::Updated {
                task: s.id.clone(),
                by_uid: actor.uid,
                priority: changes.priority,
                nice: changes.nice,
                memory_mib: changes.memory_mib,
                time_limit_ms: changes.time_limit_ms,
                gpus: changes.gpus,
            })
            .collect();
        let written = act::write_direct(home, wait, events)?;
        for subject in journaled.iter().filter(|s| written.contains(&s.id)) {
            writeln!(out, "updated task {} ({})", subject.id, subject.name)?;
        }
        return file_requests(home, &spooled, &changes, &mut out);
    }
    let kept: Vec<&act::Subject<'_>> = kept.iter().collect();
    file_requests(home, &kept, &changes, &mut out)
}

/// Files an update request per subject. A request already waiting for the next tick is not
/// replaced (the tick may be reading it): the new one is refused, non-zero, instead of being
/// dropped with a success.
fn file_requests(
    home: &Home,
    subjects: &[&act::Subject<'_>],
    changes: &Changes,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut waiting = Vec::new();
    for subject in subjects {
        match crate::intake::request(home, &subject.id, Verb::Update, &changes.to_toml())? {
            crate::intake::Filed::Filed => {
                writeln!(
                    out,
                    "update of task {} ({}) requested; the next tick applies it",
                    subject.id, subject.name
                )?;
            }
            crate::intake::Filed::AlreadyWaiting => {
                waiting.push(format!("{} ({})", subject.id, subject.name))
            }
        }
    }
    match waiting.len() {
        0 => Ok(()),
        1 => Err(Error::OverLimit(format!(
            "an earlier update of task {} is still waiting for the next tick; this one was not filed: run it again once `carma show` has the first",
            waiting[0]
        ))
        .into()),
        n => Err(Error::OverLimit(format!(
            "earlier updates of {n} tasks are still waiting for the next tick ({}); these were not filed: run it again once `carma show` has the first",
            waiting.join(", ")
        ))
        .into()),
    }
}

/// The flags as checked changes: the same bounds as a spec, this machine's GPUs, the queue's
/// longest time limit and (for ordinary users) its priority cap.
fn changes(home: &Home, args: &UpdateArgs) -> Result<Changes, Error> {
    let whole = |flag: &str, text: &Option<String>| -> Result<Option<i64>, Error> {
        text.as_deref()
            .map(|t| {
                t.trim().parse::<i64>().map_err(|_| {
                    Error::BadInput(format!("--{flag} {t:?} is not a whole number; give e.g. --{flag} 2"))
                })
            })
            .transpose()
    };
    let bad = Error::BadInput;
    let priority = whole("priority", &args.priority)?
        .map(|p| crate::spec::workflow::validate_priority("priority", p))
        .transpose()
        .map_err(bad)?;
    let nice = whole("nice", &args.nice)?
        .map(|n| crate::spec::workflow::validate_priority("nice", n))
        .transpose()
        .map_err(bad)?;
    let gpus = whole("gpus", &args.gpus)?
        .map(|g| u32::try_from(g).map_err(|_| format!("gpus = {g}: a task needs at least 1 GPU")))
        .transpose()
        .map_err(bad)?;
    let mem = super::submit::checked_mem(&args.mem)?;
    let memory_mib = mem.as_deref().map(crate::spec::parse_memory_mib).transpose().map_err(bad)?;
    let time_limit_ms =
        args.time_limit.as_deref().map(crate::spec::parse_time_limit_ms).transpose().map_err(bad)?;
    let changes = Changes { priority, nice, memory_mib, time_limit_ms, gpus };
    let config = crate::config::Config::load(home).unwrap_or_default();
    let mut limits = Inventory::load(home).map(|inv| inv.limits()).unwrap_or_default();
    limits.time_limit_max_ms = config.limits.time_limit_max_ms;
    changes.check(limits).map_err(bad)?;
    let actor = crate::access::Actor::current(&config.access);
    if let Some(refusal) = crate::tick::priority_refusal(
        &actor,
        changes.priority.unwrap_or(i32::MIN),
        changes.nice.unwrap_or(0),
        &config,
    ) {
        return Err(Error::BadInput(refusal));
    }
    Ok(changes)
}
