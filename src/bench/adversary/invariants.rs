//! The invariants the harness checks after every tick (numbered as in the parent's docs).
//! Each broken one is a sentence naming the object; a broken invariant about one object is
//! reported once a seed, not again at every later tick.
//!
//! Bounds that an administrator will set in `config.toml` once issue 32's fixes land are
//! constants here, in one place, until those keys exist: [`USER_STATE_BYTES_MAX`] and
//! [`REQUEUES_MAX`].

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Run;
use crate::error::Result;
use crate::journal::{State, Status};

/// Ticks after which each of alice's journaled tasks must have started (been placed): one to
/// be placed, one more for a GPU that a finishing job gives back, one of slack.
pub(super) const START_TICKS_MAX: u64 = 3;
/// Bytes carma may keep for one user in the state directory (what quarantine keeps of theirs,
/// the run folders of their ended attempts), counted as allocated blocks: quarantine keeps 1 MiB
/// a user and an ended attempt's logs are cut to the bench's 1 MiB `log-bytes-max`. The user's
/// own spool folder is theirs and is not counted (seed 8665 once held 64.3 MiB of junk there,
/// which the tick takes in at most 32 MiB a tick).
pub(super) const USER_STATE_BYTES_MAX: u64 = 64 << 20;
/// How long an honest `GET /` of the dashboard may take.
pub(super) const DASHBOARD_ANSWER_MAX: Duration = Duration::from_secs(2);
/// Requeues of one task, Slurm's `MaxBatchRequeue` default; a constant until `[limits]
/// requeues-max` exists.
pub(super) const REQUEUES_MAX: u32 = 5;
/// Bytes of a `supervisor.log` read for the signs of a supervisor that died on its own.
const SUPERVISOR_LOG_READ_MAX: u64 = 64 * 1024;

/// Whether `task` waits for a GPU kept, by design, for another task: a preemptor (its victim
/// gives way within its grace; (17) bounds how often), or a blocked head journaled before it
/// (by submission time, then by the journal's sequence, as the queue breaks the tie: seed 746
/// once ingested mallory's head and alice's task in one tick, in the same millisecond)
/// or of the same user, or of a higher priority less nice, or of a user with less fair-share
/// usage (the queue's order: alice's `--nice 5` task waits behind a nice-0 head, and behind a
/// later head of mallory's while mallory has used less GPU time, as seed 3186's brief grab,
/// relaunched to its normal place with 34.3 GiB, showed; a relaunch keeps its task's place, and the
/// recovery queue's is bounded by `sched::order`), named by its pending reason ("kept for ID").
fn waits_by_design(state: &State, task: &crate::journal::Task, usage: &BTreeMap<u32, f64>) -> bool {
    let Some(why) = task.pending_reason() else { return false };
    if why.contains("(preempting)") {
        return true;
    }
    let Some(head) =
        why.split("kept for blocked head ").nth(1).and_then(|rest| rest.split_whitespace().next())
    else {
        return false;
    };
    // Alice waiting behind her own head is her priorities' doing; the head's own wait counts.
    let used = |uid: u32| usage.get(&uid).copied().unwrap_or(0.0);
    state.tasks.values().any(|t| {
        let rank = |t: &crate::journal::Task| i64::from(t.spec.priority) - i64::from(t.spec.nice);
        t.id.as_str() == head
            && ((t.submitted_ms, t.submit_seq) < (task.submitted_ms, task.submit_seq)
                || t.submitter_uid == task.submitter_uid
                || rank(t) > rank(task)
                || used(t.submitter_uid) < used(task.submitter_uid))
    })
}

impl Run {
    /// The invariants after `tick`, on the State it left.
    pub(super) fn check(&mut self, tick: u64, state: &State) -> Result<Vec<String>> {
        let mut violations = Vec::new();
        self.spool_boundary(tick, state, &mut violations);
        let report = crate::journal::check::check(&self.home.journal_path())?;
        if !report.sound {
            violations.push(format!("journal check calls the journal damaged: {:?}", report.problems));
        }
        self.ledger.read(&self.home)?;
        if self.users.jobs {
            self.honest_starts(state, &mut violations);
            self.supervisors(state, &mut violations);
            self.recovery_invariants(tick, state, &mut violations)?;
        }
        self.door_invariants(state, &mut violations);
        for (uid, who) in [(self.users.alice, "alice"), (self.users.mallory, "mallory")] {
            // What carma keeps for the user is bounded; their own spool folder is theirs (they
            // may delete it, the tick takes at most a bounded share of it a tick, and below the
            // free-space floor it counts toward their own hold), so it is shown, not counted.
            let [folder, quarantine, runs] = self.user_bytes(uid, state);
            let bytes = quarantine + runs;
            if bytes > USER_STATE_BYTES_MAX {
                self.once(
                    &mut violations,
                    format!("bytes of {who}"),
                    format!(
                        "carma keeps {} for {who} in the state directory, over the per-user bound of {} (quarantine {}, ended attempts' run folders {}; beside them, their own spool folder holds {})",
                        crate::text::bytes(bytes),
                        crate::text::bytes(USER_STATE_BYTES_MAX),
                        crate::text::bytes(quarantine),
                        crate::text::bytes(runs),
                        crate::text::bytes(folder)
                    ),
                );
            }
        }
        for task in state.tasks.values().filter(|t| t.requeue_count > REQUEUES_MAX) {
            self.once(
                &mut violations,
                format!("requeues {}", task.id),
                format!(
                    "task {} was requeued {} times, over the bound of {REQUEUES_MAX}",
                    task.id, task.requeue_count
                ),
            );
        }
        let answer = self.dashboard.as_ref().map(|d| super::lab::honest_get(d.address, DASHBOARD_ANSWER_MAX));
        let refused = answer.and_then(|got| match got {
            Ok(line) if line.contains(" 200 ") => None,
            Ok(line) => Some(format!("it answered {line:?}")),
            Err(why) => Some(why),
        });
        if let Some(why) = refused {
            let hostile = if self.clients.is_empty() { "" } else { " while mallory's client pipelined" };
            violations.push(format!("the dashboard did not answer an honest GET /{hostile}: {why}"));
        }
        Ok(violations)
    }

    /// Invariants (2)-(4), issue 21's: ingest, secrets, cancels and arrays.
    fn spool_boundary(&self, tick: u64, state: &State, violations: &mut Vec<String>) {
        let (alice, mallory) = (self.users.alice, self.users.mallory);
        for (id, made) in &self.honest {
            if tick >= made + super::INGEST_TICKS_MAX - 1 && !state.tasks.contains_key(id) {
                violations.push(format!("alice's task {id} (submitted before tick {made}) is not journaled"));
            }
        }
        let private = crate::intake::Private::new(&self.home);
        for task in state.tasks.values().filter(|t| t.submitter_uid == mallory) {
            if task.spec.array.as_ref().is_some_and(|a| Some(&a.id) == self.alice_array.as_ref()) {
                violations.push(format!("mallory's task {} joined alice's array", task.id));
            }
            let copy = private.read(&task.id).map(|copy| format!("{copy:?}")).unwrap_or_default();
            if copy.contains(&self.secret) {
                violations.push(format!("mallory's task {} has alice's secret in its private copy", task.id));
            }
        }
        for task in state.tasks.values().filter(|t| t.submitter_uid == alice) {
            if matches!(task.status(), Status::Cancelled) {
                violations.push(format!("alice's task {} was cancelled", task.id));
            }
        }
        for readable in walk(&self.home.view_dir()).into_iter().chain(walk(&self.folder(mallory))) {
            if contains(&readable, &self.secret) {
                violations.push(format!("alice's secret is in {}", readable.display()));
            }
        }
    }

    /// (6): each of alice's tasks starts within [`START_TICKS_MAX`] ticks of being journaled.
    /// A tick does not count while a listed grab's attempt is open (its memory is on the GPU
    /// until its stop takes effect, which (10) bounds), nor while a grab relaunched with what
    /// it used runs and the task does not fit beside it, nor while the task waits for a GPU
    /// kept for a preemptor or for a blocked head ahead of it by the queue's order (journaled
    /// before it, alice's own, less nice, or of a user with less fair-share usage: not
    /// mallory's junk). Nor does a tick that ends
    /// with a preemption in its grace or a suspension open: the preemptor's GPUs are kept for
    /// it until its victim has gone, and a suspended job's room for its resume once its
    /// preemptor runs, by design (as Slurm resumes a suspended job before it starts new work);
    /// (17) bounds how often one task can be made a victim and (19) how long a suspension
    /// lasts. Alice's own preemptors wait for their victims and are not held to it.
    fn honest_starts(&mut self, state: &State, violations: &mut Vec<String>) {
        let alice = self.users.alice;
        let preemptors = self.doors.preemptors.clone();
        let preempting = state
            .tasks
            .values()
            .any(|t| t.active_attempt().is_some_and(|a| a.preempted.is_some() || a.suspended.is_some()));
        // A listed grab holds its memory on the GPU until its stop takes effect; (10) bounds
        // that to the tick that saw it and [`super::recovery::STOP_TICKS_MAX`] after.
        let grabbing = self.grabs.iter().any(|grab| {
            let task = state.tasks.get(&grab.task);
            grab.listed.keys().any(|n| {
                task.and_then(|t| t.attempts.iter().find(|a| a.number == *n))
                    .is_some_and(|a| a.ended_ms.is_none())
            })
        });
        // A grab relaunched with what it used holds that room, as (13) requires carma to give
        // it: a job of mallory's as big as her grab, not junk. While it runs, alice's tasks
        // that do not fit beside it are not held to the bound.
        // So does a later grab of the same workload, which starts with the raised figure its
        // workload learned (seeds 6901 and 7803: 34.3 GiB for a job declaring 1 GiB).
        let default_share = self.config.sched.default_share();
        let relaunched_grab_runs = self.grabs.iter().any(|grab| {
            let figure = grab.declared_mib.unwrap_or(default_share);
            let raised = |a: &crate::journal::state::Attempt| {
                a.number > 1 || a.requirement_mib.is_some_and(|r| r > figure)
            };
            state
                .tasks
                .get(&grab.task)
                .and_then(|t| t.active_attempt())
                .is_some_and(|a| raised(a) && a.launched_ms.is_some())
        });
        // Fair-share usage as the tick's order weighs it, now (a moment after the tick decided).
        let now_ms = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
        let usage: BTreeMap<u32, f64> = crate::tick::gate::usage_by_user(state, &self.config.sched, now_ms)
            .into_iter()
            .map(|u| (u.user, u.gpu_ms))
            .collect();
        for task in state.tasks.values().filter(|t| t.submitter_uid == alice && !preemptors.contains(&t.id)) {
            let crowded =
                relaunched_grab_runs && task.pending_reason().is_some_and(|r| r.starts_with("GpuMemory"));
            let excused = preempting || grabbing || crowded || waits_by_design(state, task, &usage);
            let waited = match self.journaled.get_mut(&task.id) {
                None => {
                    self.journaled.insert(task.id.clone(), 0);
                    0
                }
                Some(waited) => {
                    *waited += u64::from(!excused);
                    *waited
                }
            };
            if task.attempts.is_empty() && task.status() == Status::Pending && waited >= START_TICKS_MAX {
                let why = task.pending_reason().unwrap_or("no reason given").to_string();
                self.once(
                    violations,
                    format!("start {}", task.id),
                    format!(
                        "alice's task {} has waited {waited} ticks without starting (bound {START_TICKS_MAX}): {why}",
                        task.id
                    ),
                );
            }
        }
    }

    /// (7): no supervisor dies of anything but a signal from carma. A supervisor that died on
    /// its own leaves no exit record (the tick calls its attempt lost) and says why in its log.
    fn supervisors(&mut self, state: &State, violations: &mut Vec<String>) {
        let mut found = Vec::new();
        for task in state.tasks.values() {
            for attempt in task.attempts.iter().filter(|a| a.launched_ms.is_some()) {
                let at = format!("task {} attempt {}", task.id, attempt.number);
                if let Some(outcome) = attempt.outcome.as_deref().filter(|o| o.starts_with("lost")) {
                    found.push((format!("lost {at}"), format!("the supervisor of {at} died: {outcome}")));
                }
                let Ok(dir) = crate::exec::run_dir(self.home.root(), task.id.as_str(), attempt.number) else {
                    continue;
                };
                let log = read_capped(&dir.join(crate::exec::rundir::SUPERVISOR_LOG));
                let died =
                    ["panicked at", "memory allocation of"].into_iter().find(|sign| log.contains(sign));
                if let Some(sign) = died {
                    let line = log.lines().find(|l| l.contains(sign)).unwrap_or_default();
                    found.push((
                        format!("panic {at}"),
                        format!("the supervisor of {at} died on its own: {line}"),
                    ));
                }
            }
        }
        for (key, violation) in found {
            self.once(violations, key, violation);
        }
    }

    /// Bytes the state directory holds for `uid`: their spool folder, what quarantine keeps of
    /// theirs (by owner), and the run folders of their tasks' attempts that have ended (a
    /// running job's log may pass the cap by what it writes between two of its supervisor's
    /// trims; an ended attempt's may not grow at all); allocated blocks, links not followed (a
    /// sparse file costs what it allocates).
    /// In three parts: the spool folder, quarantine, the ended attempts' run folders.
    fn user_bytes(&self, uid: u32, state: &State) -> [u64; 3] {
        let folder = tree_bytes(&self.folder(uid), None);
        let quarantine = tree_bytes(&self.home.root().join("quarantine"), Some(uid));
        let runs = self.home.root().join("runs");
        let mut ended = 0;
        for task in state.tasks.values().filter(|t| t.submitter_uid == uid) {
            for attempt in task.attempts.iter().filter(|a| a.ended_ms.is_some()) {
                ended += tree_bytes(&runs.join(task.id.as_str()).join(attempt.number.to_string()), None);
            }
        }
        [folder, quarantine, ended]
    }

    /// Pushes `violation` unless one under `key` was reported earlier in this seed.
    pub(super) fn once(&mut self, violations: &mut Vec<String>, key: String, violation: String) {
        if self.reported.insert(key) {
            violations.push(violation);
        }
    }
}

/// Allocated bytes under `dir` (links not followed), of the entries `owner` owns when given.
fn tree_bytes(dir: &Path, owner: Option<u32>) -> u64 {
    let mut sizes: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            }
            if owner.is_none_or(|uid| meta.uid() == uid) {
                // Hard links count once.
                sizes.insert((meta.dev(), meta.ino()), meta.blocks() * 512);
            }
        }
    }
    sizes.values().sum()
}

/// Up to [`SUPERVISOR_LOG_READ_MAX`] bytes of the regular file at `path`, lossy; empty when
/// it cannot be read.
fn read_capped(path: &Path) -> String {
    use std::io::Read;
    let open =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let Ok(file) = open else { return String::new() };
    let mut bytes = Vec::new();
    let _ = file.take(SUPERVISOR_LOG_READ_MAX).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Whether the regular file at `path` contains `needle`; a link is not followed (it is not
/// something mallory can read through: the file it names keeps its own permissions).
fn contains(path: &Path, needle: &str) -> bool {
    use std::io::Read;
    let open =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let Ok(mut file) = open else { return false };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).is_ok() && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Every regular file under `dir` (links not followed).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            out.extend(walk(&entry.path()));
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! Goal: a user's bytes are what their files allocate, each inode once, by owner where
    //! asked. Method: real files in a temp folder.
    use super::*;

    #[test]
    fn bytes_count_allocated_blocks_once_per_inode_and_by_owner() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::write(&real, vec![7u8; 1 << 20]).expect("write");
        std::fs::hard_link(&real, dir.path().join("again")).expect("link");
        let sparse = std::fs::File::create(dir.path().join("sparse")).expect("create");
        sparse.set_len(1 << 40).expect("sparse");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/small"), b"x").expect("write");
        let bytes = tree_bytes(dir.path(), None);
        assert!((1 << 20..(1 << 20) + (1 << 16)).contains(&bytes), "{bytes}");
        let mine = crate::access::uid::effective();
        assert_eq!(tree_bytes(dir.path(), Some(mine)), bytes);
        assert_eq!(tree_bytes(dir.path(), Some(mine.wrapping_add(1))), 0);
    }
}
