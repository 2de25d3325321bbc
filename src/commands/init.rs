//! `carma init`: create the state directory, harmlessly when it already exists.

use std::io::Write;

use crate::config::DEFAULT_CONFIG_TOML;
use crate::home::Home;

pub fn run(home: &Home) -> anyhow::Result<()> {
    let created = home.init(DEFAULT_CONFIG_TOML)?;
    let mut out = std::io::stdout().lock();
    if created.is_empty() {
        writeln!(out, "state directory {} is already initialised", home.root().display())?;
    } else {
        writeln!(out, "initialised {}", home.root().display())?;
        for path in created {
            writeln!(out, "  created {path}")?;
        }
    }
    Ok(())
}
