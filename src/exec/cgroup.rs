//! A cgroup v2 of the job's own: `<the supervisor's cgroup>/carma-task-ID-N`.
//!
//! The job is moved into it between fork and exec (before it drops root),
//! so every process it ever starts is born inside. A process cannot leave a
//! cgroup without write access to another one, which a non-root job does
//! not have; `cgroup.procs` therefore lists the attempt's processes exactly,
//! whatever they do with sessions, process groups, parents or their
//! environment, and `cgroup.kill` (Linux 5.14) ends them all at once.
//!
//! It is made only where that is safe and possible:
//! * the supervisor is root (only root may move a process between cgroups
//!   it does not own);
//! * it is not a systemd unit (`INVOCATION_ID` unset): systemd owns its
//!   units' cgroups and the unit's `KillMode=control-group` already
//!   contains the job there;
//! * a cgroup2 hierarchy is mounted and the supervisor's own cgroup in it
//!   is writable (containers often mount it read-only);
//! * `CARMA_NO_CGROUP` is unset (to exercise the fallback as root).
//!
//! Anything else, including a move that the kernel refuses (a cgroup with
//! controllers enabled below it), falls back to the process-tree containment
//! in [`super::contain`], which runs in every case anyway: the cgroup makes
//! it exact, it does not replace it.
//!
//! # Containers
//! Chosen: use it whenever the checks above pass, and never depend on it.
//! In containers the hierarchy is usually mounted read-only (then `mkdir`
//! fails and carma says so in `supervisor.log`); where it is writable, as in
//! a privileged CI container with a cgroup2 mount beside the v1 controllers,
//! it works like on a host: the job's cgroup is a child of the supervisor's
//! (from `/proc/self/cgroup`, mapped through the mount's root in
//! `/proc/self/mountinfo`, so a cgroup namespace is fine), no controller is
//! enabled, so the "no internal processes" rule cannot bite, and only
//! `cgroup.procs` and `cgroup.kill` are used. What it costs: moving the
//! child takes the kernel's cgroup write lock (about 30 ms measured here),
//! so the job starts that much later. What it cannot do: end a process that
//! another mechanism keeps from dying (a v1 freezer, an uninterruptible
//! sleep); such survivors are reported, and the tick holds the attempt.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Component, Path, PathBuf};

/// Set (to anything) to never use a cgroup, e.g. to test the fallback.
pub const NO_CGROUP_ENV: &str = "CARMA_NO_CGROUP";

/// One attempt's cgroup directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCgroup {
    /// `…/carma-task-ID-N` inside a cgroup2 mount.
    pub path: PathBuf,
}

/// `carma-task-ID-N`: the name of an attempt's cgroup.
pub fn cgroup_name(task_id: &str, attempt: u32) -> String {
    format!("carma-task-{task_id}-{attempt}")
}

impl JobCgroup {
    /// Make the attempt's cgroup below the supervisor's own; `Err` says why
    /// none is used (not an error for the attempt: it runs uncontained by a
    /// cgroup, contained by its process tree).
    /// `limited_base` gives the folder for a job with host limits (`carma.jobs` at the
    /// hierarchy's top, where the kernel lets their controllers be enabled), or `None`: then
    /// below the supervisor's own, as without limits. It is asked only once the checks pass.
    pub fn create(
        task_id: &str,
        attempt: u32,
        limited_base: impl FnOnce() -> Option<PathBuf>,
    ) -> Result<JobCgroup, String> {
        if crate::access::uid::effective() != 0 {
            return Err("the supervisor is not root".into());
        }
        if std::env::var_os(NO_CGROUP_ENV).is_some() {
            return Err(format!("{NO_CGROUP_ENV} is set"));
        }
        if std::env::var_os("INVOCATION_ID").is_some() {
            return Err("the supervisor is a systemd unit; its unit's cgroup contains the job".into());
        }
        let base = match limited_base() {
            Some(base) => base,
            None => own_cgroup_dir().ok_or("no cgroup2 hierarchy holds the supervisor")?,
        };
        let path = base.join(cgroup_name(task_id, attempt));
        match std::fs::create_dir(&path) {
            Ok(()) => Ok(JobCgroup { path }),
            // Only this attempt's supervisor uses the name, and the claim is exclusive.
            Err(err) if err.kind() == ErrorKind::AlreadyExists => Ok(JobCgroup { path }),
            Err(err) => Err(format!("cannot create {}: {err}", path.display())),
        }
    }

    /// The cgroup recorded in `job.json`, if it is one carma could have
    /// made for this attempt: absolute, inside a cgroup2 mount, named
    /// `carma-task-ID-N`, no `..`.
    pub fn recorded(path: &Path, task_id: &str, attempt: u32) -> Option<JobCgroup> {
        let named = path.file_name().and_then(|name| name.to_str()) == Some(&cgroup_name(task_id, attempt));
        let plain = path.is_absolute()
            && path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        let mounted = cgroup2_mount().is_some_and(|(mount, _)| path.starts_with(mount));
        (named && plain && mounted).then(|| JobCgroup { path: path.to_path_buf() })
    }

    /// `cgroup.procs`, opened for the child to write `0` into (itself).
    pub fn open_procs(&self) -> std::io::Result<File> {
        OpenOptions::new().write(true).open(self.path.join("cgroup.procs"))
    }

    /// Every process in the cgroup and in any cgroup below it.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        collect_pids(&self.path, &mut pids, 0);
        pids
    }

    /// SIGKILL everything inside at once with `cgroup.kill`. `Ok(false)` on
    /// kernels without it (before 5.14): the caller signals each process.
    pub fn kill(&self) -> std::io::Result<bool> {
        match OpenOptions::new().write(true).open(self.path.join("cgroup.kill")) {
            Ok(mut file) => file.write_all(b"1").map(|()| true),
            Err(err) if err.kind() == ErrorKind::NotFound && self.path.is_dir() => Ok(false),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(true),
            Err(err) => Err(err),
        }
    }

    /// Freezes (`true`) or thaws the whole cgroup through `cgroup.freeze` (Linux 5.2): a
    /// frozen process runs no instruction whatever signal it gets, SIGCONT included, until
    /// thawed (SIGKILL still ends it). `Ok(false)` where the kernel has no `cgroup.freeze`.
    pub fn freeze(&self, frozen: bool) -> std::io::Result<bool> {
        match OpenOptions::new().write(true).open(self.path.join("cgroup.freeze")) {
            Ok(mut file) => file.write_all(if frozen { b"1" } else { b"0" }).map(|()| true),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Whether the kernel says every process in the cgroup is frozen (`cgroup.events`'
    /// `frozen 1`); false where there is no such file.
    pub fn frozen(&self) -> bool {
        std::fs::read_to_string(self.path.join("cgroup.events"))
            .is_ok_and(|text| text.lines().any(|line| line.trim() == "frozen 1"))
    }

    /// Remove the (empty) cgroup and any left below it; a cgroup that is
    /// already gone is fine.
    pub fn remove(&self) -> std::io::Result<()> {
        remove_tree(&self.path, 0)
    }
}

/// How deep [`collect_pids`] and [`remove_tree`] go; a job cannot nest
/// cgroups deeper than `cgroup.max.depth` anyway.
const CGROUP_DEPTH_MAX: usize = 32;

fn collect_pids(dir: &Path, pids: &mut Vec<u32>, depth: usize) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|line| line.trim().parse::<u32>().ok()));
    }
    if depth >= CGROUP_DEPTH_MAX {
        return;
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_pids(&entry.path(), pids, depth + 1);
        }
    }
}

fn remove_tree(dir: &Path, depth: usize) -> std::io::Result<()> {
    if depth < CGROUP_DEPTH_MAX {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path(), depth + 1)?;
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The directory of this process's own cgroup in the cgroup2 hierarchy.
pub(crate) fn own_cgroup_dir() -> Option<PathBuf> {
    let (mount, root) = cgroup2_mount()?;
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = text.lines().find_map(|line| line.strip_prefix("0::"))?;
    let relative = if root == "/" { own } else { own.strip_prefix(root.as_str())? };
    let dir = mount.join(relative.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

/// The first cgroup2 mount: its mount point and the cgroup path it shows
/// as its root, from `/proc/self/mountinfo`.
pub(crate) fn cgroup2_mount() -> Option<(PathBuf, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(parse_cgroup2_mountinfo_line)
}

/// `36 35 0:30 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw`
/// → (`/sys/fs/cgroup/unified`, `/`) for a cgroup2 line, else `None`.
fn parse_cgroup2_mountinfo_line(line: &str) -> Option<(PathBuf, String)> {
    let (before, after) = line.split_once(" - ")?;
    if after.split_whitespace().next()? != "cgroup2" {
        return None;
    }
    let fields: Vec<&str> = before.split_whitespace().collect();
    let root = unescape_mountinfo(fields.get(3)?);
    let mount = unescape_mountinfo(fields.get(4)?);
    Some((PathBuf::from(mount), root))
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
pub(crate) fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let octal = bytes
            .get(index + 1..index + 4)
            .filter(|digits| bytes[index] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        match octal {
            Some(digits) => {
                out.push(digits.iter().fold(0u8, |value, d| value.wrapping_mul(8) + (d - b'0')));
                index += 4;
            }
            None => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the cgroup v2 hierarchy lacks `controller` and a v1 hierarchy holds it: then
/// carma limits it on v1 ([`super::hostlimit_v1`]).
pub fn uses_v1(controller: &str) -> bool {
    let v2_offers = cgroup2_mount().is_some_and(|(mount, _)| {
        let text = std::fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
        text.split_whitespace().any(|c| c == controller)
    });
    !v2_offers && v1_mount(controller).is_some()
}

/// The supervisor's own cgroup in `controller`'s v1 hierarchy.
pub fn own_v1_dir(controller: &str) -> Option<PathBuf> {
    let (mount, root) = v1_mount(controller)?;
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own_v1_path(&text, controller)?;
    let relative = if root == "/" { own } else { own.strip_prefix(root.as_str())? };
    let dir = mount.join(relative.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

/// The path of `N:controllers:/path` whose controllers include `controller`.
fn own_v1_path<'a>(proc_cgroup: &'a str, controller: &str) -> Option<&'a str> {
    proc_cgroup.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers.split(',').any(|c| c == controller).then_some(path)
    })
}

/// The v1 hierarchy of `controller`: its mount point and the cgroup it shows as its root.
fn v1_mount(controller: &str) -> Option<(PathBuf, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|line| parse_v1_mountinfo_line(line, controller))
}

/// `35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory` →
/// (`/sys/fs/cgroup/memory`, `/`) for `memory`; `None` for other lines.
fn parse_v1_mountinfo_line(line: &str, controller: &str) -> Option<(PathBuf, String)> {
    let (before, after) = line.split_once(" - ")?;
    let mut after = after.split_whitespace();
    let (kind, _source, options) = (after.next()?, after.next()?, after.next()?);
    if kind != "cgroup" || !options.split(',').any(|option| option == controller) {
        return None;
    }
    let fields: Vec<&str> = before.split_whitespace().collect();
    let root = unescape_mountinfo(fields.get(3)?);
    let mount = unescape_mountinfo(fields.get(4)?);
    Some((PathBuf::from(mount), root))
}

#[cfg(test)]
mod tests {
    //! Goal: mountinfo parsing finds cgroup2 mounts (escaped paths too) and the v1
    //! hierarchy of a controller,
    //! and only cgroups named for the attempt are accepted from job.json.
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let line = "36 35 0:30 / /sys/fs/cgroup/unified rw,nosuid,nodev shared:9 - cgroup2 cgroup2 rw";
        assert_eq!(
            parse_cgroup2_mountinfo_line(line),
            Some((PathBuf::from("/sys/fs/cgroup/unified"), "/".to_string()))
        );
        let escaped = "40 1 0:31 /ns\\040a /mnt/cg\\040two rw - cgroup2 none rw";
        assert_eq!(
            parse_cgroup2_mountinfo_line(escaped),
            Some((PathBuf::from("/mnt/cg two"), "/ns a".to_string()))
        );
        let v1 = "30 25 0:26 / /sys/fs/cgroup/memory rw shared:5 - cgroup cgroup rw,memory";
        assert_eq!(parse_cgroup2_mountinfo_line(v1), None);
        assert_eq!(parse_cgroup2_mountinfo_line("garbage"), None);
    }

    #[test]
    fn v1_mounts_and_own_paths() {
        let memory = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory";
        assert_eq!(
            parse_v1_mountinfo_line(memory, "memory"),
            Some((PathBuf::from("/sys/fs/cgroup/memory"), "/".to_string()))
        );
        assert_eq!(parse_v1_mountinfo_line(memory, "cpu"), None);
        let both = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct";
        assert_eq!(
            parse_v1_mountinfo_line(both, "cpu"),
            Some((PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"), "/".to_string()))
        );
        assert_eq!(parse_v1_mountinfo_line(both, "cpuset"), None);
        let v2 = "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw";
        assert_eq!(parse_v1_mountinfo_line(v2, "memory"), None);
        assert_eq!(parse_v1_mountinfo_line("garbage", "memory"), None);

        let proc_cgroup = "4:memory:/lab/a\n2:cpu,cpuacct:/\n0::/\n";
        assert_eq!(own_v1_path(proc_cgroup, "memory"), Some("/lab/a"));
        assert_eq!(own_v1_path(proc_cgroup, "cpu"), Some("/"));
        assert_eq!(own_v1_path(proc_cgroup, "pids"), None);
    }

    #[test]
    fn only_this_attempts_cgroup_is_accepted() {
        let Some((mount, _)) = cgroup2_mount() else {
            eprintln!("skipped: no cgroup2 mount on this machine");
            return;
        };
        let good = mount.join("x").join(cgroup_name("abc", 2));
        assert_eq!(JobCgroup::recorded(&good, "abc", 2), Some(JobCgroup { path: good.clone() }));
        assert_eq!(JobCgroup::recorded(&good, "abc", 3), None, "another attempt");
        assert_eq!(JobCgroup::recorded(&mount.join("x/../carma-task-abc-2"), "abc", 2), None);
        assert_eq!(JobCgroup::recorded(Path::new("/tmp/carma-task-abc-2"), "abc", 2), None);
    }
}
