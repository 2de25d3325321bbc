//! Finding a task by what a user types: a full id, or a unique prefix of at least 4
//! characters, among the published tasks and the submissions still in the spool.
//!
//! A task is visible from the moment `carma submit` returns: until a tick ingests it, it is a
//! spool file, shown as `Submitted`. Its owner comes from the file; its name (and its array)
//! only when the reader may read the file (their own submissions), since the file holds
//! environment values.
//!
//! An array's id names every member ([`resolve`]), as `scancel ARRAYID` does.

use crate::error::{Error, Result};
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::{State, Task};

/// Fewest characters of an id prefix.
pub const PREFIX_LEN_MIN: usize = 4;
/// Most candidates an ambiguity error lists.
const AMBIGUOUS_SHOWN_MAX: usize = 5;

/// A submission still in the spool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spooled {
    /// The id it was submitted under (the spool file's name).
    pub id: TaskId,
    /// The submitter: the owner of the spool folder it lies in.
    pub owner_uid: u32,
    /// The task's name, when the reader may read the file.
    pub name: Option<String>,
    /// The array the task belongs to, when the reader may read the file.
    pub array_id: Option<TaskId>,
    /// Its index in that array.
    pub array_index: Option<u32>,
}

/// What a query names.
#[derive(Debug)]
pub enum Found<'a> {
    /// A task in the journal.
    Task(&'a Task),
    /// A submission the tick has not ingested yet.
    Spooled(Spooled),
}

impl Found<'_> {
    /// The task's id.
    pub fn id(&self) -> &TaskId {
        match self {
            Found::Task(task) => &task.id,
            Found::Spooled(spooled) => &spooled.id,
        }
    }

    /// The task's submitter.
    pub fn owner_uid(&self) -> u32 {
        match self {
            Found::Task(task) => task.submitter_uid,
            Found::Spooled(spooled) => spooled.owner_uid,
        }
    }

    /// The task's name; `?` for a spooled one the reader may not read.
    pub fn name(&self) -> &str {
        match self {
            Found::Task(task) => &task.spec.name,
            Found::Spooled(spooled) => spooled.name.as_deref().unwrap_or("?"),
        }
    }
}

/// The submissions waiting in the spool that `state` does not know yet, in id order.
pub fn spooled(home: &Home, state: &State) -> Vec<Spooled> {
    crate::intake::waiting(home, |id| state.knows(id))
        .into_iter()
        .map(|waiting| {
            let spec = waiting
                .text
                .and_then(|text| {
                    crate::spec::spool_form::parse_spool("spool", &text, Default::default()).ok()
                })
                .map(|submission| submission.spec);
            let array = spec.as_ref().and_then(|s| s.array.as_ref());
            let (array_id, array_index) = (array.map(|a| a.id.clone()), array.map(|a| a.index));
            Spooled {
                id: waiting.id,
                owner_uid: waiting.owner_uid,
                name: spec.map(|s| s.name),
                array_id,
                array_index,
            }
        })
        .collect()
}

/// The task `query` names: a full id or a unique prefix.
pub fn find<'a>(state: &'a State, spooled: &[Spooled], query: &str) -> Result<Found<'a>> {
    if let Some(id) = TaskId::parse(query) {
        if let Some(task) = state.tasks.get(&id) {
            return Ok(Found::Task(task));
        }
        return spooled
            .iter()
            .find(|s| s.id == id)
            .map(|s| Found::Spooled(s.clone()))
            .ok_or_else(|| Error::UnknownTask(query.to_string()));
    }
    if query.len() < PREFIX_LEN_MIN {
        return Err(Error::BadInput(format!(
            "task id {query:?} is too short; give the whole id or at least {PREFIX_LEN_MIN} characters of it"
        )));
    }
    let mut matches: Vec<Found<'a>> = state
        .tasks
        .range(TaskId::lower_bound(query)..)
        .take_while(|(id, _)| id.as_str().starts_with(query))
        .map(|(_, task)| Found::Task(task))
        .collect();
    matches.extend(spooled.iter().filter(|s| s.id.as_str().starts_with(query)).cloned().map(Found::Spooled));
    match matches.len() {
        0 => Err(Error::UnknownTask(query.to_string())),
        1 => Ok(matches.remove(0)),
        count => {
            let shown: Vec<String> = matches
                .iter()
                .take(AMBIGUOUS_SHOWN_MAX)
                .map(|m| format!("{} ({})", m.id(), crate::text::escape(m.name())))
                .collect();
            let more = if count > AMBIGUOUS_SHOWN_MAX { ", ..." } else { "" };
            Err(Error::BadInput(format!(
                "task id prefix {query} matches {count} tasks: {}{more}; give more characters",
                shown.join(", ")
            )))
        }
    }
}

/// What a query names once arrays are considered: one task, or every member of an array.
#[derive(Debug)]
pub enum Target<'a> {
    /// One task.
    Task(Found<'a>),
    /// Every member of an array, named by the array's id.
    Array {
        /// The array's id.
        id: TaskId,
        /// Its members, journaled and spooled.
        members: Vec<Found<'a>>,
    },
}

/// The task or array `query` names: a full id or a unique prefix of a task's or an array's
/// id, `ARRAY_INDEX` for one member of an array (Slurm's `1234_7`), or `@` / `@~N` for the
/// reader's latest submission / the one N before it (an array counts as one).
pub fn resolve<'a>(state: &'a State, spooled: &[Spooled], query: &str) -> Result<Target<'a>> {
    if let Some(offset) = crate::spec::workflow::recent_offset(query) {
        return recent(state, spooled, offset.map_err(Error::BadInput)?, crate::access::uid::effective());
    }
    if let Some((array, indices)) = split_brackets(query) {
        return some_members(state, spooled, query, array, indices.map_err(Error::BadInput)?);
    }
    if let Some((array, index)) = split_index(query) {
        return member(state, spooled, query, array, index);
    }
    let arrays = arrays_matching(state, spooled, query);
    match (find(state, spooled, query), arrays.len()) {
        (Ok(found), 0) => Ok(Target::Task(found)),
        (Err(Error::UnknownTask(_)), 1) => {
            let id = arrays.into_iter().next().expect("one array");
            let members = array_members(state, spooled, &id);
            Ok(Target::Array { id, members })
        }
        (Err(e), 0) => Err(e),
        // The prefix `queue` shows for a folded array names the array and its members: the
        // array is meant when every task it matches is one of them.
        (_, 1) if only_members(state, spooled, query, &arrays[0]) => {
            let id = arrays.into_iter().next().expect("one array");
            let members = array_members(state, spooled, &id);
            Ok(Target::Array { id, members })
        }
        (found, count) => {
            let tasks = match found {
                Ok(_) => 1,
                Err(_) => prefix_matches(state, spooled, query),
            };
            Err(Error::BadInput(format!(
                "id prefix {query} matches {tasks} task(s) and {count} array(s); give more characters"
            )))
        }
    }
}

/// The indices an array form names (`None`: every member), or why the form is wrong.
type Indices = Result<Option<Vec<u32>>, String>;

/// The array forms `queue` and squeue print, split into the array and the indices they name
/// (`None`: all of them): `ID[COUNT]` and `ID[COUNT%N]` (queue's folded array, all of it),
/// `ID_*` (queue's `index` column), and Slurm's `ID_[1-3]`, `ID_[1,4%2]`, `ID[1-3]`.
fn split_brackets(query: &str) -> Option<(&str, Indices)> {
    if let Some(array) = query.strip_suffix("_*") {
        return Some((array, Ok(None)));
    }
    let (head, inside) = query.strip_suffix(']')?.split_once('[')?;
    let array = match head.strip_suffix('_') {
        Some(array) => array,
        // queue's label: a count (and a cap), not indices.
        None if !inside.contains([',', '-', ':']) => return Some((head, Ok(None))),
        None => head,
    };
    let indices = crate::spec::workflow::parse_array(inside)
        .map(|spec| Some(spec.indices))
        .map_err(|why| format!("{query}: {why}"));
    Some((array, indices))
}

/// The members of the array `array` names whose index is in `indices` (every one for `None`).
fn some_members<'a>(
    state: &'a State,
    spooled: &[Spooled],
    query: &str,
    array: &str,
    indices: Option<Vec<u32>>,
) -> Result<Target<'a>> {
    let id = match resolve(state, spooled, array)? {
        Target::Array { id, .. } => id,
        Target::Task(found) => {
            return Err(Error::BadInput(format!(
                "{query}: {} is a task, not an array; ID[...] names members of an array",
                found.id()
            )));
        }
    };
    let index_of = |found: &Found<'_>| match found {
        Found::Task(task) => task.spec.array.as_ref().map(|a| a.index),
        Found::Spooled(s) => s.array_index,
    };
    let mut members = array_members(state, spooled, &id);
    if let Some(indices) = &indices {
        members.retain(|m| index_of(m).is_some_and(|i| indices.contains(&i)));
        if members.is_empty() {
            return Err(Error::BadInput(format!(
                "{query}: array {id} has none of these indices; `carma queue -r` lists them"
            )));
        }
    }
    Ok(Target::Array { id, members })
}

/// `ID_INDEX` split at its last `_`, when what follows is a number.
fn split_index(query: &str) -> Option<(&str, u32)> {
    let (array, index) = query.rsplit_once('_')?;
    Some((array, index.parse().ok()?))
}

/// Member `index` of the array `array` names (its id or a unique prefix).
fn member<'a>(
    state: &'a State,
    spooled: &[Spooled],
    query: &str,
    array: &str,
    index: u32,
) -> Result<Target<'a>> {
    let id = match resolve(state, spooled, array)? {
        Target::Array { id, .. } => id,
        Target::Task(found) => {
            return Err(Error::BadInput(format!(
                "{query}: {} is a task, not an array; ID_INDEX names a member of an array",
                found.id()
            )));
        }
    };
    let members = array_members(state, spooled, &id);
    let count = members.len();
    let index_of = |found: &Found<'_>| match found {
        Found::Task(task) => task.spec.array.as_ref().map(|a| a.index),
        Found::Spooled(s) => s.array_index,
    };
    let indices: Vec<String> = members.iter().filter_map(index_of).map(|i| i.to_string()).collect();
    members.into_iter().find(|m| index_of(m) == Some(index)).map(Target::Task).ok_or_else(|| {
        Error::BadInput(format!(
            "array {id} has no index {index} (its {count} task(s): {}); `carma queue -r` lists them",
            indices.join(",")
        ))
    })
}

/// The reader's submission `offset` back (0: the latest), as a task or an array.
fn recent<'a>(state: &'a State, spooled: &[Spooled], offset: usize, me: u32) -> Result<Target<'a>> {
    let groups = recent_submissions(state, spooled, me);
    let Some((key, ids)) = groups.get(offset) else {
        return Err(Error::BadInput(match groups.len() {
            0 => "@: you have no submissions in this queue yet".to_string(),
            n => format!("@~{offset}: you have {n} submission(s) in this queue; the oldest is @~{}", n - 1),
        }));
    };
    if ids.len() == 1 && ids[0] == *key {
        return find(state, spooled, key.as_str()).map(Target::Task);
    }
    Ok(Target::Array { id: key.clone(), members: array_members(state, spooled, key) })
}

/// `me`'s submissions, newest first, each keyed by its array's id (or its own): an array or
/// sweep is one submission.
pub fn recent_submissions(state: &State, spooled: &[Spooled], me: u32) -> Vec<(TaskId, Vec<TaskId>)> {
    let mut groups: std::collections::BTreeMap<TaskId, Vec<TaskId>> = Default::default();
    let journaled = state
        .tasks
        .values()
        .filter(|t| t.submitter_uid == me)
        .map(|t| (t.id.clone(), t.spec.array.as_ref().map(|a| a.id.clone())));
    let in_spool = spooled.iter().filter(|s| s.owner_uid == me).map(|s| (s.id.clone(), s.array_id.clone()));
    for (id, array) in journaled.chain(in_spool) {
        groups.entry(array.unwrap_or_else(|| id.clone())).or_default().push(id);
    }
    let mut ordered: Vec<(TaskId, Vec<TaskId>)> = groups.into_iter().collect();
    for (_, group) in &mut ordered {
        group.sort();
    }
    ordered.sort_by(|a, b| b.1.last().cmp(&a.1.last()));
    ordered
}

/// Whether every task whose id starts with `query` is a member of array `array`.
fn only_members(state: &State, spooled: &[Spooled], query: &str, array: &TaskId) -> bool {
    if TaskId::parse(query).is_none() && query.len() < PREFIX_LEN_MIN {
        return false;
    }
    let journaled = state
        .tasks
        .range(TaskId::lower_bound(query)..)
        .take_while(|(id, _)| id.as_str().starts_with(query))
        .all(|(_, t)| t.spec.array.as_ref().is_some_and(|a| &a.id == array));
    journaled
        && spooled
            .iter()
            .filter(|s| s.id.as_str().starts_with(query))
            .all(|s| s.array_id.as_ref() == Some(array))
}

/// How many tasks' ids start with `query`.
fn prefix_matches(state: &State, spooled: &[Spooled], query: &str) -> usize {
    let journaled = state
        .tasks
        .range(TaskId::lower_bound(query)..)
        .take_while(|(id, _)| id.as_str().starts_with(query))
        .count();
    journaled + spooled.iter().filter(|s| s.id.as_str().starts_with(query)).count()
}

/// Ids of the arrays whose id starts with `query` (or is it).
fn arrays_matching(state: &State, spooled: &[Spooled], query: &str) -> Vec<TaskId> {
    if TaskId::parse(query).is_none() && query.len() < PREFIX_LEN_MIN {
        return Vec::new();
    }
    let mut ids: Vec<TaskId> = state
        .tasks
        .values()
        .filter_map(|t| t.spec.array.as_ref().map(|a| &a.id))
        .chain(spooled.iter().filter_map(|s| s.array_id.as_ref()))
        .filter(|id| id.as_str().starts_with(query))
        .cloned()
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Every known member of array `id`, in id order: journaled tasks, then spooled ones.
pub fn array_members<'a>(state: &'a State, spooled: &[Spooled], id: &TaskId) -> Vec<Found<'a>> {
    let in_array = |t: &&Task| t.spec.array.as_ref().is_some_and(|a| &a.id == id);
    let mut members: Vec<Found<'a>> = state.tasks.values().filter(in_array).map(Found::Task).collect();
    members.extend(spooled.iter().filter(|s| s.array_id.as_ref() == Some(id)).cloned().map(Found::Spooled));
    members
}
