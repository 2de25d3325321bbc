//! Fault plans for the simulator, its seeded random numbers, and the invariants a run must
//! keep whatever the faults: no attempt runs twice, no task is lost, every out-of-memory
//! crash is either relaunched or finally recorded, and every task that fits an empty machine
//! is eventually placed (liveness: a scheduler that starves a task fails the run, naming the
//! task and the seed).

use std::collections::BTreeMap;

use super::model::SimModel;
use crate::journal::{Event, Record, State, Status};

/// How often each fault strikes, as a probability per tick.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FaultPlan {
    /// The tick dies after committing Placed or after launching (half each).
    pub crash: f64,
    /// A job that ended loses its exit record before the tick reads it.
    pub lost_exit: f64,
    /// The machine reboots between two ticks, killing every job.
    pub reboot: f64,
}

/// Faults injected in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Ticks made to die mid-way.
    pub crashes: u32,
    /// Exit records lost.
    pub lost_exits: u32,
    /// Reboots of the machine.
    pub reboots: u32,
}

impl FaultPlan {
    /// Parses `crash:0.02,lost-exit:0.01,reboot:0.001` (any subset; `none` for no faults).
    pub fn parse(text: &str) -> Result<FaultPlan, String> {
        let mut plan = FaultPlan::default();
        if text == "none" {
            return Ok(plan);
        }
        for part in text.split(',') {
            let (name, p) =
                part.split_once(':').ok_or_else(|| format!("fault {part:?}: use NAME:PROBABILITY"))?;
            let p: f64 = p
                .parse()
                .ok()
                .filter(|p| (0.0..=1.0).contains(p))
                .ok_or_else(|| format!("fault {part:?}: the probability must be in 0..=1"))?;
            match name {
                "crash" => plan.crash = p,
                "lost-exit" => plan.lost_exit = p,
                "reboot" => plan.reboot = p,
                _ => return Err(format!("unknown fault {name:?}; use crash, lost-exit or reboot")),
            }
        }
        Ok(plan)
    }

    /// Whether any fault has a non-zero probability.
    pub fn any(&self) -> bool {
        self.crash > 0.0 || self.lost_exit > 0.0 || self.reboot > 0.0
    }
}

/// SplitMix64: small, fast and fully determined by the seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`; the same seed gives the same sequence.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5eed_ca12_a000_0001)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p` (never for `p` ≤ 0).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}

/// The records [`check_invariants`] looks at; the others can be left unread, which keeps a
/// long simulation's check from holding millions of samples in memory.
pub fn checked_event(event: &Event) -> bool {
    match event {
        Event::Launched { .. }
        | Event::OomDetected { .. }
        | Event::Placed { .. }
        | Event::Failed { .. }
        | Event::MemoryExceeded { .. } => true,
        // A neighbour's out-of-memory beside a task over its share (`unrecorded_ooms`).
        Event::Stopped { outcome, .. } => outcome.contains(OOM_BESIDE),
        _ => false,
    }
}

/// How the Stopped of a job that ran out of memory beside a task over its share names it.
const OOM_BESIDE: &str = "out of GPU memory beside task";

/// Checks the run's invariants against the model and the journal; returns every broken one,
/// each naming `seed` so the run can be repeated.
pub fn check_invariants(model: &SimModel, state: &State, records: &[Record], seed: u64) -> Vec<String> {
    let mut broken = model.violations.clone();
    broken.extend(starved(model, records, seed));
    let mut launched: BTreeMap<(String, u32), u32> = BTreeMap::new();
    let mut oom_open: BTreeMap<String, u32> = BTreeMap::new();
    // A stop over the share: the task's attempt and the most it was seen to use, MiB.
    let mut stopped: BTreeMap<String, (u32, u64)> = BTreeMap::new();
    for record in records {
        match &record.event {
            Event::MemoryExceeded { task, attempt, used_mib, .. } => {
                let seen = stopped.entry(task.to_string()).or_insert((*attempt, 0));
                *seen = (*attempt, if seen.0 == *attempt { seen.1.max(*used_mib) } else { *used_mib });
            }
            Event::Placed { task, attempt, exclusive, requirement_mib, .. }
                if stopped.get(&task.to_string()).is_some_and(|(a, _)| a < attempt) =>
            {
                let (stop, used) = stopped.remove(&task.to_string()).unwrap_or_default();
                // The relaunch rule: the next attempt gets at least what the stopped one used
                // (a whole GPU, placed exclusive with no figure, is at least that).
                if requirement_mib.is_none_or(|r| r < used) && !(*exclusive && requirement_mib.is_none()) {
                    broken.push(format!(
                        "task {task}: attempt {attempt} placed with {} after the memory stop of attempt {stop} at {used} MiB",
                        requirement_mib.map_or("no figure".into(), |r| format!("{r} MiB"))
                    ));
                }
                oom_open.remove(&task.to_string()).filter(|a| a >= attempt).into_iter().for_each(|a| {
                    broken.push(format!("task {task}: attempt {attempt} placed after OOM of attempt {a}"))
                });
            }
            Event::Launched { task, attempt, .. } => {
                *launched.entry((task.to_string(), *attempt)).or_default() += 1;
            }
            Event::OomDetected { task, attempt, .. } => {
                oom_open.insert(task.to_string(), *attempt);
            }
            Event::Placed { task, attempt, .. } => {
                oom_open.remove(&task.to_string()).filter(|a| a >= attempt).into_iter().for_each(|a| {
                    broken.push(format!("task {task}: attempt {attempt} placed after OOM of attempt {a}"))
                });
            }
            Event::Failed { task, .. } => {
                oom_open.remove(&task.to_string());
            }
            _ => {}
        }
    }
    for ((task, attempt), count) in launched.iter().filter(|(_, c)| **c > 1) {
        broken.push(format!("task {task}: attempt {attempt} recorded Launched {count} times"));
    }
    for (task, attempt) in oom_open {
        broken.push(format!("task {task}: OOM of attempt {attempt} neither relaunched nor recorded failed"));
    }
    for task in model.truth.keys() {
        match crate::id::TaskId::parse(task).and_then(|id| state.tasks.get(&id)) {
            None => broken.push(format!("task {task}: submitted but never in the journal")),
            Some(t) if !t.status().is_terminal() => {
                broken.push(format!("task {task}: still {} at the end", t.status().as_str()))
            }
            Some(t) if t.status() == Status::Failed && t.end_reason().is_none() => {
                broken.push(format!("task {task}: failed without a reason"))
            }
            Some(_) => {}
        }
    }
    broken.extend(unrecorded_ooms(model, records));
    broken
}

/// Liveness: every task that fits an empty machine (it asks for at least one GPU and no more
/// than the machine has; an idle GPU takes any memory figure) was placed at least once.
fn starved(model: &SimModel, records: &[Record], seed: u64) -> Vec<String> {
    let placed: std::collections::BTreeSet<String> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Placed { task, .. } => Some(task.to_string()),
            _ => None,
        })
        .collect();
    let gpu_count = model.gpus.len() as u32;
    model
        .truth
        .iter()
        .filter(|(task, profile)| (1..=gpu_count).contains(&profile.gpus) && !placed.contains(*task))
        .map(|(task, profile)| {
            format!(
                "task {task} ({}, {} GPU(s)) fits an empty machine but was never placed (seed {seed})",
                profile.workload, profile.gpus
            )
        })
        .collect()
}

/// Every OOM exit the tick read must be journaled: as OomDetected, or, for a job that ran out
/// of memory beside a task over its share, as the Stopped that names it ("out of GPU memory
/// beside task X"), queued again without using a retry.
fn unrecorded_ooms(model: &SimModel, records: &[Record]) -> Vec<String> {
    let recorded: std::collections::BTreeSet<(String, u32)> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::OomDetected { task, attempt, .. } => Some((task.to_string(), *attempt)),
            Event::Stopped { task, attempt, outcome }
                if outcome.contains("out of GPU memory beside task") =>
            {
                Some((task.to_string(), *attempt))
            }
            _ => None,
        })
        .collect();
    model
        .jobs
        .iter()
        .filter(|(_, j)| j.end.as_ref().is_some_and(|e| e.oom.is_some() && e.reported && !e.record_lost))
        .filter(|(key, _)| !recorded.contains(*key))
        .map(|((task, attempt), _)| format!("task {task}: OOM of attempt {attempt} was never journaled"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse() {
        let plan = FaultPlan::parse("crash:0.5,reboot:0.01").expect("parses");
        assert_eq!(plan, FaultPlan { crash: 0.5, lost_exit: 0.0, reboot: 0.01 });
        assert!(FaultPlan::parse("crash:2").is_err());
        assert!(FaultPlan::parse("meteor:0.1").is_err());
        assert!(!FaultPlan::parse("none").expect("none").any());
    }

    /// Goal: the liveness check names a task that fits an empty machine and was never placed,
    /// with the seed, and spares one that asks for more GPUs than there are.
    #[test]
    fn liveness_names_the_starved_task_and_the_seed() {
        use crate::sim::{GpuSet, ModelParams, Profile};
        let gpus = GpuSet::parse("2xA100-40GB").expect("gpus");
        let mut model = SimModel::new(ModelParams::default(), &gpus, true, true, 0);
        let profile = |workload: &str, gpus: u32| Profile {
            workload: workload.into(),
            model: workload.into(),
            batch_size: 8,
            gpus,
            exclusive_ms: 60_000,
            class: "heavy".into(),
            mem_actual_mib: 27_902,
            est_horus_mib: 40_000,
            est_faketensor_mib: 40_000,
            est_gpumemnet_mib: 40_000,
            smact: 0.8,
            checkpoint_every_ms: None,
            restart_cost_ms: None,
        };
        model.truth.insert("066c4mfm02v6es0q".into(), profile("gpt2_large_2", 2));
        model.truth.insert("066c4mfm02v6es1q".into(), profile("too_big", 3));
        let broken = starved(&model, &[], 17);
        assert_eq!(
            broken,
            [
                "task 066c4mfm02v6es0q (gpt2_large_2, 2 GPU(s)) fits an empty machine but was never placed (seed 17)"
            ]
        );
    }

    /// Goal: an attempt placed after a memory stop with less than the stopped attempt used is
    /// named; one with at least that, or a whole GPU with no figure, is not.
    #[test]
    fn a_relaunch_below_what_the_stopped_attempt_used_is_named() {
        use crate::id::TaskId;
        use crate::sim::{GpuSet, ModelParams};
        let gpus = GpuSet::parse("2xA100-40GB").expect("gpus");
        let model = SimModel::new(ModelParams::default(), &gpus, true, true, 0);
        let id = |s: &str| TaskId::parse(s).expect("id");
        let stop = |task: &str, used_mib: u64| Record {
            time_ms: 0,
            event: Event::MemoryExceeded {
                task: id(task),
                attempt: 1,
                gpu: "GPU-0".into(),
                used_mib,
                declared_mib: 5_120,
                reason: "over".into(),
                share_source: None,
            },
        };
        let placed = |task: &str, attempt: u32, exclusive: bool, requirement_mib: Option<u64>| Record {
            time_ms: 0,
            event: Event::Placed {
                task: id(task),
                attempt,
                gpus: vec!["GPU-0".into()],
                exclusive,
                requirement_mib,
                reason: "again".into(),
            },
        };
        let (short, enough, whole) = ("066c4mfm02v6es0q", "066c4mfm02v6es1q", "066c4mfm02v6es2q");
        let records = [
            placed(short, 1, false, Some(5_120)),
            stop(short, 7_000),
            stop(short, 7_168),
            placed(short, 2, false, Some(7_000)),
            placed(enough, 1, false, None),
            stop(enough, 9_000),
            placed(enough, 2, false, Some(11_048)),
            placed(whole, 1, false, None),
            stop(whole, 9_000),
            placed(whole, 2, true, None),
        ];
        let broken = check_invariants(&model, &State::default(), &records, 1);
        assert_eq!(
            broken,
            [format!(
                "task {short}: attempt 2 placed with 7000 MiB after the memory stop of attempt 1 at 7168 MiB"
            )]
        );
    }

    #[test]
    fn rng_is_determined_by_seed() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert_eq!((a.next_u64(), a.next_u64()), (b.next_u64(), b.next_u64()));
        assert_ne!(Rng::new(8).next_u64(), Rng::new(7).next_u64());
    }
}
