//! The step an srun call starts, decided from its options and the job it runs in, with no
//! process touched: how many tasks, and what each is told (`SLURM_PROCID`, `SLURM_LOCALID`,
//! `SLURM_NODEID`, the step's sizes) and which of the job's GPUs it sees.
//!
//! Slurm's rules on one node: `-n N` tasks, else `--ntasks-per-node`, else the job's
//! `SLURM_NTASKS` (what `#SBATCH --ntasks` gave); every task sees every GPU of the job unless
//! `--gpus-per-task` (srun's, or the job's `SLURM_GPUS_PER_TASK`) or `--gpu-bind` binds them,
//! `--gpu-bind=none` undoing the binding `--gpus-per-task` implies.

use super::options::{Given, Kind, kind};

/// Most tasks one srun starts: a bound, as every count a user hands carma has one.
pub(super) const TASKS_MAX: u32 = 1024;

/// What the job an srun runs in tells it through its environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Job {
    /// `SLURM_NTASKS` (1 without it).
    pub ntasks: u32,
    /// `CUDA_VISIBLE_DEVICES`, split: the job's GPUs, in carma's order.
    pub gpus: Vec<String>,
    /// `SLURM_JOB_GPUS`, split: their indices, in the same order.
    pub gpu_indices: Vec<String>,
    /// `SLURM_GPUS_PER_TASK`, from the script's `#SBATCH --gpus-per-task`.
    pub gpus_per_task: Option<u32>,
    /// `SLURMD_NODENAME`.
    pub node: String,
}

impl Job {
    /// The job as its environment `get` describes it.
    pub(super) fn from_env(get: &dyn Fn(&str) -> Option<String>) -> Job {
        let list = |key: &str| -> Vec<String> {
            get(key)
                .map(|v| v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect())
                .unwrap_or_default()
        };
        Job {
            ntasks: get("SLURM_NTASKS").and_then(|v| v.trim().parse().ok()).filter(|n| *n >= 1).unwrap_or(1),
            gpus: list("CUDA_VISIBLE_DEVICES"),
            gpu_indices: list("SLURM_JOB_GPUS"),
            gpus_per_task: get("SLURM_GPUS_PER_TASK").and_then(|v| v.trim().parse().ok()),
            node: get("SLURMD_NODENAME").unwrap_or_else(|| "localhost".into()),
        }
    }
}

/// How the tasks share the step's GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Bind {
    /// Every task sees every GPU (Slurm's default).
    All,
    /// Task r sees GPUs r·N to r·N+N−1 (`--gpus-per-task=N`, `--gpu-bind=per_task:N`).
    PerTask(u32),
    /// N tasks share each GPU: task r sees GPU r/N (`--gpu-bind=single:N`).
    Single(u32),
    /// Task r sees GPU list[r mod len] (`--gpu-bind=map_gpu:LIST`).
    Map(Vec<usize>),
}

/// The step: its tasks' variables, in rank order, and how they run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Step {
    /// Each task's variables over the inherited environment, rank 0 first.
    pub tasks: Vec<Vec<(String, String)>>,
    /// `--label`: each line of output prefixed with its task's rank.
    pub label: bool,
    /// `--kill-on-bad-exit`: the first task that fails ends the others.
    pub kill_on_bad_exit: bool,
    /// `--export`, as given.
    pub export: Option<String>,
    /// `--chdir`.
    pub chdir: Option<String>,
    /// One line each for what was accepted and means nothing here.
    pub notes: Vec<String>,
}

/// The step `given` asks for inside `job`, or the one-line reason it cannot be had.
pub(super) fn plan(given: &[Given], job: &Job) -> Result<Step, String> {
    let mut ntasks = None;
    let mut per_node = None;
    let mut cpus_per_task = None;
    let mut gpus = None;
    let mut gpus_per_task = job.gpus_per_task;
    let mut bind: Option<Bind> = None;
    let mut step = Step {
        tasks: Vec::new(),
        label: false,
        kill_on_bad_exit: false,
        export: None,
        chdir: None,
        notes: Vec::new(),
    };
    for Given { option, value } in given {
        let value = value.as_deref().unwrap_or_default();
        match kind(option) {
            Kind::Refused(why) => return Err(format!("--{option}: {why}")),
            Kind::Noted(why) => {
                step.notes.push(format!("--{option}: {why}"));
                continue;
            }
            Kind::Honoured => {}
        }
        match *option {
            "ntasks" => ntasks = Some(count(option, value)?),
            "ntasks-per-node" => per_node = Some(count(option, value)?),
            "nodes" => nodes(value)?,
            "cpus-per-task" => cpus_per_task = Some(count(option, value)?),
            "label" => step.label = true,
            "kill-on-bad-exit" => step.kill_on_bad_exit = on_off(option, value)?,
            "export" => {
                crate::spec::export::Export::parse(Some(value)).map_err(|e| format!("--export: {e}"))?;
                step.export = Some(value.to_string());
            }
            "chdir" => step.chdir = Some(value.to_string()),
            "gpus" | "gpus-per-node" | "gres" => gpus = gpu_count(option, value)?.or(gpus),
            "gpus-per-task" => gpus_per_task = Some(count(option, value)?),
            "gpu-bind" => bind = Some(gpu_bind(value, &mut step.notes)?),
            "mpi" if value != "none" => step.notes.push(format!(
                "--mpi={value}: no PMI server here; the tasks see SLURM_PROCID and SLURM_NTASKS (an MPI program is started with mpirun)"
            )),
            _ => {}
        }
    }
    let n = ntasks.or(per_node).unwrap_or(job.ntasks);
    if n > TASKS_MAX {
        return Err(format!("{n} tasks: at most {TASKS_MAX} on one node"));
    }
    let step_gpus = match gpus {
        Some(asked) if asked as usize > job.gpus.len() => {
            return Err(format!(
                "{asked} GPUs: the job has {} (CUDA_VISIBLE_DEVICES); ask for at most {} or raise the job's --gpus",
                job.gpus.len(),
                job.gpus.len()
            ));
        }
        Some(asked) => asked as usize,
        None => job.gpus.len(),
    };
    let bind = bind.unwrap_or(match gpus_per_task {
        Some(k) => Bind::PerTask(k),
        None => Bind::All,
    });
    for rank in 0..n {
        let seen = gpus_of(&bind, rank, n, step_gpus)?;
        step.tasks.push(task_vars(job, rank, n, &seen, cpus_per_task, per_node));
    }
    Ok(step)
}

/// The variables of task `rank` of `n`, which sees the job's GPUs at positions `seen`.
fn task_vars(
    job: &Job,
    rank: u32,
    n: u32,
    seen: &[usize],
    cpus_per_task: Option<u32>,
    per_node: Option<u32>,
) -> Vec<(String, String)> {
    let mut vars = Vec::with_capacity(16);
    let mut set = |key: &str, value: String| vars.push((key.to_string(), value));
    set("SLURM_PROCID", rank.to_string());
    set("SLURM_LOCALID", rank.to_string());
    set("SLURM_NODEID", "0".into());
    for key in [
        "SLURM_NTASKS",
        "SLURM_NPROCS",
        "SLURM_STEP_NUM_TASKS",
        "SLURM_STEP_TASKS_PER_NODE",
        "SLURM_TASKS_PER_NODE",
    ] {
        set(key, n.to_string());
    }
    set("SLURM_STEP_NUM_NODES", "1".into());
    set("SLURM_STEP_NODELIST", job.node.clone());
    if let Some(per_node) = per_node {
        set("SLURM_NTASKS_PER_NODE", per_node.to_string());
    }
    if let Some(cpus) = cpus_per_task {
        set("SLURM_CPUS_PER_TASK", cpus.to_string());
    }
    let pick =
        |list: &[String]| seen.iter().filter_map(|i| list.get(*i).cloned()).collect::<Vec<_>>().join(",");
    set("CUDA_VISIBLE_DEVICES", pick(&job.gpus));
    if job.gpu_indices.len() == job.gpus.len() {
        set("SLURM_STEP_GPUS", pick(&job.gpu_indices));
    }
    vars
}

/// The positions, among the step's `gpus` first GPUs of the job, that task `rank` of `n` sees.
fn gpus_of(bind: &Bind, rank: u32, n: u32, gpus: usize) -> Result<Vec<usize>, String> {
    let rank = rank as usize;
    let picked = match bind {
        Bind::All => return Ok((0..gpus).collect()),
        Bind::PerTask(k) => {
            let k = *k as usize;
            if (n as usize).saturating_mul(k) > gpus {
                return Err(format!(
                    "{n} tasks × {k} GPU(s) per task need {} GPUs; the job has {gpus}: start fewer tasks (-n) or give the job more GPUs",
                    n as usize * k
                ));
            }
            (rank * k..rank * k + k).collect()
        }
        Bind::Single(k) => vec![rank / (*k as usize)],
        Bind::Map(list) => vec![list[rank % list.len()]],
    };
    match picked.iter().find(|i| **i >= gpus) {
        Some(i) => Err(format!(
            "--gpu-bind: task {rank} would see GPU {i}; the job has {gpus} (0 to {})",
            gpus.saturating_sub(1)
        )),
        None => Ok(picked),
    }
}

/// `--gpu-bind=[verbose,]none|closest|per_task:N|single:N|map_gpu:LIST`.
fn gpu_bind(value: &str, notes: &mut Vec<String>) -> Result<Bind, String> {
    let value = value.strip_prefix("verbose,").unwrap_or(value);
    let hint = "use none, closest, per_task:N, single:N or map_gpu:LIST";
    let (kind, argument) = value.split_once(':').unwrap_or((value, ""));
    let number = |text: &str| -> Result<u32, String> {
        text.parse::<u32>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("--gpu-bind={value}: {text:?} is not a count of at least 1; {hint}"))
    };
    Ok(match kind {
        "none" => Bind::All,
        "closest" => {
            notes.push(
                "--gpu-bind=closest: one node, no topology to follow; every task sees the job's GPUs".into(),
            );
            Bind::All
        }
        "per_task" => Bind::PerTask(number(argument)?),
        "single" => Bind::Single(number(argument)?),
        "map_gpu" => {
            let mut list = Vec::new();
            for item in argument.split(',') {
                let (index, times) = item.split_once('*').unwrap_or((item, "1"));
                let index: usize = index
                    .parse()
                    .map_err(|_| format!("--gpu-bind={value}: {index:?} is not a GPU index; {hint}"))?;
                for _ in 0..number(times)?.min(TASKS_MAX) {
                    list.push(index);
                }
            }
            Bind::Map(list)
        }
        _ => return Err(format!("--gpu-bind={value} is not read here; {hint}")),
    })
}

/// A count of at least 1 (and at most [`TASKS_MAX`]).
fn count(option: &str, value: &str) -> Result<u32, String> {
    value
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=TASKS_MAX).contains(n))
        .ok_or_else(|| format!("--{option}={value}: give a whole number from 1 to {TASKS_MAX}"))
}

/// `--nodes`: one node is what there is.
fn nodes(value: &str) -> Result<(), String> {
    let min = value.split(['-', ',', ':']).next().unwrap_or_default();
    match min.trim().parse::<u32>() {
        Ok(1) => Ok(()),
        Ok(n) if n > 1 => {
            Err(format!("--nodes={value}: this server is one node; start the tasks on it with -n N"))
        }
        _ => Err(format!("--nodes={value} is not a node count")),
    }
}

/// `--kill-on-bad-exit[=0|1]`.
fn on_off(option: &str, value: &str) -> Result<bool, String> {
    match value {
        "" | "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(format!("--{option}={value}: give 0 or 1")),
    }
}

/// The GPUs `--gpus [type:]N`, `--gpus-per-node [type:]N` or `--gres=gpu[:type]:N` asks for
/// (one node, so per node is the whole); `None` for a `--gres` naming no GPU.
fn gpu_count(option: &str, value: &str) -> Result<Option<u32>, String> {
    let bad = || format!("--{option}={value}: give a GPU count, e.g. --{option}=2");
    let text = if option == "gres" {
        let Some(gpu) = value
            .split(',')
            .map(|s| s.trim().trim_start_matches("gres/"))
            .find(|s| s.split(':').next() == Some("gpu"))
        else {
            return Ok(None);
        };
        match gpu.rsplit_once(':') {
            Some((_, n)) if n.parse::<u32>().is_ok() => n.to_string(),
            _ => "1".to_string(),
        }
    } else {
        value.rsplit_once(':').map_or(value, |(_, n)| n).to_string()
    };
    text.trim().parse::<u32>().map(Some).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(ntasks: u32, gpus: usize) -> Job {
        Job {
            ntasks,
            gpus: (0..gpus).map(|i| format!("GPU-{i}")).collect(),
            gpu_indices: (0..gpus).map(|i| i.to_string()).collect(),
            gpus_per_task: None,
            node: "n1".into(),
        }
    }

    fn given(pairs: &[(&'static str, &str)]) -> Vec<Given> {
        pairs
            .iter()
            .map(|(o, v)| Given { option: o, value: (!v.is_empty()).then(|| v.to_string()) })
            .collect()
    }

    fn var<'a>(vars: &'a [(String, String)], key: &str) -> &'a str {
        vars.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {key}"))
    }

    /// Goal: with no options a step is the job's tasks, each with its rank and every GPU of the
    /// job, as Slurm starts `srun CMD` in a batch job of `--ntasks-per-node=4 --gres=gpu:4`.
    #[test]
    fn a_bare_srun_starts_the_jobs_tasks_each_seeing_every_gpu() {
        let step = plan(&[], &job(4, 4)).unwrap();
        assert_eq!(step.tasks.len(), 4);
        for (rank, vars) in step.tasks.iter().enumerate() {
            assert_eq!(var(vars, "SLURM_PROCID"), rank.to_string());
            assert_eq!(var(vars, "SLURM_LOCALID"), rank.to_string());
            assert_eq!(var(vars, "SLURM_NODEID"), "0");
            assert_eq!(var(vars, "SLURM_NTASKS"), "4");
            assert_eq!(var(vars, "CUDA_VISIBLE_DEVICES"), "GPU-0,GPU-1,GPU-2,GPU-3");
        }
        assert_eq!(plan(&[], &job(1, 1)).unwrap().tasks.len(), 1, "one copy without --ntasks");
        assert_eq!(plan(&given(&[("ntasks", "2")]), &job(4, 4)).unwrap().tasks.len(), 2);
    }

    /// Goal: `--gpus-per-task` (srun's or the job's) gives each task its own GPUs, and
    /// `--gpu-bind` binds or unbinds them as Slurm's does.
    #[test]
    fn gpus_are_bound_per_task_as_slurm_binds_them() {
        let seen = |given: &[Given], job: &Job| -> Vec<String> {
            plan(given, job)
                .unwrap()
                .tasks
                .iter()
                .map(|v| var(v, "CUDA_VISIBLE_DEVICES").to_string())
                .collect()
        };
        assert_eq!(seen(&given(&[("gpus-per-task", "2")]), &job(2, 4)), ["GPU-0,GPU-1", "GPU-2,GPU-3"]);
        let inherited = Job { gpus_per_task: Some(1), ..job(4, 4) };
        assert_eq!(seen(&[], &inherited), ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]);
        assert_eq!(seen(&given(&[("gpu-bind", "none")]), &inherited)[3], "GPU-0,GPU-1,GPU-2,GPU-3");
        assert_eq!(
            seen(&given(&[("gpu-bind", "single:2")]), &job(4, 2)),
            ["GPU-0", "GPU-0", "GPU-1", "GPU-1"]
        );
        assert_eq!(seen(&given(&[("gpu-bind", "map_gpu:1,0")]), &job(2, 2)), ["GPU-1", "GPU-0"]);
        let step = plan(&given(&[("gpus-per-task", "1")]), &job(4, 4)).unwrap();
        assert_eq!(var(&step.tasks[2], "SLURM_STEP_GPUS"), "2");
        assert_eq!(
            plan(&given(&[("gpus-per-task", "2")]), &job(4, 4)).unwrap_err(),
            "4 tasks × 2 GPU(s) per task need 8 GPUs; the job has 4: start fewer tasks (-n) or give the job more GPUs"
        );
        assert_eq!(
            plan(&given(&[("gres", "gpu:8")]), &job(1, 4)).unwrap_err(),
            "8 GPUs: the job has 4 (CUDA_VISIBLE_DEVICES); ask for at most 4 or raise the job's --gpus"
        );
        assert_eq!(seen(&given(&[("gres", "gpu:a100:2")]), &job(1, 4)), ["GPU-0,GPU-1"]);
    }

    /// Goal: cluster-only options are notes, impossible ones refusals, each one line naming
    /// the option.
    #[test]
    fn cluster_options_are_noted_and_impossible_ones_refused() {
        let step = plan(&given(&[("partition", "gpu"), ("mpi", "pmix"), ("label", "")]), &job(1, 1)).unwrap();
        assert!(step.label);
        assert_eq!(step.notes[0], "--partition: only matters on a cluster; ignored");
        assert!(step.notes[1].starts_with("--mpi=pmix: no PMI server here"), "{:?}", step.notes);
        assert_eq!(
            plan(&given(&[("nodes", "2")]), &job(1, 1)).unwrap_err(),
            "--nodes=2: this server is one node; start the tasks on it with -n N"
        );
        assert!(plan(&given(&[("pty", "")]), &job(1, 1)).unwrap_err().starts_with("--pty: no terminal"));
        assert_eq!(
            plan(&given(&[("ntasks", "0")]), &job(1, 1)).unwrap_err(),
            "--ntasks=0: give a whole number from 1 to 1024"
        );
        assert!(plan(&given(&[("kill-on-bad-exit", "")]), &job(1, 1)).unwrap().kill_on_bad_exit);
    }
}
