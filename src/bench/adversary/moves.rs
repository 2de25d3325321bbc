//! Mallory's moves, numbered as the seeds draw them and as reports/trust-boundary lists them.
//!
//! Spool moves (0-14, issue 21): what she leaves for the root tick in her own folder and at
//! the top of `spool/`. Job and client moves (15-20, issue 32): what her jobs do to
//! themselves and to their files, and what her client does to the dashboard. A job move is
//! a submission like any other, through her own folder; it does nothing where the bench could
//! make no users ([`super::lab::Users::jobs`]).

use std::ffi::CString;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::FAKE_OOM_LINE;
use super::{AdversaryBench, Run};
use crate::error::{Error, Result};
use crate::id::TaskId;
use crate::spec::Submission;

/// Moves a seed draws from: the spool's 15, the jobs' and the client's 6, then the fifth
/// wave's 8 (recovery 21-23, `super::recovery`; the doors 24-28, `super::doors`).
pub(super) const MOVES: u64 = 29;
/// Bytes of one junk file mallory leaves in her spool folder, and of what her disk-filling job
/// writes to its own log and then to her ended attempt's log.
const JUNK_BYTES: usize = 16 << 20;
const JOB_WRITE_BYTES: u64 = 48 << 20;
/// Pipelined requests one hostile client writes.
const PIPELINED_REQUESTS: u64 = 20_000;

/// A thread swapping a spool file for a link while the tick runs, and its stop flag.
pub(super) type Racer = (std::sync::Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<()>);

impl Run {
    /// One of mallory's moves; a racer thread for `Race`.
    // Long on purpose: one arm per hostile move, numbered as the seeds draw them and as
    // reports/trust-boundary lists them; the table reads best whole.
    pub(super) fn mallory(&mut self, tick: u64, bench: &mut AdversaryBench) -> Result<Option<Racer>> {
        let mallory = self.users.mallory;
        let folder = self.folder(mallory);
        if !folder.exists() {
            std::fs::create_dir(&folder).map_err(io(&folder))?;
            give(&folder, 0o700, mallory)?;
        }
        // Alice's private copy lives in root's vault.
        let victim_private =
            self.honest.first().map(|_| self.home.private_dir().join(crate::intake::VAULT_FILE));
        let id = self.id();
        let spec_path = folder.join(format!("{id}.toml"));
        let honest_spec = || {
            let mut s = Submission::bare(super::small_spec("mallory", &["true"]));
            s.spec.max_retries = 3;
            s
        };
        let write = |path: &Path, bytes: &[u8]| write(path, bytes, mallory);
        let drawn = self.rng.next_u64() % MOVES;
        if self.trace {
            eprintln!("adversary: seed {} tick {tick}: move {drawn} ({id})", self.seed);
        }
        match drawn {
            14 if self.full_disk => {
                if fill_as(mallory, &folder.join(format!("fill-{id}")))? {
                    bench.full_disks += 1;
                }
            }
            0 => {
                let target = victim_private.unwrap_or_else(|| PathBuf::from("/etc/shadow"));
                symlink(&target, &spec_path, mallory)?;
            }
            1 => symlink(Path::new("/etc/shadow"), &spec_path, mallory)?,
            2 => {
                write(&spec_path, honest_spec().to_spool_toml().as_bytes())?;
                for n in 0..self.flood(2000) {
                    let link = folder.join(format!("{}.toml", TaskId::from_parts(self.next_ms, n as u32)));
                    let _ = std::fs::hard_link(&spec_path, link);
                }
            }
            3 => mkfifo(&spec_path, mallory)?,
            4 => {
                std::fs::create_dir(&spec_path).map_err(io(&spec_path))?;
                give(&spec_path, 0o700, mallory)?;
            }
            5 => {
                let file = std::fs::File::create(&spec_path).map_err(io(&spec_path))?;
                file.set_len(35_000_000).map_err(io(&spec_path))?;
                give(&spec_path, 0o600, mallory)?;
            }
            6 => {
                let mut s = honest_spec();
                s.spec.command = vec!["echo".into(); 1]
                    .into_iter()
                    .chain(std::iter::repeat_n("y".repeat(110_000), 10))
                    .collect();
                write(&spec_path, s.to_spool_toml().as_bytes())?;
            }
            7 => write(
                &spec_path,
                if self.rng.chance(0.5) { b"not = toml = at all" } else { b"\xff\xfe\x00garbage" },
            )?,
            8 => {
                for _ in 0..self.flood(5000) {
                    let unknown = self.id();
                    let _ = write(&folder.join(format!("{unknown}.cancel")), b"cancel\n");
                }
            }
            9 => {
                if let Some((victim, _)) = self.honest.first().cloned() {
                    write(&folder.join(format!("{victim}.cancel")), b"cancel\n")?;
                }
            }
            10 => {
                let mut s = honest_spec();
                if let Some(array) = &self.alice_array {
                    s.spec.array = Some(crate::spec::ArrayMember {
                        id: array.clone(),
                        index: 99,
                        count: 100,
                        running_max: None,
                        params: Vec::new(),
                    });
                }
                write(&spec_path, s.to_spool_toml().as_bytes())?;
            }
            11 => {
                let top = self.home.spool_dir();
                for n in 0..self.flood(600) {
                    let _ = write(&top.join(format!("junk-{tick}-{n}")), b"x");
                }
                let squat = top.join("40003");
                if std::fs::create_dir(&squat).is_ok() {
                    give(&squat, 0o700, mallory)?;
                }
            }
            12 => {
                let mut s = honest_spec();
                if let Some((victim, _)) = self.honest.first() {
                    s.spec.dependencies = vec![crate::spec::Dependency {
                        kind: crate::spec::DependencyKind::AfterOk,
                        task: victim.clone(),
                    }];
                }
                write(&spec_path, s.to_spool_toml().as_bytes())?;
            }
            15 => {
                self.job(bench, id.clone(), fake_oom())?;
                if self.users.jobs {
                    self.idle_ooms.push(id);
                }
            }
            16 => self.job(bench, id, vec!["sh".into(), "-c".into(), "exit 99".into()])?,
            17 => {
                let game = log_game(self.rng.next_u64());
                self.job(bench, id, game)?;
            }
            18 => self.fill_own_folders(bench, id, &folder)?,
            19 => {
                if let Some(client) =
                    self.dashboard.as_ref().and_then(|d| super::lab::pipeline(d.address, PIPELINED_REQUESTS))
                {
                    bench.hostile_clients += 1;
                    self.clients.push(client);
                }
            }
            20 => self.grab(bench, id, tick, super::recovery::GrabKind::Hog)?,
            21 => self.grab(bench, id, tick, super::recovery::GrabKind::Grab)?,
            22 => self.brief_grab(bench, id)?,
            23 => self.idle_oom(bench, id)?,
            24 => self.attach_writes(bench, id)?,
            25 => self.sigcont(bench, id)?,
            26 => self.hold_release(bench, id)?,
            27 => self.unlimited(bench, id)?,
            28 => self.forge(bench, id)?,
            _ => {
                let target = victim_private.unwrap_or_else(|| PathBuf::from("/etc/shadow"));
                write(&spec_path, honest_spec().to_spool_toml().as_bytes())?;
                return Ok(Some(race(spec_path, target, mallory)));
            }
        }
        Ok(None)
    }

    /// Submits a job of mallory's running `command` (1 GiB declared, 100 retries asked).
    pub(super) fn job(&mut self, bench: &mut AdversaryBench, id: TaskId, command: Vec<String>) -> Result<()> {
        if !self.users.jobs {
            return Ok(());
        }
        let mut submission = Submission::bare(super::small_spec("mallory-job", &[]));
        submission.spec.command = command;
        submission.spec.max_retries = 100;
        crate::intake::submit_for(&self.home, &submission, id, self.users.mallory)?;
        bench.job_moves += 1;
        Ok(())
    }

    /// Disk filling through her own folders: real junk in her spool folder (refused, kept
    /// in quarantine), and a job that writes past the log cap and into the log of her last
    /// attempt that already ended (its path is hers to open).
    fn fill_own_folders(&mut self, bench: &mut AdversaryBench, id: TaskId, folder: &Path) -> Result<()> {
        let mallory = self.users.mallory;
        for n in 0..1 + self.rng.next_u64() % 3 {
            let junk = folder.join(format!("junk-{id}-{n}"));
            write(&junk, &vec![b'j'; JUNK_BYTES], mallory)?;
        }
        let ended = self.ended_log_of(mallory);
        let mut script = format!("head -c {JOB_WRITE_BYTES} /dev/zero");
        if let Some(log) = ended {
            script.push_str(&format!("; head -c {JOB_WRITE_BYTES} /dev/zero >> '{}'", log.display()));
        }
        self.job(bench, id, vec!["sh".into(), "-c".into(), script])
    }

    /// The stdout log of `uid`'s latest attempt that has ended, if any.
    fn ended_log_of(&self, uid: u32) -> Option<PathBuf> {
        let state = self.last_state.as_ref()?;
        let (task, attempt) = state
            .tasks
            .values()
            .filter(|t| t.submitter_uid == uid)
            .flat_map(|t| t.attempts.iter().map(move |a| (t, a)))
            .filter(|(_, a)| a.ended_ms.is_some() && a.launched_ms.is_some())
            .max_by_key(|(_, a)| a.ended_ms)?;
        let dir = crate::exec::run_dir(self.home.root(), task.id.as_str(), attempt.number).ok()?;
        Some(dir.join(crate::exec::rundir::STDOUT_LOG))
    }

    /// The pid of the job of `task`'s running attempt, from its `job.json`.
    pub(super) fn job_pid(&self, task: &TaskId) -> Option<u32> {
        let state = self.last_state.as_ref()?;
        let attempt = state.tasks.get(task)?.active_attempt()?;
        let dir = crate::exec::run_dir(self.home.root(), task.as_str(), attempt.number).ok()?;
        crate::exec::read_job_record(&dir).ok()?.map(|record| record.job.pid)
    }

    /// How many files a flood makes: mostly a few dozen, one time in twenty up to `max` (the
    /// large ones cost the harness more time than the tick).
    fn flood(&mut self, max: u64) -> u64 {
        let cap = if self.rng.chance(0.05) { max } else { 64 };
        1 + self.rng.next_u64() % cap
    }
}

/// A job that says it ran out of GPU memory and exits 1, never having touched the GPU.
fn fake_oom() -> Vec<String> {
    vec!["sh".into(), "-c".into(), format!("echo '{FAKE_OOM_LINE}' >&2; exit 1")]
}

/// A job that plays with its own log (found through its descriptor): sparse-huge and back,
/// a FIFO or a link in its place, no permission at all.
fn log_game(draw: u64) -> Vec<String> {
    let game = match draw % 4 {
        // Between 2 GiB and 4 TiB (sparse) as fast as it can, for about a second: a trim that
        // reads one size and then the other would size its copy from the job's file.
        0 => {
            "echo x; i=0; while [ $i -lt 300 ]; do truncate -s 2G \"$p\"; truncate -s 4T \"$p\"; i=$((i+1)); done"
        }
        1 => "echo x; rm -f \"$p\" && mkfifo \"$p\"; sleep 0.3",
        2 => "echo x; rm -f \"$p\" && ln -s /etc/shadow \"$p\"; sleep 0.3",
        _ => "truncate -s 3T \"$p\"; chmod 000 \"$p\"; sleep 0.3",
    };
    let script = format!("p=$(readlink /proc/$$/fd/1); {game}");
    vec!["sh".into(), "-c".into(), script]
}

/// Swaps `path` between a regular file and a link to `target` until told to stop.
fn race(path: PathBuf, target: PathBuf, uid: u32) -> Racer {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::spawn(move || {
        let bytes = std::fs::read(&path).unwrap_or_default();
        let side = path.with_extension("swap");
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = std::os::unix::fs::symlink(&target, &side);
            let _ = std::fs::rename(&side, &path);
            // Mallory could not write through a link into root's files, and the harness (root)
            // must not either: a fresh file only, never following a name.
            let fresh = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(0o600)
                .open(&side);
            if let Ok(mut file) = fresh {
                let _ = std::io::Write::write_all(&mut file, &bytes);
                let _ = chown(&side, uid);
            }
            let _ = std::fs::rename(&side, &path);
        }
    });
    (stop, handle)
}

pub(super) fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::io(format!("adversary bench: {}", path.display()), e)
}

fn chown(path: &Path, uid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid))
}

fn give(path: &Path, mode: u32, uid: u32) -> Result<()> {
    chown(path, uid).map_err(io(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io(path))
}

fn write(path: &Path, bytes: &[u8], uid: u32) -> Result<()> {
    std::fs::write(path, bytes).map_err(io(path))?;
    give(path, 0o600, uid)
}

/// Leaves `bytes` at `path` as `uid`'s file, mode 0600 (what she writes in her own folder).
pub(super) fn write_as(path: &Path, bytes: &[u8], uid: u32) -> Result<()> {
    write(path, bytes, uid)
}

fn symlink(target: &Path, path: &Path, uid: u32) -> Result<()> {
    std::os::unix::fs::symlink(target, path).map_err(io(path))?;
    chown(path, uid).map_err(io(path))
}

fn mkfifo(path: &Path, uid: u32) -> Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::BadInput("NUL in path".into()))?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(io(path)(std::io::Error::last_os_error()));
    }
    chown(path, uid).map_err(io(path))
}

/// Whether `dir` is on a filesystem of at most 1 GiB that keeps blocks for root: where a user
/// can fill the disk and root's tick must still work.
pub(super) fn small_reserved_fs(dir: &Path) -> bool {
    let Ok(stat) = statvfs(dir) else { return false };
    let size = stat.f_blocks * stat.f_frsize;
    size <= 1 << 30 && stat.f_bfree > stat.f_bavail
}

fn statvfs(path: &Path) -> std::io::Result<libc::statvfs> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `stat` a properly sized out-parameter.
    if unsafe { libc::statvfs(c.as_ptr(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stat)
}

/// Fills the filesystem of `path` as `uid` would: `fallocate` (util-linux, run with that uid
/// and gid, never through a shell) of every byte an ordinary user may still use. Whether the
/// filesystem was left with none.
fn fill_as(uid: u32, path: &Path) -> Result<bool> {
    use std::os::unix::process::CommandExt;
    let available = |p: &Path| statvfs(p).map(|s| s.f_bavail * s.f_frsize).unwrap_or(0);
    let dir = path.parent().unwrap_or(path);
    let bytes = available(dir);
    if bytes > 0 {
        let _ = std::process::Command::new("fallocate")
            .arg("-l")
            .arg(bytes.to_string())
            .arg(path)
            .uid(uid)
            .gid(uid)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
    Ok(available(dir) == 0)
}
