//! `carma wait ID...`: block until the tasks end, and exit with their outcome: 0 when every
//! one finished, 1 when one failed or was cancelled (each outcome is printed), 124 when
//! `--timeout` passed first. It polls the published view, so it never holds a lock.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::cli::WaitArgs;
use crate::error::Error;
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::Status;
use crate::text::escape;
use crate::view::{self, lookup};

/// How often the view is read again.
const POLL: Duration = Duration::from_millis(500);
/// The watcher is asked this many times per poll.
const POLL_SLICES: u32 = 5;

pub(super) fn run(home: &Home, args: WaitArgs) -> anyhow::Result<()> {
    run_to(home, args, &mut std::io::stdout().lock())
}

/// `run`, writing to `out` (stdout, or `carma mcp`'s answer).
pub(super) fn run_to(home: &Home, args: WaitArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    run_watched(home, args, out, &mut |_| true)
}

/// How far a wait got, told to its watcher at each poll.
pub(super) struct Progress {
    /// Seconds waited so far.
    pub(super) waited_s: f64,
    /// `--timeout` in seconds, when given.
    pub(super) timeout_s: Option<f64>,
    /// Tasks ended so far.
    pub(super) ended: usize,
    /// Tasks waited for.
    pub(super) of: usize,
}

/// [`run_to`], telling `watch` how far it got at each poll; the wait stops, with nothing
/// more written, as soon as `watch` answers false (an agent cancelled it: `carma mcp`).
pub(super) fn run_watched(
    home: &Home,
    args: WaitArgs,
    mut out: &mut dyn Write,
    watch: &mut dyn FnMut(&Progress) -> bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let ids = resolve(home, &args.ids)?;
    loop {
        let state = view::load(home)?;
        let ended: Vec<_> =
            ids.iter().filter_map(|id| state.tasks.get(id).filter(|t| t.status().is_terminal())).collect();
        let progress = Progress {
            waited_s: started.elapsed().as_secs_f64(),
            timeout_s: args.timeout.map(|t| t.as_secs_f64()),
            ended: ended.len(),
            of: ids.len(),
        };
        if !watch(&progress) {
            return Ok(());
        }
        if ended.len() == ids.len() {
            let mut failed = 0;
            for task in &ended {
                let why = task.end_reason().map(|r| format!(": {}", escape(r))).unwrap_or_default();
                if !args.quiet {
                    writeln!(
                        out,
                        "task {} ({}) {}{why}",
                        task.id,
                        escape(&task.spec.name),
                        task.status().as_str().to_lowercase()
                    )?;
                }
                if !args.quiet && ids.len() == 1 {
                    for (label, value) in crate::notify::efficiency::lines(task) {
                        writeln!(out, "  {label:<12}{value}")?;
                    }
                }
                if !args.quiet {
                    super::show::print_stderr_tail(home, task, &mut out)?;
                }
                failed += usize::from(task.status() != Status::Finished);
            }
            if failed > 0 {
                return Err(
                    Error::TasksFailed(format!("{failed} of {} task(s) did not finish", ids.len())).into()
                );
            }
            return Ok(());
        }
        if args.timeout.is_some_and(|limit| started.elapsed() >= limit) {
            let left = ids.len() - ended.len();
            return Err(Error::WaitTimeout(format!(
                "{left} of {} task(s) still not ended after --timeout",
                ids.len()
            ))
            .into());
        }
        // In slices, so a watcher that says stop (a cancelled agent's request) is heard
        // within one.
        for _ in 0..POLL_SLICES {
            std::thread::sleep(POLL / POLL_SLICES);
            if !watch(&progress) {
                return Ok(());
            }
        }
    }
}

/// Every query as a task id, tasks still in the spool included (they will be ingested).
fn resolve(home: &Home, queries: &[String]) -> anyhow::Result<Vec<TaskId>> {
    let state = view::load(home)?;
    let spooled = lookup::spooled(home, &state);
    let mut ids = Vec::with_capacity(queries.len());
    for query in queries {
        match lookup::resolve(&state, &spooled, query)? {
            lookup::Target::Task(found) => ids.push(found.id().clone()),
            lookup::Target::Array { members, .. } => ids.extend(members.iter().map(|m| m.id().clone())),
        }
    }
    Ok(ids)
}
