//! Reports as text: a table for people (one journal in detail, or several side by side with
//! ratios against a baseline), `carma.report/1` JSON, and CSV with one row per journal.

use std::fmt::Write;

use serde_json::{Value, json};

use super::{AttemptReport, Report, Stats};

/// The JSON format's version tag.
pub(super) const REPORT_SCHEMA: &str = "carma.report/1";

fn hours(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| format!("{:.2} h", s / 3600.0))
}

fn minutes(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| format!("{:.1} min", s / 60.0))
}

fn ratio(value: Option<f64>, base: Option<f64>) -> Option<f64> {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => Some(v / b),
        _ => None,
    }
}

fn change(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{:+.1}%", (r - 1.0) * 100.0))
}

fn frac(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// The table: the details of one journal, or a comparison of several.
pub fn render_table(reports: &[Report], baseline: usize) -> String {
    match reports {
        [one] => detail(one),
        _ => comparison(reports, baseline),
    }
}

fn stats_line(out: &mut String, name: &str, s: &Stats) {
    let _ = writeln!(
        out,
        "  {name:<10} mean {:>10}  p50 {:>10}  p95 {:>10}  p99 {:>10}  (n={})",
        minutes(s.mean_s),
        minutes(s.p50_s),
        minutes(s.p95_s),
        minutes(s.p99_s),
        s.count
    );
}

fn detail(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} ({} events, {})", r.label, r.events, r.journal);
    let _ = writeln!(
        out,
        "  tasks {}: {} finished, {} failed, {} cancelled, {} unfinished",
        r.tasks, r.finished, r.failed, r.cancelled, r.unfinished
    );
    // Under --user the task figures are that user's tasks only; GPU readings are the
    // machine's, whoever used it, and say so.
    let user = r.scope_user.map(|uid| crate::text::escape(&crate::access::users::display(uid)).into_owned());
    let only = user.as_ref().map_or(String::new(), |user| format!(" ({user}'s tasks only)"));
    let _ = writeln!(out, "  makespan   {}{only}", hours(r.makespan_s));
    stats_line(&mut out, "waiting", &r.waiting);
    stats_line(&mut out, "execution", &r.execution);
    stats_line(&mut out, "JCT", &r.jct);
    let _ = writeln!(
        out,
        "  OOM crashes {}, relaunches {}, lost attempts {}",
        r.oom_crashes, r.relaunches, r.lost_attempts
    );
    let p = &r.preemption;
    if p.preemptions + p.checkpoints > 0 {
        let _ = writeln!(
            out,
            "  preemptions {}, work lost {:.2} GPU-h, checkpoints reported {}, resumes {}",
            p.preemptions, p.lost_gpu_hours, p.checkpoints, p.resumes
        );
    }
    let everyone = user.as_ref().map_or(String::new(), |user| format!("whole queue, not only {user}'s: "));
    let _ = writeln!(
        out,
        "  {everyone}energy {:.3} MJ; mean SM activity {}; mean memory used {}",
        r.energy_megajoules,
        frac(r.sm_active_mean),
        r.memory_used_mean_fraction.map_or("-".into(), |f| format!("{:.0}%", f * 100.0))
    );
    if r.users.len() > 1 {
        let _ = writeln!(out, "\n  user          tasks  mean wait    p95 wait    mean JCT");
        for u in &r.users {
            // The name where this machine knows the uid (journals may come from other nodes).
            let user = crate::text::escape(&crate::access::users::display(u.uid)).into_owned();
            let _ = writeln!(
                out,
                "  {:<12} {:>6}  {:>9}  {:>10}  {:>10}",
                user,
                u.tasks,
                minutes(u.waiting.mean_s),
                minutes(u.waiting.p95_s),
                minutes(u.jct.mean_s)
            );
        }
    }
    let whose = if r.scope_user.is_some() { " (whole queue)" } else { "" };
    let _ =
        writeln!(out, "\n  GPU  UUID                  energy MJ  SM active  memory used  mean power{whose}");
    for g in &r.gpus {
        // The UUID tells apart the GPUs of several nodes (merged reports) that share an index.
        let uuid: String = g.uuid.chars().filter(|c| !c.is_control()).take(20).collect();
        let _ = writeln!(
            out,
            "  {:>3}  {uuid:<20}  {:>9.3}  {:>9}  {:>7.1} GiB  {:>8}",
            g.index,
            g.energy_megajoules,
            frac(g.sm_active_mean),
            g.memory_used_mean_mib / 1024.0,
            g.power_mean_w.map_or("-".into(), |p| format!("{p:.0} W"))
        );
    }
    out
}

fn comparison(reports: &[Report], baseline: usize) -> String {
    let base = &reports[baseline];
    let width = reports.iter().map(|r| r.label.len()).max().unwrap_or(6).max(6);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<width$}  {:>9} {:>7}  {:>10} {:>7}  {:>9} {:>7}  {:>4} {:>5} {:>4} {:>5}  {:>5}",
        "policy",
        "makespan",
        "vs base",
        "mean JCT",
        "vs base",
        "energy",
        "vs base",
        "OOM",
        "relau",
        "fail",
        "unfin",
        "SMACT"
    );
    for r in reports {
        let _ = writeln!(
            out,
            "{:<width$}  {:>9} {:>7}  {:>10} {:>7}  {:>6.2} MJ {:>7}  {:>4} {:>5} {:>4} {:>5}  {:>5}",
            r.label,
            hours(r.makespan_s),
            change(ratio(r.makespan_s, base.makespan_s)),
            minutes(r.jct.mean_s),
            change(ratio(r.jct.mean_s, base.jct.mean_s)),
            r.energy_megajoules,
            change(ratio(Some(r.energy_megajoules), Some(base.energy_megajoules))),
            r.oom_crashes,
            r.relaunches,
            r.failed,
            r.unfinished,
            frac(r.sm_active_mean),
        );
    }
    let _ = writeln!(out, "\nbaseline: {}", base.label);
    out
}

fn vs_baseline(r: &Report, base: &Report) -> Value {
    json!({
        "makespan": ratio(r.makespan_s, base.makespan_s),
        "jct_mean": ratio(r.jct.mean_s, base.jct.mean_s),
        "energy": ratio(Some(r.energy_megajoules), Some(base.energy_megajoules)),
    })
}

/// `carma.report/1` JSON (see schema/report.schema.json).
pub fn render_json(reports: &[Report], baseline: usize) -> String {
    let base = &reports[baseline];
    let items: Vec<Value> = reports
        .iter()
        .map(|r| {
            let mut value = serde_json::to_value(r).unwrap_or_else(|e| unreachable!("plain data: {e}"));
            value["vs_baseline"] = vs_baseline(r, base);
            value
        })
        .collect();
    let out = json!({ "schema": REPORT_SCHEMA, "baseline": base.label, "reports": items });
    serde_json::to_string_pretty(&out).unwrap_or_else(|e| unreachable!("plain data: {e}"))
}

/// CSV, one row per journal.
pub fn render_csv(reports: &[Report], baseline: usize) -> String {
    let base = &reports[baseline];
    let mut out = String::from(
        "label,tasks,finished,failed,unfinished,makespan_h,makespan_vs_baseline,jct_mean_min,jct_p50_min,jct_p95_min,jct_p99_min,jct_vs_baseline,waiting_mean_min,execution_mean_min,energy_mj,energy_vs_baseline,oom_crashes,relaunches,lost_attempts,sm_active_mean,memory_used_mean_fraction,preemptions,lost_gpu_h,checkpoints,resumes\n",
    );
    let num = |v: Option<f64>, scale: f64| v.map_or(String::new(), |v| format!("{:.4}", v / scale));
    for r in reports {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.4},{},{},{},{},{},{},{},{:.4},{},{}",
            r.label.replace(',', ";"),
            r.tasks,
            r.finished,
            r.failed,
            r.unfinished,
            num(r.makespan_s, 3600.0),
            num(ratio(r.makespan_s, base.makespan_s), 1.0),
            num(r.jct.mean_s, 60.0),
            num(r.jct.p50_s, 60.0),
            num(r.jct.p95_s, 60.0),
            num(r.jct.p99_s, 60.0),
            num(ratio(r.jct.mean_s, base.jct.mean_s), 1.0),
            num(r.waiting.mean_s, 60.0),
            num(r.execution.mean_s, 60.0),
            r.energy_megajoules,
            num(ratio(Some(r.energy_megajoules), Some(base.energy_megajoules)), 1.0),
            r.oom_crashes,
            r.relaunches,
            r.lost_attempts,
            num(r.sm_active_mean, 1.0),
            num(r.memory_used_mean_fraction, 1.0),
            r.preemption.preemptions,
            r.preemption.lost_gpu_hours,
            r.preemption.checkpoints,
            r.preemption.resumes,
        );
    }
    out
}

/// Every attempt of one report, one line each (80 columns): task, Slurm job, attempt, node,
/// GPUs, shards, wait, start and end (seconds since the first submission), outcome.
pub fn render_attempts(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n  {:<16} {:>6} {:>3} {:<8} {:<4} {:>6} {:>6} {:>6} {:>6}  outcome",
        "task", "job", "try", "node", "GPU", "shards", "wait s", "start", "end"
    );
    for a in &report.attempts {
        let _ = writeln!(out, "{}", attempt_line(a));
    }
    out
}

fn attempt_line(a: &AttemptReport) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let secs = |v: Option<f64>| opt(v.map(|s| format!("{s:.1}")));
    let node: String = a.node.as_deref().unwrap_or("-").chars().filter(|c| !c.is_control()).take(8).collect();
    let gpus: String = a.gpus.join(",").chars().take(4).collect();
    let outcome: String =
        a.outcome.as_deref().unwrap_or("running").chars().filter(|c| !c.is_control()).take(14).collect();
    format!(
        "  {:<16} {:>6} {:>3} {:<8} {:<4} {:>6} {:>6} {:>6} {:>6}  {}",
        a.task,
        opt(a.slurm_job.map(|j| j.to_string())),
        a.attempt,
        node,
        if gpus.is_empty() { "-".into() } else { gpus },
        opt(a.shards.map(|s| s.to_string())),
        secs(a.wait_s),
        secs(a.start_s),
        secs(a.end_s),
        outcome
    )
}
