//! The front page's GPU cards: one per physical GPU, by index, with its MIG instances inside
//! it. Each card says first whether the GPU may take work, in `carma gpus`'s words (`ok`,
//! `lost`, `xid 79`, `error`, `MIG`, `absent`), and why not; then memory three ways (held by
//! processes, reserved by carma for the attempts placed on it, free for new tasks), so a reader
//! sees why tasks wait; then the administrators' reservations holding it (`carma reserve`);
//! then an hour of memory and SM activity; then the tasks on it.

use std::fmt::Write;

use super::history::{History, Point};
use super::words::{ago, html, mib};
use crate::journal::State;
use crate::metrics::gpu_list::{self, GpuEntry};

/// The GPUs section of the front page.
pub(super) fn gpus(
    out: &mut String,
    state: &State,
    history: &History,
    now_ms: u64,
    assumed_without_figure_mib: u64,
) {
    let _ = writeln!(out, "<h2>GPUs</h2>\n<div class=\"gpus\" id=\"gpus\">");
    if state.gpus.is_empty() {
        let _ = writeln!(out, "<p>No GPU seen yet.</p>");
    }
    let newest_ms = state.gpus.values().filter(|g| g.last.is_some()).map(|g| g.last_ms).max();
    let entries = gpu_list::entries(state, assumed_without_figure_mib);
    let resolved = crate::journal::reservations::resolve_now(state, now_ms);
    for (at, entry) in entries.iter().enumerate().filter(|(_, e)| e.instance.is_none()) {
        let instances: Vec<&GpuEntry> =
            entries[at + 1..].iter().take_while(|e| e.instance.is_some()).collect();
        let points: Vec<Point> =
            history.gpus.get(&entry.gpu.uuid).map(|p| p.iter().copied().collect()).unwrap_or_default();
        let present = entry.gpu.last.is_some() && Some(entry.gpu.last_ms) == newest_ms;
        let reserved = crate::journal::reservations::holding(state, &resolved, &entry.gpu.uuid);
        card(out, entry, &instances, &points, present);
        // The reservations go last in the card, before it closes (`card` leaves it open).
        for line in reserved {
            let _ = writeln!(out, "<p class=\"reserved\">reserved: {}</p>", html(&line.text()));
        }
        let _ = writeln!(out, "</section>");
    }
    let _ = writeln!(out, "</div>");
}

fn card(out: &mut String, entry: &GpuEntry, instances: &[&GpuEntry], points: &[Point], present: bool) {
    let gpu = entry.gpu;
    let last = gpu.last.as_ref();
    let (word, why) = match last {
        None => ("absent".to_string(), Some("never sampled".to_string())),
        Some(_) if !present => ("absent".to_string(), Some("not seen by the last probe".to_string())),
        Some(sample) => (sample.state_word(), sample.health.reason().or_else(|| sample.mig_reason())),
    };
    let healthy = last.is_some_and(|s| s.health.is_healthy()) && present;
    let class = if healthy { "ok" } else { "bad" };
    let _ = writeln!(
        out,
        "<section class=\"gpu {class}\" data-uuid=\"{uuid}\">\n<h3>GPU {index}: {name} <span class=\"state {class}\">{word}</span></h3>",
        uuid = html(&gpu.uuid),
        index = gpu.index,
        name = html(&gpu.name),
        word = html(&word),
    );
    if let Some(why) = why {
        let takes = if healthy { "" } else { "; takes no work" };
        let _ = writeln!(out, "<p class=\"health {class}\">{}{takes}</p>", html(&why));
    }
    let sm = last.and_then(|s| s.sm_active).map_or("?".into(), |sm| format!("{:.0}%", sm * 100.0));
    let power = last
        .and_then(|s| s.power_mw)
        .map_or(String::new(), |mw| format!(", {:.0} W", f64::from(mw) / 1000.0));
    let _ = writeln!(out, "<p>{}</p>\n<p>SM {sm}{power}</p>", html(&memory_line(entry)));
    let _ = writeln!(out, "<p class=\"carma\">{}</p>", html(&carma_line(entry, healthy)));
    let newest = points.last().map_or(0, |p| p.time_ms);
    let span = newest.saturating_sub(points.first().map_or(0, |p| p.time_ms));
    let memory: Vec<(u64, f64)> =
        points.iter().map(|p| (p.time_ms, p.used_mib as f64 / p.total_mib.max(1) as f64)).collect();
    let sm_line: Vec<(u64, f64)> =
        points.iter().filter_map(|p| p.sm_active.map(|sm| (p.time_ms, f64::from(sm)))).collect();
    let over = if span == 0 { "now".to_string() } else { format!("last {}", ago(span)) };
    let _ = writeln!(
        out,
        "<p class=\"spark\">{}</p>\n<p class=\"spark\">{}</p>",
        spark("memory", &over, &memory),
        spark("SM activity", &over, &sm_line),
    );
    let _ = writeln!(out, "<p>tasks: {}</p>", task_links(entry));
    if !instances.is_empty() {
        mig_table(out, instances, healthy);
    }
}

/// One sparkline with its caption: `memory, last 12m 0s (now 25%)` and the line, or `SM
/// activity: no reading` with no box when the GPU gave none.
fn spark(what: &str, over: &str, points: &[(u64, f64)]) -> String {
    match points.last() {
        None => format!("{what}: no reading"),
        Some((_, now)) => {
            format!("{what}, {over} (now {:.0}%) {}", now.clamp(0.0, 1.0) * 100.0, sparkline(points, what))
        }
    }
}

/// `memory 1.2 GiB used by processes of 40.0 GiB`.
fn memory_line(entry: &GpuEntry) -> String {
    let used = entry.used_mib().map_or("?".into(), mib);
    format!("memory {used} used by processes of {}", mib(entry.total_mib()))
}

/// `reserved by carma 8.0 GiB (1 task), free for new tasks 32.0 GiB`.
fn carma_line(entry: &GpuEntry, healthy: bool) -> String {
    let count = entry.tasks.len();
    let tasks = if count == 1 { "1 task".to_string() } else { format!("{count} tasks") };
    let free = match entry.gpu.last.as_ref().and_then(|sample| sample.mig_reason()) {
        Some(mig) if healthy => format!("none ({mig})"),
        _ => free_text(entry, healthy),
    };
    format!("reserved by carma {} ({tasks}), free for new tasks {free}", mib(entry.reserved_mib))
}

/// What a new task may be given: `5.6 GiB`, `none` (the GPU takes no work), `none (held
/// exclusively)`.
fn free_text(entry: &GpuEntry, healthy: bool) -> String {
    if !healthy {
        "none".to_string()
    } else if entry.exclusive {
        "none (held exclusively)".to_string()
    } else {
        mib(entry.free_for_new_mib())
    }
}

fn task_links(entry: &GpuEntry) -> String {
    if entry.tasks.is_empty() {
        return "none".into();
    }
    let links: Vec<String> = entry
        .tasks
        .iter()
        .map(|t| {
            format!("<a href=\"/task/{id}\">{name}</a>", id = html(t.id.as_str()), name = html(&t.spec.name))
        })
        .collect();
    links.join(", ")
}

/// A GPU's MIG instances, each a placement target of its own.
fn mig_table(out: &mut String, instances: &[&GpuEntry], healthy: bool) {
    let _ = writeln!(
        out,
        "<table class=\"mig\">\n<thead><tr><th>MIG</th><th>PROFILE</th><th>USED</th><th>RESERVED BY CARMA</th><th>FREE FOR NEW TASKS</th><th>TASKS</th></tr></thead>\n<tbody>"
    );
    for entry in instances {
        let profile = entry.instance.and_then(|m| m.profile.as_deref()).unwrap_or("?");
        let free = free_text(entry, healthy);
        let _ = writeln!(
            out,
            "<tr data-uuid=\"{uuid}\"><td>{label}</td><td>{profile}</td><td>{used} of {total}</td><td>{reserved}</td><td>{free}</td><td>{tasks}</td></tr>",
            uuid = html(entry.uuid()),
            label = html(&entry.label()),
            profile = html(profile),
            used = entry.used_mib().map_or("?".into(), mib),
            total = mib(entry.total_mib()),
            reserved = mib(entry.reserved_mib),
            tasks = task_links(entry),
        );
    }
    let _ = writeln!(out, "</tbody>\n</table>");
}

/// A small line chart as inline SVG: `points` are (time, value in 0..=1), oldest first; time
/// spans the box from the oldest point to the newest, so a few minutes of history fill it as
/// an hour does. One point draws a level line; none, an empty box that says so.
pub(super) fn sparkline(points: &[(u64, f64)], title: &str) -> String {
    const W: f64 = 240.0;
    const H: f64 = 36.0;
    let first = points.iter().map(|p| p.0).min().unwrap_or(0);
    let span = points.iter().map(|p| p.0).max().unwrap_or(0).saturating_sub(first);
    let y = |v: f64| H - v.clamp(0.0, 1.0) * (H - 4.0) - 2.0;
    let mut line = String::new();
    match points {
        [] => {}
        [(_, v)] => {
            let _ = write!(line, "0.0,{y:.1} {W:.1},{y:.1}", y = y(*v));
        }
        _ => {
            for (t, v) in points {
                let x = t.saturating_sub(first) as f64 / span.max(1) as f64 * W;
                let _ = write!(line, "{x:.1},{:.1} ", y(*v));
            }
        }
    }
    let label = if points.is_empty() { format!("{title}: no reading yet") } else { title.to_string() };
    format!(
        r##"<svg class="sparkline" data-points="{count}" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="{label}"><rect width="{W}" height="{H}" fill="#f4f4f4"/><polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{line}"/></svg>"##,
        count = points.len(),
        label = html(&label),
        line = line.trim_end(),
    )
}
