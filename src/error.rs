//! The library's error type and the exit codes the CLI maps it to.
//!
//! Every variant is something a user can hit, so every message names the object that failed
//! and says what to do next, on one line, with no trailing period. Scheduling outcomes (a
//! task that does not fit) are not errors: they are pending reasons in the journal.

use std::path::PathBuf;

/// Exit code for success.
pub const EXIT_OK: i32 = 0;
/// Exit code for a runtime failure (I/O, journal, launch).
pub const EXIT_RUNTIME: i32 = 1;
/// Exit code for a usage error or bad input the user can correct.
pub const EXIT_USAGE: i32 = 2;
/// Exit code when the state lock stayed busy for the whole bounded wait (`EX_TEMPFAIL`).
pub const EXIT_LOCK_BUSY: i32 = 75;

/// Everything the carma library can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The state directory has not been created yet.
    #[error("state directory {} does not exist; run `carma init` first (or pass --home DIR)", path.display())]
    NotInitialized { path: PathBuf },

    /// A task spec, command line or input file the user supplied is invalid.
    #[error("{0}")]
    BadInput(String),

    /// Another carma process held the lock for the whole bounded wait.
    #[error("lock {} is held by another carma process (waited {waited_ms} ms); retry later, or find the holder with `fuser {}`", path.display(), path.display())]
    LockBusy { path: PathBuf, waited_ms: u64 },

    /// A journal record could not be decoded. Nothing is dropped: the journal is left as is.
    #[error(
        "journal record {seq}: {detail}; the journal was written by a newer or different carma, upgrade carma or report a bug (nothing was changed)"
    )]
    CorruptRecord { seq: u64, detail: String },

    /// The redb file could not be opened, read or committed.
    #[error("journal {}: {detail}", path.display())]
    Journal { path: PathBuf, detail: String },

    /// A task id named on the command line is not in the journal.
    #[error("no task {0}; `carma queue --all` lists the known tasks")]
    UnknownTask(String),

    /// An operating-system call failed; `context` says on what.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The process exit code for this error, as documented in the README.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::NotInitialized { .. } | Error::BadInput(_) | Error::UnknownTask(_) => EXIT_USAGE,
            Error::LockBusy { .. } => EXIT_LOCK_BUSY,
            Error::CorruptRecord { .. } | Error::Journal { .. } | Error::Io { .. } => EXIT_RUNTIME,
        }
    }

    /// Wraps an I/O error with what was being done and on which path.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }
}

/// Result alias for the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;
