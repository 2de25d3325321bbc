//! The simulator end to end: the real tick on simulated GPUs, a virtual clock and a simulated
//! runner. Goals: the same seed gives the same journal; faults (tick crashes, lost exit
//! records, reboots) never break the invariants; and `carma report` reads what the run left.
//! Method: small synthetic profiles and traces written here (the reference traces in
//! ../shared are never read by tests), simulated in a temp directory.

use std::collections::BTreeMap;
use std::path::Path;

use carma::config::{Config, Sharing};
use carma::journal::{Event, Record};
use carma::sched::Policy;
use carma::sim::{self, Estimator, FaultPlan, GpuSet, ModelParams, SimOptions};

const PROFILES: &str = "workload,model,batch_size,gpus,exclusive_minutes,class,mem_actual_mib,est_horus_mib,est_faketensor_mib,est_gpumemnet_mib,smact_assumed\n\
    light,m,32,1,3,light,2000,1800,100,8000,0.3\n\
    cnn,m,64,1,8,medium,12000,11000,6000,16000,0.65\n\
    big,m,128,1,10,medium,24000,21000,10000,24000,0.65\n\
    duo,m,8,2,12,heavy,14000,5000,40000,16000,0.8\n";

fn trace_text() -> String {
    let names = ["cnn", "light", "big", "cnn", "duo", "light", "big", "cnn", "light", "big", "cnn", "light"];
    let mut text = String::from("offset_s,workload\n");
    for (i, name) in names.iter().enumerate() {
        text.push_str(&format!("{},{name}\n", i * 20));
    }
    text
}

fn options(dir: &Path, seed: u64, policy: Policy, estimator: Estimator) -> SimOptions {
    let profiles = sim::parse_profiles("profiles.csv", PROFILES).expect("profiles parse");
    let trace = sim::parse_trace("trace.csv", &trace_text(), &profiles).expect("trace parses");
    let mut config = Config::default();
    config.sched.policy = policy;
    config.tick.sharing = Sharing::Mps;
    SimOptions {
        trace,
        profiles,
        gpus: GpuSet::parse("2xA100-40GB").expect("gpu set"),
        config,
        estimator,
        params: ModelParams::default(),
        tick_ms: 5000,
        seed,
        faults: FaultPlan::default(),
        mps_caps: true,
        placement_pause_ms: 0,
        max_retries: 20,
        time_limits: sim::TimeLimits::default(),
        home_dir: dir.join(format!("home-{seed}-{}", policy.name())),
        reservations: Vec::new(),
    }
}

/// A temp dir in memory when the machine has one: the tick fsyncs three times per tick.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.expect("temp dir")
}

/// The records with the one wall-clock field (the tick's measured duration) zeroed.
fn normalized(records: Vec<Record>) -> Vec<Record> {
    records
        .into_iter()
        .map(|mut r| {
            if let Event::TickCompleted { duration_us, .. } = &mut r.event {
                *duration_us = 0;
            }
            r
        })
        .collect()
}

fn run(options: &SimOptions) -> (sim::SimSummary, Vec<Record>) {
    let summary = sim::simulate(options).expect("simulation runs");
    let (_, records) = sim::read_journal(&carma::home::Home::at(&options.home_dir)).expect("journal reads");
    (summary, normalized(records))
}

/// Goal: same seed, same journal; another seed gives other ids. Method: two runs per seed,
/// event sequences compared record by record (TickCompleted's measured duration is the only
/// wall-clock value a tick journals, and is zeroed).
#[test]
fn same_seed_gives_the_same_journal() {
    let dir = scratch();
    let a = options(dir.path(), 7, Policy::Magm, Estimator::GpuMemNetPaper);
    let b = SimOptions { home_dir: dir.path().join("again"), ..a.clone() };
    let (summary, first) = run(&a);
    let (_, second) = run(&b);
    assert!(summary.violations.is_empty(), "{:?}", summary.violations);
    assert!(first.len() > 100, "only {} records", first.len());
    assert_eq!(first, second);
    let c = SimOptions { seed: 8, home_dir: dir.path().join("other"), ..a };
    let (_, third) = run(&c);
    assert_ne!(first, third);
}

/// Goal: under tick crashes, lost exit records and reboots, no attempt runs twice, no task is
/// lost and every OOM is relaunched or recorded. Method: several seeds with high fault rates;
/// the simulator checks the invariants against its model and the journal after each run.
#[test]
fn faults_never_break_the_invariants() {
    let dir = scratch();
    let mut injected = sim::FaultCounts::default();
    for seed in 1..=3 {
        let mut options = options(dir.path(), seed, Policy::RoundRobin, Estimator::None);
        options.faults = FaultPlan { crash: 0.08, lost_exit: 0.1, reboot: 0.01 };
        let (summary, records) = run(&options);
        assert!(summary.violations.is_empty(), "seed {seed}: {:?}", summary.violations);
        assert!(!summary.bounded, "seed {seed}: stopped with work left");
        let finished = records.iter().filter(|r| matches!(r.event, Event::Finished { .. })).count();
        assert_eq!(finished, 12, "seed {seed}: every task finishes");
        injected.crashes += summary.faults.crashes;
        injected.lost_exits += summary.faults.lost_exits;
        injected.reboots += summary.faults.reboots;
    }
    assert!(injected.crashes > 0 && injected.lost_exits > 0 && injected.reboots > 0, "{injected:?}");
}

/// Goal: round-robin without memory knowledge crashes jobs, and each crash is journaled,
/// recovered and counted by the report; exclusive never crashes. Method: both policies on the
/// same trace, compared through `report::analyze`.
#[test]
fn report_counts_what_the_simulation_did() {
    let dir = scratch();
    let mut reports = BTreeMap::new();
    for policy in [Policy::Exclusive, Policy::RoundRobin] {
        let options = options(dir.path(), 3, policy, Estimator::None);
        let (summary, _) = run(&options);
        assert!(summary.violations.is_empty(), "{:?}", summary.violations);
        let journal = carma::home::Home::at(&options.home_dir).journal_path();
        let report = carma::report::analyze(&journal, policy.name(), true).expect("report");
        reports.insert(policy.name(), report);
    }
    let exclusive = &reports["exclusive"];
    let rr = &reports["round-robin"];
    assert_eq!((exclusive.tasks, exclusive.finished, exclusive.oom_crashes), (12, 12, 0));
    assert_eq!((rr.finished, rr.unfinished), (12, 0));
    assert!(rr.oom_crashes > 0, "round-robin with no memory check must crash something");
    assert_eq!(rr.relaunches, rr.oom_crashes);
    assert!(exclusive.energy_megajoules > 0.1, "{}", exclusive.energy_megajoules);
    assert!(exclusive.makespan_s.expect("makespan") > 1800.0);
    assert_eq!(exclusive.gpus.len(), 2);
    assert!(!exclusive.series.is_empty());
    let figures = dir.path().join("figures");
    let list: Vec<_> = reports.into_values().collect();
    let written = carma::report::write_plots(&list, &figures).expect("plots");
    assert_eq!(written.len(), 3);
    let svg = std::fs::read_to_string(&written[2]).expect("bar chart");
    assert!(svg.starts_with("<svg") && svg.contains("round-robin"), "{svg}");
}

/// Goal: a lone job takes its exclusive time plus start-up, and its energy is the integral of
/// the power law. Method: one light job on one GPU; compare with the model's formulas.
#[test]
fn a_lone_job_takes_its_exclusive_time() {
    let dir = scratch();
    let mut options = options(dir.path(), 1, Policy::Exclusive, Estimator::Oracle);
    options.trace.truncate(2);
    options.trace.remove(0);
    options.trace[0].offset_ms = 0;
    options.gpus = GpuSet::parse("1xA100-40GB").expect("gpu set");
    let (summary, _) = run(&options);
    assert!(summary.violations.is_empty(), "{:?}", summary.violations);
    let report = carma::report::analyze(&options.home_dir, "lone", false).expect("report");
    let expected_s = 3.0 * 60.0 + ModelParams::default().job.startup_s;
    let makespan_s = report.makespan_s.expect("makespan");
    // The first tick is at the submission; the job starts then.
    assert!((makespan_s - expected_s).abs() < 1.0, "{makespan_s} vs {expected_s}");
    let params = ModelParams::default();
    let busy_j = params.power_w(0.3) * 3.0 * 60.0 + params.power_w(0.0) * params.job.startup_s;
    let energy_j = report.energy_megajoules * 1e6;
    assert!((energy_j - busy_j).abs() / busy_j < 0.02, "{energy_j} J vs {busy_j} J");
}

/// Goal: the simulated users declare time limits the way the issue says: (start-up +
/// exclusive run time) × a factor in [1.2, 3], drawn from the seed, and the same seed gives the
/// same limits. Method: the Submitted records of one run.
#[test]
fn declared_time_limits_are_seeded_multiples_of_the_run_time() {
    let dir = scratch();
    let options = options(dir.path(), 5, Policy::Magm, Estimator::Oracle);
    let (_, records) = run(&options);
    let mut factors = Vec::new();
    for record in &records {
        if let Event::Submitted { spec, .. } = &record.event {
            let profile = &options.profiles[&spec.name];
            let run_ms = 40_000.0 + profile.exclusive_ms as f64;
            let factor = spec.time_limit_ms.expect("a declared limit") as f64 / run_ms;
            assert!((1.2..=3.0 + 1e-6).contains(&factor), "{}: factor {factor}", spec.name);
            factors.push(factor);
        }
    }
    assert_eq!(factors.len(), 12);
    assert!(factors.iter().any(|f| *f < 2.0) && factors.iter().any(|f| *f > 2.0), "{factors:?}");
    let again = SimOptions { home_dir: dir.path().join("again"), ..options };
    let (_, second) = run(&again);
    let limits = |records: &[Record]| -> Vec<Option<u64>> {
        records
            .iter()
            .filter_map(|r| match &r.event {
                Event::Submitted { spec, .. } => Some(spec.time_limit_ms),
                _ => None,
            })
            .collect()
    };
    assert_eq!(limits(&records), limits(&second));
}

/// Goal: with limits enforced, a job still running at its limit is stopped there, as the real
/// supervisor stops it, and the task fails with the supervisor's reason; without enforcement
/// the same run finishes everything. Method: limits of exactly the exclusive run time and
/// collocation under MPS, which stretches jobs past them.
#[test]
fn enforced_time_limits_stop_jobs_that_run_past_them() {
    let dir = scratch();
    let mut options = options(dir.path(), 2, Policy::Magm, Estimator::Oracle);
    options.time_limits = sim::TimeLimits { factor: Some((1.0, 1.0)), enforce: true };
    let (summary, records) = run(&options);
    assert!(summary.violations.is_empty(), "{:?}", summary.violations);
    let stopped = records
        .iter()
        .filter(|r| matches!(&r.event, Event::Failed { reason, .. } if reason.contains("time limit")))
        .count();
    assert!(stopped > 0, "collocated jobs overran exclusive-time limits");
    options.time_limits.enforce = false;
    options.home_dir = dir.path().join("unenforced");
    let (_, records) = run(&options);
    assert!(!records.iter().any(|r| matches!(r.event, Event::Failed { .. })));
}

/// Goal: the simulated NVML reports each job's SM utilisation per process, and the tick
/// journals SM samples whatever the configuration (issue 33, defect 1: with the default
/// `sm-projected-cap = 0` none were journaled, so `show`'s `sm activity` always said "no
/// reading"). Method: the same trace without and with the projected gate; both journal
/// samples, and with it every sample lies within the noise of a profile's standalone activity.
#[test]
fn sm_samples_are_journaled_with_or_without_the_projected_gate() {
    let dir = scratch();
    let without = options(dir.path(), 4, Policy::Magm, Estimator::GpuMemNetPaper);
    let (_, records) = run(&without);
    let per_process = records.iter().any(|r| match &r.event {
        Event::MetricSample { sample } => sample.processes.iter().any(|p| p.sm_util.is_some_and(|u| u > 0.0)),
        _ => false,
    });
    assert!(per_process, "MetricSample carries per-process SM utilisation");
    let default_samples = records.iter().filter(|r| matches!(r.event, Event::SmObserved { .. })).count();
    assert!(default_samples >= 12, "{default_samples} samples with the default configuration");
    let mut with = options(dir.path(), 4, Policy::Magm, Estimator::GpuMemNetPaper);
    with.config.sched.sm_projected_cap = 1.5;
    with.home_dir = dir.path().join("projected");
    let (summary, records) = run(&with);
    assert!(summary.violations.is_empty(), "{:?}", summary.violations);
    let samples: Vec<f32> = records
        .iter()
        .filter_map(|r| match r.event {
            Event::SmObserved { sm_util, .. } => Some(sm_util),
            _ => None,
        })
        .collect();
    assert!(samples.len() >= 12, "{} samples", samples.len());
    let noise = ModelParams::default().job.sm_noise as f32;
    let standalone = [0.3f32, 0.65, 0.8];
    for sample in samples {
        let near = standalone.iter().any(|s| (sample - s).abs() <= s * noise + 1e-4);
        assert!(near, "{sample} is no profile's standalone activity within ±{noise}");
    }
}

/// Goal: issue 13's starvation, end to end. With exclusive-first off, a two-GPU task whose
/// memory figure is the whole card (GPUMemNet's 40000 MiB for GPT-2 large) used to wait
/// forever and the run stopped with a broken invariant; now it runs and the liveness check
/// holds, under strict FIFO and with backfill.
#[test]
fn whole_card_task_is_not_starved_without_exclusive_first() {
    let dir = scratch();
    let profiles = "workload,model,batch_size,gpus,exclusive_minutes,class,mem_actual_mib,est_horus_mib,est_faketensor_mib,est_gpumemnet_mib,smact_assumed\n\
        cnn,m,64,1,8,medium,12000,11000,6000,16000,0.65\n\
        gpt2,m,8,2,10,heavy,27902,40000,40000,40000,0.8\n";
    for backfill in [false, true] {
        let mut options = options(dir.path(), 6, Policy::Magm, Estimator::GpuMemNetPaper);
        options.profiles = sim::parse_profiles("p.csv", profiles).expect("profiles");
        let text = "offset_s,workload\n0,cnn\n10,cnn\n20,gpt2\n30,cnn\n40,cnn\n50,cnn\n";
        options.trace = sim::parse_trace("t.csv", text, &options.profiles).expect("trace");
        options.config.sched.exclusive_first = false;
        options.config.sched.backfill = backfill;
        options.home_dir = dir.path().join(format!("starve-{backfill}"));
        let (summary, records) = run(&options);
        assert!(summary.violations.is_empty(), "backfill {backfill}: {:?}", summary.violations);
        assert!(!summary.bounded, "backfill {backfill}: stopped with work left");
        let finished = records.iter().filter(|r| matches!(r.event, Event::Finished { .. })).count();
        assert_eq!(finished, 6, "backfill {backfill}");
    }
}

/// Goal (issue 34): with `[sched.preemption] mode = "off"` no other preemption setting changes a
/// single record, however eager; with `mode = "requeue"` the same run preempts, queues the
/// victims again as new attempts, and still ends every task with the invariants holding.
/// Method: the same seed three times: the default config, mode off with every other key at its
/// most eager, and mode requeue with the same keys; journals compared record by record.
#[test]
fn preemption_off_changes_no_record_and_on_ends_every_task() {
    use carma::sched::PreemptionMode;
    let dir = scratch();
    let plain = options(dir.path(), 5, Policy::Magm, Estimator::Oracle);
    let mut off = SimOptions { home_dir: dir.path().join("off"), ..plain.clone() };
    let eager = &mut off.config.sched.preemption;
    (eager.requeue_default, eager.min_run_ms, eager.head_wait_ms, eager.priority_gap) = (true, 0, 0, 0);
    let mut on = SimOptions { home_dir: dir.path().join("on"), ..off.clone() };
    on.config.sched.preemption.mode = PreemptionMode::Requeue;
    let (_, plain_records) = run(&plain);
    let (_, off_records) = run(&off);
    assert_eq!(plain_records, off_records, "mode = \"off\" changed the journal");
    let (summary, on_records) = run(&on);
    assert!(summary.violations.is_empty(), "{:?}", summary.violations);
    let preempted = on_records.iter().filter(|r| matches!(r.event, Event::Preempted { .. })).count();
    assert!(preempted > 0, "an eager head-wait of 0 preempts something");
    let journal = carma::home::Home::at(&on.home_dir).journal_path();
    let report = carma::report::analyze(&journal, "on", false).expect("report");
    assert_eq!((report.tasks, report.finished, report.unfinished), (12, 12, 0));
    // A preemption whose preemptor started elsewhere during the grace is withdrawn, and a
    // withdrawn one is not counted.
    let withdrawn =
        on_records.iter().filter(|r| matches!(r.event, Event::PreemptionWithdrawn { .. })).count();
    assert_eq!(report.preemption.preemptions, (preempted - withdrawn) as u64);
    assert!(report.preemption.lost_gpu_hours > 0.0);
}

/// Goal: a requeueable task checkpoints in the simulation, and the simulated runner reports
/// each checkpoint so the journal holds one Checkpointed record for it, dated within its
/// attempt; a task that is not requeueable never checkpoints. Method: the small trace with
/// `requeue-default` on and a 2-minute period (tasks run 3 to 12 minutes), then off.
#[test]
fn requeueable_tasks_checkpoint_and_the_journal_says_so() {
    let dir = scratch();
    let mut on = options(dir.path(), 5, Policy::Magm, Estimator::GpuMemNetPaper);
    on.config.sched.preemption.requeue_default = true;
    on.params.job.checkpoint_every_s = 120.0;
    let (summary, records) = run(&on);
    assert!(summary.violations.is_empty(), "{:?}", summary.violations);
    let mut launched = BTreeMap::new();
    let mut checkpointed = 0u64;
    for record in &records {
        match &record.event {
            Event::Launched { task, attempt, .. } => {
                launched.insert((task.clone(), *attempt), record.time_ms);
            }
            Event::Checkpointed { task, attempt } => {
                let start = launched.get(&(task.clone(), *attempt)).expect("checkpointed after its launch");
                assert!(record.time_ms > *start, "{record:?}");
                checkpointed += 1;
            }
            _ => {}
        }
    }
    // 12 tasks of 3 to 12 minutes: each checkpoints at least once (33 without relaunches).
    assert!(checkpointed >= 33, "{checkpointed} checkpoints");
    assert_eq!(
        checkpointed, summary.checkpoints.checkpoints,
        "every checkpoint the model wrote is journaled"
    );

    let off = SimOptions {
        home_dir: dir.path().join("off"),
        params: on.params.clone(),
        ..options(dir.path(), 5, Policy::Magm, Estimator::GpuMemNetPaper)
    };
    let (summary, records) = run(&off);
    assert!(!records.iter().any(|r| matches!(r.event, Event::Checkpointed { .. })));
    assert_eq!(summary.checkpoints.checkpoints, 0);
}

/// Goal (issue 43): with `[sched.order] size = "fifo"` no other order setting changes a record,
/// and the deprecated `size-order-delay-ms` decides the same with the new keys at any value
/// (so the old configurations decide as before); with `size = "size"` the same run reorders,
/// names each waiting task's expected size in its pending reason, and still ends every task
/// with the invariants holding. Method: the same seed five times; journals compared record by
/// record.
#[test]
fn size_order_off_changes_no_record_and_on_ends_every_task() {
    use carma::sched::SizeOrder;
    let dir = scratch();
    let plain = options(dir.path(), 7, Policy::Magm, Estimator::GpuMemNetPaper);
    let mut off = SimOptions { home_dir: dir.path().join("off"), ..plain.clone() };
    (off.config.sched.order.overtake_max_ms, off.config.sched.order.head_start_ms) = (0, 36_000_000);
    let (_, plain_records) = run(&plain);
    assert_eq!(plain_records, run(&off).1, "size = \"fifo\" with other keys changed the journal");
    let mut legacy = SimOptions { home_dir: dir.path().join("legacy"), ..plain.clone() };
    legacy.config.sched.size_order_delay_ms = 5_400_000;
    let mut legacy_keys = SimOptions { home_dir: dir.path().join("legacy-keys"), ..legacy.clone() };
    (legacy_keys.config.sched.order.overtake_max_ms, legacy_keys.config.sched.order.head_start_ms) = (1, 1);
    assert_eq!(run(&legacy).1, run(&legacy_keys).1, "the deprecated key ignores [sched.order] with fifo");
    let mut on = SimOptions { home_dir: dir.path().join("on"), ..plain.clone() };
    on.config.sched.order.size = SizeOrder::Size;
    let (summary, on_records) = run(&on);
    assert!(summary.violations.is_empty(), "{:?}", summary.violations);
    assert_ne!(on_records, plain_records, "the size order changed nothing on this trace");
    let sized = on_records.iter().any(|r| match &r.event {
        Event::Pending { reason, .. } => reason.contains("; expected size ") && reason.contains(" GPU-h ("),
        _ => false,
    });
    assert!(sized, "pending reasons name the expected size");
    let journal = carma::home::Home::at(&on.home_dir).journal_path();
    let report = carma::report::analyze(&journal, "on", false).expect("report");
    assert_eq!((report.tasks, report.finished, report.unfinished), (12, 12, 0));
}
