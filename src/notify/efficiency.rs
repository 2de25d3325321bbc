//! Efficiency after a job ends, as Slurm's `seff` gives it, for GPUs: how much of its time
//! limit, its memory request and its GPUs' SM time a task used, and what it cost in
//! GPU-hours. `show` and `wait` print it for an ended task, and the END mail carries it (as
//! Slurm's does); everything comes from journaled facts (attempt times, the peak the tick
//! observed, SM samples), so it needs no journal scan.

use crate::journal::Task;

/// The lines for an ended task that ran, as (label, text); empty otherwise.
pub fn lines(task: &Task) -> Vec<(&'static str, String)> {
    let ran: Vec<_> = task.attempts.iter().filter(|a| a.launched_ms.is_some()).collect();
    let Some(last) = ran.last() else { return Vec::new() };
    if !task.status().is_terminal() {
        return Vec::new();
    }
    let wall = |a: &crate::journal::state::Attempt| {
        a.ended_ms.unwrap_or(task.ended_ms().unwrap_or(0)).saturating_sub(a.launched_ms.unwrap_or(0))
    };
    let mut lines = Vec::new();
    let last_wall = wall(last);
    let wall_text = match task.spec.time_limit_ms {
        Some(limit) if limit > 0 => format!(
            "{} of the {} limit ({}%)",
            duration_ms(last_wall),
            duration_ms(limit),
            last_wall * 100 / limit
        ),
        _ => format!("{} (no time limit)", duration_ms(last_wall)),
    };
    lines.push(("wall", wall_text));
    let peak = ran.iter().filter_map(|a| a.peak_observed_mib).max();
    let mut memory = match peak {
        Some(peak) => format!("peak {} per GPU", gib(peak)),
        None => "peak not observed".to_string(),
    };
    if let Some(declared) = task.spec.memory_mib {
        let share = peak.map(|p| format!(" ({}% used)", p * 100 / declared.max(1))).unwrap_or_default();
        memory.push_str(&format!("; requested {}{share}", gib(declared)));
    }
    if let Some(estimate) = &task.estimate {
        memory.push_str(&format!("; estimate {} (upper {})", gib(estimate.mib), gib(estimate.upper_mib)));
    }
    lines.push(("gpu memory", memory));
    let samples: u32 = ran.iter().map(|a| a.sm_util_samples).sum();
    let sum: f64 = ran.iter().map(|a| a.sm_util_sum).sum();
    let sm = if samples > 0 {
        format!("mean {:.0}% over {samples} sample(s)", sum / f64::from(samples) * 100.0)
    } else {
        "no reading (the tick journals one a minute while the job computes on a GPU it can read)".to_string()
    };
    lines.push(("sm activity", sm));
    let gpu_ms: u64 = ran.iter().map(|a| wall(a) * a.gpus.len() as u64).sum();
    lines.push(("gpu-hours", format!("{:.3} over {} attempt(s)", gpu_ms as f64 / 3_600_000.0, ran.len())));
    lines.push(("energy", energy(ran.iter().map(|a| a.energy_mj).sum())));
    lines
}

/// The attempts' share of their GPUs' energy (see `journal::energy`: split equally among the
/// attempts on a GPU at each reading).
fn energy(energy_mj: f64) -> String {
    if energy_mj <= 0.0 {
        return "no reading (its GPUs' energy counters gave none while it ran)".into();
    }
    let joules = energy_mj / 1000.0;
    let amount = if joules >= 1e6 {
        format!("{:.3} MJ", joules / 1e6)
    } else if joules >= 1e3 {
        format!("{:.3} kJ", joules / 1e3)
    } else {
        format!("{joules:.1} J")
    };
    format!("{amount}{}, its equal share of each GPU it shared", watt_hours(joules))
}

/// The energy in kWh, or Wh below 0.01 kWh, or nothing below 0.01 Wh, where a fixed
/// `{:.4} kWh` read "(0.0000 kWh)" for a short job.
fn watt_hours(joules: f64) -> String {
    let wh = joules / 3600.0;
    if wh >= 10.0 {
        format!(" ({:.2} kWh)", wh / 1000.0)
    } else if wh >= 0.01 {
        format!(" ({wh:.2} Wh)")
    } else {
        String::new()
    }
}

/// Memory for people, as `show` writes it.
fn gib(mib: u64) -> String {
    format!("{:.1} GiB", mib as f64 / 1024.0)
}

/// A duration as `show` writes it ("1h 2m", "45s").
fn duration_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let rounded = std::time::Duration::from_secs(if secs >= 3600 { secs - secs % 60 } else { secs });
    humantime::format_duration(rounded).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33, defect 11: 72 J read "72.0 J (0.0000 kWh)".
    #[test]
    fn small_energies_are_not_zero_kwh() {
        let shared = ", its equal share of each GPU it shared";
        assert_eq!(energy(72_000.0), format!("72.0 J (0.02 Wh){shared}"));
        assert_eq!(energy(1_000.0), format!("1.0 J{shared}"));
        assert_eq!(energy(100_000_000.0), format!("100.000 kJ (0.03 kWh){shared}"));
    }
}
