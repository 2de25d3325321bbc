//! What `cancel`, `hold`, `release` and `update` share: turning what the user typed (ids,
//! prefixes, array ids) into tasks, checking the permission at once against the published
//! view (exit 77), and writing either the journal (root, a personal queue's owner) or a
//! request the next tick applies.

use std::time::Duration;

use crate::access::users;
use crate::access::{self, Action, Actor, Policy};
use crate::error::Error;
use crate::home::Home;
use crate::id::TaskId;
use crate::intake::{self, Filed, Verb};
use crate::journal::{Event, Record, State, Task};
use crate::session;
use crate::text::escape;
use crate::view::lookup::{self, Found, Target};

/// A task the user may act on.
pub(super) struct Subject<'a> {
    pub id: TaskId,
    pub name: String,
    /// The journaled task; `None` while it is still a spool file (only a request reaches it).
    pub task: Option<&'a Task>,
    /// Named through its array: members the verb does not apply to are skipped, not refused.
    pub via_array: bool,
}

/// Resolves every query (an array gives all its members) and checks `action` on each; the
/// first refusal is the error.
pub(super) fn subjects<'a>(
    state: &'a State,
    spooled: &[lookup::Spooled],
    queries: &[String],
    actor: Actor,
    action: Action,
    policy: &Policy,
) -> anyhow::Result<Vec<Subject<'a>>> {
    let mut out: Vec<Subject<'a>> = Vec::new();
    for query in queries {
        let (found, via_array) = match lookup::resolve(state, spooled, query)? {
            Target::Task(found) => (vec![found], false),
            Target::Array { id, members } if members.is_empty() => {
                return Err(Error::BadInput(format!("array {id} has no tasks")).into());
            }
            Target::Array { members, .. } => (members, true),
        };
        for found in found {
            let (id, name) = (found.id().clone(), escape(found.name()).into_owned());
            let owner_uid = found.owner_uid();
            access::may(&actor, action, access::Target::Task { owner_uid }, policy).map_err(|_| {
                Error::Denied(format!(
                    "cannot {} task {id} ({name}): it belongs to {}; only its submitter or root may {}",
                    action_word(action),
                    users::display(owner_uid),
                    action.verb()
                ))
            })?;
            let task = match found {
                Found::Task(task) => Some(task),
                Found::Spooled(_) => None,
            };
            if !out.iter().any(|s| s.id == id) {
                out.push(Subject { id, name, task, via_array });
            }
        }
    }
    Ok(out)
}

fn action_word(action: Action) -> &'static str {
    match action {
        Action::Cancel => "cancel",
        Action::Hold => "hold",
        Action::Release => "release",
        Action::Update => "update",
        Action::Requeue => "requeue",
        Action::ReadSecrets | Action::ReadLogs => "read",
        Action::JoinArray
        | Action::DependOn
        | Action::RaisePriority
        | Action::Administer
        | Action::Reserve => "act on",
    }
}

/// Appends one record per event in a single session (root or the queue's owner); events for
/// tasks that ended meanwhile are dropped. Returns the ids written.
pub(super) fn write_direct(home: &Home, wait: Duration, events: Vec<Event>) -> anyhow::Result<Vec<TaskId>> {
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    let written = session::write(home, wait, |journal, state| {
        let records: Vec<Record> = events
            .into_iter()
            .filter(|e| {
                e.task().and_then(|id| state.tasks.get(id)).is_some_and(|t| !t.status().is_terminal())
            })
            .map(|event| Record { time_ms: now, event })
            .collect();
        journal.append(&records, state)?;
        Ok(records.iter().filter_map(|r| r.event.task().cloned()).collect())
    })?;
    Ok(written)
}

/// Whether this process writes the journal itself (root, or the owner of a personal state
/// directory) rather than filing a request. A mechanism, not a permission: `access::may`
/// has already decided, and the tick decides again for a request.
pub(crate) fn writes_directly(home: &Home) -> bool {
    let Ok(path) = std::ffi::CString::new(home.journal_path().as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(path.as_ptr(), libc::W_OK) == 0 }
}

/// The configuration's access policy for a CLI check (defaults when the file is unreadable:
/// the tick checks again with the real one).
pub(crate) fn policy(home: &Home) -> Policy {
    crate::config::Config::load(home).map(|c| c.access).unwrap_or_else(|_| Policy {
        owner_uid: std::fs::metadata(home.root())
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap_or(0),
        ..Policy::default()
    })
}

/// Files a request for the next tick and says so on `out`.
pub(super) fn file_request(
    home: &Home,
    subject: &Subject<'_>,
    verb: Verb,
    body: &str,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let what = verb.suffix();
    match intake::request(home, &subject.id, verb, body)? {
        Filed::Filed => writeln!(
            out,
            "{what} of task {} ({}) requested; the next tick applies it",
            subject.id, subject.name
        )?,
        Filed::AlreadyWaiting => writeln!(
            out,
            "a {what} of task {} ({}) is already waiting for the next tick",
            subject.id, subject.name
        )?,
    }
    Ok(())
}
