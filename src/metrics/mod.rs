//! The queue's figures in Prometheus's text exposition format (version 0.0.4), for
//! node_exporter's textfile collector (`[metrics] textfile`, written by each `carma tick`) and
//! for `carma serve`'s `/metrics`.
//!
//! Pure: a State (the tick's own, or the published view's) in, text out. Everything is derived
//! from what State already keeps, so writing the file costs no journal scan. Counters
//! (`*_total`, the wait histogram) are sums over every task State remembers, which only grow,
//! as Prometheus expects of a counter; a rebuilt journal starts them again, which `rate()`
//! reads as a counter reset.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::journal::{State, Status};

pub mod gpu_list;
pub mod jobmap;

use gpu_list::GpuEntry;

/// Upper bounds of `carma_wait_seconds`'s buckets: a second to a day, as a lab's waits range.
pub const WAIT_BUCKETS_S: [f64; 12] =
    [1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0];

/// Every state a task can be in, as the `state` label spells it (all of them, zeros included,
/// so a panel's series never vanish).
const STATES: [Status; 6] =
    [Status::Pending, Status::Placed, Status::Running, Status::Finished, Status::Failed, Status::Cancelled];

/// What the text is made from.
pub struct Input<'a> {
    /// The folded journal the gauges and counters are read from.
    pub state: &'a State,
    /// How long the last tick took, µs, when the caller knows it (the tick itself; `serve`
    /// from the view's last TickCompleted).
    pub tick_duration_us: Option<u64>,
    /// A user's name for the `user` label (the uid in digits when the system has none).
    pub user_name: &'a dyn Fn(u32) -> String,
    /// What placement assumes a shared attempt with no figure holds, MiB
    /// (`[sched] margin-without-figure-mib`), counted in the reserved gauge.
    pub assumed_without_figure_mib: u64,
}

/// The whole exposition, each family with its HELP and TYPE lines, ending with a newline.
pub fn render(input: &Input) -> String {
    let mut out = Out::default();
    tasks(&mut out, input);
    gpus(&mut out, input.state, input.assumed_without_figure_mib);
    tick(&mut out, input);
    out.text
}

#[derive(Default)]
struct Out {
    text: String,
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (key, text)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{key}=\"{}\"", escape_label(text));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", number(value));
    }
}

fn tasks(out: &mut Out, input: &Input) {
    let state = input.state;
    let mut by_status: BTreeMap<&str, u64> = STATES.iter().map(|s| (s.as_str(), 0)).collect();
    let mut pending_by_user: BTreeMap<u32, u64> = BTreeMap::new();
    let (mut placements, mut relaunches, mut oom, mut lost) = (0u64, 0u64, 0u64, 0u64);
    let mut waits = Histogram::default();
    for task in state.tasks.values() {
        *by_status.entry(task.status().as_str()).or_default() += 1;
        if task.status() == Status::Pending {
            *pending_by_user.entry(task.submitter_uid).or_default() += 1;
        }
        let attempts = task.attempts.len() as u64;
        placements += attempts;
        relaunches += attempts.saturating_sub(1);
        oom += u64::from(task.oom_count);
        lost += u64::from(task.lost_count);
        if let Some(first) = task.attempts.first() {
            waits.observe(first.placed_ms.saturating_sub(task.submitted_ms) as f64 / 1000.0);
        }
    }
    out.family("carma_tasks", "gauge", "Tasks the queue knows, by state.");
    for (status, count) in &by_status {
        out.sample("carma_tasks", &[("state", &status.to_lowercase())], *count as f64);
    }
    out.family("carma_pending_tasks", "gauge", "Pending tasks per submitter.");
    for (uid, count) in &pending_by_user {
        out.sample("carma_pending_tasks", &[("user", &(input.user_name)(*uid))], *count as f64);
    }
    let counters = [
        ("carma_placements_total", "Attempts placed on GPUs, first runs and relaunches.", placements),
        (
            "carma_relaunches_total",
            "Attempts after a task's first (out-of-memory and lost retries).",
            relaunches,
        ),
        ("carma_oom_total", "Attempts that ran out of GPU memory.", oom),
        ("carma_lost_total", "Attempts whose process was lost.", lost),
    ];
    for (name, help, value) in counters {
        out.family(name, "counter", help);
        out.sample(name, &[], value as f64);
    }
    out.family(
        "carma_wait_seconds",
        "histogram",
        "Time from submission to first placement, of placed tasks.",
    );
    waits.write(out, "carma_wait_seconds");
}

/// A cumulative histogram over [`WAIT_BUCKETS_S`].
#[derive(Default)]
struct Histogram {
    buckets: [u64; WAIT_BUCKETS_S.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, value: f64) {
        for (bound, bucket) in WAIT_BUCKETS_S.iter().zip(self.buckets.iter_mut()) {
            if value <= *bound {
                *bucket += 1;
            }
        }
        self.count += 1;
        self.sum += value;
    }

    fn write(&self, out: &mut Out, name: &str) {
        let bucket = format!("{name}_bucket");
        for (bound, count) in WAIT_BUCKETS_S.iter().zip(self.buckets) {
            out.sample(&bucket, &[("le", &number(*bound))], count as f64);
        }
        out.sample(&bucket, &[("le", "+Inf")], self.count as f64);
        out.sample(&format!("{name}_sum"), &[], self.sum);
        out.sample(&format!("{name}_count"), &[], self.count as f64);
    }
}

const MIB: f64 = 1_048_576.0;

/// Per-GPU families, GPUs by index; a MIG instance's series (labelled `mig` with its slot and
/// `profile`) follow its GPU's in the families that apply to an instance.
fn gpus(out: &mut Out, state: &State, assumed_without_figure_mib: u64) {
    let entries = gpu_list::entries(state, assumed_without_figure_mib);
    type Figure = fn(&GpuEntry) -> Option<f64>;
    let families: [(&str, &str, &str, Figure); 7] = [
        (
            "carma_gpu_memory_used_bytes",
            "gauge",
            "GPU memory held by processes, as the last tick read it.",
            |e| e.used_mib().map(|mib| mib as f64 * MIB),
        ),
        ("carma_gpu_memory_total_bytes", "gauge", "Installed GPU memory.", |e| {
            e.gpu.last.as_ref().map(|_| e.total_mib() as f64 * MIB)
        }),
        (
            "carma_gpu_memory_reserved_bytes",
            "gauge",
            "GPU memory carma promised the attempts placed or running on the GPU (their requirements summed; a shared attempt with no figure counts what placement assumes for it).",
            |e| Some(e.reserved_mib as f64 * MIB),
        ),
        ("carma_gpu_sm_active_ratio", "gauge", "Fraction of SMs busy (0 to 1), when measured.", |e| {
            // f32 to 6 digits: `0.3`, not `0.30000001192092896`.
            whole(e)?.sm_active.map(|sm| (f64::from(sm) * 1e6).round() / 1e6)
        }),
        ("carma_gpu_power_watts", "gauge", "Board power draw, when readable.", |e| {
            whole(e)?.power_mw.map(|mw| f64::from(mw) / 1000.0)
        }),
        (
            "carma_gpu_energy_joules_total",
            "counter",
            "Energy since the driver was loaded, when readable.",
            |e| whole(e)?.energy_mj.map(|mj| mj as f64 / 1000.0),
        ),
        ("carma_gpu_up", "gauge", "1 while the GPU is healthy and may take work, else 0.", |e| {
            Some(if whole(e)?.health.is_healthy() { 1.0 } else { 0.0 })
        }),
    ];
    for (name, kind, help, figure) in families {
        out.family(name, kind, help);
        for entry in &entries {
            if let Some(value) = figure(entry) {
                out.sample(name, &borrowed(&gpu_labels(entry)), value);
            }
        }
    }
    out.family("carma_gpu_tasks", "gauge", "carma tasks placed or running on the GPU or MIG instance.");
    for entry in &entries {
        out.sample("carma_gpu_tasks", &borrowed(&gpu_labels(entry)), entry.tasks.len() as f64);
    }
}

/// A whole GPU's last sample; `None` for a MIG instance (whose figures are its GPU's).
fn whole<'a>(entry: &GpuEntry<'a>) -> Option<&'a crate::gpu::GpuSample> {
    if entry.instance.is_some() { None } else { entry.gpu.last.as_ref() }
}

fn borrowed<'a>(labels: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    labels.iter().map(|(key, value)| (*key, value.as_str())).collect()
}

/// `gpu`, `uuid`, `name`; and for a MIG instance `mig` (its slot) and `profile`.
fn gpu_labels(entry: &GpuEntry) -> Vec<(&'static str, String)> {
    let mut labels = vec![("gpu", entry.gpu.index.to_string())];
    if let Some(m) = entry.instance {
        labels.push(("mig", m.index.to_string()));
    }
    labels.push(("uuid", entry.uuid().to_owned()));
    labels.push(("name", entry.gpu.name.clone()));
    if let Some(m) = entry.instance {
        labels.push(("profile", m.profile.clone().unwrap_or_default()));
    }
    labels
}

fn tick(out: &mut Out, input: &Input) {
    let state = input.state;
    if let Some(us) = input.tick_duration_us {
        out.family("carma_tick_duration_seconds", "gauge", "How long the last tick took.");
        out.sample("carma_tick_duration_seconds", &[], us as f64 / 1e6);
    }
    out.family("carma_ticks_total", "counter", "Completed ticks.");
    out.sample("carma_ticks_total", &[], state.ticks as f64);
    if let Some(ms) = state.last_tick_ms {
        out.family("carma_last_tick_timestamp_seconds", "gauge", "When the last tick completed (Unix time).");
        out.sample("carma_last_tick_timestamp_seconds", &[], ms as f64 / 1000.0);
    }
    out.family("carma_gpu_probe_up", "gauge", "1 while the GPUs are readable, 0 while the probe fails.");
    out.sample("carma_gpu_probe_up", &[], if state.gpu_probe_error.is_some() { 0.0 } else { 1.0 });
}

/// A sample value as the format writes it: integers without a fraction, `+Inf`, `NaN`.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else if value == value.trunc() && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

/// A label value as the format requires: backslash, double quote and newline escaped. Other
/// characters (any UTF-8) are allowed as they are.
pub fn escape_label(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// HELP text escapes backslash and newline only.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;
