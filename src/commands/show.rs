//! `carma show ID`: everything the journal knows about one task.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use super::{queue, render};
use crate::cli::ShowArgs;
use crate::clock::format_ms;
use crate::error::Error;
use crate::home::Home;
use crate::journal::{Task, session};

/// Schema tag of `carma show --json` (schema/task.schema.json).
pub const TASK_SCHEMA: &str = "carma.task/1";

#[derive(Serialize)]
struct TaskJson<'a> {
    schema: &'static str,
    run_dir: String,
    task: &'a Task,
}

pub fn run(home: &Home, wait: Duration, args: ShowArgs) -> anyhow::Result<()> {
    session::read(home, wait, |_, state| {
        let task = state.find(&args.id).ok_or_else(|| Error::UnknownTask(args.id.clone()))?;
        let run_dir = home.runs_dir().join(task.id.as_str()).display().to_string();
        Ok(if args.json {
            render::print_json(&TaskJson { schema: TASK_SCHEMA, run_dir, task })
        } else {
            print_human(task, &run_dir)
        })
    })?
}

fn print_human(task: &Task, run_dir: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let spec = &task.spec;
    writeln!(out, "task        {}", task.id)?;
    writeln!(out, "name        {}", spec.name)?;
    writeln!(
        out,
        "state       {}{}",
        task.status.as_str(),
        if task.in_recovery { " (recovery queue)" } else { "" }
    )?;
    if let Some(reason) = queue::reason(task) {
        writeln!(out, "reason      {reason}")?;
    }
    writeln!(out, "submitted   {} by uid {}", format_ms(task.submitted_ms), task.submitter_uid)?;
    writeln!(out, "command     {}", shell_quote(&spec.command))?;
    writeln!(out, "workdir     {}", spec.workdir)?;
    for (key, value) in &spec.env {
        writeln!(out, "env         {key}={value}")?;
    }
    writeln!(out, "gpus        {}", spec.gpus)?;
    if let Some(mib) = spec.memory_mib {
        writeln!(out, "memory      {} declared", render::gib(mib))?;
    }
    if let Some(estimate) = &task.estimate {
        writeln!(
            out,
            "estimate    {} (upper {}) by {}: {}",
            render::gib(estimate.mib),
            render::gib(estimate.upper_mib),
            estimate.method,
            estimate.explanation
        )?;
    }
    if let Some(failure) = &task.estimate_failure {
        writeln!(out, "estimate    none: {} (tried again when the summary file changes)", failure.reason)?;
    }
    if let Some(summary) = &spec.model_summary {
        writeln!(
            out,
            "model       {summary} (batch size {})",
            spec.batch_size.map_or("-".into(), |b| b.to_string())
        )?;
    }
    writeln!(
        out,
        "retries     {} used of {} (oom {}, lost {})",
        task.attempts.len().saturating_sub(1),
        spec.max_retries,
        task.oom_count,
        task.lost_count
    )?;
    if let Some(limit) = spec.time_limit_ms {
        writeln!(out, "time limit  {}", render::duration_ms(limit))?;
    }
    writeln!(out, "run dir     {run_dir}")?;
    for attempt in &task.attempts {
        let launched = attempt.launched_ms.map_or("not launched".into(), format_ms);
        let outcome = attempt.outcome.as_deref().unwrap_or("running");
        writeln!(
            out,
            "attempt {}   on {} ({}), launched {launched}, {outcome}",
            attempt.number,
            attempt.gpus.join(","),
            if attempt.exclusive { "exclusive" } else { "shared" }
        )?;
    }
    Ok(())
}

/// Renders argv for display only (it is never executed through a shell).
fn shell_quote(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
