//! Shared rendering: JSON documents with a schema tag, and human units.

use std::io::Write;

use serde::Serialize;

/// Writes `value` as one pretty JSON document and a newline.
pub fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// MiB as GiB with one decimal, the unit people read GPU memory in.
pub fn gib(mib: u64) -> String {
    format!("{:.1} GiB", mib as f64 / 1024.0)
}

/// A duration in milliseconds as a short human string ("1h 2m", "45s").
pub fn duration_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let rounded = std::time::Duration::from_secs(if secs >= 3600 { secs - secs % 60 } else { secs });
    humantime::format_duration(rounded).to_string()
}
