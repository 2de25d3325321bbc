//! Short helper processes started for a task's submitter and never waited for: the
//! notification a task asked for when it ends (`--notify CMD`, or `sendmail -t`).
//!
//! They run exactly like a job as far as identity goes: as the submitter (a root tick drops
//! to their uid, gid and groups in the child before exec, with the credentials of
//! [`super::spawn`]; a tick that is not root runs them only for its own user), without a
//! shell, in their own session, with `/dev/null` for output and only the environment given.
//! The tick never waits for one: a thread reaps it if it ends while the tick still runs, and
//! a message for its standard input (a mail) is written from a thread too, so nothing a user
//! controls can hold a tick up.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::spawn::{JobCredentials, credentials_for};

/// What to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachedRequest<'a> {
    /// Who runs it.
    pub uid: u32,
    /// An absolute program path.
    pub program: &'a Path,
    /// The whole argv, `argv[0]` included.
    pub argv: &'a [String],
    /// Its entire environment (nothing is inherited), added to `HOME`, `USER`, `LOGNAME` and
    /// a default `PATH`.
    pub env: &'a BTreeMap<String, String>,
    /// Where it starts; `/` when the submitter cannot enter it.
    pub workdir: &'a Path,
    /// Written to its standard input, which is then closed; `None`: `/dev/null`.
    pub stdin: Option<Vec<u8>>,
}

/// Starts the process and returns its pid; never waits for it.
pub fn spawn_detached(request: DetachedRequest<'_>) -> Result<u32, String> {
    if !request.program.is_absolute() {
        return Err(format!("{} is not an absolute path", request.program.display()));
    }
    let credentials = credentials_for(request.uid, None)?;
    let (argv0, args) = request.argv.split_first().ok_or("the command is empty")?;
    let workdir =
        CString::new(request.workdir.as_os_str().as_bytes()).map_err(|_| "workdir has a NUL byte")?;
    let mut env = BTreeMap::from([("PATH".to_string(), "/usr/local/bin:/usr/bin:/bin".to_string())]);
    if let Some((user, home)) = &credentials.user_home {
        env.insert("HOME".into(), home.clone());
        env.insert("USER".into(), user.clone());
        env.insert("LOGNAME".into(), user.clone());
    }
    env.extend(request.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut command = Command::new(request.program);
    command.arg0(argv0).args(args).env_clear().envs(&env);
    command.stdout(Stdio::null()).stderr(Stdio::null());
    command.stdin(if request.stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let credentials_in_child = credentials.clone();
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions on data prepared before the fork.
    unsafe {
        command.pre_exec(move || child_setup(&credentials_in_child, &workdir));
    }
    let mut child =
        command.spawn().map_err(|e| format!("cannot start {}: {e}", request.program.display()))?;
    let pid = child.id();
    let stdin = child.stdin.take();
    std::thread::spawn(move || {
        if let (Some(mut pipe), Some(bytes)) = (stdin, request.stdin) {
            let _ = pipe.write_all(&bytes);
        }
        // Reaps it if the tick is still alive when it ends; otherwise init does.
        let _ = child.wait();
    });
    Ok(pid)
}

/// The child's steps before exec: a session of its own, the submitter's credentials, the
/// working directory (or `/`), and nothing inherited but its standard streams
/// ([`super::inherit`]).
fn child_setup(credentials: &JobCredentials, workdir: &CString) -> std::io::Result<()> {
    let check = |result: libc::c_int| {
        if result == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
    };
    // SAFETY: plain syscalls on this process with valid pointers and lengths.
    unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
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
        if libc::chdir(workdir.as_ptr()) != 0 {
            check(libc::chdir(c"/".as_ptr()))?;
        }
        super::inherit::scrub_in_child();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Goal: the helper runs with exactly the environment given, in its own session, as the
    //! submitter, and reads the stdin message; the caller does not wait for it.
    use super::*;

    #[test]
    fn runs_detached_with_the_given_environment_and_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = format!(
            "cat > {0}.stdin; echo \"$CARMA_OUTCOME $(id -u) $(ps -o sid= -p $$ | tr -d ' ') $$\" > {0}.tmp; mv {0}.tmp {0}",
            out.display()
        );
        let argv = vec!["sh".to_string(), "-c".into(), script];
        let env = BTreeMap::from([("CARMA_OUTCOME".to_string(), "Finished".to_string())]);
        let uid = crate::access::uid::effective();
        let request = DetachedRequest {
            uid,
            program: Path::new("/bin/sh"),
            argv: &argv,
            env: &env,
            workdir: Path::new("/nonexistent-carma-dir"),
            stdin: Some(b"hello\n".to_vec()),
        };
        let pid = spawn_detached(request).unwrap();
        for _ in 0..200 {
            if out.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let line = std::fs::read_to_string(&out).expect("the helper ran");
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], "Finished");
        assert_eq!(words[1], uid.to_string());
        assert_eq!(words[2], words[3], "it leads its own session");
        assert_eq!(words[3], pid.to_string());
        assert_eq!(std::fs::read_to_string(format!("{}.stdin", out.display())).unwrap(), "hello\n");
        let relative = spawn_detached(DetachedRequest {
            program: Path::new("sh"),
            stdin: None,
            ..request_for(&argv, &env)
        });
        assert_eq!(relative.unwrap_err(), "sh is not an absolute path");
    }

    #[test]
    fn a_helper_inherits_no_descriptor_of_the_tick() {
        // Goal: a notify or mail helper gets its three standard streams and no descriptor the
        // tick holds without close-on-exec (before the scrub, fd 200+ was listed). The helper
        // is `sh` listing /proc/self/fd into a file it creates.
        use crate::exec::inherit::tests::{descriptors, leaked_descriptor};
        use std::os::fd::AsRawFd;
        let leaked = leaked_descriptor();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("fds");
        let script = format!("ls /proc/self/fd > {0}.tmp; mv {0}.tmp {0}", out.display());
        let argv = vec!["sh".to_string(), "-c".into(), script];
        let env = BTreeMap::new();
        let request = DetachedRequest {
            uid: crate::access::uid::effective(),
            program: Path::new("/bin/sh"),
            ..request_for(&argv, &env)
        };
        spawn_detached(request).unwrap();
        for _ in 0..250 {
            if out.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let listing = std::fs::read_to_string(&out).expect("the helper ran");
        assert!(!descriptors(&listing).contains(&(leaked.as_raw_fd() as u32)), "leaked: {listing}");
        // 1 is the listing's file; 3 is the directory `ls` opened.
        assert_eq!(descriptors(&listing), [0, 1, 2, 3], "{listing}");
    }

    fn request_for<'a>(argv: &'a [String], env: &'a BTreeMap<String, String>) -> DetachedRequest<'a> {
        DetachedRequest {
            uid: 0,
            program: Path::new("/bin/true"),
            argv,
            env,
            workdir: Path::new("/"),
            stdin: None,
        }
    }
}
