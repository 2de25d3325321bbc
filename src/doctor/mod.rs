//! `carma config check`: what an administrator's queue needs, checked without ticking.
//!
//! Each check reads what a tick would use (`config.toml`, the state directory's parts, the
//! GPUs, the timer's unit and the last tick's traces, the cgroup controllers, the MPS daemon,
//! sendmail) and says one line: `ok`, a `note` (something carma works without, said so the
//! administrator knows, such as host limits that cannot be enforced here), or a `problem` with
//! the fix. Nothing is written, no lock is taken and the journal is not opened, so the check
//! can run beside a busy timer, and on a queue whose tick refuses to run.

mod parts;
mod services;

use serde::Serialize;

use crate::config::Config;
use crate::home::Home;

/// The `schema` tag of `carma config check --json`.
pub const DOCTOR_SCHEMA: &str = "carma.config-check/1";

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// As it should be.
    Ok,
    /// carma works, with something less than it could (said so, not a problem).
    Note,
    /// carma will not work as configured until this is fixed; `fix` says how.
    Problem,
}

/// One check's line.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// What was checked: `config`, `state-dir`, `gpus`, `timer`, `cgroups`, `mps`, `sendmail`,
    /// `metrics`, `disk`.
    pub check: &'static str,
    /// How it came out.
    pub level: Level,
    /// What was found, in words.
    pub detail: String,
    /// What to do, for a problem (and some notes); empty otherwise.
    pub fix: String,
}

impl Finding {
    fn ok(check: &'static str, detail: impl Into<String>) -> Finding {
        Finding { check, level: Level::Ok, detail: detail.into(), fix: String::new() }
    }

    fn note(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { check, level: Level::Note, detail: detail.into(), fix: fix.into() }
    }

    fn problem(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { check, level: Level::Problem, detail: detail.into(), fix: fix.into() }
    }
}

/// Everything `carma config check` found.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    /// Always [`DOCTOR_SCHEMA`].
    pub schema: &'static str,
    /// The state directory checked.
    pub home: String,
    /// Every finding, in the order checked.
    pub findings: Vec<Finding>,
    /// How many findings are problems.
    pub problems: u64,
}

/// Runs every check on `home` (see the module docs).
pub fn check(home: &Home) -> DoctorReport {
    let mut findings = Vec::new();
    let initialised = match home.require_initialized() {
        Ok(()) => true,
        Err(e) => {
            findings.push(Finding::problem("state-dir", e.to_string(), home.init_hint()));
            false
        }
    };
    let config = if initialised { config(home, &mut findings) } else { None };
    if initialised {
        findings.extend(parts::check(home));
    }
    if let Some(config) = &config {
        findings.push(services::gpus(&config.tick.gpus));
        findings.extend(services::timer(home));
        findings.push(services::cgroups());
        findings.extend(services::mps(config));
        findings.extend(services::sendmail(&config.notify));
        findings.extend(services::metrics(&config.metrics));
        findings.push(services::disk(home, config));
    }
    let problems = findings.iter().filter(|f| f.level == Level::Problem).count() as u64;
    DoctorReport { schema: DOCTOR_SCHEMA, home: home.root().display().to_string(), findings, problems }
}

/// `config.toml`: parsed as the tick parses it; its error names the line.
fn config(home: &Home, findings: &mut Vec<Finding>) -> Option<Config> {
    let path = home.config_path();
    match Config::load(home) {
        Ok(config) => {
            let detail = if path.exists() {
                format!("{} parses; every key is known", path.display())
            } else {
                format!("{} is missing: every default applies", path.display())
            };
            findings.push(Finding::ok("config", detail));
            Some(config)
        }
        Err(e) => {
            findings.push(Finding::problem(
                "config",
                e.to_string(),
                "fix that line (every key is documented in the file `carma init` writes); until then the tick does nothing",
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests;
