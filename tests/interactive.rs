//! Interactive tasks (`carma alloc`) driven through a real pseudo-terminal, as a person at a
//! terminal would: a root-owned queue on fake GPUs, a throw-away user, `carma tick` run by a
//! background loop every 0.5 s as root, the client started as the user on the slave side of
//! a pty this test opened (its session leader, the pty its controlling terminal), and the
//! test typing into and reading from the master side.
//!
//! Needs root with `useradd`, `userdel` and `runuser` (CI runs as root); elsewhere each test
//! prints that it was skipped and how to run it.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::cluster::{TWO_A100, TWO_A100_FULL};
use common::ticker::Ticker;
use common::users::{SharedQueue, ThrowawayUser, skip_without_users};
use serde_json::Value;

/// `carma ARGS` as `user` on the slave side of a fresh pty; the test holds the master.
struct Terminal {
    master: Option<File>,
    screen: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
    child: Child,
}

impl Terminal {
    fn start(lab: &SharedQueue, user: &ThrowawayUser, args: &[&str]) -> Terminal {
        let (mut master, mut slave) = (-1, -1);
        let size = libc::winsize { ws_row: 24, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: openpty writes two descriptors; the size is read from a valid pointer.
        let opened =
            unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
        assert_eq!(opened, 0, "openpty");
        for fd in [master, slave] {
            // Children other test threads start must not keep this terminal open: a hang-up
            // needs every descriptor of the master closed.
            // SAFETY: fcntl on the descriptors openpty just returned.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        // SAFETY: two fresh descriptors owned by nothing else.
        let (master, slave) = unsafe { (File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let stream = || Stdio::from(slave.try_clone().expect("dup the pty"));
        let mut command = Command::new(&lab.exe);
        command
            .args(args)
            .env_clear()
            .env("CARMA_HOME", lab.home.path())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", "/tmp")
            .env("TERM", "dumb")
            .current_dir("/tmp")
            .uid(user.uid)
            .gid(user.gid)
            .stdin(stream())
            .stdout(stream())
            .stderr(stream());
        // SAFETY: setsid and ioctl are async-signal-safe; fd 0 is the pty slave by now.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("start carma alloc");
        drop(slave);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reading = master.try_clone().expect("dup the master");
        let (seen, stopped) = (Arc::clone(&screen), Arc::clone(&stop));
        let reader = std::thread::spawn(move || read_screen(reading, &seen, &stopped));
        Terminal { master: Some(master), screen, stop, reader: Some(reader), child }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits until the screen shows `needle`; the screen so far.
    fn wait_for(&self, needle: &str, limit: Duration) -> String {
        let started = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(needle) {
                return screen;
            }
            assert!(started.elapsed() < limit, "no {needle:?} within {limit:?}; the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn type_line(&self, line: &str) {
        let mut master = self.master.as_ref().expect("the terminal is open");
        master.write_all(format!("{line}\r").as_bytes()).expect("type");
    }

    fn type_bytes(&self, bytes: &[u8]) {
        self.master.as_ref().expect("the terminal is open").write_all(bytes).expect("type");
    }

    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                started.elapsed() < limit,
                "carma alloc still runs after {limit:?}; the screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Closes every descriptor of the master: the terminal hangs up.
    fn hang_up(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            reader.join().expect("reader");
        }
        self.master = None;
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.hang_up();
    }
}

fn read_screen(mut master: File, screen: &Mutex<Vec<u8>>, stop: &AtomicBool) {
    let mut buffer = [0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        let mut fds = [libc::pollfd { fd: master.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        // SAFETY: poll over one initialised pollfd.
        if unsafe { libc::poll(fds.as_mut_ptr(), 1, 100) } <= 0 {
            continue;
        }
        match master.read(&mut buffer) {
            Ok(n) if n > 0 => screen.lock().unwrap().extend_from_slice(&buffer[..n]),
            // EIO: the client is gone and nothing holds the slave.
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The task id in `carma: task ID submitted`.
fn task_id(screen: &str) -> String {
    let line =
        screen.lines().find(|l| l.starts_with("carma: task ") && l.contains(" submitted")).expect(screen);
    line.trim_end_matches('\r').trim_start_matches("carma: task ").trim_end_matches(" submitted").to_string()
}

fn show(lab: &SharedQueue, id: &str) -> Value {
    serde_json::from_str(&lab.home.ok(&["show", id, "--json"])).unwrap()
}

/// Waits until the task has ended; its `show --json`.
fn ended(lab: &SharedQueue, id: &str, limit: Duration) -> Value {
    let started = Instant::now();
    loop {
        let task = show(lab, id);
        if task["task"]["ended_ms"].is_u64() {
            return task;
        }
        assert!(started.elapsed() < limit, "task {id} has not ended within {limit:?}: {task}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The user's processes still alive (`pgrep -u`), waiting a little for them to go.
fn processes_left(user: &ThrowawayUser) -> String {
    let mut left = String::new();
    for _ in 0..50 {
        let out = Command::new("pgrep").args(["-a", "-u", &user.uid.to_string()]).output().expect("pgrep");
        left = String::from_utf8_lossy(&out.stdout).into_owned();
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    left
}

fn set_gpus(lab: &SharedQueue, json: &str) {
    std::fs::write(lab.home.gpus_file(), json).expect("write the fake GPUs");
}

/// The session's socket of attempt 1.
fn socket(lab: &SharedQueue, id: &str) -> PathBuf {
    lab.home.path().join("runs").join(id).join("1").join("attach").join("sock")
}

const LONG: Duration = Duration::from_secs(30);

/// Goal: `carma alloc` says why it waits in `carma queue`'s words while the GPUs are full,
/// then gives a shell that sees its GPU, is listed as interactive, ends with the shell's exit
/// status, stops what the shell left behind, and is journaled with its efficiency. Method:
/// both fake GPUs full, alloc as a throw-away user; free them; type into the shell.
#[test]
fn alloc_waits_for_a_gpu_then_gives_a_shell_that_sees_it() {
    if skip_without_users() {
        return;
    }
    let lab = SharedQueue::new();
    set_gpus(&lab, TWO_A100_FULL);
    let alice = ThrowawayUser::create("alloc");
    let _ticker = Ticker::start(lab.home.path(), Duration::from_millis(500));
    let mut term =
        Terminal::start(&lab, &alice, &["alloc", "--gpus", "1", "--gpu-mem", "10GiB", "--time", "5m"]);
    let screen = term.wait_for("carma: queued and waiting: ", LONG);
    let id = task_id(&screen);
    let queue = lab.queue();
    let row = queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id.as_str()).unwrap().clone();
    let reason = row["reason"].as_str().expect("a pending reason").to_string();
    assert!(reason.starts_with("GpuMemory: "), "{reason}");
    assert!(screen.contains(&format!("carma: queued and waiting: {reason}\r\n")), "{screen}");
    assert_eq!(row["interactive"], "alloc");
    assert!(lab.home.ok(&["queue", "--all"]).contains("sh [alloc]"), "queue marks it interactive");

    set_gpus(&lab, TWO_A100);
    let screen = term.wait_for(&format!(" (task {id})"), LONG);
    assert!(screen.contains(&format!("carma: granted GPU0 (task {id})")), "{screen}");
    term.type_line("echo \"cvd=[$CUDA_VISIBLE_DEVICES] user=[$(id -u)]\"");
    term.wait_for(&format!("cvd=[GPU-fake-0000] user=[{}]", alice.uid), LONG);
    term.type_line("sleep 1000 &");
    term.type_line("exit 3");
    let status = term.wait_exit(LONG);
    assert_eq!(
        status.code(),
        Some(3),
        "the client exits with the shell's status; screen:\n{}",
        term.screen()
    );

    let task = ended(&lab, &id, LONG);
    assert_eq!(task["task"]["status"], "Failed", "{task}");
    assert_eq!(task["task"]["spec"]["interactive"], "alloc");
    let attempt = &task["task"]["attempts"][0];
    assert_eq!(attempt["gpus"][0], "GPU-fake-0000");
    assert!(attempt["energy_mj"].is_number() && attempt["sm_util_samples"].is_u64(), "{attempt}");
    let shown = lab.home.ok(&["show", &id]);
    assert!(shown.contains("interactive alloc (a shell on a terminal attached with carma alloc)"), "{shown}");
    assert!(shown.lines().any(|l| l.starts_with("wall") && l.contains("of the 5m")), "{shown}");
    assert_eq!(processes_left(&alice), "", "the sleep the shell left behind was stopped");
}

/// Goal: a session is held to its time limit like any task: a warning line in the terminal
/// before it, then the end at the limit with the processes it left stopped. Method: a 20 s
/// limit (the warning comes halfway), a `sleep` left in the background.
#[test]
fn the_time_limit_is_announced_in_the_terminal_then_ends_the_session() {
    if skip_without_users() {
        return;
    }
    let lab = SharedQueue::new();
    let alice = ThrowawayUser::create("alimit");
    let _ticker = Ticker::start(lab.home.path(), Duration::from_millis(500));
    let mut term = Terminal::start(&lab, &alice, &["alloc", "--gpus", "1", "--time", "20s"]);
    let screen = term.wait_for("carma: granted ", LONG);
    let id = task_id(&screen);
    let granted = Instant::now();
    term.type_line("sleep 1000 &");
    term.wait_for("\r\ncarma: this session ends in 10 s (time limit 20s)\r\n", LONG);
    term.wait_for(&format!("\r\ncarma: task {id} reached its time limit (20s)\r\n"), LONG);
    let status = term.wait_exit(LONG);
    let took = granted.elapsed();
    assert_eq!(status.code(), Some(124), "{}", term.screen());
    assert!(took >= Duration::from_secs(17) && took < Duration::from_secs(28), "ended after {took:?}");
    let task = ended(&lab, &id, LONG);
    assert_eq!(task["task"]["status"], "Failed", "{task}");
    assert!(task["task"]["end_reason"].as_str().unwrap().contains("time limit"), "{task}");
    assert_eq!(processes_left(&alice), "");
}

/// Goal: when the terminal goes away the session ends, as salloc's does, and nothing it
/// started survives. Method: a shell with a background `sleep`; the test closes the pty's
/// master (the client gets SIGHUP and its connection closes).
#[test]
fn a_hang_up_ends_the_session_and_what_it_left() {
    if skip_without_users() {
        return;
    }
    let lab = SharedQueue::new();
    let alice = ThrowawayUser::create("ahup");
    let _ticker = Ticker::start(lab.home.path(), Duration::from_millis(500));
    let mut term = Terminal::start(&lab, &alice, &["alloc", "--gpus", "1", "--time", "5m"]);
    let screen = term.wait_for("carma: granted ", LONG);
    let id = task_id(&screen);
    term.type_line("sleep 1000 & echo started=$!");
    term.wait_for("started=", LONG);
    term.hang_up();
    let status = term.wait_exit(LONG);
    assert_eq!(status.code(), None, "the client died of the hang-up");
    let task = ended(&lab, &id, LONG);
    assert_eq!(task["task"]["status"], "Failed", "{task}");
    assert_eq!(processes_left(&alice), "");
}

/// Goal: nobody but the submitter gets into a session: another user cannot reach its socket,
/// and a peer the kernel names as another uid (root here, who can reach it) gets one refusal
/// line and nothing of the terminal; the session goes on. Ctrl-C while waiting cancels.
#[test]
fn only_the_submitter_can_attach() {
    if skip_without_users() {
        return;
    }
    let lab = SharedQueue::new();
    let (alice, bob) = (ThrowawayUser::create("aown"), ThrowawayUser::create("aoth"));
    let _ticker = Ticker::start(lab.home.path(), Duration::from_millis(500));
    let mut term = Terminal::start(&lab, &alice, &["alloc", "--gpus", "1", "--time", "5m"]);
    let screen = term.wait_for("carma: granted ", LONG);
    let id = task_id(&screen);
    let path = socket(&lab, &id);

    let refused = connect_as(&path, bob.uid, bob.gid).expect_err("bob reaches the socket");
    assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied, "{refused}");

    let mut stream = std::os::unix::net::UnixStream::connect(&path).expect("root reaches the socket");
    stream.set_read_timeout(Some(LONG)).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read the refusal");
    let line = format!("carma: refused: task {id} belongs to uid {}, not to uid 0", alice.uid);
    let mut frame = vec![6u8];
    frame.extend((line.len() as u16).to_be_bytes());
    frame.extend(line.as_bytes());
    assert_eq!(String::from_utf8_lossy(&answer), String::from_utf8_lossy(&frame));

    term.type_line("echo still-here");
    term.wait_for("\r\nstill-here\r\n", LONG);
    term.type_line("exit 0");
    assert_eq!(term.wait_exit(LONG).code(), Some(0));

    // Ctrl-C while the task waits cancels it.
    set_gpus(&lab, TWO_A100_FULL);
    let mut term = Terminal::start(&lab, &alice, &["alloc", "--gpus", "1", "--gpu-mem", "10GiB"]);
    let screen = term.wait_for("carma: queued and waiting: ", LONG);
    let id = task_id(&screen);
    term.type_bytes(b"\x03");
    term.wait_for(&format!("carma: cancelling task {id}"), LONG);
    assert_eq!(term.wait_exit(LONG).code(), Some(130), "{}", term.screen());
    assert_eq!(ended(&lab, &id, LONG)["task"]["status"], "Cancelled");
}

/// Goal: `carma run` runs one command attached to the caller's streams; without a terminal
/// (a pipe) what is piped in reaches the command and ends, its output comes back unchanged
/// (no echo, no `\r`), and the client exits with the command's status. Method: `sh -c` that
/// copies its input and prints its GPU, exit 5, as a throw-away user.
#[test]
fn run_relays_a_pipe_and_exits_with_the_commands_status() {
    if skip_without_users() {
        return;
    }
    let lab = SharedQueue::new();
    let alice = ThrowawayUser::create("arun");
    let _ticker = Ticker::start(lab.home.path(), Duration::from_millis(500));
    let script = "cat; echo \"cvd=$CUDA_VISIBLE_DEVICES\"; exit 5";
    let mut child = Command::new(common::users::runuser())
        .args([
            "-u",
            &alice.name,
            "--",
            lab.exe.to_str().unwrap(),
            "run",
            "--gpus",
            "1",
            "--",
            "sh",
            "-c",
            script,
        ])
        .env("CARMA_HOME", lab.home.path())
        .current_dir("/tmp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start carma run");
    child.stdin.take().unwrap().write_all(b"first line\nsecond line\n").unwrap();
    let out = child.wait_with_output().expect("carma run");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert_eq!(stdout, "first line\nsecond line\ncvd=GPU-fake-0000\n", "{stderr}");
    assert!(stderr.contains("carma: granted GPU0 (task "), "{stderr}");
}

/// Goal: `carma alloc --no-shell` holds the allocation (as salloc --no-shell) and `carma run
/// --attach ID -- CMD` runs commands in it as the submitter with the task's GPU, exiting with
/// their status; another user is refused; `carma cancel` ends it with everything in it.
/// Method: throw-away users, a pipe as the command's input.
#[test]
fn no_shell_holds_the_allocation_for_run_attach() {
    if skip_without_users() {
        return;
    }
    let lab = SharedQueue::new();
    let (alice, bob) = (ThrowawayUser::create("ahold"), ThrowawayUser::create("ahob"));
    let _ticker = Ticker::start(lab.home.path(), Duration::from_millis(500));
    let held = lab.as_user(&alice, &["alloc", "--no-shell", "--gpus", "1", "--time", "5m"]);
    let said = common::stderr(&held);
    assert_eq!(held.status.code(), Some(0), "{said}");
    let id = task_id(&said);
    assert!(said.contains(&format!("carma: granted GPU0 (task {id})\n")), "{said}");
    let hint = format!(
        "carma: run commands in it with: carma run --attach {id} -- CMD; end it with: carma cancel {id}"
    );
    assert!(said.contains(&hint), "{said}");
    assert!(lab.home.ok(&["queue", "--all"]).contains("sleep [hold]"));

    let script = "cat; echo \"cvd=$CUDA_VISIBLE_DEVICES uid=$(id -u)\"; sleep 1000 & exit 6";
    let mut child = Command::new(common::users::runuser())
        .args([
            "-u",
            &alice.name,
            "--",
            lab.exe.to_str().unwrap(),
            "run",
            "--attach",
            &id,
            "--",
            "sh",
            "-c",
            script,
        ])
        .env("CARMA_HOME", lab.home.path())
        .current_dir("/tmp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start carma run --attach");
    child.stdin.take().unwrap().write_all(b"hi\n").unwrap();
    let out = child.wait_with_output().expect("carma run --attach");
    assert_eq!(out.status.code(), Some(6), "{}", common::stderr(&out));
    assert_eq!(common::stdout(&out), format!("hi\ncvd=GPU-fake-0000 uid={}\n", alice.uid));

    let refused = lab.as_user(&bob, &["run", "--attach", &id, "--", "true"]);
    let line = format!("error: task {id} is {}'s; only its submitter can attach to it\n", alice.name);
    assert_eq!((refused.status.code(), common::stderr(&refused)), (Some(77), line));

    // Issue 41: a command of too many words is refused for that (it was "must be an absolute
    // path"), and one too long for a frame is refused, never cut and run; exit 2 for both.
    let mut words: Vec<String> = ["run", "--attach", &id, "--", "/bin/echo"].map(String::from).to_vec();
    words.extend((0..4096).map(|i| i.to_string()));
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let refused = lab.as_user(&alice, &words);
    let line = format!("error: task {id}: the command has 4097 words; at most 4096 are allowed\n");
    assert_eq!((refused.status.code(), common::stderr(&refused)), (Some(2), line));
    let long = "y".repeat(20_000);
    let refused = lab.as_user(&alice, &["run", "--attach", &id, "--", "/bin/echo", &long]);
    let line = format!(
        "error: task {id}: the command is 20010 bytes; at most 16383 fit, so pass long arguments in a file\n"
    );
    assert_eq!((refused.status.code(), common::stderr(&refused)), (Some(2), line));
    assert_eq!(common::stdout(&refused), "", "nothing of a cut command ran");
    let shown = lab.home.ok(&["show", &id]);
    let words = "interactive hold (an allocation held by carma alloc --no-shell; commands attach with carma run --attach)";
    assert!(shown.contains(words), "{shown}");

    lab.ok_as(&alice, &["cancel", &id]);
    assert_eq!(ended(&lab, &id, LONG)["task"]["status"], "Cancelled");
    assert_eq!(processes_left(&alice), "");
}

/// Connects to `path` as `uid` from a child process (the connect runs after the child's
/// setuid, before its exec); the error the kernel gave.
fn connect_as(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    // SAFETY: sockaddr_un is plain data.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_encoded_bytes();
    assert!(bytes.len() < address.sun_path.len(), "socket path too long");
    for (slot, byte) in address.sun_path.iter_mut().zip(bytes) {
        *slot = *byte as libc::c_char;
    }
    let mut command = Command::new("/bin/true");
    command.uid(uid).gid(gid);
    // SAFETY: socket and connect are async-signal-safe; the address was built before the fork.
    unsafe {
        command.pre_exec(move || {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            if fd < 0 || libc::connect(fd, (&address as *const libc::sockaddr_un).cast(), len) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.status().map(drop)
}

/// Goal (issue 41, 1): nothing of a user's stays writable in root's state directory after an
/// interactive attempt, and nothing of theirs lands there uncounted while it runs: the
/// session's socket is the submitter's, in a folder of root's that no user can write into,
/// and the folder is gone once the session ended; every entry the attempt leaves in its run
/// folder is in the run folder's owner table. Method: `carma run` as a throw-away user whose
/// command tries to write into its own attempt's `attach/`; then `carma alloc --no-shell`,
/// written into from the user's own login while held, then cancelled. On the code before,
/// `attach/` was the submitter's (0700): both writes succeeded and the folder stayed theirs.
#[test]
fn an_interactive_attempt_leaves_its_user_nothing_writable_in_the_state_directory() {
    if skip_without_users() {
        return;
    }
    let lab = SharedQueue::new();
    let alice = ThrowawayUser::create("adoor");
    let _ticker = Ticker::start(lab.home.path(), Duration::from_millis(500));
    let home = lab.home.path().to_str().unwrap().to_string();
    let script = format!(
        "d={home}/runs/$SLURM_JOB_ID/$CARMA_ATTEMPT/attach; test -S $d/sock && echo socket; \
         (echo junk > $d/junk) 2>/dev/null && echo wrote || echo refused; \
         (mkdir $d/sub) 2>/dev/null && echo made || echo not-made"
    );
    let out = Command::new(common::users::runuser())
        .args(["-u", &alice.name, "--", lab.exe.to_str().unwrap(), "run", "--gpus", "1", "--", "sh", "-c"])
        .arg(&script)
        .env("CARMA_HOME", lab.home.path())
        .current_dir("/tmp")
        .stdin(Stdio::null())
        .output()
        .expect("carma run");
    let said = common::stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert_eq!(common::stdout(&out), "socket\nrefused\nnot-made\n", "{said}");
    let id = said
        .lines()
        .find_map(|l| l.split("(task ").nth(1))
        .map(|rest| rest.trim_end_matches(')').to_string())
        .expect(&said);
    let run_dir = lab.home.path().join("runs").join(&id).join("1");
    gone_after_the_session(&run_dir);

    let held = lab.as_user(&alice, &["alloc", "--no-shell", "--gpus", "1", "--time", "5m"]);
    let said = common::stderr(&held);
    assert_eq!(held.status.code(), Some(0), "{said}");
    let id = task_id(&said);
    let attach = lab.home.path().join("runs").join(&id).join("1").join("attach");
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&attach).expect("the held allocation's folder");
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o711), "root's, reachable, not listable");
    let sock = std::fs::symlink_metadata(attach.join("sock")).expect("its socket");
    assert_eq!((sock.uid(), sock.mode() & 0o777), (alice.uid, 0o600));
    let target = attach.join("junk");
    let write = format!("echo junk > {}", target.display());
    let out = alice.run("/bin/sh", &["-c", &write], &[], Path::new("/tmp"));
    assert!(!out.status.success(), "the user wrote into root's folder");
    assert!(!target.exists());
    lab.ok_as(&alice, &["cancel", &id]);
    assert_eq!(ended(&lab, &id, LONG)["task"]["status"], "Cancelled");
    gone_after_the_session(attach.parent().unwrap());
}

/// Waits until the attempt in `run_dir` has no `attach/` left, then checks that every entry
/// it left is in the owner table and none is its user's to write.
fn gone_after_the_session(run_dir: &Path) {
    let started = Instant::now();
    while std::fs::symlink_metadata(run_dir.join("attach")).is_ok() {
        assert!(started.elapsed() < LONG, "attach/ is still in {}", run_dir.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    use std::os::unix::fs::MetadataExt;
    // The seal follows the tick that records the end.
    loop {
        let mut users = Vec::new();
        for entry in std::fs::read_dir(run_dir).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let row = carma::exec::rundir::run_entry(&name);
            assert!(row.is_some(), "{name} in {} is not in the run folder's owner table", run_dir.display());
            if std::fs::symlink_metadata(entry.path()).unwrap().uid() != 0 {
                users.push(name);
            }
        }
        if users.is_empty() {
            return;
        }
        assert!(started.elapsed() < LONG, "still the user's after the attempt: {users:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
