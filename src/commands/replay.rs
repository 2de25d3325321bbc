//! `carma replay`: submit a trace in real time through the spool.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use crate::cli::ReplayArgs;
use crate::clock::{Clock, SystemClock};
use crate::error::Error;
use crate::home::Home;
use crate::inventory::Inventory;
use crate::replay::{self, MemoryFigure, ReplayPlan};
use crate::sim;

pub(super) fn run(home: &Home, args: ReplayArgs) -> anyhow::Result<()> {
    let bad = Error::BadInput;
    replay::check_speedup(args.speedup).map_err(bad)?;
    replay::check_template(&args.template).map_err(bad)?;
    let memory: MemoryFigure = args.memory.parse().map_err(bad)?;
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|e| Error::io(format!("cannot read {}", path.display()), e))
    };
    let (trace_origin, profiles_origin) =
        (args.trace.display().to_string(), args.profiles.display().to_string());
    let profiles = sim::parse_profiles(&profiles_origin, &read(&args.profiles)?).map_err(bad)?;
    let trace = sim::parse_trace(&trace_origin, &read(&args.trace)?, &profiles).map_err(bad)?;
    if !args.dry_run {
        home.require_initialized()?;
    }
    let cwd = std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    let workdir = args.workdir.as_deref().map_or(cwd.clone(), |dir| cwd.join(dir));
    let limits = Inventory::load(home).map(|inv| inv.limits()).unwrap_or_default();
    let plan =
        ReplayPlan { speedup: args.speedup, memory, template: args.template, max_retries: args.max_retries };
    let submissions = replay::plan(&trace_origin, &trace, &profiles, &plan, &workdir, limits).map_err(bad)?;

    let mut out = std::io::stdout().lock();
    if args.dry_run {
        for s in &submissions {
            let memory = s.spec.memory_mib.map_or("-".into(), |m| format!("{m} MiB"));
            writeln!(
                out,
                "+{:>10.2}s {} gpus={} memory={} -- {}",
                s.at.as_secs_f64(),
                s.workload,
                s.spec.gpus,
                memory,
                s.spec.command.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(" ")
            )?;
        }
        return Ok(());
    }
    if !args.parsable {
        let span = submissions.last().map_or(0.0, |s| s.at.as_secs_f64());
        writeln!(
            out,
            "replaying {} tasks over {span:.1} s of wall time (speedup {})",
            submissions.len(),
            args.speedup
        )?;
        out.flush()?;
    }
    replay::play(&submissions, Instant::now(), |s, elapsed| -> anyhow::Result<()> {
        let submission = crate::spec::Submission::bare(s.spec.clone());
        let id = crate::intake::submit(home, &submission, SystemClock.now_ms())?;
        if args.parsable {
            writeln!(out, "{id}")?;
        } else {
            writeln!(out, "+{:>10.2}s submitted task {id} ({})", elapsed.as_secs_f64(), s.workload)?;
        }
        out.flush()?;
        Ok(())
    })?;
    Ok(())
}
