//! `carma trace gen`: write a synthetic trace for the simulator.

use crate::cli::{TraceArgs, TraceWhat};
use crate::error::Error;
use crate::sim::{self, tracegen};

pub(super) fn run(args: TraceArgs) -> anyhow::Result<()> {
    let TraceWhat::Gen { profiles, tasks, mean_gap, mix, seed, out, users } = args.what;
    let users =
        users.as_deref().map(tracegen::parse_users).transpose().map_err(Error::BadInput)?.unwrap_or_default();
    let text = std::fs::read_to_string(&profiles)
        .map_err(|e| Error::io(format!("cannot read {}", profiles.display()), e))?;
    let profiles = sim::parse_profiles(&profiles.display().to_string(), &text).map_err(Error::BadInput)?;
    if !(1..=sim::workload::TRACE_ROWS_MAX as u32).contains(&tasks) {
        return Err(Error::BadInput(format!("--tasks must be 1..={}", sim::workload::TRACE_ROWS_MAX)).into());
    }
    let options =
        tracegen::TraceGen { tasks, mean_gap_s: mean_gap.as_secs_f64(), mix: parse_mix(&mix)?, seed, users };
    let rows = tracegen::generate(&profiles, &options).map_err(Error::BadInput)?;
    crate::exec::write_file_atomic(&out, tracegen::to_csv(&rows).as_bytes(), 0o644)
        .map_err(|e| Error::BadInput(format!("cannot write {}: {e}", out.display())))?;
    let span_h = rows.last().map_or(0.0, |r| r.offset_ms as f64 / 3_600_000.0);
    println!("wrote {} tasks over {span_h:.2} h to {}", rows.len(), out.display());
    Ok(())
}

fn parse_mix(text: &str) -> Result<[f64; 3], Error> {
    let mut mix = [0.0; 3];
    for part in text.split(',') {
        let parsed = part.split_once(':').and_then(|(name, w)| Some((name, w.parse::<f64>().ok()?)));
        let slot = match parsed {
            Some(("light", w)) => (0, w),
            Some(("medium", w)) => (1, w),
            Some(("heavy", w)) => (2, w),
            _ => return Err(Error::BadInput(format!("mix part {part:?}: use light:W,medium:W,heavy:W"))),
        };
        mix[slot.0] = slot.1;
    }
    Ok(mix)
}
