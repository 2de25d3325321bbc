//! `carma simulate --copies K`: the configuration and the exclusive baseline on K jittered
//! copies of the trace, one line per copy, then the mean ± standard deviation [min, max] of
//! each metric and the configuration against exclusive.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::SimulateArgs;
use crate::sim::copies::{self, CopiesPlan, CopiesSummary, Spread};

pub(super) fn run(args: &SimulateArgs, copies: u32) -> anyhow::Result<()> {
    let options = super::simulate::options(args)?;
    let jitter_ms = u64::try_from(args.jitter.as_millis()).unwrap_or(u64::MAX);
    if jitter_ms > copies::JITTER_MS_MAX {
        return Err(crate::Error::BadInput("--jitter must be at most 24h".into()).into());
    }
    let plan = CopiesPlan { copies, jitter_ms, seed: args.seed };
    let keep = args.journal.as_deref().map(copies::journal_dir).transpose()?;
    let scratch = scratch_root(args.scratch.as_deref());
    let trace = args.trace.file_name().map_or("trace".into(), |n| n.to_string_lossy().into_owned());
    let summary = copies::run_copies(&options, plan, &trace, &scratch, keep.as_deref())?;
    if args.json {
        super::render::print_json(&summary)?;
    } else {
        print(&mut std::io::stdout().lock(), &summary)?;
    }
    if let Some(broken) = summary.runs.iter().find(|r| !r.violations.is_empty()) {
        anyhow::bail!(
            "internal error: copy {} (seed {}) broke {} invariant(s), first: {}; please report it with the command line",
            broken.copy,
            broken.seed,
            broken.violations.len(),
            broken.violations[0]
        );
    }
    Ok(())
}

/// `--scratch`, else `/dev/shm` (the tick fsyncs three times per tick), else the temp dir.
fn scratch_root(scratch: Option<&Path>) -> PathBuf {
    let shm = Path::new("/dev/shm");
    match scratch {
        Some(dir) => dir.to_path_buf(),
        None if shm.is_dir() => shm.to_path_buf(),
        None => std::env::temp_dir(),
    }
}

fn print(out: &mut impl Write, s: &CopiesSummary) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} tasks on {}, {} copies jittered by ±{:.0} s, seed {}",
        s.trace.escape_debug(),
        s.tasks,
        s.gpus,
        s.copies,
        s.jitter_s,
        s.seed
    )?;
    writeln!(out, "baseline: {}", s.baseline)?;
    writeln!(out)?;
    writeln!(out, "copy makespan h (excl)  vs excl  mean JCT min (excl)  energy MJ (excl)  OOM lost")?;
    for r in &s.runs {
        let (a, b) = (&r.run, &r.baseline);
        writeln!(
            out,
            "{:>4} {:>7.2} {:>9}  {:>+6.1}%  {:>8.1} {:>10}  {:>7.2} {:>8}  {:>3} {:>4}",
            r.copy,
            a.makespan_h,
            format!("({:.2})", b.makespan_h),
            pct(a.makespan_h, b.makespan_h),
            a.jct_mean_min,
            format!("({:.1})", b.jct_mean_min),
            a.energy_mj,
            format!("({:.2})", b.energy_mj),
            a.ooms,
            a.lost_tasks
        )?;
    }
    writeln!(out)?;
    writeln!(out, "mean ± sd [min, max]   this configuration       exclusive      vs exclusive")?;
    let v = &s.versus_exclusive;
    let rows: [(&str, Spread, Spread, Option<Spread>, usize); 6] = [
        ("makespan h", s.run.makespan_h, s.exclusive.makespan_h, Some(v.makespan_pct), 2),
        ("mean JCT min", s.run.jct_mean_min, s.exclusive.jct_mean_min, Some(v.jct_mean_pct), 1),
        ("energy MJ", s.run.energy_mj, s.exclusive.energy_mj, Some(v.energy_pct), 2),
        ("OOMs per run", s.run.ooms, s.exclusive.ooms, None, 1),
        ("lost tasks", s.run.lost_tasks, s.exclusive.lost_tasks, None, 1),
        ("max 1-GPU wait min", s.run.wait_1gpu_max_min, s.exclusive.wait_1gpu_max_min, None, 0),
    ];
    for (name, run, base, versus, digits) in rows {
        let versus = versus.map_or(String::new(), |p| format!("{:+.1} ± {:.1} %", p.mean, p.sd));
        let line = format!(
            "{name:<14} {:<31} {:<14} {versus}",
            full(run, digits),
            format!("{:.*} ± {:.*}", digits, base.mean, digits, base.sd)
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    writeln!(
        out,
        "vs exclusive, best / worst copy: makespan {:+.1} / {:+.1} %, energy {:+.1} / {:+.1} %",
        v.makespan_pct.min, v.makespan_pct.max, v.energy_pct.min, v.energy_pct.max
    )
}

fn full(s: Spread, digits: usize) -> String {
    format!("{:.*} ± {:.*} [{:.*}, {:.*}]", digits, s.mean, digits, s.sd, digits, s.min, digits, s.max)
}

fn pct(run: f64, base: f64) -> f64 {
    if base > 0.0 { (run / base - 1.0) * 100.0 } else { 0.0 }
}
