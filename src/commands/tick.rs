//! `carma tick`: one round of the resource manager, meant for a systemd timer.

use std::io::Write;
use std::time::Duration;

use crate::cli::TickArgs;
use crate::clock::SystemClock;
use crate::home::Home;
use crate::inventory::Inventory;
use crate::spec::Limits;
use crate::tick::{self, TickContext};

pub fn run(home: &Home, lock_wait: Duration, args: TickArgs) -> anyhow::Result<()> {
    home.require_initialized()?;
    let limits = Limits { machine_gpus: Inventory::load(home).map(|inv| inv.gpus.len() as u32) };
    let ctx = TickContext { home, clock: &SystemClock, lock_wait, limits };
    let report = tick::run(&ctx)?;
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
