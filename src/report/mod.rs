//! `carma report`: metrics derived from a journal alone, and their tables, CSV, JSON and SVG.
//!
//! A journal is read once, record by record ([`analyze`]), so a million-event journal needs
//! no more memory than its tasks and GPUs (plus the time series, only when plots are asked
//! for). Every number comes from journaled facts: submit times from the task ids, starts from
//! Launched, ends from Finished (the exit time the supervisor wrote) or from the tick that saw
//! the end, energy from the GPUs' cumulative counters in MetricSample, SM activity and memory
//! as time-weighted means of the same samples. Nothing is re-probed or re-simulated, so a
//! simulated and a real journal are reported by the same code.

mod by_user;
mod preemption;
mod render;
mod slurm_jobs;
pub mod svg;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use by_user::{UserReport, render_by_user_csv, render_by_user_table};
pub use preemption::PreemptionReport;
pub use render::{render_attempts, render_csv, render_json, render_table};
pub use svg::write_plots;

use crate::error::{Error, Result};
use crate::home::Home;
use crate::journal::store::ReadOpen;
use crate::journal::{Event, Journal, Record};

/// One point of a GPU's time series: (time s since the first submission, memory used MiB,
/// SM activity, power W).
pub type SeriesPoint = (f64, f64, f64, f64);

/// Mean and percentiles of one duration, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Tasks the duration was measured for.
    pub count: u64,
    /// Mean, s; `None` when no task had the duration.
    pub mean_s: Option<f64>,
    /// Median (nearest rank), s.
    pub p50_s: Option<f64>,
    /// 95th percentile (nearest rank), s.
    pub p95_s: Option<f64>,
    /// 99th percentile (nearest rank), s.
    pub p99_s: Option<f64>,
}

/// One GPU over the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GpuReport {
    /// The GPU's UUID, as MetricSample records name it.
    pub uuid: String,
    /// Its NVML index.
    pub index: u32,
    /// Energy it used over the journal's span, from its cumulative counter, MJ.
    pub energy_megajoules: f64,
    /// Time-weighted mean SM activity, 0 to 1; `None` when no sample had one.
    pub sm_active_mean: Option<f64>,
    /// Time-weighted mean memory in use, MiB.
    pub memory_used_mean_mib: f64,
    /// The same as a fraction of its total memory (0 when the total is unknown).
    pub memory_used_mean_fraction: f64,
    /// Time-weighted mean power, W; `None` when no sample had one.
    pub power_mean_w: Option<f64>,
}

/// Everything `carma report` says about one journal.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// The name the user gave this journal in the report (`--label`, or the file's name).
    pub label: String,
    /// The journal file(s) read, joined with ` + `.
    pub journal: String,
    /// Records read.
    pub events: u64,
    /// Tasks submitted (in scope).
    pub tasks: u64,
    /// Tasks whose last attempt finished.
    pub finished: u64,
    /// Tasks that ended failed.
    pub failed: u64,
    /// Tasks that ended cancelled.
    pub cancelled: u64,
    /// Tasks not ended when the journal stops.
    pub unfinished: u64,
    /// From the first submission to the last task's finish, s; `None` when nothing finished.
    pub makespan_s: Option<f64>,
    /// Submission to first start, over the tasks that started.
    pub waiting: Stats,
    /// Time spent running, summed over each started task's attempts.
    pub execution: Stats,
    /// Job completion time: submission to finish, over the finished tasks.
    pub jct: Stats,
    /// Energy of all GPUs together, MJ.
    pub energy_megajoules: f64,
    /// Attempts that ran out of memory (OomDetected records).
    pub oom_crashes: u64,
    /// Attempts after a task's first (attempt number above 1).
    pub relaunches: u64,
    /// Attempts whose supervisor vanished (Lost records).
    pub lost_attempts: u64,
    /// Mean over the GPUs of their mean SM activity; `None` without samples.
    pub sm_active_mean: Option<f64>,
    /// Mean over the GPUs of their mean memory fraction; `None` without GPUs.
    pub memory_used_mean_fraction: Option<f64>,
    /// Preemptions, the work they lost, checkpoints and resumes (`preemption`).
    pub preemption: PreemptionReport,
    /// Every GPU seen in the samples, by UUID.
    pub gpus: Vec<GpuReport>,
    /// Per submitter (uid order): tasks, GPU-hours, relaunches, waits (`carma report
    /// --by-user`, as sreport's per-user figures).
    pub users: Vec<UserReport>,
    /// Every attempt, ordered by start (filled by `analyze`; `carma report` shows it with
    /// `--tasks` and leaves it empty otherwise).
    pub attempts: Vec<AttemptReport>,
    /// Per GPU index: (time s since first submit, memory used MiB, SM active, power W).
    #[serde(skip)]
    pub series: BTreeMap<u32, Vec<SeriesPoint>>,
    /// The one user the tasks are limited to (`--user`), whose report's GPU figures are still
    /// the machine's: the table says so.
    #[serde(skip)]
    pub scope_user: Option<u32>,
}

/// One attempt of one task: where it ran, with what share, and when. Times are seconds since
/// the report's first submission.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AttemptReport {
    /// The task's id.
    pub task: String,
    /// The task's name.
    pub name: String,
    /// The Slurm job id, for a task Slurm placed.
    pub slurm_job: Option<u32>,
    /// The attempt's number, 1 up.
    pub attempt: u32,
    /// The Slurm node, for a task Slurm placed.
    pub node: Option<String>,
    /// GPU indices when the journal knows them, else the names the placement gave.
    pub gpus: Vec<String>,
    /// Slurm shards granted.
    pub shards: Option<u32>,
    /// Memory granted per GPU, MiB (the placement's requirement; for Slurm the shards' memory).
    pub memory_mib: Option<u64>,
    /// From the submission (first attempt) or the previous attempt's end to this start.
    pub wait_s: Option<f64>,
    /// When it started (Launched), s since the first submission.
    pub start_s: Option<f64>,
    /// When it ended, s since the first submission; `None` while running.
    pub end_s: Option<f64>,
    /// How it ended (`exit 0`, `out of memory`, `lost`, a failure's outcome); `None` while running.
    pub outcome: Option<String>,
}

/// A series point before times are made relative: (Unix ms, memory, SM activity, power).
type RawPoint = (u64, f64, f64, f64);

#[derive(Default)]
struct TaskAcc {
    submit_ms: u64,
    submitter_uid: u32,
    first_start_ms: Option<u64>,
    finish_ms: Option<u64>,
    execution_ms: u64,
    open: BTreeMap<u32, u64>,
    end: Option<&'static str>,
    /// The attempt whose end set `end`: a later attempt's end wins (a Slurm job's copies).
    end_attempt: u32,
    name: String,
    attempts: BTreeMap<u32, AttemptAcc>,
}

impl TaskAcc {
    /// How the task ended: its last attempt's end; none while a later attempt runs or waits
    /// (a Slurm job requeued after an end one node journaled).
    fn outcome(&self) -> Option<&'static str> {
        let last = self.attempts.keys().next_back().copied().unwrap_or(0);
        self.end.filter(|_| last <= self.end_attempt)
    }
}

#[derive(Default)]
struct AttemptAcc {
    slurm_job: Option<u32>,
    node: Option<String>,
    gpus: Vec<String>,
    shards: Option<u32>,
    memory_mib: Option<u64>,
    start_ms: Option<u64>,
    end_ms: Option<u64>,
    outcome: Option<String>,
}

#[derive(Default)]
struct GpuAcc {
    index: u32,
    total_mib: u64,
    last: Option<(u64, f64, Option<f64>, Option<f64>)>,
    last_energy_mj: Option<u64>,
    energy_mj: f64,
    span_ms: f64,
    mem_ms: f64,
    sm_ms: f64,
    sm_span_ms: f64,
    power_ms: f64,
    power_span_ms: f64,
}

/// Which part of a journal a report covers: tasks submitted since a time, by one user.
/// GPU figures (energy, activity) are the machine's over the same period, whoever used it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scope {
    /// Tasks submitted at or after this (Unix ms), and GPU readings taken since.
    pub since_ms: Option<u64>,
    /// Tasks of this user only.
    pub user: Option<u32>,
}

impl Scope {
    fn includes_task(&self, submit_ms: u64, uid: u32) -> bool {
        self.since_ms.is_none_or(|since| submit_ms >= since) && self.user.is_none_or(|u| u == uid)
    }
}

#[derive(Default)]
struct Acc {
    scope: Scope,
    /// Tasks outside the scope, whose later records are skipped.
    excluded: std::collections::BTreeSet<String>,
    tasks: BTreeMap<String, TaskAcc>,
    gpus: BTreeMap<String, GpuAcc>,
    /// GPU index by UUID, from GpuDiscovered, for the attempts' GPUs.
    gpu_index: BTreeMap<String, u32>,
    events: u64,
    /// The latest record's time: the end of an attempt still running (GPU-hours).
    last_ms: u64,
    oom: u64,
    relaunches: u64,
    lost: u64,
    preemption: preemption::PreemptionAcc,
    series: Option<BTreeMap<u32, Vec<RawPoint>>>,
    /// One Slurm job is one task across the journals (`slurm_jobs`).
    slurm: slurm_jobs::SlurmJobs,
}

/// Reads a journal (a journal file, or a state directory holding one) and derives its report.
/// `series` keeps the per-GPU time series for plots.
pub fn analyze(path: &Path, label: &str, series: bool) -> Result<Report> {
    analyze_merged(&[path.to_path_buf()], label, series)
}

/// One report over several journals, as one cluster: the node journals of Slurm jobs (one
/// Slurm job is one task, whatever ids its nodes gave it: see `slurm_jobs`), or any journals
/// whose tasks and GPUs are distinct.
pub fn analyze_merged(paths: &[PathBuf], label: &str, series: bool) -> Result<Report> {
    analyze_scoped(paths, label, series, Scope::default())
}

/// [`analyze_merged`] over the part of the journals `scope` selects.
pub fn analyze_scoped(paths: &[PathBuf], label: &str, series: bool, scope: Scope) -> Result<Report> {
    assert!(!paths.is_empty(), "a report needs a journal");
    let mut acc = Acc { scope, series: series.then(BTreeMap::new), ..Acc::default() };
    for path in paths {
        fold_journal(path, &mut acc)?;
    }
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let mut report = acc.finish(label, &shown.join(" + "));
    report.scope_user = scope.user;
    Ok(report)
}

fn fold_journal(path: &Path, acc: &mut Acc) -> Result<()> {
    let visit = |journal: &Journal, acc: &mut Acc| {
        journal.for_each(1, |_, record| {
            acc.fold(&record);
            Ok(true)
        })
    };
    let home = Home::at(path);
    if path.is_dir() && crate::view::is_published(&home) {
        // A state directory: its published view, which every user may read without the lock.
        crate::view::for_each(&home, 1, |_, record| {
            acc.fold(&record);
            Ok(true)
        })
    } else if path.is_dir() {
        // A directory that keeps no view (a simulation's scratch home): its journal.
        visit(&open(&home.journal_path())?, acc)
    } else {
        visit(&open(path)?, acc)
    }
}

/// The journals `path` stands for: itself when it is a journal file or a state directory
/// (it holds `carma.redb`), else every `*.redb` file and state directory directly in it,
/// sorted by name (a directory of a cluster's node journals).
pub fn journals_in(path: &Path) -> Result<Vec<PathBuf>> {
    if !path.is_dir() || path.join("carma.redb").exists() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries =
        std::fs::read_dir(path).map_err(|e| Error::io(format!("cannot list {}", path.display()), e))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "redb") || p.join("carma.redb").exists())
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(Error::BadInput(format!(
            "{} holds no journal (no *.redb file, no state directory with carma.lock); give a journal or a state directory",
            path.display()
        )));
    }
    Ok(found)
}

fn open(path: &Path) -> Result<Journal> {
    match Journal::open_read_only(path)? {
        ReadOpen::Ready(journal) => Ok(journal),
        ReadOpen::NeedsRepair => Err(Error::BadInput(format!(
            "journal {} needs a repair after a crash; run `carma --home DIR queue` on its state directory first",
            path.display()
        ))),
    }
}

impl Acc {
    /// Whether `record` counts: a task's records when the task is in scope, other records
    /// (GPU readings, ticks) when they are recent enough.
    fn in_scope(&mut self, record: &Record) -> bool {
        if self.scope == Scope::default() {
            return true;
        }
        let Some(task) = record.event.task() else {
            return self.scope.since_ms.is_none_or(|since| record.time_ms >= since);
        };
        if let Event::Submitted { submitter_uid, .. } = &record.event
            && !self.scope.includes_task(task.unix_ms(), *submitter_uid)
        {
            self.excluded.insert(task.to_string());
        }
        !self.excluded.contains(task.as_str())
    }

    // Long on purpose: one arm per kind of event, so every figure the report derives can be
    // traced to the record that feeds it in one place.
    fn fold(&mut self, record: &Record) {
        if !self.in_scope(record) {
            return;
        }
        self.events += 1;
        let now = record.time_ms;
        self.last_ms = self.last_ms.max(now);
        // The id this report files the task under: a Slurm job's first copy's (`slurm_jobs`).
        let key = record.event.task().map(|t| self.slurm.key_of(t.as_str()));
        let key = key.as_deref().unwrap_or_default();
        match &record.event {
            Event::Submitted { task, submitter_uid, spec } => {
                let acc = TaskAcc {
                    submit_ms: task.unix_ms(),
                    submitter_uid: *submitter_uid,
                    name: spec.name.clone(),
                    ..TaskAcc::default()
                };
                self.tasks.entry(key.to_string()).or_insert(acc);
            }
            Event::Placed { attempt, gpus, requirement_mib, .. } => {
                if *attempt > 1 && self.count_once(key, *attempt, "relaunch") {
                    self.relaunches += 1;
                }
                if let Some(a) = self.attempt(key, *attempt) {
                    a.gpus = gpus.clone();
                    // A Slurm attempt's memory is its shards' (SlurmPlaced comes first).
                    if a.slurm_job.is_none() {
                        a.memory_mib = *requirement_mib;
                    }
                }
            }
            Event::SlurmPlaced { attempt, cluster, job_id, node, shards, shard_mib, .. } => {
                let key = self.join_slurm_job(key, cluster, *job_id);
                if let Some(a) = self.attempt(&key, *attempt) {
                    a.slurm_job = Some(*job_id);
                    a.node = Some(node.clone());
                    a.shards = *shards;
                    // The Placed that follows holds the figure; the share is the shards' memory.
                    a.memory_mib = shards.map(|s| u64::from(s) * shard_mib);
                }
            }
            Event::GpuDiscovered { uuid, index, .. } => {
                self.gpu_index.insert(uuid.clone(), *index);
            }
            Event::Launched { attempt, .. } => {
                if let Some(t) = self.tasks.get_mut(key) {
                    // The earliest start: a merged job's journals come in any order.
                    t.first_start_ms = Some(t.first_start_ms.map_or(now, |s| s.min(now)));
                    t.open.entry(*attempt).or_insert(now);
                }
                if let Some(a) = self.attempt(key, *attempt) {
                    a.start_ms.get_or_insert(now);
                }
                self.preemption.launched(key);
            }
            Event::Finished { attempt, exit_ms, .. } => {
                self.attempt_outcome(key, *attempt, *exit_ms, "exit 0");
                self.end_attempt(key, *attempt, *exit_ms, true)
            }
            Event::OomDetected { attempt, .. } => {
                if self.count_once(key, *attempt, "oom") {
                    self.oom += 1;
                }
                self.attempt_outcome(key, *attempt, now, "out of memory");
                self.end_attempt(key, *attempt, now, false);
            }
            Event::Lost { attempt, .. } => {
                if self.count_once(key, *attempt, "lost") {
                    self.lost += 1;
                }
                self.attempt_outcome(key, *attempt, now, "lost");
                self.end_attempt(key, *attempt, now, false);
            }
            Event::Failed { attempt, outcome, .. } => {
                self.attempt_outcome(key, *attempt, now, outcome);
                self.end_attempt(key, *attempt, now, false);
                self.set_end(key, *attempt, "failed");
            }
            Event::Stopped { attempt, outcome, .. } => {
                self.attempt_outcome(key, *attempt, now, outcome);
                self.end_attempt(key, *attempt, now, false)
            }
            Event::Cancelled { .. } => {
                let last = self.tasks.get(key).and_then(|t| t.attempts.keys().next_back().copied());
                self.set_end(key, last.unwrap_or(0), "cancelled")
            }
            // Stopped for its GPU memory: the task failed; its attempt ends with Stopped.
            Event::MemoryExceeded { attempt, .. } => self.set_end(key, *attempt, "failed"),
            Event::MetricSample { sample } => self.sample(now, sample),
            Event::Checkpointed { .. } => self.preemption.checkpointed(),
            Event::Suspended { .. } => self.preemption.suspended(),
            Event::Resumed { .. } => self.preemption.resumed(),
            Event::PreemptionWithdrawn { .. } => self.preemption.withdrawn(key),
            Event::Preempted { attempt, lost_ms, .. } => {
                let gpus = self.attempt(key, *attempt).map_or(1, |a| a.gpus.len());
                self.preemption.preempted(key, *lost_ms, gpus);
            }
            _ => {}
        }
    }

    /// The attempt's row, for a task this report knows.
    fn attempt(&mut self, task: &str, attempt: u32) -> Option<&mut AttemptAcc> {
        Some(self.tasks.get_mut(task)?.attempts.entry(attempt).or_default())
    }

    /// Records how an attempt ended, once (the first end event wins).
    fn attempt_outcome(&mut self, task: &str, attempt: u32, at_ms: u64, outcome: &str) {
        if let Some(a) = self.attempt(task, attempt).filter(|a| a.end_ms.is_none()) {
            a.end_ms = Some(at_ms);
            a.outcome = Some(outcome.to_string());
        }
    }

    fn end_attempt(&mut self, task: &str, attempt: u32, at_ms: u64, finished: bool) {
        let Some(t) = self.tasks.get_mut(task) else { return };
        if let Some(start) = t.open.remove(&attempt) {
            t.execution_ms += at_ms.saturating_sub(start);
        }
        if finished && (t.end.is_none() || attempt >= t.end_attempt) {
            t.finish_ms = Some(at_ms);
            t.end = Some("finished");
            t.end_attempt = attempt;
        }
    }

    /// The task's end, unless an end of a later attempt is already known: a task's outcome
    /// is its last attempt's (one queue journals them in order; a Slurm job's node journals
    /// are read one after the other).
    fn set_end(&mut self, task: &str, attempt: u32, end: &'static str) {
        let Some(t) = self.tasks.get_mut(task) else { return };
        if t.end.is_none() || attempt > t.end_attempt {
            if t.end == Some("finished") {
                t.finish_ms = None;
            }
            t.end = Some(end);
            t.end_attempt = attempt;
        }
    }

    fn sample(&mut self, now: u64, sample: &crate::gpu::GpuSample) {
        let gpu = self.gpus.entry(sample.uuid.clone()).or_default();
        gpu.index = sample.index;
        gpu.total_mib = sample.memory_total_mib;
        let sm = sample.sm_active.map(f64::from);
        let power = sample.power_mw.map(|mw| f64::from(mw) / 1000.0);
        if let Some((t, mem, sm_prev, power_prev)) = gpu.last {
            let dt = now.saturating_sub(t) as f64;
            gpu.span_ms += dt;
            gpu.mem_ms += mem * dt;
            if let Some(s) = sm_prev {
                gpu.sm_ms += s * dt;
                gpu.sm_span_ms += dt;
            }
            if let Some(p) = power_prev {
                gpu.power_ms += p * dt;
                gpu.power_span_ms += dt;
            }
        }
        if let Some(energy) = sample.energy_mj {
            // A counter that went down restarted (driver reload, reboot): skip that interval.
            if let Some(previous) = gpu.last_energy_mj.filter(|p| energy >= *p) {
                gpu.energy_mj += (energy - previous) as f64;
            }
            gpu.last_energy_mj = Some(energy);
        }
        let mem = sample.memory_used_mib as f64;
        gpu.last = Some((now, mem, sm, power));
        if let Some(series) = self.series.as_mut() {
            series.entry(sample.index).or_default().push((now, mem, sm.unwrap_or(0.0), power.unwrap_or(0.0)));
        }
    }

    /// Every attempt that was placed, ordered by start, with times relative to `origin`.
    fn attempt_rows(&self, origin: u64) -> Vec<AttemptReport> {
        let rel = |ms: u64| secs(ms.saturating_sub(origin));
        let mut rows = Vec::new();
        for (id, task) in &self.tasks {
            let mut ready_ms = task.submit_ms;
            for (&number, a) in &task.attempts {
                let gpus = a
                    .gpus
                    .iter()
                    .map(|g| self.gpu_index.get(g).map_or(g.clone(), |i| i.to_string()))
                    .collect();
                rows.push(AttemptReport {
                    task: id.clone(),
                    name: task.name.clone(),
                    slurm_job: a.slurm_job,
                    attempt: number,
                    node: a.node.clone(),
                    gpus,
                    shards: a.shards,
                    memory_mib: a.memory_mib,
                    wait_s: a.start_ms.map(|start| secs(start.saturating_sub(ready_ms))),
                    start_s: a.start_ms.map(rel),
                    end_s: a.end_ms.map(rel),
                    outcome: a.outcome.clone(),
                });
                ready_ms = a.end_ms.unwrap_or(ready_ms);
            }
        }
        rows.sort_by(|x, y| {
            let key = |r: &AttemptReport| r.start_s.unwrap_or(f64::INFINITY);
            key(x).total_cmp(&key(y)).then_with(|| (&x.task, x.attempt).cmp(&(&y.task, y.attempt)))
        });
        rows
    }

    fn finish(self, label: &str, path: &str) -> Report {
        let first_submit = self.tasks.values().map(|t| t.submit_ms).min();
        let last_finish = self.tasks.values().filter_map(|t| t.finish_ms).max();
        let count = |end: &str| self.tasks.values().filter(|t| t.outcome() == Some(end)).count() as u64;
        let (finished, failed, cancelled) = (count("finished"), count("failed"), count("cancelled"));
        let waits = self.tasks.values().filter_map(|t| Some(t.first_start_ms?.saturating_sub(t.submit_ms)));
        let execs = self.tasks.values().filter(|t| t.first_start_ms.is_some()).map(|t| t.execution_ms);
        let jcts = self.tasks.values().filter_map(|t| Some(t.finish_ms?.saturating_sub(t.submit_ms)));
        let gpus: Vec<GpuReport> = self.gpus.iter().map(|(uuid, g)| gpu_report(uuid, g)).collect();
        let energy_megajoules = gpus.iter().map(|g| g.energy_megajoules).sum();
        let sm: Vec<f64> = gpus.iter().filter_map(|g| g.sm_active_mean).collect();
        let origin = first_submit.unwrap_or(0);
        let attempts = self.attempt_rows(origin);
        let series = self
            .series
            .unwrap_or_default()
            .into_iter()
            .map(|(i, points)| {
                let points = points.into_iter().map(|(t, m, s, p)| (secs(t.saturating_sub(origin)), m, s, p));
                (i, points.collect())
            })
            .collect();
        Report {
            label: label.to_string(),
            journal: path.to_string(),
            events: self.events,
            tasks: self.tasks.len() as u64,
            finished,
            failed,
            cancelled,
            unfinished: self.tasks.len() as u64 - finished - failed - cancelled,
            makespan_s: first_submit.zip(last_finish).map(|(a, b)| secs(b.saturating_sub(a))),
            waiting: stats(waits.collect()),
            execution: stats(execs.collect()),
            jct: stats(jcts.collect()),
            energy_megajoules,
            oom_crashes: self.oom,
            relaunches: self.relaunches,
            lost_attempts: self.lost,
            sm_active_mean: (!sm.is_empty()).then(|| sm.iter().sum::<f64>() / sm.len() as f64),
            memory_used_mean_fraction: (!gpus.is_empty())
                .then(|| gpus.iter().map(|g| g.memory_used_mean_fraction).sum::<f64>() / gpus.len() as f64),
            gpus,
            users: by_user::user_reports(&self.tasks, self.last_ms),
            preemption: self.preemption.finish(),
            attempts,
            series,
            scope_user: None,
        }
    }
}

fn gpu_report(uuid: &str, g: &GpuAcc) -> GpuReport {
    let mean = |sum: f64, span: f64| (span > 0.0).then(|| sum / span);
    let memory_used_mean_mib = mean(g.mem_ms, g.span_ms).unwrap_or(0.0);
    GpuReport {
        uuid: uuid.to_string(),
        index: g.index,
        energy_megajoules: g.energy_mj / 1e9,
        sm_active_mean: mean(g.sm_ms, g.sm_span_ms),
        memory_used_mean_mib,
        memory_used_mean_fraction: if g.total_mib > 0 {
            memory_used_mean_mib / g.total_mib as f64
        } else {
            0.0
        },
        power_mean_w: mean(g.power_ms, g.power_span_ms),
    }
}

fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// Mean and nearest-rank percentiles of durations in ms, reported in s.
fn stats(mut values_ms: Vec<u64>) -> Stats {
    if values_ms.is_empty() {
        return Stats::default();
    }
    values_ms.sort_unstable();
    let n = values_ms.len();
    let rank = |p: f64| secs(values_ms[((p * n as f64).ceil() as usize).clamp(1, n) - 1]);
    Stats {
        count: n as u64,
        mean_s: Some(values_ms.iter().sum::<u64>() as f64 / n as f64 / 1000.0),
        p50_s: Some(rank(0.50)),
        p95_s: Some(rank(0.95)),
        p99_s: Some(rank(0.99)),
    }
}

#[cfg(test)]
mod charge_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_use_nearest_rank() {
        let s = stats((1..=100).map(|v| v * 1000).collect());
        assert_eq!((s.p50_s, s.p95_s, s.p99_s), (Some(50.0), Some(95.0), Some(99.0)));
        assert_eq!(s.mean_s, Some(50.5));
        assert_eq!(stats(Vec::new()), Stats::default());
    }
}
