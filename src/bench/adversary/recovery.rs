//! Mallory's recovery moves (issues 32 and 40) and the invariants that hold a relaunch to
//! carma's own evidence and to the queue's bounds.
//!
//! **Moves.** A job over its share on the shared GPU, beside a job of alice's: the hog (move 20,
//! issue 32: declared 1 GiB, listed at 30,000 MiB in its first attempt) and the grab (move 21,
//! issue 40: declared 1 GiB or nothing at all, so that its share is the queue's default, listed
//! at 7 GiB times its attempt's number, so that each relaunch with what it used is crossed
//! again until its retries run out). A brief grab (move 22): a job that holds 30,000 MiB only
//! between two ticks, then prints a CUDA out-of-memory line and exits 1; the harness lists it
//! on the fake GPU while the job lives and takes it off before the next tick, so only the
//! supervisor's own readings can see it. Idle out-of-memory lines (move 23): a job that prints
//! forty of them over a second, holding nothing, and exits 1. The GPU is kept under 36,000 MiB
//! in use (88 %), so the GPU-wide evidence rule never speaks for a job that held nothing.
//!
//! **Invariants.** (10) the job over its share is the one stopped (decided at the tick that
//! saw it, its processes gone within [`STOP_TICKS_MAX`] ticks), its neighbour never; (12) an
//! out-of-memory is judged on carma's evidence: a job that held nothing is never relaunched for
//! its line, and one whose memory the supervisor could see is relaunched while it has retries;
//! (13) a relaunch of a user-declared figure that was crossed waits in the main queue, never
//! the recovery queue, and every relaunch after a memory stop gets at least what it used; (14)
//! every relaunch after a memory stop or a corroborated out-of-memory uses one of the task's
//! retries (never more relaunches than `min(max_retries, [limits] retries-max)`) and its
//! attempt is charged to its owner's fair share.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{AdversaryBench, Run};
use crate::error::Result;
use crate::id::TaskId;
use crate::journal::{State, Status};
use crate::spec::Submission;

/// GPU memory a hog declares, and what the harness then makes it use on the shared GPU, MiB.
pub(super) const HOG_DECLARED_MIB: u64 = 1024;
pub(super) const HOG_USED_MIB: u64 = 30_000;
/// A grab's attempt N is listed at N times this, MiB.
const GRAB_STEP_MIB: u64 = 7 * 1024;
/// What a brief grab holds between two ticks, MiB (less where the GPU has less room).
const BRIEF_GRAB_MIB: u64 = 30_000;
/// The least a brief grab is listed at for its listing to count, MiB.
const BRIEF_GRAB_MIB_MIN: u64 = 4096;
/// The most the harness keeps listed on the GPU, MiB: under `[sched.recovery]
/// evidence-gpu-percent` of its 40,960, so a full GPU never speaks for a job that held nothing.
pub(super) const LISTED_MIB_MAX: u64 = 36_000;
/// What an honest neighbour is listed at, MiB.
const NEIGHBOUR_MIB: u64 = 900;
/// Ticks after the one that stopped the job over its memory within which its processes must
/// be gone (its supervisor sees the signal, ends the job and writes its exit record)...
pub(super) const STOP_TICKS_MAX: u64 = 3;
/// ...and the wall-clock time it is given at least: back-to-back ticks can be 15 ms apart,
/// less than a supervisor's poll and its SIGTERM's path.
const STOP_TIME_MIN: Duration = Duration::from_secs(2);
/// How long a brief grab's job holds its memory before its out-of-memory line, s.
const BRIEF_HOLD_S: &str = "1.5";
/// The least time the harness must have listed a brief grab for the supervisor, sampling at
/// 500 ms or faster, to have seen it.
const BRIEF_SEEN_MIN: Duration = Duration::from_millis(1000);
/// The most the harness waits between two ticks for a brief grab's job to appear and to end.
const BRIEF_WAIT_MAX: Duration = Duration::from_secs(4);

/// Which job over its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GrabKind {
    /// Issue 32's: 1 GiB declared, 30,000 MiB used, in its first attempt only.
    Hog,
    /// Issue 40's: 1 GiB or nothing declared, 7 GiB times the attempt's number used.
    Grab,
}

/// A task over its share, its neighbour on the GPU, and each attempt the harness listed.
#[derive(Debug, Clone)]
pub(super) struct Grab {
    pub(super) kind: GrabKind,
    pub(super) task: TaskId,
    pub(super) neighbour: TaskId,
    pub(super) declared_mib: Option<u64>,
    /// Attempt → (its job's pid, the tick before which it was listed, MiB listed).
    pub(super) listed: BTreeMap<u32, (u32, u64, u64)>,
    /// Attempt → when the harness first saw its stop decided.
    pub(super) decided_at: BTreeMap<u32, Instant>,
}

impl Grab {
    /// What attempt `n` is listed at, if it is listed at all.
    fn used_mib(&self, n: u32) -> Option<u64> {
        match self.kind {
            GrabKind::Hog => (n == 1).then_some(HOG_USED_MIB),
            GrabKind::Grab => Some(GRAB_STEP_MIB * u64::from(n)),
        }
    }
}

/// A brief grab: its task and, per attempt, how long the harness listed it.
#[derive(Debug, Clone, Default)]
pub(super) struct Brief {
    /// Attempt → (how long it was listed, at how many MiB).
    pub(super) listed: BTreeMap<u32, (Duration, u64)>,
}

impl Run {
    /// Moves 20 and 21: the first play submits the job and alice's neighbour, both long; a
    /// later play lists the job's running attempt over its share (once per attempt).
    pub(super) fn grab(
        &mut self,
        bench: &mut AdversaryBench,
        id: TaskId,
        tick: u64,
        kind: GrabKind,
    ) -> Result<()> {
        if !self.users.jobs {
            return Ok(());
        }
        let Some(at) = self.grabs.iter().position(|g| g.kind == kind) else {
            let declared_mib = match kind {
                GrabKind::Hog => Some(HOG_DECLARED_MIB),
                GrabKind::Grab => self.rng.chance(0.5).then_some(1024),
            };
            let mut submission = Submission::bare(super::long_spec("mallory-grab", &["sleep", "60"]));
            submission.spec.memory_mib = declared_mib;
            submission.spec.max_retries =
                if kind == GrabKind::Hog { 100 } else { (self.rng.next_u64() % 3) as u32 };
            crate::intake::submit_for(&self.home, &submission, id.clone(), self.users.mallory)?;
            let neighbour = self.id();
            let submission = Submission::bare(super::long_spec("alice-neighbour", &["sleep", "60"]));
            crate::intake::submit_for(&self.home, &submission, neighbour.clone(), self.users.alice)?;
            self.long.extend([id.clone(), neighbour.clone()]);
            self.grabs.push(Grab {
                kind,
                task: id,
                neighbour,
                declared_mib,
                listed: BTreeMap::new(),
                decided_at: BTreeMap::new(),
            });
            bench.job_moves += 1;
            return Ok(());
        };
        let grab = self.grabs[at].clone();
        let Some(attempt) =
            self.last_state.as_ref().and_then(|s| s.tasks.get(&grab.task)?.active_attempt().cloned())
        else {
            return Ok(());
        };
        let Some(used) = grab.used_mib(attempt.number).filter(|_| !grab.listed.contains_key(&attempt.number))
        else {
            return Ok(());
        };
        let (Some(pid), Some(neighbour_pid)) = (self.job_pid(&grab.task), self.job_pid(&grab.neighbour))
        else {
            return Ok(());
        };
        // Not a grab when the attempt's share covers it: carma may have given it more than she
        // declared, learned from an earlier relaunch of her same workload (seed 7803: 34.3 GiB
        // for a job declaring 1 GiB, after her earlier grab was relaunched with that).
        let share_covers =
            attempt.requirement_mib.is_some_and(|share| used <= share + self.config.enforce.margin_mib);
        if share_covers || self.listed_mib() + used + NEIGHBOUR_MIB > LISTED_MIB_MAX {
            return Ok(());
        }
        self.list(pid, used, &grab.task);
        self.list(neighbour_pid, NEIGHBOUR_MIB, &grab.neighbour);
        self.list_gpu()?;
        let grab = &mut self.grabs[at];
        grab.listed.insert(attempt.number, (pid, tick, used));
        bench.job_moves += 1;
        if kind == GrabKind::Grab {
            bench.grabs += 1;
        }
        Ok(())
    }

    /// Move 22: a job that will hold memory only between two ticks ([`Run::brief_grabs`]),
    /// then print an out-of-memory line and exit 1; 0 to 2 retries.
    pub(super) fn brief_grab(&mut self, bench: &mut AdversaryBench, id: TaskId) -> Result<()> {
        if !self.users.jobs {
            return Ok(());
        }
        let script = format!("sleep {BRIEF_HOLD_S}; echo '{}' >&2; exit 1", super::FAKE_OOM_LINE);
        let mut submission = Submission::bare(super::small_spec("mallory-brief", &["sh", "-c", &script]));
        submission.spec.max_retries = (self.rng.next_u64() % 3) as u32;
        crate::intake::submit_for(&self.home, &submission, id.clone(), self.users.mallory)?;
        self.briefs.insert(id, Brief::default());
        bench.job_moves += 1;
        Ok(())
    }

    /// Move 23 (and move 15's fake out-of-memory): a job that prints out-of-memory lines
    /// holding nothing.
    pub(super) fn idle_oom(&mut self, bench: &mut AdversaryBench, id: TaskId) -> Result<()> {
        let line = super::FAKE_OOM_LINE;
        let script =
            format!("i=0; while [ $i -lt 40 ]; do echo '{line}' >&2; i=$((i+1)); sleep 0.02; done; exit 1");
        self.job(bench, id.clone(), vec!["sh".into(), "-c".into(), script])?;
        if self.users.jobs {
            self.idle_ooms.push(id);
            bench.idle_ooms += 1;
        }
        Ok(())
    }

    /// Between two ticks: each brief grab's running attempt not listed yet is listed at up to
    /// [`BRIEF_GRAB_MIB`] while its job lives, and taken off once it has ended.
    pub(super) fn brief_grabs(&mut self, bench: &mut AdversaryBench) -> Result<()> {
        let running: Vec<(TaskId, u32)> = self
            .briefs
            .iter()
            .filter_map(|(id, brief)| {
                let attempt = self.last_state.as_ref()?.tasks.get(id)?.active_attempt()?;
                (!brief.listed.contains_key(&attempt.number)).then(|| (id.clone(), attempt.number))
            })
            .collect();
        for (id, attempt) in running {
            let Ok(dir) = crate::exec::run_dir(self.home.root(), id.as_str(), attempt) else { continue };
            let deadline = Instant::now() + BRIEF_WAIT_MAX;
            let pid = loop {
                let pid = crate::exec::read_job_record(&dir).ok().flatten().map(|r| r.job.pid);
                if pid.is_some() || Instant::now() > deadline {
                    break pid;
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            let room = LISTED_MIB_MAX.saturating_sub(self.listed_mib()).min(BRIEF_GRAB_MIB);
            let Some(pid) = pid.filter(|_| room >= BRIEF_GRAB_MIB_MIN) else { continue };
            let exit = dir.join(crate::exec::rundir::EXIT_FILE);
            let listed_at = Instant::now();
            self.list(pid, room, &id);
            self.list_gpu()?;
            while !exit.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            self.listing.remove(&pid);
            self.list_gpu()?;
            let held = listed_at.elapsed();
            if let Some(brief) = self.briefs.get_mut(&id) {
                brief.listed.insert(attempt, (held, room));
            }
            if held >= BRIEF_SEEN_MIN {
                bench.brief_grabs += 1;
            }
        }
        Ok(())
    }

    /// The invariants of this room after `tick`: (10), (12), (13) and (14).
    pub(super) fn recovery_invariants(
        &mut self,
        tick: u64,
        state: &State,
        violations: &mut Vec<String>,
    ) -> Result<()> {
        self.grabs_stopped(tick, state, violations)?;
        self.oom_evidence(state, violations);
        self.relaunches(state, violations);
        Ok(())
    }

    /// (10): each listed attempt over its share is stopped at the tick that saw it (its
    /// MemoryExceeded) and gone within [`STOP_TICKS_MAX`] ticks, and [`STOP_TIME_MIN`] at
    /// least; its neighbour is never blamed.
    /// An attempt that has ended is taken off the GPU.
    fn grabs_stopped(&mut self, tick: u64, state: &State, violations: &mut Vec<String>) -> Result<()> {
        self.prune_listing(state)?;
        let mut found = Vec::new();
        for grab in &mut self.grabs {
            let task = state.tasks.get(&grab.task);
            for (&n, &(_, since, used)) in grab.listed.iter().filter(|(_, (_, since, _))| tick >= *since) {
                let attempt = task.and_then(|t| t.attempts.iter().find(|a| a.number == n));
                let running = attempt.is_some_and(|a| a.is_active());
                let decided = attempt.is_some_and(|a| a.memory_exceeded.is_some())
                    || task.is_some_and(|t| t.end_reason().is_some_and(|why| why.contains("declared")));
                if decided {
                    grab.decided_at.entry(n).or_insert_with(Instant::now);
                }
                let given = grab.decided_at.get(&n).is_some_and(|at| at.elapsed() >= STOP_TIME_MIN);
                if (!decided && tick >= since) || (running && tick > since + STOP_TICKS_MAX && given) {
                    let share =
                        grab.declared_mib.map_or("no figure (the queue's default share)".into(), |d| {
                            format!("{d} MiB declared")
                        });
                    found.push((
                        format!("grab {} {n}", grab.task),
                        format!(
                            "mallory's job {} attempt {n} uses {used} MiB of the shared GPU with {share}: {} (over since tick {since}, now tick {tick})",
                            grab.task,
                            if decided { "stopped, but still runs" } else { "not stopped for it" }
                        ),
                    ));
                }
            }
            let neighbour = state.tasks.get(&grab.neighbour);
            let blamed = neighbour.is_some_and(|t| {
                t.oom_count > 0
                    || t.attempts.iter().any(|a| {
                        a.memory_exceeded.is_some()
                            || a.outcome.as_deref().is_some_and(|o| o.contains("memory"))
                    })
            });
            if blamed {
                found.push((
                    format!("neighbour {}", grab.neighbour),
                    format!("alice's job {} was stopped for mallory's memory", grab.neighbour),
                ));
            }
        }
        for (key, violation) in found {
            self.once(violations, key, violation);
        }
        Ok(())
    }

    /// (12): a job that printed out-of-memory lines holding nothing is not relaunched for
    /// them; a brief grab the supervisor could see (listed at least [`BRIEF_SEEN_MIN`]) at
    /// what the evidence rule calls an out-of-memory (`[sched.recovery]
    /// evidence-process-percent` of its attempt's requirement) is relaunched while it has
    /// retries.
    fn oom_evidence(&mut self, state: &State, violations: &mut Vec<String>) {
        let mut found = Vec::new();
        for id in &self.idle_ooms {
            let history = self.ledger.of(id);
            if !history.ooms.is_empty() || !history.relaunches.is_empty() {
                found.push((
                    format!("idle oom {id}"),
                    format!("mallory's job {id} printed out-of-memory lines holding nothing and was recovered for them"),
                ));
            }
        }
        for (id, brief) in &self.briefs {
            let Some(task) = state.tasks.get(id) else { continue };
            let history = self.ledger.of(id);
            let budget = task.spec.max_retries.min(self.config.limits.retries_max) as usize;
            let percent = u64::from(self.config.sched.recovery.evidence_process_percent);
            for (&n, &(held, mib)) in brief.listed.iter().filter(|(_, (held, _))| *held >= BRIEF_SEEN_MIN) {
                let attempt = task.attempts.iter().find(|a| a.number == n);
                let share = attempt.and_then(|a| a.requirement_mib).unwrap_or(0);
                if mib * 100 < share * percent {
                    continue;
                }
                let ended = attempt.is_some_and(|a| a.ended_ms.is_some());
                let relaunched_before = history.relaunches.iter().filter(|(a, ..)| *a < n).count();
                let relaunched = history.relaunches.iter().any(|(a, ..)| *a == n);
                // Only the attempt the task failed at: one followed by another attempt was
                // requeued (a relaunch, or an out-of-memory beside a neighbour over its share).
                let last = task.attempts.last().is_some_and(|a| a.number == n);
                if ended
                    && last
                    && !relaunched
                    && relaunched_before < budget
                    && task.status() == Status::Failed
                {
                    let why = task.end_reason().unwrap_or("no reason").to_string();
                    found.push((
                        format!("brief {id} {n}"),
                        format!(
                            "mallory's job {id} attempt {n} held {mib} MiB of its {share} MiB share for {} ms between two ticks, then printed an out-of-memory line: no reading of carma's saw it, and it failed with {} of its retries left: {why}",
                            held.as_millis(),
                            budget - relaunched_before
                        ),
                    ));
                }
            }
        }
        for (key, violation) in found {
            self.once(violations, key, violation);
        }
    }

    /// (13) and (14) over every task's relaunches after a memory stop or a corroborated
    /// out-of-memory.
    fn relaunches(&mut self, state: &State, violations: &mut Vec<String>) {
        let now_ms = super::now_ms();
        let usage = crate::tick::gate::usage_by_user(state, &self.config.sched, now_ms);
        let half_life_ms = self.config.sched.fair_share.half_life_ms;
        let mut charged_expected: BTreeMap<u32, f64> = BTreeMap::new();
        let mut found = Vec::new();
        for (id, history) in &self.ledger.tasks {
            let Some(task) = state.tasks.get(id) else { continue };
            if history.relaunches.is_empty() {
                continue;
            }
            let budget = task.spec.max_retries.min(self.config.limits.retries_max);
            if history.relaunches.len() > budget as usize {
                found.push((
                    format!("retries {id}"),
                    format!(
                        "task {id} was relaunched {} times for its memory with {budget} retries (max_retries {}, [limits] retries-max {})",
                        history.relaunches.len(),
                        task.spec.max_retries,
                        self.config.limits.retries_max
                    ),
                ));
            }
            for &(n, recovery, _) in &history.relaunches {
                let used = history.exceeded.iter().find(|(a, _)| *a == n).map(|(_, used)| *used);
                let peak = history.ooms.iter().find(|(a, _)| *a == n).and_then(|(_, peak)| *peak);
                let margin = self.config.enforce.margin_mib;
                let crossed = used.is_some()
                    || task
                        .spec
                        .memory_mib
                        .zip(peak)
                        .is_some_and(|(declared, peak)| peak > declared + margin);
                if let Some(declared) = task.spec.memory_mib.filter(|_| crossed && recovery) {
                    found.push((
                        format!("place {id} {n}"),
                        format!(
                            "task {id} declared {declared} MiB, crossed it in attempt {n} ({} MiB), and was relaunched in the recovery queue, ahead of its normal place",
                            used.or(peak).unwrap_or(0)
                        ),
                    ));
                }
                let next = task.attempts.iter().find(|a| a.number == n + 1);
                if let (Some(used), Some(given)) = (used, next.and_then(|a| a.requirement_mib))
                    && given < used
                {
                    found.push((
                        format!("raise {id} {n}"),
                        format!(
                            "task {id} used {used} MiB in attempt {n} and was relaunched with {given} MiB"
                        ),
                    ));
                }
                let Some(attempt) = task.attempts.iter().find(|a| a.number == n) else { continue };
                let Some(launched) = attempt.launched_ms else { continue };
                let gpus = attempt.gpus.len() as u32;
                let end = attempt.ended_ms.unwrap_or(now_ms);
                *charged_expected.entry(task.submitter_uid).or_default() +=
                    crate::sched::decayed_gpu_ms(gpus, launched, end, now_ms, half_life_ms);
            }
        }
        for (uid, expected) in charged_expected {
            let charged = usage.iter().find(|u| u.user == uid).map_or(0.0, |u| u.gpu_ms);
            if self.config.sched.fair_share.enabled && charged + 1.0 < expected {
                found.push((
                    format!("charge {uid}"),
                    format!(
                        "uid {uid}'s relaunched attempts used {expected:.0} GPU·ms, but fair share charges the user {charged:.0}"
                    ),
                ));
            }
        }
        for (key, violation) in found {
            self.once(violations, key, violation);
        }
    }
}
