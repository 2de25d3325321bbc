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
    // The tick's State comes back through the cache, for the metrics files without a reload;
    // a loop keeps it from one tick to the next, as the simulator does.
    let mut cache = StateCache::default();
    let Some(every) = args.every else {
        let mut probe = Probe::default();
        return once(home, lock_wait, args.verbose, &mut probe, &mut cache);
    };
    if every < EVERY_MIN {
        return Err(Error::BadInput(format!(
            "--every {}: ticks closer than {} apart only contend for the lock; give e.g. --every 5s",
            humantime::format_duration(every),
            humantime::format_duration(EVERY_MIN)
        ))
        .into());
    }
    run_every(home, lock_wait, args.verbose, every, &mut cache)
}

/// The shortest `--every`, and the least time between the end of one tick and the start of
/// the next: a tick takes milliseconds, but the lock must stay free for the queue's other
/// writers and readers between two of them.
const EVERY_MIN: Duration = Duration::from_millis(100);

/// Set by SIGINT/SIGTERM/SIGHUP while `carma tick --every` runs: the tick in progress ends
/// (its commits are whole), then the loop does.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `carma tick --every D`: one tick, then the next D after its start (or [`EVERY_MIN`] after
/// its end, if later), in the foreground until a signal. A tick that fails (the lock stayed
/// busy, a GPU error, a bad config.toml being edited) is said on stderr and the loop goes on,
/// as a timer's next run would; a state directory that is not there ends it.
fn run_every(
    home: &Home,
    lock_wait: Duration,
    verbose: bool,
    every: Duration,
    cache: &mut StateCache,
) -> anyhow::Result<()> {
    catch_stop_signals();
    let mut probe = Probe::default();
    while !STOP.load(std::sync::atomic::Ordering::SeqCst) {
        let started = std::time::Instant::now();
        match once(home, lock_wait, verbose, &mut probe, cache) {
            // A queue that is gone (removed, never made) will not come back by waiting.
            Err(err) if matches!(err.downcast_ref::<Error>(), Some(Error::NotInitialized { .. })) => {
                return Err(err);
            }
            Err(err) => eprintln!("carma tick: {}", crate::text::escape(&err.to_string())),
            Ok(()) => {}
        }
        // At least EVERY_MIN between two ticks, even after a tick longer than the period, so
        // the other commands that take the lock (a backup, a cancel) get it; in short steps,
        // so a signal ends the loop within 50 ms.
        let next = started.elapsed().max(every.saturating_sub(EVERY_MIN)) + EVERY_MIN;
        while !STOP.load(std::sync::atomic::Ordering::SeqCst) && started.elapsed() < next {
            std::thread::sleep(Duration::from_millis(50).min(next.saturating_sub(started.elapsed())));
        }
    }
    if verbose {
        writeln!(std::io::stdout().lock(), "tick: stopped by a signal after the last whole tick")?;
    }
    Ok(())
}

fn catch_stop_signals() {
    extern "C" fn on_stop(_signal: libc::c_int) {
        STOP.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe); sigaction gets a
        // fully initialised struct. Children get their defaults back (`exec::inherit`).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The GPU probe a loop keeps between ticks, rebuilt only when `[tick] gpus` changes (NVML's
/// initialisation is the slow part of a tick).
#[derive(Default)]
struct Probe {
    spec: Option<String>,
    probe: Option<Box<dyn GpuProbe>>,
    error: Option<String>,
}

impl Probe {
    fn for_spec(&mut self, spec: &str) -> anyhow::Result<(&mut dyn GpuProbe, Option<String>)> {
        if self.spec.as_deref() != Some(spec) || self.probe.is_none() {
            let (probe, error): (Box<dyn GpuProbe>, Option<String>) = match gpu::probe_from_spec(spec) {
                Ok(probe) => (probe, None),
                Err(err @ ProbeError::UnknownSpec { .. }) => {
                    return Err(Error::BadInput(err.to_string()).into());
                }
                Err(err) => (Box::new(NoGpus), Some(err.to_string())),
            };
            self.spec = Some(spec.to_string());
            self.probe = Some(probe);
            self.error = error;
        }
        let Some(probe) = self.probe.as_deref_mut() else { unreachable!("the probe was just built") };
        Ok((probe, self.error.clone()))
    }
}

/// One tick with the configuration as it is now.
fn once(
    home: &Home,
    lock_wait: Duration,
    verbose: bool,
    probe: &mut Probe,
    cache: &mut StateCache,
) -> anyhow::Result<()> {
    let config = Config::load(home)?;
    let (probe, probe_error) = probe.for_spec(&config.tick.gpus)?;
    let mut runner = ExecRunner::new(home.root(), std::env::current_exe()?);
    let mut ctx = TickContext {
        home,
        clock: &SystemClock,
        lock_wait,
        probe,
        probe_error,
        runner: &mut runner,
        config: &config,
        fault: injected_fault()?,
        state_cache: Some(cache),
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
    export_metrics(home, &config, cache, report.duration_us);
    if verbose {
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
        let input = crate::metrics::Input {
            state,
            tick_duration_us: Some(duration_us),
            user_name: &name,
            assumed_without_figure_mib: config.sched.margin_without_figure_mib,
        };
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
