//! `carma reserve create|list|delete`: administrators' GPU reservations, as Slurm's
//! `scontrol create reservation`.
//!
//! Creating and deleting are the administrators' (`access::may` with `Action::Reserve`; anyone
//! else gets exit 77) and write the journal directly under the lock, as root's `cancel` does:
//! the rules a new reservation must pass are checked there, against the State it is appended
//! to (`journal::reservations::check_new`), so two administrators cannot both take the last
//! GPUs. An administrator who cannot write the journal (a member of `[access] admin-group`
//! who is not root) is told to run the command as root. Listing is everyone's and reads the
//! published view.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::access::{self, Action, Actor, users};
use crate::cli::{ReserveArgs, ReserveCommand, ReserveCreateArgs, ReserveDeleteArgs, ReserveListArgs};
use crate::clock::{Clock, SystemClock, format_ms};
use crate::error::Error;
use crate::home::Home;
use crate::inventory::Inventory;
use crate::journal::reservations::{self, MachineGpu, ReservationEntry};
use crate::journal::{Event, Record, State};
use crate::session;
use crate::text::escape;

/// Schema tag of `carma reserve list --json` (schema/reservations.schema.json).
const RESERVATIONS_SCHEMA: &str = "carma.reservations/1";

pub(super) fn run(home: &Home, wait: Duration, args: ReserveArgs) -> anyhow::Result<()> {
    home.require_initialized()?;
    match args.command {
        ReserveCommand::Create(args) => create(home, wait, args),
        ReserveCommand::List(args) => list(home, args),
        ReserveCommand::Delete(args) => delete(home, wait, args),
    }
}

/// Refuses anyone but an administrator, and an administrator who cannot write the journal.
fn require_admin(home: &Home, what: &str) -> anyhow::Result<Actor> {
    let policy = super::act::policy(home);
    let actor = Actor::current(&policy);
    if let Err(denied) = access::may(&actor, Action::Reserve, access::Target::Queue, &policy) {
        return Err(Error::Denied(format!("cannot {what}: {denied}")).into());
    }
    if !super::act::writes_directly(home) {
        return Err(Error::Denied(format!(
            "cannot {what}: only root writes this queue's journal; run it as root (sudo carma reserve ...)"
        ))
        .into());
    }
    Ok(actor)
}

fn create(home: &Home, wait: Duration, args: ReserveCreateArgs) -> anyhow::Result<()> {
    let name = args.name.clone();
    crate::spec::extras::validate_reservation_name(&name).map_err(Error::BadInput)?;
    let actor = require_admin(home, &format!("create reservation \"{name}\""))?;
    let now_ms = SystemClock.now_ms();
    let start_ms = crate::spec::timing::parse_begin(&args.start, now_ms)
        .map_err(|e| Error::BadInput(e.replace("begin ", "--start ")))?;
    let duration_ms = crate::spec::parse_time_limit_ms(&args.duration)
        .map_err(|e| Error::BadInput(e.replace("time_limit ", "--duration ")))?;
    if duration_ms == 0 {
        return Err(Error::BadInput("--duration must be longer than 0; use e.g. 2d or 12h".into()).into());
    }
    let users = user_ids(&args.users)?;
    let machine = machine_gpus(home)?;
    let gpus: Vec<String> = args
        .gpu
        .iter()
        .map(|index| {
            machine.iter().find(|g| g.index == *index).map(|g| g.uuid.clone()).ok_or_else(|| {
                Error::BadInput(format!(
                    "reservation \"{name}\" names GPU{index}, which this machine does not have (it has {}); see carma gpus",
                    machine.len()
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    let mut unique = gpus.clone();
    unique.sort();
    unique.dedup();
    if unique.len() != gpus.len() {
        return Err(Error::BadInput(format!("reservation \"{name}\" names a GPU twice in --gpu")).into());
    }
    let gpu_count = args.gpus.unwrap_or(gpus.len() as u32);
    if gpu_count == 0 {
        return Err(Error::BadInput(format!(
            "reservation \"{name}\" holds no GPU; give --gpus N or --gpu 0,1"
        ))
        .into());
    }
    let entry = ReservationEntry {
        name: name.clone(),
        start_ms,
        end_ms: start_ms.saturating_add(duration_ms),
        users: users.clone(),
        gpu_count,
        gpus,
        by_uid: actor.uid,
        created_ms: now_ms,
    };
    session::write(home, wait, |journal, state| {
        if let Some(reason) = reservations::check_new(state, &entry, &machine, now_ms) {
            return Err(Error::BadInput(reason));
        }
        let event = Event::ReservationCreated {
            name: entry.name.clone(),
            start_ms: entry.start_ms,
            end_ms: entry.end_ms,
            users: entry.users.clone(),
            gpu_count: entry.gpu_count,
            gpus: entry.gpus.clone(),
            by_uid: entry.by_uid,
        };
        journal.append(&[Record { time_ms: now_ms, event }], state)
    })?;
    let user_names: Vec<String> = users.iter().map(|&uid| users::display(uid)).collect();
    writeln!(
        std::io::stdout(),
        "reservation \"{name}\" created: {gpu_count} GPU(s) from {} to {} for {}",
        format_ms(entry.start_ms),
        format_ms(entry.end_ms),
        escape(&user_names.join(", "))
    )?;
    Ok(())
}

/// Each `--users` word as a uid: a user name the database knows, or a number.
fn user_ids(words: &[String]) -> anyhow::Result<Vec<u32>> {
    let mut uids = Vec::with_capacity(words.len());
    for word in words.iter().map(|w| w.trim()).filter(|w| !w.is_empty()) {
        let uid = users::uid_of(word).or_else(|| word.parse().ok()).ok_or_else(|| {
            Error::BadInput(format!(
                "no user {:?} on this machine; give user names or uids in --users",
                escape(word)
            ))
        })?;
        uids.push(uid);
    }
    uids.sort_unstable();
    uids.dedup();
    if uids.is_empty() {
        return Err(Error::BadInput("--users names nobody; give e.g. --users alice,bob".into()).into());
    }
    if uids.len() > reservations::USERS_MAX {
        return Err(
            Error::BadInput(format!("--users names more than {} users", reservations::USERS_MAX)).into()
        );
    }
    Ok(uids)
}

/// The GPUs the last tick saw (`inventory.json`).
fn machine_gpus(home: &Home) -> anyhow::Result<Vec<MachineGpu>> {
    let inventory = Inventory::load(home).unwrap_or_default();
    if inventory.gpus.is_empty() {
        return Err(Error::BadInput(
            "no GPUs known yet, so nothing can be reserved; run a tick first (carma tick) and see carma gpus"
                .into(),
        )
        .into());
    }
    Ok(inventory.gpus.iter().map(|g| MachineGpu { index: g.index, uuid: g.uuid.clone() }).collect())
}

fn delete(home: &Home, wait: Duration, args: ReserveDeleteArgs) -> anyhow::Result<()> {
    let name = args.name;
    let actor = require_admin(home, &format!("delete reservation \"{}\"", escape(&name)))?;
    let now_ms = SystemClock.now_ms();
    session::write(home, wait, |journal, state| {
        if !state.gpu_reservations.contains_key(&name) {
            return Err(Error::BadInput(format!(
                "no reservation \"{}\"; carma reserve list shows them",
                escape(&name)
            )));
        }
        let event = Event::ReservationDeleted { name: name.clone(), by_uid: actor.uid };
        journal.append(&[Record { time_ms: now_ms, event }], state)
    })?;
    writeln!(std::io::stdout(), "reservation \"{name}\" deleted; tasks that name it stay queued")?;
    Ok(())
}

/// `carma submit --reservation NAME`: refused at once (exit 2), as sbatch refuses it, when the
/// published view has no such reservation, it has ended, or `uid` is not among its users. The
/// tick judges again (the reservation may be deleted before the task is taken in); without a
/// published view, it alone does.
pub(super) fn check_at_submit(home: &Home, name: &str, uid: u32) -> Result<(), Error> {
    let Ok(state) = crate::view::load(home) else {
        return Ok(());
    };
    let now_ms = SystemClock.now_ms();
    let refusal = match state.gpu_reservations.get(name) {
        None => format!("reservation \"{name}\" does not exist; carma reserve list shows them"),
        Some(entry) if now_ms >= entry.end_ms => format!(
            "reservation \"{name}\" ended at {}; submit without --reservation, or ask an administrator for a new one",
            format_ms(entry.end_ms)
        ),
        Some(entry) if !entry.users.contains(&uid) => {
            let names: Vec<String> = entry.users.iter().map(|&u| users::display(u)).collect();
            format!(
                "reservation \"{name}\" is not open to {} (its users: {}); ask an administrator",
                users::display(uid),
                names.join(", ")
            )
        }
        Some(_) => return Ok(()),
    };
    Err(Error::BadInput(refusal))
}

#[derive(Serialize)]
struct ListJson {
    schema: &'static str,
    generated_ms: u64,
    reservations: Vec<Row>,
}

/// One reservation, as `reserve list` shows it.
#[derive(Serialize)]
struct Row {
    name: String,
    start_ms: u64,
    end_ms: u64,
    /// `waiting`, `active` or `ended`.
    state: &'static str,
    users: Vec<String>,
    gpu_count: u32,
    /// Named GPUs' indices, or the GPUs a count holds now (not for an ended one).
    gpus: Vec<String>,
    /// Why it cannot be honoured in full now, or `None`.
    problem: Option<String>,
    created_by: String,
}

fn list(home: &Home, args: ReserveListArgs) -> anyhow::Result<()> {
    let state = crate::view::load(home)?;
    let now_ms = SystemClock.now_ms();
    let rows = rows(&state, now_ms);
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = ListJson { schema: RESERVATIONS_SCHEMA, generated_ms: now_ms, reservations: rows };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
        return Ok(());
    }
    if rows.is_empty() {
        writeln!(out, "no reservations (an administrator creates one with carma reserve create)")?;
        return Ok(());
    }
    writeln!(out, "{:<16} {:<8} {:<20} {:<20} {:<12} USERS", "NAME", "STATE", "START", "END", "GPUS")?;
    for row in &rows {
        let gpus = if row.gpus.is_empty() { row.gpu_count.to_string() } else { row.gpus.join(",") };
        writeln!(
            out,
            "{:<16} {:<8} {:<20} {:<20} {:<12} {}",
            escape(&row.name),
            row.state,
            format_ms(row.start_ms),
            format_ms(row.end_ms),
            gpus,
            escape(&row.users.join(","))
        )?;
        if let Some(problem) = &row.problem {
            writeln!(out, "  {}", escape(problem))?;
        }
    }
    Ok(())
}

fn rows(state: &State, now_ms: u64) -> Vec<Row> {
    let resolved = reservations::resolve_now(state, now_ms);
    let mut rows: Vec<Row> = state
        .gpu_reservations
        .values()
        .map(|entry| {
            let found = resolved.iter().find(|r| r.name == entry.name);
            let state_word = if now_ms >= entry.end_ms {
                "ended"
            } else if now_ms >= entry.start_ms {
                "active"
            } else {
                "waiting"
            };
            Row {
                name: entry.name.clone(),
                start_ms: entry.start_ms,
                end_ms: entry.end_ms,
                state: state_word,
                users: entry.users.iter().map(|&uid| users::display(uid)).collect(),
                gpu_count: entry.gpu_count,
                gpus: found.map(|r| r.gpus.iter().map(|g| g.to_string()).collect()).unwrap_or_default(),
                problem: found.and_then(|r| r.problem.clone()),
                created_by: users::display(entry.by_uid),
            }
        })
        .collect();
    rows.sort_by(|a, b| (a.start_ms, &a.name).cmp(&(b.start_ms, &b.name)));
    rows
}
