//! The dashboard's pages, rendered on the server from the published State: the queue with
//! pending reasons (arrays folded: `arrays`), the GPUs (`cards`), one task's detail, and the
//! report's figure. Pure: State in, HTML out.
//!
//! Everything a user wrote (names, commands, paths, reasons) goes through [`html`]: control and
//! bidirectional characters shown as escapes (as in the terminal, [`crate::text::escape`]), then
//! HTML's special characters as entities, so a task named `<script>` is text, never markup.
//! Environment values are not in State, and logs are never read: the pages show what
//! `carma queue`, `gpus` and `show` show every user.
//!
//! Every page is bounded, whatever users wrote: one piece of user text shows at most
//! [`TEXT_SHOWN_BYTES_MAX`](super::limits::TEXT_SHOWN_BYTES_MAX), a table at most [`ROWS_SHOWN_MAX`] rows, a page at most
//! [`PAGE_BYTES_MAX`]; each cut says so and how much it left out, e.g. `… (cut: 1.2 MiB more)`.

use std::fmt::Write;

use super::arrays::{self, Row};
use super::history::History;
use super::limits::{PAGE_BYTES_MAX, ROWS_SHOWN_MAX};
pub use super::words::{Names, ago, html};
use super::words::{bytes, cut_at, elapsed, mib, reason, state_word};
use crate::clock::format_ms;
use crate::journal::{State, Task};

/// Ended tasks the queue page lists, newest first.
pub const ENDED_SHOWN_MAX: usize = 50;

/// Bytes of the page around the body ([`layout`] without its title, version and body), with
/// room for the note of a cut.
const LAYOUT_BYTES_MAX: usize = 2048;

/// A page's body cut at a line so that the page stays within `budget` bytes, with a note.
fn cut_body(body: &str, budget: usize) -> std::borrow::Cow<'_, str> {
    if body.len() <= budget {
        return body.into();
    }
    let (kept, _) = cut_at(body, budget);
    let kept = kept.rfind('\n').map_or("", |end| &kept[..=end]);
    let note =
        format!("<p class=\"warn\">… (cut: {} more of this page)</p>\n", bytes(body.len() - kept.len()));
    format!("{kept}{note}").into()
}

/// The page around `body`. `version` is what `/version` answered when the page was made: the
/// script reloads the page when the answer changes. The page is at most [`PAGE_BYTES_MAX`]
/// bytes: a longer body is cut at a line, and says so.
pub fn layout(title: &str, version: &str, body: &str) -> String {
    let (title, version) = (html(title), html(version));
    let budget = PAGE_BYTES_MAX.saturating_sub(LAYOUT_BYTES_MAX + title.len() + version.len());
    let body = cut_body(body, budget);
    let page = format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="carma-version" content="{version}">
<title>{title} - carma</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/style.css">
<script src="/app.js" defer></script>
</head>
<body>
<nav><a href="/">queue</a> <a href="/report">report</a> <a href="/metrics">metrics</a></nav>
{body}
</body>
</html>
"#
    );
    debug_assert!(page.len() <= PAGE_BYTES_MAX, "a page of {} bytes", page.len());
    page
}

/// The front page: GPUs, then the queue.
/// `assumed_without_figure_mib`: what placement assumes a shared attempt with no figure holds.
pub fn index(
    state: &State,
    history: &History,
    now_ms: u64,
    names: Names,
    assumed_without_figure_mib: u64,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "<h1>carma</h1>");
    let ticked = match state.last_tick_ms {
        Some(ms) => format!("last tick {} ({} ago)", format_ms(ms), ago(now_ms.saturating_sub(ms))),
        None => "no tick yet".into(),
    };
    let _ = writeln!(out, "<p class=\"meta\">{}</p>", html(&ticked));
    if let Some(error) = &state.gpu_probe_error {
        let _ = writeln!(out, "<p class=\"warn\">GPUs unreadable: {}</p>", html(error));
    }
    super::cards::gpus(&mut out, state, history, now_ms, assumed_without_figure_mib);
    queue(&mut out, state, now_ms, names);
    out
}

fn queue(out: &mut String, state: &State, now_ms: u64, names: Names) {
    let active: Vec<&Task> = state.tasks.values().filter(|t| !t.status().is_terminal()).collect();
    let mut ended: Vec<&Task> = state.tasks.values().filter(|t| t.status().is_terminal()).collect();
    ended.sort_by_key(|t| std::cmp::Reverse(t.ended_ms().unwrap_or(0)));
    ended.truncate(ENDED_SHOWN_MAX);
    let _ = writeln!(out, "<h2>Queue</h2>");
    let _ = writeln!(out, "<p class=\"meta\">{} waiting or running</p>", active.len());
    let mut rows = arrays::fold(&active);
    let hidden = rows.len().saturating_sub(ROWS_SHOWN_MAX);
    rows.truncate(ROWS_SHOWN_MAX);
    table(out, "queue", &rows, now_ms, names);
    if hidden > 0 {
        let _ =
            writeln!(out, "<p class=\"meta\">… (cut: {hidden} more rows; carma queue lists them all)</p>");
    }
    let _ = writeln!(out, "<h2>Recently ended</h2>");
    table(out, "ended", &arrays::fold(&ended), now_ms, names);
}

fn table(out: &mut String, id: &str, rows: &[Row], now_ms: u64, names: Names) {
    let _ = writeln!(
        out,
        "<table id=\"{id}\">\n<thead><tr><th>ID</th><th>NAME</th><th>USER</th><th>STATE</th><th>GPUS</th><th>MEMORY</th><th>TIME</th><th>REASON</th></tr></thead>\n<tbody>"
    );
    for row in rows {
        match row {
            Row::Task(task) => task_row(out, task, now_ms, names),
            Row::Array(members) => arrays::row(out, members, now_ms, names),
        }
    }
    let _ = writeln!(out, "</tbody>\n</table>");
}

fn task_row(out: &mut String, task: &Task, now_ms: u64, names: Names) {
    let _ = writeln!(
        out,
        "<tr class=\"{class}\"><td><a href=\"/task/{id}\">{id}</a></td><td class=\"name\">{name}</td><td>{user}</td><td>{state}</td><td>{gpus}</td><td>{memory}</td><td>{time}</td><td>{reason}</td></tr>",
        class = task.status().as_str().to_lowercase(),
        id = html(task.id.as_str()),
        name = html(&task.spec.name),
        user = html(&names(task.submitter_uid)),
        state = state_word(task),
        gpus = task.spec.gpus,
        memory = task.spec.memory_mib.map_or("-".into(), mib),
        time = html(&elapsed(task, now_ms)),
        reason = html(&reason(task)),
    );
}

/// One task: what `carma show` shows, without environment values or logs.
pub fn task(state: &State, task: &Task, now_ms: u64, names: Names) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "<h1>Task {}</h1>", html(task.id.as_str()));
    let spec = &task.spec;
    let command: Vec<String> = spec.command.iter().map(|a| shell_word(a)).collect();
    let rows: Vec<(&str, String)> = vec![
        ("name", spec.name.clone()),
        ("user", names(task.submitter_uid)),
        ("state", state_word(task).into()),
        ("reason", reason(task)),
        ("submitted", format_ms(task.submitted_ms)),
        ("time", elapsed(task, now_ms)),
        ("command", command.join(" ")),
        ("working directory", spec.workdir.clone()),
        ("GPUs", spec.gpus.to_string()),
        ("memory", spec.memory_mib.map_or("not declared".into(), mib)),
        ("estimate", task.estimate.as_ref().map_or("-".into(), |e| mib(e.mib))),
        ("time limit", spec.time_limit_ms.map_or("none".into(), ago)),
        ("out-of-memory retries", format!("{} of {}", task.oom_count, spec.max_retries)),
    ];
    let _ = writeln!(out, "<table class=\"detail\" id=\"detail\">");
    for (key, value) in rows {
        let _ = writeln!(out, "<tr><th>{key}</th><td>{}</td></tr>", html(&value));
    }
    let _ = writeln!(out, "</table>\n<h2>Attempts</h2>");
    let _ = writeln!(
        out,
        "<table id=\"attempts\">\n<thead><tr><th>#</th><th>GPUS</th><th>PLACED</th><th>RAN</th><th>PEAK</th><th>SM</th><th>OUTCOME</th><th>PLACEMENT</th></tr></thead>\n<tbody>"
    );
    let hidden = task.attempts.len().saturating_sub(ROWS_SHOWN_MAX);
    for a in &task.attempts[hidden..] {
        let gpus: Vec<String> =
            a.gpus.iter().map(|uuid| crate::metrics::gpu_list::describe(state, uuid)).collect();
        let ran = match (a.launched_ms, a.ended_ms) {
            (Some(start), Some(end)) => ago(end.saturating_sub(start)),
            (Some(start), None) => format!("{} so far", ago(now_ms.saturating_sub(start))),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            a.number,
            html(&gpus.join(", ")),
            html(&format_ms(a.placed_ms)),
            html(&ran),
            a.peak_observed_mib.map_or("-".into(), mib),
            a.sm_util_mean().map_or("-".into(), |sm| format!("{:.0}%", sm * 100.0)),
            html(a.outcome.as_deref().unwrap_or("-")),
            html(&a.placement_reason),
        );
    }
    let _ = writeln!(out, "</tbody>\n</table>");
    if hidden > 0 {
        let _ = writeln!(
            out,
            "<p class=\"meta\">… (cut: {hidden} earlier attempts; carma show lists them all)</p>"
        );
    }
    out
}

/// An argument as a shell would need it quoted, so the shown command reads as typed.
fn shell_word(arg: &str) -> String {
    let plain = !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain { arg.to_string() } else { format!("'{}'", arg.replace('\'', "'\\''")) }
}

/// The report's page: its figure, produced by `report::svg` from the published log.
pub fn report(svg: &str, summary: &str) -> String {
    format!("<h1>Report</h1>\n<p class=\"meta\">{}</p>\n<div class=\"figure\">{svg}</div>\n", html(summary))
}

/// The stylesheet, served as `/style.css` (the Content-Security-Policy allows no inline style).
pub const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
nav a{margin-right:1em}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border-bottom:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
tr.running td,tr.placed td{background:#eef7ee}
tr.failed td{background:#fbeeee}
.gpus{display:flex;flex-wrap:wrap;gap:1em}
.gpu{border:1px solid #ccc;border-radius:4px;padding:.5em 1em;min-width:18em}
.gpu h3{margin:.2em 0}
.gpu.bad{border:2px solid #b00;background:#fff5f5}
.state{font-size:.8em;padding:.1em .5em;border-radius:3px;color:#fff;vertical-align:middle}
.state.ok{background:#2a7a2a}
.state.bad{background:#b00}
.health.bad{color:#b00;font-weight:bold}
.sparkline{display:block}
table.mig{font-size:.85em}
details ul{margin:.2em 0;padding-left:1.2em}
.spark{margin:.2em 0;font-size:.8em;color:#555}
.meta{color:#666}
.warn{color:#a00}
.figure svg{max-width:100%;height:auto}
";

/// The refresh script, served as `/app.js`: polls `/version` (a few bytes) every two seconds
/// and reloads the page when what it shows has changed.
pub const SCRIPT: &str = r#""use strict";
(function () {
  var meta = document.querySelector('meta[name="carma-version"]');
  if (!meta) { return; }
  var shown = meta.getAttribute("content");
  function poll() {
    fetch("/version", { cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (v) {
        if (v !== null && v.trim() !== shown) { window.location.reload(); } else { setTimeout(poll, 2000); }
      })
      .catch(function () { setTimeout(poll, 10000); });
  }
  setTimeout(poll, 2000);
})();
"#;
