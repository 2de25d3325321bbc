//! NVIDIA's `cuda-checkpoint` (driver 550 or newer): whether a job's CUDA processes can be
//! suspended, asked the way the tool answers (`--get-state --pid PID` prints `running`,
//! `locked`, `checkpointed` or `failed`).
//!
//! The tick runs as root, so the binary is the administrator's: the path configured in
//! `[sched.preemption] cuda-checkpoint`, or the first `cuda-checkpoint` in the tick's own
//! `PATH` (root's, never a user's). Its links are resolved, and the file it names must be a
//! regular file owned by root that only root can write, in folders that are all root's and
//! that nobody else can write (a sticky folder such as `/tmp` is fine: nobody else can rename
//! what root has there), so nobody else can put another program in its place. Every answer
//! other than "all of them are running" is a reason, one line, that the Preempted record
//! carries before "requeued instead".
//!
//! The tick never waits on one job's tool: all the calls of one tick share one [`Budget`]
//! (`[sched.preemption] cuda-checkpoint-budget`), the processes of one job are asked at once
//! ([`get_states`], [`toggle_all`]), and a call still running when the budget is spent is
//! killed and answers "no answer within the tick's budget", which requeues the victim instead
//! of suspending it.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long one `--get-state` may take at most, within the tick's budget.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// How long one `--toggle` may take at most, within the tick's budget (it copies the GPU
/// memory to host memory, or back).
const TOGGLE_WITHIN: Duration = Duration::from_secs(120);
/// The most of its output the tick reads.
const OUTPUT_MAX: u64 = 4096;
/// The most processes of one job asked at once; more are asked in turns.
const AT_ONCE_MAX: usize = 16;

/// The time one tick may still spend running `cuda-checkpoint`, all its calls together.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    deadline: Instant,
    total: Duration,
}

impl Budget {
    /// A budget of `total` from now.
    pub fn new(total: Duration) -> Budget {
        Budget { deadline: Instant::now() + total, total }
    }

    /// The time left, at most `cap`.
    fn left(&self, cap: Duration) -> Duration {
        self.deadline.saturating_duration_since(Instant::now()).min(cap)
    }

    /// What a call that ran out of time answers: the budget's words once it is spent.
    fn spent(&self, cap: Duration) -> String {
        if Instant::now() >= self.deadline {
            format!(
                "no answer within the tick's {} s [sched.preemption] cuda-checkpoint-budget",
                self.total.as_secs()
            )
        } else {
            format!("no answer within {} s", cap.as_secs())
        }
    }
}

/// Whether `why`, a call's failure, is that the tool did not answer in time (rather than an
/// answer of its own, such as "not a CUDA process").
pub fn unanswered(why: &str) -> bool {
    why.starts_with("no answer within")
}

/// The binary to run: the configured path, or `cuda-checkpoint` in the tick's `PATH`, with its
/// links resolved.
pub fn locate(configured: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = configured {
        return trusted(path);
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path_var).filter(|d| d.is_absolute()) {
        let candidate = dir.join("cuda-checkpoint");
        if candidate.is_file() {
            return trusted(&candidate);
        }
    }
    Err("cuda-checkpoint not found in root's PATH; install it (NVIDIA driver 550 or newer) or set \
         [sched.preemption] cuda-checkpoint"
        .to_string())
}

/// Whether root may run `path` (module docs): the file its links lead to, which is returned.
fn trusted(path: &Path) -> Result<PathBuf, String> {
    let shown = path.display();
    let real = std::fs::canonicalize(path).map_err(|e| format!("cuda-checkpoint at {shown}: {e}"))?;
    let meta = std::fs::symlink_metadata(&real).map_err(|e| format!("cuda-checkpoint at {shown}: {e}"))?;
    if !meta.is_file() || meta.mode() & 0o111 == 0 {
        return Err(format!("cuda-checkpoint at {shown} is not an executable file"));
    }
    if meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(format!("cuda-checkpoint at {shown} is not owned and written only by root"));
    }
    for folder in real.ancestors().skip(1) {
        let meta = std::fs::symlink_metadata(folder)
            .map_err(|e| format!("cuda-checkpoint at {shown}: folder {}: {e}", folder.display()))?;
        let sticky = meta.mode() & 0o1000 != 0;
        if !meta.is_dir() || meta.uid() != 0 || (meta.mode() & 0o022 != 0 && !sticky) {
            return Err(format!(
                "cuda-checkpoint at {shown} is in {}, a folder that is not root's alone; move it to one \
                 only root can write",
                folder.display()
            ));
        }
    }
    Ok(real)
}

/// Why the processes `pids` (a job's GPU processes) cannot be suspended, or `None` when each
/// of them answers `running` to `cuda-checkpoint --get-state`.
pub fn refusal(configured: Option<&Path>, pids: &[u32], budget: &Budget) -> Option<String> {
    let binary = match locate(configured) {
        Ok(binary) => binary,
        Err(why) => return Some(why),
    };
    if pids.is_empty() {
        return Some("no CUDA process of the job seen on its GPUs".to_string());
    }
    for (&pid, answer) in pids.iter().zip(get_states(&binary, pids, budget)) {
        match answer {
            Ok(state) if state == "running" => {}
            Ok(state) => return Some(format!("process {pid} is {state}, not running CUDA")),
            Err(why) => return Some(format!("`cuda-checkpoint --get-state --pid {pid}` refused: {why}")),
        }
    }
    None
}

/// `cuda-checkpoint --get-state --pid PID`'s answer (its first word), or why there is none,
/// for each of `pids` in order, asked at once.
pub fn get_states(binary: &Path, pids: &[u32], budget: &Budget) -> Vec<Result<String, String>> {
    let calls: Vec<Vec<String>> =
        pids.iter().map(|pid| vec!["--get-state".into(), "--pid".into(), pid.to_string()]).collect();
    run_all(binary, &calls, ANSWER_WITHIN, budget)
        .into_iter()
        .map(|answer| {
            let out = answer?;
            out.split_whitespace()
                .next()
                .map(str::to_ascii_lowercase)
                .ok_or_else(|| "it printed no state".into())
        })
        .collect()
}

/// `cuda-checkpoint --toggle --pid PID` for each of `pids`, at once: a running process's CUDA
/// state is suspended (its GPU memory copied to host memory and released), a suspended one's
/// restored. `Err` holds the pids whose toggle succeeded and the first failure, in one line.
pub fn toggle_all(binary: &Path, pids: &[u32], budget: &Budget) -> Result<(), (Vec<u32>, String)> {
    let calls: Vec<Vec<String>> =
        pids.iter().map(|pid| vec!["--toggle".into(), "--pid".into(), pid.to_string()]).collect();
    let answers = run_all(binary, &calls, TOGGLE_WITHIN, budget);
    let mut done = Vec::new();
    let mut failed = None;
    for (&pid, answer) in pids.iter().zip(answers) {
        match answer {
            Ok(_) => done.push(pid),
            Err(why) => {
                failed.get_or_insert(format!("`cuda-checkpoint --toggle --pid {pid}` failed: {why}"));
            }
        }
    }
    failed.map_or(Ok(()), |why| Err((done, why)))
}

/// Runs `binary` once per argument list (no shell), [`AT_ONCE_MAX`] at a time, each for at most
/// `cap` and all within `budget`; each one's first line of output, or why it failed in one line.
fn run_all(
    binary: &Path,
    calls: &[Vec<String>],
    cap: Duration,
    budget: &Budget,
) -> Vec<Result<String, String>> {
    let mut answers = Vec::with_capacity(calls.len());
    for batch in calls.chunks(AT_ONCE_MAX) {
        let started = Instant::now();
        let within = budget.left(cap);
        let mut children: Vec<Result<Child, String>> = batch
            .iter()
            .map(|args| {
                Command::new(binary)
                    .args(args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| e.to_string())
            })
            .collect();
        let mut ended: Vec<Option<Result<String, String>>> = vec![None; batch.len()];
        loop {
            for (slot, child) in ended.iter_mut().zip(children.iter_mut()) {
                if slot.is_some() {
                    continue;
                }
                *slot = match child {
                    Err(why) => Some(Err(why.clone())),
                    Ok(child) => match child.try_wait() {
                        Ok(Some(status)) => Some(answer_of(child, status)),
                        Ok(None) => None,
                        Err(err) => Some(Err(err.to_string())),
                    },
                };
            }
            if ended.iter().all(Option::is_some) || started.elapsed() >= within {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for (slot, child) in ended.into_iter().zip(children.iter_mut()) {
            answers.push(slot.unwrap_or_else(|| {
                if let Ok(child) = child {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                Err(budget.spent(cap))
            }));
        }
    }
    answers
}

/// What an ended call said: its first line on success, else its status and what it printed.
fn answer_of(child: &mut Child, status: std::process::ExitStatus) -> Result<String, String> {
    let read = |pipe: Option<&mut dyn Read>| {
        let mut text = String::new();
        if let Some(pipe) = pipe {
            let _ = pipe.take(OUTPUT_MAX).read_to_string(&mut text);
        }
        crate::text::escape(text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim()).into_owned()
    };
    let out = read(child.stdout.as_mut().map(|p| p as &mut dyn Read));
    if status.success() {
        return Ok(out);
    }
    let err = read(child.stderr.as_mut().map(|p| p as &mut dyn Read));
    let said = if err.is_empty() { out } else { err };
    Err(if said.is_empty() { status.to_string() } else { format!("{status}: {said}") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in `cuda-checkpoint` that records its argv and answers `--get-state` with
    /// `answer` (exit `code`), as the real tool does.
    fn stand_in(dir: &Path, answer: &str, code: i32) -> PathBuf {
        let path = dir.join("cuda-checkpoint");
        let log = dir.join("argv");
        let script = format!("#!/bin/sh\necho \"$*\" >> {}\necho '{answer}'\nexit {code}\n", log.display());
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn budget() -> Budget {
        Budget::new(Duration::from_secs(30))
    }

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn a_missing_binary_is_the_reason() {
        let why = refusal(Some(Path::new("/nonexistent/cuda-checkpoint")), &[1], &budget()).unwrap();
        assert_eq!(
            why,
            "cuda-checkpoint at /nonexistent/cuda-checkpoint: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn running_processes_allow_suspend_and_each_is_asked() {
        if !root() {
            eprintln!("skipped: the stand-in must be owned by root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let binary = stand_in(dir.path(), "running", 0);
        assert_eq!(refusal(Some(&binary), &[41, 42], &budget()), None);
        let argv = std::fs::read_to_string(dir.path().join("argv")).unwrap();
        let mut lines: Vec<&str> = argv.lines().collect();
        lines.sort_unstable();
        assert_eq!(lines, ["--get-state --pid 41", "--get-state --pid 42"]);
    }

    #[test]
    fn a_process_not_running_cuda_or_a_refusal_is_the_reason() {
        if !root() {
            eprintln!("skipped: the stand-in must be owned by root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let binary = stand_in(dir.path(), "checkpointed", 0);
        assert_eq!(
            refusal(Some(&binary), &[7], &budget()).unwrap(),
            "process 7 is checkpointed, not running CUDA"
        );
        let binary = stand_in(dir.path(), "Could not get state: OPERATION_NOT_SUPPORTED", 1);
        assert_eq!(
            refusal(Some(&binary), &[7], &budget()).unwrap(),
            "`cuda-checkpoint --get-state --pid 7` refused: exit status: 1: Could not get state: OPERATION_NOT_SUPPORTED"
        );
        assert_eq!(
            refusal(Some(&binary), &[], &budget()).unwrap(),
            "no CUDA process of the job seen on its GPUs"
        );
    }

    #[test]
    fn a_binary_others_can_write_is_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let binary = stand_in(dir.path(), "running", 0);
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = refusal(Some(&binary), &[1], &budget()).unwrap();
        assert_eq!(
            why,
            format!("cuda-checkpoint at {} is not owned and written only by root", binary.display())
        );
        assert!(!dir.path().join("argv").exists());
    }

    /// Goal: the tool is trusted only where nobody but root can put another program in its
    /// place: a root-owned file in a folder others can write (not sticky), or in a folder of
    /// another user's, is not run; a link is followed to the file it names, which must pass.
    /// Fails on the code that checked only the file.
    #[test]
    fn a_binary_in_a_folder_others_can_write_is_not_run() {
        if !root() {
            eprintln!("skipped: the stand-in must be owned by root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        let binary = stand_in(&open, "running", 0);
        assert_eq!(refusal(Some(&binary), &[1], &budget()), None, "a folder only root can write");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = refusal(Some(&binary), &[1], &budget()).unwrap();
        assert_eq!(
            why,
            format!(
                "cuda-checkpoint at {} is in {}, a folder that is not root's alone; move it to one only root can write",
                binary.display(),
                open.display()
            )
        );
        // Sticky, as /tmp: nobody else can rename what root keeps there.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(refusal(Some(&binary), &[1], &budget()), None);
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&open, Some(65534), None).unwrap();
        let why = refusal(Some(&binary), &[1], &budget()).unwrap();
        assert!(why.contains("a folder that is not root's alone"), "{why}");
        // A link in a root folder to the file in the other user's folder is judged by that file.
        let link = dir.path().join("cuda-checkpoint");
        std::os::unix::fs::symlink(&binary, &link).unwrap();
        let why = refusal(Some(&link), &[1], &budget()).unwrap();
        assert!(why.contains(&format!("is in {}", open.display())), "{why}");
    }

    /// Goal: the calls of one tick share one budget and a job's processes are asked at once:
    /// two processes whose tool sleeps 5 s are both answered "no answer" within about the 1 s
    /// budget, not 2 × 5 s. Fails on the code before (5 s per process, one after the other).
    #[test]
    fn a_slow_tool_is_cut_at_the_ticks_budget_for_all_processes_together() {
        if !root() {
            eprintln!("skipped: the stand-in must be owned by root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cuda-checkpoint");
        std::fs::write(&path, "#!/bin/sh\nsleep 5\necho running\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = Instant::now();
        let budget = Budget::new(Duration::from_secs(1));
        let answers = get_states(&path, &[41, 42], &budget);
        assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
        let spent = "no answer within the tick's 1 s [sched.preemption] cuda-checkpoint-budget".to_string();
        assert_eq!(answers, [Err(spent.clone()), Err(spent.clone())]);
        assert_eq!(
            refusal(Some(&path), &[41], &budget).unwrap(),
            format!("`cuda-checkpoint --get-state --pid 41` refused: {spent}"),
            "a spent budget refuses at once"
        );
        let (done, why) = toggle_all(&path, &[41], &budget).unwrap_err();
        assert!(done.is_empty());
        assert_eq!(why, format!("`cuda-checkpoint --toggle --pid 41` failed: {spent}"));
    }
}
