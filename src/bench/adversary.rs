//! `carma bench adversary`: a hostile lab member against an honest one, seed by seed.
//!
//! **Seeds.** Each seed is one run on a fresh, real state directory (a real redb journal, the
//! real spool, root's `private/`), driven by the real `tick::run` in this process. The seed
//! alone decides every move, so a failing seed replays exactly (`--first-seed S --seeds 1`).
//! Run as root: the two users are numeric uids (alice 40001, mallory 40002) whose files root
//! creates and gives away with `chown`, which is all the tick can see of a user.
//!
//! **Moves** (mallory's, a few per tick, drawn from the seed, between ticks; `Race` also
//! during one): a link in place of her spool file to alice's private copy or to a root-only
//! file; hard links held "not ready"; a FIFO, a directory or a socket-like entry named as a
//! spec; a spec far over the size cap (sparse) and one whose record would pass the journal's
//! limit; malformed and non-UTF-8 specs; floods of requests for unknown ids; a cancel of
//! alice's task; a spec forging membership of alice's array; a dependency on alice's task
//! (allowed: states are public); junk and a squatted folder at the top of `spool/`; a
//! thread that swaps her spec for a link to alice's private copy while the tick runs; and,
//! where the scratch directory is a small filesystem of its own with blocks reserved for root
//! (a loop-mounted ext4, as `tests/adversary.rs` makes), a full disk: she `fallocate`s, as
//! her own uid, every byte an ordinary user may still use, in a file in her folder, which
//! is refused into quarantine and removed by the next tick's clean (it is over her 1 MiB there).
//! Alice submits ordinary tasks carrying a secret environment value, sometimes an array.
//!
//! **Invariants**, after every tick: (1) the tick returned without error; (2) each of alice's
//! submissions is journaled within [`INGEST_TICKS_MAX`] ticks; (3) no byte of alice's secret
//! is in anything mallory can read (the published view, her folder, her tasks' private
//! copies, from which her jobs' environments are made); (4) none of alice's tasks was
//! cancelled or joined by mallory; (5) `carma journal check` calls the journal sound, as the
//! tick did by appending to it. Each tick's duration is measured and reported, never
//! asserted. Where the scratch is not such a filesystem, the full-disk move does nothing and
//! `full_disks` stays 0, so a run says whether it played it.

use std::ffi::CString;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::clock::SystemClock;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::State;
use crate::session;
use crate::sim::Rng;
use crate::spec::Submission;
use crate::tick::{self, TickContext};

/// Ticks within which an honest submission must be journaled.
pub const INGEST_TICKS_MAX: u64 = 2;
const ALICE: u32 = 40_001;
const MALLORY: u32 = 40_002;
const TICKS: u64 = 6;

/// What the runs found.
#[derive(Debug, Clone, Serialize)]
pub struct AdversaryBench {
    /// Seeds played, each a fresh state directory.
    pub seeds: u64,
    /// The first seed; the run played `first_seed..first_seed + seeds`.
    pub first_seed: u64,
    /// Ticks run over all seeds.
    pub ticks: u64,
    /// Hostile moves mallory played over all seeds.
    pub moves: u64,
    /// Tasks alice submitted over all seeds, one before each tick (some as array members).
    pub honest_submissions: u64,
    /// Broken invariants, each with its seed and tick.
    pub violations: Vec<String>,
    /// Median duration of one tick over all seeds, wall-clock ms.
    pub tick_ms_median: f64,
    /// 99th percentile of the tick durations, ms.
    pub tick_ms_p99: f64,
    /// Longest tick, ms.
    pub tick_ms_max: f64,
    /// Full-disk moves played: the filesystem left with no byte an ordinary user may use.
    pub full_disks: u64,
}

/// Runs seeds `first_seed..first_seed + seeds` in scratch folders under `scratch`.
pub fn adversary(first_seed: u64, seeds: u64, scratch: &Path) -> Result<AdversaryBench> {
    if crate::access::uid::effective() != 0 {
        return Err(Error::BadInput(
            "carma bench adversary plays two users and must run as root; run it with sudo".into(),
        ));
    }
    let mut bench = AdversaryBench {
        seeds,
        first_seed,
        ticks: 0,
        moves: 0,
        honest_submissions: 0,
        violations: Vec::new(),
        tick_ms_median: 0.0,
        tick_ms_p99: 0.0,
        tick_ms_max: 0.0,
        full_disks: 0,
    };
    // The full-disk move needs a small filesystem of its own with root's reserve; mallory, a
    // user, must be able to reach her folder through it.
    let small = small_reserved_fs(scratch);
    if small {
        std::fs::set_permissions(scratch, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(format!("cannot set the mode of {}", scratch.display()), e))?;
    }
    let mut durations = Vec::new();
    for seed in first_seed..first_seed + seeds {
        let dir = scratch.join(format!("seed-{seed}"));
        let run = Run::new(&dir, seed, small)?.play(&mut bench, &mut durations);
        let _ = std::fs::remove_dir_all(&dir);
        run?;
    }
    durations.sort_by(f64::total_cmp);
    let at =
        |q: f64| durations.get(((durations.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    bench.tick_ms_median = at(0.5);
    bench.tick_ms_p99 = at(0.99);
    bench.tick_ms_max = at(1.0);
    Ok(bench)
}

struct Run {
    home: Home,
    config: Config,
    rng: Rng,
    seed: u64,
    secret: String,
    /// Alice's submissions: id and the tick it was made before.
    honest: Vec<(TaskId, u64)>,
    alice_array: Option<TaskId>,
    next_ms: u64,
    /// Whether the full-disk move may be played here (see [`small_reserved_fs`]).
    full_disk: bool,
}

impl Run {
    fn new(dir: &Path, seed: u64, full_disk: bool) -> Result<Run> {
        let _ = std::fs::remove_dir_all(dir);
        let home = Home::at(dir);
        crate::session::init(&home, crate::config::DEFAULT_CONFIG_TOML)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(format!("cannot set the mode of {}", dir.display()), e))?;
        let mut config = Config::load(&home)?;
        config.tick.gpus = "none".into();
        let secret = format!("alice-secret-{seed:016x}-{:08x}", Rng::new(seed).next_u64() as u32);
        Ok(Run {
            home,
            config,
            rng: Rng::new(seed),
            seed,
            secret,
            honest: Vec::new(),
            alice_array: None,
            next_ms: 1_800_000_000_000 + seed % 1000,
            full_disk,
        })
    }

    fn play(mut self, bench: &mut AdversaryBench, durations: &mut Vec<f64>) -> Result<()> {
        for tick in 1..=TICKS {
            self.alice(tick)?;
            bench.honest_submissions += 1;
            let moves = 1 + self.rng.next_u64() % 3;
            let mut racers = Vec::new();
            for _ in 0..moves {
                bench.moves += 1;
                racers.extend(self.mallory(tick, bench)?);
            }
            let started = Instant::now();
            let outcome = self.tick();
            durations.push(started.elapsed().as_secs_f64() * 1e3);
            // Every racer stops before the invariants are checked.
            for (stop, handle) in racers {
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = handle.join();
            }
            bench.ticks += 1;
            match outcome {
                Ok(()) => {
                    for v in self.check(tick)? {
                        bench.violations.push(format!("seed {} tick {tick}: {v}", self.seed));
                    }
                }
                Err(e) => {
                    bench.violations.push(format!("seed {} tick {tick}: the tick failed: {e}", self.seed))
                }
            }
        }
        Ok(())
    }

    fn id(&mut self) -> TaskId {
        self.next_ms += 1 + self.rng.next_u64() % 50;
        TaskId::from_parts(self.next_ms, self.rng.next_u64() as u32)
    }

    fn tick(&mut self) -> Result<()> {
        let clock = SystemClock;
        let mut probe = crate::gpu::NoGpus;
        let mut runner = tick::ExecRunner::new(self.home.root(), std::env::current_exe().unwrap_or_default());
        let mut ctx = TickContext {
            home: &self.home,
            clock: &clock,
            lock_wait: Duration::from_secs(5),
            probe: &mut probe,
            probe_error: Some("no GPUs in the adversary bench".into()),
            runner: &mut runner,
            config: &self.config,
            fault: None,
            state_cache: None,
            state_free_bytes: None,
        };
        tick::run(&mut ctx).map(drop)
    }

    /// Alice submits one ordinary task with her secret in its environment (sometimes an
    /// array member, sometimes the rest of her array).
    fn alice(&mut self, tick: u64) -> Result<()> {
        let mut submission = Submission::bare(super::journal::sample_spec());
        submission.spec.env_names = vec!["SECRET_TOKEN".into()];
        submission.env.insert("SECRET_TOKEN".into(), self.secret.clone());
        if self.rng.chance(0.3) || self.alice_array.is_some() {
            let array = self.alice_array.clone().unwrap_or_else(|| self.id());
            self.alice_array = Some(array.clone());
            submission.spec.array = Some(crate::spec::ArrayMember {
                id: array,
                index: tick as u32,
                count: TICKS as u32 + 1,
                running_max: Some(1),
                params: Vec::new(),
            });
        }
        let id = self.id();
        crate::intake::submit_for(&self.home, &submission, id.clone(), ALICE)?;
        self.honest.push((id, tick));
        Ok(())
    }

    /// How many files a flood makes: mostly a few dozen, one time in twenty up to `max` (the
    /// large ones cost the harness more time than the tick).
    fn flood(&mut self, max: u64) -> u64 {
        let cap = if self.rng.chance(0.05) { max } else { 64 };
        1 + self.rng.next_u64() % cap
    }

    fn folder(&self, uid: u32) -> PathBuf {
        self.home.spool_dir().join(uid.to_string())
    }

    /// One of mallory's moves; a racer thread for `Race`.
    // Long on purpose: one arm per hostile move, numbered as the seeds draw them and as
    // reports/trust-boundary lists them; the table reads best whole.
    fn mallory(&mut self, tick: u64, bench: &mut AdversaryBench) -> Result<Option<Racer>> {
        let folder = self.folder(MALLORY);
        if !folder.exists() {
            std::fs::create_dir(&folder).map_err(io(&folder))?;
            give(&folder, 0o700)?;
        }
        // Alice's private copy lives in root's vault.
        let victim_private =
            self.honest.first().map(|_| self.home.private_dir().join(crate::intake::VAULT_FILE));
        let id = self.id();
        let spec_path = folder.join(format!("{id}.toml"));
        let honest_spec = || {
            let mut s = Submission::bare(super::journal::sample_spec());
            s.spec.name = "mallory".into();
            s
        };
        match self.rng.next_u64() % 15 {
            14 if self.full_disk => {
                if fill_as(MALLORY, &folder.join(format!("fill-{id}")))? {
                    bench.full_disks += 1;
                }
            }
            0 => {
                let target = victim_private.unwrap_or_else(|| PathBuf::from("/etc/shadow"));
                symlink(&target, &spec_path)?;
            }
            1 => symlink(Path::new("/etc/shadow"), &spec_path)?,
            2 => {
                write(&spec_path, honest_spec().to_spool_toml().as_bytes())?;
                for n in 0..self.flood(2000) {
                    let link = folder.join(format!("{}.toml", TaskId::from_parts(self.next_ms, n as u32)));
                    let _ = std::fs::hard_link(&spec_path, link);
                }
            }
            3 => mkfifo(&spec_path)?,
            4 => {
                std::fs::create_dir(&spec_path).map_err(io(&spec_path))?;
                give(&spec_path, 0o700)?;
            }
            5 => {
                let file = std::fs::File::create(&spec_path).map_err(io(&spec_path))?;
                file.set_len(35_000_000).map_err(io(&spec_path))?;
                give(&spec_path, 0o600)?;
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
                    give(&squat, 0o700)?;
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
            _ => {
                let target = victim_private.unwrap_or_else(|| PathBuf::from("/etc/shadow"));
                write(&spec_path, honest_spec().to_spool_toml().as_bytes())?;
                return Ok(Some(race(spec_path, target)));
            }
        }
        Ok(None)
    }

    /// The invariants after `tick`.
    fn check(&self, tick: u64) -> Result<Vec<String>> {
        let mut violations = Vec::new();
        let state: State = session::read(&self.home, Duration::from_secs(5), |_, state| Ok(state))?;
        for (id, made) in &self.honest {
            if tick >= made + INGEST_TICKS_MAX - 1 && !state.tasks.contains_key(id) {
                violations.push(format!("alice's task {id} (submitted before tick {made}) is not journaled"));
            }
        }
        let private = crate::intake::Private::new(&self.home);
        for task in state.tasks.values().filter(|t| t.submitter_uid == MALLORY) {
            if task.spec.array.as_ref().is_some_and(|a| Some(&a.id) == self.alice_array.as_ref()) {
                violations.push(format!("mallory's task {} joined alice's array", task.id));
            }
            let copy = private.read(&task.id).map(|copy| format!("{copy:?}")).unwrap_or_default();
            if copy.contains(&self.secret) {
                violations.push(format!("mallory's task {} has alice's secret in its private copy", task.id));
            }
        }
        for task in state.tasks.values().filter(|t| t.submitter_uid == ALICE) {
            if matches!(task.status(), crate::journal::Status::Cancelled) {
                violations.push(format!("alice's task {} was cancelled", task.id));
            }
        }
        for readable in walk(&self.home.view_dir()).into_iter().chain(walk(&self.folder(MALLORY))) {
            if contains(&readable, &self.secret) {
                violations.push(format!("alice's secret is in {}", readable.display()));
            }
        }
        let report = crate::journal::check::check(&self.home.journal_path())?;
        if !report.sound {
            violations.push(format!("journal check calls the journal damaged: {:?}", report.problems));
        }
        Ok(violations)
    }
}

type Racer = (std::sync::Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<()>);

/// Swaps `path` between a regular file and a link to `target` until told to stop.
fn race(path: PathBuf, target: PathBuf) -> Racer {
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
                let _ = chown(&side);
            }
            let _ = std::fs::rename(&side, &path);
        }
    });
    (stop, handle)
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::io(format!("adversary bench: {}", path.display()), e)
}

fn chown(path: &Path) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(MALLORY), Some(MALLORY))
}

fn give(path: &Path, mode: u32) -> Result<()> {
    chown(path).map_err(io(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io(path))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(io(path))?;
    give(path, 0o600)
}

fn symlink(target: &Path, path: &Path) -> Result<()> {
    std::os::unix::fs::symlink(target, path).map_err(io(path))?;
    chown(path).map_err(io(path))
}

fn mkfifo(path: &Path) -> Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::BadInput("NUL in path".into()))?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(io(path)(std::io::Error::last_os_error()));
    }
    chown(path).map_err(io(path))
}

/// Whether the regular file at `path` contains `needle`; a link is not followed (it is not
/// something mallory can read through: the file it names keeps its own permissions).
fn contains(path: &Path, needle: &str) -> bool {
    use std::io::Read;
    let open =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let Ok(mut file) = open else { return false };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).is_ok() && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Every regular file under `dir` (links not followed).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            out.extend(walk(&entry.path()));
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    out
}

/// Whether `dir` is on a filesystem of at most 1 GiB that keeps blocks for root: where a user
/// can fill the disk and root's tick must still work.
fn small_reserved_fs(dir: &Path) -> bool {
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
