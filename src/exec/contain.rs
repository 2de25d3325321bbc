//! Finding and ending every process of an attempt, so that an attempt's
//! processes live and die together and a retry never runs beside them.
//!
//! # Which processes belong to an attempt
//! A [`Selector`] seeds on several independent marks and then adds every
//! descendant of what it found (walking parent links in a [`read_table`]
//! snapshot):
//!
//! * **its cgroup** ([`JobCgroup`]), where one could be made: exact, and a
//!   non-root job cannot leave it;
//! * **its session**: the launcher starts each supervisor in a new session
//!   (setsid, or a systemd service, which is one too), so every process in
//!   it is the attempt's unless it called `setsid` itself;
//! * **its process group** (the job leads its own);
//! * **the tag** `CARMA_ATTEMPT_TAG=<task>/<attempt>` that carma puts in the
//!   job's environment, where a user cannot override it; it survives
//!   `setsid`, double forks and reparenting. It needs no boot id (unlike
//!   pids, it names the same attempt on any boot: attempt numbers are
//!   never reused), so it is the one mark trusted across a reboot id change.
//!   Only processes owned by the job's user count (a user could put another attempt's tag in their own
//!   processes, never in someone else's), and environments are read only
//!   when there is no cgroup, which makes them redundant;
//! * **the supervisor's descendants**: it is a child subreaper
//!   (`PR_SET_CHILD_SUBREAPER`), so orphans of a double fork are reparented
//!   to it rather than to init.
//!
//! The weak spot without a cgroup: a process that calls `setsid`, clears its
//! environment and is orphaned, all after its supervisor died (while the
//! supervisor lives, it is still a descendant). Nothing marks it; with a
//! cgroup it is still found.
//!
//! Session and process-group ids are numbers the kernel may hand out again
//! once nobody uses them, so they are only trusted on the same boot and
//! while the pid of the same name is free or still the recorded process.
//!
//! # Ending them
//! [`terminate`] loops until a fresh snapshot selects nothing: SIGTERM
//! (with SIGCONT, so stopped processes see it), a grace period, then SIGKILL
//! and `cgroup.kill` on every pass, reaping its own zombie children. Each
//! signal goes through a pidfd after re-checking the start time, so a pid
//! recycled since the snapshot is never hit. What survives the patience
//! (a process stuck in the kernel, or one the caller may not signal) is
//! reported, never ignored: the tick holds the attempt's verdict and any
//! retry until it is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use super::cgroup::JobCgroup;
use super::liveness::{BootIdSource, ProcessIdentity, is_alive, read_proc_stat};
use super::plan::AttemptPlan;
use super::proctable::{ProcEntry, Sent, environ_contains, read_table, reap_if_own_zombie, signal_entry};
use super::record::{read_claim, read_job_record};
use super::rundir::parse_run_dir;

/// The environment variable that marks every process of an attempt.
pub const ATTEMPT_TAG_ENV: &str = "CARMA_ATTEMPT_TAG";
/// How long the tick waits for a lost attempt's processes to die after
/// SIGKILL before it reports the survivors and moves on.
pub const TICK_REAP_WAIT_MS: u64 = 1_000;
/// Pids named in a one-line detail before "and N more".
const PIDS_LISTED_MAX: usize = 10;

/// `<task>/<attempt>`: the value of [`ATTEMPT_TAG_ENV`] for one attempt.
pub fn attempt_tag(task_id: &str, attempt: u32) -> String {
    format!("{task_id}/{attempt}")
}

/// Processes owned by `owner_uid` whose environment holds `variable`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TagRule {
    /// `CARMA_ATTEMPT_TAG=<task>/<attempt>`.
    pub variable: String,
    /// The job's uid.
    pub owner_uid: u32,
}

/// The marks that select an attempt's processes; see the module docs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selector {
    pub tag: Option<TagRule>,
    pub session: Option<i32>,
    pub pgrp: Option<i32>,
    /// These processes and all their descendants.
    pub roots: Vec<u32>,
    pub cgroup: Option<JobCgroup>,
    /// Never selected (the caller itself, init, a live supervisor).
    pub exclude: Vec<u32>,
}

impl Selector {
    /// The live processes of `table` the marks select, with descendants.
    pub(crate) fn select<'a>(&self, table: &'a [ProcEntry]) -> Vec<&'a ProcEntry> {
        let in_cgroup: BTreeSet<u32> = self.cgroup.iter().flat_map(JobCgroup::pids).collect();
        let mut chosen: BTreeSet<u32> = self.roots.iter().copied().collect();
        for entry in table.iter().filter(|entry| !entry.is_dead()) {
            let marked = in_cgroup.contains(&entry.pid)
                || self.session == Some(entry.session)
                || self.pgrp == Some(entry.pgrp)
                || self.tag.as_ref().is_some_and(|tag| {
                    entry.owner_uid == tag.owner_uid && environ_contains(entry.pid, &tag.variable)
                });
            if marked {
                chosen.insert(entry.pid);
            }
        }
        let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for entry in table {
            children.entry(entry.ppid).or_default().push(entry.pid);
        }
        let mut stack: Vec<u32> = chosen.iter().copied().collect();
        while let Some(pid) = stack.pop() {
            for &child in children.get(&pid).into_iter().flatten() {
                if chosen.insert(child) {
                    stack.push(child);
                }
            }
        }
        table
            .iter()
            .filter(|entry| {
                chosen.contains(&entry.pid)
                    && !entry.is_dead()
                    && entry.pid > 1
                    && !self.exclude.contains(&entry.pid)
            })
            .collect()
    }
}

impl Selector {
    /// Process `pid` as `/proc` shows it, and whether the marks select it: the same rule as
    /// [`Selector::select`], judged on the pid's line of ancestors alone (its own marks, or a
    /// root or marked process above it), so that a caller asking about a few pids often (the
    /// GPU sampler) never reads all of `/proc`. `None` when there is no such process.
    pub(crate) fn judge(&self, pid: u32) -> Option<(ProcEntry, bool)> {
        /// Deeper than any real process tree; a bound on what a loop of parents could cost.
        const ANCESTORS_MAX: usize = 256;
        let mut line = Vec::new();
        let mut next = pid;
        while next > 1 && line.len() < ANCESTORS_MAX {
            let Some(entry) = super::proctable::read_entry(next) else { break };
            next = entry.ppid;
            line.push(entry);
        }
        let chosen = self.select(&line).into_iter().any(|entry| entry.pid == pid);
        line.into_iter().next().filter(|entry| entry.pid == pid).map(|entry| (entry, chosen))
    }
}

/// How [`terminate`] paces itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patience {
    /// SIGTERM first and wait this long before SIGKILL; 0 is SIGKILL at once.
    pub term_grace_ms: u64,
    /// After the first SIGKILL, give up and report survivors after this long.
    pub kill_wait_ms: u64,
    /// Time between passes.
    pub poll_ms: u64,
    /// Reap zombies that are this process's children (the supervisor).
    pub reap_own_children: bool,
}

/// What [`terminate`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Termination {
    /// Every process that was sent a signal.
    pub signalled: BTreeSet<u32>,
    /// Processes still alive when it gave up.
    pub remaining: Vec<ProcEntry>,
    /// The last error per pid whose signal failed (e.g. EPERM).
    pub denied: BTreeMap<u32, String>,
}

impl Termination {
    /// One line on the survivors: `12 (state D), 34 (Operation not permitted)`.
    pub fn survivors(&self) -> String {
        let described: Vec<String> = self
            .remaining
            .iter()
            .map(|entry| match self.denied.get(&entry.pid) {
                Some(error) => format!("{} ({error})", entry.pid),
                None => format!("{} (state {})", entry.pid, entry.state),
            })
            .collect();
        list_with_more(&described)
    }
}

/// End every process `selector` selects: SIGTERM, `term_grace_ms`, then
/// SIGKILL (and `cgroup.kill`) on every pass until none is left or
/// `kill_wait_ms` has passed since the first SIGKILL.
pub(crate) fn terminate(selector: &Selector, patience: &Patience) -> Termination {
    let started = Instant::now();
    let kill_from = started + Duration::from_millis(patience.term_grace_ms);
    let give_up = kill_from + Duration::from_millis(patience.kill_wait_ms);
    let mut result = Termination::default();
    let mut termed: BTreeSet<u32> = BTreeSet::new();
    loop {
        let table = read_table();
        if patience.reap_own_children {
            table.iter().for_each(reap_if_own_zombie);
        }
        let alive = selector.select(&table);
        if alive.is_empty() {
            result.remaining.clear();
            return result;
        }
        let now = Instant::now();
        if now >= give_up {
            result.remaining = alive.into_iter().cloned().collect();
            return result;
        }
        if now >= kill_from {
            if let Some(cgroup) = &selector.cgroup {
                let _ = cgroup.kill();
            }
            send(&alive, libc::SIGKILL, &mut result);
        } else {
            let fresh: Vec<&ProcEntry> = alive.into_iter().filter(|e| termed.insert(e.pid)).collect();
            send(&fresh, libc::SIGTERM, &mut result);
            send(&fresh, libc::SIGCONT, &mut result);
        }
        std::thread::sleep(Duration::from_millis(patience.poll_ms.max(1)));
    }
}

/// One pass: send `signal` to everything `selector` selects now. Returns
/// how many processes it reached.
pub(crate) fn signal_selected(selector: &Selector, signal: i32) -> usize {
    let table = read_table();
    let alive = selector.select(&table);
    let mut result = Termination::default();
    send(&alive, signal, &mut result);
    if signal == libc::SIGTERM {
        send(&alive, libc::SIGCONT, &mut result);
    }
    result.signalled.len()
}

fn send(entries: &[&ProcEntry], signal: i32, result: &mut Termination) {
    for entry in entries {
        match signal_entry(entry, signal) {
            Ok(Sent::Delivered) => {
                result.signalled.insert(entry.pid);
                result.denied.remove(&entry.pid);
            }
            Ok(Sent::Gone) => {}
            Err(err) => {
                result.denied.insert(entry.pid, err.to_string());
            }
        }
    }
}

/// What the tick found and did about the processes of an attempt whose
/// supervisor is gone or done.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reaping {
    /// Processes found alive and sent SIGKILL.
    pub killed: u32,
    /// Pids still alive when the tick stopped waiting (sorted).
    pub remaining: Vec<u32>,
    /// One line for the journal: what was killed, or what survives and why.
    pub detail: String,
}

/// Find every process of the attempt in `run_dir` (a dead supervisor's, or
/// one that wrote its exit record) and SIGKILL it, waiting at most
/// `wait_ms` for them to go. A live supervisor itself is left alone.
pub fn reap_attempt(run_dir: &Path, boot_id: &BootIdSource, wait_ms: u64) -> Reaping {
    let Some((task_id, attempt)) = parse_run_dir(run_dir) else {
        return Reaping::default();
    };
    let selector = tick_selector(run_dir, &task_id, attempt, boot_id);
    let patience =
        Patience { term_grace_ms: 0, kill_wait_ms: wait_ms, poll_ms: 20, reap_own_children: false };
    let done = terminate(&selector, &patience);
    if done.remaining.is_empty() {
        if let Some(cgroup) = &selector.cgroup {
            let _ = cgroup.remove();
        }
        super::hostlimit_v1::remove_attempt(&task_id, attempt);
    }
    let killed = u32::try_from(done.signalled.len()).unwrap_or(u32::MAX);
    let remaining: Vec<u32> = done.remaining.iter().map(|entry| entry.pid).collect();
    let detail = if !remaining.is_empty() {
        format!(
            "processes of attempt {attempt} survive SIGKILL: {}; its end is not recorded and it is not retried until they are gone",
            done.survivors()
        )
    } else if killed > 0 {
        let pids: Vec<String> = done.signalled.iter().map(u32::to_string).collect();
        format!("killed {killed} leftover process(es) of attempt {attempt}: {}", list_with_more(&pids))
    } else {
        String::new()
    };
    Reaping { killed, remaining, detail }
}

/// The live processes of the attempt in `run_dir` among `table`, by the marks the tick trusts
/// (its cgroup; its supervisor's session and every descendant of it, orphans included since
/// the supervisor is their subreaper; the job's process group; the tag, only in the job
/// user's own processes): what memory enforcement attributes GPU processes by. A job cannot
/// put its processes into another user's attempt by any of them.
pub fn attempt_processes(run_dir: &Path, boot_id: &BootIdSource, table: &[ProcEntry]) -> Vec<u32> {
    let Some((task_id, attempt)) = parse_run_dir(run_dir) else {
        return Vec::new();
    };
    let selector = tick_selector(run_dir, &task_id, attempt, boot_id);
    selector.select(table).iter().map(|entry| entry.pid).collect()
}

/// The marks the tick trusts for the attempt in `run_dir` (see [`attempt_processes`]);
/// `None` for a folder that is not a run folder.
pub(crate) fn selector_for_tick(run_dir: &Path, boot_id: &BootIdSource) -> Option<Selector> {
    let (task_id, attempt) = parse_run_dir(run_dir)?;
    Some(tick_selector(run_dir, &task_id, attempt, boot_id))
}

/// The marks the tick can trust for an attempt, from its run folder.
fn tick_selector(run_dir: &Path, task_id: &str, attempt: u32, boot_id: &BootIdSource) -> Selector {
    let claim = read_claim(run_dir).ok().flatten();
    let job = read_job_record(run_dir).ok().flatten();
    let current_boot = boot_id.current().ok();
    let mut selector = Selector { exclude: vec![std::process::id(), 1], ..Selector::default() };
    if let Some(claim) = &claim {
        let supervisor = &claim.supervisor;
        let same_boot = current_boot.as_deref() == Some(supervisor.boot_id.as_str());
        if is_alive(supervisor, boot_id) {
            selector.exclude.push(supervisor.pid);
        }
        let leads_session = claim.session.is_some_and(|sid| i64::from(sid) == i64::from(supervisor.pid));
        if same_boot && leads_session && number_still_means(supervisor) {
            selector.session = claim.session;
        }
        if let Some(job) = job.as_ref().filter(|_| same_boot) {
            if number_still_means(&job.job) {
                selector.pgrp = Some(job.pgid);
            }
            if is_alive(&job.job, boot_id) {
                selector.roots.push(job.job.pid);
            }
        }
    }
    selector.cgroup = job
        .as_ref()
        .and_then(|job| job.cgroup.as_deref())
        .and_then(|p| JobCgroup::recorded(p, task_id, attempt));
    if selector.cgroup.is_none() {
        let owner =
            job.as_ref().and_then(|job| job.uid).or_else(|| AttemptPlan::read(run_dir).ok().map(|p| p.uid));
        selector.tag = owner.map(|owner_uid| TagRule {
            variable: format!("{ATTEMPT_TAG_ENV}={}", attempt_tag(task_id, attempt)),
            owner_uid,
        });
    }
    selector
}

/// True when the pid number of `identity` is free or still that process:
/// then no other process can have taken it as its session or group id.
fn number_still_means(identity: &ProcessIdentity) -> bool {
    read_proc_stat(identity.pid).is_none_or(|stat| stat.start_time_ticks == identity.start_time_ticks)
}

/// `a, b, c` with at most [`PIDS_LISTED_MAX`] items, then `and N more`.
fn list_with_more(items: &[String]) -> String {
    let shown = items.iter().take(PIDS_LISTED_MAX).cloned().collect::<Vec<_>>().join(", ");
    match items.len().saturating_sub(PIDS_LISTED_MAX) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

#[cfg(test)]
mod tests {
    //! Goal: selection follows every mark and all descendants, excludes what
    //! it must, and terminate ends a tree including a double-forked orphan.
    use super::*;

    fn entry(pid: u32, ppid: u32, pgrp: i32, session: i32, state: char) -> ProcEntry {
        ProcEntry { pid, ppid, pgrp, session, state, start_time_ticks: 1, owner_uid: 4242 }
    }

    #[test]
    fn marks_and_descendants() {
        let table = vec![
            entry(1, 0, 1, 1, 'S'),
            entry(100, 1, 100, 100, 'S'),   // supervisor, session leader
            entry(101, 100, 101, 100, 'S'), // job, own group
            entry(102, 101, 101, 100, 'S'), // worker
            entry(103, 1, 103, 103, 'S'),   // setsid'd orphan of the job: no mark
            entry(104, 103, 103, 103, 'S'), // its child
            entry(105, 101, 101, 100, 'Z'), // dead worker
            entry(200, 1, 200, 200, 'S'),   // unrelated
        ];
        let by_session = Selector { session: Some(100), exclude: vec![100], ..Selector::default() };
        let pids = |s: &Selector| s.select(&table).iter().map(|e| e.pid).collect::<Vec<_>>();
        assert_eq!(pids(&by_session), [101, 102]);
        let by_group = Selector { pgrp: Some(101), ..Selector::default() };
        assert_eq!(pids(&by_group), [101, 102]);
        let by_root = Selector { roots: vec![103], ..Selector::default() };
        assert_eq!(pids(&by_root), [103, 104], "a root brings its descendants");
        let everything = Selector { roots: vec![1], exclude: vec![100], ..Selector::default() };
        assert!(!pids(&everything).contains(&1), "init is never selected");
        assert!(!pids(&everything).contains(&105), "zombies are not alive");
    }

    #[test]
    fn terminate_ends_a_tree_with_a_double_forked_orphan() {
        let tag = format!("{ATTEMPT_TAG_ENV}=unit-test-{}/1", std::process::id());
        let dir = tempfile::tempdir().expect("tempdir");
        let pid_file = dir.path().join("orphan.pid");
        // The orphan calls setsid and its parent exits: only the tag marks it.
        let script = format!("(setsid sleep 30 & echo $! > {}) ; exec sleep 30", pid_file.display());
        let mut child = std::process::Command::new("sh")
            .args(["-c", &script])
            .env(ATTEMPT_TAG_ENV, tag.split_once('=').expect("=").1)
            .spawn()
            .expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(&pid_file).map_or(true, |t| !t.ends_with('\n')) {
            assert!(Instant::now() < deadline, "the orphan never started");
            std::thread::sleep(Duration::from_millis(10));
        }
        let orphan: u32 = std::fs::read_to_string(&pid_file).expect("pid").trim().parse().expect("number");
        let owner_uid = crate::access::uid::effective();
        let selector = Selector {
            tag: Some(TagRule { variable: tag, owner_uid }),
            roots: vec![child.id()],
            exclude: vec![std::process::id()],
            ..Selector::default()
        };
        let selected: Vec<u32> = selector.select(&read_table()).iter().map(|e| e.pid).collect();
        assert!(selected.contains(&orphan) && selected.contains(&child.id()), "{selected:?}");
        let patience =
            Patience { term_grace_ms: 500, kill_wait_ms: 2_000, poll_ms: 10, reap_own_children: false };
        let done = terminate(&selector, &patience);
        assert!(done.remaining.is_empty(), "{done:?}");
        assert!(done.signalled.contains(&orphan));
        child.wait().expect("reap the child");
        assert!(read_proc_stat(orphan).is_none_or(|s| s.state == 'Z'), "the orphan survived");
    }

    #[test]
    fn long_lists_are_cut() {
        let items: Vec<String> = (1..=12).map(|n| n.to_string()).collect();
        assert_eq!(list_with_more(&items), "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more");
        assert_eq!(list_with_more(&items[..2]), "1, 2");
    }
}
