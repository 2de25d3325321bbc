//! Hand-written SVG figures, styled like a paper's: per journal, a three-panel time series of
//! memory used, SM activity and power per GPU; for several journals, a bar chart of makespan,
//! energy and OOM crashes per policy. No plotting dependency: the figures are a few lines
//! and rectangles on labelled axes.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use super::{Report, SeriesPoint};

/// A panel: its axis label, axis maximum and the value it plots.
type Panel = (&'static str, f64, fn(&SeriesPoint) -> f64);
/// A bar-chart metric: its axis label and the value per report.
type Metric = (&'static str, fn(&Report) -> f64);
use crate::error::{Error, Result};

/// Points kept per line; longer series are thinned (every k-th point).
const POINTS_PER_LINE_MAX: usize = 500;
const COLORS: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const WIDTH: f64 = 720.0;
const PANEL_HEIGHT: f64 = 150.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 60.0;

/// Writes `DIR/<label>-timeseries.svg` per report and, for several, `DIR/policies.svg`.
pub fn write_plots(reports: &[Report], dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let mut written = Vec::new();
    for report in reports {
        let path = dir.join(format!("{}-timeseries.svg", file_stem(&report.label)));
        write(&path, &timeseries(report))?;
        written.push(path);
    }
    if reports.len() > 1 {
        let path = dir.join("policies.svg");
        write(&path, &bars(reports))?;
        written.push(path);
    }
    Ok(written)
}

fn write(path: &Path, text: &str) -> Result<()> {
    crate::exec::write_file_atomic(path, text.as_bytes(), 0o644).map_err(|e| {
        Error::io(format!("cannot write {}", path.display()), std::io::Error::other(e.to_string()))
    })
}

fn file_stem(label: &str) -> String {
    label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn header(out: &mut String, height: f64, title: &str) {
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="18" text-anchor="middle" font-size="13" font-weight="bold">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
}

/// Axes with a frame, ticks and labels for one panel whose top is `top`.
fn axes(out: &mut String, top: f64, y_max: f64, y_label: &str, x_max: f64, x_label: Option<&str>) {
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, top, top + PANEL_HEIGHT);
    let _ = writeln!(
        out,
        r#"<rect x="{x0}" y="{y0}" width="{}" height="{PANEL_HEIGHT}" fill="none" stroke="black"/>"#,
        x1 - x0
    );
    for (value, label) in labelled_ticks(y_max) {
        let y = y1 - PANEL_HEIGHT * value / y_max;
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" x2="{x1}" y1="{y}" y2="{y}" stroke="#ddd" stroke-width="0.5"/>"##
        );
        let _ = writeln!(out, r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#, x0 - 4.0, y + 4.0, label);
    }
    for (value, label) in labelled_ticks(x_max) {
        let x = x0 + (x1 - x0) * value / x_max;
        let _ = writeln!(out, r#"<line x1="{x}" x2="{x}" y1="{y1}" y2="{}" stroke="black"/>"#, y1 + 4.0);
        let _ = writeln!(out, r#"<text x="{x}" y="{}" text-anchor="middle">{label}</text>"#, y1 + 15.0);
    }
    let _ = writeln!(
        out,
        r#"<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        y0 + PANEL_HEIGHT / 2.0,
        escape(y_label)
    );
    if let Some(label) = x_label {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{label}</text>"#,
            (x0 + x1) / 2.0,
            y1 + 30.0
        );
    }
}

/// A bar's value label: whole numbers from 100 on, else one decimal.
fn value_label(value: f64) -> String {
    if value >= 100.0 || value == value.round() { format!("{value:.0}") } else { format!("{value:.1}") }
}

/// An axis tick's label, with as many decimals as its step needs, so that ticks 0.05 apart
/// read "0.05, 0.10" rather than "0.1, 0.1".
fn tick_label(value: f64, step: f64) -> String {
    let decimals =
        if step >= 1.0 || !step.is_finite() || step <= 0.0 { 0 } else { (-step.log10().floor()) as usize };
    format!("{value:.decimals$}")
}

/// Tick values from 0 to `max` with their labels.
fn labelled_ticks(max: f64) -> Vec<(f64, String)> {
    let step = nice_step(max, 5.0);
    ticks(max).into_iter().map(|v| (v, tick_label(v, step))).collect()
}

/// The three-panel figure of one report (memory, SM activity, power per GPU), as SVG text;
/// what `write_plots` writes to a file and `carma serve` puts in its report page.
pub fn timeseries(report: &Report) -> String {
    // GPUs that report no power (fake ones, some drivers) get no power panel: an axis of 0 to
    // 1 W with a flat line would read as a measured idle GPU.
    let has_power = report.series.values().flatten().any(|p| p.3 > 0.0);
    let panel_count = if has_power { 3 } else { 2 };
    let height =
        40.0 + panel_count as f64 * (PANEL_HEIGHT + 40.0) + 20.0 + if has_power { 0.0 } else { 20.0 };
    let mut out = String::new();
    let title =
        if has_power { "memory, SM activity and power per GPU" } else { "memory and SM activity per GPU" };
    header(&mut out, height, &format!("{}: {title}", report.label));
    let span_s = report.series.values().flatten().map(|p| p.0).fold(0.0, f64::max);
    let (unit_s, unit) = time_unit(span_s);
    let x_max = nice((span_s / unit_s).max(0.01));
    let x_label = format!("time since first submission ({unit})");
    let mem_max = report.gpus.iter().map(|g| g.memory_used_mean_mib).fold(0.0, f64::max);
    let mem_top = report.series.values().flatten().map(|p| p.1).fold(mem_max, f64::max) / 1024.0;
    let power_top = report.series.values().flatten().map(|p| p.3).fold(1.0, f64::max);
    let panels: [Panel; 3] = [
        ("memory used (GiB)", nice(mem_top), |p| p.1 / 1024.0),
        ("SM activity", 1.0, |p| p.2),
        ("power (W)", nice(power_top), |p| p.3),
    ];
    for (i, (label, y_max, value)) in panels.iter().take(panel_count).enumerate() {
        let top = 40.0 + i as f64 * (PANEL_HEIGHT + 40.0);
        let x_label = (i + 1 == panel_count).then_some(x_label.as_str());
        axes(&mut out, top, *y_max, label, x_max, x_label);
        for (k, (gpu, points)) in report.series.iter().enumerate() {
            let step = points.len().div_ceil(POINTS_PER_LINE_MAX).max(1);
            let path: Vec<String> = points
                .iter()
                .step_by(step)
                .map(|p| {
                    let x = LEFT + (WIDTH - LEFT - RIGHT) * (p.0 / unit_s / x_max);
                    let y = top + PANEL_HEIGHT * (1.0 - (value(p) / y_max).clamp(0.0, 1.0));
                    format!("{x:.1},{y:.1}")
                })
                .collect();
            let color = COLORS[k % COLORS.len()];
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{color}" stroke-width="1" points="{}"/>"#,
                path.join(" ")
            );
            if i == 0 {
                let x = LEFT + 10.0 + 70.0 * k as f64;
                let _ = writeln!(
                    out,
                    r#"<rect x="{x}" y="{}" width="10" height="3" fill="{color}"/>"#,
                    top + 8.0
                );
                let _ = writeln!(out, r#"<text x="{}" y="{}">GPU{gpu}</text>"#, x + 14.0, top + 12.0);
            }
        }
    }
    if !has_power {
        let y = 40.0 + 2.0 * (PANEL_HEIGHT + 40.0) + 10.0;
        let _ =
            writeln!(out, r#"<text x="{LEFT}" y="{y}">power: no readings from these GPUs; not drawn</text>"#);
    }
    out.push_str("</svg>\n");
    out
}

/// The time axis' unit for a run of `span_s` seconds, as (seconds per unit, name): seconds
/// under 2 minutes, minutes under 2 hours, hours under 2 days, then days, so a 5-minute run
/// is not drawn on an axis of 0.1 h.
fn time_unit(span_s: f64) -> (f64, &'static str) {
    match span_s {
        s if s < 120.0 => (1.0, "s"),
        s if s < 7_200.0 => (60.0, "min"),
        s if s < 172_800.0 => (3_600.0, "h"),
        _ => (86_400.0, "days"),
    }
}

/// A round tick step that splits `v` into at most `parts` intervals: 1, 2 or 5 times a power
/// of ten, the steps a printed figure uses.
fn nice_step(v: f64, parts: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let raw = v / parts;
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|m| *m >= raw).unwrap_or(10.0 * magnitude)
}

/// A round axis maximum at or above `v`: a whole number of [`nice_step`]s.
fn nice(v: f64) -> f64 {
    let step = nice_step(v, 5.0);
    (v / step).ceil().max(1.0) * step
}

/// Tick values from 0 to `max` (a [`nice`] maximum) at its round step.
fn ticks(max: f64) -> Vec<f64> {
    let step = nice_step(max, 5.0);
    let count = (max / step).round() as u32;
    (0..=count).map(|i| f64::from(i) * step).collect()
}

fn bars(reports: &[Report]) -> String {
    let height = 40.0 + 3.0 * (PANEL_HEIGHT + 30.0) + 90.0;
    let mut out = String::new();
    header(&mut out, height, "Policy comparison");
    let metrics: [Metric; 3] = [
        ("makespan (h)", |r| r.makespan_s.unwrap_or(0.0) / 3600.0),
        ("GPU energy (MJ)", |r| r.energy_megajoules),
        ("OOM crashes", |r| r.oom_crashes as f64),
    ];
    let n = reports.len() as f64;
    let slot = (WIDTH - LEFT - RIGHT) / n;
    for (i, (label, value)) in metrics.iter().enumerate() {
        let top = 40.0 + i as f64 * (PANEL_HEIGHT + 30.0);
        let y_max = nice(reports.iter().map(value).fold(0.0, f64::max));
        let (x0, y1) = (LEFT, top + PANEL_HEIGHT);
        let _ = writeln!(
            out,
            r#"<rect x="{x0}" y="{top}" width="{}" height="{PANEL_HEIGHT}" fill="none" stroke="black"/>"#,
            WIDTH - LEFT - RIGHT
        );
        for (value, label) in labelled_ticks(y_max) {
            let y = y1 - PANEL_HEIGHT * value / y_max;
            let _ =
                writeln!(out, r#"<text x="{}" y="{}" text-anchor="end">{label}</text>"#, x0 - 4.0, y + 4.0);
        }
        let _ = writeln!(
            out,
            r#"<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">{label}</text>"#,
            top + PANEL_HEIGHT / 2.0
        );
        for (k, r) in reports.iter().enumerate() {
            let v = value(r);
            let h = PANEL_HEIGHT * (v / y_max).clamp(0.0, 1.0);
            let x = x0 + slot * k as f64 + slot * 0.15;
            let color = COLORS[k % COLORS.len()];
            let _ = writeln!(
                out,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{color}"/>"#,
                y1 - h,
                slot * 0.7
            );
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="9">{}</text>"#,
                x + slot * 0.35,
                y1 - h - 3.0,
                value_label((v * 100.0).round() / 100.0)
            );
        }
    }
    let base_y = 40.0 + 3.0 * (PANEL_HEIGHT + 30.0) - 20.0;
    for (k, r) in reports.iter().enumerate() {
        let x = LEFT + slot * k as f64 + slot * 0.5;
        let _ = writeln!(
            out,
            r#"<text transform="translate({x:.1},{base_y}) rotate(40)" font-size="10">{}</text>"#,
            escape(&r.label)
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33, defect 11: a 5-minute run was drawn on an axis in hours; the unit follows
    /// the span.
    #[test]
    fn the_time_axis_unit_follows_the_span() {
        let mut report = Report::default();
        report.series.insert(0, vec![(0.0, 1024.0, 0.5, 100.0), (300.0, 1024.0, 0.5, 100.0)]);
        let svg = timeseries(&report);
        assert!(svg.contains("time since first submission (min)"), "{svg}");
        assert_eq!(time_unit(90.0), (1.0, "s"));
        assert_eq!(time_unit(3.0 * 3600.0), (3_600.0, "h"));
        assert_eq!(time_unit(5.0 * 86_400.0), (86_400.0, "days"));
    }

    /// Issue 42: GPUs with no power readings got a 0–1 W axis and a flat line; they get no
    /// power panel and a line saying why, and the time axis moves to the SM panel.
    #[test]
    fn no_power_readings_draw_no_power_axis() {
        let mut report = Report::default();
        report.series.insert(0, vec![(0.0, 1024.0, 0.5, 0.0), (300.0, 1024.0, 0.5, 0.0)]);
        let svg = timeseries(&report);
        assert!(!svg.contains("power (W)"), "{svg}");
        assert!(svg.contains("power: no readings from these GPUs; not drawn"), "{svg}");
        assert!(svg.contains("time since first submission (min)"), "{svg}");
        report.series.insert(1, vec![(0.0, 0.0, 0.0, 80.0)]);
        assert!(timeseries(&report).contains("power (W)"));
    }

    /// Defect 10: an axis up to 0.2 read "0, 0.1, 0.1, 0.2"; each tick now reads apart.
    #[test]
    fn tick_labels_are_distinct_at_every_scale() {
        for max in [0.2, 0.15, 0.04, 1.0, 3.0, 7.5, 42.0, 1234.0, 0.003] {
            let axis = nice(max);
            let labels: Vec<String> = labelled_ticks(axis).into_iter().map(|(_, l)| l).collect();
            let mut unique = labels.clone();
            unique.dedup();
            assert_eq!(unique, labels, "axis {axis}: {labels:?}");
        }
        let labels: Vec<String> = labelled_ticks(nice(0.2)).into_iter().map(|(_, l)| l).collect();
        assert_eq!(labels, ["0.00", "0.05", "0.10", "0.15", "0.20"]);
    }
}
