//! One tick: the single entry point that `carma tick` (and later `carma simulate`) runs.
//!
//! 1. Sample the GPUs, before taking the lock (GPM needs a short sleep between samples).
//! 2. Take the exclusive lock and load State.
//! 3. Commit A: the samples, the ingested spool (read once by `intake::observe`, judged by
//!    the pure `ingest::decide`), and the reconciliation of every active attempt (exits, OOM
//!    recovery decisions, lost supervisors, adoptions), and the attempts stopped for using more
//!    GPU memory than they declared on a shared GPU (`enforce`). Then remove the ingested spool files:
//!    a crash leaves either the file (re-ingested) or the event plus the file (recognised by
//!    id and removed), never neither.
//!    Then journal a memory estimate for each waiting task with a model summary and none yet.
//! 4. Decide placements with the pure core (none while the state directory's filesystem is
//!    below its free-space floor: `space`, unless some users' own bytes filled it: then only
//!    their tasks wait, `userbytes`); commit B: Placed, changed Pending reasons,
//!    Cancelled for tasks whose dependency can never be met, and a changed backfill
//!    reservation (Reserved).
//! 5. Launch the placed attempts (and any placed-but-unclaimed ones); start the end notices
//!    of tasks that asked for one (`notify`); commit C: Launched, Notified/NotifyFailed and
//!    TickCompleted. Release the lock.
//!
//! A crash between B and C leaves Placed attempts without Launched; step 3 of the next
//! tick adopts their supervisors or launches them, and the supervisor's exclusive claim
//! guarantees that no attempt runs twice.

mod admit;
mod checkpoint;
mod enforce;
mod estimate;
pub mod gate;
mod gpus;
mod host_memory;
mod ingest;
pub mod launch;
mod learned;
mod notices;
mod oom_evidence;
mod place;
mod preempt;
mod reconcile;
mod requests;
mod requeue;
mod retention;
mod runner;
pub mod slurm_env;
mod space;
mod suspend;
mod suspended;
#[cfg(test)]
mod tests;
mod usage;
mod userbytes;

use std::time::{Duration, Instant};

pub use admit::{priority_refusal, priority_refusal_for_user};
pub use estimate::{ESTIMATES_PER_TICK_MAX, estimate_records};
pub use gpus::gpu_records;
pub use launch::plan_for;
pub use learned::{expected_run, width_priors};
pub use place::{Placed, PlannedAttempt, place, requirement_mib};
pub use reconcile::Effect;
pub use reconcile::{LAUNCH_DEADLINE_MS, describe};
pub use requests::updatable;
pub use runner::{
    Action, ActiveAttempt, AttemptExit, AttemptLaunch, AttemptRunner, AttemptStart, AttemptStatus,
    ExecRunner, Observation, Observed, RunnerError,
};
pub use space::{DiskFull, disk_full, free_bytes};
pub use usage::{SM_SAMPLE_EVERY_MS, SM_SATURATED};

use crate::clock::Clock;
use crate::config::Config;
use crate::error::Result;
use crate::gpu::GpuProbe;
use crate::home::Home;
use crate::intake;
use crate::journal::{Event, Journal, Record, State, StateCache};
use crate::session;

/// What one tick did, for the CLI and TickCompleted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TickReport {
    /// Submissions taken from the spool (Submitted records).
    pub ingested: u32,
    /// Spool entries refused (Rejected records, the per-user summaries not counted).
    pub rejected: u32,
    /// Attempts placed (Placed records).
    pub placed: u32,
    /// Attempts started (Launched records).
    pub launched: u32,
    /// How long the tick took until its last records were made (TickCompleted), microseconds.
    pub duration_us: u64,
    /// The injected fault that cut this tick short, if any.
    pub crashed_at: Option<Fault>,
    /// Set when the GPU probe started failing (the message) or recovered (empty); the CLI
    /// prints it, so a machine without a driver says so once rather than every tick.
    pub probe_status_changed: Option<String>,
    /// Set while the state directory is below its free-space floor (the free figure, the
    /// floor): no attempt started this tick, or, where some users' own bytes filled it, none
    /// of theirs (`userbytes`). The CLI prints it every such tick.
    pub disk_full: Option<String>,
}

/// Everything a tick needs from outside: the four edges (clock, GPUs, runner, journal in
/// `home`) and the configuration.
pub struct TickContext<'a> {
    /// The state directory: journal, spool, runs, private copies.
    pub home: &'a Home,
    /// The time the tick stamps its records with.
    pub clock: &'a dyn Clock,
    /// How long to wait for `carma.lock` before giving up.
    pub lock_wait: Duration,
    /// The GPUs, sampled before the lock is taken.
    pub probe: &'a mut dyn GpuProbe,
    /// Why no probe could be built (e.g. no NVIDIA driver); the tick then runs without GPUs.
    pub probe_error: Option<String>,
    /// What starts, observes and stops attempts (detached supervisors, or the simulator's).
    pub runner: &'a mut dyn AttemptRunner,
    /// The queue's configuration.
    pub config: &'a Config,
    /// A crash to inject (fault-injection tests and the simulator); `None` in production.
    pub fault: Option<Fault>,
    /// The State left by this process's previous tick, for a process that ticks in a loop
    /// (the simulator); `None` loads it from the journal, as `carma tick` (one process per
    /// tick) must. Either way the tick starts from the journal's fold.
    pub state_cache: Option<&'a mut StateCache>,
    /// Free bytes on the state directory's filesystem, measured by the caller at the start of
    /// the tick ([`free_bytes`]); `None` (the simulator, a failed measurement) counts as
    /// plenty. Below `[limits] free-space-floor` no new attempt is placed.
    pub state_free_bytes: Option<u64>,
}

/// Where a tick can be made to stop dead, as if killed, to test crash recovery. Stopping
/// here skips every later step, exactly like a SIGKILL would; the lock is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// After Placed is committed, before any launch.
    CrashAfterPlaced,
    /// After the launches, before Launched is committed.
    CrashAfterLaunch,
}

impl std::str::FromStr for Fault {
    type Err = String;
    fn from_str(text: &str) -> std::result::Result<Fault, String> {
        match text {
            "crash-after-placed" => Ok(Fault::CrashAfterPlaced),
            "crash-after-launch" => Ok(Fault::CrashAfterLaunch),
            _ => Err(format!("unknown fault {text:?}; use crash-after-placed or crash-after-launch")),
        }
    }
}

/// Runs one tick: the steps in the module docs, in that order, under `carma.lock`.
// Long on purpose: the whole tick reads top to bottom (observe, commit, decide, commit,
// launch, commit, publish), one call a step; the order is what crash safety rests on, so
// it stays in one place rather than spread over helpers.
pub fn run(ctx: &mut TickContext) -> Result<TickReport> {
    let started = Instant::now();
    let inventory = crate::inventory::Inventory::load(ctx.home);
    let samples = gpus::sample(ctx, inventory.as_ref());
    let TickContext { home, clock, lock_wait, runner, config, fault, state_cache, state_free_bytes, .. } =
        ctx;
    let free_measured = *state_free_bytes;
    let fault = *fault;
    let (home, clock, config) = (*home, *clock, *config);
    session::write_cached(home, *lock_wait, state_cache.as_deref_mut(), |journal, state| {
        let now = clock.now_ms();
        let mut report = TickReport::default();

        // Commit A: observations and their consequences.
        let mut records = gpus::gpu_records(state, &samples, now, &mut report);
        // Root's scratch copies that a killed check left behind go first.
        crate::scratch::sweep_private(&home.private_dir());
        // Quarantine is cleaned before this tick adds to it (ages and what older ticks left).
        if let Err(err) = intake::clean_quarantine(home) {
            eprintln!("carma tick: {err}");
        }
        let mut scan = intake::scan(home)?;
        let mut limits = gpus::limits(state, &samples);
        limits.time_limit_max_ms = config.limits.time_limit_max_ms;
        // Ingest: observe the spool once, decide purely; settled after the commit.
        let spool = intake::observe(&mut scan, state, limits);
        let ingested = ingest::decide(state, &spool, limits, config, now);
        report.ingested += ingested.ingested;
        report.rejected += ingested.rejected;
        records.extend(ingested.records);
        let present = samples.as_deref().unwrap_or_default();
        let observed = usage::observed_mib(state, present, &**runner);
        records.extend(usage::peak_records(state, &observed, now));
        // SM samples always: the projected-SM gate learns from them and `show`'s efficiency
        // reads them; at most one per attempt a minute (`SM_SAMPLE_EVERY_MS`) bounds them.
        let observed_sm = usage::observed_sm(state, present, &**runner);
        records.extend(usage::sm_records(state, &observed_sm, now));
        // Reconcile: observe every active attempt once, decide purely, take the claims.
        let active = reconcile::active(state);
        let mut seen = runner.observe(&active);
        seen.peak_mib.clone_from(&observed);
        seen.gpu_faults = gpus::unhealthy_targets(present);
        // Enforce: attribute GPU processes to running attempts, decide who is over its share.
        let enforced = enforce::enforce(state, present, &**runner, &seen, &records, config, now);
        seen.over_share.clone_from(&enforced.over_share);
        seen.memory_now = oom_evidence::memory_now(present);
        // The jobs' checkpoint reports first: each precedes whatever end this tick records.
        let mut effects = checkpoint::decide(state, &seen, now);
        effects.extend(reconcile::decide(state, &seen, config, now));
        let reconciled = reconcile::take_claims(effects, &mut **runner, now);
        records.extend(enforced.records);
        records.extend(reconciled.records);
        let ended = ending_tasks(state, &records);
        commit(journal, &records, state)?;
        // Then apply: stop what the decision stops, now that its records are committed.
        runner.apply(&enforced.stops);
        runner.apply(&reconciled.actions);
        userbytes::seal_ended(home, state, &active, config);
        retention::prune(home, state, &config.retention, now);
        let private = intake::Private::new(home);
        intake::settle(&private, &scan, &ingested.settle, &ended)?;
        // And again once this tick's refusals are in: each user's share of quarantine is held
        // to its bound after every tick, not a tick later (the Rejected records say what each
        // refusal was; the newest that fit the bound stay for an administrator to look at).
        if let Err(err) = intake::clean_quarantine(home) {
            eprintln!("carma tick: {err}");
        }
        for (task, attempt) in &ingested.to_stop {
            // Best effort: a supervisor that is already gone shows up in the next reconcile.
            let _ = runner.stop(task.as_str(), *attempt);
        }
        gpus::write_inventory(home, state, &samples, now)?;

        // Tasks of carma 0.1 that name a summary it never captured: say so once.
        commit(journal, &estimate::estimate_records(state, now), state)?;

        // Commit B: the decision; below the free-space floor, only the reasons (or, where
        // some users' bytes filled it, theirs wait and the others' go on: `userbytes`).
        let no_gpu_reason = samples.as_ref().err().map(String::as_str);
        let holds = userbytes::below_floor(home, state, config, free_measured);
        report.disk_full.clone_from(&holds.detail);
        let disk_full_reason = holds.all.as_ref().map(|held| held.reason.as_str());
        // Suspensions: what the journal holds against what the jobs show (finishing what a
        // killed tick left undone, keeping each whole and bounded), then the resumes due.
        let tool = crate::exec::cuda_checkpoint::Budget::new(Duration::from_millis(
            config.sched.preemption.cuda_checkpoint_budget_ms,
        ));
        let steps = suspended::decide(state, &suspended::observe(state, &**runner), config, now);
        let ended_suspensions = suspended::apply(&steps, present, &**runner, config, &tool, now);
        commit(journal, &ended_suspensions, state)?;
        suspended::end(&ended_suspensions, &mut **runner);
        let resumed = suspend::resume_due(state, present, &observed, config, now);
        commit(journal, &resumed, state)?;
        suspend::resume(&resumed, &**runner, config, &tool);
        let mut placed = place::place(
            state,
            present,
            &observed,
            config,
            now,
            no_gpu_reason,
            disk_full_reason,
            &holds.users,
        );
        report.placed = placed.attempts.len() as u32;
        let to_suspend = suspend::choose(&mut placed, present, &**runner, config, &tool);
        commit(journal, &placed.records, state)?;
        let undone = suspend::suspend(&to_suspend, &**runner, now, &tool);
        commit(journal, &undone.records, state)?;
        placed.preempt_notices.extend(undone.notices);
        private.forget(&placed.cancelled);
        for (task, attempt) in &placed.preempt_notices {
            // Best effort: a victim that is not warned is still stopped after the grace.
            let _ = runner.notice_preemption(task.as_str(), *attempt);
        }
        if fault == Some(Fault::CrashAfterPlaced) {
            report.crashed_at = fault;
            return Ok(report);
        }

        // Launch, then commit C.
        let mut to_launch = reconciled.relaunch;
        to_launch.extend(placed.attempts);
        let clock_ms = || clock.now_ms();
        let secrets = |task: &crate::journal::Task| secrets_of(&private, journal, task);
        let mut records = launch::launch_all(state, &to_launch, &mut **runner, config, &secrets, &clock_ms);
        report.launched = records.len() as u32;
        records.extend(notify_records(state, &mut **runner, config, clock.now_ms()));
        if fault == Some(Fault::CrashAfterLaunch) {
            report.crashed_at = fault;
            return Ok(report);
        }
        report.duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        records.push(Record { time_ms: clock.now_ms(), event: tick_completed(&report, placed.rr_cursor) });
        commit(journal, &records, state)?;
        Ok(report)
    })
}

/// A task's private parts: the copy root's vault (`private/`) keeps for it, or, for a task of
/// carma 0.1 (whose spool file was removed at ingest), the values in its Submitted record.
fn secrets_of(
    private: &intake::Private,
    journal: &crate::journal::Journal,
    task: &crate::journal::Task,
) -> std::result::Result<launch::Private, String> {
    match private.read(&task.id) {
        Ok(submission) => Ok(launch::Private { env: submission.env, script_text: submission.script_text }),
        Err(reason) => match journal.legacy_env(task.submit_seq).map_err(|e| e.to_string())? {
            Some(legacy) => Ok(launch::Private { env: legacy.into_iter().collect(), script_text: None }),
            None => Err(format!("{reason}; resubmit the task")),
        },
    }
}

/// Starts the notices due (ends, BEGIN/REQUEUE mails, time-limit mails, array summaries) of
/// up to [`crate::notify::NOTIFY_PER_TICK_MAX`] tasks and arrays, an equal share per user
/// (`notices`), and returns what happened, to commit.
fn notify_records(
    state: &State,
    runner: &mut dyn AttemptRunner,
    config: &Config,
    now_ms: u64,
) -> Vec<Record> {
    const MAX: usize = crate::notify::NOTIFY_PER_TICK_MAX;
    let due = notices::due(state, &config.notify, now_ms);
    let mut records = Vec::new();
    for (id, kind, notices) in due.into_iter().take(MAX) {
        if notices.is_empty() {
            // Cannot happen for a task the fold queued; said rather than retried forever.
            let reason = "the task names no notice".to_string();
            records.push(Record {
                time_ms: now_ms,
                event: Event::NotifyFailed { task: id.clone(), channel: "none".into(), notice: kind, reason },
            });
            continue;
        }
        for notice in notices {
            let kind = kind.clone();
            let event = match notice {
                Ok(notice) => match runner.notify(&notice) {
                    Ok(detail) => Event::Notified {
                        task: id.clone(),
                        channel: notice.channel.name().into(),
                        notice: kind,
                        detail,
                    },
                    Err(error) => Event::NotifyFailed {
                        task: id.clone(),
                        channel: notice.channel.name().into(),
                        notice: kind,
                        reason: error.to_string(),
                    },
                },
                Err((channel, reason)) => Event::NotifyFailed {
                    task: id.clone(),
                    channel: channel.name().into(),
                    notice: kind,
                    reason,
                },
            };
            records.push(Record { time_ms: now_ms, event });
        }
    }
    records
}

/// Tasks that `records` end for good (Finished, Failed, Cancelled, MemoryExceeded): their private copies can
/// go once the records are committed.
fn ending_tasks(state: &State, records: &[Record]) -> Vec<crate::id::TaskId> {
    records
        .iter()
        .filter(|r| {
            matches!(
                r.event,
                Event::Finished { .. }
                    | Event::Failed { .. }
                    | Event::Cancelled { .. }
                    | Event::MemoryExceeded { .. }
            )
        })
        .filter_map(|r| r.event.task().cloned())
        .filter(|id| state.tasks.get(id).is_some_and(|t| !t.status().is_terminal()))
        .collect()
}

fn tick_completed(report: &TickReport, rr_cursor: u32) -> Event {
    Event::TickCompleted {
        ingested: report.ingested,
        rejected: report.rejected,
        placed: report.placed,
        duration_us: report.duration_us,
        rr_cursor,
    }
}

/// Appends what the tick decided. Every record the tick writes must change the fold: in debug
/// builds (tests, the simulator, the fault bench) a record its own fold ignores stops the run,
/// naming it, because it means a decision was made on a State that the journal does not hold.
fn commit(journal: &mut Journal, records: &[Record], state: &mut State) -> Result<()> {
    journal.append(records, state)?;
    debug_assert!(
        journal.ignored().is_empty(),
        "the tick wrote records its fold ignores (seq, why): {:?}",
        journal.ignored()
    );
    Ok(())
}
