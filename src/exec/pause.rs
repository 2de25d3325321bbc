//! The time limit counts running time only, as Slurm's suspend: while the tick has suspended
//! the job (`[sched.preemption] mode = "suspend"`), the supervisor's clock stands still.
//!
//! The tick (root) stops the job as a whole (exec/freeze.rs), then sends the supervisor (root)
//! [`SUSPEND_NOTICE_SIGNAL`]; only root can signal it, and no file decides anything. From the
//! notice, the clock stands still while the **whole job** is stopped: its cgroup frozen, or
//! every one of its processes stopped (`T` in `/proc/PID/stat`), not only its first one; it
//! runs again at the first poll that finds any process of it running (the tick's SIGCONT on
//! Resumed, or the user's own, to the first process or to any worker). A user who stops or
//! continues their own job gains nothing: without the notice a stopped job's clock runs on,
//! and a continued one's runs at once. A notice whose job is not seen stopped within
//! [`NOTICE_VALID`] is dropped.
//!
//! The pause moves the deadline and the `--signal` warning alike: [`Clock::paused`] is added
//! to both by the supervisor's wait loop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The signal the tick sends a supervisor once it has stopped the job for a suspension. Its
/// default action is to be ignored, so a supervisor older than it is not ended by it.
pub const SUSPEND_NOTICE_SIGNAL: i32 = libc::SIGURG;

/// How long a notice waits to see the job stopped before it is dropped.
pub const NOTICE_VALID: Duration = Duration::from_secs(10);

/// Set by the [`SUSPEND_NOTICE_SIGNAL`] handler ([`install`]); taken by [`Clock::poll`].
static SUSPEND_NOTICE: AtomicBool = AtomicBool::new(false);

/// Installs the [`SUSPEND_NOTICE_SIGNAL`] handler.
pub(super) fn install() {
    extern "C" fn on_notice(_signal: libc::c_int) {
        SUSPEND_NOTICE.store(true, Ordering::SeqCst);
    }
    // SAFETY: the handler only stores to an atomic (async-signal-safe); sigaction gets a fully
    // initialised struct.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_notice as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        let installed = libc::sigaction(SUSPEND_NOTICE_SIGNAL, &action, std::ptr::null_mut());
        assert_eq!(installed, 0, "sigaction({SUSPEND_NOTICE_SIGNAL}) failed with valid arguments");
    }
}

/// The time the limit does not count: the job's suspensions so far.
#[derive(Debug, Default)]
pub(super) struct Clock {
    /// When the last notice came, while it waits to see the job stopped.
    noticed: Option<Instant>,
    /// Since when the clock stands still, while it does.
    since: Option<Instant>,
    /// The suspensions that ended.
    total: Duration,
}

impl Clock {
    /// Takes a pending notice and, while there is one or the clock stands still, asks
    /// `whole_job_stopped` (exec/freeze.rs: frozen, or every process of the job stopped):
    /// returns the time not counted so far, the current suspension included.
    pub(super) fn poll(&mut self, whole_job_stopped: impl FnOnce() -> bool, now: Instant) -> Duration {
        if SUSPEND_NOTICE.swap(false, Ordering::SeqCst) {
            self.noticed = Some(now);
        }
        let watching = self.noticed.is_some() || self.since.is_some();
        self.step(watching && whole_job_stopped(), now)
    }

    /// [`Clock::poll`] once the notice is taken and the job's state read.
    fn step(&mut self, stopped: bool, now: Instant) -> Duration {
        match self.since {
            Some(since) if !stopped => {
                self.total += now.saturating_duration_since(since);
                self.since = None;
            }
            None if stopped && self.noticed.is_some() => {
                self.since = Some(now);
                self.noticed = None;
            }
            _ => {}
        }
        if self.noticed.is_some_and(|at| now.saturating_duration_since(at) > NOTICE_VALID) {
            self.noticed = None;
        }
        self.total + self.since.map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the clock stands still only from the tick's notice while the job is stopped, runs
    /// again once it runs, and a user who stops their own job (no notice) or a stale notice
    /// pauses nothing. Method: `step` on a made-up timeline, then `poll` on a real stopped
    /// and continued child with the notice raised by its signal.
    #[test]
    fn the_limit_pauses_only_while_the_tick_suspended_the_job() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut clock = Clock::default();
        // Stopped by its user: no pause.
        assert_eq!(clock.step(true, at(1)), Duration::ZERO);
        assert_eq!(clock.step(false, at(2)), Duration::ZERO);
        // The tick's notice, the job stopped from 10 s to 70 s: 60 s not counted.
        clock.noticed = Some(at(10));
        assert_eq!(clock.step(true, at(10)), Duration::ZERO);
        assert_eq!(clock.step(true, at(40)), Duration::from_secs(30));
        assert_eq!(clock.step(false, at(70)), Duration::from_secs(60));
        // Stopped again by its user, without a notice: the pause is over.
        assert_eq!(clock.step(true, at(80)), Duration::from_secs(60));
        // A notice whose job never stops is dropped: a later stop pauses nothing.
        clock.step(false, at(90));
        clock.noticed = Some(at(90));
        clock.step(false, at(90) + NOTICE_VALID + Duration::from_secs(1));
        assert_eq!(clock.step(true, at(200)), Duration::from_secs(60));

        // A real job: stopped, the notice signal, continued.
        install();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pid = child.id();
        let signal = |sig| {
            // SAFETY: kill with our own unreaped child's pid (or our own) and a valid signal.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        };
        let mut clock = Clock::default();
        signal(libc::SIGSTOP);
        while super::super::read_proc_stat(pid).is_none_or(|s| s.state != 'T') {
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: a signal to this thread (handled before raise returns), whose handler
        // install() set.
        unsafe { libc::raise(SUSPEND_NOTICE_SIGNAL) };
        let start = Instant::now();
        let stopped = || super::super::read_proc_stat(pid).is_some_and(|s| s.state == 'T');
        assert_eq!(clock.poll(stopped, start), Duration::ZERO);
        assert_eq!(clock.poll(stopped, start + Duration::from_secs(5)), Duration::from_secs(5));
        signal(libc::SIGCONT);
        while super::super::read_proc_stat(pid).is_some_and(|s| s.state == 'T') {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(clock.poll(stopped, start + Duration::from_secs(7)), Duration::from_secs(7));
        assert_eq!(clock.poll(stopped, start + Duration::from_secs(9)), Duration::from_secs(7));
        signal(libc::SIGKILL);
        let _ = child.wait();
    }
}
