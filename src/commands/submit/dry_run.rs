//! `carma submit --dry-run`: the tasks as carma will run them (GPUs, GPU memory, host memory
//! and CPUs with whether this queue enforces them, the time limit the tick will give and
//! where it comes from, array, name, output files, requeue) and which directive or flag set each, nothing submitted; `--json` gives the same
//! as `carma.dry-run/1` (schema/dry-run.schema.json).

use std::io::Write;

use serde_json::{Value, json};

use super::script::Sources;
use crate::cli::SubmitArgs;
use crate::config::QueueLimits;
use crate::exec::hostlimit;
use crate::spec::{SpecFile, Submission};

/// Schema tag of `carma submit --dry-run --json`.
pub(super) const DRY_RUN_SCHEMA: &str = "carma.dry-run/1";

/// Why this queue would not enforce a host memory and a CPU limit (`None`: it would).
#[derive(Debug, Clone, Default)]
pub(super) struct HostEnforcement {
    pub memory: Option<String>,
    pub cpu: Option<String>,
}

impl HostEnforcement {
    /// As this machine's cgroup hierarchy and the queue's owner say
    /// ([`hostlimit::unenforced_here`]).
    pub(super) fn here(home: &crate::home::Home) -> HostEnforcement {
        let root = hostlimit::queue_tick_is_root(home.root());
        HostEnforcement {
            memory: hostlimit::unenforced_here(root, "memory"),
            cpu: hostlimit::unenforced_here(root, "cpu"),
        }
    }
}

/// The sources of a submission without a script: a spec file's values, then the command
/// line's flags over them.
pub(super) fn flag_sources(args: &SubmitArgs, file: &SpecFile, origin: &str) -> Sources {
    let mut sources = Sources::default();
    if origin != "command line" {
        let mark = |slot: &mut Option<String>, set: bool| {
            if set {
                *slot = Some(origin.to_string());
            }
        };
        mark(&mut sources.gpus, file.gpus.is_some());
        mark(&mut sources.gpu_mem, file.memory.is_some());
        mark(&mut sources.time_limit, file.time_limit.is_some());
        mark(&mut sources.name, file.name.is_some());
        mark(&mut sources.output, file.output.is_some());
        mark(&mut sources.error, file.error.is_some());
        mark(&mut sources.host_mem, file.host_mem.is_some());
        mark(&mut sources.cpus, file.cpus.is_some());
        mark(&mut sources.requeue, file.requeue.is_some());
        mark(&mut sources.signal, file.signal.is_some());
        mark(&mut sources.after, !file.after.is_empty());
    }
    sources.layer("command line", args);
    sources
}

/// Prints each task (index, name, argv, output files) and the settings with their sources.
pub(super) fn print(
    tasks: &[Submission],
    sources: &Sources,
    host: &HostEnforcement,
    queue: &QueueLimits,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    writeln!(out, "would submit {} task(s):", tasks.len())?;
    let user = crate::access::users::display(crate::access::uid::effective());
    for task in tasks {
        let index = task.spec.array.as_ref().map_or(String::new(), |a| format!("[{}] ", a.index));
        let argv: Vec<String> =
            task.spec.command.iter().map(|a| crate::text::escape(a).into_owned()).collect();
        writeln!(out, "  {index}{}: {}", task.spec.name, argv.join(" "))?;
        writeln!(
            out,
            "      output: {}  error: {}",
            path(task, task.spec.output.as_deref(), "stdout", &user),
            path(task, task.spec.error.as_deref(), "stderr", &user)
        )?;
    }
    let Some(first) = tasks.first() else { return Ok(()) };
    let spec = &first.spec;
    let from = |source: &Option<String>| source.clone().unwrap_or_else(|| "default".into());
    writeln!(out, "GPUs: {} ({})", spec.gpus, from(&sources.gpus))?;
    let memory = spec
        .memory_mib
        .map_or_else(|| "not declared: estimated or learned".into(), |mib| format!("{mib} MiB per GPU"));
    writeln!(out, "GPU memory: {memory} ({})", from(&sources.gpu_mem))?;
    let host_mem = spec.host_mem_mib.map(|mib| format!("{mib} MiB"));
    writeln!(out, "host memory: {}", limit_line(host_mem, &sources.host_mem, &host.memory, "memory"))?;
    let cpus = spec.cpus.map(|n| n.to_string());
    writeln!(out, "CPUs: {}", limit_line(cpus, &sources.cpus, &host.cpu, "cpu"))?;
    let (limit_ms, limit_from) = time_limit(spec, sources, queue);
    let limit = limit_ms.map_or_else(|| "none".into(), crate::spec::sbatch::render_duration);
    writeln!(out, "time limit: {limit} ({limit_from})")?;
    let signal = spec.signal.as_deref().unwrap_or("none");
    writeln!(out, "signal: {signal} ({})", from(&sources.signal))?;
    writeln!(out, "dependency: {} ({})", dependencies(spec), from(&sources.after))?;
    let array = match &spec.array {
        Some(array) => {
            let cap = array.running_max.map_or(String::new(), |n| format!(", at most {n} at once"));
            format!("{} tasks{cap}, array id {}", array.count, array.id)
        }
        None => "none".into(),
    };
    writeln!(out, "array: {array} ({})", from(&sources.array))?;
    writeln!(out, "name: {} ({})", spec.name, from(&sources.name))?;
    writeln!(
        out,
        "output: {} ({})",
        spec.output.as_deref().unwrap_or("carma logs ID"),
        from(&sources.output)
    )?;
    writeln!(
        out,
        "error: {} ({})",
        spec.error.as_deref().unwrap_or("carma logs --err ID"),
        from(&sources.error)
    )?;
    let requeue = match (spec.interactive.is_some(), spec.requeue) {
        (true, _) => "no: an interactive session is never preempted",
        (false, Some(true)) => "yes: may be preempted and requeued",
        (false, Some(false)) => "no: never requeued (not preempted, a lost attempt not retried)",
        (false, None) => "the queue's default",
    };
    writeln!(out, "requeue: {requeue} ({})", from(&sources.requeue))?;
    Ok(())
}

/// The limit the tick will give (`spec::time_limit::effective`, as `tick::admit` applies it)
/// and what set it: the flag or directive the task asked with, else the queue's key.
fn time_limit(spec: &crate::spec::TaskSpec, sources: &Sources, queue: &QueueLimits) -> (Option<u64>, String) {
    use crate::spec::time_limit::{TimeLimitSource, effective};
    let (ms, source) = effective(spec.time_limit_ms, queue.time_limit_default_ms, queue.time_limit_max_ms);
    let from = match source {
        TimeLimitSource::Task => sources.time_limit.clone().unwrap_or_else(|| "default".into()),
        other => other.words().to_string(),
    };
    (ms, from)
}

/// `VALUE (SOURCE)` and whether it holds here (by which cgroup version, for `controller`);
/// `no limit (SOURCE)` without one.
fn limit_line(
    value: Option<String>,
    source: &Option<String>,
    why_not: &Option<String>,
    controller: &str,
) -> String {
    let from = source.clone().unwrap_or_else(|| "default".into());
    match (value, why_not) {
        (None, _) => format!("no limit ({from})"),
        (Some(value), Some(why)) => format!("{value} ({from}); not enforced here ({why})"),
        (Some(value), None) => format!("{value} ({from}); {}", hostlimit::enforced_words(controller)),
    }
}

/// The dry run as one JSON document (`carma.dry-run/1`).
pub(super) fn print_json(
    tasks: &[Submission],
    sources: &Sources,
    host: &HostEnforcement,
    queue: &QueueLimits,
    notes: &[String],
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let user = crate::access::users::display(crate::access::uid::effective());
    let rows: Vec<Value> = tasks
        .iter()
        .map(|task| {
            json!({
                "index": task.spec.array.as_ref().map(|a| a.index),
                "name": task.spec.name,
                "argv": task.spec.command,
                "output": path(task, task.spec.output.as_deref(), "stdout", &user),
                "error": path(task, task.spec.error.as_deref(), "stderr", &user),
            })
        })
        .collect();
    let Some(first) = tasks.first() else { return Ok(()) };
    let spec = &first.spec;
    let (limit_ms, limit_from) = time_limit(spec, sources, queue);
    let set = |value: Value, source: &Option<String>| json!({ "value": value, "source": source.clone().unwrap_or_else(|| "default".into()) });
    let limit = |value: Value, source: &Option<String>, why_not: &Option<String>| {
        let limited = !value.is_null();
        let mut entry = set(value, source);
        let why = if limited { why_not.clone() } else { None };
        entry["enforced"] = json!(limited && why.is_none());
        entry["not_enforced"] = json!(why);
        entry
    };
    let array = spec
        .array
        .as_ref()
        .map(|a| json!({ "count": a.count, "running_max": a.running_max, "id": a.id.to_string() }));
    let document = json!({
        "schema": DRY_RUN_SCHEMA,
        "tasks": rows,
        "gpus": set(json!(spec.gpus), &sources.gpus),
        "gpu_memory_mib": set(json!(spec.memory_mib), &sources.gpu_mem),
        "host_memory_mib": limit(json!(spec.host_mem_mib), &sources.host_mem, &host.memory),
        "cpus": limit(json!(spec.cpus), &sources.cpus, &host.cpu),
        "time_limit_ms": set(json!(limit_ms), &Some(limit_from)),
        "array": set(json!(array), &sources.array),
        "name": set(json!(spec.name), &sources.name),
        "output": set(json!(spec.output), &sources.output),
        "error": set(json!(spec.error), &sources.error),
        "requeue": set(json!(spec.requeue), &sources.requeue),
        "signal": set(json!(spec.signal), &sources.signal),
        "dependency": set(json!((!spec.dependencies.is_empty()).then(|| dependencies(spec))), &sources.after),
        "notes": notes,
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&document)?)?;
    Ok(())
}

/// The task's dependencies in Slurm's words (`afterok:ID,afterany:ID`), `none` without one.
fn dependencies(spec: &crate::spec::TaskSpec) -> String {
    let words: Vec<String> =
        spec.dependencies.iter().map(|d| format!("{}:{}", d.kind.name(), d.task)).collect();
    if words.is_empty() { "none".into() } else { words.join(",") }
}

/// The file a stream goes to, `%j` standing for the id the task gets when submitted.
fn path(task: &Submission, template: Option<&str>, stream: &str, user: &str) -> String {
    let Some(template) = template else { return format!("runs/ID/1/{stream}.log") };
    let workdir = std::path::Path::new(&task.spec.workdir);
    crate::exec::expand_output_template(template, "%j", 1, &task.spec.name, user, workdir)
        .map_or_else(|e| format!("({e})"), |p| p.display().to_string())
}
