//! The words the dashboard's rooms share: user text made safe for HTML ([`html`]), sizes and
//! durations as people read them, and a task's state, time and reason as the queue shows them.
//!
//! Everything a user wrote (names, commands, paths, reasons) goes through [`html`]: control and
//! bidirectional characters shown as escapes (as in the terminal, [`crate::text::escape`]), then
//! HTML's special characters as entities, so a task named `<script>` is text, never markup.

use std::fmt::Write;

use super::limits::TEXT_SHOWN_BYTES_MAX;
use crate::journal::{Status, Task};

/// How a page names users: the system's user name, the uid in digits without one.
pub type Names<'a> = &'a dyn Fn(u32) -> String;

/// User text made safe for HTML text and attribute values, cut after
/// [`TEXT_SHOWN_BYTES_MAX`] bytes with a note saying how much more there was.
pub fn html(text: &str) -> String {
    let shown = crate::text::escape(text);
    let (kept, cut) = cut_at(&shown, TEXT_SHOWN_BYTES_MAX);
    let mut out = String::with_capacity(kept.len() + 32);
    for c in kept.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    if cut > 0 {
        let _ = write!(out, "… (cut: {} more)", bytes(cut));
    }
    out
}

/// `text` up to `max` bytes (at a character's start), and how many bytes were left out.
pub(super) fn cut_at(text: &str, max: usize) -> (&str, usize) {
    if text.len() <= max {
        return (text, 0);
    }
    let end = (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    (&text[..end], text.len() - end)
}

/// A byte count as people read it: `1.2 MiB`.
pub(super) fn bytes(count: usize) -> String {
    crate::text::bytes(u64::try_from(count).unwrap_or(u64::MAX))
}

/// The state as the queue shows it: `Held` for a held waiting task.
pub(super) fn state_word(task: &Task) -> &'static str {
    if task.held() && task.status() == Status::Pending { "Held" } else { task.status().as_str() }
}

/// Waiting: since submission; running: since launch; ended: how long the last attempt ran.
pub(super) fn elapsed(task: &Task, now_ms: u64) -> String {
    let last = task.attempts.last();
    let ms = match task.status() {
        Status::Pending => now_ms.saturating_sub(task.submitted_ms),
        Status::Placed | Status::Running => now_ms
            .saturating_sub(last.and_then(|a| a.launched_ms).or(last.map(|a| a.placed_ms)).unwrap_or(now_ms)),
        _ => match last.and_then(|a| Some((a.launched_ms?, a.ended_ms?))) {
            Some((start, end)) => end.saturating_sub(start),
            None => return "-".into(),
        },
    };
    ago(ms)
}

/// Why the task waits, why it ended, or where it was placed.
pub(super) fn reason(task: &Task) -> String {
    if let Some(reason) = task.pending_reason()
        && !task.status().is_terminal()
    {
        return reason.to_owned();
    }
    if task.status().is_terminal() {
        return task
            .end_reason()
            .map(str::to_owned)
            .or_else(|| task.attempts.last().and_then(|a| a.outcome.clone()))
            .unwrap_or_default();
    }
    task.active_attempt().map(|a| a.placement_reason.clone()).unwrap_or_default()
}

/// MiB as `8.0 GiB`.
pub(super) fn mib(value: u64) -> String {
    crate::text::bytes(value.saturating_mul(1 << 20))
}

/// A duration in the largest units that matter: `42s`, `3m 5s`, `2h 10m`, `3d 4h`.
pub fn ago(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}
