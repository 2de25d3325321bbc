//! `carma bench journal`: submit, ingest, append, fold and the empty tick, beside the floor
//! they are bounded by (one `fsync` of a small file in the same directory).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::home::Home;
use crate::id::TaskId;
use crate::journal::{Event, Journal, Record, State};
use crate::spec::{ReferenceMib, TaskSpec};
use crate::tick::{self, TickContext};

use super::median_us;

/// Results of `carma bench journal`, all durations in microseconds.
#[derive(Debug, Serialize)]
pub struct JournalBench {
    /// Median time to write one byte to a new file and fsync it, µs: the disk's floor
    /// under any commit.
    pub fsync_floor_us: f64,
    /// Median time to open the journal, load its state and commit one TickCompleted, µs.
    pub empty_commit_us: f64,
    /// Median time of one `carma submit`'s library call (spool write), µs.
    pub submit_us: f64,
    /// Median time of one tick that ingests 1000 spool files, ms.
    pub ingest_1000_ms: f64,
    /// Records per commit in the append measurement (8: one tick's metric samples).
    pub append_batch_events: u32,
    /// Metric-sized records appended per second, batched as above.
    pub append_events_per_s: f64,
    /// Mean time of one such commit, µs.
    pub append_commit_us: f64,
    /// Records in the large journal the fold and load figures are measured on.
    pub fold_events: u64,
    /// Median time to fold that journal from its first record, ms.
    pub fold_full_ms: f64,
    /// Median time to load its state from the snapshot plus the tail, ms.
    pub load_with_snapshot_ms: f64,
    /// Peak RSS of a child process that folds it from scratch, MiB; `None` without the binary.
    pub fold_peak_rss_mib: Option<f64>,
    /// Median time of a tick with nothing to ingest and no GPUs on that journal, µs.
    pub empty_tick_us: f64,
    /// Size of that journal's file, bytes.
    pub journal_bytes: u64,
    /// The burst: one tick that finds this many new spool files.
    pub burst: BurstBench,
}

/// One tick that ingests a burst of submissions on four fake GPUs (16 placed and launched,
/// the rest given pending reasons), and `carma queue` run again and again meanwhile.
#[derive(Debug, Serialize)]
pub struct BurstBench {
    /// Spool files waiting when the burst tick starts.
    pub tasks: u32,
    /// The whole tick, end to end (median of the runs).
    pub tick_ms: f64,
    /// `carma queue` processes run while the tick ran: how many, and their wall times.
    pub queue_runs: u32,
    /// Median wall time of those `carma queue` runs, ms.
    pub queue_median_ms: f64,
    /// Longest of those `carma queue` runs, ms.
    pub queue_max_ms: f64,
    /// `carma queue` exits that were not 0 (a reader that waited for the lock would time out).
    pub queue_failures: u32,
}

/// Runs every journal benchmark under `dir`, with a `fold_events`-event journal.
pub fn journal(dir: &Path, fold_events: u64, burst_tasks: u32, exe: Option<&Path>) -> Result<JournalBench> {
    let fsync_floor_us = median_us(50, || fsync_once(dir))?;
    let home = fresh_home(dir, "bench-home")?;
    let empty_commit_us = median_us(50, || empty_commit(&home))?;
    let submission = crate::spec::Submission::bare(sample_spec());
    let submit_us =
        median_us(200, || crate::intake::submit(&home, &submission, SystemClock.now_ms()).map(drop))?;
    let ingest_1000_ms = ingest_1000(dir)?;
    let (append_events_per_s, append_commit_us) = append_throughput(&home, 8)?;
    let big = fresh_home(dir, "bench-1m")?;
    fill(&big, fold_events)?;
    let fold_full_ms = median_us(3, || full_fold(&big).map(drop))? / 1000.0;
    let load_with_snapshot_ms = median_us(5, || load(&big).map(drop))? / 1000.0;
    let fold_peak_rss_mib = exe.and_then(|exe| child_fold_rss(exe, big.root()));
    let burst = burst(dir, burst_tasks, exe)?;
    let empty_tick_us = median_us(30, || run_tick(&big).map(drop))?;
    let journal_bytes = std::fs::metadata(big.journal_path()).map(|m| m.len()).unwrap_or(0);
    Ok(JournalBench {
        fsync_floor_us,
        empty_commit_us,
        submit_us,
        ingest_1000_ms,
        append_batch_events: 8,
        append_events_per_s,
        append_commit_us,
        fold_events,
        fold_full_ms,
        load_with_snapshot_ms,
        fold_peak_rss_mib,
        empty_tick_us,
        journal_bytes,
        burst,
    })
}

/// Four idle 40 GiB fake GPUs.
const FOUR_GPUS: &str = r#"[
  {"uuid": "GPU-burst-0", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0},
  {"uuid": "GPU-burst-1", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0},
  {"uuid": "GPU-burst-2", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0},
  {"uuid": "GPU-burst-3", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0}
]"#;

/// The burst tick, three times, with `carma queue` (the binary `exe`, when given) looping
/// beside it.
fn burst(dir: &Path, tasks: u32, exe: Option<&Path>) -> Result<BurstBench> {
    let mut ticks = Vec::new();
    let mut queue_ms = Vec::new();
    let mut queue_failures = 0;
    for round in 0..3 {
        let home = fresh_home(dir, &format!("bench-burst-{round}"))?;
        let gpus = home.root().join("gpus.json");
        std::fs::write(&gpus, FOUR_GPUS).map_err(|e| Error::io("write fake GPUs", e))?;
        let mut config = crate::config::Config::default();
        config.tick.gpus = format!("fake:{}", gpus.display());
        // A first tick publishes a view for the readers.
        run_tick_with(&home, &config)?;
        let mut submission = crate::spec::Submission::bare(sample_spec());
        submission.spec.command = vec!["true".into()];
        submission.spec.program = Some("/bin/true".into());
        for _ in 0..tasks {
            crate::intake::submit(&home, &submission, SystemClock.now_ms())?;
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (tick_ms, readers) = std::thread::scope(|scope| {
            let readers = scope.spawn(|| read_queue_until(&home, exe, &stop));
            let started = Instant::now();
            let report = run_tick_with(&home, &config);
            let tick_ms = started.elapsed().as_secs_f64() * 1e3;
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            (report.map(|r| (tick_ms, r)), readers.join().unwrap_or_default())
        });
        let (tick_ms, report) = tick_ms?;
        assert_eq!(report.ingested, tasks, "every spool file is ingested in one tick");
        ticks.push(tick_ms);
        for (ms, ok) in readers {
            queue_ms.push(ms);
            queue_failures += u32::from(!ok);
        }
        let _ = std::fs::remove_dir_all(home.root());
    }
    ticks.sort_by(f64::total_cmp);
    queue_ms.sort_by(f64::total_cmp);
    Ok(BurstBench {
        tasks,
        tick_ms: ticks[ticks.len() / 2],
        queue_runs: queue_ms.len() as u32,
        queue_median_ms: queue_ms.get(queue_ms.len() / 2).copied().unwrap_or(0.0),
        queue_max_ms: queue_ms.last().copied().unwrap_or(0.0),
        queue_failures,
    })
}

/// `carma queue` runs until `stop`: (wall ms, exit 0) of each.
fn read_queue_until(
    home: &Home,
    exe: Option<&Path>,
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<(f64, bool)> {
    let Some(exe) = exe else { return Vec::new() };
    let mut runs = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let started = Instant::now();
        let ok = std::process::Command::new(exe)
            .args(["queue", "--format", "id,st"])
            .env("CARMA_HOME", home.root())
            .env("CARMA_LOCK_TIMEOUT", "10s")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        runs.push((started.elapsed().as_secs_f64() * 1e3, ok));
    }
    runs
}

/// Folds the journal in `home` from scratch; run in a child process so its peak RSS is the
/// fold's alone.
pub fn fold_child(home: &Path) -> Result<State> {
    full_fold(&Home::at(home))
}

fn full_fold(home: &Home) -> Result<State> {
    Journal::open(&home.journal_path())?.fold_all()
}

fn load(home: &Home) -> Result<State> {
    Journal::open(&home.journal_path())?.load_state()
}

/// One real tick without GPUs: the ingest path alone.
fn run_tick(home: &Home) -> Result<tick::TickReport> {
    let config = crate::config::Config {
        tick: crate::config::TickConfig { gpus: "none".into(), ..Default::default() },
        ..Default::default()
    };
    run_tick_with(home, &config)
}

/// One real tick with the probe `config` names.
fn run_tick_with(home: &Home, config: &crate::config::Config) -> Result<tick::TickReport> {
    let (mut probe, probe_error): (Box<dyn crate::gpu::GpuProbe>, _) =
        match crate::gpu::probe_from_spec(&config.tick.gpus) {
            Ok(probe) => (probe, None),
            Err(e) => (Box::new(crate::gpu::NoGpus), Some(e.to_string())),
        };
    let mut runner = tick::ExecRunner::new(home.root(), std::env::current_exe().unwrap_or_default());
    let mut ctx = TickContext {
        home,
        clock: &SystemClock,
        lock_wait: Duration::from_secs(5),
        probe: probe.as_mut(),
        probe_error,
        runner: &mut runner,
        config,
        fault: None,
        state_cache: None,
        state_free_bytes: None,
    };
    tick::run(&mut ctx)
}

fn fresh_home(dir: &Path, name: &str) -> Result<Home> {
    let root: PathBuf = dir.join(name);
    let _ = std::fs::remove_dir_all(&root);
    let home = Home::at(root);
    crate::session::init(&home, crate::config::DEFAULT_CONFIG_TOML)?;
    Ok(home)
}

fn fsync_once(dir: &Path) -> Result<()> {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path).map_err(|e| Error::io("fsync probe", e))?;
    file.write_all(b"x").and_then(|()| file.sync_all()).map_err(|e| Error::io("fsync probe", e))
}

fn empty_commit(home: &Home) -> Result<()> {
    let mut journal = Journal::open(&home.journal_path())?;
    let mut state = journal.load_state()?;
    let record = Record { time_ms: 0, event: tick_event() };
    journal.append(&[record], &mut state)
}

fn tick_event() -> Event {
    Event::TickCompleted { ingested: 0, rejected: 0, placed: 0, duration_us: 0, rr_cursor: 0 }
}

pub(crate) fn sample_spec() -> TaskSpec {
    TaskSpec {
        name: "bench".into(),
        command: vec!["python".into(), "train.py".into(), "--bs".into(), "64".into()],
        workdir: "/tmp".into(),
        program: None,
        env_names: Vec::new(),
        export: None,
        output: None,
        error: None,
        gpus: 1,
        memory_mib: Some(12 * 1024),
        model_summary: None,
        batch_size: Some(64),
        max_retries: 3,
        time_limit_ms: None,
        dataset: None,
        policy_hint: None,
        reference: ReferenceMib::default(),
        ..TaskSpec::default()
    }
}

fn ingest_1000(dir: &Path) -> Result<f64> {
    let mut samples = Vec::new();
    for round in 0..5 {
        let home = fresh_home(dir, &format!("bench-ingest-{round}"))?;
        for _ in 0..1000 {
            crate::intake::submit(
                &home,
                &crate::spec::Submission::bare(sample_spec()),
                SystemClock.now_ms(),
            )?;
        }
        let started = Instant::now();
        let report = run_tick(&home)?;
        samples.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(report.ingested, 1000, "every spool file is ingested in one tick");
        let _ = std::fs::remove_dir_all(home.root());
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// A record the size of one GPU's metric sample (about 200 bytes encoded).
fn metric_sized(n: u64) -> Record {
    let reason = format!(
        "GPU-{n:08x}-0000-0000-0000-000000000000 mem 31234/40960 MiB smact 0.734 power 251 W energy {n} mJ procs 1234:8123 5678:9000 util 87 occ 0.41 dram 0.22 samples 90"
    );
    Record { time_ms: n, event: Event::Pending { task: TaskId::from_parts(n, 0), reason } }
}

fn append_throughput(home: &Home, batch: u64) -> Result<(f64, f64)> {
    let mut journal = Journal::open(&home.journal_path())?;
    let mut state = journal.load_state()?;
    let commits = 300;
    let started = Instant::now();
    for c in 0..commits {
        let records: Vec<Record> = (0..batch).map(|i| metric_sized(c * batch + i)).collect();
        journal.append(&records, &mut state)?;
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(((commits * batch) as f64 / secs, secs * 1e6 / commits as f64))
}

/// Fills a journal with `events` records shaped like a busy server: per tick 8 metric-sized
/// records and a TickCompleted, plus a task lifecycle every 50 ticks.
pub(super) fn fill(home: &Home, events: u64) -> Result<()> {
    let mut journal = Journal::open(&home.journal_path())?;
    let mut state = journal.load_state()?;
    let mut written = 0u64;
    let mut batch = Vec::with_capacity(10_000);
    let mut tick_no = 0u64;
    while written < events {
        tick_no += 1;
        for g in 0..8 {
            batch.push(Record { time_ms: tick_no * 5000, event: metric_event(tick_no, g) });
        }
        if tick_no.is_multiple_of(50) {
            let task = TaskId::from_parts(tick_no, 1);
            batch.push(Record {
                time_ms: tick_no * 5000,
                event: Event::Submitted { task: task.clone(), submitter_uid: 1000, spec: sample_spec() },
            });
            batch.push(Record {
                time_ms: tick_no * 5000,
                event: Event::Finished { task, attempt: 1, exit_ms: 0 },
            });
        }
        batch.push(Record { time_ms: tick_no * 5000, event: tick_event() });
        if batch.len() >= 9_000 {
            written += batch.len() as u64;
            journal.append(&batch, &mut state)?;
            batch.clear();
        }
    }
    journal.append(&batch, &mut state)
}

fn metric_event(tick_no: u64, gpu: u64) -> Event {
    let Record { event, .. } = metric_sized(tick_no * 8 + gpu);
    event
}

fn child_fold_rss(exe: &Path, home: &Path) -> Option<f64> {
    let out = std::process::Command::new(exe).args(["bench", "fold-child"]).arg(home).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.trim().parse::<f64>().ok()
}

/// Peak resident memory of this process, from `/proc/self/status` VmHWM, in MiB.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
