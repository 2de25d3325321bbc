//! `carma queue`: the task table, with the reason each waiting task waits.
//!
//! It reads the published view (no lock, never waits for a tick) and the spool, so a task is
//! listed from the moment `carma submit` returns (`SU`, submitted). The table fits the
//! terminal: every column but the reason keeps its width, the reason takes what is left and is
//! cut to one line (`carma show` has it whole). Columns, filters and state codes follow
//! Slurm's squeue where they can.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use super::render::{self, Columns};
use crate::access::users;
use crate::cli::QueueArgs;
use crate::clock::{Clock, SystemClock};
use crate::error::Error;
use crate::home::Home;
use crate::journal::{State, Task};
use crate::view::{self, lookup};

use super::select::Filter;
use super::status::{code, reason, state as state_word};
use super::workflow_view::{self, ArraySummary, Entry, WorkflowJson};

/// Schema tag of `carma queue --json` (schema/queue.schema.json).
pub(super) const QUEUE_SCHEMA: &str = "carma.queue/1";

/// The columns `--format` accepts, and the default.
const FIELDS: [&str; 16] = [
    "id", "index", "name", "user", "st", "state", "gpus", "mem", "submit", "start", "end", "time", "age",
    "tries", "gpu", "reason",
];
const DEFAULT_FORMAT: &str = "id,name,user,st,gpus,mem,start,time,reason";
/// The default with `--expand`: each array member's `ARRAY_INDEX` after its id.
const EXPANDED_FORMAT: &str = "id,index,name,user,st,gpus,mem,start,time,reason";
/// Shortest id prefix shown; longer when tasks submitted in the same burst share it.
const ID_SHOWN_MIN: usize = 8;

#[derive(Serialize)]
struct QueueJson<'a> {
    schema: &'static str,
    generated_ms: u64,
    tasks: Vec<TaskRow<'a>>,
    rejected: Vec<RejectedRow<'a>>,
}

#[derive(Serialize)]
struct TaskRow<'a> {
    id: &'a str,
    name: &'a str,
    state: &'static str,
    submitter_uid: u32,
    user: Option<String>,
    gpus: Option<u32>,
    memory_mib: Option<u64>,
    attempts: usize,
    in_recovery: bool,
    submitted_ms: u64,
    started_ms: Option<u64>,
    ended_ms: Option<u64>,
    elapsed_ms: Option<u64>,
    gpu_uuids: Vec<&'a str>,
    reason: Option<std::borrow::Cow<'a, str>>,
    /// Null for a submission still in the spool.
    workflow: Option<WorkflowJson<'a>>,
    /// `alloc` or `run` for an interactive task; null for a batch task.
    interactive: Option<&'a str>,
}

#[derive(Serialize)]
struct RejectedRow<'a> {
    id: Option<&'a str>,
    spool_file: &'a str,
    submitter_uid: u32,
    time_ms: u64,
    reason: &'a str,
}

/// One row of the table: a journaled task, a submission still in the spool, an array folded
/// into one line, or a task under its dependency (`--tree`: the prefix drawn before its id).
enum Row<'a> {
    Task(&'a Task),
    Spooled(lookup::Spooled),
    Array(ArraySummary<'a>),
    Tree(String, &'a Task),
}

/// How the human table groups tasks (`--tree`, `--expand`); `--json` lists every task.
#[derive(Clone, Copy, Default)]
struct Shape {
    tree: bool,
    expand: bool,
}

pub(super) fn run(home: &Home, wait: Duration, args: QueueArgs) -> anyhow::Result<()> {
    run_to(home, wait, args, &mut std::io::stdout().lock())
}

/// `run`, writing to `out` (stdout, or `carma mcp`'s answer).
pub(super) fn run_to(
    home: &Home,
    wait: Duration,
    args: QueueArgs,
    mut out: &mut dyn Write,
) -> anyhow::Result<()> {
    let _ = wait;
    // A Slurm cluster's login node: the node journals and squeue (`--journal`, CARMA_JOURNALS,
    // the system config's `[slurm] journals`).
    let journals = super::cluster_queue::journal_dirs(home, &args)?;
    if !journals.is_empty() {
        return super::cluster_queue::run(&journals, &args, out);
    }
    let state = view::load(home)?;
    let spooled = lookup::spooled(home, &state);
    let filter =
        Filter::new(args.all, args.me, args.user.as_deref(), args.state.as_deref(), args.name.clone())?;
    let default = if args.expand && !args.tree { EXPANDED_FORMAT } else { DEFAULT_FORMAT };
    let format = args.format.as_deref().unwrap_or(default);
    let fields = parse_format(format)?;
    let now = SystemClock.now_ms();
    let rows = rows(&state, spooled, &filter);
    if args.json {
        return print_json(&state, &rows, filter.all, now, &mut out);
    }
    let rows = shaped(rows, Shape { tree: args.tree, expand: args.expand });
    // Under the table for people; to stderr when the table is read by a program (a pipe into
    // `xargs carma cancel`, or --noheader), so its stdout holds the rows alone.
    let piped = args.noheader || !std::io::IsTerminal::is_terminal(&std::io::stdout());
    let table = Table { header: !args.noheader, notes_to_stderr: piped };
    print_table(&state, &rows, &fields, table, filter.all, now, &mut out)
}

/// How the human table is printed: with its header line, and where the lines under it go.
#[derive(Clone, Copy)]
struct Table {
    header: bool,
    notes_to_stderr: bool,
}

/// The ids of the tasks and spooled submissions `filter` keeps, in submit order, for
/// `cancel`'s scancel-like filters.
pub(super) fn matching(
    state: &State,
    spooled: Vec<lookup::Spooled>,
    filter: &Filter,
) -> Vec<crate::id::TaskId> {
    rows(state, spooled, filter)
        .into_iter()
        .filter_map(|row| match row {
            Row::Task(task) => Some(task.id.clone()),
            Row::Spooled(s) => Some(s.id),
            Row::Tree(..) | Row::Array(_) => None,
        })
        .collect()
}

/// The human table, for the demo.
pub(super) fn print(home: &Home, wait: Duration, all: bool, out: &mut impl Write) -> anyhow::Result<()> {
    let _ = wait;
    let state = view::load(home)?;
    let spooled = lookup::spooled(home, &state);
    let filter = Filter::new(all, false, None, None, None)?;
    let fields = parse_format(DEFAULT_FORMAT)?;
    let rows = shaped(rows(&state, spooled, &filter), Shape::default());
    let table = Table { header: true, notes_to_stderr: false };
    print_table(&state, &rows, &fields, table, all, SystemClock.now_ms(), out)
}

/// The rows regrouped for the human table: arrays folded into one line unless `expand`, or
/// the tasks as dependency trees with `tree`. Spooled submissions stay last.
fn shaped(rows: Vec<Row<'_>>, shape: Shape) -> Vec<Row<'_>> {
    if shape.expand && !shape.tree {
        return rows;
    }
    let mut tasks = Vec::with_capacity(rows.len());
    let mut rest = Vec::new();
    for row in rows {
        match row {
            Row::Task(task) => tasks.push(task),
            other => rest.push(other),
        }
    }
    let mut shaped: Vec<Row<'_>> = if shape.tree {
        workflow_view::tree(&tasks).into_iter().map(|(prefix, task)| Row::Tree(prefix, task)).collect()
    } else {
        workflow_view::fold_arrays(&tasks)
            .into_iter()
            .map(|entry| match entry {
                Entry::Task(task) => Row::Task(task),
                Entry::Array(array) => Row::Array(array),
            })
            .collect()
    };
    shaped.extend(rest);
    shaped
}

fn parse_format(format: &str) -> Result<Vec<&'static str>, Error> {
    let fields: Vec<&'static str> = format
        .split(',')
        .map(str::trim)
        .map(|f| {
            FIELDS.iter().find(|known| known.eq_ignore_ascii_case(f)).copied().ok_or_else(|| {
                Error::BadInput(format!("--format: unknown field {f:?}; use some of {}", FIELDS.join(",")))
            })
        })
        .collect::<Result<_, _>>()?;
    if fields.is_empty() {
        return Err(Error::BadInput(format!("--format is empty; use some of {}", FIELDS.join(","))));
    }
    Ok(fields)
}

fn rows<'a>(state: &'a State, spooled: Vec<lookup::Spooled>, filter: &Filter) -> Vec<Row<'a>> {
    let mut tasks: Vec<&Task> =
        state.tasks.values().filter(|t| filter.keeps(code(t), t.submitter_uid, &t.spec.name)).collect();
    tasks.sort_by_key(|t| t.submit_seq);
    let mut rows: Vec<Row> = tasks.into_iter().map(Row::Task).collect();
    rows.extend(
        spooled
            .into_iter()
            .filter(|s| filter.keeps("SU", s.owner_uid, s.name.as_deref().unwrap_or("")))
            .map(Row::Spooled),
    );
    rows
}

/// The memory a task is placed with per GPU: its estimate's upper bound, else its declared
/// memory.
fn requirement_mib(task: &Task) -> Option<u64> {
    task.estimate.as_ref().map(|e| e.upper_mib).or(task.spec.memory_mib)
}

/// When the latest attempt started and how long it ran (so far, when it still runs).
fn run_times(task: &Task, now: u64) -> (Option<u64>, Option<u64>) {
    let Some(attempt) = task.attempts.iter().rev().find(|a| a.launched_ms.is_some()) else {
        return (None, None);
    };
    let start = attempt.launched_ms;
    let end = attempt.ended_ms.unwrap_or(now);
    (start, start.map(|s| end.saturating_sub(s)))
}

/// How many leading characters tell every listed id apart from each other and from every
/// task that is not an array member (at least [`ID_SHOWN_MIN`]). An array's members have ids
/// that differ only at the end; they count only when listed one by one (`--expand`, `--tree`),
/// so that one sweep does not widen every row's id to all 16 characters.
fn id_width(state: &State, listed: &[&str]) -> usize {
    let mut ids: Vec<&str> = state
        .tasks
        .values()
        .filter(|task| task.spec.array.is_none())
        .map(|task| task.id.as_str())
        .chain(listed.iter().copied())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let shared = ids
        .windows(2)
        .map(|pair| pair[0].bytes().zip(pair[1].bytes()).take_while(|(a, b)| a == b).count())
        .max()
        .unwrap_or(0);
    (shared + 1).clamp(ID_SHOWN_MIN, crate::id::TASK_ID_LEN)
}

fn print_table(
    state: &State,
    rows: &[Row<'_>],
    fields: &[&'static str],
    shape: Table,
    all: bool,
    now: u64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    // A member's row also shows its array's id (`ID_INDEX`), whose prefix must name the array
    // alone: the array id shares 15 characters with its first member's.
    let listed: Vec<&str> = rows
        .iter()
        .flat_map(|r| match r {
            Row::Spooled(s) => [Some(s.id.as_str()), s.array_id.as_ref().map(|a| a.as_str())],
            Row::Task(task) | Row::Tree(_, task) => {
                [Some(task.id.as_str()), task.spec.array.as_ref().map(|a| a.id.as_str())]
            }
            Row::Array(array) => [Some(array.id.as_str()), None],
        })
        .flatten()
        .collect();
    let width = id_width(state, &listed);
    // Array labels (`ID[10%2]`) and tree prefixes make the id cell longer than the id.
    let id_cap = rows.iter().map(|row| cell(row, "id", width, now).chars().count()).max().unwrap_or(width);
    let headers = fields.iter().map(|f| header(f)).collect();
    let caps = fields.iter().map(|f| cap(f, id_cap.max(width))).collect();
    let mut table = Columns::new(headers, caps);
    for row in rows {
        table.push(fields.iter().map(|f| cell(row, f, width, now)).collect());
    }
    let mut notes = Vec::new();
    if table.is_empty() {
        let hint = if all { "" } else { " waiting or running (use --all for finished ones)" };
        notes.push(format!("no tasks{hint}"));
    } else {
        let text = table.render(render::terminal_width());
        let text =
            if shape.header { text.as_str() } else { text.split_once('\n').map_or("", |(_, rows)| rows) };
        write!(out, "{text}")?;
    }
    if all {
        let rejected = state.rejections.len();
        if rejected > 0 {
            notes.push(format!("{rejected} rejected spool entries: carma events (kind Rejected), or --json"));
        }
    }
    notes.extend(stale_tick(state, rows, now));
    for note in notes {
        if shape.notes_to_stderr {
            eprintln!("{note}");
        } else {
            writeln!(out, "{note}")?;
        }
    }
    Ok(())
}

/// Ticks older than this, with work waiting, get a line under the table.
const STALE_TICK_MS: u64 = 5 * 60 * 1000;

/// A warning when work waits but no tick has completed for a while: the queue is read from the
/// view, which keeps answering when the timer is stopped or every tick fails (a damaged
/// journal, say), so without it a user would only see tasks that never move.
fn stale_tick(state: &State, rows: &[Row<'_>], now: u64) -> Option<String> {
    let waiting = rows.iter().any(|row| match row {
        Row::Spooled(_) => true,
        Row::Task(task) | Row::Tree(_, task) => !task.status().is_terminal(),
        Row::Array(array) => array.members.iter().any(|t| !t.status().is_terminal()),
    });
    let last = state.last_tick_ms?;
    let age = now.saturating_sub(last);
    (waiting && age > STALE_TICK_MS).then(|| {
        format!(
            "warning: no tick for {} (last {}); tasks will not move: ask an administrator \
             (`systemctl status carma-tick`, `carma tick -v`)",
            render::duration_ms(age),
            render::local_short(last, now)
        )
    })
}

fn header(field: &str) -> &'static str {
    match field {
        "id" => "ID",
        "index" => "ARRAY_INDEX",
        "name" => "NAME",
        "user" => "USER",
        "st" => "ST",
        "state" => "STATE",
        "gpus" => "GPUS",
        "mem" => "MEM",
        "submit" => "SUBMIT",
        "start" => "START",
        "end" => "END",
        "time" => "TIME",
        "age" => "AGE",
        "tries" => "TRIES",
        "gpu" => "GPU",
        _ => "REASON",
    }
}

fn cap(field: &str, id_width: usize) -> usize {
    match field {
        "id" => id_width,
        "index" => id_width + 8,
        "name" => 16,
        "user" => 10,
        "gpu" => 24,
        _ => 20,
    }
}

fn cell(row: &Row<'_>, field: &str, id_width: usize, now: u64) -> String {
    match row {
        Row::Task(task) => task_cell(task, field, id_width, now),
        Row::Spooled(spooled) => spooled_cell(spooled, field, id_width, now),
        Row::Tree(prefix, task) if field == "id" => format!("{prefix}{}", &task.id.as_str()[..id_width]),
        Row::Tree(_, task) => task_cell(task, field, id_width, now),
        Row::Array(array) => array_cell(array, field, id_width, now),
    }
}

/// A folded array's cell: its label, its members per state, their tries and the reason of
/// the first waiting member; the rest is its first member's.
fn array_cell(array: &ArraySummary<'_>, field: &str, id_width: usize, now: u64) -> String {
    match field {
        "id" => array.label(id_width),
        "st" => array.codes(),
        "state" => array.states(),
        "tries" => array.members.iter().map(|t| t.attempts.len()).sum::<usize>().to_string(),
        "index" => format!("{}_*", &array.id.as_str()[..id_width]),
        "reason" => array.reason().unwrap_or_default().into_owned(),
        _ => task_cell(array.members[0], field, id_width, now),
    }
}

fn task_cell(task: &Task, field: &str, id_width: usize, now: u64) -> String {
    let (started, elapsed) = run_times(task, now);
    let dash = || "-".to_string();
    match field {
        "id" => task.id.as_str()[..id_width].to_string(),
        "index" => task
            .spec
            .array
            .as_ref()
            .map_or_else(dash, |a| format!("{}_{}", &a.id.as_str()[..id_width], a.index)),
        // An interactive task is marked: `bash [alloc]`.
        "name" => match &task.spec.interactive {
            Some(mode) => format!("{} [{mode}]", task.spec.name),
            None => task.spec.name.clone(),
        },
        "user" => users::display(task.submitter_uid),
        "st" => code(task).to_string(),
        "state" => {
            format!("{}{}", state_word(task), if task.in_recovery() { " (recovery)" } else { "" })
        }
        "gpus" => task.spec.gpus.to_string(),
        "mem" => requirement_mib(task).map_or_else(dash, compact_gib),
        "submit" => render::local_short(task.submitted_ms, now),
        "start" => started.map_or_else(dash, |s| render::local_short(s, now)),
        "end" => task.ended_ms().map_or_else(dash, |e| render::local_short(e, now)),
        "time" => elapsed.map_or_else(dash, render::clock_duration),
        "age" => render::clock_duration(now.saturating_sub(task.submitted_ms)),
        "tries" => task.attempts.len().to_string(),
        "gpu" => task.active_attempt().map_or_else(dash, |a| a.gpus.join(",")),
        _ => reason(task).unwrap_or_default().into_owned(),
    }
}

fn spooled_cell(spooled: &lookup::Spooled, field: &str, id_width: usize, now: u64) -> String {
    match field {
        "id" => spooled.id.as_str()[..id_width].to_string(),
        "index" => match (&spooled.array_id, spooled.array_index) {
            (Some(array), Some(index)) => format!("{}_{index}", &array.as_str()[..id_width]),
            _ => "-".into(),
        },
        "name" => spooled.name.clone().unwrap_or_else(|| "?".into()),
        "user" => users::display(spooled.owner_uid),
        "st" => "SU".into(),
        "state" => "Submitted".into(),
        "submit" => render::local_short(spooled.id.unix_ms(), now),
        "age" => render::clock_duration(now.saturating_sub(spooled.id.unix_ms())),
        "reason" => "Submitted: in the spool until the next tick".into(),
        _ => "-".into(),
    }
}

/// MiB as `12.0G`, the narrow form of GiB for tables.
fn compact_gib(mib: u64) -> String {
    format!("{:.1}G", mib as f64 / 1024.0)
}

fn print_json(
    state: &State,
    rows: &[Row<'_>],
    all: bool,
    now: u64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let tasks = rows.iter().flat_map(|row| json_rows(row, now)).collect();
    let rejected = if all { state.rejections.iter().map(rejected_row).collect() } else { Vec::new() };
    let doc = QueueJson { schema: QUEUE_SCHEMA, generated_ms: now, tasks, rejected };
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)?;
    Ok(())
}

/// The JSON rows of a table row: every member of a folded array on its own.
fn json_rows<'a>(row: &'a Row<'_>, now: u64) -> Vec<TaskRow<'a>> {
    match row {
        Row::Task(task) | Row::Tree(_, task) => vec![task_json(task, now)],
        Row::Array(array) => array.members.iter().map(|task| task_json(task, now)).collect(),
        Row::Spooled(spooled) => vec![spooled_json(spooled)],
    }
}

fn task_json(task: &Task, now: u64) -> TaskRow<'_> {
    let active = task.active_attempt();
    let (_, elapsed) = run_times(task, now);
    TaskRow {
        id: task.id.as_str(),
        name: &task.spec.name,
        state: state_word(task),
        submitter_uid: task.submitter_uid,
        user: users::name_of(task.submitter_uid),
        gpus: Some(task.spec.gpus),
        memory_mib: task.spec.memory_mib,
        attempts: task.attempts.len(),
        in_recovery: task.in_recovery(),
        submitted_ms: task.submitted_ms,
        started_ms: task.attempts.first().and_then(|a| a.launched_ms),
        ended_ms: task.ended_ms(),
        elapsed_ms: elapsed,
        gpu_uuids: active.map(|a| a.gpus.iter().map(String::as_str).collect()).unwrap_or_default(),
        reason: reason(task),
        workflow: Some(workflow_view::workflow_json(task)),
        interactive: task.spec.interactive.as_deref(),
    }
}

fn spooled_json(spooled: &lookup::Spooled) -> TaskRow<'_> {
    TaskRow {
        id: spooled.id.as_str(),
        name: spooled.name.as_deref().unwrap_or(""),
        state: "Submitted",
        submitter_uid: spooled.owner_uid,
        user: users::name_of(spooled.owner_uid),
        gpus: None,
        memory_mib: None,
        attempts: 0,
        in_recovery: false,
        submitted_ms: spooled.id.unix_ms(),
        started_ms: None,
        ended_ms: None,
        elapsed_ms: None,
        gpu_uuids: Vec::new(),
        reason: None,
        workflow: None,
        interactive: None,
    }
}

fn rejected_row(r: &crate::journal::state::Rejection) -> RejectedRow<'_> {
    RejectedRow {
        id: r.task.as_ref().map(|t| t.as_str()),
        spool_file: &r.spool_file,
        submitter_uid: r.submitter_uid,
        time_ms: r.time_ms,
        reason: &r.reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_tick_is_named_only_while_work_waits() {
        let minute = 60_000;
        let mut state = State { last_tick_ms: Some(100 * minute), ..State::default() };
        let id = crate::id::TaskId::parse("06h0gg823dj52hqx").unwrap();
        let waiting = [Row::Spooled(lookup::Spooled {
            id,
            owner_uid: 1000,
            name: None,
            array_id: None,
            array_index: None,
        })];
        let line = stale_tick(&state, &waiting, 106 * minute).expect("6 minutes without a tick");
        assert!(line.starts_with("warning: no tick for 6m (last "), "{line}");
        assert_eq!(stale_tick(&state, &waiting, 104 * minute), None, "4 minutes is not stale");
        assert_eq!(stale_tick(&state, &[], 200 * minute), None, "nothing waits");
        state.last_tick_ms = None;
        assert_eq!(stale_tick(&state, &waiting, 200 * minute), None, "never ticked: no reference");
    }

    #[test]
    fn array_members_widen_ids_only_when_listed_one_by_one() {
        use crate::journal::{Event, Record};
        use crate::spec::{TaskSpec, workflow::ArrayMember};
        // Two plain tasks whose ids share 4 leading characters, and an array of two members
        // made in the same millisecond: their ids share 15.
        let plain = [
            crate::id::TaskId::from_parts(1_700_000_000_000, 1),
            crate::id::TaskId::from_parts(1_800_000_000_000, 2),
        ];
        let array = crate::id::TaskId::from_parts(1_750_000_000_000, 9);
        let members = [
            crate::id::TaskId::from_parts(1_750_000_000_000, 10),
            crate::id::TaskId::from_parts(1_750_000_000_000, 11),
        ];
        let mut state = State::default();
        let mut seq = 0;
        let mut submit = |state: &mut State, task: &crate::id::TaskId, member: Option<u32>| {
            seq += 1;
            let array = member.map(|index| ArrayMember {
                id: array.clone(),
                index,
                count: 2,
                running_max: None,
                params: Vec::new(),
            });
            let spec = TaskSpec {
                name: "t".into(),
                command: vec!["true".into()],
                gpus: 1,
                array,
                ..TaskSpec::default()
            };
            let event = Event::Submitted { task: task.clone(), submitter_uid: 1000, spec };
            state.apply(seq, &Record { time_ms: seq, event });
        };
        for task in &plain {
            submit(&mut state, task, None);
        }
        for (index, task) in members.iter().enumerate() {
            submit(&mut state, task, Some(index as u32));
        }
        let shared = |a: &crate::id::TaskId, b: &crate::id::TaskId| {
            a.as_str().bytes().zip(b.as_str().bytes()).take_while(|(x, y)| x == y).count()
        };
        assert_eq!(shared(&members[0], &members[1]), 15, "the members differ only at the end");
        // The default view: plain tasks and the array's summary row.
        let summary: Vec<&str> = plain.iter().map(|t| t.as_str()).chain([array.as_str()]).collect();
        let width = id_width(&state, &summary);
        assert!(width < 12, "one array widened the ids to {width}");
        let prefixes: std::collections::HashSet<&str> = summary.iter().map(|id| &id[..width]).collect();
        assert_eq!(prefixes.len(), summary.len(), "the listed ids stay apart at width {width}");
        // `--expand`: the members are listed, and only all 16 characters tell them apart.
        let expanded: Vec<&str> = plain.iter().chain(&members).map(|t| t.as_str()).collect();
        assert_eq!(id_width(&state, &expanded), crate::id::TASK_ID_LEN);
    }

    #[test]
    fn an_unknown_format_field_lists_the_valid_ones() {
        assert_eq!(parse_format("id, NAME").unwrap(), ["id", "name"]);
        let err = parse_format("id,colour").unwrap_err().to_string();
        assert!(err.starts_with("--format: unknown field \"colour\"; use some of id,index,name,"), "{err}");
    }
}
