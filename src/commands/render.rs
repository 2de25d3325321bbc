//! Shared rendering: JSON documents with a schema tag, and human units.

use std::io::Write;

use serde::Serialize;

/// Writes `value` as one pretty JSON document and a newline.
pub(super) fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    write_json(&mut std::io::stdout().lock(), value)
}

/// Writes `value` to `out` as one pretty JSON document and a newline.
pub(super) fn write_json(mut out: &mut dyn Write, value: &impl Serialize) -> anyhow::Result<()> {
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// MiB as GiB with one decimal, the unit people read GPU memory in.
pub(super) fn gib(mib: u64) -> String {
    format!("{:.1} GiB", mib as f64 / 1024.0)
}

/// A duration in milliseconds as a short human string ("1h 2m", "45s").
pub(super) fn duration_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let rounded = std::time::Duration::from_secs(if secs >= 3600 { secs - secs % 60 } else { secs });
    humantime::format_duration(rounded).to_string()
}

/// The width human tables should fit: the terminal's when stdout is one, else `$COLUMNS`,
/// else `None` (piped output is not cut, but stays one line per row).
pub(super) fn terminal_width() -> Option<usize> {
    // SAFETY: isatty and ioctl(TIOCGWINSZ) only read into the winsize we own.
    unsafe {
        if libc::isatty(libc::STDOUT_FILENO) == 1 {
            let mut size: libc::winsize = std::mem::zeroed();
            if libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) == 0 && size.ws_col > 0 {
                return Some(usize::from(size.ws_col));
            }
        }
    }
    std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse().ok()).filter(|&c: &usize| c >= 20)
}

/// Narrower than this, the last column of a table goes on a line of its own.
const LAST_WIDTH_MIN: usize = 32;

/// `text` cut to `width` characters, ending in `…` when cut.
pub(super) fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut cut: String = text.chars().take(width - 1).collect();
    cut.push('…');
    cut
}

/// A plain table: left-aligned columns two spaces apart, every cell escaped and on one line.
/// The last column takes what is left of `width` (when known) and is cut to fit; the others
/// are as wide as their widest cell, up to their cap.
pub(super) struct Columns {
    headers: Vec<&'static str>,
    caps: Vec<usize>,
    rows: Vec<Vec<String>>,
}

impl Columns {
    /// Columns named `headers`, each cut at its cap (the last one's cap is ignored).
    pub(super) fn new(headers: Vec<&'static str>, caps: Vec<usize>) -> Columns {
        assert_eq!(headers.len(), caps.len(), "one cap per column");
        Columns { headers, caps, rows: Vec::new() }
    }

    pub(super) fn push(&mut self, row: Vec<String>) {
        assert_eq!(row.len(), self.headers.len(), "one cell per column");
        let row = row.into_iter().map(|cell| crate::text::escape(&cell).into_owned()).collect();
        self.rows.push(row);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rendered table, header first, each line without trailing spaces.
    pub(super) fn render(&self, width: Option<usize>) -> String {
        let last = self.headers.len() - 1;
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(last) {
                widths[i] = widths[i].max(cell.chars().count().min(self.caps[i]));
            }
        }
        let fixed: usize = widths[..last].iter().map(|w| w + 2).sum();
        let last_width = width.map(|w| w.saturating_sub(fixed).max(8));
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i < last {
                    let cell = fit(cell, widths[i]);
                    line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
                } else if let (Some(w), Some(full)) = (last_width, width)
                    && w < LAST_WIDTH_MIN
                    && cell.chars().count() > w
                {
                    // Cut to a few characters the last column (a reason) says nothing: it gets
                    // a line of its own under the row instead.
                    line = format!("{}\n    {}", line.trim_end(), fit(cell, full.saturating_sub(4)));
                } else {
                    line.push_str(&last_width.map_or_else(|| cell.clone(), |w| fit(cell, w)));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Unix milliseconds as local time: `HH:MM` when it is today, else `MM-DD`.
pub(super) fn local_short(unix_ms: u64, now_ms: u64) -> String {
    let (then, today) = (local_tm(unix_ms), local_tm(now_ms));
    if (then.tm_year, then.tm_yday) == (today.tm_year, today.tm_yday) {
        format!("{:02}:{:02}", then.tm_hour, then.tm_min)
    } else {
        format!("{:02}-{:02}", then.tm_mon + 1, then.tm_mday)
    }
}

fn local_tm(unix_ms: u64) -> libc::tm {
    let seconds = libc::time_t::try_from(unix_ms / 1000).unwrap_or(libc::time_t::MAX);
    // SAFETY: localtime_r writes into the tm we own; zeroed is a valid tm.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&seconds, &mut tm);
        tm
    }
}

/// A duration as Slurm's squeue shows it: `M:SS`, `H:MM:SS`, or `D-HH:MM:SS`.
pub(super) fn clock_duration(ms: u64) -> String {
    let s = ms / 1000;
    let (days, hours, minutes, seconds) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if days > 0 {
        format!("{days}-{hours:02}:{minutes:02}:{seconds:02}")
    } else if hours > 0 {
        format!("{hours}:{minutes:02}:{seconds:02}")
    } else {
        format!("{minutes}:{seconds:02}")
    }
}

/// Text from outside (GPU names, NVML errors, reasons, Slurm's output) with control
/// characters escaped, so a name cannot move the cursor or clear the terminal.
pub(super) fn clean(text: &str) -> String {
    crate::text::escape(text).into_owned()
}

/// The same as [`clean`].
pub(super) fn escape(text: &str) -> String {
    clean(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_column_takes_what_is_left_or_a_line_of_its_own_and_every_cell_is_escaped() {
        let mut table = Columns::new(vec!["ID", "NAME", "REASON"], vec![8, 6, 0]);
        table.push(vec![
            "06h0f70r".into(),
            "a-very-long-name".into(),
            "GpuMemory: 12 GiB + 2 GiB > 9 GiB free on GPU1".into(),
        ]);
        table.push(vec!["06h0f71x".into(), "x\x1b[2J".into(), "two\nlines".into()]);
        let out = table.render(Some(40));
        assert_eq!(
            out,
            "ID        NAME    REASON\n06h0f70r  a-ver…\n    GpuMemory: 12 GiB + 2 GiB > 9 GiB f…\n06h0f71x  x\\x1b…  two\\nlines\n"
        );
        assert!(out.lines().all(|l| l.chars().count() <= 40), "{out}");
        assert!(table.render(None).contains("9 GiB free on GPU1"));
    }

    #[test]
    fn durations_read_like_squeue() {
        assert_eq!(clock_duration(65_000), "1:05");
        assert_eq!(clock_duration(3_723_000), "1:02:03");
        assert_eq!(clock_duration(90_061_000), "1-01:01:01");
    }

    /// Goal: a GPU name or NVML message cannot drive the terminal.
    #[test]
    fn clean_escapes_control_characters_only() {
        assert_eq!(super::clean("A100\u{1b}[2J\tx\n"), "A100\\x1b[2J\\tx\\n");
        assert_eq!(
            super::clean("NVIDIA H100 80GB HBM3 — MIG 1g.10gb"),
            "NVIDIA H100 80GB HBM3 — MIG 1g.10gb"
        );
    }
}
