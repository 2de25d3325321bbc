//! Launch: turn planned attempts into running supervisors, after their Placed records are
//! committed.
//!
//! The order Placed (committed) → launch → Launched (committed) is what makes a crash safe:
//! a tick that dies after the first commit leaves a Placed attempt that the next tick finds
//! claimed (adopt) or unclaimed (launch again); the supervisor's exclusive claim makes sure
//! the job runs at most once either way.

use std::collections::BTreeMap;

use crate::config::{Config, MpsCap, Sharing};
use crate::exec::AttemptPlan;
use crate::journal::{Event, Record, State, Task};

use super::place::PlannedAttempt;
use super::runner::{AttemptLaunch, AttemptRunner, RunnerError};

/// What only the task's private copy holds: the environment values and a job script's text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Private {
    /// The environment values the submitter exported (names are in the journal, values only here).
    pub env: BTreeMap<String, String>,
    /// A job script's text as copied at submit, if the task runs one.
    pub script_text: Option<String>,
}

/// The private parts of a task: `Ok(them)` or why they cannot be had.
pub type Secrets<'a> = dyn Fn(&Task) -> Result<Private, String> + 'a;

/// Launches each planned attempt and returns Launched records, or Failed records for attempts
/// that cannot run as submitted (their private environment is gone, an output path template
/// does not expand).
pub fn launch_all(
    state: &State,
    planned: &[PlannedAttempt],
    runner: &mut dyn AttemptRunner,
    config: &Config,
    secrets: &Secrets<'_>,
    clock: &dyn Fn() -> u64,
) -> Vec<Record> {
    let mut records = Vec::new();
    for attempt in planned {
        let Some(task) = state.tasks.get(&attempt.task) else { continue };
        let plan = match secrets(task).and_then(|private| plan_for(state, task, attempt, config, private)) {
            Ok(plan) => plan,
            Err(reason) => {
                let outcome = "not started".to_string();
                let event =
                    Event::Failed { task: task.id.clone(), attempt: attempt.attempt, outcome, reason };
                records.push(Record { time_ms: clock(), event });
                continue;
            }
        };
        if let Some(limits) = mps_limits(state, task, &plan, config) {
            // Best effort: without the daemon the job still gets the environment's limit, and
            // memory enforcement stops it on the next sample if it takes more.
            if let Err(error) =
                runner.set_mps_limits(&config.enforce.mps_control, task.submitter_uid, &limits)
            {
                eprintln!(
                    "carma tick: task {}: the MPS memory limit was not set through the control daemon ({error}); \
                     the job has only CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, which it can unset",
                    task.id
                );
            }
        }
        match runner.launch(&AttemptLaunch { plan }) {
            Ok(supervisor) => records.push(Record {
                time_ms: clock(),
                event: Event::Launched {
                    task: task.id.clone(),
                    attempt: attempt.attempt,
                    supervisor,
                    adopted: false,
                },
            }),
            // A supervisor claimed it first: the next tick's observe finds it and adopts it.
            Err(RunnerError::Claimed(_)) => {}
            // The attempt stays Placed: the next tick relaunches it while it is unclaimed,
            // and records it Lost once it has stayed so past the launch deadline.
            Err(RunnerError::Transient(_) | RunnerError::Refused(_) | RunnerError::Missing(_)) => {}
        }
    }
    records
}

/// The plan file for one attempt: the job exactly as submitted (its program as resolved at
/// submit, its private environment, its job script as copied at submit), plus where it runs.
pub fn plan_for(
    state: &State,
    task: &Task,
    attempt: &PlannedAttempt,
    config: &Config,
    private: Private,
) -> Result<AttemptPlan, String> {
    let spec = &task.spec;
    let mut env = private.env;
    if let Some(array) = &spec.array {
        env.insert("CARMA_ARRAY_ID".into(), array.id.to_string());
        env.insert("CARMA_ARRAY_INDEX".into(), array.index.to_string());
        env.insert("CARMA_ARRAY_COUNT".into(), array.count.to_string());
    }
    super::slurm_env::insert(&mut env, state, task, attempt.attempt, &attempt.gpus);
    let script = match (&spec.script, private.script_text) {
        (None, _) => None,
        (Some(_), Some(text)) => {
            let shebang = crate::spec::script::parse_shebang("the job script", &text)?;
            Some(crate::exec::plan::PlanScript { interpreter: shebang.argv(), text })
        }
        (Some(path), None) => {
            return Err(format!("the copy of job script {path} taken at submit is gone; resubmit the task"));
        }
    };
    let stdout_path = output_path(task, attempt.attempt, Stream::Stdout).transpose()?;
    let stderr_path = output_path(task, attempt.attempt, Stream::Stderr).transpose()?;
    let mps_mem_limit_mib = match config.tick.sharing {
        Sharing::Mps => {
            // Jobs must find the daemon that carma-mps.service runs.
            env.insert("CUDA_MPS_PIPE_DIRECTORY".into(), crate::systemd::MPS_PIPE_DIR.into());
            env.insert("CUDA_MPS_LOG_DIRECTORY".into(), crate::systemd::MPS_LOG_DIR.into());
            mps_cap_mib(state, task, attempt, config)
        }
        Sharing::Streams => None,
    };
    // The program was resolved with the submitter's PATH at submit: exec exactly that, never
    // a lookup on the supervisor's PATH (as root, that would be root's).
    let mut argv = spec.command.clone();
    if let (Some(program), Some(first)) = (&spec.program, argv.first_mut()) {
        *first = program.clone();
    }
    Ok(AttemptPlan {
        task_id: task.id.to_string(),
        attempt: attempt.attempt,
        argv,
        env,
        workdir: spec.workdir.clone().into(),
        uid: task.submitter_uid,
        gid: None,
        gpu_uuids: attempt.gpus.clone(),
        mps_mem_limit_mib,
        time_limit_ms: spec.time_limit_ms,
        stdout_path,
        stderr_path,
        script,
        log_bytes_max: config.limits.log_bytes_max,
        signal: spec.signal.clone(),
        interactive: spec.interactive.clone(),
        host_limits: crate::exec::hostlimit::HostLimits { mem_mib: spec.host_mem_mib, cpus: spec.cpus },
        gpu_watch: gpu_watch(config, &attempt.gpus),
    })
}

/// What the supervisor reads of the attempt's GPU memory itself: the tick's own GPU source (a
/// fake file by its absolute path, as the supervisor's working directory is not the tick's),
/// every `[enforce] supervisor-sample-ms`; `None` without GPUs, without a source that reads
/// memory (`none`), or with the readings off. `carma simulate`'s GPUs (`simulated`) are read by
/// its runner at the same cadence (`sim::readings`), as a supervisor there would read them.
fn gpu_watch(config: &Config, gpus: &[String]) -> Option<crate::exec::WatchPlan> {
    let interval_ms = config.enforce.supervisor_sample_ms;
    if gpus.is_empty() || interval_ms == 0 {
        return None;
    }
    let source = match config.tick.gpus.as_str() {
        "nvml" | "simulated" => config.tick.gpus.clone(),
        spec => {
            let path = spec.strip_prefix("fake:").filter(|path| !path.is_empty())?;
            let path = std::path::absolute(path).ok()?;
            format!("fake:{}", path.display())
        }
    };
    Some(crate::exec::WatchPlan { source, interval_ms })
}

/// A job's output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The job's standard output.
    Stdout,
    /// The job's standard error.
    Stderr,
}

/// Where an attempt's stream goes when the spec names a path template (`--output`/`--error`);
/// `None` for the default, `runs/ID/N/stdout.log` or `stderr.log`. `carma logs` uses it too.
pub fn output_path(task: &Task, attempt: u32, stream: Stream) -> Option<Result<std::path::PathBuf, String>> {
    let template = match stream {
        Stream::Stdout => task.spec.output.as_deref(),
        Stream::Stderr => task.spec.error.as_deref(),
    }?;
    let user = crate::access::users::display(task.submitter_uid);
    Some(crate::exec::expand_output_template(
        template,
        task.id.as_str(),
        attempt,
        &task.spec.name,
        &user,
        std::path::Path::new(&task.spec.workdir),
    ))
}

/// The limits the MPS control daemon gets before `plan` starts (see [`crate::exec::mps`]): on
/// each of its GPUs, the highest cap among its user's jobs there; `None` unless `sharing =
/// "mps"`, `[enforce] mps-control` names a program and the plan has a cap.
fn mps_limits(
    state: &State,
    task: &Task,
    plan: &AttemptPlan,
    config: &Config,
) -> Option<Vec<crate::exec::mps::DeviceLimit>> {
    let cap_mib = plan.mps_mem_limit_mib.filter(|_| config.tick.sharing == Sharing::Mps)?;
    if config.enforce.mps_control.is_empty() {
        return None;
    }
    let margin_mib = config.sched.margin_with_figure_mib;
    let limits = plan
        .gpu_uuids
        .iter()
        .filter_map(|uuid| {
            let device = state.gpus.get(uuid)?.index;
            let others = state
                .tasks
                .values()
                .filter(|other| other.id != task.id && other.submitter_uid == task.submitter_uid)
                .filter_map(|other| other.active_attempt())
                .filter(|other| other.gpus.contains(uuid))
                .filter_map(|other| Some(other.requirement_mib?.saturating_add(margin_mib)));
            let mib = others.fold(cap_mib, u64::max);
            Some(crate::exec::mps::DeviceLimit { device, mib })
        })
        .collect();
    Some(limits)
}

/// The MPS pinned-memory limit (see [`MpsCap`]); `None` for a task without a figure.
fn mps_cap_mib(
    state: &State,
    task: &crate::journal::Task,
    attempt: &PlannedAttempt,
    config: &Config,
) -> Option<u64> {
    let margin_mib = config.sched.margin_with_figure_mib;
    let floor_mib = attempt.requirement_mib?.saturating_add(margin_mib);
    if config.tick.mps_cap == MpsCap::Requirement {
        return Some(floor_mib);
    }
    let room = attempt.gpus.iter().map(|uuid| {
        let free_mib = state.gpus.get(uuid)?.last.as_ref()?.memory_free_mib;
        let reserved_mib: u64 = state
            .tasks
            .values()
            .filter(|other| other.id != task.id)
            .filter_map(|other| other.active_attempt())
            .filter(|other| other.gpus.contains(uuid))
            .map(|other| unallocated_mib(other, config))
            .sum();
        Some(free_mib.saturating_sub(reserved_mib))
    });
    // A GPU never sampled gives no room to compute: the requirement cap stands.
    let room_mib = room.collect::<Option<Vec<u64>>>().and_then(|r| r.into_iter().min()).unwrap_or(0);
    Some(room_mib.max(floor_mib))
}

/// What a co-runner reserved (requirement + margin, or the no-figure margin) and has not
/// allocated yet (its observed peak so far).
fn unallocated_mib(attempt: &crate::journal::state::Attempt, config: &Config) -> u64 {
    let reserved_mib = match attempt.requirement_mib {
        Some(mib) => mib.saturating_add(config.sched.margin_with_figure_mib),
        None => config.sched.margin_without_figure_mib,
    };
    reserved_mib.saturating_sub(attempt.peak_observed_mib.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn mps_sharing_caps_memory_at_requirement_plus_margin_and_points_at_the_daemon() {
        let mut state = State::default();
        let id = crate::id::TaskId::from_parts(1, 1);
        let spec = crate::spec::parse_toml("t", "name = \"t\"\ncommand = [\"true\"]\nmemory = \"10GiB\"\n")
            .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
            .unwrap();
        let event = Event::Submitted { task: id.clone(), submitter_uid: 1000, spec };
        state.apply(1, &Record { time_ms: 1, event });
        let task = &state.tasks[&id];
        let attempt = PlannedAttempt {
            task: id.clone(),
            attempt: 1,
            gpus: vec!["GPU-a".into()],
            requirement_mib: Some(10240),
        };
        let mut config = Config::default();
        let streams = plan_for(&state, task, &attempt, &config, Private::default()).unwrap();
        assert_eq!(streams.mps_mem_limit_mib, None);
        assert!(!streams.env.contains_key("CUDA_MPS_PIPE_DIRECTORY"));
        config.tick.sharing = Sharing::Mps;
        let mps = plan_for(&state, task, &attempt, &config, Private::default()).unwrap();
        assert_eq!(mps.mps_mem_limit_mib, Some(10240 + 2048));
        assert_eq!(mps.env["CUDA_MPS_PIPE_DIRECTORY"], crate::systemd::MPS_PIPE_DIR);
        assert_eq!(mps.uid, 1000, "the job runs as its submitter");
        assert_eq!(mps.gpu_uuids, ["GPU-a"]);
    }
}
