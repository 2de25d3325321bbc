//! `carma init`: create the state directory, harmlessly when it already exists; run again
//! (after an upgrade) it says what it checked and what it changed.
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
    let wait = std::time::Duration::from_secs(10);
    // What an existing queue held before this carma touched it: its journal's format, and
    // the config keys its config.toml knows.
    // Only a journal that is a regular file, looked at without following a link: a planted
    // link is `session::init`'s to refuse, with its own line, before anything reads it.
    let journal_there = std::fs::symlink_metadata(home.journal_path()).is_ok_and(|m| m.file_type().is_file());
    let journal_before = journal_there.then(|| journal_facts(home, wait)).transpose()?;
    let config_before = std::fs::symlink_metadata(home.config_path())
        .is_ok_and(|m| m.file_type().is_file())
        .then(|| std::fs::read_to_string(home.config_path()).ok())
        .flatten();
    let changed = if home.root().is_dir() { home.tighten_modes_saying()? } else { Vec::new() };
    let created = crate::session::init(home, DEFAULT_CONFIG_TOML)?;
    // An existing journal (an upgrade, a restored backup): publish what readers see now,
    // rather than waiting for the first tick.
    crate::session::write(home, wait, |_, _| Ok(()))?;
    let mut out = std::io::stdout().lock();
    match &journal_before {
        None => {
            writeln!(out, "initialised {}", home.root().display())?;
            for path in &created {
                writeln!(out, "  created {path}")?;
            }
        }
        Some(before) => {
            let upgrade = Upgrade {
                created: &created,
                changed: &changed,
                config_before: config_before.as_deref(),
                journal: before,
            };
            say_upgrade(&mut out, home, &upgrade)?;
        }
    }
    let register = args.system || (is_root() && home.origin() == Origin::System);
    if register && let Some(path) = home.register_system()? {
        writeln!(out, "registered {} as this machine's queue in {}", home.root().display(), path.display())?;
    }
    Ok(())
}

/// What `carma init` found in a journal that was already there.
struct JournalFacts {
    format: u8,
    records: u64,
    tasks: usize,
}

fn journal_facts(home: &Home, wait: std::time::Duration) -> anyhow::Result<JournalFacts> {
    Ok(crate::session::read(home, wait, |journal, state| {
        Ok(JournalFacts {
            format: journal.check_meta()?,
            records: journal.last_seq()?,
            tasks: state.tasks.len(),
        })
    })?)
}

/// What a second `carma init` (an upgrade) did to a state directory that existed.
struct Upgrade<'a> {
    created: &'a [String],
    changed: &'a [String],
    config_before: Option<&'a str>,
    journal: &'a JournalFacts,
}

/// The lines of a `carma init` run again: what it checked, and what it changed (parts made,
/// modes set, the defaults file of new config keys, the journal's format).
fn say_upgrade(out: &mut impl Write, home: &Home, u: &Upgrade) -> anyhow::Result<()> {
    let root = home.root().display();
    writeln!(
        out,
        "state directory {root} was initialised; checked it for carma {}:",
        env!("CARGO_PKG_VERSION")
    )?;
    if u.created.is_empty() {
        writeln!(
            out,
            "  parts      spool/ runs/ private/ view/ carma.lock config.toml: all there, none a link or another user's"
        )?;
    }
    for path in u.created {
        writeln!(out, "  created    {path} (it was missing)")?;
    }
    if u.changed.is_empty() {
        writeln!(out, "  modes      as this carma sets them")?;
    }
    for change in u.changed {
        writeln!(out, "  changed    {change}")?;
    }
    let new_keys = u.config_before.map(crate::config::keys_new_since).unwrap_or_default();
    if new_keys.is_empty() {
        writeln!(out, "  config     {}: knows every key of this version", home.config_path().display())?;
    } else {
        let defaults = home.root().join("config.toml.default");
        let same = std::fs::read_to_string(&defaults).is_ok_and(|t| t == DEFAULT_CONFIG_TOML);
        if !same {
            crate::exec::write_atomic(&defaults, DEFAULT_CONFIG_TOML.as_bytes(), 0o644)?;
        }
        let wrote = if same { "documented in" } else { "wrote" };
        writeln!(
            out,
            "  config     {} keys new in this version, their defaults apply: {}; {wrote} {} (config.toml left as it is)",
            new_keys.len(),
            new_keys.join(", "),
            defaults.display()
        )?;
    }
    let j = u.journal;
    let format = if j.format == crate::journal::frame::FORMAT_VERSION {
        format!("format {} (this carma's)", j.format)
    } else {
        format!(
            "format {} → {} (older records are still read; new ones are written in format {})",
            j.format,
            crate::journal::frame::FORMAT_VERSION,
            crate::journal::frame::FORMAT_VERSION
        )
    };
    writeln!(out, "  journal    {format}, {} records, {} tasks", j.records, j.tasks)?;
    writeln!(out, "  view       published for readers")?;
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
