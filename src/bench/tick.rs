//! `carma bench tick`: how long one tick's decision takes as the queue grows, without GPU
//! sampling: the pure core alone, and the core plus the mapping from a journal State.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::Config;
use crate::gpu::{GpuHealth, GpuSample, MigInfo, SmSource};
use crate::id::TaskId;
use crate::journal::{Event, ProcessRef, Record, State};
use crate::sched::{self, BENCH_NOW_MS, SchedInput};
use crate::spec::{ReferenceMib, TaskSpec};

use super::median_us;

/// One queue size.
#[derive(Debug, Serialize)]
pub struct TickBenchRow {
    /// Tasks waiting in the queue.
    pub waiting: usize,
    /// Attempts already running.
    pub running: usize,
    /// GPUs on the machine.
    pub gpus: usize,
    /// `sched::decide` alone, strict FIFO.
    pub decide_fifo_us: f64,
    /// `sched::decide` alone, with backfill (scans up to `backfill_depth_max` behind the head).
    pub decide_backfill_us: f64,
    /// The tick's whole decision step from a folded State: input mapping, decide, records.
    pub place_from_state_us: f64,
    /// Attempts the whole decision step placed (at most 16 per tick here).
    pub placed: usize,
}

/// Results of `carma bench tick`.
#[derive(Debug, Serialize)]
pub struct TickBench {
    /// One row per queue size, in the order asked.
    pub rows: Vec<TickBenchRow>,
}

/// Measures the decision for each `(waiting, running, gpus)`.
pub fn tick(sizes: &[(usize, usize, usize)]) -> TickBench {
    let rows = sizes.iter().map(|&(waiting, running, gpus)| row(waiting, running, gpus)).collect();
    TickBench { rows }
}

fn row(waiting: usize, running: usize, gpus: usize) -> TickBenchRow {
    let (views, queue, active, mut config) = sched::bench_fixture(waiting, running, gpus);
    let mut input = SchedInput {
        now_ms: BENCH_NOW_MS,
        gpus: &views,
        waiting: &queue,
        running: &active,
        rr_cursor: 0,
        config: &config,
        gate: Default::default(),
    };
    let runs = if waiting > 5_000 { 21 } else { 101 };
    let decide_fifo_us = median_us::<()>(runs, || {
        std::hint::black_box(sched::decide(&input));
        Ok(())
    })
    .unwrap_or(f64::NAN);
    let mut backfill = config.clone();
    backfill.backfill = true;
    input.config = &backfill;
    let decide_backfill_us = median_us::<()>(runs, || {
        std::hint::black_box(sched::decide(&input));
        Ok(())
    })
    .unwrap_or(f64::NAN);
    config.placements_per_tick_max = 16;
    let (state, samples) = folded_state(waiting, running, gpus);
    let full = Config { sched: config, ..Config::default() };
    let mut placed = 0;
    let place_from_state_us = median_us::<()>(runs, || {
        let out = crate::tick::place(
            &state,
            &samples,
            &BTreeMap::new(),
            &full,
            BENCH_NOW_MS,
            None,
            None,
            &BTreeMap::new(),
        );
        placed = out.attempts.len();
        std::hint::black_box(out);
        Ok(())
    })
    .unwrap_or(f64::NAN);
    TickBenchRow { waiting, running, gpus, decide_fifo_us, decide_backfill_us, place_from_state_us, placed }
}

/// A State as the journal would fold it: `gpus` 80 GiB GPUs with a sample each, `running`
/// launched tasks spread over them, and `waiting` queued tasks of mixed sizes.
fn folded_state(waiting: usize, running: usize, gpus: usize) -> (State, Vec<GpuSample>) {
    let mut state = State::default();
    let mut seq = 0;
    // Tasks were launched ten minutes ago (past the in-flight grace); samples are fresh.
    let mut apply = |state: &mut State, event: Event| {
        seq += 1;
        let age_ms = if matches!(event, Event::MetricSample { .. }) { 1_000 } else { 600_000 };
        state.apply(seq, &Record { time_ms: BENCH_NOW_MS - age_ms, event });
    };
    let samples: Vec<GpuSample> = (0..gpus).map(|g| sample(g, running / gpus.max(1))).collect();
    for s in &samples {
        apply(
            &mut state,
            Event::GpuDiscovered {
                uuid: s.uuid.clone(),
                index: s.index,
                name: s.name.clone(),
                memory_total_mib: s.memory_total_mib,
            },
        );
        apply(&mut state, Event::MetricSample { sample: s.clone() });
    }
    for i in 0..running + waiting {
        let task = TaskId::from_parts(1_700_000_000_000 + i as u64, i as u32);
        let memory_mib = Some(1024 + (i as u64 * 7919) % 30_000);
        apply(
            &mut state,
            Event::Submitted { task: task.clone(), submitter_uid: 1000, spec: spec(memory_mib) },
        );
        if i < running {
            let gpu = format!("GPU-bench-{:04}", i % gpus.max(1));
            apply(
                &mut state,
                Event::Placed {
                    task: task.clone(),
                    attempt: 1,
                    gpus: vec![gpu],
                    exclusive: false,
                    requirement_mib: memory_mib,
                    reason: String::new(),
                },
            );
            let supervisor =
                ProcessRef { pid: 10_000 + i as u32, start_time_ticks: 1, boot_id: "bench".into() };
            apply(&mut state, Event::Launched { task, attempt: 1, supervisor, adopted: false });
        }
    }
    (state, samples)
}

fn sample(index: usize, tasks_on_it: usize) -> GpuSample {
    let total = 81_920;
    let used = (tasks_on_it as u64 * 3000).min(total - 1024);
    GpuSample {
        uuid: format!("GPU-bench-{index:04}"),
        index: index as u32,
        name: "bench-80GB".into(),
        memory_total_mib: total,
        memory_used_mib: used,
        memory_free_mib: total - used,
        memory_reserved_mib: None,
        health: GpuHealth::Healthy,
        util_gpu_mean: None,
        util_last_timestamp_us: None,
        sm_active: Some(0.5),
        sm_active_source: SmSource::File,
        sm_occupancy: None,
        dram_active: None,
        power_mw: None,
        energy_mj: None,
        processes: Vec::new(),
        mig: MigInfo::not_supported(),
        unavailable: Vec::new(),
    }
}

fn spec(memory_mib: Option<u64>) -> TaskSpec {
    TaskSpec {
        name: "bench".into(),
        command: vec!["python".into(), "train.py".into()],
        workdir: "/tmp".into(),
        program: None,
        env_names: Vec::new(),
        export: None,
        output: None,
        error: None,
        gpus: 1,
        memory_mib,
        model_summary: None,
        batch_size: None,
        max_retries: 3,
        time_limit_ms: None,
        dataset: None,
        policy_hint: None,
        reference: ReferenceMib::default(),
        ..TaskSpec::default()
    }
}
