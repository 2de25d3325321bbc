//! The decision loop: walk the queue in order, place what fits, give every
//! other task one pending reason. The rules are in the module docs of `sched`.

use std::collections::HashSet;

use super::policy;
use super::precondition::{Gate, check_available, check_idle, check_shared};
use super::reason;
use super::table::GpuTable;
use super::{
    Decision, Pending, Placement, Policy, Recovery, RecoveryMode, SchedConfig, SchedInput, WaitingTask,
};

/// Decides which waiting tasks start now and where, and why the rest wait.
///
/// Pure and deterministic: the same input gives the same output, whatever
/// the order of `input.waiting`.
pub fn decide(input: &SchedInput<'_>) -> Decision {
    let mut run = Run::new(input);
    for position in queue_order(input.waiting) {
        run.visit(&input.waiting[position]);
    }
    run.finish(input.waiting.len())
}

/// Recovery queue first, then the main queue; each by `submit_seq`, then id.
fn queue_order(waiting: &[WaitingTask]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..waiting.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&waiting[a], &waiting[b]);
        (a.recovery.is_none(), a.submit_seq, &a.id).cmp(&(b.recovery.is_none(), b.submit_seq, &b.id))
    });
    order
}

/// The state of one walk over the queue.
struct Run<'a> {
    config: &'a SchedConfig,
    planner: Planner<'a>,
    running_ids: HashSet<&'a str>,
    seen_ids: HashSet<&'a str>,
    /// The first task that could not be placed.
    head_id: Option<&'a str>,
    backfill_tried: u32,
    placements: Vec<Placement>,
    pending: Vec<Pending>,
}

/// Places single tasks against the GPU table.
struct Planner<'a> {
    config: &'a SchedConfig,
    table: GpuTable<'a>,
    /// By table position: kept for the blocked head (backfill only).
    reserved: Vec<bool>,
    head_id: Option<&'a str>,
    rr_cursor: u32,
    /// Scratch: candidate positions, then the chosen ones.
    chosen: Vec<usize>,
}

impl<'a> Run<'a> {
    fn new(input: &SchedInput<'a>) -> Self {
        let table = GpuTable::new(input);
        let gpu_count = table.slots.len();
        Run {
            config: input.config,
            planner: Planner {
                config: input.config,
                table,
                reserved: vec![false; gpu_count],
                head_id: None,
                rr_cursor: input.rr_cursor,
                chosen: Vec::with_capacity(gpu_count),
            },
            running_ids: input.running.iter().map(|t| t.id.as_str()).collect(),
            seen_ids: HashSet::with_capacity(input.waiting.len()),
            head_id: None,
            backfill_tried: 0,
            placements: Vec::new(),
            pending: Vec::with_capacity(input.waiting.len()),
        }
    }

    fn visit(&mut self, task: &'a WaitingTask) {
        if let Some(reason) = self.screen(task) {
            self.pending.push(Pending { task_id: task.id.clone(), reason });
            return;
        }
        match self.planner.try_place(task) {
            Ok(placement) => self.placements.push(placement),
            Err(reason) => {
                // A tried task that does not fit blocks the queue; tasks
                // refused by `screen` (impossible, duplicate, ...) do not.
                if self.head_id.is_none() {
                    self.head_id = Some(task.id.as_str());
                    if self.config.backfill {
                        self.planner.reserve_for_head(task);
                    }
                }
                self.pending.push(Pending { task_id: task.id.clone(), reason });
            }
        }
    }

    /// A reason not to try the task at all, or `None` to try it.
    fn screen(&mut self, task: &'a WaitingTask) -> Option<String> {
        let gpu_count = self.planner.table.slots.len();
        if self.running_ids.contains(task.id.as_str()) {
            return Some("already running".to_string());
        }
        if !self.seen_ids.insert(task.id.as_str()) {
            return Some("duplicate: an earlier waiting task has the same id".to_string());
        }
        if task.gpus == 0 {
            return Some("needs 0 GPUs: a task must ask for at least one GPU".to_string());
        }
        if task.gpus as usize > gpu_count {
            return Some(format!("needs {} GPUs, this machine has {gpu_count}", task.gpus));
        }
        if self.placements.len() >= self.config.placements_per_tick_max as usize {
            return Some("placement limit per tick reached".to_string());
        }
        let head_id = self.head_id?;
        if !self.config.backfill {
            return Some(format!("queued behind {head_id} (strict FIFO)"));
        }
        let depth = self.config.backfill_depth_max;
        if self.backfill_tried >= depth {
            return Some(format!("queued behind {head_id} (beyond backfill depth {depth})"));
        }
        self.backfill_tried += 1;
        None
    }

    fn finish(self, waiting_count: usize) -> Decision {
        let limit = self.config.placements_per_tick_max as usize;
        assert!(self.placements.len() <= limit, "placements exceed the per-tick limit");
        assert_eq!(
            self.placements.len() + self.pending.len(),
            waiting_count,
            "every waiting task is placed or pending"
        );
        Decision { placements: self.placements, pending: self.pending, rr_cursor: self.planner.rr_cursor }
    }
}

impl<'a> Planner<'a> {
    fn reserved_for(&self, position: usize) -> Option<&'a str> {
        if self.reserved[position] { self.head_id } else { None }
    }

    fn try_place(&mut self, task: &'a WaitingTask) -> Result<Placement, String> {
        let (requirement_mib, exclusive, reason) = self.try_select(task)?;
        Ok(self.commit(task, requirement_mib, exclusive, reason))
    }

    /// Fills `chosen` with the task's GPUs and returns (requirement,
    /// exclusive, reason), or the pending reason. Changes only `chosen` and,
    /// for round-robin, the cursor.
    fn try_select(&mut self, task: &'a WaitingTask) -> Selection {
        if let Some(recovery) = &task.recovery {
            return self.select_recovery(task, recovery);
        }
        let policy = self.config.policy;
        let gpus_needed = task.gpus as usize;
        let exclusive = policy == Policy::Exclusive;
        if (self.config.exclusive_first || exclusive) && self.collect_idle(gpus_needed) {
            let prefix = if exclusive { "exclusive" } else { "idle" };
            let reason = reason::idle_placement(prefix, &self.table.slots, &self.chosen, exclusive);
            return Ok((task.requirement_mib, exclusive, reason));
        }
        match policy {
            Policy::Exclusive => Err(self.idle_shortfall(gpus_needed, "exclusive")),
            Policy::RoundRobin => self.select_round_robin(task),
            _ => {
                let gate = self.task_gate(task.requirement_mib);
                if !self.collect_shared(gpus_needed, &gate) {
                    return Err(self.shared_shortfall(gpus_needed, &gate));
                }
                policy::rank(policy, &self.table.slots, &mut self.chosen);
                self.chosen.truncate(gpus_needed);
                let free = self.chosen_free_mib();
                let reason = reason::shared_placement(policy, &self.table.slots, &self.chosen, &free);
                Ok((task.requirement_mib, false, reason))
            }
        }
    }

    fn select_recovery(&mut self, task: &'a WaitingTask, recovery: &Recovery) -> Selection {
        let gpus_needed = task.gpus as usize;
        let requirement_mib = Some(recovery.requirement_mib);
        if recovery.mode == RecoveryMode::Looser {
            return self.select_looser(task, recovery);
        }
        if !self.collect_idle(gpus_needed) {
            return Err(self.idle_shortfall(gpus_needed, "recovery (exclusive)"));
        }
        let prefix = format!("recovery (exclusive, OOM {})", recovery.oom_count);
        let reason = reason::idle_placement(&prefix, &self.table.slots, &self.chosen, true);
        Ok((requirement_mib, true, reason))
    }

    fn select_looser(&mut self, task: &'a WaitingTask, recovery: &Recovery) -> Selection {
        let gpus_needed = task.gpus as usize;
        let step_mib = self.config.recovery.step_mib;
        let gate = Gate {
            requirement_mib: Some(recovery.requirement_mib),
            margin_mib: step_mib,
            margin_label: "step",
            sm_cap: self.config.sm_cap,
            risk_gate: self.config.risk_gate,
        };
        let prefix = format!("recovery (looser, OOM {})", recovery.oom_count);
        if self.collect_shared(gpus_needed, &gate) {
            let slots = &self.table.slots;
            policy::rank_by_free_desc(slots, &mut self.chosen);
            self.chosen.truncate(gpus_needed);
            let free = self.chosen_free_mib();
            let need = recovery.requirement_mib;
            let reason = reason::looser_placement(&prefix, slots, &self.chosen, &free, need, step_mib);
            return Ok((gate.requirement_mib, false, reason));
        }
        if self.collect_idle(gpus_needed) {
            let slots = &self.table.slots;
            let room = format!("{} + {} step", reason::gib(recovery.requirement_mib), reason::gib(step_mib));
            let idle = reason::idle_placement(&prefix, slots, &self.chosen, true);
            let reason = format!("{idle} (no GPU has room for {room})");
            return Ok((gate.requirement_mib, true, reason));
        }
        let shortfall = self.shared_shortfall(gpus_needed, &gate);
        Err(format!("recovery (looser): {shortfall}; no idle GPU to fall back on"))
    }

    fn select_round_robin(&mut self, task: &'a WaitingTask) -> Selection {
        let gpus_needed = task.gpus as usize;
        let gpu_count = self.table.slots.len();
        self.chosen.clear();
        for position in policy::cycle(gpu_count, self.rr_cursor) {
            let slot = &self.table.slots[position];
            if check_available(slot, self.reserved_for(position)).is_ok() {
                self.chosen.push(position);
                if self.chosen.len() == gpus_needed {
                    break;
                }
            }
        }
        if self.chosen.len() < gpus_needed {
            let passing: Vec<u32> = self.chosen.iter().map(|&p| self.table.slots[p].view.index).collect();
            let refusals: Vec<_> = (0..gpu_count)
                .filter_map(|p| check_available(&self.table.slots[p], self.reserved_for(p)).err())
                .collect();
            let shortfall = reason::shortfall(gpus_needed, &passing, &refusals, Some("available"));
            return Err(format!("round-robin: {shortfall}"));
        }
        let last = *self.chosen.last().expect("at least one GPU chosen");
        self.rr_cursor = policy::cursor_after(gpu_count, last);
        let reason = reason::round_robin_placement(&self.table.slots, &self.chosen);
        Ok((task.requirement_mib, false, reason))
    }

    fn task_gate(&self, requirement_mib: Option<u64>) -> Gate {
        let margin_mib = match requirement_mib {
            Some(_) => self.config.margin_with_figure_mib,
            None => self.config.margin_without_figure_mib,
        };
        Gate {
            requirement_mib,
            margin_mib,
            margin_label: "margin",
            sm_cap: self.config.sm_cap,
            risk_gate: self.config.risk_gate,
        }
    }

    /// `chosen` := the lowest-index idle GPUs, at most `gpus_needed`.
    fn collect_idle(&mut self, gpus_needed: usize) -> bool {
        self.chosen.clear();
        let idle_max = self.config.idle_used_mib_max;
        for position in 0..self.table.slots.len() {
            let slot = &self.table.slots[position];
            if check_idle(slot, idle_max, self.reserved_for(position)).is_ok() {
                self.chosen.push(position);
                if self.chosen.len() == gpus_needed {
                    break;
                }
            }
        }
        self.chosen.len() == gpus_needed
    }

    /// `chosen` := every GPU passing the gate, in index order.
    fn collect_shared(&mut self, gpus_needed: usize, gate: &Gate) -> bool {
        self.chosen.clear();
        for position in 0..self.table.slots.len() {
            let slot = &self.table.slots[position];
            if check_shared(slot, gate, self.reserved_for(position)).is_ok() {
                self.chosen.push(position);
            }
        }
        self.chosen.len() >= gpus_needed
    }

    fn idle_shortfall(&self, gpus_needed: usize, prefix: &str) -> String {
        let idle_max = self.config.idle_used_mib_max;
        let mut passing = Vec::new();
        let mut refusals = Vec::new();
        for (position, slot) in self.table.slots.iter().enumerate() {
            match check_idle(slot, idle_max, self.reserved_for(position)) {
                Ok(()) => passing.push(slot.view.index),
                Err(refusal) => refusals.push(refusal),
            }
        }
        format!("{prefix}: {}", reason::shortfall(gpus_needed, &passing, &refusals, Some("idle")))
    }

    fn shared_shortfall(&self, gpus_needed: usize, gate: &Gate) -> String {
        let mut passing = Vec::new();
        let mut refusals = Vec::new();
        for (position, slot) in self.table.slots.iter().enumerate() {
            match check_shared(slot, gate, self.reserved_for(position)) {
                Ok(()) => passing.push(slot.view.index),
                Err(refusal) => refusals.push(refusal),
            }
        }
        reason::shortfall(gpus_needed, &passing, &refusals, None)
    }

    fn chosen_free_mib(&self) -> Vec<u64> {
        self.chosen.iter().map(|&p| self.table.slots[p].free_effective_mib()).collect()
    }

    /// Records the selection in `chosen` as a placement.
    fn commit(
        &mut self,
        task: &'a WaitingTask,
        requirement_mib: Option<u64>,
        exclusive: bool,
        reason: String,
    ) -> Placement {
        assert_eq!(self.chosen.len(), task.gpus as usize, "placement takes exactly the GPUs asked for");
        for (i, position) in self.chosen.iter().enumerate() {
            assert!(!self.chosen[..i].contains(position), "a placement lists a GPU twice");
        }
        let assumed_mib = requirement_mib.unwrap_or(self.config.margin_without_figure_mib);
        self.table.apply(&self.chosen, assumed_mib, exclusive, task.id.as_str());
        let gpus = self.chosen.iter().map(|&p| self.table.slots[p].view.uuid.clone()).collect();
        Placement { task_id: task.id.clone(), gpus, exclusive, requirement_mib, reason }
    }

    /// Backfill: keep the GPUs the blocked head would most likely get first
    /// (rule in the `sched` module docs) away from the tasks behind it.
    fn reserve_for_head(&mut self, task: &'a WaitingTask) {
        assert!(self.head_id.is_none(), "only the first blocked task gets a reservation");
        let needs_idle = match &task.recovery {
            Some(recovery) => recovery.mode == RecoveryMode::Exclusive,
            None => self.config.policy == Policy::Exclusive,
        };
        let slots = &self.table.slots;
        let mut positions: Vec<usize> =
            (0..slots.len()).filter(|&p| slots[p].exclusive_holder.is_none()).collect();
        if needs_idle {
            positions.sort_by_key(|&p| (slots[p].tasks, slots[p].used_mib(), p));
        } else {
            policy::rank_by_free_desc(slots, &mut positions);
        }
        positions.truncate(task.gpus as usize);
        for position in positions {
            self.reserved[position] = true;
        }
        self.head_id = Some(task.id.as_str());
    }
}

/// (requirement, exclusive, reason) of a selection in `chosen`, or why not.
type Selection = Result<(Option<u64>, bool, String), String>;
