//! Mallory's moves against the newest doors (issue 41) and the invariants that keep them shut.
//!
//! **Moves.** (24) Writes into an interactive session's folder: she holds an allocation
//! (`[submit] interactive = "hold"`, what `carma alloc --no-shell` writes, with a 3 s limit) and
//! writes 16 MiB into its `attach/` folder as her own uid while it runs, and 40 MiB once its
//! attempt has ended. (25) SIGCONT of a suspended job: her `--requeue` job (16 GiB, nice 5, a
//! shell and its worker) runs until a 24 GiB task of alice's preempts it; in a `mode =
//! "suspend"` seed it is suspended (a stand-in `cuda-checkpoint`, root's, in a root-only
//! folder), and she then sends SIGCONT, from her own uid, to its processes but the first; a
//! worker the signal woke (not stopped, not frozen 50 ms later) is listed on the GPU again; a requeue seed preempts it instead and the move has
//! nothing more to do. (26) Hold/release loops: alice's `--requeue` job (16 GiB, nice 5, which
//! takes its `USR1` notice and runs on) is preempted by a 24 GiB task of hers, which she then
//! holds while the preemption is in its grace and releases the tick after, again and again.
//! (27) Unlimited and zero time limits: no limit asked, `time_limit = "0"`, `"UNLIMITED"` and
//! `"0:00"` in spool files she writes herself, `carma submit --time 0` and a script saying
//! `#SBATCH --time=0` through the real `carma submit` as her, and `"2h"` over the queue's
//! maximum. (28) Forged carma-only fields: `interactive` in `[task]` (and in a carma 0.1 spool
//! file without `[task]`), `time_limit_source` in `[task]`, and `[submit] interactive = "hold"`
//! on a `--requeue` task, on a command of her own and on an array member.
//!
//! **Invariants.** (15) nothing in an ended attempt's run folder is its submitter's (no file
//! or folder they could still write into root's state directory); its bytes count in (8). (16)
//! no task past its limit: on a queue with `[limits] time-limit-max` every journaled task has
//! a limit within it, from where `show` says it came, and no attempt runs longer than its
//! limit (journaled suspensions not counted) plus [`LIMIT_SLACK_MS`] (the bench's jobs all end
//! at their first SIGTERM or SIGHUP, so the kill grace is never needed); (17) no task gets more
//! preemption notices (Preempted or Suspended, withdrawn or not) than `[sched.preemption]
//! max-per-task`; (18) no field only carma sets comes from a user: each forged spool file is
//! refused, and every interactive task is a shape `carma alloc`/`carma run` make; (19) a
//! suspended attempt is stopped as a whole: after a tick, each of its job's processes is
//! stopped (`T`) or in a frozen cgroup, and no suspension lasts past `[sched.preemption]
//! suspend-max` (4 s in the seeds) by more than [`LIMIT_SLACK_MS`].

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{AdversaryBench, Run};
use crate::error::Result;
use crate::id::TaskId;
use crate::journal::State;
use crate::spec::Submission;

/// What a preempted victim declares, and what its preemptor declares, MiB: the preemptor fits
/// only once the victim has given way.
const VICTIM_MIB: u64 = 16 * 1024;
const PREEMPTOR_MIB: u64 = 24 * 1024;
/// Bytes mallory writes into a live attach folder, and into one whose attempt has ended.
const ATTACH_LIVE_BYTES: u64 = 16 << 20;
const ATTACH_AFTER_BYTES: u64 = 40 << 20;
/// The held allocation's own limit, ms.
const HOLD_LIMIT_MS: u64 = 3000;
/// Past an attempt's limit, how long it may still be seen running (the supervisor's poll,
/// its SIGTERM, the tick that reads its end), ms.
pub(super) const LIMIT_SLACK_MS: u64 = 3000;

/// One of the two scenarios that need most of the GPU (a victim and its preemptor); a seed
/// plays at most one, so an honest task always has room.
#[derive(Debug, Clone)]
pub(super) enum Big {
    /// Move 25: mallory's job suspended for alice's, then SIGCONT'd by her.
    Suspend { victim: TaskId, preemptor: Option<TaskId>, listed: Vec<u32> },
    /// Move 26: alice's job preempted by mallory's, which she holds and releases.
    Loop { victim: TaskId, preemptor: Option<TaskId> },
}

/// Mallory's held allocation and what she wrote into its folder.
#[derive(Debug, Clone)]
pub(super) struct Hold {
    pub(super) task: TaskId,
}

/// The doors' per-seed bookkeeping.
#[derive(Debug, Default)]
pub(super) struct Doors {
    pub(super) big: Option<Big>,
    pub(super) hold: Option<Hold>,
    /// Spool files with a forged carma-only field, and what each forged.
    pub(super) forged: Vec<(TaskId, &'static str)>,
    /// Alice's preemptors: each starts once a victim has given way, after its grace, so (6)'s
    /// bound in ticks is not theirs ((17) and the preemption's own rules bound them).
    pub(super) preemptors: BTreeSet<TaskId>,
}

impl Run {
    /// Move 24: the first play holds an allocation; later ones write into its `attach/`.
    pub(super) fn attach_writes(&mut self, bench: &mut AdversaryBench, id: TaskId) -> Result<()> {
        if !self.users.jobs {
            return Ok(());
        }
        let Some(hold) = self.doors.hold.clone() else {
            let mut submission = Submission::bare(super::small_spec("mallory-hold", &[]));
            submission.spec.command =
                crate::spec::carma_only::HOLD_COMMAND.iter().map(|w| w.to_string()).collect();
            submission.spec.interactive = Some("hold".into());
            submission.spec.time_limit_ms = Some(HOLD_LIMIT_MS);
            crate::intake::submit_for(&self.home, &submission, id.clone(), self.users.mallory)?;
            self.long.insert(id.clone());
            self.doors.hold = Some(Hold { task: id });
            bench.job_moves += 1;
            return Ok(());
        };
        let Some(task) = self.last_state.as_ref().and_then(|s| s.tasks.get(&hold.task)) else {
            return Ok(());
        };
        let Some(attempt) = task.attempts.last().filter(|a| a.launched_ms.is_some()) else { return Ok(()) };
        let Ok(dir) = crate::exec::run_dir(self.home.root(), hold.task.as_str(), attempt.number) else {
            return Ok(());
        };
        let ended = attempt.ended_ms.is_some();
        let bytes = if ended { ATTACH_AFTER_BYTES } else { ATTACH_LIVE_BYTES };
        let path = dir.join(crate::exec::interactive::ATTACH_DIR).join(format!("junk-{id}"));
        as_user(
            self.users.mallory,
            "sh",
            &["-c", "head -c \"$1\" /dev/zero > \"$2\"", "sh", &bytes.to_string(), &path.to_string_lossy()],
        );
        // Counted as tried: whether a write lands is what (8) and (15) judge.
        if ended {
            bench.attach_writes_after += 1;
        } else if dir.join(crate::exec::interactive::ATTACH_DIR).exists() {
            bench.attach_writes += 1;
        }
        Ok(())
    }

    /// Move 25 (see the module docs).
    pub(super) fn sigcont(&mut self, bench: &mut AdversaryBench, id: TaskId) -> Result<()> {
        if !self.users.jobs {
            return Ok(());
        }
        let Some(big) = self.doors.big.clone() else {
            let mut submission =
                Submission::bare(super::long_spec("mallory-suspendable", &["sh", "-c", "sleep 60 & wait"]));
            submission.spec.memory_mib = Some(VICTIM_MIB);
            submission.spec.nice = 5;
            submission.spec.requeue = Some(true);
            submission.spec.time_limit_ms = Some(20_000);
            crate::intake::submit_for(&self.home, &submission, id.clone(), self.users.mallory)?;
            self.long.insert(id.clone());
            self.doors.big = Some(Big::Suspend { victim: id, preemptor: None, listed: Vec::new() });
            bench.job_moves += 1;
            return Ok(());
        };
        let Big::Suspend { victim, preemptor, listed } = big else { return Ok(()) };
        let Some(attempt) =
            self.last_state.as_ref().and_then(|s| s.tasks.get(&victim)?.active_attempt().cloned())
        else {
            return Ok(());
        };
        let Some(pid) = self.job_pid(&victim) else { return Ok(()) };
        if preemptor.is_none() {
            // Its process on the GPU, as NVML lists a CUDA process, and alice's bigger task.
            if self.listed_mib() + VICTIM_MIB <= super::recovery::LISTED_MIB_MAX {
                self.list(pid, VICTIM_MIB, &victim);
                self.list_gpu()?;
            }
            let mut submission = Submission::bare(super::long_spec("alice-urgent", &["sleep", "2"]));
            submission.spec.memory_mib = Some(PREEMPTOR_MIB);
            let urgent = self.id();
            crate::intake::submit_for(&self.home, &submission, urgent.clone(), self.users.alice)?;
            self.long.insert(urgent.clone());
            self.doors.preemptors.insert(urgent.clone());
            self.doors.big = Some(Big::Suspend { victim, preemptor: Some(urgent), listed: vec![pid] });
            return Ok(());
        }
        if attempt.suspended.is_none() {
            return Ok(());
        }
        // Suspended: its memory was checkpointed away; she wakes the rest of the job and its
        // worker takes its memory again.
        let mut listed = listed;
        for pid in &listed {
            self.listing.remove(pid);
        }
        let workers: Vec<u32> = descendants(pid);
        let words: Vec<String> = workers.iter().map(u32::to_string).collect();
        let mut args = vec!["-CONT"];
        args.extend(words.iter().map(String::as_str));
        if !workers.is_empty() && as_user(self.users.mallory, "kill", &args) {
            bench.sigconts += 1;
            // Only a worker that the signal woke takes its memory again: a frozen cgroup
            // holds it whatever it is sent.
            std::thread::sleep(std::time::Duration::from_millis(50));
            let woke = proc_state(workers[0]).is_some_and(|s| !"TtZX".contains(s)) && !frozen(workers[0]);
            if woke && self.listed_mib() + VICTIM_MIB <= super::recovery::LISTED_MIB_MAX {
                self.list(workers[0], VICTIM_MIB, &victim);
                listed.push(workers[0]);
            }
        }
        self.list_gpu()?;
        self.doors.big = Some(Big::Suspend { victim, preemptor, listed });
        Ok(())
    }

    /// Move 26 (see the module docs).
    pub(super) fn hold_release(&mut self, bench: &mut AdversaryBench, id: TaskId) -> Result<()> {
        if !self.users.jobs {
            return Ok(());
        }
        let Some(big) = self.doors.big.clone() else {
            let script = "trap '' USR1; sleep 60 & wait";
            let mut submission = Submission::bare(super::long_spec("alice-requeue", &["sh", "-c", script]));
            submission.spec.memory_mib = Some(VICTIM_MIB);
            submission.spec.nice = 5;
            submission.spec.requeue = Some(true);
            submission.spec.signal = Some("USR1@1".into());
            let victim = self.id();
            crate::intake::submit_for(&self.home, &submission, victim.clone(), self.users.alice)?;
            self.long.insert(victim.clone());
            self.doors.big = Some(Big::Loop { victim, preemptor: None });
            return Ok(());
        };
        let Big::Loop { victim, preemptor } = big else { return Ok(()) };
        let Some(state) = self.last_state.as_ref() else { return Ok(()) };
        let Some(preemptor) = preemptor else {
            if state
                .tasks
                .get(&victim)
                .and_then(|t| t.active_attempt())
                .is_some_and(|a| a.launched_ms.is_some())
            {
                let mut submission = Submission::bare(super::small_spec("mallory-urgent", &["true"]));
                submission.spec.memory_mib = Some(PREEMPTOR_MIB);
                crate::intake::submit_for(&self.home, &submission, id.clone(), self.users.mallory)?;
                self.doors.big = Some(Big::Loop { victim, preemptor: Some(id) });
                bench.job_moves += 1;
            }
            return Ok(());
        };
        let Some(task) = state.tasks.get(&preemptor).filter(|t| t.attempts.is_empty()) else { return Ok(()) };
        let in_grace = state
            .tasks
            .get(&victim)
            .and_then(|t| t.active_attempt())
            .is_some_and(|a| a.preempted.is_some() || a.suspended.is_some());
        let verb = if task.held() {
            "release"
        } else if in_grace {
            "hold"
        } else {
            return Ok(());
        };
        let path = self.folder(self.users.mallory).join(format!("{preemptor}.{verb}"));
        super::moves::write_as(&path, b"\n", self.users.mallory)?;
        bench.hold_release_loops += 1;
        Ok(())
    }

    /// Move 27 (see the module docs).
    pub(super) fn unlimited(&mut self, bench: &mut AdversaryBench, id: TaskId) -> Result<()> {
        let variant = self.rng.next_u64() % 7;
        let exe = std::env::current_exe().ok().filter(|e| e.file_name().is_some_and(|n| n == "carma"));
        let submitted = match (variant, exe) {
            (4, Some(exe)) => self.submit_as_mallory(&exe, &["--time", "0", "--", "sleep", "5"]),
            (5, Some(exe)) => {
                let script = self.home.root().join(format!("unlimited-{id}.sh"));
                let text = "#!/bin/sh\n#SBATCH --time=0\n#SBATCH --job-name=mallory-unlimited\nsleep 5\n";
                crate::exec::write_file_atomic(&script, text.as_bytes(), 0o644).map_err(|e| {
                    crate::error::Error::BadInput(format!("adversary bench: {}: {e}", script.display()))
                })?;
                self.submit_as_mallory(&exe, &[&script.to_string_lossy()])
            }
            _ => {
                let limit = ["", "0", "UNLIMITED", "0:00", "", "", "2h"][variant as usize];
                let mut table = spool_table(&super::small_spec("mallory-unlimited", &["sleep", "5"]));
                if let Some(task) = table.get_mut("task").and_then(toml::Value::as_table_mut) {
                    task.remove("time_limit");
                    if !limit.is_empty() {
                        task.insert("time_limit".into(), limit.into());
                    }
                }
                let path = self.folder(self.users.mallory).join(format!("{id}.toml"));
                super::moves::write_as(&path, table.to_string().as_bytes(), self.users.mallory)?;
                Some(id)
            }
        };
        if let Some(id) = submitted {
            // Its limit is what is under test, not the waits between ticks.
            self.long.insert(id);
            bench.unlimited_asks += 1;
        }
        Ok(())
    }

    /// `carma submit --parsable ARGS` run as mallory, in the seed's state directory (hers to
    /// enter, not to write); the id it printed.
    fn submit_as_mallory(&self, exe: &Path, args: &[&str]) -> Option<TaskId> {
        let mallory = self.users.mallory;
        let out = Command::new(exe)
            .arg("submit")
            .arg("--parsable")
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("CARMA_HOME", self.home.root())
            .current_dir(self.home.root())
            .uid(mallory)
            .gid(mallory)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        TaskId::parse(text.trim().split(';').next().unwrap_or_default())
    }

    /// Move 28 (see the module docs).
    pub(super) fn forge(&mut self, bench: &mut AdversaryBench, id: TaskId) -> Result<()> {
        let mut spec = super::small_spec("mallory-forged", &["sleep", "5"]);
        let variant = self.rng.next_u64() % 6;
        let mut submission = None;
        let what: &'static str = match variant {
            0 => "interactive in [task]",
            1 => "time_limit_source in [task]",
            2 => "interactive in a spool file without [task]",
            3 => {
                spec.requeue = Some(true);
                spec.command = crate::spec::carma_only::HOLD_COMMAND.iter().map(|w| w.to_string()).collect();
                "[submit] interactive = \"hold\" on a --requeue task"
            }
            4 => "[submit] interactive = \"hold\" on her own command",
            _ => {
                spec.array = Some(crate::spec::ArrayMember {
                    id: self.id(),
                    index: 0,
                    count: 2,
                    running_max: None,
                    params: Vec::new(),
                });
                spec.command = crate::spec::carma_only::HOLD_COMMAND.iter().map(|w| w.to_string()).collect();
                "[submit] interactive = \"hold\" on an array member"
            }
        };
        if variant >= 3 {
            spec.interactive = Some("hold".into());
            submission = Some(Submission::bare(spec.clone()));
        }
        let mut table = match &submission {
            Some(s) => s.to_spool_toml().parse::<toml::Table>().unwrap_or_default(),
            None => spool_table(&spec),
        };
        if let Some(task) = table.get_mut("task").and_then(toml::Value::as_table_mut) {
            match variant {
                0 => drop(task.insert("interactive".into(), "hold".into())),
                1 => drop(task.insert("time_limit_source".into(), "task".into())),
                _ => {}
            }
        }
        if variant == 2 {
            let mut bare = table.get("task").and_then(toml::Value::as_table).cloned().unwrap_or_default();
            bare.insert("interactive".into(), "hold".into());
            table = bare;
        }
        let path = self.folder(self.users.mallory).join(format!("{id}.toml"));
        super::moves::write_as(&path, table.to_string().as_bytes(), self.users.mallory)?;
        self.long.insert(id.clone());
        self.doors.forged.push((id, what));
        bench.forged_fields += 1;
        Ok(())
    }

    /// The invariants of this room after `tick`: (15) to (19).
    pub(super) fn door_invariants(&mut self, state: &State, violations: &mut Vec<String>) {
        let mut found = Vec::new();
        self.run_folders_sealed(state, &mut found);
        self.time_limits(state, &mut found);
        let max = self.config.sched.preemption.max_per_task;
        for (id, history) in &self.ledger.tasks {
            if history.notices.len() > max as usize {
                found.push((
                    format!("notices {id}"),
                    format!(
                        "task {id} got {} preemption notices ({} withdrawn), over [sched.preemption] max-per-task {max}",
                        history.notices.len(),
                        history.withdrawals
                    ),
                ));
            }
        }
        for (id, what) in &self.doors.forged {
            if state.tasks.contains_key(id) {
                found.push((
                    format!("forged {id}"),
                    format!("mallory's spool file {id} forged {what} and was accepted"),
                ));
            }
        }
        for task in state.tasks.values() {
            if let Err(why) = crate::spec::carma_only::check_session(&task.spec) {
                found.push((
                    format!("session {}", task.id),
                    format!("task {} is an impossible session: {why}", task.id),
                ));
            }
        }
        self.suspended_stopped(state, &mut found);
        for (key, violation) in found {
            self.once(violations, key, violation);
        }
    }

    /// (15): no entry of an ended attempt's run folder (its supervisor gone) is its
    /// submitter's.
    fn run_folders_sealed(&self, state: &State, found: &mut Vec<(String, String)>) {
        for task in state.tasks.values() {
            for attempt in task.attempts.iter().filter(|a| a.ended_ms.is_some() && a.launched_ms.is_some()) {
                let Ok(dir) = crate::exec::run_dir(self.home.root(), task.id.as_str(), attempt.number) else {
                    continue;
                };
                if !dir.join(crate::exec::rundir::EXIT_FILE).exists() {
                    continue;
                }
                if let Some(kept) = owned_by(&dir, task.submitter_uid) {
                    let rest = kept.strip_prefix(&dir).unwrap_or(&kept).display().to_string();
                    found.push((
                        format!("sealed {} {}", task.id, attempt.number),
                        format!(
                            "task {} attempt {} has ended, but `{rest}` in its run folder is still its submitter's (uid {}), who can write into root's state directory",
                            task.id, attempt.number, task.submitter_uid
                        ),
                    ));
                }
            }
        }
    }

    /// (16), during the seed: limits within the queue's maximum, and no attempt running past
    /// its limit.
    fn time_limits(&self, state: &State, found: &mut Vec<(String, String)>) {
        use crate::spec::time_limit::TimeLimitSource::*;
        let limits = &self.config.limits;
        for task in state.tasks.values() {
            let limit = task.spec.time_limit_ms;
            let wrong = match (limits.time_limit_max_ms, limit, task.spec.time_limit_source) {
                (Some(_), None, _) => Some("no time limit".to_string()),
                (Some(max), Some(ms), _) if ms > max => Some(format!("a limit of {ms} ms")),
                (_, _, Some(QueueDefault)) if limit != limits.time_limit_default_ms => {
                    Some(format!("{limit:?} ms said to be the queue's default"))
                }
                (_, _, Some(QueueMax)) if limit != limits.time_limit_max_ms => {
                    Some(format!("{limit:?} ms said to be the queue's maximum"))
                }
                _ => None,
            };
            if let Some(wrong) = wrong {
                found.push((
                    format!("limit {}", task.id),
                    format!(
                        "task {} runs with {wrong} on a queue whose [limits] time-limit-max is {}",
                        task.id,
                        limits.time_limit_max_ms.map_or("none".into(), crate::spec::render_ms)
                    ),
                ));
            }
            let (Some(limit), Some(attempt)) = (limit, task.active_attempt()) else { continue };
            let Some(launched) = attempt.launched_ms else { continue };
            let now = super::now_ms();
            let ran = now
                .saturating_sub(launched)
                .saturating_sub(self.ledger.of(&task.id).suspended_ms(attempt.number, now));
            if ran > limit + LIMIT_SLACK_MS && self.job_pid(&task.id).is_some_and(alive) {
                found.push((
                    format!("past {} {}", task.id, attempt.number),
                    format!(
                        "task {} attempt {} has run {} ms (suspensions not counted), past its limit of {limit} ms",
                        task.id, attempt.number, ran
                    ),
                ));
            }
        }
    }

    /// (16), once the seed's jobs are stopped: no ended attempt ran longer than its limit, by
    /// its supervisor's exit record.
    pub(super) fn limits_kept(&mut self, bench: &mut AdversaryBench) {
        let Some(state) = self.last_state.clone() else { return };
        let mut found = Vec::new();
        for task in state.tasks.values() {
            let Some(limit) = task.spec.time_limit_ms else { continue };
            for attempt in &task.attempts {
                let Ok(dir) = crate::exec::run_dir(self.home.root(), task.id.as_str(), attempt.number) else {
                    continue;
                };
                let Ok(Some(exit)) = crate::exec::read_exit_record(&dir) else { continue };
                let suspended = self.ledger.of(&task.id).suspended_ms(attempt.number, exit.ended_ms);
                let ran = exit.ended_ms.saturating_sub(exit.started_ms).saturating_sub(suspended);
                if ran > limit + LIMIT_SLACK_MS {
                    found.push((
                        format!("past {} {}", task.id, attempt.number),
                        format!(
                            "task {} attempt {} ran {ran} ms (suspensions not counted, {suspended} ms), past its limit of {limit} ms; it ended {:?}; its supervisor said: {}",
                            task.id,
                            attempt.number,
                            exit.outcome,
                            supervisor_said(&dir)
                        ),
                    ));
                }
            }
        }
        let mut violations = Vec::new();
        for (key, violation) in found {
            self.once(&mut violations, key, violation);
        }
        let seed = self.seed;
        bench.violations.extend(violations.into_iter().map(|v| format!("seed {seed} at its end: {v}")));
    }

    /// (19): each process of a suspended attempt's job is stopped or frozen, and no
    /// suspension lasts longer than `[sched.preemption] suspend-max` and [`LIMIT_SLACK_MS`].
    fn suspended_stopped(&self, state: &State, found: &mut Vec<(String, String)>) {
        let now = super::now_ms();
        let bound = self.config.sched.preemption.suspend_max_ms;
        for task in state.tasks.values() {
            let Some(attempt) = task.active_attempt().filter(|a| a.suspended.is_some()) else { continue };
            let open = self
                .ledger
                .of(&task.id)
                .suspensions
                .iter()
                .rev()
                .find(|(a, _, to)| *a == attempt.number && to.is_none())
                .map(|(_, from, _)| *from);
            if let Some(from) = open.filter(|from| now.saturating_sub(*from) > bound + LIMIT_SLACK_MS) {
                found.push((
                    format!("suspension {} {}", task.id, attempt.number),
                    format!(
                        "task {} attempt {} has been suspended for {} ms, over [sched.preemption] suspend-max {bound} ms",
                        task.id,
                        attempt.number,
                        now - from
                    ),
                ));
            }
            let Some(pid) = self.job_pid(&task.id) else { continue };
            let running = std::iter::once(pid)
                .chain(descendants(pid))
                .find_map(|p| proc_state(p).filter(|s| !"TtZX".contains(*s) && !frozen(p)).map(|s| (p, s)));
            if let Some((p, s)) = running {
                found.push((
                    format!("suspended {} {}", task.id, attempt.number),
                    format!(
                        "task {} attempt {} is journaled Suspended, but its process {p} runs (state {s})",
                        task.id, attempt.number
                    ),
                ));
            }
        }
    }

    /// The notices and withdrawals the journal holds, for the bench's counts.
    pub(super) fn count_doors(&self, bench: &mut AdversaryBench) {
        for history in self.ledger.tasks.values() {
            bench.preemption_notices += history.notices.len() as u64;
            bench.withdrawals += u64::from(history.withdrawals);
            bench.suspensions += history.suspensions.len() as u64;
            bench.relaunches += history.relaunches.len() as u64;
        }
        let known: BTreeSet<&TaskId> = self.doors.forged.iter().map(|(id, _)| id).collect();
        bench.forged_refused += known.iter().filter(|id| self.ledger.rejected.contains(**id)).count() as u64;
    }
}

/// A spool file's table for `spec`, as `carma submit` writes it.
fn spool_table(spec: &crate::spec::TaskSpec) -> toml::Table {
    Submission::bare(spec.clone()).to_spool_toml().parse::<toml::Table>().unwrap_or_default()
}

/// Runs `program args` as `uid` (its gid the same), never through a shell of root's; whether
/// it exited 0.
pub(super) fn as_user(uid: u32, program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The first entry under `dir` (links not followed, `dir` itself included) owned by `uid`.
fn owned_by(dir: &Path, uid: u32) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let meta = std::fs::symlink_metadata(&at).ok()?;
        if meta.uid() == uid {
            return Some(at);
        }
        if meta.is_dir() {
            let entries = std::fs::read_dir(&at).into_iter().flatten().flatten();
            stack.extend(entries.map(|e| e.path()));
        }
    }
    None
}

/// The kernel's state letter of `pid`, if it exists.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.split_whitespace().next()?.chars().next()
}

/// Whether `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    proc_state(pid).is_some_and(|s| !"ZX".contains(s))
}

/// The parent pid of each process, from `/proc`.
fn parents() -> BTreeMap<u32, u32> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let ppid = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1)?.parse().ok());
        if let Some(ppid) = ppid {
            out.insert(pid, ppid);
        }
    }
    out
}

/// Every descendant of `pid`, nearest first.
fn descendants(pid: u32) -> Vec<u32> {
    let parents = parents();
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(at) = frontier.pop() {
        for (&child, _) in parents.iter().filter(|(_, p)| **p == at) {
            out.push(child);
            frontier.push(child);
        }
    }
    out
}

/// Whether `pid` is in a frozen cgroup (v2 `cgroup.events`, or v1 `freezer.state`).
fn frozen(pid: u32) -> bool {
    let Ok(cgroups) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else { return false };
    cgroups.lines().any(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) =
            (parts.next(), parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        if controllers.is_empty() {
            // Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup`, or `unified/` beside
            // the v1 controllers on a hybrid host).
            let Some((mount, root)) = crate::exec::cgroup::cgroup2_mount() else { return false };
            let relative = path.strip_prefix(root.trim_end_matches('/')).unwrap_or(path);
            let events = mount.join(relative.trim_start_matches('/')).join("cgroup.events");
            std::fs::read_to_string(events).unwrap_or_default().lines().any(|l| l.trim() == "frozen 1")
        } else if controllers.split(',').any(|c| c == "freezer") {
            let state = std::fs::read_to_string(format!("/sys/fs/cgroup/freezer{path}/freezer.state"))
                .unwrap_or_default();
            state.trim() == "FROZEN"
        } else {
            false
        }
    })
}

/// The last lines of an attempt's `supervisor.log` (root's own file in root's run folder),
/// capped and escaped: what a violation of (16) carries so that one seen only in CI can be
/// read there.
fn supervisor_said(dir: &Path) -> String {
    const TAIL_BYTES: u64 = 600;
    let path = dir.join(crate::exec::rundir::SUPERVISOR_LOG);
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(&path) else { return "nothing (no supervisor.log)".into() };
    let length = file.metadata().map_or(0, |m| m.len());
    let mut text = Vec::new();
    if file.seek(SeekFrom::Start(length.saturating_sub(TAIL_BYTES))).is_err()
        || file.take(TAIL_BYTES).read_to_end(&mut text).is_err()
    {
        return "nothing readable".into();
    }
    let tail = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return "nothing".into();
    }
    crate::text::escape(&lines.join(" | ")).into_owned()
}
