//! `carma report`: metrics derived from a journal alone, and their tables, CSV, JSON and SVG.
//!
//! A journal is read once, record by record ([`analyze`]), so a million-event journal needs
//! no more memory than its tasks and GPUs (plus the time series, only when plots are asked
//! for). Every number comes from journaled facts: submit times from the task ids, starts from
//! Launched, ends from Finished (the exit time the supervisor wrote) or from the tick that saw
//! the end, energy from the GPUs' cumulative counters in MetricSample, SM activity and memory
//! as time-weighted means of the same samples. Nothing is re-probed or re-simulated, so a
//! simulated and a real journal are reported by the same code.

mod render;
mod svg;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

pub use render::{render_csv, render_json, render_table};
pub use svg::write_plots;

use crate::error::{Error, Result};
use crate::home::{Home, LockGuard, LockMode};
use crate::journal::store::ReadOpen;
use crate::journal::{Event, Journal, Record};

/// One point of a GPU's time series: (time s since the first submission, memory used MiB,
/// SM activity, power W).
pub type SeriesPoint = (f64, f64, f64, f64);

/// Mean and percentiles of one duration, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    pub count: u64,
    pub mean_s: Option<f64>,
    pub p50_s: Option<f64>,
    pub p95_s: Option<f64>,
    pub p99_s: Option<f64>,
}

/// One GPU over the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GpuReport {
    pub uuid: String,
    pub index: u32,
    pub energy_megajoules: f64,
    pub sm_active_mean: Option<f64>,
    pub memory_used_mean_mib: f64,
    pub memory_used_mean_fraction: f64,
    pub power_mean_w: Option<f64>,
}

/// Everything `carma report` says about one journal.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    pub label: String,
    pub journal: String,
    pub events: u64,
    pub tasks: u64,
    pub finished: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub unfinished: u64,
    pub makespan_s: Option<f64>,
    pub waiting: Stats,
    pub execution: Stats,
    pub jct: Stats,
    pub energy_megajoules: f64,
    pub oom_crashes: u64,
    pub relaunches: u64,
    pub lost_attempts: u64,
    pub sm_active_mean: Option<f64>,
    pub memory_used_mean_fraction: Option<f64>,
    pub gpus: Vec<GpuReport>,
    /// Per GPU index: (time s since first submit, memory used MiB, SM active, power W).
    #[serde(skip)]
    pub series: BTreeMap<u32, Vec<SeriesPoint>>,
}

/// A series point before times are made relative: (Unix ms, memory, SM activity, power).
type RawPoint = (u64, f64, f64, f64);

#[derive(Default)]
struct TaskAcc {
    submit_ms: u64,
    first_start_ms: Option<u64>,
    finish_ms: Option<u64>,
    execution_ms: u64,
    open: BTreeMap<u32, u64>,
    end: Option<&'static str>,
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

#[derive(Default)]
struct Acc {
    tasks: BTreeMap<String, TaskAcc>,
    gpus: BTreeMap<String, GpuAcc>,
    events: u64,
    oom: u64,
    relaunches: u64,
    lost: u64,
    series: Option<BTreeMap<u32, Vec<RawPoint>>>,
}

/// Reads a journal (a journal file, or a state directory holding one) and derives its report.
/// `series` keeps the per-GPU time series for plots.
pub fn analyze(path: &Path, label: &str, series: bool) -> Result<Report> {
    let mut acc = Acc { series: series.then(BTreeMap::new), ..Acc::default() };
    let visit = |journal: &Journal, acc: &mut Acc| {
        journal.for_each(1, |_, record| {
            acc.fold(&record);
            Ok(true)
        })
    };
    if path.is_dir() {
        let home = Home::at(path);
        let _lock = LockGuard::acquire(&home, LockMode::Shared, Duration::from_secs(10))?;
        visit(&open(&home.journal_path())?, &mut acc)?;
    } else {
        visit(&open(path)?, &mut acc)?;
    }
    Ok(acc.finish(label, path))
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
    fn fold(&mut self, record: &Record) {
        self.events += 1;
        let now = record.time_ms;
        match &record.event {
            Event::Submitted { task, .. } => {
                let acc = TaskAcc { submit_ms: task.unix_ms(), ..TaskAcc::default() };
                self.tasks.entry(task.to_string()).or_insert(acc);
            }
            Event::Placed { attempt, .. } if *attempt > 1 => self.relaunches += 1,
            Event::Launched { task, attempt, .. } => {
                if let Some(t) = self.tasks.get_mut(task.as_str()) {
                    t.first_start_ms.get_or_insert(now);
                    t.open.entry(*attempt).or_insert(now);
                }
            }
            Event::Finished { task, attempt, exit_ms } => {
                self.end_attempt(task.as_str(), *attempt, *exit_ms, true)
            }
            Event::OomDetected { task, attempt, .. } => {
                self.oom += 1;
                self.end_attempt(task.as_str(), *attempt, now, false);
            }
            Event::Lost { task, attempt, .. } => {
                self.lost += 1;
                self.end_attempt(task.as_str(), *attempt, now, false);
            }
            Event::Failed { task, attempt, .. } => {
                self.end_attempt(task.as_str(), *attempt, now, false);
                self.set_end(task.as_str(), "failed");
            }
            Event::Stopped { task, attempt, .. } => self.end_attempt(task.as_str(), *attempt, now, false),
            Event::Cancelled { task, .. } => self.set_end(task.as_str(), "cancelled"),
            Event::MetricSample { sample } => self.sample(now, sample),
            _ => {}
        }
    }

    fn end_attempt(&mut self, task: &str, attempt: u32, at_ms: u64, finished: bool) {
        let Some(t) = self.tasks.get_mut(task) else { return };
        if let Some(start) = t.open.remove(&attempt) {
            t.execution_ms += at_ms.saturating_sub(start);
        }
        if finished {
            t.finish_ms = Some(at_ms);
            t.end = Some("finished");
        }
    }

    fn set_end(&mut self, task: &str, end: &'static str) {
        if let Some(t) = self.tasks.get_mut(task).filter(|t| t.end.is_none()) {
            t.end = Some(end);
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

    fn finish(self, label: &str, path: &Path) -> Report {
        let first_submit = self.tasks.values().map(|t| t.submit_ms).min();
        let last_finish = self.tasks.values().filter_map(|t| t.finish_ms).max();
        let count = |end: &str| self.tasks.values().filter(|t| t.end == Some(end)).count() as u64;
        let (finished, failed, cancelled) = (count("finished"), count("failed"), count("cancelled"));
        let waits = self.tasks.values().filter_map(|t| Some(t.first_start_ms?.saturating_sub(t.submit_ms)));
        let execs = self.tasks.values().filter(|t| t.first_start_ms.is_some()).map(|t| t.execution_ms);
        let jcts = self.tasks.values().filter_map(|t| Some(t.finish_ms?.saturating_sub(t.submit_ms)));
        let gpus: Vec<GpuReport> = self.gpus.iter().map(|(uuid, g)| gpu_report(uuid, g)).collect();
        let energy_megajoules = gpus.iter().map(|g| g.energy_megajoules).sum();
        let sm: Vec<f64> = gpus.iter().filter_map(|g| g.sm_active_mean).collect();
        let origin = first_submit.unwrap_or(0);
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
            journal: path.display().to_string(),
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
            series,
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
