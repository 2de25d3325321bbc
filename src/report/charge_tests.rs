//! Goal: `carma report` charges an attempt only from its launch. Method: a task's first
//! attempt is placed and lost before any supervisor started it, its second runs for 60 s;
//! the report's waiting, execution and attempt rows know only the second. A guard: the
//! report already read start times from Launched alone when issue 32 was filed.

use super::*;
use crate::id::TaskId;
use crate::journal::ProcessRef;

fn placed(task: &TaskId, attempt: u32) -> Event {
    Event::Placed {
        task: task.clone(),
        attempt,
        gpus: vec!["GPU-a".into()],
        exclusive: false,
        requirement_mib: None,
        reason: "fits".into(),
    }
}

#[test]
fn an_attempt_that_never_launched_has_no_start_and_no_run_time() {
    let id = TaskId::from_parts(1_000, 1);
    let spec = crate::spec::parse_toml("t", "name = \"t\"\ncommand = [\"true\"]\n")
        .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
        .unwrap();
    let supervisor = ProcessRef { pid: 100, start_time_ticks: 1, boot_id: "b".into() };
    let mut acc = Acc::default();
    for (time_ms, event) in [
        (1_000, Event::Submitted { task: id.clone(), submitter_uid: 1001, spec }),
        (2_000, placed(&id, 1)),
        (3_602_000, Event::Lost { task: id.clone(), attempt: 1, reason: "never started within 60 s".into() }),
        (3_602_000, placed(&id, 2)),
        (3_603_000, Event::Launched { task: id.clone(), attempt: 2, supervisor, adopted: false }),
        (3_663_000, Event::Finished { task: id.clone(), attempt: 2, exit_ms: 3_663_000 }),
    ] {
        acc.fold(&Record { time_ms, event });
    }
    let report = acc.finish("t", "journal");
    assert_eq!(report.execution.count, 1);
    assert_eq!(report.execution.mean_s, Some(60.0), "only attempt 2's minute ran");
    assert_eq!(report.waiting.mean_s, Some(3_602.0), "the task waited until attempt 2 launched");
    let starts: Vec<(u32, Option<f64>)> = report.attempts.iter().map(|a| (a.attempt, a.start_s)).collect();
    assert_eq!(starts, [(2, Some(3_602.0)), (1, None)]);
}
