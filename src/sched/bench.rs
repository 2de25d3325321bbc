//! A deterministic synthetic workload for timing [`decide`](super::decide)
//! (`carma bench tick`): no clock, no `rand`, a small LCG seeded by the sizes.

use super::{GpuView, Recovery, RecoveryMode, RunningTask, SchedConfig, SmBasis, WaitingTask};

/// The `now_ms` the fixture's launch times are relative to.
pub const BENCH_NOW_MS: u64 = 1_000_000_000;

/// 40 GiB, as an A100-40GB.
const BENCH_GPU_MEMORY_MIB: u64 = 40_960;

/// Builds `gpus` GPUs, `running` running tasks and `waiting` waiting tasks
/// (about 10% two-GPU, 15% without a memory figure, 3% in looser recovery) with the
/// default config. Same sizes, same fixture. Use with `now_ms = BENCH_NOW_MS`.
pub fn bench_fixture(
    waiting: usize,
    running: usize,
    gpus: usize,
) -> (Vec<GpuView>, Vec<WaitingTask>, Vec<RunningTask>, SchedConfig) {
    let mut rng = Lcg(0x5eed ^ (waiting as u64) << 32 ^ (running as u64) << 16 ^ gpus as u64);
    let gpu_count = gpus.max(1);
    let mut used_mib = vec![0u64; gpu_count];
    let running_tasks: Vec<RunningTask> = (0..running)
        .map(|i| {
            let first = rng.below(gpu_count as u64) as usize;
            let two = gpu_count > 1 && rng.below(10) == 0;
            let mut positions = vec![first];
            if two {
                positions.push((first + 1) % gpu_count);
            }
            let requirement_mib = 512 + rng.below(4096);
            let observed_mib = requirement_mib * (50 + rng.below(51)) / 100;
            for &p in &positions {
                used_mib[p] += observed_mib;
            }
            RunningTask {
                id: format!("r{i:06}"),
                gpus: positions.iter().map(|p| format!("GPU-{p:04}")).collect(),
                requirement_mib: Some(requirement_mib),
                launched_ms: BENCH_NOW_MS - rng.below(300_000),
                observed_mib: Some(observed_mib),
                exclusive: false,
                gate: Default::default(),
                sm_estimate: None,
                runtime_estimate_ms: None,
            }
        })
        .collect();
    let gpu_views = (0..gpus)
        .map(|p| {
            let foreign_mib = rng.below(2048);
            let used = (used_mib[p] + foreign_mib).min(BENCH_GPU_MEMORY_MIB);
            GpuView {
                uuid: format!("GPU-{p:04}"),
                index: p as u32,
                memory_total_mib: BENCH_GPU_MEMORY_MIB,
                memory_free_mib: BENCH_GPU_MEMORY_MIB - used,
                sm_active: Some(rng.below(90) as f32 / 100.0),
                sm_occupancy: Some(rng.below(60) as f32 / 100.0),
                dram_active: Some(rng.below(50) as f32 / 100.0),
                sample_age_ms: rng.below(5_000),
                memory_reserved_mib: 0,
                sm_basis: SmBasis::Measured,
                mig: None,
                unavailable: None,
            }
        })
        .collect();
    let waiting_tasks = (0..waiting).map(|i| bench_waiting(&mut rng, i)).collect();
    (gpu_views, waiting_tasks, running_tasks, SchedConfig::default())
}

fn bench_waiting(rng: &mut Lcg, i: usize) -> WaitingTask {
    let gpus = if rng.below(10) == 0 { 2 } else { 1 };
    let requirement_mib = if rng.below(100) < 15 { None } else { Some(512 + rng.below(8192)) };
    let recovery = (gpus == 1 && rng.below(100) < 3).then(|| Recovery {
        oom_count: 1,
        requirement_mib: requirement_mib.unwrap_or(4096) + 5120,
        mode: RecoveryMode::Looser,
    });
    WaitingTask {
        id: format!("w{i:06}"),
        submit_seq: i as u64,
        gpus,
        requirement_mib,
        recovery,
        gate: Default::default(),
        mig_profile: None,
        submitted_ms: BENCH_NOW_MS - 1_000_000 + i as u64,
        sm_estimate: None,
        runtime_estimate_ms: None,
        expected_run: None,
    }
}

/// Knuth's MMIX LCG; the high bits are good enough for fixtures.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "bound must be positive");
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}
