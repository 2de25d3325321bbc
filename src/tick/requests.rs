//! Requests from users who cannot write the journal: `spool/<id>.<verb>` files (cancel,
//! hold, release, update, requeue) become the records the verbs write directly for root.
//!
//! A request is honoured for root and the task's submitter (`access::may`), checked again
//! here because the file is a user's; anything else becomes a Rejected record naming no task.
//! A request that no longer applies (cancel of an ended task, release of a task that is not
//! held) is consumed without a record.

use std::collections::BTreeMap;

use crate::access::{self, Action, Actor, Target};
use crate::config::Config;
use crate::id::TaskId;
use crate::intake::Verb;
use crate::journal::{Event, State, Status, Task};
use crate::spec::Limits;
use crate::spec::workflow::Changes;

/// A request as `intake` took it: the verb and task from its name, the requester from the
/// folder it was in (checked on its descriptor), and its body.
pub(super) struct Filed<'a> {
    pub verb: Verb,
    pub id: Option<TaskId>,
    pub requester: u32,
    pub body: &'a str,
}

/// The record a request becomes: `Ok(None)` when there is nothing left to do, `Err` with the
/// reason when it is refused. `batch` maps tasks ingested in this tick to their submitters.
pub(super) fn request(
    state: &State,
    batch: &BTreeMap<TaskId, u32>,
    filed: &Filed<'_>,
    limits: Limits,
    config: &Config,
    to_stop: &mut Vec<(TaskId, u32)>,
) -> Result<Option<Event>, String> {
    let Filed { verb, requester, body, .. } = *filed;
    let name = verb.suffix();
    let Some(id) = filed.id.clone() else {
        return Err(format!("{name} request names no task id"));
    };
    let task = state.tasks.get(&id);
    let Some(submitter) = task.map(|t| t.submitter_uid).or_else(|| batch.get(&id).copied()) else {
        return Err(format!("{name} request for unknown task {id}"));
    };
    let action = match verb {
        Verb::Cancel => Action::Cancel,
        Verb::Hold => Action::Hold,
        Verb::Release => Action::Release,
        Verb::Update => Action::Update,
        Verb::Requeue => Action::Requeue,
    };
    let actor = Actor::lookup(requester, &config.access);
    if let Err(denied) = access::may(&actor, action, Target::Task { owner_uid: submitter }, &config.access) {
        return Err(format!("{name} request for task {id}: {denied}"));
    }
    if task.is_some_and(|t| t.status().is_terminal()) {
        return Ok(None);
    }
    if let Some(slurm) = task.and_then(|t| t.slurm.as_ref()) {
        let job = slurm.job_id;
        return Err(format!(
            "{name} request for task {id} refused: it is Slurm job {job}; use scancel {job}"
        ));
    }
    let shown = id.to_string();
    let asked = Asked { verb, id, task, actor, body };
    verb_event(asked, limits, config, to_stop)
        .map_err(|why| format!("{name} request for task {shown}: {why}"))
}

/// A permitted request on a task that has not ended (`task` is `None` while it is only in
/// this tick's batch).
struct Asked<'a> {
    verb: Verb,
    id: TaskId,
    task: Option<&'a Task>,
    actor: Actor,
    body: &'a str,
}

/// The record a permitted request becomes, or why it is refused.
fn verb_event(
    asked: Asked<'_>,
    limits: Limits,
    config: &Config,
    to_stop: &mut Vec<(TaskId, u32)>,
) -> Result<Option<Event>, String> {
    let Asked { verb, id, task, actor, body } = asked;
    let by_uid = actor.uid;
    let requester = actor.uid;
    match verb {
        Verb::Cancel => {
            if let Some(attempt) = task.and_then(|t| t.active_attempt()) {
                to_stop.push((id.clone(), attempt.number));
            }
            let reason = format!("cancelled by {} (request)", crate::access::users::display(requester));
            Ok(Some(Event::Cancelled { task: id, by_uid, reason }))
        }
        Verb::Hold => match task.and_then(not_waiting) {
            Some(why) => Err(why),
            None if task.is_some_and(|t| t.held()) => Ok(None),
            None => Ok(Some(Event::Held { task: id, by_uid })),
        },
        Verb::Requeue => {
            let attempt = task.and_then(|t| t.active_attempt()).map(|a| a.number);
            let Some(attempt) = attempt.filter(|_| task.is_some_and(|t| t.requeue_by().is_none())) else {
                // Waiting already, or a requeue is under way: nothing to do.
                return Ok(None);
            };
            to_stop.push((id.clone(), attempt));
            Ok(Some(Event::RequeueRequested { task: id, by_uid }))
        }
        Verb::Release if task.is_some_and(|t| !t.held()) => Ok(None),
        Verb::Release => Ok(Some(Event::Released { task: id, by_uid })),
        Verb::Update => {
            let c = task
                .map_or(Ok(()), |t| updatable(t, &Changes::default()))
                .and_then(|()| Changes::parse(body, limits))
                .and_then(|changes| check_update(&actor, task, changes, config))?;
            Ok(Some(Event::Updated {
                task: id,
                by_uid,
                priority: c.priority,
                nice: c.nice,
                memory_mib: c.memory_mib,
                time_limit_ms: c.time_limit_ms,
                gpus: c.gpus,
            }))
        }
    }
}

/// Why a task cannot be held or updated now: it is placed or running.
pub(super) fn not_waiting(task: &Task) -> Option<String> {
    (task.status() != Status::Pending || task.active_attempt().is_some()).then(|| {
        format!("it is {}; only waiting tasks can be changed", task.status().as_str().to_lowercase())
    })
}

/// Whether `changes` may be applied to `task` as it is: it must wait, and its memory must not
/// come from a model-summary estimate (which placement prefers over a declared figure).
pub fn updatable(task: &Task, changes: &Changes) -> Result<(), String> {
    if let Some(why) = not_waiting(task) {
        return Err(why);
    }
    if changes.memory_mib.is_some()
        && let Some(estimate) = &task.estimate
    {
        return Err(format!(
            "its memory comes from its model summary's estimate ({:.1} GiB, {}); resubmit it to change that",
            estimate.upper_mib as f64 / 1024.0,
            estimate.method
        ));
    }
    // A shorter limit must still leave room for the task's warning signal, as at submit.
    if let (Some(limit_ms), Some(signal)) = (changes.time_limit_ms, &task.spec.signal) {
        crate::spec::timing::check_signal_fits(signal, Some(limit_ms))?;
    }
    Ok(())
}

/// The priority cap and the task's own state, for an update by `requester`.
fn check_update(
    actor: &Actor,
    task: Option<&Task>,
    changes: Changes,
    config: &Config,
) -> Result<Changes, String> {
    if let Some(task) = task {
        updatable(task, &changes)?;
    }
    // Only what changes is checked: a priority root gave the task stays when its owner
    // changes something else.
    let priority = changes.priority.unwrap_or(i32::MIN);
    let nice = changes.nice.unwrap_or(0);
    if let Some(refusal) = super::admit::priority_refusal(actor, priority, nice, config) {
        return Err(refusal);
    }
    Ok(changes)
}
