//! The decision loop: walk the queue in order, place what fits, give every
//! other task one pending reason. The rules are in the module docs of `sched`.

use std::collections::HashSet;

use std::cmp::Reverse;

use super::gate::{self, Cancellation, Reservation, Verdict};
use super::order::queue_order;
use super::policy;
use super::precondition::{Gate, check_available, check_idle, check_shared, eligible};
use super::reason;
use super::shadow;
use super::table::{GpuName, GpuTable, Placing, sm_or_unknown};
use super::{
    Decision, Pending, Placement, Policy, Recovery, RecoveryMode, SchedConfig, SchedInput, WaitingTask,
};

/// Decides which waiting tasks start now and where, and why the rest wait.
///
/// Pure and deterministic: the same input gives the same output, whatever
/// the order of `input.waiting`.
pub fn decide(input: &SchedInput<'_>) -> Decision {
    let mut run = Run::new(input);
    for position in queue_order(input) {
        run.visit(&input.waiting[position]);
    }
    run.finish(input.waiting.len())
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
    /// Holds, dependencies and caps (`gate`).
    gate: gate::Gate<'a>,
    cancellations: Vec<Cancellation>,
}

/// Places single tasks against the GPU table.
struct Planner<'a> {
    config: &'a SchedConfig,
    table: GpuTable<'a>,
    /// By table position: kept for the blocked head (backfill only).
    reserved: Vec<bool>,
    /// By table position: may take the task being placed (MIG rules).
    eligible: Vec<bool>,
    /// The memory figure of the task being placed, which an idle MIG instance must hold.
    fit_mib: Option<u64>,
    head_id: Option<&'a str>,
    /// With `backfill_by_time`: when the head is expected to fit on all its reserved GPUs
    /// (see `shadow`); `None` when unknown.
    head_shadow_ms: Option<u64>,
    /// Expected end of the task being tried, for `backfill_by_time`.
    trying_end_ms: Option<u64>,
    /// What the task being tried would add to a GPU, for `backfill_by_time`; `None` for a
    /// recovery task.
    trying_beside: Option<shadow::Beside>,
    /// With `backfill_by_time`: what the blocked head needs from each reserved GPU.
    head_need: Option<shadow::HeadNeed>,
    now_ms: u64,
    rr_cursor: u32,
    /// Scratch: candidate positions, then the chosen ones.
    chosen: Vec<usize>,
    /// The previous decision's reservation, reused while its task is the head.
    previous_reservation: Option<&'a Reservation>,
    /// The head's reserved start: when every task on its reserved GPUs has ended by its time
    /// limit; `None` when one has no limit (or nothing runs there).
    shadow_ms: Option<u64>,
    /// The task being placed ends by its time limit before `shadow_ms`: it may use the
    /// reserved GPUs (EASY backfill).
    ends_before_shadow: bool,
    running: &'a [super::RunningTask],
    /// This decision's placements so far: (table positions, end by the time limit, `None`
    /// without one), for the shadow time of a head reserved after them.
    placed_ends: Vec<(Vec<usize>, Option<u64>)>,
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
                eligible: vec![true; gpu_count],
                fit_mib: None,
                head_id: None,
                head_shadow_ms: None,
                trying_end_ms: None,
                trying_beside: None,
                head_need: None,
                now_ms: input.now_ms,
                rr_cursor: input.rr_cursor,
                chosen: Vec::with_capacity(gpu_count),
                previous_reservation: input.gate.reservation,
                shadow_ms: None,
                ends_before_shadow: false,
                running: input.running,
                placed_ends: Vec::new(),
            },
            running_ids: input.running.iter().map(|t| t.id.as_str()).collect(),
            seen_ids: HashSet::with_capacity(input.waiting.len()),
            head_id: None,
            backfill_tried: 0,
            placements: Vec::new(),
            pending: Vec::with_capacity(input.waiting.len()),
            gate: gate::Gate::new(input),
            cancellations: Vec::new(),
        }
    }

    fn visit(&mut self, task: &'a WaitingTask) {
        // The gate first: a held task, one waiting for a dependency or over a cap
        // waits (or is cancelled) without blocking anyone.
        if !self.running_ids.contains(task.id.as_str()) {
            match self.gate.check(task) {
                Verdict::Go => {}
                Verdict::Wait(reason) => {
                    self.pending.push(Pending { task_id: task.id.clone(), reason });
                    return;
                }
                Verdict::Cancel(reason) => {
                    self.cancellations.push(Cancellation { task_id: task.id.clone(), reason });
                    return;
                }
            }
        }
        self.planner.set_task(task);
        if let Some(reason) = self.screen(task) {
            self.pending.push(Pending { task_id: task.id.clone(), reason });
            return;
        }
        match self.planner.try_place(task) {
            Ok(placement) => {
                self.gate.placed(task);
                self.placements.push(placement);
            }
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
        if let Some(reason) = self.planner.impossible(task) {
            return Some(reason);
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
            self.placements.len() + self.pending.len() + self.cancellations.len(),
            waiting_count,
            "every waiting task is placed, pending or cancelled"
        );
        let reservation = self.planner.reservation();
        Decision {
            head: self.head_id.map(str::to_string),
            placements: self.placements,
            pending: self.pending,
            rr_cursor: self.planner.rr_cursor,
            cancellations: self.cancellations,
            reservation,
        }
    }
}

impl<'a> Planner<'a> {
    /// The head a GPU is kept for, if the task being tried may not use it.
    ///
    /// Plain EASY backfill (rule in the `sched` module docs): a task that ends by its time
    /// limit before the head's reserved start may use the kept GPUs. With `backfill_by_time`
    /// the expected times decide instead, whenever the head's expected start is known: a task
    /// may use a kept GPU when it is expected to end before the head fits on all its GPUs (it
    /// leaves before the head could start anyway), or when the GPU would still fit the head by
    /// then with the task staying on it (`shadow::Beside`). Time limits are far longer than
    /// run times, so by limits alone a GPU that already has the head's room gets filled again
    /// and the reservation chases the next one.
    fn reserved_for(&self, position: usize) -> Option<&'a str> {
        if !self.reserved[position] {
            return None;
        }
        match (self.config.backfill_by_time, self.head_shadow_ms) {
            (true, Some(shadow)) => {
                let ends_in_time = self.trying_end_ms.is_some_and(|end| end <= shadow);
                let fits_beside =
                    self.head_need.as_ref().zip(self.trying_beside).is_some_and(|(need, beside)| {
                        let slot = &self.table.slots[position];
                        shadow::fit_time_ms(slot, need, self.now_ms, Some(beside))
                            .is_some_and(|fit| fit <= shadow)
                    });
                if ends_in_time || fits_beside {
                    return None;
                }
            }
            _ if self.ends_before_shadow => return None,
            _ => {}
        }
        self.head_id
    }

    /// Marks the GPUs that may take `task` at all (see `precondition::eligible`).
    fn set_task(&mut self, task: &WaitingTask) {
        for (flag, slot) in self.eligible.iter_mut().zip(&self.table.slots) {
            *flag = eligible(slot.view, task);
        }
        self.fit_mib = task.recovery.as_ref().map(|r| r.requirement_mib).or(task.requirement_mib);
    }

    /// Why the GPUs eligible for `task` (set by `set_task`) can never be
    /// enough, when MIG is the reason; `None` otherwise.
    fn impossible(&self, task: &WaitingTask) -> Option<String> {
        let slots = &self.table.slots;
        let eligible_count = self.eligible.iter().filter(|&&e| e).count();
        if eligible_count >= task.gpus as usize {
            return None;
        }
        let mut profiles: Vec<&str> =
            slots.iter().filter_map(|s| s.view.mig.as_ref()?.profile.as_deref()).collect();
        profiles.sort_unstable();
        profiles.dedup();
        match &task.mig_profile {
            Some(profile) if task.gpus > 1 => Some(format!(
                "asks for {} GPUs of MIG profile {profile}: a task gets one MIG instance (CUDA shows a process one MIG device)",
                task.gpus
            )),
            Some(profile) if profiles.is_empty() => {
                Some(format!("no MIG instance of profile {profile} on this machine (no MIG instances)"))
            }
            Some(profile) => Some(format!(
                "no MIG instance of profile {profile} on this machine (profiles here: {})",
                profiles.join(", ")
            )),
            None if slots.iter().any(|s| s.view.mig.is_some()) => Some(format!(
                "needs {} GPUs, this machine has {eligible_count} without MIG (a MIG instance takes only one-GPU tasks)",
                task.gpus
            )),
            None => None,
        }
    }

    fn try_place(&mut self, task: &'a WaitingTask) -> Result<Placement, String> {
        // EASY backfill by time limit: a task that ends by its limit before the head's reserved
        // start may use the reserved GPUs too; it is gone before the head could start there.
        self.ends_before_shadow = self.head_id.is_some()
            && task
                .gate
                .time_limit_ms
                .zip(self.shadow_ms)
                .is_some_and(|(limit, shadow)| self.now_ms.saturating_add(limit) <= shadow);
        self.trying_end_ms = task.runtime_estimate_ms.map(|ms| self.now_ms.saturating_add(ms));
        self.trying_beside = task.recovery.is_none().then(|| shadow::Beside {
            mib: task.requirement_mib.unwrap_or(self.config.margin_without_figure_mib),
            sm: sm_or_unknown(task.sm_estimate, self.config.sm_unknown),
        });
        let selected = self.try_select(task);
        self.trying_end_ms = None;
        self.trying_beside = None;
        self.ends_before_shadow = false;
        let (requirement_mib, exclusive, reason) = selected?;
        Ok(self.commit(task, requirement_mib, exclusive, reason))
    }

    /// A task whose figure plus margin exceeds the memory of all but fewer GPUs than it needs
    /// can only run on idle GPUs: that many GPUs can never pass its memory gate together.
    /// Returns its requirement and how many GPUs' memory it fits.
    fn needs_whole_gpus(&self, task: &WaitingTask) -> Option<(u64, usize)> {
        let requirement_mib = task.requirement_mib?;
        let need_mib = requirement_mib.saturating_add(self.config.margin_with_figure_mib);
        let fitting = self.table.slots.iter().filter(|s| s.view.memory_total_mib >= need_mib).count();
        (fitting < task.gpus as usize).then_some((requirement_mib, fitting))
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
        // With exclusive-first the idle GPUs were just tried; without it, this is the only
        // way such a task ever starts (it would wait forever at the shared gate).
        let whole = self.needs_whole_gpus(task).filter(|_| {
            !self.config.exclusive_first && !matches!(policy, Policy::Exclusive | Policy::RoundRobin)
        });
        if let Some((requirement_mib, fitting)) = whole {
            let margin_mib = self.config.margin_with_figure_mib;
            let largest_mib = self.table.slots.iter().map(|s| s.view.memory_total_mib).max().unwrap_or(0);
            let prefix = reason::whole_gpu(requirement_mib, margin_mib, largest_mib, fitting, task.gpus);
            if self.collect_idle(gpus_needed) {
                let reason = format!("{prefix}: {} idle", reason::gpu_names(&self.table.slots, &self.chosen));
                return Ok((task.requirement_mib, false, reason));
            }
            return Err(self.idle_shortfall(gpus_needed, &prefix));
        }
        match policy {
            Policy::Exclusive => Err(self.idle_shortfall(gpus_needed, "exclusive")),
            Policy::RoundRobin => self.select_round_robin(task),
            _ => {
                let gate = self.task_gate(task);
                if !self.collect_shared(gpus_needed, &gate) {
                    return Err(self.shared_shortfall(gpus_needed, &gate));
                }
                policy::rank(policy, &self.table.slots, &mut self.chosen, self.config.projected_gate());
                self.chosen.truncate(gpus_needed);
                let free = self.chosen_free_mib();
                let projected = self.config.projected_gate();
                let reason =
                    reason::shared_placement(policy, &self.table.slots, &self.chosen, &free, projected);
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
            sm_projected_cap: self.config.sm_projected_cap,
            task_sm: sm_or_unknown(task.sm_estimate, self.config.sm_unknown),
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
            if self.eligible[position] && check_available(slot, self.reserved_for(position)).is_ok() {
                self.chosen.push(position);
                if self.chosen.len() == gpus_needed {
                    break;
                }
            }
        }
        if self.chosen.len() < gpus_needed {
            let passing: Vec<GpuName> = self.chosen.iter().map(|&p| self.table.slots[p].name()).collect();
            let refusals: Vec<_> = (0..gpu_count)
                .filter(|&p| self.eligible[p])
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

    fn task_gate(&self, task: &WaitingTask) -> Gate {
        let requirement_mib = task.requirement_mib;
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
            sm_projected_cap: self.config.sm_projected_cap,
            task_sm: sm_or_unknown(task.sm_estimate, self.config.sm_unknown),
        }
    }

    /// `chosen` := the lowest-index idle GPUs, at most `gpus_needed`.
    fn collect_idle(&mut self, gpus_needed: usize) -> bool {
        self.chosen.clear();
        let idle_max = self.config.idle_used_mib_max;
        for position in 0..self.table.slots.len() {
            let slot = &self.table.slots[position];
            let reserved_for = self.reserved_for(position);
            if self.eligible[position] && check_idle(slot, idle_max, self.fit_mib, reserved_for).is_ok() {
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
            if self.eligible[position] && check_shared(slot, gate, self.reserved_for(position)).is_ok() {
                self.chosen.push(position);
            }
        }
        self.chosen.len() >= gpus_needed
    }

    fn idle_shortfall(&self, gpus_needed: usize, prefix: &str) -> String {
        let idle_max = self.config.idle_used_mib_max;
        let mut passing = Vec::new();
        let mut refusals = Vec::new();
        for (position, slot) in self.table.slots.iter().enumerate().filter(|&(p, _)| self.eligible[p]) {
            match check_idle(slot, idle_max, self.fit_mib, self.reserved_for(position)) {
                Ok(()) => passing.push(slot.name()),
                Err(refusal) => refusals.push(refusal),
            }
        }
        format!("{prefix}: {}", reason::shortfall(gpus_needed, &passing, &refusals, Some("idle")))
    }

    fn shared_shortfall(&self, gpus_needed: usize, gate: &Gate) -> String {
        let mut passing = Vec::new();
        let mut refusals = Vec::new();
        for (position, slot) in self.table.slots.iter().enumerate().filter(|&(p, _)| self.eligible[p]) {
            match check_shared(slot, gate, self.reserved_for(position)) {
                Ok(()) => passing.push(slot.name()),
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
        let placing = Placing {
            assumed_mib: requirement_mib.unwrap_or(self.config.margin_without_figure_mib),
            exclusive,
            task_id: task.id.as_str(),
            sm: sm_or_unknown(task.sm_estimate, self.config.sm_unknown),
            end_ms: task.runtime_estimate_ms.map_or(u64::MAX, |ms| self.now_ms.saturating_add(ms)),
        };
        self.table.apply(&self.chosen, placing);
        let end_ms = task.gate.time_limit_ms.map(|limit| self.now_ms.saturating_add(limit));
        self.placed_ends.push((self.chosen.clone(), end_ms));
        let gpus = self.chosen.iter().map(|&p| self.table.slots[p].view.uuid.clone()).collect();
        Placement { task_id: task.id.clone(), gpus, exclusive, requirement_mib, reason }
    }

    /// Backfill: keep the GPUs the blocked head would most likely get first
    /// (rule in the `sched` module docs) away from the tasks behind it.
    fn reserve_for_head(&mut self, task: &'a WaitingTask) {
        assert!(self.head_id.is_none(), "only the first blocked task gets a reservation");
        let needs_idle = match &task.recovery {
            Some(recovery) => recovery.mode == RecoveryMode::Exclusive,
            None => {
                self.config.policy == Policy::Exclusive
                    || (self.config.policy != Policy::RoundRobin && self.needs_whole_gpus(task).is_some())
            }
        };
        // With `backfill_by_time`: what the head needs, kept for `reserved_for`, and when each
        // GPU is expected to have room for it (see `shadow`).
        self.head_need = self.config.backfill_by_time.then(|| self.head_need(task, needs_idle));
        let slots = &self.table.slots;
        let fit: Option<Vec<Option<u64>>> = self.head_need.as_ref().map(|need| {
            slots.iter().map(|slot| shadow::fit_time_ms(slot, need, self.now_ms, None)).collect()
        });
        let mut positions: Vec<usize> = (0..slots.len())
            .filter(|&p| self.eligible[p] && slots[p].exclusive_holder.is_none())
            .filter(|&p| slots[p].view.unavailable.is_none())
            .collect();
        if let Some(fit) = &fit {
            // The GPUs expected to have room first.
            positions
                .sort_by_key(|&p| (fit[p].unwrap_or(u64::MAX), Reverse(slots[p].free_effective_mib()), p));
        } else if needs_idle {
            positions.sort_by_key(|&p| (slots[p].tasks, slots[p].used_mib(), p));
        } else {
            policy::rank_by_free_desc(slots, &mut positions);
        }
        positions.truncate(task.gpus as usize);
        // Sticky: the same head keeps the GPUs it was given, unless (with time) others are
        // expected to fit it strictly sooner (rule in the module docs).
        if let Some(kept) = self.kept_reservation(task) {
            let fits_by = |set: &[usize]| -> Option<u64> {
                let fit = fit.as_ref()?;
                set.iter().map(|&p| fit[p]).collect::<Option<Vec<u64>>>()?.into_iter().max()
            };
            let sooner = match (fits_by(&positions), fits_by(&kept)) {
                (Some(new), Some(old)) => new < old,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if !sooner {
                positions = kept;
            }
        }
        for &position in &positions {
            self.reserved[position] = true;
        }
        // The expected shadow time is when the last of the head's GPUs is expected to have
        // room, unknown when any is; the guaranteed one, by time limits, `limit_shadow`.
        self.head_shadow_ms = fit.and_then(|fit| {
            positions.iter().map(|&p| fit[p]).collect::<Option<Vec<u64>>>()?.into_iter().max()
        });
        self.shadow_ms = self.limit_shadow(&positions);
        self.head_id = Some(task.id.as_str());
    }

    /// When every carma task on these GPUs (running, or placed earlier in this decision) will
    /// have ended by its time limit, at the latest; `None` when one has no limit, or when none
    /// is there (the head then waits for something without an end carma knows: foreign
    /// memory, SM activity).
    fn limit_shadow(&self, positions: &[usize]) -> Option<u64> {
        let uuids: Vec<&str> = positions.iter().map(|&p| self.table.slots[p].view.uuid.as_str()).collect();
        let running = self
            .running
            .iter()
            .filter(|t| t.gpus.iter().any(|g| uuids.contains(&g.as_str())))
            .map(|t| t.gate.time_limit_ms.map(|limit| t.launched_ms.saturating_add(limit)));
        let placed = self
            .placed_ends
            .iter()
            .filter(|(chosen, _)| chosen.iter().any(|p| positions.contains(p)))
            .map(|(_, end_ms)| *end_ms);
        let mut latest: Option<u64> = None;
        for end in running.chain(placed) {
            let end = end?;
            latest = Some(latest.map_or(end, |l| l.max(end)));
        }
        latest
    }

    /// The previous decision's GPUs for `task`, when it reserved for this task exactly
    /// `task.gpus` GPUs that are all here, usable (healthy, eligible for its MIG profile) and
    /// none held exclusively.
    fn kept_reservation(&self, task: &WaitingTask) -> Option<Vec<usize>> {
        let previous = self.previous_reservation.filter(|r| r.task_id == task.id)?;
        if previous.gpus.len() != task.gpus as usize {
            return None;
        }
        let slots = &self.table.slots;
        previous
            .gpus
            .iter()
            .map(|uuid| slots.iter().position(|s| s.view.uuid == *uuid && s.exclusive_holder.is_none()))
            .map(|p| p.filter(|&p| self.eligible[p] && slots[p].view.unavailable.is_none()))
            .collect()
    }

    /// The reservation this decision made, as GPU UUIDs.
    fn reservation(&self) -> Option<Reservation> {
        let task_id = self.head_id?;
        let gpus: Vec<String> = (0..self.reserved.len())
            .filter(|&p| self.reserved[p])
            .map(|p| self.table.slots[p].view.uuid.clone())
            .collect();
        (!gpus.is_empty()).then(|| Reservation { task_id: task_id.to_string(), gpus })
    }
}

impl Planner<'_> {
    /// What the blocked head needs from each of its GPUs, for the shadow time.
    fn head_need(&self, task: &WaitingTask, needs_idle: bool) -> shadow::HeadNeed {
        let (requirement_mib, margin_mib) = match &task.recovery {
            Some(recovery) => (Some(recovery.requirement_mib), self.config.recovery.step_mib),
            None if task.requirement_mib.is_some() => {
                (task.requirement_mib, self.config.margin_with_figure_mib)
            }
            None => (None, self.config.margin_without_figure_mib),
        };
        shadow::HeadNeed {
            idle: needs_idle,
            need_mib: requirement_mib.unwrap_or(0).saturating_add(margin_mib),
            sm: sm_or_unknown(task.sm_estimate, self.config.sm_unknown),
            sm_projected_cap: self.config.sm_projected_cap,
            sm_cap: self.config.sm_cap,
        }
    }
}

/// (requirement, exclusive, reason) of a selection in `chosen`, or why not.
type Selection = Result<(Option<u64>, bool, String), String>;
