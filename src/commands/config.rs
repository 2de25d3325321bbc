//! `carma config check`: the administrator's look at a queue without ticking it
//! (`doctor`), one line a finding, `--json` for programs, exit 78 when a problem is found.

use std::io::Write;

use crate::cli::{ConfigArgs, ConfigWhat};
use crate::doctor::{self, Level};
use crate::error::Error;
use crate::home::Home;

pub(super) fn run(home: &Home, args: ConfigArgs) -> anyhow::Result<()> {
    let ConfigWhat::Check { json } = args.what;
    let report = doctor::check(home);
    if json {
        super::render::print_json(&report)?;
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", crate::text::escape(&format!("checked {}", report.home)))?;
        for f in &report.findings {
            let level = match f.level {
                Level::Ok => "ok",
                Level::Note => "note",
                Level::Problem => "PROBLEM",
            };
            let fix = if f.fix.is_empty() { String::new() } else { format!(": {}", f.fix) };
            let line = format!("{level:<7} {:<9} {}{fix}", f.check, f.detail);
            writeln!(out, "{}", crate::text::escape(&line))?;
        }
    }
    if report.problems == 0 {
        return Ok(());
    }
    let count = report.problems;
    Err(Error::BadConfig(format!(
        "{count} problem{} found in {}; fix each as its line says, then run `carma config check` again",
        if count == 1 { "" } else { "s" },
        report.home
    ))
    .into())
}
