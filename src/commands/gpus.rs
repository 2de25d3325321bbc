//! `carma gpus`: every GPU the journal knows, as the last tick saw it: memory used by
//! processes, reserved by the driver, free, and promised to carma's tasks; SM activity with its
//! source; power; health with its reason; MIG instances; the tasks on each.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use super::render;
use crate::cli::GpusArgs;
use crate::clock::{Clock, SystemClock, format_ms};
use crate::gpu::{GpuHealth, GpuProcess, GpuSample, MigInstance};
use crate::home::Home;
use crate::journal::State;
use crate::journal::state::GpuState;

/// Schema tag of `carma gpus --json` (schema/gpus.schema.json).
pub(super) const GPUS_SCHEMA: &str = "carma.gpus/1";

/// Terminal width the human table keeps to.
const WIDTH: usize = 80;

#[derive(Serialize)]
struct GpusJson {
    schema: &'static str,
    generated_ms: u64,
    probe_error: Option<String>,
    gpus: Vec<GpuRow>,
}

#[derive(Serialize)]
struct GpuRow {
    uuid: String,
    index: u32,
    name: String,
    sampled_ms: Option<u64>,
    present: bool,
    health: &'static str,
    /// The STATE column's word ([`GpuSample::state_word`], or `absent`).
    #[serde(skip)]
    state_word: String,
    xid: Option<u64>,
    health_detail: Option<String>,
    available: bool,
    unavailable_reason: Option<String>,
    memory_total_mib: u64,
    memory_used_mib: u64,
    memory_reserved_mib: Option<u64>,
    memory_free_mib: u64,
    carma_reserved_mib: u64,
    sm_active: Option<f32>,
    sm_source: &'static str,
    util_gpu: Option<f32>,
    sm_occupancy: Option<f32>,
    dram_active: Option<f32>,
    power_w: Option<f64>,
    energy_mj: Option<u64>,
    processes: Vec<ProcessRow>,
    mig_enabled: Option<bool>,
    mig_instances: Vec<MigRow>,
    tasks: Vec<String>,
    unavailable_metrics: Vec<String>,
    /// The administrators' reservations holding it now (`carma reserve`), one line each.
    reservations: Vec<String>,
    /// The same, for the table: the window and the problem on lines of their own.
    #[serde(skip)]
    holdings: Vec<crate::journal::reservations::Holding>,
}

#[derive(Serialize)]
struct MigRow {
    uuid: String,
    slot: u32,
    profile: Option<String>,
    memory_total_mib: u64,
    memory_used_mib: u64,
    memory_free_mib: u64,
    carma_reserved_mib: u64,
    processes: Vec<ProcessRow>,
    tasks: Vec<String>,
}

#[derive(Serialize)]
struct ProcessRow {
    pid: u32,
    used_mib: Option<u64>,
    sm_util: Option<f32>,
}

pub(super) fn run(home: &Home, wait: Duration, args: GpusArgs) -> anyhow::Result<()> {
    run_to(home, wait, args, &mut std::io::stdout().lock())
}

/// `run`, writing to `out` (stdout, or `carma mcp`'s answer).
pub(super) fn run_to(
    home: &Home,
    wait: Duration,
    args: GpusArgs,
    mut out: &mut dyn Write,
) -> anyhow::Result<()> {
    let _ = wait;
    let state = crate::view::load(home)?;
    let assumed = crate::config::Config::load(home)?.sched.margin_without_figure_mib;
    render_gpus(&state, assumed, args.json, &mut out)
}

fn render_gpus(
    state: &State,
    assumed_without_figure_mib: u64,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let now = SystemClock.now_ms();
    let newest_ms = state.gpus.values().filter(|g| g.last.is_some()).map(|g| g.last_ms).max();
    let mut gpus: Vec<GpuRow> =
        state.gpus.values().map(|gpu| gpu_row(state, gpu, newest_ms, assumed_without_figure_mib)).collect();
    gpus.sort_by(|a, b| (!a.present, a.index, &a.uuid).cmp(&(!b.present, b.index, &b.uuid)));
    let resolved = crate::journal::reservations::resolve_now(state, now);
    for row in &mut gpus {
        row.holdings = crate::journal::reservations::holding(state, &resolved, &row.uuid);
        row.reservations = row.holdings.iter().map(|h| h.text()).collect();
    }
    if json {
        let doc = GpusJson {
            schema: GPUS_SCHEMA,
            generated_ms: now,
            probe_error: state.gpu_probe_error.clone(),
            gpus,
        };
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        return Ok(());
    }
    if let Some(error) = &state.gpu_probe_error {
        writeln!(out, "{}", fit(&format!("probe failing: {}", render::clean(error))))?;
    }
    if gpus.is_empty() {
        writeln!(out, "no GPUs seen yet (run `carma tick`, and check [tick] gpus in config.toml)")?;
        return Ok(());
    }
    writeln!(out, "{}", header())?;
    for gpu in &gpus {
        write_gpu(out, gpu)?;
    }
    Ok(())
}

/// One GPU's row: from its newest sample when it has one.
fn gpu_row(state: &State, gpu: &GpuState, newest_ms: Option<u64>, assumed_without_figure_mib: u64) -> GpuRow {
    let present = gpu.last.is_some() && Some(gpu.last_ms) == newest_ms;
    let (tasks, carma_reserved_mib) = carma_on(state, &gpu.uuid, assumed_without_figure_mib);
    let empty = blank_sample(gpu);
    let sample = gpu.last.as_ref().unwrap_or(&empty);
    let (health, xid, health_detail) = health_fields(&sample.health);
    let unavailable_reason = if !present {
        Some(match gpu.last {
            Some(_) => format!("not seen by the last probe (last seen {})", format_ms(gpu.last_ms)),
            None => "never sampled".to_string(),
        })
    } else {
        sample.health.reason().or_else(|| sample.mig_reason())
    };
    GpuRow {
        uuid: gpu.uuid.clone(),
        index: gpu.index,
        name: gpu.name.clone(),
        sampled_ms: gpu.last.as_ref().map(|_| gpu.last_ms),
        present,
        health,
        state_word: if present { sample.state_word() } else { "absent".to_string() },
        xid,
        health_detail,
        available: unavailable_reason.is_none(),
        unavailable_reason,
        memory_total_mib: sample.memory_total_mib,
        memory_used_mib: sample.memory_used_by_processes_mib(),
        memory_reserved_mib: sample.memory_reserved_mib,
        memory_free_mib: sample.memory_free_mib,
        carma_reserved_mib,
        sm_active: sample.sm_active,
        sm_source: sm_source_name(sample),
        util_gpu: sample.util_gpu_mean,
        sm_occupancy: sample.sm_occupancy,
        dram_active: sample.dram_active,
        power_w: sample.power_mw.map(|mw| f64::from(mw) / 1000.0),
        energy_mj: sample.energy_mj,
        processes: sample.processes.iter().map(process_row).collect(),
        mig_enabled: sample.mig.enabled,
        mig_instances: sample
            .mig
            .instances
            .iter()
            .map(|m| mig_row(state, m, assumed_without_figure_mib))
            .collect(),
        tasks,
        unavailable_metrics: sample.unavailable.clone(),
        reservations: Vec::new(),
        holdings: Vec::new(),
    }
}

/// What is shown for a GPU known from GpuDiscovered alone: nothing read yet.
fn blank_sample(gpu: &GpuState) -> GpuSample {
    GpuSample {
        uuid: gpu.uuid.clone(),
        index: gpu.index,
        name: gpu.name.clone(),
        memory_total_mib: gpu.memory_total_mib,
        memory_used_mib: 0,
        memory_free_mib: 0,
        memory_reserved_mib: None,
        health: GpuHealth::Healthy,
        util_gpu_mean: None,
        util_last_timestamp_us: None,
        sm_active: None,
        sm_active_source: crate::gpu::SmSource::Unavailable,
        sm_occupancy: None,
        dram_active: None,
        power_mw: None,
        energy_mj: None,
        processes: Vec::new(),
        mig: crate::gpu::MigInfo { enabled: None, instances: Vec::new() },
        unavailable: Vec::new(),
    }
}

fn health_fields(health: &GpuHealth) -> (&'static str, Option<u64>, Option<String>) {
    match health {
        GpuHealth::Healthy => ("healthy", None, None),
        GpuHealth::Lost { detail } => ("lost", None, Some(detail.clone())),
        GpuHealth::XidError { xid, detail } => ("xid_error", Some(*xid), Some(detail.clone())),
        GpuHealth::Unreadable { detail } => ("unreadable", None, Some(detail.clone())),
    }
}

fn sm_source_name(sample: &GpuSample) -> &'static str {
    use crate::gpu::SmSource;
    match sample.sm_active_source {
        SmSource::Gpm => "gpm",
        SmSource::File => "file",
        SmSource::Simulated => "simulated",
        SmSource::Unavailable => "unavailable",
        SmSource::DeviceUtil => "device_util",
        SmSource::ProcessUtil => "process_util",
    }
}

fn process_row(process: &GpuProcess) -> ProcessRow {
    ProcessRow { pid: process.pid, used_mib: process.used_mib, sm_util: process.sm_util }
}

fn mig_row(state: &State, instance: &MigInstance, assumed_without_figure_mib: u64) -> MigRow {
    let (tasks, carma_reserved_mib) = carma_on(state, &instance.uuid, assumed_without_figure_mib);
    MigRow {
        uuid: instance.uuid.clone(),
        slot: instance.index,
        profile: instance.profile.clone(),
        memory_total_mib: instance.memory_total_mib,
        memory_used_mib: instance.memory_used_mib,
        memory_free_mib: instance.memory_total_mib.saturating_sub(instance.memory_used_mib),
        carma_reserved_mib,
        processes: instance.processes.iter().map(process_row).collect(),
        tasks,
    }
}

/// The carma tasks placed or running on a GPU (or MIG instance), and the sum of the memory
/// their attempts were placed with (per GPU; a shared attempt without a figure adds what
/// placement assumes for it).
fn carma_on(state: &State, uuid: &str, assumed_without_figure_mib: u64) -> (Vec<String>, u64) {
    let mut tasks = Vec::new();
    let mut reserved_mib = 0u64;
    for task in state.tasks.values() {
        if let Some(attempt) = task.active_attempt().filter(|a| a.gpus.iter().any(|g| g == uuid)) {
            tasks.push(task.id.to_string());
            reserved_mib = reserved_mib
                .saturating_add(crate::metrics::gpu_list::promised_mib(attempt, assumed_without_figure_mib));
        }
    }
    (tasks, reserved_mib)
}

// ---------------------------------------------------------------------------------------
// The human table
// ---------------------------------------------------------------------------------------

fn header() -> String {
    format!(
        "{:<6} {:<17} {:>6} {:>5} {:>6} {:>6} {:>6} {:<9} {:>5} {}",
        "GPU", "NAME", "USED", "RESV", "FREE", "TOTAL", "CARMA", "SMACT", "POWER", "STATE"
    )
}

fn write_gpu(out: &mut impl Write, gpu: &GpuRow) -> anyhow::Result<()> {
    let instances_ok = gpu.present && gpu.health == "healthy";
    let line = format!(
        "{:<6} {:<17} {:>6} {:>5} {:>6} {:>6} {:>6} {:<9} {:>5} {}",
        format!("GPU{}", gpu.index),
        truncate(&render::clean(&gpu.name), 17),
        gib(gpu.memory_used_mib),
        gpu.memory_reserved_mib.map_or("-".to_string(), gib),
        gib(gpu.memory_free_mib),
        gib(gpu.memory_total_mib),
        gib(gpu.carma_reserved_mib),
        sm_text(gpu.sm_active, gpu.sm_source),
        gpu.power_w.map_or("-".to_string(), |w| format!("{w:.0}W")),
        gpu.state_word
    );
    writeln!(out, "{}", fit(&line))?;
    for mig in &gpu.mig_instances {
        let line = format!(
            "{:<6} {:<17} {:>6} {:>5} {:>6} {:>6} {:>6} {:<9} {:>5} {}",
            format!(" mig{}", mig.slot),
            truncate(&render::clean(mig.profile.as_deref().unwrap_or("?")), 17),
            gib(mig.memory_used_mib),
            "-",
            gib(mig.memory_free_mib),
            gib(mig.memory_total_mib),
            gib(mig.carma_reserved_mib),
            "-",
            "",
            if instances_ok { "ok" } else { "-" }
        );
        writeln!(out, "{}", fit(&line))?;
        write_list(out, &format!("   mig{} tasks: ", mig.slot), &mig.tasks)?;
    }
    if let Some(reason) = &gpu.unavailable_reason {
        writeln!(out, "{}", fit(&format!("  {}", render::clean(reason))))?;
    }
    for holding in &gpu.holdings {
        writeln!(out, "{}", fit(&format!("  reserved: {}", render::clean(&holding.window))))?;
        if let Some(problem) = &holding.problem {
            let line =
                format!("  reservation \"{}\" {}", render::clean(&holding.name), render::clean(problem));
            writeln!(out, "{}", fit(&line))?;
        }
    }
    write_list(out, "  tasks: ", &gpu.tasks)
}

/// `prefix` and the items, wrapped at the table width; nothing when there are none.
fn write_list(out: &mut impl Write, prefix: &str, items: &[String]) -> anyhow::Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    let mut line = prefix.to_string();
    for (i, item) in items.iter().enumerate() {
        let piece = if i + 1 < items.len() { format!("{item}, ") } else { item.clone() };
        if line.chars().count() + piece.trim_end().chars().count() > WIDTH && line.trim() != prefix.trim() {
            writeln!(out, "{}", line.trim_end())?;
            line = " ".repeat(prefix.len());
        }
        line.push_str(&piece);
    }
    writeln!(out, "{}", fit(line.trim_end()))?;
    Ok(())
}

/// GiB with one decimal, no unit (the header says it).
fn gib(mib: u64) -> String {
    format!("{:.1}", mib as f64 / 1024.0)
}

/// `0.86 gpm`, `0.86 dev`, `0.10 proc`, or `-`.
fn sm_text(value: Option<f32>, source: &str) -> String {
    let short = match source {
        "device_util" => "dev",
        "process_util" => "proc",
        "simulated" => "sim",
        other => other,
    };
    value.map_or("-".to_string(), |v| format!("{v:.2} {short}"))
}

fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width - 1).collect();
    cut.push('…');
    cut
}

/// A line cut to the table width.
fn fit(line: &str) -> String {
    truncate(line, WIDTH)
}
