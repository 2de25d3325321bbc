//! Launch: turn planned attempts into running supervisors, after their Placed records are
//! committed.
//!
//! The order Placed (committed) → launch → Launched (committed) is what makes a crash safe:
//! a tick that dies after the first commit leaves a Placed attempt that the next tick finds
//! claimed (adopt) or unclaimed (launch again); the supervisor's exclusive claim makes sure
//! the job runs at most once either way.

use std::collections::BTreeMap;

use crate::config::{Config, Sharing};
use crate::exec::AttemptPlan;
use crate::journal::{Event, Record, State};

use super::place::PlannedAttempt;
use super::runner::{AttemptLaunch, AttemptRunner};

/// Launches each planned attempt and returns Launched records, or Lost + retry records for
/// attempts whose launch failed outright.
pub fn launch_all(
    state: &State,
    planned: &[PlannedAttempt],
    runner: &mut dyn AttemptRunner,
    config: &Config,
    clock: &dyn Fn() -> u64,
) -> Vec<Record> {
    let mut records = Vec::new();
    for attempt in planned {
        let Some(task) = state.tasks.get(&attempt.task) else { continue };
        let plan = plan_for(task, attempt, config);
        // On error the attempt stays Placed; the next tick adopts a late supervisor,
        // relaunches an unclaimed attempt, or marks a dead one Lost.
        if let Ok(supervisor) = runner.launch(&AttemptLaunch { plan }) {
            records.push(Record {
                time_ms: clock(),
                event: Event::Launched {
                    task: task.id.clone(),
                    attempt: attempt.attempt,
                    supervisor,
                    adopted: false,
                },
            });
        }
    }
    records
}

/// The plan file for one attempt: the job exactly as submitted, plus where it runs.
pub fn plan_for(task: &crate::journal::Task, attempt: &PlannedAttempt, config: &Config) -> AttemptPlan {
    let spec = &task.spec;
    let mut env = spec.env.iter().cloned().collect::<BTreeMap<_, _>>();
    let mps_mem_limit_mib = match config.tick.sharing {
        Sharing::Mps => {
            // Jobs must find the daemon that carma-mps.service runs.
            env.insert("CUDA_MPS_PIPE_DIRECTORY".into(), crate::systemd::MPS_PIPE_DIR.into());
            env.insert("CUDA_MPS_LOG_DIRECTORY".into(), crate::systemd::MPS_LOG_DIR.into());
            attempt.requirement_mib.map(|mib| mib + config.sched.margin_with_figure_mib)
        }
        Sharing::Streams => None,
    };
    AttemptPlan {
        task_id: task.id.to_string(),
        attempt: attempt.attempt,
        argv: spec.command.clone(),
        env,
        workdir: spec.workdir.clone().into(),
        uid: task.submitter_uid,
        gid: None,
        gpu_uuids: attempt.gpus.clone(),
        mps_mem_limit_mib,
        time_limit_ms: spec.time_limit_ms,
    }
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
        let streams = plan_for(task, &attempt, &config);
        assert_eq!(streams.mps_mem_limit_mib, None);
        assert!(!streams.env.contains_key("CUDA_MPS_PIPE_DIRECTORY"));
        config.tick.sharing = Sharing::Mps;
        let mps = plan_for(task, &attempt, &config);
        assert_eq!(mps.mps_mem_limit_mib, Some(10240 + 2048));
        assert_eq!(mps.env["CUDA_MPS_PIPE_DIRECTORY"], crate::systemd::MPS_PIPE_DIR);
        assert_eq!(mps.uid, 1000, "the job runs as its submitter");
        assert_eq!(mps.gpu_uuids, ["GPU-a"]);
    }
}
