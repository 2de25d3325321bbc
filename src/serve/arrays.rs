//! The queue's arrays folded: an array's members make one row, as `carma queue` shows them,
//! with its members counted by state (`2 Running, 5 Pending`) and a `<details>` that opens
//! onto a link to each member (no script needed).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::limits::ROWS_SHOWN_MAX;
use super::words::{Names, elapsed, html, mib, reason, state_word};
use crate::id::TaskId;
use crate::journal::{Status, Task};

/// One row of a queue table.
pub(super) enum Row<'a> {
    /// A task of no array.
    Task(&'a Task),
    /// An array's members among the listed tasks, in the order listed (at least one).
    Array(Vec<&'a Task>),
}

/// The listed tasks with each array's members folded into one row, at its first member's
/// place.
pub(super) fn fold<'a>(tasks: &[&'a Task]) -> Vec<Row<'a>> {
    let mut rows: Vec<Row<'a>> = Vec::with_capacity(tasks.len());
    let mut position: BTreeMap<&'a TaskId, usize> = BTreeMap::new();
    for &task in tasks {
        let Some(array) = &task.spec.array else {
            rows.push(Row::Task(task));
            continue;
        };
        match position.get(&array.id) {
            Some(&at) => {
                if let Row::Array(members) = &mut rows[at] {
                    members.push(task);
                }
            }
            None => {
                position.insert(&array.id, rows.len());
                rows.push(Row::Array(vec![task]));
            }
        }
    }
    rows
}

/// Members per state, in life order: `2 Running, 5 Pending, 3 Finished` (held ones as `Held`).
pub(super) fn states(members: &[&Task]) -> String {
    let order = ["Running", "Placed", "Held", "Pending", "Finished", "Failed", "Cancelled"];
    order
        .iter()
        .filter_map(|word| {
            let n = members.iter().filter(|t| state_word(t) == *word).count();
            (n > 0).then(|| format!("{n} {word}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An array's row: `ID[count%N]` opening onto its members, its first member's name, user,
/// GPUs and memory, the members by state, the first member's time, and the first waiting
/// member's reason (else the first member's).
pub(super) fn row(out: &mut String, members: &[&Task], now_ms: u64, names: Names) {
    let Some(first) = members.first() else { return };
    let Some(array) = &first.spec.array else { return };
    let cap = array.running_max.map_or(String::new(), |n| format!("%{n}"));
    let mut links = String::new();
    for task in members.iter().take(ROWS_SHOWN_MAX) {
        let index = task.spec.array.as_ref().map_or(0, |a| a.index);
        let _ = write!(
            links,
            "<li><a href=\"/task/{id}\">{id}</a> index {index}: {state}</li>",
            id = html(task.id.as_str()),
            state = state_word(task),
        );
    }
    if members.len() > ROWS_SHOWN_MAX {
        let _ = write!(links, "<li>… (cut: {} more members)</li>", members.len() - ROWS_SHOWN_MAX);
    }
    let shown_reason = members.iter().find(|t| t.status() == Status::Pending).unwrap_or(first);
    let _ = writeln!(
        out,
        "<tr class=\"array\"><td><details><summary>{id}[{count}{cap}]</summary><ul class=\"members\">{links}</ul></details></td><td class=\"name\">{name}</td><td>{user}</td><td>{states}</td><td>{gpus}</td><td>{memory}</td><td>{time}</td><td>{reason}</td></tr>",
        id = html(array.id.as_str()),
        count = array.count,
        name = html(&first.spec.name),
        user = html(&names(first.submitter_uid)),
        states = states(members),
        gpus = first.spec.gpus,
        memory = first.spec.memory_mib.map_or("-".into(), mib),
        time = html(&elapsed(first, now_ms)),
        reason = html(&reason(shown_reason)),
    );
}
