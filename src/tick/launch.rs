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
    let mps_mem_limit_mib = match config.tick.sharing {
        Sharing::Mps => attempt.requirement_mib.map(|mib| mib + config.sched.margin_with_figure_mib),
        Sharing::Streams => None,
    };
    AttemptPlan {
        task_id: task.id.to_string(),
        attempt: attempt.attempt,
        argv: spec.command.clone(),
        env: spec.env.iter().cloned().collect::<BTreeMap<_, _>>(),
        workdir: spec.workdir.clone().into(),
        uid: task.submitter_uid,
        gid: None,
        gpu_uuids: attempt.gpus.clone(),
        mps_mem_limit_mib,
        time_limit_ms: spec.time_limit_ms,
    }
}
