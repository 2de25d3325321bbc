//! Accounting per user: what `carma report --by-user` shows, as Slurm's `sreport user
//! top`/`sacct` give a lab: each submitter's tasks and how they ended, GPU-hours, attempts
//! after the first and out-of-memory ends, and how long their tasks waited.
//!
//! GPU-hours are fair share's own figure (`tick::gate::usage_by_user`, undecayed): an
//! attempt's GPUs × the time from its Launched to its end, or to the journal's last record
//! while it runs; an attempt that never launched costs nothing. Both call
//! `sched::decayed_gpu_ms` with a half-life of 0, so the report and the queue's order cannot
//! count a user's GPU time two ways.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::{Report, Stats, TaskAcc, stats};

/// One submitter's tasks over the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UserReport {
    /// The submitter.
    pub uid: u32,
    /// Tasks they submitted.
    pub tasks: u64,
    /// Of those, tasks that finished.
    pub finished: u64,
    /// Tasks that ended failed.
    pub failed: u64,
    /// Tasks that ended cancelled.
    pub cancelled: u64,
    /// GPU-hours their attempts held: GPUs × launch to end (to the journal's last record
    /// while running), fair share's undecayed figure.
    pub gpu_hours: f64,
    /// Attempts that launched.
    pub attempts: u64,
    /// Attempts after a task's first (out-of-memory recoveries, lost attempts, requeues).
    pub relaunches: u64,
    /// Attempts that ended out of GPU memory (OomDetected).
    pub oom_crashes: u64,
    /// Their tasks' submission to first start.
    pub waiting: Stats,
    /// Their finished tasks' submission to finish.
    pub jct: Stats,
}

/// Every submitter's figures, in uid order; `last_ms` ends the attempts still running.
pub(super) fn user_reports(tasks: &BTreeMap<String, TaskAcc>, last_ms: u64) -> Vec<UserReport> {
    let mut by_user: BTreeMap<u32, Vec<&TaskAcc>> = BTreeMap::new();
    for task in tasks.values() {
        by_user.entry(task.submitter_uid).or_default().push(task);
    }
    by_user.into_iter().map(|(uid, tasks)| user_report(uid, &tasks, last_ms)).collect()
}

fn user_report(uid: u32, tasks: &[&TaskAcc], last_ms: u64) -> UserReport {
    let ended = |end: &str| tasks.iter().filter(|t| t.outcome() == Some(end)).count() as u64;
    let attempts = || tasks.iter().flat_map(|t| t.attempts.iter());
    let launched = || attempts().filter_map(|(n, a)| Some((*n, a, a.start_ms?)));
    let gpu_ms: f64 = launched()
        .map(|(_, a, start)| {
            let gpus = u32::try_from(a.gpus.len()).unwrap_or(u32::MAX);
            crate::sched::decayed_gpu_ms(gpus, start, a.end_ms.unwrap_or(last_ms), last_ms, 0)
        })
        .sum();
    UserReport {
        uid,
        tasks: tasks.len() as u64,
        finished: ended("finished"),
        failed: ended("failed"),
        cancelled: ended("cancelled"),
        gpu_hours: gpu_ms / 3_600_000.0,
        attempts: launched().count() as u64,
        relaunches: attempts().filter(|(n, _)| **n > 1).count() as u64,
        oom_crashes: attempts().filter(|(_, a)| a.outcome.as_deref() == Some("out of memory")).count() as u64,
        waiting: stats(
            tasks.iter().filter_map(|t| Some(t.first_start_ms?.saturating_sub(t.submit_ms))).collect(),
        ),
        jct: stats(tasks.iter().filter_map(|t| Some(t.finish_ms?.saturating_sub(t.submit_ms))).collect()),
    }
}

fn minutes(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| format!("{:.1} min", s / 60.0))
}

/// The per-user table of each report, 80 columns wide: one line a user, then the total.
pub fn render_by_user_table(reports: &[Report]) -> String {
    let mut out = String::new();
    for r in reports {
        let _ = writeln!(out, "{} ({})", crate::text::escape(&r.label), crate::text::escape(&r.journal));
        let _ = writeln!(
            out,
            "  {:<10} {:>5} {:>5} {:>5} {:>5} {:>9} {:>6} {:>4} {:>10} {:>10}",
            "USER", "TASKS", "DONE", "FAIL", "CANC", "GPU-H", "RELAU", "OOM", "MEAN WAIT", "P95 WAIT"
        );
        for u in &r.users {
            // The name where this machine knows the uid (journals may come from other nodes).
            let user: String =
                crate::text::escape(&crate::access::users::display(u.uid)).chars().take(10).collect();
            let _ = writeln!(
                out,
                "  {user:<10} {:>5} {:>5} {:>5} {:>5} {:>9.2} {:>6} {:>4} {:>10} {:>10}",
                u.tasks,
                u.finished,
                u.failed,
                u.cancelled,
                u.gpu_hours,
                u.relaunches,
                u.oom_crashes,
                minutes(u.waiting.mean_s),
                minutes(u.waiting.p95_s)
            );
        }
        let sum = |f: fn(&UserReport) -> u64| r.users.iter().map(f).sum::<u64>();
        let gpu_hours: f64 = r.users.iter().map(|u| u.gpu_hours).sum();
        let _ = writeln!(
            out,
            "  {:<10} {:>5} {:>5} {:>5} {:>5} {gpu_hours:>9.2} {:>6} {:>4} {:>10} {:>10}",
            "total",
            sum(|u| u.tasks),
            sum(|u| u.finished),
            sum(|u| u.failed),
            sum(|u| u.cancelled),
            sum(|u| u.relaunches),
            sum(|u| u.oom_crashes),
            minutes(r.waiting.mean_s),
            minutes(r.waiting.p95_s)
        );
    }
    out
}

/// CSV, one row per (journal, user).
pub fn render_by_user_csv(reports: &[Report]) -> String {
    let mut out = String::from(
        "label,uid,user,tasks,finished,failed,cancelled,gpu_hours,attempts,relaunches,oom_crashes,waiting_mean_min,waiting_p95_min,jct_mean_min\n",
    );
    let num = |v: Option<f64>| v.map_or(String::new(), |v| format!("{:.4}", v / 60.0));
    for r in reports {
        for u in &r.users {
            let user = crate::access::users::display(u.uid);
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{:.4},{},{},{},{},{},{}",
                r.label.replace(',', ";"),
                u.uid,
                user.replace(',', ";"),
                u.tasks,
                u.finished,
                u.failed,
                u.cancelled,
                u.gpu_hours,
                u.attempts,
                u.relaunches,
                u.oom_crashes,
                num(u.waiting.mean_s),
                num(u.waiting.p95_s),
                num(u.jct.mean_s)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! Goal: the report's GPU-hours per user are fair share's GPU time, and relaunches and
    //! out-of-memory ends are counted per user. Method: the same records folded into the
    //! report and into State, whose `tick::gate::usage_by_user` (half-life 0) is the queue's
    //! figure; fails on the report before `--by-user` (no GPU-hours per user).
    use super::super::*;
    use crate::id::TaskId;
    use crate::journal::ProcessRef;

    fn spec() -> crate::spec::TaskSpec {
        crate::spec::parse_toml("t", "name = \"t\"\ncommand = [\"true\"]\n")
            .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
            .unwrap()
    }

    fn records() -> Vec<Record> {
        let (a, b) = (TaskId::from_parts(1_000, 1), TaskId::from_parts(1_000, 2));
        let supervisor = ProcessRef { pid: 100, start_time_ticks: 1, boot_id: "b".into() };
        let placed = |task: &TaskId, attempt, gpus: &[&str]| Event::Placed {
            task: task.clone(),
            attempt,
            gpus: gpus.iter().map(|g| g.to_string()).collect(),
            exclusive: false,
            requirement_mib: None,
            reason: "fits".into(),
        };
        let launched = |task: &TaskId, attempt| Event::Launched {
            task: task.clone(),
            attempt,
            supervisor: supervisor.clone(),
            adopted: false,
        };
        let hour = 3_600_000;
        vec![
            (1_000, Event::Submitted { task: a.clone(), submitter_uid: 1001, spec: spec() }),
            (1_000, Event::Submitted { task: b.clone(), submitter_uid: 1002, spec: spec() }),
            (2_000, placed(&a, 1, &["GPU-a", "GPU-b"])),
            (2_000, launched(&a, 1)),
            (
                2_000 + hour,
                Event::OomDetected {
                    task: a.clone(),
                    attempt: 1,
                    evidence: "CUDA out of memory".into(),
                    peak_mib: None,
                },
            ),
            (3_000 + hour, placed(&a, 2, &["GPU-a"])),
            (3_000 + hour, launched(&a, 2)),
            (3_000 + 2 * hour, Event::Finished { task: a.clone(), attempt: 2, exit_ms: 3_000 + 2 * hour }),
            (4_000, placed(&b, 1, &["GPU-c"])),
            (4_000, launched(&b, 1)),
            (
                4_000 + 3 * hour,
                Event::Cancelled { task: b.clone(), by_uid: 1002, reason: "cancelled".into() },
            ),
        ]
        .into_iter()
        .map(|(time_ms, event)| Record { time_ms, event })
        .collect()
    }

    #[test]
    fn gpu_hours_are_fair_shares_and_relaunches_are_counted_per_user() {
        let mut acc = Acc::default();
        for record in records() {
            acc.fold(&record);
        }
        let report = acc.finish("t", "journal");
        let users: Vec<_> =
            report.users.iter().map(|u| (u.uid, u.attempts, u.relaunches, u.oom_crashes)).collect();
        assert_eq!(users, [(1001, 2, 1, 1), (1002, 1, 0, 0)]);
        assert_eq!((report.users[0].finished, report.users[1].cancelled), (1, 1));
        assert!((report.users[0].gpu_hours - 3.0).abs() < 1e-9, "2 GPUs × 1 h + 1 GPU × 1 h");
        // Task b's attempt is still open (a cancel records no attempt end): to the last record.
        assert!((report.users[1].gpu_hours - 3.0).abs() < 1e-9, "{}", report.users[1].gpu_hours);
        let mut state = crate::journal::State::default();
        for (seq, record) in records().iter().enumerate() {
            state.apply(seq as u64 + 1, record);
        }
        let mut config = crate::sched::SchedConfig::default();
        config.fair_share.enabled = true;
        config.fair_share.half_life_ms = 0;
        let last = records().last().map(|r| r.time_ms).unwrap();
        let usage = crate::tick::gate::usage_by_user(&state, &config, last);
        let queue: Vec<(u32, f64)> = usage.iter().map(|u| (u.user, u.gpu_ms / 3_600_000.0)).collect();
        let report: Vec<(u32, f64)> = report.users.iter().map(|u| (u.uid, u.gpu_hours)).collect();
        assert_eq!(queue.len(), report.len());
        for ((qu, qh), (ru, rh)) in queue.iter().zip(&report) {
            assert_eq!(qu, ru);
            assert!((qh - rh).abs() < 1e-6, "user {qu}: fair share {qh} h, report {rh} h");
        }
    }
}
