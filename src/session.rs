//! The lock-then-open protocol, in one place, above the journal, the view and the state
//! directory it ties together.
//!
//! redb fails a second open at once instead of waiting, so every writer first takes
//! `carma.lock` (exclusive, with a bounded wait), then opens the journal, works, publishes
//! what it committed to the read model (`view`) and drops both. Read verbs do not come here:
//! they read the view and never wait. [`read`] remains for administrators' tools that must see
//! the journal itself (`carma journal check`).

use std::time::Duration;

use crate::error::Result;
use crate::home::{Home, LockGuard, LockMode};
use crate::journal::state::State;
use crate::journal::store::{Journal, ReadOpen, StateCache};
use crate::journal::verdict;

/// `carma init`: the state directory's folders and files ([`Home::init`]), then the journal if
/// there is none yet, sealed as sound (an empty journal is sound by construction, so the first
/// tick need not check it in full). Returns what was created.
pub fn init(home: &Home, config_text: &str) -> Result<Vec<String>> {
    let mut created = home.init(config_text)?;
    let path = home.journal_path();
    if !path.exists() {
        Journal::create(&path)?;
        verdict::seal_new(&path);
        created.push(path.display().to_string());
        home.tighten_modes()?;
    }
    Ok(created)
}

/// Runs `work` with the journal open read-only and its State loaded.
pub fn read<T>(home: &Home, wait: Duration, work: impl FnOnce(&Journal, State) -> Result<T>) -> Result<T> {
    let lock = LockGuard::acquire(home, LockMode::Shared, wait)?;
    match Journal::open_read_only(&home.journal_path())? {
        ReadOpen::Ready(mut journal) => {
            let state = journal.load_state()?;
            let out = work(&journal, state);
            drop(journal);
            drop(lock);
            out
        }
        ReadOpen::NeedsRepair => {
            // The last writer crashed; a writable open lets redb repair the file. That needs
            // the exclusive lock, which also keeps the read consistent.
            let lock = lock.upgrade(home, wait)?;
            let mut journal = Journal::open(&home.journal_path())?;
            let state = journal.load_state()?;
            let out = work(&journal, state);
            drop(journal);
            drop(lock);
            out
        }
    }
}

/// Runs `work` with the journal open for writing and its State loaded.
pub fn write<T>(
    home: &Home,
    wait: Duration,
    work: impl FnOnce(&mut Journal, &mut State) -> Result<T>,
) -> Result<T> {
    write_cached(home, wait, None, work)
}

/// [`write`], starting from the State `cache` kept when it is still the journal's fold, and
/// keeping the State in it afterwards when `work` succeeded. A failed `work` may leave the
/// State ahead of the journal, so the cache is then left empty.
///
/// Before the journal is opened for writing, `verdict` decides whether it may be written: a
/// journal that `carma journal check` would call damaged is refused
/// ([`crate::Error::WriteRefused`]) and not written at all. After it is closed, still under the
/// lock, it is sealed for the next session.
pub fn write_cached<T>(
    home: &Home,
    wait: Duration,
    cache: Option<&mut StateCache>,
    work: impl FnOnce(&mut Journal, &mut State) -> Result<T>,
) -> Result<T> {
    let lock = LockGuard::acquire(home, LockMode::Exclusive, wait)?;
    let path = home.journal_path();
    // Without a caller's cache, one for this session: the verdict's read-only load hands the
    // State over through it.
    let mut own = StateCache::default();
    let cache = cache.unwrap_or(&mut own);
    let basis = verdict::before_write(&path, cache)?;
    let mut journal = Journal::open(&path)?;
    let out = load_and_work(home, &mut journal, cache, work);
    drop(journal);
    verdict::after_write(&path, basis, out.is_ok());
    drop(lock);
    out
}

/// Loads the State (held to the verdict's standard), runs `work` and publishes.
fn load_and_work<T>(
    home: &Home,
    journal: &mut Journal,
    cache: &mut StateCache,
    work: impl FnOnce(&mut Journal, &mut State) -> Result<T>,
) -> Result<T> {
    let loaded = journal.load_state_cached(cache);
    let mut state = verdict::loaded(journal, loaded)?;
    let out = work(journal, &mut state).and_then(|out| publish(home, journal, &state).map(|()| out));
    if out.is_ok() {
        journal.keep_state(state, cache);
    }
    out
}

/// Publishes the read model, unless `home` does not keep one.
fn publish(home: &Home, journal: &Journal, state: &State) -> Result<()> {
    if home.publishes_view() { crate::view::publish(home, journal, state) } else { Ok(()) }
}
