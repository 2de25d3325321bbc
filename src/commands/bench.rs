//! `carma bench`: speed measurements as a command, never as timed tests.

use std::io::Write;

use crate::bench;
use crate::cli::{BenchArgs, BenchWhat};

pub(super) fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.what {
        BenchWhat::FoldChild { home } => {
            let state = bench::fold_child(&home)?;
            std::hint::black_box(&state);
            writeln!(std::io::stdout().lock(), "{:.1}", bench::peak_rss_mib().unwrap_or(f64::NAN))?;
            Ok(())
        }
        BenchWhat::SimChild { trace, profiles, scratch } => {
            let wall_s = bench::sim_child_run(&trace, &profiles, &scratch)?;
            writeln!(
                std::io::stdout().lock(),
                "{wall_s:.3} {:.1}",
                bench::peak_rss_mib().unwrap_or(f64::NAN)
            )?;
            Ok(())
        }
        BenchWhat::Sim { shared, tasks, mean_gap, events, runs, dir, json } => {
            sim(shared, tasks, mean_gap, events, runs, dir, json)
        }
        BenchWhat::Adversary { seeds, first_seed, dir, json } => adversary(seeds, first_seed, dir, json),
        BenchWhat::Faults { seeds, first_seed, jobs, tasks, faults, dir, json } => {
            let plan = crate::sim::FaultPlan::parse(&faults).map_err(crate::error::Error::BadInput)?;
            if jobs == 0 || tasks == 0 {
                return Err(
                    crate::error::Error::BadInput("--jobs and --tasks must be at least 1".into()).into()
                );
            }
            let scratch = bench::faults_scratch(dir.as_deref())?;
            let options = bench::FaultsBenchOptions {
                seeds,
                first_seed,
                jobs,
                tasks,
                faults: plan,
                scratch: scratch.path().to_path_buf(),
            };
            let progress = super::progress::Progress::new("bench faults", seeds);
            let result = bench::faults(&options, &|done, bad| progress.step(done, bad));
            progress.finish();
            drop(scratch);
            let result = result?;
            if json {
                super::render::print_json(&result)?;
            } else {
                print_faults(&result)?;
            }
            match result.errors.first() {
                Some(run) => Err(anyhow::anyhow!(
                    "{} of {} runs could not run (seed {}: {}); see the output above",
                    result.errors.len(),
                    result.seeds,
                    run.seed,
                    run.violations.join("; ")
                )),
                None => Ok(()),
            }
        }
        BenchWhat::Estimate { iterations, json } => estimate(iterations, json),
        BenchWhat::Tick { json } => tick(json),
        BenchWhat::Supervisor { gpus, interval_ms, job_s, runs, json } => {
            supervisor(gpus, interval_ms, job_s, runs, json)
        }
        BenchWhat::Journal { events, burst, dir, json } => {
            let scratch = tempfile_dir(dir)?;
            let exe = std::env::current_exe().ok();
            let result = bench::journal(scratch.path(), events, burst, exe.as_deref())?;
            drop(scratch);
            if json {
                return super::render::print_json(&result);
            }
            print_journal(&result)
        }
    }
}

/// `carma bench sim`: the simulator over the shared traces, in child processes.
fn sim(
    shared: std::path::PathBuf,
    tasks: u32,
    mean_gap: std::time::Duration,
    events: u64,
    runs: u32,
    dir: Option<std::path::PathBuf>,
    json: bool,
) -> anyhow::Result<()> {
    let scratch = tempfile_dir(dir.or_else(|| {
        let shm = std::path::Path::new("/dev/shm");
        shm.is_dir().then(|| shm.to_path_buf())
    }))?;
    let options = bench::SimBenchOptions {
        shared,
        tasks,
        mean_gap_s: mean_gap.as_secs_f64(),
        report_events: events,
        runs,
        scratch: scratch.path().to_path_buf(),
        exe: std::env::current_exe().ok(),
    };
    let result = bench::sim(&options);
    drop(scratch);
    let result = result?;
    if json {
        return super::render::print_json(&result);
    }
    print_sim(&result)
}

/// `carma bench adversary`: hostile seeds; a violation is an error.
fn adversary(seeds: u64, first_seed: u64, dir: Option<std::path::PathBuf>, json: bool) -> anyhow::Result<()> {
    let scratch = tempfile_dir(dir.or_else(|| {
        let shm = std::path::Path::new("/dev/shm");
        shm.is_dir().then(|| shm.to_path_buf())
    }))?;
    let progress = super::progress::Progress::new("bench adversary", seeds);
    let result = bench::adversary(first_seed, seeds, scratch.path(), &|done, bad| progress.step(done, bad));
    progress.finish();
    drop(scratch);
    let result = result?;
    if json {
        super::render::print_json(&result)?;
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "adversary: {} seeds ({}..{}), {} ticks, {} hostile moves, {} honest submissions",
            result.seeds,
            result.first_seed,
            result.first_seed + result.seeds.saturating_sub(1),
            result.ticks,
            result.moves,
            result.honest_submissions
        )?;
        writeln!(
            out,
            "tick time: median {:.1} ms, p99 {:.1} ms, max {:.1} ms (measured, not asserted)",
            result.tick_ms_median, result.tick_ms_p99, result.tick_ms_max
        )?;
        writeln!(
            out,
            "full disks played: {} (0 unless --dir is a small filesystem with root's reserve)",
            result.full_disks
        )?;
        writeln!(out, "violations: {}", result.violations.len())?;
        for v in result.violations.iter().take(20) {
            writeln!(out, "  {}", crate::text::escape(v))?;
        }
    }
    match result.violations.first() {
        Some(first) => {
            Err(anyhow::anyhow!("{} invariant violations; the first: {first}", result.violations.len()))
        }
        None => Ok(()),
    }
}

/// `carma bench estimate`: each estimator on each summary.
fn estimate(iterations: u32, json: bool) -> anyhow::Result<()> {
    let result = bench::estimate(iterations);
    if json {
        return super::render::print_json(&result);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "carma bench estimate ({}; {} estimates each)", result.summary, result.iterations)?;
    writeln!(
        out,
        "{:<6} {:<10} {:>11} {:>9} {:>15}",
        "case", "estimator", "median µs", "p95 µs", "first call µs"
    )?;
    for r in &result.rows {
        writeln!(
            out,
            "{:<6} {:<10} {:>11.2} {:>9.2} {:>15.0}",
            r.case, r.estimator, r.median_us, r.p95_us, r.first_call_us
        )?;
    }
    writeln!(
        out,
        "parse of the ViT-L summary ({} bytes, JSON to validated summary): median {:.1} µs",
        result.vit_summary_bytes, result.vit_parse_median_us
    )?;
    Ok(())
}

/// `carma bench tick`: the decision core and placement from State.
fn tick(json: bool) -> anyhow::Result<()> {
    let result = bench::tick(&[(100, 100, 8), (1_000, 100, 8), (10_000, 100, 8), (10_000, 1_000, 16)]);
    if json {
        return super::render::print_json(&result);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "carma bench tick (medians, µs; GPU sampling excluded)")?;
    writeln!(
        out,
        "{:>8} {:>8} {:>5} {:>14} {:>16} {:>18} {:>7}",
        "waiting", "running", "gpus", "decide (fifo)", "decide (backfill)", "place from State", "placed"
    )?;
    for r in &result.rows {
        writeln!(
            out,
            "{:>8} {:>8} {:>5} {:>14.1} {:>16.1} {:>18.1} {:>7}",
            r.waiting,
            r.running,
            r.gpus,
            r.decide_fifo_us,
            r.decide_backfill_us,
            r.place_from_state_us,
            r.placed
        )?;
    }
    Ok(())
}

/// `carma bench supervisor`: the supervisor's CPU and memory with its GPU readings off and on.
fn supervisor(
    gpus: Option<String>,
    interval_ms: u64,
    job_s: u64,
    runs: u32,
    json: bool,
) -> anyhow::Result<()> {
    if interval_ms < crate::exec::gpu_watch::INTERVAL_MS_MIN || job_s == 0 || runs == 0 {
        return Err(crate::error::Error::BadInput(format!(
            "--interval-ms must be at least {} and --job-s and --runs at least 1",
            crate::exec::gpu_watch::INTERVAL_MS_MIN
        ))
        .into());
    }
    let scratch = tempfile_dir(None)?;
    let options = bench::SupervisorBenchOptions {
        gpus,
        interval_ms,
        job_s,
        runs,
        exe: std::env::current_exe()?,
        scratch: scratch.path().to_path_buf(),
    };
    let result = bench::supervisor(&options)?;
    drop(scratch);
    if json {
        return super::render::print_json(&result);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "carma bench supervisor: a {} s job on {} of {} (medians of {} runs each, side by side)",
        result.job_s, result.gpu, result.source, result.runs
    )?;
    writeln!(
        out,
        "{:>10} {:>9} {:>8} {:>10} {:>8} {:>9}",
        "readings", "cpu ms", "cpu %", "rss MiB", "wall s", "taken"
    )?;
    for side in &result.sides {
        let cadence =
            if side.interval_ms == 0 { "off".to_string() } else { format!("{} ms", side.interval_ms) };
        writeln!(
            out,
            "{cadence:>10} {:>9.1} {:>8.3} {:>10.1} {:>8.2} {:>9}",
            side.cpu_ms, side.cpu_percent, side.peak_rss_mib, side.wall_s, side.readings
        )?;
    }
    Ok(())
}

/// The bench's scratch directory under `dir` (else the temporary directory): root's own
/// (exclusive, random name, 0700; see `scratch`), removed when dropped or swept after a kill.
fn tempfile_dir(dir: Option<std::path::PathBuf>) -> anyhow::Result<crate::scratch::ScratchDir> {
    let base = dir.unwrap_or_else(std::env::temp_dir);
    Ok(crate::scratch::ScratchDir::new_in(&base, "carma-bench")?)
}

fn print_journal(r: &bench::JournalBench) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let floor = r.fsync_floor_us;
    writeln!(out, "carma bench journal (medians; floor = one fsync of a 1-byte file on the same disk)")?;
    writeln!(out, "  fsync floor                     {floor:>10.1} µs")?;
    writeln!(
        out,
        "  open + load + 1-event commit    {:>10.1} µs   {:>6.1}x floor",
        r.empty_commit_us,
        r.empty_commit_us / floor
    )?;
    writeln!(
        out,
        "  submit (validate + spool write) {:>10.1} µs   {:>6.1}x floor",
        r.submit_us,
        r.submit_us / floor
    )?;
    writeln!(out, "  ingest 1,000 spool files        {:>10.1} ms", r.ingest_1000_ms)?;
    writeln!(
        out,
        "  append, {} events per commit     {:>10.0} events/s ({:.1} µs per commit, {:.1}x floor)",
        r.append_batch_events,
        r.append_events_per_s,
        r.append_commit_us,
        r.append_commit_us / floor
    )?;
    writeln!(out, "  full fold of {} events     {:>10.1} ms", r.fold_events, r.fold_full_ms)?;
    writeln!(out, "  load (snapshot + tail)          {:>10.1} ms", r.load_with_snapshot_ms)?;
    match r.fold_peak_rss_mib {
        Some(mib) => writeln!(out, "  full fold peak RSS              {mib:>10.1} MiB")?,
        None => writeln!(out, "  full fold peak RSS              (unavailable)")?,
    }
    writeln!(
        out,
        "  tick that ingests nothing       {:>10.1} µs   {:>6.1}x floor",
        r.empty_tick_us,
        r.empty_tick_us / floor
    )?;
    writeln!(
        out,
        "  journal size                    {:>10.1} MiB",
        r.journal_bytes as f64 / (1024.0 * 1024.0)
    )?;
    let b = &r.burst;
    writeln!(
        out,
        "  tick with {} new spool files   {:>10.1} ms   ({:.2} ms per file, 4 fake GPUs)",
        b.tasks,
        b.tick_ms,
        b.tick_ms / f64::from(b.tasks.max(1))
    )?;
    writeln!(
        out,
        "  carma queue during that tick    {:>10.1} ms median, {:.1} ms max over {} runs, {} failed",
        b.queue_median_ms, b.queue_max_ms, b.queue_runs, b.queue_failures
    )?;
    Ok(())
}

fn print_sim(r: &bench::SimBench) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "carma bench sim (medians)")?;
    writeln!(out)?;
    writeln!(
        out,
        "reference traces (carma simulate defaults: 4xA100-40GB, oracle, 5 s ticks; child process)"
    )?;
    match &r.reference_skipped {
        Some(why) => writeln!(out, "  skipped: {why} (pass --shared DIR)")?,
        None => {
            writeln!(
                out,
                "  {:<24} {:>6} {:>5} {:>10} {:>14}",
                "trace", "tasks", "runs", "wall s", "peak RSS MiB"
            )?;
            for row in &r.reference {
                let rss = row.peak_rss_mib.map_or("-".into(), |m| format!("{m:.1}"));
                writeln!(
                    out,
                    "  {:<24} {:>6} {:>5} {:>10.3} {:>14}",
                    row.trace, row.tasks, row.runs, row.wall_s, rss
                )?;
            }
        }
    }
    let s = &r.synthetic;
    writeln!(out)?;
    writeln!(
        out,
        "synthetic trace: {} tasks, mean gap {:.0} s, {} ({} profiles)",
        s.tasks, s.mean_gap_s, s.gpus, s.profiles
    )?;
    writeln!(
        out,
        "  {:.2} s wall for {:.1} h virtual, {} ticks, {} events, journal {:.1} MiB, longest queue {}",
        s.wall_s, s.virtual_h, s.ticks, s.events, s.journal_mib, s.waiting_max
    )?;
    let rss = s.peak_rss_mib.map_or("unknown".to_string(), |r| format!("{r:.1} MiB"));
    writeln!(
        out,
        "  peak RSS {rss}; a cold State load of the final journal (what `carma tick` pays first): {:.1} ms",
        s.cold_load_ms
    )?;
    writeln!(out, "  {:>15} {:>8} {:>14} {:>11}", "waiting", "ticks", "median µs", "p95 µs")?;
    for b in &s.buckets {
        let range = if b.waiting_min == b.waiting_max {
            b.waiting_min.to_string()
        } else {
            format!("{}-{}", b.waiting_min, b.waiting_max)
        };
        writeln!(out, "  {range:>15} {:>8} {:>14.0} {:>11.0}", b.ticks, b.median_us, b.p95_us)?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "carma report on {} events ({:.1} MiB journal): {:.1} ms (median of {})",
        r.report.events, r.report.journal_mib, r.report.median_ms, r.report.runs
    )?;
    Ok(())
}

fn print_faults(r: &bench::FaultsBench) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "carma bench faults: {} seeds from {} ({} jobs); {} tasks per run on {}, {} / estimator {}",
        r.seeds, r.first_seed, r.jobs, r.tasks, r.gpus, r.policy, r.estimator
    )?;
    writeln!(
        out,
        "  faults per tick: crash {}, lost-exit {}, reboot {}; run times / {}",
        r.faults.crash, r.faults.lost_exit, r.faults.reboot, r.time_compression
    )?;
    writeln!(
        out,
        "  injected: {} tick crashes, {} lost exit records, {} reboots",
        r.injected.crashes, r.injected.lost_exits, r.injected.reboots
    )?;
    writeln!(
        out,
        "  journaled: {} OOM crashes, {} lost attempts (all recovered unless counted below)",
        r.recovered.oom_crashes, r.recovered.lost_attempts
    )?;
    writeln!(
        out,
        "  {} attempts stopped over their share, {} of them placed again (any with less than it used counts below)",
        r.recovered.memory_stops, r.recovered.memory_relaunches
    )?;
    writeln!(
        out,
        "  wall {:.1} s; one run {:.0} ms on average, {:.0} ticks; {} runs stopped with work left",
        r.wall_s, r.run_mean_ms, r.ticks_mean, r.bounded_runs
    )?;
    writeln!(out, "  {:<16} {:>6} {:>11}", "violation", "runs", "violations")?;
    let v = &r.violations;
    for (name, kind) in [
        ("double launch", v.double_launch),
        ("lost task", v.lost_task),
        ("unrecovered OOM", v.unrecovered_oom),
        ("starvation", v.starvation),
        ("other", v.other),
    ] {
        writeln!(out, "  {name:<16} {:>6} {:>11}", kind.runs, kind.violations)?;
    }
    writeln!(out, "  runs with a violation: {}", r.runs_with_violations)?;
    if let Some(first) = r.failing.first() {
        writeln!(out, "  failing seeds; replay one with")?;
        writeln!(out, "    {}", r.replay(first.seed))?;
    }
    for run in r.failing.iter().take(20) {
        writeln!(out, "  seed {}:", run.seed)?;
        for violation in run.violations.iter().take(3) {
            writeln!(out, "    {violation}")?;
        }
        if run.violations.len() > 3 {
            writeln!(out, "    … and {} more (--json lists up to 10)", run.violations.len() - 3)?;
        }
    }
    if r.failing.len() > 20 {
        let rest: Vec<String> = r.failing[20..].iter().map(|f| f.seed.to_string()).collect();
        writeln!(out, "  other failing seeds: {}", rest.join(" "))?;
    }
    for run in &r.errors {
        writeln!(out, "  seed {} did not run: {}", run.seed, run.violations.join("; "))?;
    }
    Ok(())
}
