//! What a process carma starts inherits from carma: its standard streams and what it is
//! given, nothing else.
//!
//! A tick is started by systemd, cron, an administrator's shell or a test; whatever
//! descriptors that parent left open without close-on-exec, and whatever signals it
//! ignored, reach the tick, and through the tick every supervisor, job and notification
//! helper it starts. A job could then read or write a root-opened file it was never meant
//! to see, and a job whose `SIGINT` or `SIGHUP` is ignored behaves differently from the
//! same job run by hand. So every child carma execs calls [`scrub_in_child`] between fork
//! and exec:
//!
//! - every descriptor above 2 is marked close-on-exec, with one `close_range(3, ~0,
//!   CLOSE_RANGE_CLOEXEC)` (Linux 5.11), or on an older kernel one `fcntl` per possible
//!   descriptor up to `RLIMIT_NOFILE`. Marking rather than closing keeps the descriptors the
//!   child still needs before exec (std's error pipe, which reports a failed exec to the
//!   parent, and a cgroup's `cgroup.procs`); the exec closes them all;
//! - every signal goes back to its default disposition (std already empties the mask and
//!   restores `SIGPIPE`; an ignored signal is the one thing an exec keeps).
//!
//! Both steps are plain syscalls on data of the child's own stack: async-signal-safe, as
//! code between fork and exec must be.

/// Highest descriptor the fallback marks when `RLIMIT_NOFILE` is unlimited: Linux's default
/// `fs.nr_open`, above which no process can hold a descriptor unless an administrator raised it.
const FD_FALLBACK_MAX: u64 = 1 << 20;

/// The first descriptor after the standard streams.
const FD_FIRST_SCRUBBED: libc::c_uint = 3;

/// Highest signal number reset (Linux's `_NSIG` is 64; signals 1 to 64 exist).
const SIGNAL_MAX: libc::c_int = 64;

/// The steps in the module docs, for a `pre_exec` hook. Never fails: a descriptor that
/// cannot be marked, or a signal the kernel refuses to change, is left as it was.
///
/// # Safety
/// Call only in a child between fork and exec (it changes the calling process's signal
/// dispositions and descriptor flags).
pub(crate) unsafe fn scrub_in_child() {
    // SAFETY: the caller is a freshly forked child about to exec.
    unsafe {
        mark_descriptors_close_on_exec();
        reset_signal_dispositions();
    }
}

/// Marks every descriptor above 2 close-on-exec.
unsafe fn mark_descriptors_close_on_exec() {
    // SAFETY: close_range only changes descriptor flags of this process.
    let marked = unsafe {
        libc::syscall(libc::SYS_close_range, FD_FIRST_SCRUBBED, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC)
    };
    if marked != 0 {
        // SAFETY: as above, in the same child.
        unsafe { mark_one_by_one() };
    }
}

/// The fallback for kernels before 5.11: `fcntl` on every descriptor number below the soft
/// `RLIMIT_NOFILE` (a descriptor above it exists only if the limit was lowered after it was
/// opened).
unsafe fn mark_one_by_one() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct on our stack.
    let highest = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur.min(FD_FALLBACK_MAX)
    } else {
        FD_FALLBACK_MAX
    };
    for fd in FD_FIRST_SCRUBBED as libc::c_int..highest as libc::c_int {
        // SAFETY: fcntl on a descriptor number; a closed one answers EBADF.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// Puts every catchable signal back to its default disposition, through the raw
/// `rt_sigaction` so that the C library's reserved signals (32 and 33, which it refuses to
/// touch but a parent may have left ignored) are reset too.
unsafe fn reset_signal_dispositions() {
    // The kernel's `struct sigaction` all zero is SIG_DFL, no flags, an empty mask, on every
    // layout (with or without `sa_restorer`); 4 words cover the largest.
    let default_action = [0u64; 4];
    for signal in 1..=SIGNAL_MAX {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: rt_sigaction reads the zeroed struct on our stack; 8 is the kernel's
        // sigset size. A refusal leaves the signal as it was.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                default_action.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Goal: a child started with [`scrub_in_child`] holds no descriptor of its parent's
    //! above 2 and ignores no signal its parent ignored. Method: the parent opens a file
    //! without close-on-exec at a high number and ignores SIGHUP; the child (`sh`) lists
    //! `/proc/self/fd` and prints its ignored-signal mask.
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;

    use super::scrub_in_child;

    /// A descriptor of `/etc/hostname` at 200 or above, without close-on-exec, as a parent
    /// of the tick could leave one; closed when dropped.
    pub(crate) fn leaked_descriptor() -> OwnedFd {
        let file = std::fs::File::open("/etc/hostname").or_else(|_| std::fs::File::open("/")).unwrap();
        // SAFETY: F_DUPFD gives a new descriptor without FD_CLOEXEC, owned below.
        let fd = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD, 200) };
        assert!(fd >= 200, "dup: {}", std::io::Error::last_os_error());
        // SAFETY: fd is a fresh descriptor this test owns.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    /// The descriptor numbers in a listing of `/proc/self/fd` (one name per line; other
    /// lines are skipped).
    pub(crate) fn descriptors(listing: &str) -> Vec<u32> {
        let mut fds: Vec<u32> = listing.lines().filter_map(|line| line.trim().parse().ok()).collect();
        fds.sort_unstable();
        fds
    }

    #[test]
    fn a_scrubbed_child_keeps_only_its_standard_streams() {
        let leaked = leaked_descriptor();
        let run = |scrub: bool| {
            let mut command = std::process::Command::new("/bin/sh");
            // `ls` lists its own open directory too: the highest it may see is 3.
            command.args(["-c", "ls /proc/self/fd; grep SigIgn /proc/self/status"]);
            // SAFETY: SIGHUP ignored in the child only; the scrub is its own contract.
            unsafe {
                command.pre_exec(move || {
                    libc::signal(libc::SIGHUP, libc::SIG_IGN);
                    if scrub {
                        scrub_in_child();
                    }
                    Ok(())
                });
            }
            String::from_utf8(command.output().unwrap().stdout).unwrap()
        };
        let ignored = |listing: &str| {
            let mask = listing.lines().find_map(|l| l.strip_prefix("SigIgn:")).expect("SigIgn line");
            u64::from_str_radix(mask.trim(), 16).expect("hex mask")
        };
        let plain = run(false);
        assert!(descriptors(&plain).contains(&(leaked.as_raw_fd() as u32)), "the test leaks: {plain}");
        assert_eq!(ignored(&plain) & 1, 1, "SIGHUP ignored without the scrub: {plain}");
        let scrubbed = run(true);
        assert_eq!(descriptors(&scrubbed), [0, 1, 2, 3], "{scrubbed}");
        assert_eq!(ignored(&scrubbed), 0, "no signal ignored: {scrubbed}");
    }

    #[test]
    fn the_fallback_for_old_kernels_marks_the_same_descriptors() {
        let leaked = leaked_descriptor();
        let mut command = std::process::Command::new("/bin/ls");
        command.arg("/proc/self/fd");
        // SAFETY: fcntl calls only, in the child.
        unsafe {
            command.pre_exec(|| {
                super::mark_one_by_one();
                Ok(())
            });
        }
        let listing = String::from_utf8(command.output().unwrap().stdout).unwrap();
        assert!(!descriptors(&listing).contains(&(leaked.as_raw_fd() as u32)), "{listing}");
        assert_eq!(descriptors(&listing), [0, 1, 2, 3], "{listing}");
    }
}
