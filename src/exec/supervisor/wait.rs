//! The supervisor's wait loop: the job's first process is polled until it exits, and the
//! attempt is stopped at its time limit (from the spawn, standing still only while the tick
//! has suspended the whole job: `exec::pause`), on cancel, or when `job.json`, written beside
//! it on a thread of its own ([`Recording`]), cannot be written. Nothing here waits on the
//! state disk: a full disk's fsync can take many seconds, and the limit is kept meanwhile.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::super::ExecError;
use super::super::contain::{Selector, signal_selected};
use super::super::interactive::attach::is_attached;
use super::super::logcap::CappedLog;
use super::super::record::{ExitOutcome, JobRecord};
use super::{PREEMPT_NOTICE, SuperviseOptions, write_json_atomic};
use crate::spec::timing::WarnSignal;

/// Why the supervisor stopped the job itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopReason {
    Cancelled,
    TimeLimit,
}

/// Poll the job until its first process exits, stopping the attempt on
/// cancel or time limit: SIGTERM to all its processes, then SIGKILL after
/// the grace period; trim the capped logs at every poll. Returns the outcome
/// and how much of the grace is left for the leftovers (all of it after a
/// plain exit).
pub(super) fn wait_for_job(
    child: &mut Child,
    selector: &Selector,
    limit: Limit,
    caps: &mut [CappedLog],
    recording: &mut Recording<'_>,
    options: &SuperviseOptions<'_>,
) -> (ExitOutcome, u64) {
    let started = limit.from;
    let deadline = limit.ms.map(|ms| started + Duration::from_millis(ms));
    // `--signal`: sent once, that many seconds before the deadline.
    let mut warn = limit.warn.zip(deadline).map(|(warn, deadline)| {
        let at = deadline.checked_sub(Duration::from_secs(u64::from(warn.seconds))).unwrap_or(started);
        (warn, at)
    });
    let mut stop: Option<StopReason> = None;
    let mut kill_at: Option<Instant> = None;
    // Suspended time does not count against the limit (exec/pause.rs).
    let mut clock = super::super::pause::Clock::default();
    let grace_left = |kill_at: Option<Instant>, stop: Option<StopReason>| match (stop, kill_at) {
        (None, _) => options.kill_grace_ms,
        (Some(_), Some(at)) => {
            u64::try_from(at.saturating_duration_since(Instant::now()).as_millis()).unwrap_or(0)
        }
        (Some(_), None) => 0,
    };
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return (outcome_of(status, stop), grace_left(kill_at, stop)),
            Ok(None) => {}
            Err(err) => {
                // try_wait on our own unreaped child cannot fail; if it does,
                // end the job so it never runs unsupervised.
                eprintln!("carma run-task: cannot wait for job {}: {err}; killing it", child.id());
                let _ = signal_selected(selector, libc::SIGKILL);
                let status = child.wait().unwrap_or(ExitStatus::from_raw(libc::SIGKILL));
                return (outcome_of(status, stop), 0);
            }
        }
        if recording.just_failed() {
            eprintln!("carma run-task: job.json cannot be written; killing the job");
            if let Some(cgroup) = &selector.cgroup {
                let _ = cgroup.kill();
            }
            signal_selected(selector, libc::SIGKILL);
        }
        if options.child_subreaper {
            reap_adopted_orphans(child.id());
        }
        caps.iter_mut().for_each(CappedLog::trim);
        let now = Instant::now();
        let paused = clock.poll(|| super::super::freeze::whole_job_stopped(selector), now);
        if stop.is_none() && PREEMPT_NOTICE.swap(false, Ordering::SeqCst) {
            preemption_warning(child.id(), selector, limit.warn);
        }
        if stop.is_none()
            && let Some((signal, _)) = warn.filter(|(_, at)| now >= *at + paused)
        {
            warn = None;
            send_warning(child.id(), selector, signal);
        }
        if stop.is_none() {
            let reason = if options.cancel_requested.load(Ordering::SeqCst) {
                Some(StopReason::Cancelled)
            } else if deadline.is_some_and(|deadline| now >= deadline + paused) {
                Some(StopReason::TimeLimit)
            } else {
                None
            };
            if let Some(reason) = reason {
                stop = Some(reason);
                signal_selected(selector, limit.stop_signal);
                kill_at = Some(now + Duration::from_millis(options.kill_grace_ms));
            }
        } else if kill_at.is_some_and(|kill_at| now >= kill_at) {
            if let Some(cgroup) = &selector.cgroup {
                let _ = cgroup.kill();
            }
            signal_selected(selector, libc::SIGKILL);
            kill_at = None;
        }
        std::thread::sleep(Duration::from_millis(options.poll_interval_ms.max(1)));
    }
}

/// The time limit and the warning before it.
#[derive(Clone, Copy)]
pub(super) struct Limit {
    /// When the job's first process was spawned: the limit counts from there, as its
    /// `started_ms` does.
    pub(super) from: Instant,
    pub(super) ms: Option<u64>,
    pub(super) warn: Option<WarnSignal>,
    /// What stops the job at the limit or on cancel before SIGKILL: SIGTERM, or SIGHUP for
    /// an interactive job.
    pub(super) stop_signal: i32,
}

/// The plan's `--signal`; one the tick wrote but this supervisor cannot read is named in its
/// log and skipped (the time limit still holds).
pub(super) fn warning(text: Option<&str>) -> Option<WarnSignal> {
    let text = text?;
    WarnSignal::parse(text).map_err(|why| eprintln!("carma run-task: no warning signal: {why}")).ok()
}

/// `B:` signals the job's first process only (it stands in for Slurm's batch shell); without
/// it every process of the attempt gets the signal, as Slurm signals every step.
fn send_warning(job_pid: u32, selector: &Selector, warn: WarnSignal) {
    let sent = send_warn_signal(job_pid, selector, warn);
    eprintln!(
        "carma run-task: sent signal {} to {sent} process(es), {} s before the time limit",
        warn.number, warn.seconds
    );
}

/// Sends `warn`'s signal as `--signal` means it; how many processes got it.
fn send_warn_signal(job_pid: u32, selector: &Selector, warn: WarnSignal) -> usize {
    if warn.batch_only {
        let pid = libc::pid_t::try_from(job_pid).unwrap_or(0);
        // SAFETY: kill with our own unreaped child's pid and a valid signal number.
        usize::from(pid > 0 && unsafe { libc::kill(pid, warn.number) } == 0)
    } else {
        signal_selected(selector, warn.number)
    }
}

/// The job is preempted: its `--signal` signal now (`B:` as before the time limit), or
/// SIGTERM to all its processes without one. The tick stops it after the grace.
fn preemption_warning(job_pid: u32, selector: &Selector, warn: Option<WarnSignal>) {
    let (number, sent) = match warn {
        Some(warn) => (warn.number, send_warn_signal(job_pid, selector, warn)),
        None => (libc::SIGTERM, signal_selected(selector, libc::SIGTERM)),
    };
    eprintln!("carma run-task: preempted: sent signal {number} to {sent} process(es)");
}

/// Reap orphans a subreaper adopted that have exited, without touching the
/// job's own exit status (that is `Child`'s to collect).
fn reap_adopted_orphans(job_pid: u32) {
    for _ in 0..1024 {
        // SAFETY: siginfo_t is plain data; waitid fills it. WNOWAIT leaves the
        // child waitable, so the job's status is never consumed here.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let found =
            unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
        // SAFETY: waitid filled `info` for an exited child, or left it zeroed.
        let pid = unsafe { info.si_pid() };
        if found != 0 || pid <= 0 || pid as u32 == job_pid || is_attached(pid as u32) {
            return;
        }
        let mut status: libc::c_int = 0;
        // SAFETY: reaps that one exited child.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

/// Map a wait status and the supervisor's own stop reason to an outcome.
fn outcome_of(status: ExitStatus, stop: Option<StopReason>) -> ExitOutcome {
    match (stop, status.code(), status.signal()) {
        (Some(StopReason::Cancelled), _, _) => ExitOutcome::Cancelled,
        (Some(StopReason::TimeLimit), _, _) => ExitOutcome::TimeLimit,
        (None, Some(code), _) => ExitOutcome::Exited { code },
        (None, None, Some(signal)) => ExitOutcome::Signaled { signal },
        // waitpid without WUNTRACED/WCONTINUED reports only exits and kills.
        (None, None, None) => {
            unreachable!("wait status {status:?} is neither an exit nor a signal")
        }
    }
}

/// `job.json` being written on a thread of its own while the job runs. Without it nobody
/// could find the job after a crash: a failed write ends the job at the next poll, and the
/// attempt ends as one that never started.
pub(super) struct Recording<'scope> {
    writing: Option<std::thread::ScopedJoinHandle<'scope, Result<(), ExecError>>>,
    failed: Option<String>,
}

impl<'scope> Recording<'scope> {
    pub(super) fn start<'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        path: std::path::PathBuf,
        record: JobRecord,
    ) -> Self {
        let writing = scope.spawn(move || write_json_atomic(&path, &record, 0o600));
        Recording { writing: Some(writing), failed: None }
    }

    /// True once, at the poll that finds the write failed.
    fn just_failed(&mut self) -> bool {
        if !self.writing.as_ref().is_some_and(|w| w.is_finished()) {
            return false;
        }
        self.join();
        self.failed.is_some()
    }

    fn join(&mut self) {
        if let Some(writing) = self.writing.take() {
            self.failed = match writing.join() {
                Ok(Ok(())) => None,
                Ok(Err(err)) => Some(err.to_string()),
                Err(_) => Some("the thread writing job.json panicked".into()),
            };
        }
    }

    /// Waits for the write if it is still going; why it failed, if it did.
    pub(super) fn finish(mut self) -> Option<String> {
        self.join();
        self.failed
    }
}

#[cfg(test)]
mod tests {
    //! Goal: the time limit holds from the spawn while `job.json`'s write is stalled (a full
    //! or slow disk waits many seconds in its fsync), and a failed write ends the job.
    //! Method: [`wait_for_job`] on a real `sleep` with a [`Recording`] whose writer is held on
    //! a channel, as a stalled fsync holds it.
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn options(cancel: &AtomicBool) -> SuperviseOptions<'_> {
        SuperviseOptions {
            cancel_requested: cancel,
            kill_grace_ms: 1_000,
            poll_interval_ms: 10,
            child_subreaper: false,
            gpu_source: None,
        }
    }

    fn sleeper() -> (Child, Selector) {
        let child = std::process::Command::new("sleep").arg("60").spawn().expect("spawn sleep");
        let selector = Selector { roots: vec![child.id()], ..Selector::default() };
        (child, selector)
    }

    #[test]
    fn the_limit_holds_while_the_job_record_is_still_being_written() {
        let cancel = AtomicBool::new(false);
        let (mut child, selector) = sleeper();
        let from = Instant::now();
        let limit = Limit { from, ms: Some(300), warn: None, stop_signal: libc::SIGTERM };
        let (release, stalled) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let writing = scope.spawn(move || {
                let _ = stalled.recv();
                Ok(())
            });
            let mut recording = Recording { writing: Some(writing), failed: None };
            let (outcome, _) =
                wait_for_job(&mut child, &selector, limit, &mut [], &mut recording, &options(&cancel));
            let took = from.elapsed();
            assert_eq!(outcome, ExitOutcome::TimeLimit);
            assert!(took < Duration::from_secs(2), "stopped {took:?} after the spawn, for a 300 ms limit");
            assert!(recording.writing.as_ref().is_some_and(|w| !w.is_finished()), "the write was still held");
            release.send(()).expect("the writer waits");
            assert_eq!(recording.finish(), None);
        });
    }

    #[test]
    fn a_job_record_that_cannot_be_written_ends_the_job() {
        let cancel = AtomicBool::new(false);
        let (mut child, selector) = sleeper();
        let from = Instant::now();
        let limit = Limit { from, ms: None, warn: None, stop_signal: libc::SIGTERM };
        std::thread::scope(|scope| {
            let writing = scope.spawn(|| {
                Err(ExecError::Io {
                    op: "write",
                    path: "job.json".into(),
                    source: std::io::Error::from_raw_os_error(libc::ENOSPC),
                })
            });
            let mut recording = Recording { writing: Some(writing), failed: None };
            let (outcome, _) =
                wait_for_job(&mut child, &selector, limit, &mut [], &mut recording, &options(&cancel));
            assert_eq!(outcome, ExitOutcome::Signaled { signal: libc::SIGKILL });
            assert!(from.elapsed() < Duration::from_secs(5), "{:?}", from.elapsed());
            assert!(recording.finish().is_some_and(|why| why.contains("No space left")));
        });
    }
}
