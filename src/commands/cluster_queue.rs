//! `carma queue --journal DIR` (or `CARMA_JOURNALS=DIR`, or `[slurm] journals` in the system
//! config: `slurm::journals`): the queue of a Slurm cluster, as a login node sees it. Every carma job: the ones still pending from one `squeue --json`, the
//! running and ended ones from the node journals (a directory of the nodes' state
//! directories, e.g. a shared `/srv/carma` that the hooks write as `/srv/carma/%n`), merged
//! as `carma report --merge` merges them (`slurm::cluster`).
//!
//! When squeue gives no answer, one line on stderr says so and what to check, and the table
//! still shows what the journals know.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::render::{self, Columns};
use crate::access::users;
use crate::cli::QueueArgs;
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::home::Home;
use crate::journal::State;
use crate::journal::store::ReadOpen;
use crate::slurm::cluster::{self, ClusterRow};
use crate::slurm::{command, squeue};

/// Schema tag of `carma queue --journal DIR --json` (schema/slurm-queue.schema.json).
pub(super) const SLURM_QUEUE_SCHEMA: &str = "carma.slurm-queue/1";

/// Longest wait for squeue: a login node's view should not hang on a dead controller.
const SQUEUE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Serialize)]
struct SlurmQueueJson<'a> {
    schema: &'static str,
    generated_ms: u64,
    journals: Vec<String>,
    /// Why squeue gave no answer (pending jobs are then missing), or null.
    squeue_error: Option<&'a str>,
    jobs: Vec<JobJson<'a>>,
}

#[derive(Serialize)]
struct JobJson<'a> {
    #[serde(flatten)]
    row: &'a ClusterRow,
    user: Option<String>,
}

/// The journal paths asked for: `--journal`, else `CARMA_JOURNALS`, else the system config's
/// `[slurm] journals` unless a home was named (`--home`, `CARMA_HOME`: that queue is wanted);
/// empty when none says.
pub(super) fn journal_dirs(home: &Home, args: &QueueArgs) -> Result<Vec<PathBuf>> {
    crate::slurm::journals::resolve(&args.journal, home.origin() != crate::home::Origin::Explicit)
}

pub(super) fn run(dirs: &[PathBuf], args: &QueueArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    if args.tree || args.expand || args.format.is_some() || args.state.is_some() || args.name.is_some() {
        return Err(Error::BadInput(
            "--journal shows the cluster's queue: --tree, --expand, --format, --state and --name are for one machine's queue; use --all, --user, --me or --json".into(),
        )
        .into());
    }
    let users = users_filter(args)?;
    let mut journals = Vec::new();
    let mut states = Vec::new();
    for dir in dirs {
        for path in crate::report::journals_in(dir)? {
            states.push(load(&path)?);
            journals.push(path.display().to_string());
        }
    }
    let argv: Vec<String> = ["squeue", "--json"].iter().map(|s| s.to_string()).collect();
    let answer = command::run(&argv, None, SQUEUE_TIMEOUT).map_err(|e| match e {
        Error::Slurm { detail, .. } => detail,
        other => other.to_string(),
    });
    let queued = answer.and_then(|text| squeue::parse(&text));
    let squeue_error = queued.as_ref().err().cloned();
    let rows: Vec<ClusterRow> = cluster::merge(&states, queued.as_deref().ok())
        .into_iter()
        .filter(|r| args.all || !squeue::is_ended(&r.state))
        .filter(|r| users.as_ref().is_none_or(|u| r.uid.is_some_and(|uid| u.contains(&uid))))
        .collect();
    if let Some(error) = &squeue_error {
        eprintln!(
            "carma: squeue failed ({error}); pending jobs are missing, shown is what the node journals have; check slurmctld (`scontrol ping`, `systemctl status slurmctld`) and retry"
        );
    }
    let now = SystemClock.now_ms();
    if args.json {
        let jobs = rows.iter().map(|row| JobJson { row, user: row.uid.and_then(users::name_of) }).collect();
        let json = SlurmQueueJson {
            schema: SLURM_QUEUE_SCHEMA,
            generated_ms: now,
            journals,
            squeue_error: squeue_error.as_deref(),
            jobs,
        };
        writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
        return Ok(());
    }
    let table = table_of(&rows, now);
    if table.is_empty() {
        let hint = if args.all { "" } else { " waiting or running (use --all for ended ones)" };
        writeln!(out, "no carma jobs{hint}")?;
    } else {
        write!(out, "{}", table.render(render::terminal_width()))?;
    }
    Ok(())
}

/// The human table: one row per job, Slurm's columns.
fn table_of(rows: &[ClusterRow], now: u64) -> Columns {
    let mut table = Columns::new(
        vec!["JOBID", "NAME", "USER", "ST", "SHARDS", "NODE", "TRIES", "START", "TIME", "REASON"],
        vec![20, 24, 12, 4, 6, 12, 5, 5, 10, 0],
    );
    for row in rows {
        let time = match (row.started_ms, row.ended_ms) {
            (Some(start), Some(end)) => render::clock_duration(end.saturating_sub(start)),
            (Some(start), None) => render::clock_duration(now.saturating_sub(start)),
            _ => "-".into(),
        };
        table.push(vec![
            row.job.clone(),
            row.name.clone(),
            row.uid.map_or_else(|| "-".into(), users::display),
            row.state.clone(),
            row.shards.map_or_else(|| "-".into(), |s| s.to_string()),
            row.node.clone().unwrap_or_else(|| "-".into()),
            row.attempts.to_string(),
            row.started_ms.map_or_else(|| "-".into(), |ms| render::local_short(ms, now)),
            time,
            row.reason.clone().unwrap_or_default(),
        ]);
    }
    table
}

fn users_filter(args: &QueueArgs) -> Result<Option<Vec<u32>>> {
    let mut uids = args.me.then(|| vec![crate::access::uid::effective()]);
    if let Some(names) = &args.user {
        let list = uids.get_or_insert_with(Vec::new);
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let uid = users::uid_of(name).or_else(|| name.parse().ok()).ok_or_else(|| {
                Error::BadInput(format!("--user {name}: no such user; give a login name or a uid"))
            })?;
            list.push(uid);
        }
    }
    Ok(uids)
}

/// A node's state: its published view when `path` is a state directory (no lock; any user
/// may read it), else the journal file itself.
fn load(path: &Path) -> Result<State> {
    let home = Home::at(path);
    if path.is_dir() && crate::view::is_published(&home) {
        return crate::view::load(&home);
    }
    let journal_path = if path.is_dir() { home.journal_path() } else { path.to_path_buf() };
    match crate::journal::Journal::open_read_only(&journal_path)? {
        ReadOpen::Ready(mut journal) => journal.load_state(),
        ReadOpen::NeedsRepair => Err(Error::BadInput(format!(
            "journal {} needs a repair after a crash; run `carma --home DIR queue` on that node first",
            journal_path.display()
        ))),
    }
}
