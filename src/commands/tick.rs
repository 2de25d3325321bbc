//! `carma tick`: one round of the resource manager, meant for a systemd timer.

use std::io::Write;
use std::time::Duration;

use crate::cli::TickArgs;
use crate::clock::SystemClock;
use crate::config::Config;
use crate::error::Error;
use crate::gpu::{self, GpuProbe, NoGpus, ProbeError};
use crate::home::Home;
use crate::journal::StateCache;
use crate::tick::{self, ExecRunner, TickContext};

/// Exit code of a tick stopped by an injected fault.
pub(super) const FAULT_EXIT: i32 = 86;

/// `CARMA_FAULT` injects a crash for the fault-injection tests; it is not for operators.
fn injected_fault() -> anyhow::Result<Option<tick::Fault>> {
    match std::env::var("CARMA_FAULT") {
        Ok(text) if !text.is_empty() => Ok(Some(text.parse().map_err(Error::BadInput)?)),
        _ => Ok(None),
    }
}

pub(super) fn run(home: &Home, lock_wait: Duration, args: TickArgs) -> anyhow::Result<()> {
    home.require_initialized()?;
    if !super::act::writes_directly(home) {
        // Not "Permission denied (os error 13)" from the journal's open: say who ticks it.
        return Err(Error::Denied(format!(
            "cannot tick the queue in {}: only its owner writes its journal, and root's timer ticks the system queue (carma-tick.timer); your tasks move without you: `carma queue --me` shows them, and an administrator checks the timer with `systemctl status carma-tick.timer`",
            home.root().display()
        ))
        .into());
    }
    let config = Config::load(home)?;
    let (mut probe, probe_error): (Box<dyn GpuProbe>, Option<String>) =
        match gpu::probe_from_spec(&config.tick.gpus) {
            Ok(probe) => (probe, None),
            Err(err @ ProbeError::UnknownSpec { .. }) => return Err(Error::BadInput(err.to_string()).into()),
            Err(err) => (Box::new(NoGpus), Some(err.to_string())),
        };
    let mut runner = ExecRunner::new(home.root(), std::env::current_exe()?);
    // The tick's State comes back through the cache, for the metrics files without a reload.
    let mut cache = StateCache::default();
    let mut ctx = TickContext {
        home,
        clock: &SystemClock,
        lock_wait,
        probe: probe.as_mut(),
        probe_error,
        runner: &mut runner,
        config: &config,
        fault: injected_fault()?,
        state_cache: Some(&mut cache),
        state_free_bytes: tick::free_bytes(home.root()),
    };
    let report = tick::run(&mut ctx)?;
    if report.crashed_at.is_some() {
        // Exit as abruptly as a killed tick would, with a code the tests recognise.
        std::process::exit(FAULT_EXIT);
    }
    match report.probe_status_changed.as_deref() {
        Some("") => eprintln!("carma: GPUs are readable again"),
        Some(detail) => eprintln!("carma: {detail}"),
        None => {}
    }
    if let Some(detail) = &report.disk_full {
        // Every such tick: the timer's log should show it for as long as it lasts.
        eprintln!("carma: {detail}; free space there or lower [limits] free-space-floor");
    }
    export_metrics(home, &config, &cache, report.duration_us);
    if args.verbose {
        writeln!(
            std::io::stdout().lock(),
            "tick: ingested {}, rejected {}, placed {} in {} µs",
            report.ingested,
            report.rejected,
            report.placed,
            report.duration_us
        )?;
    }
    Ok(())
}

/// Writes `[metrics]`'s files from the State the tick committed and published. A failure is
/// said on stderr and does not fail the tick: monitoring must never stop the queue.
fn export_metrics(home: &Home, config: &Config, cache: &StateCache, duration_us: u64) {
    let metrics = &config.metrics;
    if metrics.textfile.is_empty() && metrics.job_mapping_dir.is_empty() {
        return;
    }
    let loaded;
    let state = match cache.state() {
        Some(state) => state,
        // Only when the session kept no State (an empty journal cannot follow a tick).
        None => match crate::view::load(home) {
            Ok(state) => {
                loaded = state;
                &loaded
            }
            Err(e) => return eprintln!("carma: metrics not written: {e}"),
        },
    };
    if !metrics.textfile.is_empty() {
        let name = |uid: u32| crate::access::users::name_of(uid).unwrap_or_else(|| uid.to_string());
        let input = crate::metrics::Input { state, tick_duration_us: Some(duration_us), user_name: &name };
        let text = crate::metrics::render(&input);
        if let Err(e) =
            crate::exec::write_atomic(std::path::Path::new(&metrics.textfile), text.as_bytes(), 0o644)
        {
            eprintln!("carma: {e}; fix [metrics] textfile in {}", home.config_path().display());
        }
    }
    if !metrics.job_mapping_dir.is_empty() {
        let mapping = crate::metrics::jobmap::mapping(state);
        if let Err(e) =
            crate::metrics::jobmap::write(std::path::Path::new(&metrics.job_mapping_dir), &mapping)
        {
            eprintln!("carma: {e}; fix [metrics] job-mapping-dir in {}", home.config_path().display());
        }
    }
}
