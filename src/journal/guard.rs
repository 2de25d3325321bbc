//! A panic guard around every call into redb.

use std::path::Path;

use crate::error::{Error, Result};

thread_local! {
    /// Depth of [`guard`] calls on this thread: while positive, panics print nothing.
    static GUARDED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Runs `work`, which calls into redb, turning a panic into an error that names the file. redb
/// asserts on some damaged files (a truncated one above all); a damaged journal must give a
/// one-line error and the next step, never a crash. The panic's message is kept in the error
/// and not printed.
pub(crate) fn guard<T>(path: &Path, work: impl FnOnce() -> Result<T>) -> Result<T> {
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(|depth| depth.get()) == 0 {
                previous(info);
            }
        }));
    });
    GUARDED.with(|depth| depth.set(depth.get() + 1));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
    GUARDED.with(|depth| depth.set(depth.get() - 1));
    outcome.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Error::Journal {
            path: path.to_path_buf(),
            detail: format!(
                "the file is damaged (reading it failed: {}); run `carma journal check` and see \"Recovering a damaged journal\" in the README",
                message.replace('\n', " ")
            ),
        })
    })
}
