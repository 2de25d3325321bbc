//! The workflow flags of `carma submit`: dependencies resolved against the published view
//! (`@`, `@~N`, prefixes, array ids), and arrays and sweeps expanded into their tasks.

use std::collections::BTreeMap;

use crate::access::{self, Action, Actor, Policy};
use crate::error::Error;
use crate::id::TaskId;
use crate::journal::{State, Status};
use crate::spec::workflow::{self, ArraySpec, DependencyRequest, Param};
use crate::spec::{ArrayMember, Dependency, DependencyKind, Submission};
use crate::view::lookup::{self, Found, Spooled, Target};

/// The canonical `after` entries (`KIND:ID`) for what the user typed. A dependency must name
/// a task in the queue or one of the submitter's own submissions still in the spool (another
/// user's is not visible until a tick ingests it), and must still be able to be met.
/// Whether the submitter may depend on each task is decided by `access::may` (`DependOn`),
/// here and again by the tick (`tick::admit`).
pub(super) fn resolve_after(
    state: &State,
    spooled: &[Spooled],
    requests: &[DependencyRequest],
    actor: &Actor,
    policy: &Policy,
) -> Result<Vec<String>, Error> {
    let me = actor.uid;
    let mut resolved: BTreeMap<TaskId, DependencyKind> = BTreeMap::new();
    let recent = recent_submissions(state, spooled, me);
    for request in requests {
        let fail = |why: String| Error::BadInput(format!("dependency {}: {why}", request.target));
        let tasks: Vec<(TaskId, Option<Status>)> = match workflow::recent_offset(&request.target) {
            Some(offset) => {
                let offset = offset.map_err(Error::BadInput)?;
                let group = recent.get(offset).ok_or_else(|| match recent.len() {
                    0 => fail("you have no submissions in this queue yet".into()),
                    n => fail(format!("you have {n} submission(s) in this queue; the oldest is @~{}", n - 1)),
                })?;
                group.iter().map(|id| (id.clone(), state.tasks.get(id).map(|t| t.status()))).collect()
            }
            None => named(state, spooled, &request.target, actor, policy).map_err(|e| match e {
                Error::UnknownTask(_) => fail("no such task or array; `carma queue --all` lists them".into()),
                other => other,
            })?,
        };
        for (id, status) in tasks {
            if let Some(status) = status {
                check_can_be_met(&id, request.kind, status).map_err(fail)?;
            }
            if let Some(previous) = resolved.insert(id.clone(), request.kind)
                && previous != request.kind
            {
                return Err(fail(format!(
                    "task {id} is named as {} and as {}",
                    previous.name(),
                    request.kind.name()
                )));
            }
        }
    }
    if resolved.len() > workflow::DEPENDENCIES_MAX {
        return Err(Error::BadInput(format!(
            "{} dependencies; at most {} are allowed",
            resolved.len(),
            workflow::DEPENDENCIES_MAX
        )));
    }
    Ok(resolved.into_iter().map(|(task, kind)| Dependency { kind, task }.label()).collect())
}

/// The tasks an id, prefix or array id names, with their state (`None`: still spooled).
/// Authorization is `access::may`'s; what is left here is visibility: another user's
/// submission still in the spool is not in the queue yet (its file is private to them), so
/// it cannot be named until a tick has taken it in.
fn named(
    state: &State,
    spooled: &[Spooled],
    target: &str,
    actor: &Actor,
    policy: &Policy,
) -> Result<Vec<(TaskId, Option<Status>)>, Error> {
    let found = match lookup::resolve(state, spooled, target)? {
        Target::Task(found) => vec![found],
        Target::Array { members, .. } => members,
    };
    found
        .into_iter()
        .map(|found| {
            let owner_uid = found.owner_uid();
            access::may(actor, Action::DependOn, access::Target::Task { owner_uid }, policy)
                .map_err(|denied| Error::Denied(format!("dependency {target}: task {}: {denied}", found.id())))?;
            Ok(found)
        })
        .map(|found| match found? {
            Found::Task(task) => Ok((task.id.clone(), Some(task.status()))),
            Found::Spooled(s) if s.owner_uid == actor.uid => Ok((s.id, None)),
            Found::Spooled(s) => Err(Error::BadInput(format!(
                "dependency {target}: task {} is another user's submission that no tick has taken in yet; you can name it once `carma queue` shows it",
                s.id
            ))),
        })
        .collect()
}

/// An `afterok` on a task that already failed (or `afternotok` on one that finished) would
/// only cancel the new task at once: refused while the user can still fix the command.
fn check_can_be_met(id: &TaskId, kind: DependencyKind, status: Status) -> Result<(), String> {
    let never = match kind {
        DependencyKind::AfterOk => matches!(status, Status::Failed | Status::Cancelled),
        DependencyKind::AfterNotOk => status == Status::Finished,
        DependencyKind::AfterAny => false,
    };
    if never {
        return Err(format!(
            "task {id} has already {} so {} can never be met; use afterany:{id} or drop it",
            status.as_str().to_lowercase(),
            kind.name()
        ));
    }
    Ok(())
}

/// The submitter's submissions, newest first; an array (or sweep) is one submission.
fn recent_submissions(state: &State, spooled: &[Spooled], me: u32) -> Vec<Vec<TaskId>> {
    lookup::recent_submissions(state, spooled, me).into_iter().map(|(_, ids)| ids).collect()
}

/// What `--array`, `--param` and `--name-template` ask for.
pub(super) struct Expansion {
    pub array: Option<ArraySpec>,
    pub params: Vec<Param>,
    pub name_template: Option<String>,
}

/// The tasks of one submission: the submission itself, or one per array index or parameter
/// combination, sharing `array_id`.
pub(super) fn expand(
    base: &Submission,
    expansion: &Expansion,
    array_id: TaskId,
) -> Result<Vec<Submission>, Error> {
    let bad = |why: String| Error::BadInput(why);
    let indices = expansion.array.as_ref().map(|a| a.indices.clone()).unwrap_or_default();
    let running_max = expansion.array.as_ref().and_then(|a| a.running_max);
    if !indices.is_empty() && !expansion.params.is_empty() {
        return Err(bad("--array with indices and --param cannot be combined; a sweep numbers its tasks itself (cap it with --array %N)".into()));
    }
    if indices.is_empty() && expansion.params.is_empty() {
        if expansion.array.is_some() {
            return Err(bad(
                "--array %N caps a sweep; give --param too, or indices such as --array 0-9%2".into()
            ));
        }
        if expansion.name_template.is_some() {
            return Err(bad("--name-template names the tasks of an --array or --param submission; use --name for one task".into()));
        }
        let mut task = base.clone();
        fill_outputs(&mut task, None);
        return Ok(vec![task]);
    }
    let combos: Vec<Vec<(String, String)>> = if expansion.params.is_empty() {
        indices.iter().map(|_| Vec::new()).collect()
    } else {
        unused_param(base, expansion).map_or(Ok(()), |name| {
            Err(bad(format!("--param {name} is not used: put {{{name}}} in the command or --name-template")))
        })?;
        workflow::expand_params(&expansion.params).map_err(bad)?
    };
    let count = combos.len() as u32;
    let mut tasks = Vec::with_capacity(combos.len());
    for (position, params) in combos.into_iter().enumerate() {
        let index = indices.get(position).copied().unwrap_or(position as u32);
        let mut task = base.clone();
        task.spec.command = task.spec.command.iter().map(|a| workflow::substitute(a, &params)).collect();
        if let Some(template) = &expansion.name_template {
            let mut values = params.clone();
            values.push(("index".into(), index.to_string()));
            task.spec.name = workflow::substitute(template, &values);
        }
        task.spec.array = Some(ArrayMember { id: array_id.clone(), index, count, running_max, params });
        fill_outputs(&mut task, Some((array_id.as_str(), index)));
        tasks.push(task);
    }
    Ok(tasks)
}

/// The output templates' `{array}` and `{index}` (Slurm's `%A` and `%a`) for one task.
fn fill_outputs(task: &mut Submission, array: Option<(&str, u32)>) {
    for template in [&mut task.spec.output, &mut task.spec.error].into_iter().flatten() {
        *template = crate::spec::sbatch::fill_output(template, array);
    }
}

/// A parameter named in no argument and not in the name template (a typo, most likely).
fn unused_param(base: &Submission, expansion: &Expansion) -> Option<String> {
    expansion
        .params
        .iter()
        .find(|p| {
            let in_command = base.spec.command.iter().any(|a| workflow::mentions(a, &p.name));
            let in_name = expansion.name_template.as_deref().is_some_and(|t| workflow::mentions(t, &p.name));
            !in_command && !in_name
        })
        .map(|p| p.name.clone())
}
