//! Tests of the decision core.
//!
//! `Fixture` builds small scenarios in GiB; `render` prints a decision as one
//! line per task so that expect-style tests compare the whole outcome,
//! reasons included, against a literal.

mod begin;
mod config_and_recovery;
mod edges;
mod evidence;
mod gate;
mod order_size;
mod policies;
mod preempt;
mod props;
mod recovery_order;
mod reservation;
mod sharing;
mod starvation;

use super::{
    Decision, GpuView, Policy, Recovery, RecoveryMode, RunningTask, SchedConfig, SchedInput, SmBasis,
    WaitingTask, decide,
};

/// The fixture's clock.
const NOW_MS: u64 = 10_000_000;
/// Every fixture GPU has 40 GiB.
const GPU_TOTAL_MIB: u64 = 40 * 1024;

fn mib(gib: f64) -> u64 {
    (gib * 1024.0).round() as u64
}

/// A scenario: GPUs, running and waiting tasks, config.
#[derive(Clone)]
pub(super) struct Fixture {
    gpus: Vec<GpuView>,
    waiting: Vec<WaitingTask>,
    running: Vec<RunningTask>,
    config: SchedConfig,
    rr_cursor: u32,
}

impl Fixture {
    fn new(policy: Policy) -> Self {
        let config = SchedConfig { policy, ..SchedConfig::default() };
        Fixture { gpus: Vec::new(), waiting: Vec::new(), running: Vec::new(), config, rr_cursor: 0 }
    }

    /// A 40 GiB GPU with this much free memory and SM activity.
    fn gpu(mut self, free_gib: f64, sm_active: Option<f32>) -> Self {
        let index = self.gpus.len() as u32;
        self.gpus.push(GpuView {
            uuid: format!("GPU-{index}"),
            index,
            memory_total_mib: GPU_TOTAL_MIB,
            memory_free_mib: mib(free_gib),
            sm_active,
            sm_occupancy: None,
            dram_active: None,
            sample_age_ms: 1000,
            memory_reserved_mib: 0,
            sm_basis: SmBasis::Measured,
            mig: None,
            unavailable: None,
        });
        self
    }

    /// A main-queue task, submitted after the ones before it.
    fn task(mut self, id: &str, gpus: u32, requirement_gib: Option<f64>) -> Self {
        let submit_seq = self.waiting.len() as u64;
        self.waiting.push(WaitingTask {
            id: id.to_string(),
            submit_seq,
            gpus,
            requirement_mib: requirement_gib.map(mib),
            recovery: None,
            gate: Default::default(),
            mig_profile: None,
            submitted_ms: NOW_MS - 3_600_000 + submit_seq * 60_000,
            sm_estimate: None,
            runtime_estimate_ms: None,
            expected_run: None,
        });
        self
    }

    /// The last waiting task's standalone SM estimate.
    fn task_sm(mut self, sm: f32) -> Self {
        self.waiting.last_mut().expect("a waiting task").sm_estimate = Some(sm);
        self
    }

    /// The last waiting task's run-time estimate, minutes.
    fn runtime_min(mut self, minutes: u64) -> Self {
        self.waiting.last_mut().expect("a waiting task").runtime_estimate_ms = Some(minutes * 60_000);
        self
    }

    /// The last waiting task's expected run for the queue order (and run-time estimate),
    /// minutes, as learned from earlier runs.
    fn expected_min(mut self, minutes: u64) -> Self {
        let task = self.waiting.last_mut().expect("a waiting task");
        task.runtime_estimate_ms = Some(minutes * 60_000);
        task.expected_run =
            Some(super::ExpectedRun { ms: minutes * 60_000, source: super::RunSource::History });
        self
    }

    /// The last waiting task's submission, minutes before now.
    fn submitted_min_ago(mut self, minutes: u64) -> Self {
        self.waiting.last_mut().expect("a waiting task").submitted_ms = NOW_MS - minutes * 60_000;
        self
    }

    /// The last running task's SM and run-time estimates (minutes from its launch).
    fn running_est(mut self, sm: Option<f32>, runtime_min: Option<u64>) -> Self {
        let task = self.running.last_mut().expect("a running task");
        task.sm_estimate = sm;
        task.runtime_estimate_ms = runtime_min.map(|m| m * 60_000);
        self
    }

    /// A recovery-queue task.
    fn recovery(mut self, id: &str, gpus: u32, requirement_gib: f64, mode: RecoveryMode) -> Self {
        self = self.task(id, gpus, Some(requirement_gib - 5.0));
        let task = self.waiting.last_mut().expect("just pushed");
        task.recovery = Some(Recovery { oom_count: 1, requirement_mib: mib(requirement_gib), mode });
        self
    }

    /// A running task on these GPU indices, launched `age_s` ago.
    fn running(
        mut self,
        id: &str,
        gpus: &[u32],
        requirement_gib: Option<f64>,
        observed_gib: Option<f64>,
        age_s: u64,
    ) -> Self {
        self.running.push(RunningTask {
            id: id.to_string(),
            gpus: gpus.iter().map(|i| format!("GPU-{i}")).collect(),
            requirement_mib: requirement_gib.map(mib),
            launched_ms: NOW_MS - age_s * 1000,
            observed_mib: observed_gib.map(mib),
            exclusive: false,
            gate: Default::default(),
            sm_estimate: None,
            runtime_estimate_ms: None,
        });
        self
    }

    fn exclusive_last(mut self) -> Self {
        self.running.last_mut().expect("a running task").exclusive = true;
        self
    }

    fn with(mut self, change: impl FnOnce(&mut SchedConfig)) -> Self {
        change(&mut self.config);
        self
    }

    fn cursor(mut self, rr_cursor: u32) -> Self {
        self.rr_cursor = rr_cursor;
        self
    }

    fn decide(&self) -> Decision {
        decide(&SchedInput {
            now_ms: NOW_MS,
            gpus: &self.gpus,
            waiting: &self.waiting,
            running: &self.running,
            rr_cursor: self.rr_cursor,
            config: &self.config,
            gate: Default::default(),
        })
    }

    /// The decision when the previous one reserved `reservation`.
    fn decide_after(&self, reservation: &crate::sched::Reservation) -> Decision {
        decide(&SchedInput {
            now_ms: NOW_MS,
            gpus: &self.gpus,
            waiting: &self.waiting,
            running: &self.running,
            rr_cursor: self.rr_cursor,
            config: &self.config,
            gate: crate::sched::GateInput {
                usage: &[],
                reservation: Some(reservation),
                ..Default::default()
            },
        })
    }

    /// One line per placement, then per pending task, then the cursor.
    fn render(&self) -> String {
        let decision = self.decide();
        let mut lines = Vec::new();
        for placement in &decision.placements {
            let gpus: Vec<&str> = placement.gpus.iter().map(|g| g.as_str()).collect();
            let exclusive = if placement.exclusive { " exclusive" } else { "" };
            lines.push(format!(
                "place {} on {}{exclusive}: {}",
                placement.task_id,
                gpus.join(","),
                placement.reason
            ));
        }
        for pending in &decision.pending {
            lines.push(format!("wait {}: {}", pending.task_id, pending.reason));
        }
        lines.push(format!("cursor {}", decision.rr_cursor));
        lines.join("\n")
    }
}

/// Compares a rendering with the expected text, showing both on failure.
#[track_caller]
fn check(fixture: &Fixture, expected: &str) {
    let actual = fixture.render();
    assert_eq!(actual.trim(), expected.trim(), "\nactual:\n{actual}\n");
}
