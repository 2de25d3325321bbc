//! The GPU options of `#SBATCH` lines (`--gres=gpu[:type]:N`, `--gpus`, `--gpus-per-node`,
//! `--gpus-per-task`): the count carma gives, checked against this server's GPUs and their
//! names, and the variable the job's `srun` binds each task's GPUs by.

use super::{Context, Meaning, Why};

/// The GPU options: `--gres=gpu[:type]:N[,...]`, `--gpus [type:]N`, `--gpus-per-node` (one
/// node) and `--gpus-per-task` (times the tasks, on one node).
pub(super) fn gpus(long: &str, value: &str, context: &Context) -> Result<Meaning, Why> {
    let mut others = Vec::new();
    let (kind, count) = if long == "gres" {
        let mut found = None;
        for item in value.split(',').map(str::trim) {
            let item = item.strip_prefix("gres/").unwrap_or(item);
            let mut parts = item.split(':');
            let name = parts.next().unwrap_or_default();
            if name == "none" || name.is_empty() {
                continue;
            }
            if name != "gpu" {
                others.push(item.to_string());
                continue;
            }
            let rest: Vec<&str> = parts.collect();
            found = Some(match rest.as_slice() {
                [] => (None, 1),
                [n] if n.parse::<u32>().is_ok() => (None, gpu_count(n)?),
                [kind] => (Some(kind.to_string()), 1),
                [kind, n] => (Some(kind.to_string()), gpu_count(n)?),
                _ => return Err(Why::Syntax(format!("{item:?} is not gpu[:type]:N"))),
            });
        }
        found.unwrap_or((None, 0))
    } else {
        match value.rsplit_once(':') {
            Some((kind, n)) => (Some(kind.to_string()), gpu_count(n)?),
            None => (None, gpu_count(value)?),
        }
    };
    let total = if long == "gpus-per-task" { count.saturating_mul(context.ntasks) } else { count };
    if let Some(gpus) = &context.server.gpus {
        if let Some(kind) = &kind
            && !gpus.iter().any(|name| type_matches(kind, name))
        {
            let mut names = gpus.clone();
            names.dedup();
            return Err(Why::Server(format!(
                "this server has no {kind} GPU (it has {}); drop the type (--gres=gpu:{total}), or give --gpus N on the command line, which wins",
                names.join(", ")
            )));
        }
        if total as usize > gpus.len() {
            return Err(Why::Server(format!(
                "{total} GPUs: this server has {}; ask for at most --gpus {} (on the command line it wins over this line)",
                gpus.len(),
                gpus.len()
            )));
        }
    }
    let shown = total.to_string();
    let mut notes = Vec::new();
    if long == "gpus-per-task" && context.ntasks > 1 {
        notes.push(format!("{count} per task × {} tasks on one node", context.ntasks));
    }
    if let (Some(kind), None) = (&kind, &context.server.gpus) {
        notes.push(format!("GPU type {kind} not checked: carma has not seen this server's GPUs yet"));
    }
    if !others.is_empty() {
        notes.push(format!("{} not a GPU; ignored", others.join(", ")));
    }
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    let mut words = vec!["--gpus".to_string(), shown];
    // The job's srun binds a GPU set to each task from it, as Slurm's does.
    if long == "gpus-per-task" {
        words.extend(["--env".to_string(), format!("SLURM_GPUS_PER_TASK={count}")]);
    }
    Ok(Meaning { words, note })
}

fn gpu_count(text: &str) -> Result<u32, String> {
    text.trim().parse::<u32>().map_err(|_| format!("{text:?} is not a GPU count"))
}

/// Whether a Slurm GPU type (`a100`, `a100_80gb`, `rtx8000`) names the GPU `name`
/// (`NVIDIA A100-SXM4-80GB`): every part of the type is in the name, letters and digits only.
pub fn type_matches(kind: &str, name: &str) -> bool {
    let squash =
        |s: &str| s.chars().filter(char::is_ascii_alphanumeric).collect::<String>().to_ascii_lowercase();
    let name = squash(name);
    kind.split(['_', '-', '.']).map(squash).filter(|p| !p.is_empty()).all(|part| name.contains(&part))
}
