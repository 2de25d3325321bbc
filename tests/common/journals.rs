//! Real journals for tests that damage them: written by the real code, not by hand.

use std::path::Path;

/// A journal written by the simulator: the real tick on simulated GPUs, over a thousand
/// records, so that it holds a snapshot.
pub fn simulated_journal(dir: &Path) -> Vec<u8> {
    use carma::sim::{self, Estimator, FaultPlan, GpuSet, ModelParams, SimOptions};
    let profiles_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/demo-profiles.csv");
    let profiles =
        sim::parse_profiles("demo-profiles.csv", &std::fs::read_to_string(profiles_path).unwrap()).unwrap();
    let names = ["resnet18", "mlp", "resnet18", "efficientnet", "mlp", "vit", "mlp", "resnet18"];
    let trace: String = names.iter().enumerate().map(|(i, n)| format!("{},{n}\n", i * 40)).collect();
    let trace = sim::parse_trace("trace.csv", &format!("offset_s,workload\n{trace}"), &profiles).unwrap();
    let mut config = carma::config::Config::default();
    config.sched.policy = carma::sched::Policy::Magm;
    let options = SimOptions {
        trace,
        profiles,
        gpus: GpuSet::parse("2xA100-40GB").unwrap(),
        config,
        estimator: Estimator::None,
        params: ModelParams::default(),
        tick_ms: 5000,
        seed: 5,
        faults: FaultPlan::default(),
        mps_caps: true,
        placement_pause_ms: 0,
        max_retries: 10,
        home_dir: dir.join("sim-home"),
        reservations: Vec::new(),
        time_limits: sim::TimeLimits::default(),
    };
    let summary = sim::simulate(&options).expect("simulation runs");
    assert!(summary.violations.is_empty(), "{:?}", summary.violations);
    std::fs::read(summary.journal).unwrap()
}

/// The records of the journal `bytes` written again, four to a commit as ticks write them, with
/// a snapshot every `every` records (the simulator's journal has none: the size rule defers it).
/// So most records lie before the snapshot, where no tick reads them.
pub fn with_snapshots(bytes: &[u8], dir: &Path, every: u64) -> Vec<u8> {
    use carma::journal::{Journal, store::ReadOpen};
    let (from, to) = (dir.join("from.redb"), dir.join("with-snapshots.redb"));
    std::fs::write(&from, bytes).unwrap();
    let Ok(ReadOpen::Ready(source)) = Journal::open_read_only(&from) else { panic!("a sound journal") };
    let mut records = Vec::new();
    source
        .for_each(1, |_, record| {
            records.push(record);
            Ok(true)
        })
        .unwrap();
    drop(source);
    Journal::create(&to).unwrap();
    let mut journal = Journal::open(&to).unwrap();
    journal.set_snapshot_every(every);
    let mut state = journal.load_state().unwrap();
    for chunk in records.chunks(4) {
        journal.append(chunk, &mut state).unwrap();
    }
    drop(journal);
    std::fs::read(&to).unwrap()
}
