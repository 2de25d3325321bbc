//! `carma submit --dry-run`: the tasks as carma will run them (GPUs, GPU memory, time limit,
//! array, name, output files) and which directive or flag set each, nothing submitted.

use std::io::Write;

use super::script::Sources;
use crate::cli::SubmitArgs;
use crate::spec::{SpecFile, Submission};

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
    }
    sources.layer("command line", args);
    sources
}

/// Prints each task (index, name, argv, output files) and the settings with their sources.
pub(super) fn print(tasks: &[Submission], sources: &Sources, out: &mut impl Write) -> anyhow::Result<()> {
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
    let limit = spec.time_limit_ms.map_or_else(|| "none".into(), crate::spec::sbatch::render_duration);
    writeln!(out, "time limit: {limit} ({})", from(&sources.time_limit))?;
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
    Ok(())
}

/// The file a stream goes to, `%j` standing for the id the task gets when submitted.
fn path(task: &Submission, template: Option<&str>, stream: &str, user: &str) -> String {
    let Some(template) = template else { return format!("runs/ID/1/{stream}.log") };
    let workdir = std::path::Path::new(&task.spec.workdir);
    crate::exec::expand_output_template(template, "%j", 1, &task.spec.name, user, workdir)
        .map_or_else(|e| format!("({e})"), |p| p.display().to_string())
}
