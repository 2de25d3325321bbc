//! Slurm's variables in a job's environment, beside carma's own, so that a script written
//! for sbatch finds what it reads (`$SLURM_ARRAY_TASK_ID`, `$SLURM_JOB_ID`) with the values
//! they have under Slurm, on this one server.
//!
//! The job id is carma's task id, a 16-character lowercase base32 string: it works where
//! scripts use it in file and directory names, but not in shell arithmetic
//! (`$((SLURM_JOB_ID % 100))`), as no stable number of carma's fits Slurm's 32 bits.

use std::collections::BTreeMap;

use crate::journal::{State, Task};

/// What Slurm would set for `attempt` of `task` on `gpus` (UUIDs), added to `env`; a value
/// the submitter set at submit (`SLURM_NTASKS` from `#SBATCH -n`) is kept where Slurm's
/// would come from the same option.
pub fn insert(env: &mut BTreeMap<String, String>, state: &State, task: &Task, attempt: u32, gpus: &[String]) {
    let mut set = |key: &str, value: String| {
        env.insert(key.to_string(), value);
    };
    set("SLURM_JOB_ID", task.id.to_string());
    set("SLURM_JOBID", task.id.to_string());
    set("SLURM_JOB_NAME", task.spec.name.clone());
    // The batch step is task 0 on node 0, as Slurm's; `srun` inside it starts tasks 0 to N-1
    // (`exec::srun`). Code that reads SLURM_PROCID whenever SLURM_JOB_ID is set (PyTorch
    // Lightning's SLURM environment) finds it.
    set("SLURM_PROCID", "0".into());
    set("SLURM_LOCALID", "0".into());
    set("SLURM_NODEID", "0".into());
    set("SLURM_JOB_NUM_NODES", "1".into());
    set("SLURM_NNODES", "1".into());
    set("SLURM_RESTART_COUNT", attempt.saturating_sub(1).to_string());
    let node = crate::spec::sbatch::node_name();
    set("SLURMD_NODENAME", node.clone());
    set("SLURM_JOB_NODELIST", node);
    let indices: Vec<String> = gpus
        .iter()
        .map(|uuid| state.gpus.get(uuid).map_or_else(|| uuid.clone(), |g| g.index.to_string()))
        .collect();
    set("SLURM_JOB_GPUS", indices.join(","));
    set("SLURM_GPUS_ON_NODE", gpus.len().to_string());
    if let Some(array) = &task.spec.array {
        let members = state.tasks.values().filter_map(|t| t.spec.array.as_ref()).filter(|a| a.id == array.id);
        let (min, max) =
            members.fold((array.index, array.index), |(lo, hi), a| (lo.min(a.index), hi.max(a.index)));
        set("SLURM_ARRAY_JOB_ID", array.id.to_string());
        set("SLURM_ARRAY_TASK_ID", array.index.to_string());
        set("SLURM_ARRAY_TASK_COUNT", array.count.to_string());
        set("SLURM_ARRAY_TASK_MIN", min.to_string());
        set("SLURM_ARRAY_TASK_MAX", max.to_string());
    }
    let ntasks = env.entry("SLURM_NTASKS".into()).or_insert_with(|| "1".into()).clone();
    env.entry("SLURM_NPROCS".into()).or_insert(ntasks.clone());
    env.entry("SLURM_TASKS_PER_NODE".into()).or_insert(ntasks.clone());
    host_limits(env, task, ntasks.parse::<u32>().unwrap_or(1).max(1));
}

/// The task's host limits in Slurm's words: `SLURM_MEM_PER_NODE` in MiB (unless the script's
/// `--mem-per-cpu` set `SLURM_MEM_PER_CPU`: Slurm sets one of the two), `SLURM_CPUS_PER_TASK`
/// (the job's CPUs over its tasks) and `SLURM_CPUS_ON_NODE` (all of them).
fn host_limits(env: &mut BTreeMap<String, String>, task: &Task, ntasks: u32) {
    if let Some(mib) = task.spec.host_mem_mib
        && !env.contains_key("SLURM_MEM_PER_CPU")
    {
        env.insert("SLURM_MEM_PER_NODE".into(), mib.to_string());
    }
    if let Some(cpus) = task.spec.cpus {
        env.insert("SLURM_CPUS_PER_TASK".into(), (cpus / ntasks).max(1).to_string());
        env.insert("SLURM_CPUS_ON_NODE".into(), cpus.to_string());
    } else if let Some(cpus) = env.get("SLURM_CPUS_PER_TASK").cloned() {
        // A task queued before `cpus` existed carried -c as an environment value.
        env.entry("SLURM_CPUS_ON_NODE".into()).or_insert(cpus);
    }
}
