//! A job stopped as a whole, for a suspension (`[sched.preemption] mode = "suspend"`).
//!
//! SIGSTOP reaches the processes that exist when it is sent, and any process of the job's
//! user may send SIGCONT: the owner of a suspended job can continue its workers from their
//! own login, and a job that looks only at its first process would run on, past its time
//! limit and on a GPU it gave away. So a job is stopped here as a whole:
//! - every process of the attempt (by the tick's marks, [`super::contain`]) gets SIGSTOP
//!   through its pidfd, and then, where the attempt has its own cgroup v2
//!   ([`super::cgroup::JobCgroup`]), the cgroup is frozen (`cgroup.freeze`): a frozen process
//!   runs no instruction whatever it is sent, SIGCONT included, and only root can thaw it;
//! - elsewhere (no cgroup of its own: a systemd unit, a read-only hierarchy, a v1-only host)
//!   the tick looks again every tick ([`observe`]) and stops again whatever runs
//!   (tick/suspended.rs), and the supervisor's clock counts every moment the job is not
//!   wholly stopped.
//!
//! A job is **wholly stopped** when its cgroup is frozen, or when it has processes and every
//! one of them is stopped (`T`); the time limit's clock (exec/pause.rs) stands still only
//! then.
//!
//! The tick's mark [`SUSPENDED_MARK`] in the run folder (root's, 0600, empty) says that a
//! suspension was applied: made once the job is stopped, removed once a resume has continued
//! it and given its CUDA state back. A tick killed between a commit and its effect leaves the
//! mark out of step with the journal, and the next tick finishes the effect
//! (tick/suspended.rs).

use std::path::Path;

use super::contain::{Selector, selector_for_tick};
use super::liveness::BootIdSource;
use super::proctable::{ProcEntry, read_table, signal_entry};

pub use super::rundir::SUSPENDED_MARK;

/// What a suspension sees of an attempt's job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobStop {
    /// Its cgroup is frozen (the kernel's `cgroup.events`).
    pub frozen: bool,
    /// Its live processes, with their state letters (`T`: stopped).
    pub processes: Vec<(u32, char)>,
    /// The tick's [`SUSPENDED_MARK`] is there.
    pub marked: bool,
}

impl JobStop {
    /// Whether the job is wholly stopped: frozen, or every one of its processes stopped.
    pub fn whole(&self) -> bool {
        self.frozen || (!self.processes.is_empty() && self.processes.iter().all(|(_, state)| *state == 'T'))
    }

    /// The processes that are not stopped (all of them can run when nothing is frozen).
    pub fn running(&self) -> Vec<u32> {
        if self.frozen {
            return Vec::new();
        }
        self.processes.iter().filter(|(_, state)| *state != 'T').map(|(pid, _)| *pid).collect()
    }
}

/// The job of the attempt in `run_dir` as a suspension sees it.
pub fn observe(run_dir: &Path, boot_id: &BootIdSource) -> JobStop {
    let Some(selector) = selector_for_tick(run_dir, boot_id) else { return JobStop::default() };
    let table = read_table();
    let processes = selector.select(&table).iter().map(|entry| (entry.pid, entry.state)).collect();
    let frozen = selector.cgroup.as_ref().is_some_and(|cgroup| cgroup.frozen());
    JobStop { frozen, processes, marked: run_dir.join(SUSPENDED_MARK).exists() }
}

/// Stops (`stop`) the attempt's job as a whole: SIGSTOP to each of its processes, then (once
/// they show stopped, at most [`SETTLE`]) its cgroup frozen where it has one, waiting at most
/// as long for the kernel to say it is; or continues it: thawed, then SIGCONT to each.
/// `Ok(true)` when a cgroup was frozen or thawed; `Err` names what could not be done.
pub fn set_stopped(run_dir: &Path, boot_id: &BootIdSource, stop: bool) -> Result<bool, String> {
    let Some(selector) = selector_for_tick(run_dir, boot_id) else {
        return Err(format!("{} is not a run folder", run_dir.display()));
    };
    let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
    let mut froze = false;
    let mut failed = None;
    if !stop {
        froze = freeze(&selector, false).map_err(|why| failed.get_or_insert(why).clone()).unwrap_or(false);
    }
    let table = read_table();
    let mut signalled = Vec::new();
    for entry in selector.select(&table) {
        match signal_entry(entry, signal) {
            Ok(_) => signalled.push(entry.pid),
            Err(err) => {
                failed.get_or_insert(format!("cannot signal process {}: {err}", entry.pid));
            }
        }
    }
    if stop {
        // A process frozen before it took its SIGSTOP would show sleeping, its stop pending:
        // the stop first, then the freeze.
        settle(|| {
            signalled.iter().all(|&pid| {
                super::read_proc_stat(pid).is_none_or(|s| matches!(s.state, 'T' | 't' | 'Z' | 'X'))
            })
        });
        froze = freeze(&selector, true).map_err(|why| failed.get_or_insert(why).clone()).unwrap_or(false);
        if froze && let Some(cgroup) = &selector.cgroup {
            settle(|| cgroup.frozen());
        }
    }
    failed.map_or(Ok(froze), Err)
}

/// The longest [`set_stopped`] waits for the kernel to show a stop or a freeze, each.
pub const SETTLE: std::time::Duration = std::time::Duration::from_millis(500);

/// Waits until `done` or [`SETTLE`] has passed.
fn settle(done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + SETTLE;
    while !done() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn freeze(selector: &Selector, frozen: bool) -> Result<bool, String> {
    let Some(cgroup) = &selector.cgroup else { return Ok(false) };
    cgroup.freeze(frozen).map_err(|err| {
        let what = if frozen { "freeze" } else { "thaw" };
        format!("cannot {what} {}: {err}", cgroup.path.display())
    })
}

/// Sets (`on`) or removes the tick's [`SUSPENDED_MARK`] in `run_dir`.
pub fn mark(run_dir: &Path, on: bool) -> Result<(), String> {
    let path = run_dir.join(SUSPENDED_MARK);
    let done = if on {
        match crate::scratch::create_file_exclusive(&path, 0o600) {
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            other => other.map(drop),
        }
    } else {
        match std::fs::remove_file(&path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    };
    done.map_err(|err| format!("cannot {} {}: {err}", if on { "create" } else { "remove" }, path.display()))
}

/// Whether the processes `selector` selects now are wholly stopped (see the module docs):
/// what the supervisor's clock asks while the tick has suspended the job.
pub(crate) fn whole_job_stopped(selector: &Selector) -> bool {
    if selector.cgroup.as_ref().is_some_and(|cgroup| cgroup.frozen()) {
        return true;
    }
    let table = read_table();
    let selected: Vec<&ProcEntry> = selector.select(&table);
    !selected.is_empty() && selected.iter().all(|entry| entry.state == 'T')
}

#[cfg(test)]
mod tests {
    //! Goal: a job is wholly stopped only when frozen or every process is stopped, and the
    //! supervisor's check sees a continued worker. Method: the rule over tables, then real
    //! processes: a stopped parent whose child was continued is not wholly stopped.
    use super::*;

    #[test]
    fn wholly_stopped_means_frozen_or_every_process_stopped() {
        let stop = |processes: &[(u32, char)], frozen| JobStop {
            frozen,
            processes: processes.to_vec(),
            marked: true,
        };
        assert!(stop(&[(1, 'T'), (2, 'T')], false).whole());
        assert!(!stop(&[(1, 'T'), (2, 'S')], false).whole(), "one worker runs");
        assert_eq!(stop(&[(1, 'T'), (2, 'S')], false).running(), [2]);
        assert!(stop(&[(1, 'T'), (2, 'S')], true).whole(), "a frozen cgroup runs nothing");
        assert!(stop(&[(1, 'T'), (2, 'S')], true).running().is_empty());
        assert!(!stop(&[], false).whole(), "no process is no stopped job");
    }

    #[test]
    fn a_continued_worker_means_the_job_is_not_wholly_stopped() {
        let mut parent = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let mut worker = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pids = vec![parent.id(), worker.id()];
        let selector = Selector { roots: pids.clone(), ..Selector::default() };
        let state_of = |pid: u32| crate::exec::read_proc_stat(pid).map(|s| s.state);
        let wait_for = |pid: u32, want: bool| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while (state_of(pid) == Some('T')) != want {
                assert!(std::time::Instant::now() < deadline, "process {pid} never changed");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        for &pid in &pids {
            // SAFETY: kill with our own unreaped children's pids.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
            wait_for(pid, true);
        }
        assert!(whole_job_stopped(&selector));
        // SAFETY: as above.
        unsafe { libc::kill(worker.id() as libc::pid_t, libc::SIGCONT) };
        wait_for(worker.id(), false);
        assert!(!whole_job_stopped(&selector), "the first process is stopped, its worker runs");
        for child in [&mut parent, &mut worker] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
