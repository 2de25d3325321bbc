//! `carma init`: create the state directory, harmlessly when it already exists.
//!
//! As root, the default directory (`/var/lib/carma`) becomes the machine's system queue:
//! `/etc/carma/carma.toml` names it, and every user's `carma` finds it without flags.
//! `--system` does the same for another directory.

use std::io::Write;

use crate::cli::InitArgs;
use crate::config::DEFAULT_CONFIG_TOML;
use crate::error::Error;
use crate::home::{Home, Origin, is_root};

pub(super) fn run(home: &Home, args: InitArgs) -> anyhow::Result<()> {
    if args.system && !is_root() {
        return Err(Error::BadInput(
            "--system registers the queue for every user of this machine; run it as root".into(),
        )
        .into());
    }
    if !is_root() && home.origin() == Origin::System {
        return users_init_of_the_system_queue(home);
    }
    let created = crate::session::init(home, DEFAULT_CONFIG_TOML)?;
    // An existing journal (an upgrade, a restored backup): publish what readers see now,
    // rather than waiting for the first tick.
    crate::session::write(home, std::time::Duration::from_secs(10), |_, _| Ok(()))?;
    let mut out = std::io::stdout().lock();
    if created.is_empty() {
        writeln!(out, "state directory {} is already initialised", home.root().display())?;
    } else {
        writeln!(out, "initialised {}", home.root().display())?;
        for path in created {
            writeln!(out, "  created {path}")?;
        }
    }
    let register = args.system || (is_root() && home.origin() == Origin::System);
    if register && let Some(path) = home.register_system()? {
        writeln!(out, "registered {} as this machine's queue in {}", home.root().display(), path.display())?;
    }
    Ok(())
}

/// A user's `carma init` where the machine has a system queue: nothing is theirs to create
/// (the queue and its folders are root's), so it says what to do instead of failing on the
/// first `chmod` (defect 10).
fn users_init_of_the_system_queue(home: &Home) -> anyhow::Result<()> {
    let root = home.root().display();
    if home.journal_path().exists() {
        writeln!(
            std::io::stdout().lock(),
            "{root} is this machine's queue, set up by root: submit to it as you are, no init needed \
             (for a queue of your own: carma init --home DIR)"
        )?;
        return Ok(());
    }
    Err(Error::BadInput(format!(
        "{root} is this machine's queue ({}), but root has not initialised it; ask root to run \
         carma init (or make a queue of your own: carma init --home DIR)",
        crate::home::system_config_path().display()
    ))
    .into())
}
