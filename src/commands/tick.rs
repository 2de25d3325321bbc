//! `carma tick`: one round of the resource manager, meant for a systemd timer.

use std::io::Write;
use std::time::Duration;

use crate::cli::TickArgs;
use crate::clock::SystemClock;
use crate::config::Config;
use crate::error::Error;
use crate::gpu::{self, GpuProbe, NoGpus, ProbeError};
use crate::home::Home;
use crate::tick::{self, ExecRunner, TickContext};

pub fn run(home: &Home, lock_wait: Duration, args: TickArgs) -> anyhow::Result<()> {
    home.require_initialized()?;
    let config = Config::load(home)?;
    let (mut probe, probe_error): (Box<dyn GpuProbe>, Option<String>) =
        match gpu::probe_from_spec(&config.tick.gpus) {
            Ok(probe) => (probe, None),
            Err(err @ ProbeError::UnknownSpec { .. }) => return Err(Error::BadInput(err.to_string()).into()),
            Err(err) => (Box::new(NoGpus), Some(err.to_string())),
        };
    let mut runner = ExecRunner::new(home.root(), std::env::current_exe()?);
    let mut ctx = TickContext {
        home,
        clock: &SystemClock,
        lock_wait,
        probe: probe.as_mut(),
        probe_error,
        runner: &mut runner,
        config: &config,
    };
    let report = tick::run(&mut ctx)?;
    match report.probe_status_changed.as_deref() {
        Some("") => eprintln!("carma: GPUs are readable again"),
        Some(detail) => eprintln!("carma: {detail}"),
        None => {}
    }
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
