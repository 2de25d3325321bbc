//! Root's own scratch files are its own (issue 32, item 0): nothing a user plants in `/tmp`
//! or in a state directory is followed, written or chmodded by root.
//!
//! Method: a throw-away user plants what the audit planted (directories named as root's
//! scratch would be, with links to a root-owned victim file), a real `carma tick` is killed
//! mid-write (`strace -e inject=fdatasync:signal=KILL`), and the next tick runs its full
//! post-crash journal check, which copies the journal. The victim must be unchanged, nothing of
//! root's may be left in `/tmp`, and the copy lives and dies in the root-only
//! `private/scratch/`. `carma init` on planted parts must refuse, naming them.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::skip::{self, Need};
use common::users::{self, ThrowawayUser};
use common::{TestHome, assert_error};

/// The victim's bytes: what must still be there after the attack.
const PRECIOUS: &[u8] = b"root:$6$precious:19000:0:99999:7:::\n";
/// Pids ahead of the last one handed out that the user plants for, and copies per process.
const PIDS_PLANTED: u32 = 4000;
const COPIES_PLANTED: u32 = 3;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// A root-owned file, 0640, that no user may write: what `/etc/shadow` is to the attack.
fn victim(dir: &Path) -> PathBuf {
    let path = dir.join("shadow");
    std::fs::write(&path, PRECIOUS).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    path
}

fn assert_untouched(victim: &Path) {
    assert_eq!(std::fs::read(victim).unwrap(), PRECIOUS, "the victim's bytes are unchanged");
    assert_eq!(mode(victim), 0o640, "the victim's mode is unchanged");
    assert_eq!(std::fs::metadata(victim).unwrap().uid(), 0);
}

/// The pids the next processes will get, as far as can be told.
fn next_pids() -> Vec<u32> {
    let read = |path: &str| std::fs::read_to_string(path).unwrap().trim().parse::<u32>().unwrap();
    let last = read("/proc/sys/kernel/ns_last_pid");
    let max = read("/proc/sys/kernel/pid_max");
    (1..=PIDS_PLANTED).map(|n| (last + n) % max).filter(|p| *p > 1).collect()
}

/// `user` plants `/tmp/carma-inspect-PID-N/carma.redb` → `victim` for the next pids, as the
/// audit did: the names an earlier tick's journal check used. Returns the directories.
fn plant_inspect_links(user: &ThrowawayUser, victim: &Path, pids: &[u32]) -> Vec<PathBuf> {
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    let script = format!(
        "for my $p (@ARGV) {{ for my $n (0..{}) {{ my $d = \"/tmp/carma-inspect-$p-$n\"; \
         mkdir $d, 0755 or next; symlink '{}', \"$d/carma.redb\"; }} }}",
        COPIES_PLANTED - 1,
        victim.display()
    );
    let mut args = vec!["-e", script.as_str()];
    args.extend(pids.iter().map(String::as_str));
    let out = user.run("/usr/bin/perl", &args, &[], Path::new("/tmp"));
    assert!(out.status.success(), "planting: {}", common::stderr(&out));
    let planted: Vec<PathBuf> = pids
        .iter()
        .flat_map(|p| (0..COPIES_PLANTED).map(move |n| PathBuf::from(format!("/tmp/carma-inspect-{p}-{n}"))))
        .filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.uid() == user.uid))
        .collect();
    assert!(planted.len() > pids.len(), "the user planted {} directories", planted.len());
    planted
}

/// What root left in /tmp under the journal check's old names: directories of root's, or a
/// copy in one of the user's.
fn roots_inspect_leftovers() -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/tmp").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("carma-inspect-") {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else { continue };
        let copy = std::fs::symlink_metadata(entry.path().join("carma.redb"));
        if meta.uid() == 0 || copy.is_ok_and(|c| !c.file_type().is_symlink()) {
            found.push(name);
        }
    }
    found
}

/// The ticks' pids, made predictable: where a new pid namespace can be made (`unshare -p`),
/// the ticks run in one of their own and get the first pids of it, which no other process on
/// the machine shares (an older carma's journal check elsewhere would write through the same
/// links); otherwise the next pids of this one.
fn tick_pids() -> (Vec<u32>, Option<&'static str>) {
    let unshare = ["/usr/bin/unshare", "/bin/unshare"].into_iter().find(|p| Path::new(p).exists());
    let works =
        |u: &str| Command::new(u).args(["-p", "-f", "true"]).output().is_ok_and(|o| o.status.success());
    match unshare.filter(|u| works(u)) {
        Some(unshare) => ((1..=64).collect(), Some(unshare)),
        None => (next_pids(), None),
    }
}

/// `carma ARGS` on `home`, under `prefix` (strace's), in a new pid namespace when `unshare`.
fn tick_command(home: &TestHome, unshare: Option<&str>, prefix: &[&str]) -> Command {
    let carma = env!("CARGO_BIN_EXE_carma");
    let mut argv: Vec<&str> = prefix.to_vec();
    argv.extend([carma, "tick"]);
    let mut command = match unshare {
        Some(unshare) => {
            let mut c = Command::new(unshare);
            c.args(["-p", "-f", "--"]).args(&argv);
            c
        }
        None => {
            let mut c = Command::new(argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    command.env("CARMA_HOME", home.path()).env("CARMA_LOCK_TIMEOUT", "5s");
    command
}

fn strace() -> Option<&'static str> {
    ["/usr/bin/strace", "/bin/strace"].into_iter().find(|p| Path::new(p).exists())
}

/// A pid no process has now.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Goal: after a tick killed mid-write, the next tick's journal check never writes through a
/// user's links in /tmp (the victim keeps its bytes and mode), leaves no copy anywhere in
/// /tmp, keeps its copy in `private/scratch/` where the user cannot plant anything, and sweeps
/// the copy a killed check left there.
#[test]
fn a_crashed_ticks_journal_check_never_writes_through_a_users_links() {
    if users::skip_without_users() {
        return;
    }
    let Some(strace) = strace() else {
        skip::skip(Need::Strace, "needs strace to kill a tick mid-write (apt-get install strace)");
        return;
    };
    let mallory = ThrowawayUser::create("scr");
    let home = TestHome::new();
    // As a system queue: the state directory is traversable, only private/ is root's alone.
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(victim_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = victim(victim_dir.path());
    home.ok(&["submit", "--name", "job", "--", "true"]);

    // The new place is closed to the user: nothing can be planted in private/.
    let scratch = home.path().join("private/scratch");
    let planted_inside = mallory.run(
        "/bin/ln",
        &["-s", victim.to_str().unwrap(), scratch.join("inspect-1-0").to_str().unwrap()],
        &[],
        Path::new("/tmp"),
    );
    assert!(!planted_inside.status.success(), "the user cannot plant in private/");
    assert!(
        common::stderr(&planted_inside).contains("Permission denied"),
        "{}",
        common::stderr(&planted_inside)
    );

    // A copy a killed check left behind (its process is gone).
    let stale = scratch.join(format!("inspect-{}-00aa11bb22cc33dd", dead_pid()));
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(&stale)
        .unwrap();
    std::fs::write(stale.join("carma.redb"), b"a half copy").unwrap();

    // A full-size copy an older carma's killed check left in /tmp (root's, its process gone).
    let old_leftover = PathBuf::from(format!("/tmp/carma-inspect-{}-0", dead_pid()));
    std::fs::create_dir(&old_leftover).unwrap();
    std::fs::write(old_leftover.join("carma.redb"), b"an old copy of the journal").unwrap();

    let (pids, unshare) = tick_pids();
    let planted = plant_inspect_links(&mallory, &victim, &pids);
    let strace_argv = [strace, "-f", "-qq", "-o", "/dev/null", "-e", "inject=fdatasync:signal=KILL"];
    let killed = tick_command(&home, unshare, &strace_argv).output().unwrap();
    assert!(!killed.status.success(), "the tick was killed mid-write: {}", common::stderr(&killed));
    let out = tick_command(&home, unshare, &[]).output().unwrap();
    let leftovers = roots_inspect_leftovers();
    for dir in &planted {
        let _ = std::fs::remove_dir_all(dir);
    }
    assert!(out.status.success(), "the next tick recovers: {}", common::stderr(&out));
    assert_untouched(&victim);
    assert_eq!(leftovers, Vec::<String>::new(), "root left nothing under /tmp/carma-inspect-*");
    assert!(!stale.exists(), "the killed check's copy was swept by the next check");
    assert!(!old_leftover.exists(), "an older carma's copy in /tmp was swept too");
    let left: Vec<_> = std::fs::read_dir(&scratch).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "the check removed its copies: {left:?}");
    assert_eq!(mode(&scratch), 0o700);
    assert_eq!(std::fs::metadata(&scratch).unwrap().uid(), 0);
}

/// Goal: `carma init` refuses a state directory, or a part of one, that is a link or another
/// user's, with one line naming it and exit 73, and changes nothing behind it.
#[test]
fn init_refuses_planted_links_and_other_users_parts() {
    if users::skip_without_users() {
        return;
    }
    let mallory = ThrowawayUser::create("scr");
    let victims = tempfile::tempdir().unwrap();
    std::fs::set_permissions(victims.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = victim(victims.path());
    let victim_dir = victims.path().join("etc");
    std::fs::create_dir(&victim_dir).unwrap();
    std::fs::set_permissions(&victim_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fix = "nothing was changed there; remove it, or give `carma init --home` a new directory";

    // The user made the directory root is asked to initialise.
    // In a sticky directory anyone may write, as /tmp.
    let theirs = tempfile::tempdir().unwrap();
    std::fs::set_permissions(theirs.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let home = theirs.path().join("queue");
    let out = mallory.run("/bin/mkdir", &[home.to_str().unwrap()], &[], Path::new("/tmp"));
    assert!(out.status.success(), "{}", common::stderr(&out));
    let init = |home: &Path| {
        Command::new(env!("CARGO_BIN_EXE_carma")).args(["init", "--home"]).arg(home).output().unwrap()
    };
    assert_error(
        &init(&home),
        73,
        &format!("refusing {}: owned by uid {}, not by you (uid 0); {fix}", home.display(), mallory.uid),
    );
    assert!(std::fs::read_dir(&home).unwrap().next().is_none(), "nothing was made in it");

    // A root-owned state directory with links where its parts go (planted or left over).
    let home = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&victim_dir, home.path().join("spool")).unwrap();
    assert_error(
        &init(home.path()),
        73,
        &format!("refusing {}: a symbolic link; {fix}", home.path().join("spool").display()),
    );
    assert_eq!(mode(&victim_dir), 0o755, "the link's target was not made 1777");
    std::fs::remove_file(home.path().join("spool")).unwrap();
    std::os::unix::fs::symlink(&victim, home.path().join("carma.redb")).unwrap();
    assert_error(
        &init(home.path()),
        73,
        &format!("refusing {}: a symbolic link; {fix}", home.path().join("carma.redb").display()),
    );
    assert_untouched(&victim);
    std::fs::remove_file(home.path().join("carma.redb")).unwrap();
    // The config is the next victim (that run may or may not have made it before it refused
    // the journal's link).
    let _ = std::fs::remove_file(home.path().join("config.toml"));
    std::os::unix::fs::symlink(&victim, home.path().join("config.toml")).unwrap();
    assert_error(
        &init(home.path()),
        73,
        &format!("refusing {}: a symbolic link; {fix}", home.path().join("config.toml").display()),
    );
    assert_untouched(&victim);
    std::fs::remove_file(home.path().join("config.toml")).unwrap();
    let out = init(home.path());
    assert!(out.status.success(), "without the links init succeeds: {}", common::stderr(&out));
}

/// Goal: the demo (`carma` with no verb) never uses a name planted in /tmp or /dev/shm: it
/// works in a fresh directory with a random name, and a user's planted links are not followed.
#[test]
fn the_demo_never_uses_a_planted_directory() {
    if users::skip_without_users() {
        return;
    }
    let mallory = ThrowawayUser::create("scr");
    let victims = tempfile::tempdir().unwrap();
    std::fs::set_permissions(victims.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = victim(victims.path());
    let pids: Vec<String> = next_pids().iter().map(u32::to_string).collect();
    let script = format!(
        "for my $p (@ARGV) {{ for my $d (\"/tmp/carma-demo-$p\", \"/dev/shm/carma-demo-$p\") {{ \
         mkdir $d, 0755 or next; symlink '{v}', \"$d/gpus.json\"; symlink '{v}', \"$d/carma.redb\"; }} }}",
        v = victim.display()
    );
    let mut args = vec!["-e", script.as_str()];
    args.extend(pids.iter().map(String::as_str));
    let out = mallory.run("/usr/bin/perl", &args, &[], Path::new("/tmp"));
    assert!(out.status.success(), "planting: {}", common::stderr(&out));
    let demo = Command::new(env!("CARGO_BIN_EXE_carma")).env_remove("CARMA_HOME").output().unwrap();
    for p in &pids {
        for dir in [format!("/tmp/carma-demo-{p}"), format!("/dev/shm/carma-demo-{p}")] {
            if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.uid() == mallory.uid) {
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    let text = common::stdout(&demo);
    assert!(demo.status.success(), "the demo runs: {}", common::stderr(&demo));
    assert_untouched(&victim);
    let state = text.split("(state in ").nth(1).and_then(|rest| rest.split(')').next()).unwrap();
    let _ = std::fs::remove_dir_all(state);
    let name = Path::new(state).file_name().unwrap().to_str().unwrap();
    let parts: Vec<&str> = name.strip_prefix("carma-demo-").unwrap_or("").split('-').collect();
    let random = parts.len() == 2 && parts[0].parse::<u32>().is_ok() && parts[1].len() == 16;
    assert!(random && parts[1].bytes().all(|b| b.is_ascii_hexdigit()), "a random name: {name}");
}

/// Goal: `carma logs` run by root never opens what sits at a task's output path before it
/// knows it is a regular file: a FIFO there (a plain open waits for a writer forever, a device
/// may act on open) is refused at once, in one line, exit 1.
#[test]
fn logs_as_root_refuses_a_fifo_at_the_output_path_without_blocking() {
    if !skip::is_root() {
        skip::skip(Need::Root, "reads a task's output as root");
        return;
    }
    let home = TestHome::with_fake_gpus(common::cluster::TWO_A100, "magm");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job.out");
    let out_arg = out.to_str().unwrap();
    let id = home.ok(&["submit", "--parsable", "--mem", "1GiB", "--output", out_arg, "--", "echo", "hi"]);
    home.tick_until_done(std::time::Duration::from_secs(60));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hi\n");
    std::fs::remove_file(&out).unwrap();
    let c = std::ffi::CString::new(out_arg).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let output = within_20s(home.cmd().args(["logs", "--stdout", id.trim()]));
    assert_error(&output, 1, &format!("cannot read {}: a FIFO, not a regular file", out.display()));
}

/// Goal: `carma show` run by root on a failed task whose job put a FIFO in place of its run
/// folder's `stderr.log` answers at once, without the stderr tail (it opened the log with
/// O_NOFOLLOW alone, and a FIFO blocked it).
#[test]
fn show_as_root_never_blocks_on_a_fifo_in_the_run_folder() {
    if !skip::is_root() {
        skip::skip(Need::Root, "reads a task's run folder as root");
        return;
    }
    let home = TestHome::with_fake_gpus(common::cluster::TWO_A100, "magm");
    let id = home.submit_sh("job", Some("1GiB"), "printf '%s-%s\\n' kaboom line >&2; exit 3");
    home.tick_until_done(std::time::Duration::from_secs(60));
    let log = home.path().join(format!("runs/{id}/1/stderr.log"));
    assert!(common::stdout(&home.run(&["show", &id])).contains("kaboom-line"), "the tail is shown first");
    std::fs::remove_file(&log).unwrap();
    let c = std::ffi::CString::new(log.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let output = within_20s(home.cmd().args(["show", &id]));
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(!common::stdout(&output).contains("kaboom-line"), "no tail from a FIFO");
}

/// Runs `command`, failing the test if it is still running after 20 s (it blocked).
fn within_20s(command: &mut Command) -> std::process::Output {
    let mut child =
        command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} blocked on the FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}
