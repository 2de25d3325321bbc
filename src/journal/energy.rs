//! Energy per attempt, from the journal's GPU readings only: each MetricSample's energy
//! counter delta since the GPU's previous sample is split among the attempts running on that
//! GPU at that sample.
//!
//! The split is **equal**: the fold cannot tell a reading's processes apart by task (their
//! pids are the supervisor's business, not the journal's), so per-process SM shares are not
//! used. A task alone on its GPU gets the whole delta; two collocated tasks each get half,
//! whatever their shares of the SM were. A counter that goes backwards (a driver reload) is
//! a new start, not a negative delta.

use super::event::Event;
use super::state::State;
use crate::gpu::GpuSample;

impl State {
    /// Adds `sample`'s energy delta to the attempts running on its GPU. Called before the
    /// sample becomes the GPU's last one.
    pub(super) fn attribute_energy(&mut self, sample: &GpuSample) {
        let State { gpus, tasks, .. } = self;
        let Some(gpu) = gpus.get_mut(&sample.uuid) else { return };
        // Attempts that ended since the last sample leave the GPU's list here, so it stays
        // as short as what runs now.
        gpu.running.retain(|(id, number)| {
            tasks
                .get(id)
                .and_then(|t| t.attempts.iter().rev().find(|a| a.number == *number))
                .is_some_and(|a| a.ended_ms.is_none())
        });
        let previous = gpu.last.as_ref().and_then(|s| s.energy_mj);
        let (Some(now), Some(before)) = (sample.energy_mj, previous) else { return };
        if now < before || gpu.running.is_empty() {
            return;
        }
        let share = (now - before) as f64 / gpu.running.len() as f64;
        for (id, number) in &gpu.running {
            if let Some(attempt) = tasks.get_mut(id).and_then(|t| t.attempt_mut(*number)) {
                attempt.energy_mj += share;
            }
        }
    }

    /// Puts a launched attempt on the running list of each of its GPUs.
    pub(super) fn note_running(&mut self, event: &Event, applied: bool) {
        let Event::Launched { task, attempt, .. } = event else { return };
        if !applied {
            return;
        }
        let Some(gpus) =
            self.tasks.get(task).and_then(|t| t.attempts.iter().rev().find(|a| a.number == *attempt))
        else {
            return;
        };
        for uuid in gpus.gpus.clone() {
            if let Some(gpu) = self.gpus.get_mut(&uuid)
                && !gpu.running.iter().any(|(id, n)| id == task && n == attempt)
            {
                gpu.running.push((task.clone(), *attempt));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Goal: only launched attempts share a GPU's energy. Method: two attempts placed on one
    //! GPU, one launched; a 2 J delta goes wholly to it, none to the one that never started.
    //! A guard: the split already used the launched attempts alone when issue 32 was filed.
    use crate::id::TaskId;
    use crate::journal::{Event, ProcessRef, Record, State};

    #[test]
    fn an_attempt_that_never_launched_gets_no_energy() {
        let (idle, ran) = (TaskId::from_parts(1, 1), TaskId::from_parts(1, 2));
        let spec = crate::spec::parse_toml("t", "name = \"t\"\ncommand = [\"true\"]\n")
            .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
            .unwrap();
        let sample = |energy_mj| {
            let mut sample = crate::gpu::fake::tests::sample_minimal("GPU-a");
            sample.energy_mj = Some(energy_mj);
            Event::MetricSample { sample }
        };
        let placed = |task: &TaskId| Event::Placed {
            task: task.clone(),
            attempt: 1,
            gpus: vec!["GPU-a".into()],
            exclusive: false,
            requirement_mib: None,
            reason: "fits".into(),
        };
        let supervisor = ProcessRef { pid: 100, start_time_ticks: 1, boot_id: "b".into() };
        let mut state = State::default();
        let discovered = Event::GpuDiscovered {
            uuid: "GPU-a".into(),
            index: 0,
            name: "A100".into(),
            memory_total_mib: 40960,
        };
        for (seq, event) in [
            discovered,
            Event::Submitted { task: idle.clone(), submitter_uid: 1001, spec: spec.clone() },
            Event::Submitted { task: ran.clone(), submitter_uid: 1002, spec },
            placed(&idle),
            placed(&ran),
            Event::Launched { task: ran.clone(), attempt: 1, supervisor, adopted: false },
            sample(1_000),
            sample(3_000),
        ]
        .into_iter()
        .enumerate()
        {
            state.apply(seq as u64 + 1, &Record { time_ms: seq as u64, event });
        }
        assert_eq!(state.tasks[&idle].attempts[0].energy_mj, 0.0);
        assert_eq!(state.tasks[&ran].attempts[0].energy_mj, 2_000.0);
    }
}
