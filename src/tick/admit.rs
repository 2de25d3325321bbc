//! Admission: the queue's own rules for a submission that is a valid spec, applied at ingest
//! because the spool file is the user's and `carma submit`'s checks can be skipped.
//!
//! - `--priority` above `[limits] user-priority-max`, and a negative `--nice`, are the
//!   administrator's: root's, or a personal queue's owner's (the tick's own user).
//! - A dependency cycle (possible only with hand-made spool files: `carma submit` can name
//!   only tasks that exist already) is refused.
//! - Array membership is ownership: a spec may only *ask* to join the array its submitter
//!   started. The array's owner is the submitter of its first journaled member; a spec from
//!   anyone else naming that array is refused (`access::may`, `JoinArray`), so no user can
//!   take another's slots or hide from their `carma cancel <array>`.
//! - The queue's defaults fill what the task left open: `[limits] time-limit-default` (or
//!   else `time-limit-max`, so no limit asked is never more than the longest one allowed;
//!   `spec::time_limit`), `[notify] default-command` and `mail-submitter`. The journaled spec
//!   is what will happen, with where its time limit came from.

use std::collections::{BTreeMap, BTreeSet};

use crate::access::{self, Action, Actor, Target};
use crate::config::Config;
use crate::id::TaskId;
use crate::journal::State;
use crate::spec::TaskSpec;

/// Why `actor` may not set these priorities, if they may not: only administrators
/// (`access::Policy::is_admin`) may go above the users' cap.
pub fn priority_refusal(actor: &Actor, priority: i32, nice: i32, config: &Config) -> Option<String> {
    let refusal = priority_refusal_for_user(priority, nice, config)?;
    access::may(actor, Action::RaisePriority, Target::Queue, &config.access).err().map(|_| refusal)
}

/// Why an ordinary user may not set these priorities, if they may not: above
/// `[limits] user-priority-max`, or a negative nice.
pub fn priority_refusal_for_user(priority: i32, nice: i32, config: &Config) -> Option<String> {
    let max = config.limits.user_priority_max;
    if priority > max {
        return Some(format!(
            "priority {priority} is above what users may set on this queue ({max}); use --priority {max} or less, or ask the administrator"
        ));
    }
    if nice < 0 {
        return Some(format!("nice {nice} is below 0, which only root may set; use --nice 0 or more"));
    }
    None
}

/// Tasks ingested earlier in the same tick: submitter, dependencies and array.
pub(super) type Batch = BTreeMap<TaskId, (u32, Vec<TaskId>, Option<TaskId>)>;

/// Checks a submission against the queue's rules and fills in its defaults. `batch` holds the
/// tasks ingested earlier in the same tick (their dependencies count for cycles).
pub(super) fn admit(
    id: &TaskId,
    uid: u32,
    spec: &mut TaskSpec,
    state: &State,
    batch: &Batch,
    config: &Config,
) -> Result<(), String> {
    let actor = Actor::lookup(uid, &config.access);
    if let Some(refusal) = priority_refusal(&actor, spec.priority, spec.nice, config) {
        return Err(format!("task {id}: {refusal}"));
    }
    if let Some(array) = &spec.array
        && let Some(owner_uid) = array_owner(&array.id, state, batch)
        && let Err(denied) =
            access::may(&actor, Action::JoinArray, Target::Array { owner_uid }, &config.access)
    {
        return Err(format!("task {id}: array {}: {denied}", array.id));
    }
    if spec.array.as_ref().is_some_and(|a| state.tasks.contains_key(&a.id) || batch.contains_key(&a.id)) {
        return Err(format!("task {id}: its array id is a task's id; submit with `carma submit --array`"));
    }
    for dependency in &spec.dependencies {
        let owner_uid = state.tasks.get(&dependency.task).map(|t| t.submitter_uid);
        if let Some(owner_uid) = owner_uid
            && let Err(denied) =
                access::may(&actor, Action::DependOn, Target::Task { owner_uid }, &config.access)
        {
            return Err(format!("task {id}: dependency {}: {denied}", dependency.task));
        }
    }
    if let Some(through) = cycle_through(id, spec, state, batch) {
        return Err(format!(
            "task {id}: its dependencies lead back to it through task {through}; remove the cycle"
        ));
    }
    // Asking for no limit gets the queue's default, or else its maximum: never more.
    let limits = &config.limits;
    let (limit_ms, source) = crate::spec::time_limit::effective(
        spec.time_limit_ms,
        limits.time_limit_default_ms,
        limits.time_limit_max_ms,
    );
    spec.time_limit_ms = limit_ms;
    spec.time_limit_source = Some(source);
    if spec.notify.is_empty() {
        spec.notify = config.notify.default_command.clone();
    }
    if spec.mail_user.is_none() && config.notify.mail_submitter {
        spec.mail_user = crate::access::users::entry(uid).map(|entry| entry.name);
    }
    Ok(())
}

/// The first task on a dependency path from `spec`'s dependencies back to `id`, if any.
/// The owner of array `array`: the submitter of a member already journaled or taken in
/// this tick; `None` for an array nobody has started.
fn array_owner(array: &TaskId, state: &State, batch: &Batch) -> Option<u32> {
    let in_batch = batch.values().find(|(_, _, a)| a.as_ref() == Some(array)).map(|(uid, _, _)| *uid);
    in_batch.or_else(|| state.array_owner(array))
}

fn cycle_through(id: &TaskId, spec: &TaskSpec, state: &State, batch: &Batch) -> Option<TaskId> {
    let dependencies_of = |task: &TaskId| -> Vec<TaskId> {
        match batch.get(task) {
            Some((_, dependencies, _)) => dependencies.clone(),
            None => state
                .tasks
                .get(task)
                .map(|t| t.spec.dependencies.iter().map(|d| d.task.clone()).collect())
                .unwrap_or_default(),
        }
    };
    let mut seen: BTreeSet<TaskId> = BTreeSet::new();
    for first in spec.dependencies.iter().map(|d| d.task.clone()) {
        let mut stack = vec![first.clone()];
        while let Some(task) = stack.pop() {
            if &task == id {
                return Some(first);
            }
            if seen.insert(task.clone()) {
                stack.extend(dependencies_of(&task));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Event, Record};
    use crate::spec::{Dependency, DependencyKind};

    fn spec(after: &[&TaskId]) -> TaskSpec {
        let mut spec = crate::spec::parse_toml("t", "name = \"t\"\ncommand = [\"true\"]\n")
            .and_then(|f| f.validate("t", std::path::Path::new("/"), Default::default()))
            .unwrap();
        spec.dependencies =
            after.iter().map(|t| Dependency { kind: DependencyKind::AfterOk, task: (*t).clone() }).collect();
        spec
    }

    /// Goal: a cycle through journaled and same-batch tasks is found, a chain is not.
    #[test]
    fn cycles_are_found_through_the_journal_and_the_batch() {
        let id = |n: u64| TaskId::from_parts(1_700_000_000_000 + n, 0);
        let (a, b, c) = (id(1), id(2), id(3));
        let mut state = State::default();
        let event = Event::Submitted { task: a.clone(), submitter_uid: 1, spec: spec(&[&c]) };
        state.apply(1, &Record { time_ms: 1, event });
        let batch = BTreeMap::from([(b.clone(), (1, vec![a.clone()], None))]);
        assert_eq!(cycle_through(&c, &spec(&[&b]), &state, &batch), Some(b.clone()));
        assert_eq!(cycle_through(&c, &spec(&[&a, &b]), &state, &BTreeMap::new()), Some(a.clone()));
        let d = id(4);
        assert_eq!(cycle_through(&d, &spec(&[&a, &b]), &state, &batch), None);
    }

    /// Goal (issue 41): no limit asked never runs unlimited on a queue with a maximum, and
    /// the journaled spec says where its limit came from. Method: admit one spec under each
    /// of the queue's settings.
    #[test]
    fn no_time_limit_asked_gets_the_default_or_else_the_maximum() {
        use crate::spec::time_limit::TimeLimitSource;
        let id = TaskId::from_parts(1_700_000_000_000, 1);
        let admitted = |default: Option<u64>, max: Option<u64>, asked: Option<u64>| {
            let mut config = Config::default();
            (config.limits.time_limit_default_ms, config.limits.time_limit_max_ms) = (default, max);
            let mut spec = spec(&[]);
            spec.time_limit_ms = asked;
            admit(&id, 1001, &mut spec, &State::default(), &BTreeMap::new(), &config).unwrap();
            (spec.time_limit_ms, spec.time_limit_source.unwrap())
        };
        let hour = Some(3_600_000);
        assert_eq!(admitted(None, hour, None), (hour, TimeLimitSource::QueueMax));
        assert_eq!(admitted(Some(60_000), hour, None), (Some(60_000), TimeLimitSource::QueueDefault));
        assert_eq!(admitted(None, hour, Some(60_000)), (Some(60_000), TimeLimitSource::Task));
        assert_eq!(admitted(None, None, None), (None, TimeLimitSource::QueueUnlimited));
    }

    #[test]
    fn ordinary_users_keep_to_the_priority_cap() {
        let mut config = Config::default();
        config.access.owner_uid = 5;
        let ordinary = Actor::uid(1001);
        assert!(priority_refusal(&ordinary, 1, 0, &config).unwrap().starts_with("priority 1 is above"));
        assert!(priority_refusal(&ordinary, -5, 3, &config).is_none());
        assert!(priority_refusal(&ordinary, 0, -1, &config).unwrap().contains("only root"));
        assert!(priority_refusal(&Actor::uid(0), 9000, -9000, &config).is_none());
        assert!(priority_refusal(&Actor::uid(5), 9000, -9000, &config).is_none(), "the queue's owner");
        let grouped = Actor { uid: 1002, in_admin_group: true };
        assert!(priority_refusal(&grouped, 9000, 0, &config).is_none(), "the admin group");
        config.limits.user_priority_max = 10;
        assert!(priority_refusal(&ordinary, 10, 0, &config).is_none());
    }
}
