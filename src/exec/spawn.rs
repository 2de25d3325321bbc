//! Starting the job process: who it runs as, its environment, its program
//! path, and the `pre_exec` steps that bind it to the supervisor.
//!
//! The child, between fork and exec, in this order:
//! 1. `setpgid(0, 0)`: its own process group, so a cancel signals the job
//!    and every worker it forks, and nothing else (an interactive job: `setsid()` and its
//!    terminal as the controlling one, a session and group of its own);
//! 2. when the supervisor made a cgroup for the attempt: write `0` (itself)
//!    to its `cgroup.procs`, opened before the fork, while still root, so
//!    everything the job starts is born inside (if the kernel refuses, the
//!    child fails before exec and the supervisor spawns it again without);
//! 3. when the supervisor is root: `setgroups`, `setgid`, `setuid` to the
//!    submitter (looked up *before* the fork: NSS is not fork-safe);
//! 4. `chdir(workdir)`, after the drop, so the kernel checks the submitter's
//!    permissions on it;
//! 5. `prctl(PR_SET_PDEATHSIG, SIGKILL)`, after the drop because a
//!    credential change clears it; then `getppid()` is checked, closing the
//!    race where the supervisor died before the prctl;
//! 6. every descriptor above 2 close-on-exec and every signal at its default
//!    ([`super::inherit`]): the job gets its logs and nothing else of root's.
//!
//! The parent-death signal fires when the *thread* that spawned the child
//! exits, so [`crate::exec::supervise`] spawns and waits on the same thread.
//! The parent-death signal reaches only the job's first process; the rest of
//! an attempt is found and ended by [`super::contain`]. A job that execs a
//! setuid binary loses it (kernel rule); contain still finds it.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::cgroup::JobCgroup;
use super::contain::{ATTEMPT_TAG_ENV, attempt_tag};
use super::hostlimit_v1::V1Cgroups;
use super::plan::AttemptPlan;

/// Environment variables passed through from the supervisor unless the
/// plan overrides them. `HOME`, `USER` and `LOGNAME` come from the
/// submitter's passwd entry when the supervisor changes user.
const INHERITED_ENV_KEYS: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ"];
/// The inherited variables that name the supervisor's own user: never passed on to a job run
/// as someone else, even one without a passwd entry (it would get `HOME=/root`).
const IDENTITY_ENV_KEYS: &[&str] = &["HOME", "USER", "LOGNAME"];
/// `PATH` when neither the plan nor the supervisor has one.
const PATH_DEFAULT: &str = "/usr/local/bin:/usr/bin:/bin";
/// Most supplementary groups carried over to the job.
const GROUPS_COUNT_MAX: usize = 65536;

/// Who the job runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobCredentials {
    /// The submitter's uid.
    pub uid: u32,
    /// The job's primary gid.
    pub gid: u32,
    /// Supplementary groups (including `gid`), set only when switching.
    pub groups: Vec<libc::gid_t>,
    /// True when the supervisor is root and must switch user in `pre_exec`.
    pub switch_user: bool,
    /// The submitter's name and home, when known and switching.
    pub user_home: Option<(String, String)>,
}

/// Decide who the job runs as. A root supervisor switches to `plan.uid`; a
/// non-root supervisor runs jobs only for its own uid and gid, and refuses
/// anything else rather than running a job as the wrong user.
pub(crate) fn resolve_credentials(plan: &AttemptPlan) -> Result<JobCredentials, String> {
    credentials_for(plan.uid, plan.gid)
}

/// [`resolve_credentials`] for any process run for user `uid` (with primary group `gid`, or
/// the user's own): the job, or a notification helper ([`super::detached`]).
pub(crate) fn credentials_for(uid: u32, gid: Option<u32>) -> Result<JobCredentials, String> {
    let (euid, egid) = (crate::access::uid::effective(), crate::access::uid::effective_gid());
    if euid != 0 {
        if uid != euid {
            return Err(format!(
                "refusing to run the job as uid {uid}: the supervisor runs as uid {euid} and cannot change user; run `carma tick` as root or submit as uid {euid}"
            ));
        }
        if let Some(gid) = gid.filter(|gid| *gid != egid) {
            return Err(format!(
                "refusing to run the job with gid {gid}: the supervisor runs with gid {egid} and cannot change group; run `carma tick` as root"
            ));
        }
        return Ok(JobCredentials {
            uid: euid,
            gid: egid,
            groups: Vec::new(),
            switch_user: false,
            user_home: None,
        });
    }
    let passwd = crate::access::users::entry(uid);
    let gid = match (gid, &passwd) {
        (Some(gid), _) => gid,
        (None, Some(entry)) => entry.gid,
        (None, None) => {
            return Err(format!(
                "uid {uid} has no passwd entry and the plan has no gid; create the user or set gid"
            ));
        }
    };
    let groups = match &passwd {
        Some(entry) => group_list(&entry.name, gid),
        None => vec![gid],
    };
    let user_home = passwd.map(|entry| (entry.name, entry.home));
    Ok(JobCredentials { uid, gid, groups, switch_user: true, user_home })
}

/// The job's environment: a few inherited variables, then the plan's, then
/// carma's own, which win so a plan cannot escape its GPU placement.
pub(crate) fn build_env(
    plan: &AttemptPlan,
    credentials: &JobCredentials,
    inherited: &dyn Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for key in INHERITED_ENV_KEYS {
        if credentials.switch_user && IDENTITY_ENV_KEYS.contains(key) {
            continue;
        }
        if let Some(value) = inherited(key) {
            env.insert(key.to_string(), value);
        }
    }
    if let Some((user, home)) = &credentials.user_home {
        env.insert("HOME".into(), home.clone());
        env.insert("USER".into(), user.clone());
        env.insert("LOGNAME".into(), user.clone());
    }
    env.extend(plan.env.iter().map(|(key, value)| (key.clone(), value.clone())));
    env.entry("PATH".into()).or_insert_with(|| PATH_DEFAULT.into());
    env.insert("CUDA_VISIBLE_DEVICES".into(), plan.gpu_uuids.join(","));
    env.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
    env.insert("CARMA_TASK_ID".into(), plan.task_id.clone());
    env.insert("CARMA_ATTEMPT".into(), plan.attempt.to_string());
    env.insert(ATTEMPT_TAG_ENV.into(), attempt_tag(&plan.task_id, plan.attempt));
    if let Some(limit) = mps_pinned_mem_limit(plan) {
        env.insert("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), limit);
    }
    env
}

/// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` for the plan: NVIDIA's MPS guide
/// (appendix "Environment Variables") documents a comma-separated list of
/// `<device ordinal>=<limit>` pairs such as `0=1G,1=512M`. Ordinals are
/// those the client sees, i.e. positions in `CUDA_VISIBLE_DEVICES`, so
/// each allocated GPU gets `<i>=<mib>M`. `None` without a limit or GPUs.
pub(crate) fn mps_pinned_mem_limit(plan: &AttemptPlan) -> Option<String> {
    let mib = plan.mps_mem_limit_mib?;
    if plan.gpu_uuids.is_empty() {
        return None;
    }
    Some(pinned_mem_limit(plan.gpu_uuids.len(), mib))
}

/// The `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` value capping each of a client's first `gpus`
/// devices at `mib`: `0=<mib>M,1=<mib>M,...`.
pub fn pinned_mem_limit(gpus: usize, mib: u64) -> String {
    let pairs: Vec<String> = (0..gpus).map(|index| format!("{index}={mib}M")).collect();
    pairs.join(",")
}

/// The program to execute for `argv0`: a name with a `/` is taken as a
/// path (relative to `workdir`); a bare name is searched in `path_var`.
pub(crate) fn resolve_program(argv0: &str, path_var: &str, workdir: &Path) -> Result<PathBuf, String> {
    if argv0.contains('/') {
        return Ok(workdir.join(argv0));
    }
    for dir in path_var.split(':').filter(|dir| !dir.is_empty()) {
        let candidate = workdir.join(dir).join(argv0);
        let executable = std::fs::metadata(&candidate)
            .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
            .unwrap_or(false);
        if executable {
            return Ok(candidate);
        }
    }
    Err(format!("program `{argv0}` not found in PATH {path_var}"))
}

/// Spawn the job: `program` with `plan.argv`, `env` only, stdout and
/// stderr to the given files, and the `pre_exec` steps in the module docs;
/// `cgroup_procs` are the attempt's cgroups' `cgroup.procs` (its v2 cgroup's, and its v1
/// ones' where host limits are set on cgroup v1), none without a cgroup. With a `terminal` (an
/// interactive attempt, [`super::interactive`]) the job's three streams are that terminal,
/// which becomes its controlling terminal in a session of its own, and `logs` go unused.
pub(crate) fn spawn_job(
    plan: &AttemptPlan,
    program: &Path,
    env: &BTreeMap<String, String>,
    credentials: &JobCredentials,
    logs: (File, File),
    cgroup_procs: &[&File],
    terminal: Option<&OwnedFd>,
) -> Result<Child, String> {
    let (argv0, args) = plan.argv.split_first().ok_or("argv is empty")?;
    let workdir =
        CString::new(plan.workdir.as_os_str().as_bytes()).map_err(|_| "workdir contains a NUL byte")?;
    let mut command = Command::new(program);
    command.arg0(argv0).args(args).env_clear().envs(env);
    match terminal {
        Some(slave) => {
            let stream = || {
                slave.try_clone().map(Stdio::from).map_err(|err| format!("cannot pass the terminal: {err}"))
            };
            command.stdin(stream()?).stdout(stream()?).stderr(stream()?);
        }
        None => {
            command.stdin(Stdio::null()).stdout(logs.0).stderr(logs.1);
        }
    }
    let session = terminal.is_some();
    let credentials = credentials.clone();
    let parent_pid = std::process::id();
    let cgroup_fds: Vec<RawFd> = cgroup_procs.iter().map(|file| file.as_raw_fd()).collect();
    // SAFETY: the closure runs in the forked child before exec and only
    // calls async-signal-safe functions; it allocates nothing (the CString
    // and the group list were built before the fork).
    unsafe {
        command.pre_exec(move || child_setup(&credentials, &workdir, parent_pid, &cgroup_fds, session));
    }
    command.spawn().map_err(|err| {
        format!("cannot start `{argv0}` ({}) in {}: {err}", program.display(), plan.workdir.display())
    })
}

/// Spawn the job inside its own cgroup when one can be made; if the move
/// into it is refused, spawn again without one (nothing ran: the refused
/// child stopped before exec).
pub(crate) fn spawn_contained(
    plan: &AttemptPlan,
    program: &Path,
    env: &std::collections::BTreeMap<String, String>,
    credentials: &JobCredentials,
    logs: (std::fs::File, std::fs::File),
    terminal: Option<&std::os::fd::OwnedFd>,
) -> Result<(Child, Option<JobCgroup>, Option<V1Cgroups>), String> {
    let v1 = super::hostlimit_v1::for_job(&plan.task_id, plan.attempt, &plan.host_limits);
    let v2_limits = super::hostlimit_v1::left_for_v2(&plan.host_limits, v1.as_ref());
    let limited_base = || super::hostlimit::limited_base_or_say(&v2_limits);
    let cgroup = JobCgroup::create(&plan.task_id, plan.attempt, limited_base)
        .map_err(|why| {
            eprintln!("carma run-task: no cgroup for the job ({why}); its process tree contains it")
        })
        .ok();
    super::hostlimit::apply_or_say(&v2_limits, cgroup.as_ref().map(|c| c.path.as_path()));
    let procs = cgroup.as_ref().and_then(|cgroup| {
        cgroup
            .open_procs()
            .map_err(|err| eprintln!("carma run-task: cannot open {}: {err}", cgroup.path.display()))
            .ok()
    });
    let cgroup = match procs {
        Some(_) => cgroup,
        None => {
            if let Some(cgroup) = &cgroup {
                let _ = cgroup.remove();
            }
            None
        }
    };
    let (v1, v1_procs) = super::hostlimit_v1::with_procs(v1).unzip();
    let files: Vec<&std::fs::File> = procs.iter().chain(v1_procs.iter().flatten()).collect();
    let spare = (logs.0.try_clone(), logs.1.try_clone());
    match spawn_job(plan, program, env, credentials, logs, &files, terminal) {
        Ok(child) => Ok((child, cgroup, v1)),
        Err(reason) if !files.is_empty() => {
            eprintln!(
                "carma run-task: starting the job in its cgroup failed ({reason}); trying without a cgroup"
            );
            if let Some(cgroup) = &cgroup {
                let _ = cgroup.remove();
            }
            v1.iter().for_each(V1Cgroups::remove_or_say);
            let (Ok(stdout), Ok(stderr)) = spare else { return Err(reason) };
            spawn_job(plan, program, env, credentials, (stdout, stderr), &[], terminal)
                .map(|child| (child, None, None))
        }
        Err(reason) => Err(reason),
    }
}

/// The `pre_exec` body; see the module docs for the order and why.
fn child_setup(
    credentials: &JobCredentials,
    workdir: &CStr,
    parent_pid: u32,
    cgroup_fds: &[RawFd],
    session: bool,
) -> std::io::Result<()> {
    let check = |result: libc::c_int| {
        if result == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
    };
    // SAFETY: plain syscalls on this process with valid pointers and lengths.
    unsafe {
        if session {
            // A session (and so a process group) of its own, its terminal (fd 0, set up
            // before this runs) its controlling one: a shell's job control works.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            check(libc::ioctl(0, libc::TIOCSCTTY, 0))?;
        } else {
            check(libc::setpgid(0, 0))?;
        }
        for &fd in cgroup_fds {
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                // Refused (e.g. controllers enabled below the supervisor's cgroup):
                // fail before exec, and the supervisor starts the job without one.
                return Err(std::io::Error::last_os_error());
            }
        }
        if credentials.switch_user {
            let groups = &credentials.groups;
            check(libc::setgroups(groups.len() as libc::size_t, groups.as_ptr()))?;
            check(libc::setgid(credentials.gid))?;
            check(libc::setuid(credentials.uid))?;
            if libc::geteuid() != credentials.uid || libc::getegid() != credentials.gid {
                return Err(std::io::Error::from_raw_os_error(libc::EPERM));
            }
        }
        check(libc::chdir(workdir.as_ptr()))?;
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0))?;
        if libc::getppid() as u32 != parent_pid {
            // The supervisor died before the prctl: the signal will never come.
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        super::inherit::scrub_in_child();
    }
    Ok(())
}

/// The user's supplementary groups plus `gid`, via `getgrouplist`; just
/// `[gid]` if the lookup fails.
fn group_list(user: &str, gid: u32) -> Vec<libc::gid_t> {
    let Ok(name) = CString::new(user) else {
        return vec![gid];
    };
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut count = groups.len() as libc::c_int;
        // SAFETY: `groups` has room for `count` entries.
        let found = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        let count = usize::try_from(count).unwrap_or(0);
        if found >= 0 {
            groups.truncate(count);
            return groups;
        }
        if count <= groups.len() || count > GROUPS_COUNT_MAX {
            return vec![gid];
        }
        groups.resize(count, 0);
    }
}

#[cfg(test)]
mod tests {
    //! Goal: env precedence, MPS limit format, PATH resolution and the
    //! wrong-user refusal, without spawning.
    use super::*;
    use crate::exec::plan::tests::sample_plan;

    fn plain_credentials() -> JobCredentials {
        JobCredentials { uid: 1000, gid: 1000, groups: vec![], switch_user: false, user_home: None }
    }

    #[test]
    fn carma_variables_win_over_plan_env() {
        let mut plan = sample_plan();
        plan.gpu_uuids = vec!["GPU-a".into(), "GPU-b".into()];
        plan.env.insert("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into());
        plan.env.insert("LANG".into(), "C.UTF-8".into());
        plan.env.insert("CARMA_ATTEMPT_TAG".into(), "escape/1".into());
        let inherited = |key: &str| match key {
            "LANG" => Some("en_US.UTF-8".to_string()),
            "HOME" => Some("/root".to_string()),
            "SECRET" => Some("leak".to_string()),
            _ => None,
        };
        let mut credentials = plain_credentials();
        credentials.user_home = Some(("alice".into(), "/home/alice".into()));
        let env = build_env(&plan, &credentials, &inherited);
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "GPU-a,GPU-b");
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        assert_eq!(env["CARMA_TASK_ID"], "01jd3k5m7n4x8z2q");
        assert_eq!(env["CARMA_ATTEMPT"], "1");
        assert_eq!(env["CARMA_ATTEMPT_TAG"], "01jd3k5m7n4x8z2q/1");
        assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=12000M,1=12000M");
        assert_eq!(env["LANG"], "C.UTF-8");
        assert_eq!(env["HOME"], "/home/alice");
        assert_eq!(env["USER"], "alice");
        assert_eq!(env["PATH"], PATH_DEFAULT);
        assert!(!env.contains_key("SECRET"));
    }

    #[test]
    fn a_user_without_passwd_entry_gets_no_identity_of_root() {
        // Goal: root's HOME, USER and LOGNAME never reach a job run as another uid, even one
        // that has no passwd entry to take them from (before: HOME=/root, USER=root).
        let plan = sample_plan();
        let credentials =
            JobCredentials { uid: 4242, gid: 4242, groups: vec![4242], switch_user: true, user_home: None };
        let inherited = |key: &str| match key {
            "HOME" => Some("/root".to_string()),
            "USER" | "LOGNAME" => Some("root".to_string()),
            "LANG" => Some("C.UTF-8".to_string()),
            _ => None,
        };
        let env = build_env(&plan, &credentials, &inherited);
        for key in IDENTITY_ENV_KEYS {
            assert_eq!(env.get(*key), None, "{key} of root reached the job");
        }
        assert_eq!(env["LANG"], "C.UTF-8");
        let own = build_env(&plan, &plain_credentials(), &inherited);
        assert_eq!(own["HOME"], "/root", "a supervisor running its own user's job passes its HOME");
    }

    #[test]
    fn mps_limit_needs_gpus_and_a_limit() {
        let mut plan = sample_plan();
        assert_eq!(mps_pinned_mem_limit(&plan).as_deref(), Some("0=12000M"));
        plan.mps_mem_limit_mib = None;
        assert_eq!(mps_pinned_mem_limit(&plan), None);
        plan.mps_mem_limit_mib = Some(1);
        plan.gpu_uuids.clear();
        assert_eq!(mps_pinned_mem_limit(&plan), None);
    }

    #[test]
    fn program_resolution() {
        let workdir = Path::new("/tmp");
        assert_eq!(resolve_program("sh", "/nonexistent:/bin", workdir), Ok(PathBuf::from("/bin/sh")));
        assert_eq!(resolve_program("./run.sh", "/bin", workdir), Ok(PathBuf::from("/tmp/./run.sh")));
        assert_eq!(resolve_program("/bin/true", "", workdir), Ok(PathBuf::from("/bin/true")));
        let err = resolve_program("no-such-program-carma", "/bin:/usr/bin", workdir).expect_err("missing");
        assert!(err.contains("no-such-program-carma"), "{err}");
    }

    #[test]
    fn job_gets_own_group_and_dies_with_its_spawning_thread() {
        // Method: spawn `sleep 20` from a short-lived thread, as the
        // supervisor would, and let the thread exit without waiting. The
        // parent-death signal must SIGKILL the job; without it, waitpid
        // would report a normal exit after 20 s.
        let dir = tempfile::tempdir().expect("tempdir");
        let mut plan = sample_plan();
        // As root, switch user: a credential change clears the parent-death
        // signal, so this also checks it is set after the switch.
        let euid = crate::access::uid::effective();
        plan.uid = if euid == 0 { 65534 } else { euid };
        plan.argv = vec!["sleep".into(), "20".into()];
        plan.workdir = PathBuf::from("/");
        let credentials = resolve_credentials(&plan).expect("credentials");
        let env = build_env(&plan, &credentials, &|key| std::env::var(key).ok());
        let program = resolve_program("sleep", &env["PATH"], &plan.workdir).expect("sleep on PATH");
        let logs = (
            crate::exec::output::open_run_log(&dir.path().join("out"), &credentials).expect("out").0,
            crate::exec::output::open_run_log(&dir.path().join("err"), &credentials).expect("err").0,
        );
        // The child is reaped below with libc::waitpid, by pid.
        #[allow(clippy::zombie_processes)]
        let spawner = std::thread::spawn(move || {
            let child = spawn_job(&plan, &program, &env, &credentials, logs, &[], None).expect("spawn");
            let pid = child.id();
            let stat = crate::exec::liveness::read_proc_stat(pid).expect("job stat");
            assert_eq!(stat.pgrp as u32, pid, "job must lead its own process group");
            pid
        });
        let pid = spawner.join().expect("spawner thread") as libc::pid_t;
        let started = std::time::Instant::now();
        let mut status: libc::c_int = 0;
        // SAFETY: waits for our own child; status is a valid out pointer.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid);
        assert!(libc::WIFSIGNALED(status), "job exited normally: pdeathsig not set");
        assert_eq!(libc::WTERMSIG(status), libc::SIGKILL);
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn a_refused_cgroup_move_fails_before_exec() {
        // A descriptor the child cannot write stands in for a cgroup.procs the kernel
        // refuses: the spawn must fail, and the program must not run.
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("ran");
        let mut plan = sample_plan();
        plan.uid = crate::access::uid::effective();
        plan.argv = vec!["sh".into(), "-c".into(), format!("touch {}", marker.display())];
        plan.workdir = PathBuf::from("/");
        let credentials = resolve_credentials(&plan).expect("credentials");
        let env = build_env(&plan, &credentials, &|key| std::env::var(key).ok());
        let program = resolve_program("sh", &env["PATH"], &plan.workdir).expect("sh on PATH");
        let logs = (File::open("/dev/null").expect("null"), File::open("/dev/null").expect("null"));
        let read_only = File::open("/dev/null").expect("null");
        let err =
            spawn_job(&plan, &program, &env, &credentials, logs, &[&read_only], None).expect_err("refused");
        assert!(err.contains("Bad file descriptor"), "{err}");
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!marker.exists(), "the job ran although its cgroup move failed");
    }

    #[test]
    fn a_job_inherits_no_descriptor_of_its_supervisor() {
        // Goal: a descriptor the supervisor holds without close-on-exec (as a tick's parent
        // can leave one) does not reach the job, run as another user when root. Method: the
        // job lists /proc/self/fd into its stdout log; before the scrub fd 200+ was there.
        use crate::exec::inherit::tests::{descriptors, leaked_descriptor};
        let leaked = leaked_descriptor();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut plan = sample_plan();
        let euid = crate::access::uid::effective();
        plan.uid = if euid == 0 { 65534 } else { euid };
        plan.argv = vec!["ls".into(), "/proc/self/fd".into()];
        plan.workdir = PathBuf::from("/");
        let credentials = resolve_credentials(&plan).expect("credentials");
        let env = build_env(&plan, &credentials, &|key| std::env::var(key).ok());
        let program = resolve_program("ls", &env["PATH"], &plan.workdir).expect("ls on PATH");
        let out = dir.path().join("out");
        let logs = (
            crate::exec::output::open_run_log(&out, &credentials).expect("out").0,
            crate::exec::output::open_run_log(&dir.path().join("err"), &credentials).expect("err").0,
        );
        let mut child = spawn_job(&plan, &program, &env, &credentials, logs, &[], None).expect("spawn");
        assert!(child.wait().expect("wait").success());
        let listing = std::fs::read_to_string(&out).expect("listing");
        assert!(!descriptors(&listing).contains(&(leaked.as_raw_fd() as u32)), "leaked: {listing}");
        // 3 is the directory `ls` itself opened.
        assert_eq!(descriptors(&listing), [0, 1, 2, 3], "{listing}");
    }

    #[test]
    fn credentials_follow_the_supervisor_user() {
        let euid = crate::access::uid::effective();
        let mut plan = sample_plan();
        plan.uid = if euid == 0 { 65534 } else { euid };
        let credentials = resolve_credentials(&plan).expect("own or root");
        assert_eq!(credentials.uid, plan.uid);
        assert_eq!(credentials.switch_user, euid == 0);
        if euid == 0 {
            assert!(credentials.groups.contains(&credentials.gid));
        } else {
            plan.uid = euid + 1;
            let err = resolve_credentials(&plan).expect_err("wrong user");
            assert!(err.contains("refusing"), "{err}");
        }
    }
}
