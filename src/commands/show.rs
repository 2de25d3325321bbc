//! `carma show ID`: everything the journal knows about one task.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use super::{render, status};
use crate::access::users;
use crate::cli::ShowArgs;
use crate::clock::format_ms;
use crate::home::Home;
use crate::journal::state::{Attempt, EstimateFailure, EstimateRecord, SlurmRef};
use crate::journal::{State, Status, Task};
use crate::sched::{ExpectedRun, RecoveryMode};
use crate::text::escape;
use crate::view::lookup;

/// Schema tag of `carma show --json` (schema/task.schema.json).
pub(super) const TASK_SCHEMA: &str = "carma.task/1";
/// Schema tag of `carma show ARRAY --json`.
pub(super) const ARRAY_SCHEMA: &str = "carma.array/1";

#[derive(Serialize)]
struct TaskJson<'a> {
    schema: &'static str,
    run_dir: String,
    /// `None` while the task is still in the spool.
    task: Option<TaskFields<'a>>,
    /// The submission while it is still in the spool; `None` once the tick has it.
    spooled: Option<SpooledJson>,
}

/// A task in `carma.task/1`: the flat fields it has always had, read from the task's phase
/// (the State keeps them as one `Phase`; the schema stays as it was).
#[derive(Serialize)]
struct TaskFields<'a> {
    id: &'a str,
    submit_seq: u64,
    submitted_ms: u64,
    submitter_uid: u32,
    spec: &'a crate::spec::TaskSpec,
    status: Status,
    attempts: &'a [Attempt],
    pending_reason: Option<&'a str>,
    estimate: Option<&'a EstimateRecord>,
    estimate_failure: Option<&'a EstimateFailure>,
    in_recovery: bool,
    recovery_requirement_mib: Option<u64>,
    recovery_mode: Option<RecoveryMode>,
    oom_count: u32,
    lost_count: u32,
    end_reason: Option<&'a str>,
    ended_ms: Option<u64>,
    slurm: Option<&'a SlurmRef>,
    held: bool,
    requeue_by: Option<u32>,
    requeue_count: u32,
    /// While it waits: its expected run for the queue order, and where it came from.
    expected_run: Option<ExpectedRunJson>,
    /// The GPU memory figure placement and enforcement use, and where it came from.
    memory_share: String,
}

/// A waiting task's expected run, as `[sched.order]`'s size order sizes it.
#[derive(Serialize)]
struct ExpectedRunJson {
    ms: u64,
    gpu_hours: f64,
    source: &'static str,
}

impl ExpectedRunJson {
    fn of(task: &Task, run: ExpectedRun) -> ExpectedRunJson {
        let gpu_hours = f64::from(task.spec.gpus.max(1)) * run.ms as f64 / 3_600_000.0;
        ExpectedRunJson { ms: run.ms, gpu_hours, source: run.source.name() }
    }
}

/// What the size order expects of a waiting task (`None` for any other task): the same
/// figures the tick computes from the same State.
fn expected_run(state: &State, task: &Task) -> Option<ExpectedRun> {
    if task.status() != Status::Pending {
        return None;
    }
    crate::tick::expected_run(state, task, &crate::tick::width_priors(state))
}

impl<'a> TaskFields<'a> {
    fn of(task: &'a Task, expected: Option<ExpectedRun>, memory_share: String) -> TaskFields<'a> {
        TaskFields {
            id: task.id.as_str(),
            submit_seq: task.submit_seq,
            submitted_ms: task.submitted_ms,
            submitter_uid: task.submitter_uid,
            spec: &task.spec,
            status: task.status(),
            attempts: &task.attempts,
            pending_reason: task.pending_reason(),
            estimate: task.estimate.as_ref(),
            estimate_failure: task.estimate_failure.as_ref(),
            in_recovery: task.in_recovery(),
            recovery_requirement_mib: task.recovery_requirement_mib,
            recovery_mode: task.recovery_mode(),
            oom_count: task.oom_count,
            lost_count: task.lost_count,
            end_reason: task.end_reason(),
            ended_ms: task.ended_ms(),
            slurm: task.slurm.as_ref(),
            held: task.held(),
            requeue_by: task.requeue_by(),
            requeue_count: task.requeue_count,
            expected_run: expected.map(|run| ExpectedRunJson::of(task, run)),
            memory_share,
        }
    }
}

#[derive(Serialize)]
struct SpooledJson {
    id: String,
    submitter_uid: u32,
    user: Option<String>,
    name: Option<String>,
    submitted_ms: u64,
}

pub(super) fn run(home: &Home, wait: Duration, args: ShowArgs) -> anyhow::Result<()> {
    run_to(home, wait, args, &mut std::io::stdout().lock())
}

/// `run`, writing to `out` (stdout, or `carma mcp`'s answer).
pub(super) fn run_to(
    home: &Home,
    wait: Duration,
    args: ShowArgs,
    mut out: &mut dyn Write,
) -> anyhow::Result<()> {
    let _ = wait;
    let state = crate::view::load(home)?;
    let spooled = lookup::spooled(home, &state);
    let found = match lookup::resolve(&state, &spooled, &args.id)? {
        lookup::Target::Task(found) => found,
        lookup::Target::Array { id, members } => return print_array(&id, &members, args.json, out),
    };
    let run_dir = home.runs_dir().join(found.id().as_str()).display().to_string();
    // A broken config.toml is the tick's to report; the figures then use the defaults.
    let config = crate::config::Config::load(home).unwrap_or_default();
    let share = |task: &Task| crate::tick::share::describe(&state, task, &config);
    match found {
        lookup::Found::Task(task) if args.json => render::write_json(
            out,
            &TaskJson {
                schema: TASK_SCHEMA,
                run_dir,
                task: Some(TaskFields::of(task, expected_run(&state, task), share(task))),
                spooled: None,
            },
        ),
        lookup::Found::Task(task) => {
            print_human(task, expected_run(&state, task), &run_dir, home, &share(task), out)?;
            print_stderr_tail(home, task, &mut out)
        }
        lookup::Found::Spooled(spooled) if args.json => {
            let spooled = SpooledJson {
                id: spooled.id.to_string(),
                submitter_uid: spooled.owner_uid,
                user: users::name_of(spooled.owner_uid),
                name: spooled.name.clone(),
                submitted_ms: spooled.id.unix_ms(),
            };
            render::write_json(
                out,
                &TaskJson { schema: TASK_SCHEMA, run_dir, task: None, spooled: Some(spooled) },
            )
        }
        lookup::Found::Spooled(spooled) => {
            writeln!(out, "task        {}", spooled.id)?;
            writeln!(
                out,
                "name        {}",
                escape(spooled.name.as_deref().unwrap_or("? (only its submitter may read it yet)"))
            )?;
            writeln!(out, "state       Submitted (in the spool; the next tick takes it)")?;
            writeln!(
                out,
                "submitted   {} by {}",
                format_ms(spooled.id.unix_ms()),
                users::display(spooled.owner_uid)
            )?;
            Ok(())
        }
    }
}

/// What the task asks for and was given: GPUs, memory, the estimate, the model, its retries.
fn resource_lines(task: &Task) -> Vec<(&'static str, String)> {
    let spec = &task.spec;
    let mut lines = Vec::new();
    lines.push(("gpus", spec.gpus.to_string()));
    if let Some(profile) = &spec.mig_profile {
        lines.push(("mig profile", profile.clone()));
    }
    if let Some(reservation) = &spec.reservation {
        lines.push(("reservation", reservation.clone()));
    }
    if let Some(mib) = spec.memory_mib {
        lines.push(("memory", format!("{} declared", render::gib(mib))));
    }
    if let Some(estimate) = &task.estimate {
        let upper = render::gib(estimate.upper_mib);
        let how = format!(
            "{} (upper {upper}) by {}: {}",
            render::gib(estimate.mib),
            estimate.method,
            estimate.explanation
        );
        lines.push(("estimate", how));
    }
    if let Some(failure) = &task.estimate_failure {
        lines.push(("estimate", format!("none: {}", failure.reason)));
    }
    if let Some(summary) = &spec.model_summary {
        let batch = spec.batch_size.map_or("-".into(), |b| b.to_string());
        lines.push(("model", format!("{summary} (batch size {batch})")));
    }
    // A pending task whose last attempt ended has been requeued: that retry is used already,
    // as the journal's "retry N of M" said when it was. A user's requeue uses none.
    let requeued = task.status() == crate::journal::Status::Pending && !task.attempts.is_empty();
    let used = if requeued { task.attempts.len() } else { task.attempts.len().saturating_sub(1) };
    let used = used.saturating_sub(task.requeue_count as usize);
    let by_user = match task.requeue_count {
        0 => String::new(),
        n => format!(", requeued by the user {n}"),
    };
    let retries = format!(
        "{used} used of {} (oom {}, lost {}{by_user})",
        spec.max_retries, task.oom_count, task.lost_count
    );
    lines.push(("retries", retries));
    lines
}

/// Host memory and CPUs, and whether this queue enforces them: a task's limits hold only
/// where the queue can set its cgroup ([`crate::exec::hostlimit`]), never silently.
fn host_limit_lines(task: &Task, home: &Home) -> Vec<(&'static str, String)> {
    use crate::exec::hostlimit;
    let root = hostlimit::queue_tick_is_root(home.root());
    let held = |controller: &str| match hostlimit::unenforced_here(root, controller) {
        Some(why) => format!("not enforced here ({why})"),
        None => hostlimit::enforced_words(controller),
    };
    let mut lines = Vec::new();
    if let Some(mib) = task.spec.host_mem_mib {
        let size = if mib % 1024 == 0 { format!("{} GiB", mib / 1024) } else { format!("{mib} MiB") };
        lines.push(("host memory", format!("{size}; {}", held("memory"))));
    }
    if let Some(cpus) = task.spec.cpus {
        lines.push(("cpus", format!("{cpus}; {}", held("cpu"))));
    }
    // What the scheduler does: an interactive session is never a victim, whatever it says.
    let requeue = match (task.spec.interactive.is_some(), task.spec.requeue) {
        (true, _) => Some("never (an interactive session is never preempted)"),
        (false, Some(true)) => Some("yes (--requeue)"),
        (false, Some(false)) => Some("never (--no-requeue)"),
        (false, None) => None,
    };
    if let Some(words) = requeue {
        lines.push(("requeue", words.to_string()));
    }
    lines
}

/// The limit the task runs with and, where the queue chose it, where it came from
/// (`spec::time_limit`); the task's own limit, or one journaled before carma said where,
/// shows alone.
fn time_limit_words(spec: &crate::spec::TaskSpec) -> Option<String> {
    use crate::spec::time_limit::TimeLimitSource;
    match (spec.time_limit_ms, spec.time_limit_source) {
        (_, Some(TimeLimitSource::QueueUnlimited)) => Some(TimeLimitSource::QueueUnlimited.words().into()),
        (Some(ms), None | Some(TimeLimitSource::Task)) => Some(render::duration_ms(ms)),
        (Some(ms), Some(source)) => Some(format!("{} ({})", render::duration_ms(ms), source.words())),
        (None, _) => None,
    }
}

/// What an interactive mode means, with the verb that made it: `hold` is `carma alloc
/// --no-shell`'s, not a verb of its own.
fn interactive_words(mode: &str) -> String {
    let what = match mode {
        "alloc" => "a shell on a terminal attached with carma alloc",
        "run" => "one command on a terminal attached with carma run",
        crate::exec::interactive::HOLD => {
            "an allocation held by carma alloc --no-shell; commands attach with carma run --attach"
        }
        _ => "an interactive session",
    };
    format!("{mode} ({what})")
}

fn print_human(
    task: &Task,
    expected: Option<ExpectedRun>,
    run_dir: &str,
    home: &Home,
    memory_share: &str,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let spec = &task.spec;
    let mut line = |label: &str, value: &str| writeln!(out, "{label:<12}{}", escape(value));
    line("task", task.id.as_str())?;
    line("name", &spec.name)?;
    let recovery = if task.in_recovery() { " (recovery queue)" } else { "" };
    // Slurm's TIMEOUT is a failure at the time limit; every other state is the status's word.
    let state = if task.timed_out() { "Timeout (TO)" } else { task.status().as_str() };
    line("state", &format!("{state}{recovery}"))?;
    if let Some(reason) = status::reason(task) {
        line("reason", &reason)?;
    }
    let user = users::display(task.submitter_uid);
    line("submitted", &format!("{} by {user} (uid {})", format_ms(task.submitted_ms), task.submitter_uid))?;
    line("command", &shell_quote(&spec.command))?;
    if let Some(mode) = &spec.interactive {
        line("interactive", &interactive_words(mode))?;
    }
    if let Some(program) = &spec.program {
        line("program", program)?;
    }
    line("workdir", &spec.workdir)?;
    if !spec.env_names.is_empty() || spec.export.is_some() {
        let export = spec.export.as_deref().unwrap_or("the spec's [env]");
        let names = spec.env_names.join(" ");
        line("env", &format!("{} from {export} (values private): {names}", spec.env_names.len()))?;
    }
    for (label, value) in resource_lines(task).into_iter().chain(host_limit_lines(task, home)) {
        line(label, &value)?;
        if label == "gpus" {
            line("gpu share", memory_share)?;
        }
    }
    if let Some(words) = time_limit_words(spec) {
        line("time limit", &words)?;
    }
    if let Some(run) = expected {
        let size = ExpectedRunJson::of(task, run);
        let how = format!(
            "{} on {} GPU = {:.2} GPU-h (from {}; the size order weighs it so)",
            render::duration_ms(run.ms),
            spec.gpus.max(1),
            size.gpu_hours,
            run.source.words()
        );
        line("expected", &how)?;
    }
    for (label, template) in [("output", &spec.output), ("error", &spec.error)] {
        if let Some(template) = template {
            line(label, template)?;
        }
    }
    match &task.slurm {
        Some(slurm) => {
            let share =
                slurm.shards.map_or("whole GPUs".into(), |s| format!("shard:{s} of {} MiB", slurm.shard_mib));
            let job = format!("job {} of cluster {:?} on {}", slurm.job_id, slurm.cluster, slurm.node);
            line("slurm", &format!("{job}, {share} (Slurm runs it; cancel with scancel)"))?;
        }
        None => line("run dir", &format!("{run_dir} (logs: carma logs {})", task.id))?,
    }
    for (label, value) in super::workflow_view::show_lines(task) {
        line(label, &value)?;
    }
    for attempt in &task.attempts {
        let launched = attempt.launched_ms.map_or("not launched".into(), format_ms);
        let outcome = attempt.outcome.as_deref().unwrap_or("running");
        // Whether other tasks may join its GPUs, not whether any did: an attempt placed on
        // an idle GPU ("exclusive first") is alone there until another task fits beside it.
        let how = if attempt.exclusive { "exclusive" } else { "shareable" };
        let label = format!("attempt {}", attempt.number);
        line(&label, &format!("on {} ({how}), launched {launched}, {outcome}", attempt.gpus.join(",")))?;
        line("", &format!("placed: {}", attempt.placement_reason))?;
        if let Some(at_ms) = attempt.checkpoint_ms {
            line("", &format!("last checkpoint reported {}", format_ms(at_ms)))?;
        }
        if let Some(suspended) = &attempt.suspended {
            line(
                "",
                &format!(
                    "suspended for {} since {}; its GPU memory released",
                    suspended.by,
                    format_ms(suspended.at_ms)
                ),
            )?;
        }
        if let Some(preempted) = &attempt.preempted {
            let lost = crate::spec::render_ms(preempted.lost_ms);
            line("", &format!("preempted by {}: {}; {lost} of work lost", preempted.by, preempted.reason))?;
        }
        if let Some(why) = &attempt.withdrawn {
            line("", &format!("preemption withdrawn: {why}; it ran on"))?;
        }
        if let Some(why) = &attempt.suspension_ended {
            line("", &format!("suspension ended: {why}; stopped and queued again"))?;
        }
    }
    for (label, value) in crate::notify::efficiency::lines(task) {
        line(label, &value)?;
    }
    Ok(())
}

/// A failed task's last lines of stderr (the cause is usually there: an ImportError, a
/// traceback), for a reader who may read them.
pub(super) fn print_stderr_tail(home: &Home, task: &Task, out: &mut impl Write) -> anyhow::Result<()> {
    if task.status() != crate::journal::Status::Failed {
        return Ok(());
    }
    if let Some((lines, chosen)) = super::logs::stderr_tail(home, task) {
        let attempt = task.attempts.last().map_or(0, |a| a.number);
        let file =
            chosen.map_or(String::new(), |path| format!(" in {}", escape(&path.display().to_string())));
        writeln!(
            out,
            "stderr      last {} line(s) of attempt {attempt}{file} (carma logs --stderr {}):",
            lines.len(),
            task.id
        )?;
        for line in lines {
            writeln!(out, "  | {line}")?;
        }
    }
    Ok(())
}

/// An array: one line per member, with the `ID_INDEX` form each answers to.
fn print_array(
    id: &crate::id::TaskId,
    members: &[lookup::Found<'_>],
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let index_of = |m: &lookup::Found<'_>| match m {
        lookup::Found::Task(task) => task.spec.array.as_ref().map(|a| a.index),
        lookup::Found::Spooled(s) => s.array_index,
    };
    let state_of = |m: &lookup::Found<'_>| match m {
        lookup::Found::Task(task) => task.status().as_str(),
        lookup::Found::Spooled(_) => "Submitted",
    };
    if json {
        let rows: Vec<serde_json::Value> = members
            .iter()
            .map(|m| serde_json::json!({"id": m.id().as_str(), "index": index_of(m), "state": state_of(m)}))
            .collect();
        return render::write_json(
            out,
            &serde_json::json!({"schema": ARRAY_SCHEMA, "array": id.as_str(), "tasks": rows}),
        );
    }
    let name = members.first().map_or("?", |m| m.name());
    writeln!(out, "array       {id} ({}): {} task(s)", escape(name), members.len())?;
    for member in members {
        let index = index_of(member).map_or("?".into(), |i| i.to_string());
        writeln!(out, "  {id}_{index:<4} {}  {}", member.id(), state_of(member))?;
    }
    writeln!(out, "one task: carma show {id}_INDEX")?;
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
