//! Where the job's stdout and stderr go, and how the supervisor opens them.
//!
//! By default both go to the run folder (`stdout.log`, `stderr.log`), which
//! only root can list: the supervisor creates them there itself, exclusively
//! and without following links, owned by the submitter and mode 0600.
//!
//! A plan may instead name files of the user's choosing (`--output` /
//! `--error` templates, expanded by the tick with
//! [`expand_output_template`]). Those paths are the user's, so a root
//! supervisor opens them **with the submitter's credentials**: it switches
//! this thread's effective uid, gid and groups to the submitter around the
//! `open` and back. It uses the raw `setresuid`/`setresgid`/`setgroups`
//! system calls, which (unlike glibc's wrappers, which broadcast to every
//! thread) change only the calling thread, so the switch is correct even
//! in a multi-threaded process such as a test binary; `carma run-task`
//! itself is single-threaded. A path the submitter may not write therefore
//! fails as it would for them, and a link cannot make root write anywhere.
//!
//! The open uses `O_NONBLOCK`, so a FIFO without a reader fails at once
//! (`ENXIO`) instead of blocking the supervisor; `O_NONBLOCK` is cleared
//! before the job gets the descriptor. The OOM scan never opens a user path
//! again: for a regular file it reads the tail through a second descriptor
//! of the same open file, made from `/proc/self/fd/N` while still holding
//! the submitter's credentials; anything else (a FIFO, a terminal) is not
//! scanned, and the supervisor log says so.
//!
//! Run-folder logs live in the state directory, so they are capped
//! ([`super::logcap`]): the job writes through an appending descriptor and
//! the supervisor trims through its own. User-chosen files are on the
//! submitter's storage, under the submitter's quota, and may be FIFOs or
//! devices: they are not capped.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::logcap::CappedLog;
use super::plan::AttemptPlan;
use super::rundir::{STDERR_LOG, STDOUT_LOG};
use super::spawn::JobCredentials;

/// Expand an output path template: `%j` the task id, `%a` the attempt, `%x`
/// the task name, `%u` the submitter's user name, `%%` a percent sign. A
/// relative result is taken relative to `workdir` (absolute).
pub fn expand_output_template(
    template: &str,
    task_id: &str,
    attempt: u32,
    name: &str,
    user: &str,
    workdir: &Path,
) -> Result<PathBuf, String> {
    if template.is_empty() {
        return Err("the output path template is empty; give a file name such as %x-%j.out".into());
    }
    if template.contains('\0') {
        return Err(format!("output path template {template:?} contains a NUL byte; remove it"));
    }
    if !workdir.is_absolute() {
        return Err(format!("workdir {:?} is not absolute; give an absolute workdir", workdir.display()));
    }
    let mut out = String::with_capacity(template.len() + 32);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('j') => out.push_str(task_id),
            Some('a') => out.push_str(&attempt.to_string()),
            Some('x') => out.push_str(path_safe(name, "task name")?),
            Some('u') => out.push_str(path_safe(user, "user name")?),
            Some('%') => out.push('%'),
            Some(other) => {
                return Err(format!(
                    "unknown placeholder %{other} in output path template {template:?}; use %j (task id), %a (attempt), %x (name), %u (user) or %%"
                ));
            }
            None => {
                return Err(format!(
                    "output path template {template:?} ends with a lone %; write %% for a percent sign"
                ));
            }
        }
    }
    if out.ends_with('/') {
        return Err(format!("output path {out:?} names a directory; end it with a file name"));
    }
    let path = PathBuf::from(out);
    Ok(if path.is_absolute() { path } else { workdir.join(path) })
}

/// A value substituted into a path must be one path component.
fn path_safe<'a>(value: &'a str, what: &str) -> Result<&'a str, String> {
    if value.is_empty() || value == "." || value == ".." || value.contains('/') {
        return Err(format!(
            "the {what} {value:?} cannot be part of an output path (empty, '.', '..' or has a '/'); rename it or drop the placeholder"
        ));
    }
    Ok(value)
}

/// A log the OOM scan may read: its path (for messages) and a readable
/// descriptor, or why there is none.
pub(crate) struct ScanSource {
    pub path: PathBuf,
    pub file: Result<File, String>,
}

/// The job's stdout and stderr, what the OOM scan reads (stderr first), and
/// the run-folder logs under a cap.
pub(crate) struct JobOutputs {
    pub stdout: File,
    pub stderr: File,
    pub scans: Vec<ScanSource>,
    pub caps: Vec<CappedLog>,
}

/// Open the job's outputs as the plan says; `Err` is a one-line SpawnFailed
/// reason.
pub(crate) fn open_outputs(
    run_dir: &Path,
    plan: &AttemptPlan,
    credentials: &JobCredentials,
) -> Result<JobOutputs, String> {
    let stdout_path = plan.stdout_path.clone().unwrap_or_else(|| run_dir.join(STDOUT_LOG));
    let stderr_path = plan.stderr_path.clone().unwrap_or_else(|| run_dir.join(STDERR_LOG));
    let mut caps = Vec::new();
    // A later attempt (a requeue, a retry) appends to a file of the user's, so the earlier
    // attempts' output is kept, as `--open-mode=append` asks; the first truncates.
    let append = plan.attempt > 1;
    let mut open = |path: &Path, user_chosen: bool, stream: &str| {
        if user_chosen {
            return open_user_output(path, credentials, stream, append);
        }
        let (job, own) = open_run_log(path, credentials)?;
        let scan = own.try_clone().map_err(|err| err.to_string());
        if let Some(bytes_max) = plan.log_bytes_max {
            caps.push(CappedLog::new(own, path.to_path_buf(), bytes_max));
        }
        Ok((job, scan))
    };
    let (stdout, stdout_scan) = open(&stdout_path, plan.stdout_path.is_some(), "stdout")?;
    if stderr_path == stdout_path {
        // One file for both: one open file description, so the writes interleave
        // instead of overwriting each other.
        let stderr = stdout.try_clone().map_err(|err| format!("cannot duplicate the stdout file: {err}"))?;
        let scans = vec![ScanSource { path: stdout_path, file: stdout_scan }];
        return Ok(JobOutputs { stdout, stderr, scans, caps });
    }
    let (stderr, stderr_scan) = open(&stderr_path, plan.stderr_path.is_some(), "stderr")?;
    let scans = vec![
        ScanSource { path: stderr_path, file: stderr_scan },
        ScanSource { path: stdout_path, file: stdout_scan },
    ];
    Ok(JobOutputs { stdout, stderr, scans, caps })
}

/// Create a log in the run folder: exclusively, never through a link, mode
/// 0600, owned by the submitter. Returns the job's descriptor, which appends
/// (so a trim never leaves a hole under the job's offset, see
/// [`super::logcap`]), and the supervisor's own, which reads and writes
/// without appending: two open file descriptions of the one file.
pub(crate) fn open_run_log(path: &Path, credentials: &JobCredentials) -> Result<(File, File), String> {
    let own = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|err| format!("cannot create {}: {err}", path.display()))?;
    own_by_submitter(&own, path, credentials)?;
    // Through /proc, not the path: the file just made, even if the name changed since.
    let job = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(format!("/proc/self/fd/{}", own.as_raw_fd()))
        .map_err(|err| format!("cannot open {} for the job: {err}", path.display()))?;
    Ok((job, own))
}

/// Give a run-folder file to the submitter, mode 0600 whatever the umask.
pub(crate) fn own_by_submitter(file: &File, path: &Path, credentials: &JobCredentials) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|err| format!("cannot chmod {}: {err}", path.display()))?;
    if credentials.switch_user {
        std::os::unix::fs::fchown(file, Some(credentials.uid), Some(credentials.gid))
            .map_err(|err| format!("cannot chown {}: {err}", path.display()))?;
    }
    Ok(())
}

/// Open a user-chosen output file as the submitter; see the module docs.
fn open_user_output(
    path: &Path,
    credentials: &JobCredentials,
    stream: &str,
    append: bool,
) -> Result<(File, Result<File, String>), String> {
    let _as_submitter = if credentials.switch_user {
        Some(ThreadCredentials::assume(credentials.uid, credentials.gid, &credentials.groups)?)
    } else {
        None
    };
    let shown = path.display().to_string().escape_debug().to_string();
    let uid = credentials.uid;
    let file = OpenOptions::new()
        .write(true)
        .append(append)
        .create(true)
        .truncate(!append)
        .mode(0o600)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|err| {
            let folder = path.parent().map(|p| p.display().to_string()).unwrap_or_default();
            let why = match err.raw_os_error() {
                Some(libc::ENXIO) => "it is a FIFO that nobody is reading".to_string(),
                // Said as what to do: the folder is simply not there.
                Some(libc::ENOENT) => {
                    return format!("cannot open the job's {stream} file {shown}: its folder {folder} is missing; create it and resubmit");
                }
                _ => err.to_string(),
            };
            format!("cannot open the job's {stream} file {shown} as uid {uid}: {why}; choose a path that uid {uid} can write")
        })?;
    let is_regular = file.metadata().map(|meta| meta.is_file()).unwrap_or(false);
    let scan = if is_regular {
        File::open(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(|err| format!("cannot read it back as uid {uid}: {err}"))
    } else {
        Err("not a regular file".to_string())
    };
    clear_nonblock(&file).map_err(|err| format!("cannot set up the job's {stream} file {shown}: {err}"))?;
    Ok((file, scan))
}

fn clear_nonblock(file: &File) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, with integer arguments.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// This thread's effective uid, gid and groups switched to a user until
/// dropped; see the module docs for why raw system calls.
struct ThreadCredentials {
    saved_egid: libc::gid_t,
    saved_groups: Vec<libc::gid_t>,
}

impl ThreadCredentials {
    fn assume(uid: u32, gid: u32, groups: &[libc::gid_t]) -> Result<ThreadCredentials, String> {
        let switch_error = |what: &str| {
            format!(
                "cannot switch to uid {uid} to open output files: {what} failed: {}",
                std::io::Error::last_os_error()
            )
        };
        // SAFETY: getegid cannot fail.
        let saved_egid = unsafe { libc::getegid() };
        let saved_groups =
            current_groups().map_err(|err| format!("cannot read this process's groups: {err}"))?;
        // SAFETY: the raw system calls take plain integers and a valid array.
        unsafe {
            if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0 {
                return Err(switch_error("setgroups"));
            }
            let guard = ThreadCredentials { saved_egid, saved_groups };
            if libc::syscall(
                libc::SYS_setresgid,
                -1 as libc::c_long,
                libc::c_long::from(gid),
                -1 as libc::c_long,
            ) != 0
            {
                return Err(switch_error("setresgid"));
            }
            if libc::syscall(
                libc::SYS_setresuid,
                -1 as libc::c_long,
                libc::c_long::from(uid),
                -1 as libc::c_long,
            ) != 0
            {
                return Err(switch_error("setresuid"));
            }
            Ok(guard)
        }
    }
}

impl Drop for ThreadCredentials {
    fn drop(&mut self) {
        // SAFETY: as in `assume`; root's saved uid lets the thread take euid 0 back.
        let restored = unsafe {
            libc::syscall(libc::SYS_setresuid, -1 as libc::c_long, 0 as libc::c_long, -1 as libc::c_long) == 0
                && libc::syscall(
                    libc::SYS_setresgid,
                    -1 as libc::c_long,
                    libc::c_long::from(self.saved_egid),
                    -1 as libc::c_long,
                ) == 0
                && libc::syscall(libc::SYS_setgroups, self.saved_groups.len(), self.saved_groups.as_ptr())
                    == 0
        };
        if !restored {
            // Going on with another user's credentials would be worse than stopping.
            eprintln!("carma run-task: cannot restore root credentials: {}", std::io::Error::last_os_error());
            std::process::abort();
        }
    }
}

fn current_groups() -> std::io::Result<Vec<libc::gid_t>> {
    // SAFETY: a zero-length query writes nothing.
    let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if count < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut groups = vec![0; count as usize];
    // SAFETY: `groups` has room for `count` entries.
    let got = unsafe { libc::getgroups(count, groups.as_mut_ptr()) };
    if got < 0 {
        return Err(std::io::Error::last_os_error());
    }
    groups.truncate(got as usize);
    Ok(groups)
}

/// OOM evidence from the tail of stderr, else of stdout, read through the
/// supervisor's own descriptors. A log that cannot be scanned is named in
/// the supervisor's log and treated as no evidence. Of a trimmed log only
/// the part after the note is read: it alone is the end of the output.
pub(crate) fn scan_logs_for_oom(
    scans: &[ScanSource],
    caps: &[CappedLog],
    tail_bytes_max: u64,
) -> Option<super::oom::OomEvidence> {
    scans.iter().find_map(|source| match &source.file {
        Ok(file) => {
            let trimmed = caps.iter().find(|cap| cap.path() == source.path).and_then(CappedLog::tail_len);
            let tail_bytes = trimmed.map_or(tail_bytes_max, |len| len.min(tail_bytes_max));
            super::oom::scan_oom_open_file(file, tail_bytes).unwrap_or_else(|err| {
                eprintln!("carma run-task: cannot scan {} for OOM messages: {err}", source.path.display());
                None
            })
        }
        Err(why) => {
            eprintln!("carma run-task: OOM scan of {} skipped: {why}", source.path.display());
            None
        }
    })
}

#[cfg(test)]
mod tests {
    //! Goal: every placeholder expands, relative paths land in the workdir,
    //! and bad templates are refused with a message saying what to do.
    use super::*;

    fn expand(template: &str) -> Result<PathBuf, String> {
        expand_output_template(
            template,
            "01jd3k5m7n4x8z2q",
            2,
            "train",
            "alice",
            Path::new("/home/alice/exp"),
        )
    }

    #[test]
    fn placeholders_expand() {
        assert_eq!(expand("%x-%j.%a.out"), Ok(PathBuf::from("/home/alice/exp/train-01jd3k5m7n4x8z2q.2.out")));
        assert_eq!(expand("/scratch/%u/%j/err"), Ok(PathBuf::from("/scratch/alice/01jd3k5m7n4x8z2q/err")));
        assert_eq!(expand("logs/100%%.txt"), Ok(PathBuf::from("/home/alice/exp/logs/100%.txt")));
        assert_eq!(expand("plain"), Ok(PathBuf::from("/home/alice/exp/plain")));
    }

    #[test]
    fn bad_templates_are_refused() {
        let err = expand("%q.out").expect_err("unknown");
        assert_eq!(
            err,
            "unknown placeholder %q in output path template \"%q.out\"; use %j (task id), %a (attempt), %x (name), %u (user) or %%"
        );
        let err = expand("out%").expect_err("lone");
        assert_eq!(err, "output path template \"out%\" ends with a lone %; write %% for a percent sign");
        assert!(expand("").expect_err("empty").contains("is empty"));
        assert!(expand("logs/").expect_err("dir").contains("names a directory"));
        let err = expand_output_template("%x", "j", 1, "../up", "u", Path::new("/w")).expect_err("slash");
        assert!(err.starts_with("the task name \"../up\" cannot be part of an output path"), "{err}");
        let err = expand_output_template("%x", "j", 1, "t", "u", Path::new("rel")).expect_err("relative");
        assert!(err.contains("is not absolute"), "{err}");
    }
}
