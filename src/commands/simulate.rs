//! `carma simulate`: parse the inputs, run the simulator into a scratch state directory, move
//! the journal to `--journal`, print the summary and the report.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::SimulateArgs;
use crate::config::{Config, Sharing};
use crate::error::Error;
use crate::scratch::ScratchDir;
use crate::sim::{self, Estimator, FaultPlan, GpuSet, ModelParams, SimOptions, SimSummary, TimeLimits};

/// One simulation (`--copies` is `simulate_copies`, dispatched by `commands::run`).
pub(super) fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let mut options = options(&args)?;
    let Some(target) = &args.journal else { unreachable!("clap requires --journal without --copies") };
    // Root's own scratch (see `scratch`): exclusive, random, 0700; removed on drop, or swept by
    // the next simulation after a kill.
    let scratch = ScratchDir::new_in(&scratch_parent(target, args.scratch.as_deref()), ".carma-sim")?;
    options.home_dir = scratch.path().join("state");
    let summary = sim::simulate(&options)?;
    let journal = leave_journal(&summary.journal, target)?;
    drop(scratch);
    let mut out = std::io::stdout().lock();
    print_summary(&mut out, &summary, &journal)?;
    if !args.quiet {
        let label = journal.file_stem().map_or("simulation".into(), |s| s.to_string_lossy().into_owned());
        let report = crate::report::analyze(&journal, &label, false)?;
        writeln!(out)?;
        write!(out, "{}", crate::report::render_table(&[report], 0))?;
    }
    if !summary.violations.is_empty() {
        anyhow::bail!(
            "internal error: the simulation broke {} invariant(s), first: {}; please report it with the command line",
            summary.violations.len(),
            summary.violations[0]
        );
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error::io(format!("cannot read {}", path.display()), e))
}

/// Builds the simulation's options from the command line.
pub(super) fn options(args: &SimulateArgs) -> Result<SimOptions, Error> {
    let bad = Error::BadInput;
    let origin = |p: &Path| p.display().to_string();
    let profiles = sim::parse_profiles(&origin(&args.profiles), &read(&args.profiles)?).map_err(bad)?;
    let trace = sim::parse_trace(&origin(&args.trace), &read(&args.trace)?, &profiles).map_err(bad)?;
    let params = match &args.model {
        Some(path) => ModelParams::parse(&origin(path), &read(path)?).map_err(bad)?,
        None => ModelParams::default(),
    };
    let mut config: Config = match &args.config {
        Some(path) => Config::parse(&origin(path), &read(path)?)?,
        None => Config::default(),
    };
    if let Some(policy) = &args.policy {
        config.sched.policy = policy.parse().map_err(|e: crate::sched::ParseNameError| bad(e.to_string()))?;
    }
    config.tick.sharing = match args.sharing.as_str() {
        "streams" => Sharing::Streams,
        "mps" => Sharing::Mps,
        other => return Err(bad(format!("unknown sharing mode {other:?}; use streams or mps"))),
    };
    let time_limits =
        TimeLimits { factor: parse_time_limits(&args.time_limits)?, enforce: args.enforce_time_limits };
    if time_limits.enforce && time_limits.factor.is_none() {
        return Err(bad(
            "--enforce-time-limits needs time limits; drop it or set --time-limits MIN:MAX".into()
        ));
    }
    let tick_ms = u64::try_from(args.tick.as_millis()).unwrap_or(u64::MAX);
    if !(100..=3_600_000).contains(&tick_ms) {
        return Err(bad("--tick must be between 100ms and 1h".into()));
    }
    Ok(SimOptions {
        trace,
        profiles,
        gpus: GpuSet::parse(&args.gpus).map_err(bad)?,
        config,
        estimator: parse_estimator(&args.estimator)?,
        params,
        tick_ms,
        seed: args.seed,
        faults: FaultPlan::parse(&args.faults).map_err(bad)?,
        mps_caps: !args.no_mps_caps,
        placement_pause_ms: u64::try_from(args.placement_pause.as_millis()).unwrap_or(u64::MAX),
        max_retries: args.max_retries.min(crate::spec::RETRIES_MAX),
        time_limits,
        // Set by the caller, inside a scratch directory of its own.
        home_dir: PathBuf::new(),
        reservations: args
            .reservation
            .iter()
            .map(|text| crate::sim::reservations::SimReservation::parse(text).map_err(bad))
            .collect::<Result<_, _>>()?,
    })
}

/// `MIN:MAX` with 1 ≤ MIN ≤ MAX ≤ 100, `none`, or a named regime: `default` (1.2:3) or
/// `loose` (1.5:10, users who round their limits far up).
fn parse_time_limits(text: &str) -> Result<Option<(f64, f64)>, Error> {
    match text {
        "none" => return Ok(None),
        "default" => return Ok(Some(sim::TIME_LIMIT_FACTOR_DEFAULT)),
        "loose" => return Ok(Some(sim::TIME_LIMIT_FACTOR_LOOSE)),
        _ => {}
    }
    let range = text.split_once(':').and_then(|(low, high)| Some((low.parse().ok()?, high.parse().ok()?)));
    match range {
        Some((low, high)) if (1.0..=100.0).contains(&low) && (low..=100.0).contains(&high) => {
            Ok(Some((low, high)))
        }
        _ => Err(Error::BadInput(format!(
            "--time-limits {text:?}: use MIN:MAX with 1 <= MIN <= MAX <= 100 (e.g. 1.2:3), default, loose or none"
        ))),
    }
}

fn parse_estimator(name: &str) -> Result<Estimator, Error> {
    Ok(match name {
        "oracle" => Estimator::Oracle,
        "horus" => Estimator::Horus,
        "faketensor" => Estimator::FakeTensor,
        "gpumemnet-paper" => Estimator::GpuMemNetPaper,
        "none" => Estimator::None,
        _ => {
            return Err(Error::BadInput(format!(
                "unknown estimator {name:?}; use oracle, horus, faketensor, gpumemnet-paper or none"
            )));
        }
    })
}

/// Where the scratch state directory goes. The tick commits with an fsync each time (three per
/// tick), which on a disk costs far more than the simulation itself, so the scratch state
/// lives in memory (`/dev/shm`) when the machine has it, and next to the output otherwise;
/// `--scratch` chooses. The finished journal is then copied to `--journal` and synced once.
pub(super) fn scratch_parent(journal: &Path, scratch: Option<&Path>) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let parent = match scratch {
        Some(dir) => dir,
        None if shm.is_dir() => shm,
        None => journal.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")),
    };
    parent.to_path_buf()
}

/// Copies the journal out of the scratch directory to `to`: through a new file made with
/// `O_EXCL` beside it, synced, then renamed over `to`, so a link at `to` is replaced, never
/// written through.
fn leave_journal(from: &Path, to: &Path) -> Result<PathBuf, Error> {
    crate::scratch::copy_into_place(from, to)
        .map_err(|e| Error::io(format!("cannot copy the journal to {}", to.display()), e))?;
    Ok(to.to_path_buf())
}

fn print_summary(out: &mut impl Write, s: &SimSummary, journal: &Path) -> std::io::Result<()> {
    let virtual_h = (s.end_ms - s.start_ms) as f64 / 3_600_000.0;
    writeln!(
        out,
        "simulated {} tasks: {virtual_h:.2} h of virtual time in {} ticks, {:.2} s of wall time",
        s.tasks,
        s.ticks,
        s.wall.as_secs_f64()
    )?;
    if s.faults != Default::default() {
        writeln!(
            out,
            "faults injected: {} tick crashes, {} lost exit records, {} reboots ({} duplicate launches refused)",
            s.faults.crashes, s.faults.lost_exits, s.faults.reboots, s.refused_launches
        )?;
    }
    if s.bounded {
        writeln!(
            out,
            "stopped with tasks left that cannot start (see `carma report` unfinished) or at the time bound"
        )?;
    }
    match s.violations.len() {
        0 => writeln!(
            out,
            "invariants hold: no double launch, no lost task, every OOM relaunched or recorded"
        )?,
        n => {
            for v in &s.violations {
                writeln!(out, "INVARIANT BROKEN: {v}")?;
            }
            writeln!(out, "{n} invariant(s) broken")?;
        }
    }
    writeln!(out, "journal: {}", journal.display())
}
