//! Sizes and durations as users write them (`12GiB`, `90s`), into carma's units (MiB, ms).

use super::{MEMORY_MIB_MAX, TIME_LIMIT_MS_MAX};

/// Parses a memory size such as `12GiB`, `500 MiB`, `1.5GB` or `8192` (bare numbers are
/// MiB) into MiB, rounding up. Decimal units (KB, MB, GB, TB) are powers of 1000.
pub fn parse_memory_mib(text: &str) -> Result<u64, String> {
    let hint = "use a number with a unit, e.g. 12GiB or 500MiB";
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err(format!("memory {text:?} is negative; {hint}"));
    }
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && number.len() <= 20)
        .ok_or_else(|| format!("memory {text:?} is not a size; {hint}"))?;
    let bytes_per_unit: f64 = match unit.trim() {
        // One letter in either case is a power of 1024, as Slurm reads `16g`.
        "" | "MiB" | "M" | "Mi" | "m" => 1024.0 * 1024.0,
        "B" => 1.0,
        "KiB" | "K" | "Ki" | "k" => 1024.0,
        "GiB" | "G" | "Gi" | "g" => 1024.0 * 1024.0 * 1024.0,
        "TiB" | "T" | "Ti" | "t" => 1024f64.powi(4),
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => {
            return Err(format!("memory {text:?} has an unknown unit {:?}; {hint}", unit.trim()));
        }
    };
    let mib = (value * bytes_per_unit / (1024.0 * 1024.0)).ceil();
    if mib < 1.0 {
        return Err(format!("memory {text:?} is zero; {hint}"));
    }
    if mib > MEMORY_MIB_MAX as f64 {
        return Err(format!(
            "memory {text:?} is larger than any GPU (at most {} GiB); {hint}",
            MEMORY_MIB_MAX / 1024
        ));
    }
    Ok(mib as u64)
}

/// Parses a time limit in humantime form (`90s`, `2h 30m`) or in Slurm's forms with a `:` or
/// a `-` (`48:00:00`, `1-12:30`). A bare number is refused: it is minutes to Slurm and would
/// be a guess here.
pub fn parse_time_limit_ms(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "time_limit {text:?} has no unit; write {trimmed}m for minutes (as Slurm reads a bare number) or {trimmed}s"
        ));
    }
    let slurm = || match super::sbatch::slurm_time_ms(trimmed) {
        Ok(Some(ms)) if trimmed.contains([':', '-']) => Some(ms),
        _ => None,
    };
    let ms = match humantime::parse_duration(trimmed) {
        Ok(duration) => u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        Err(e) => slurm().ok_or_else(|| {
            format!("time_limit {text:?} is not a duration ({e}); use e.g. 90s, 45m, 2h or Slurm's 2:00:00")
        })?,
    };
    if ms > TIME_LIMIT_MS_MAX {
        return Err(format!("time_limit {text:?} is longer than a year; use e.g. 90s, 45m, 2h or 7days"));
    }
    if ms < 1000 {
        return Err(format!("time_limit {text:?} is under one second; use e.g. 90s, 45m or 2h"));
    }
    Ok(ms)
}
