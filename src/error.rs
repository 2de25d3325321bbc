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
/// Exit code of `carma journal check` when it found damage (its report says where), and of a
/// writer (the tick above all) that refused a journal the check calls damaged. Distinct from 1,
/// which means the command itself could not run, so a script can tell "damaged" from "could
/// not look".
pub const EXIT_DAMAGED: i32 = 3;
/// Exit code when a bound of the queue was reached (`carma submit` with a record over the
/// journal's limit, or a spool folder already holding the most one user may have waiting).
pub const EXIT_LIMIT: i32 = 5;
/// Exit code for a bad system configuration file (`EX_CONFIG`): the admin's to fix.
pub const EXIT_CONFIG: i32 = 78;
/// Exit code when the state lock stayed busy for the whole bounded wait (`EX_TEMPFAIL`).
pub const EXIT_LOCK_BUSY: i32 = 75;
/// Exit code when the user may not do what they asked (`EX_NOPERM`): another user's task.
pub const EXIT_DENIED: i32 = 77;
/// Exit code when carma refuses a path it would have made or changed as its own (a link, a
/// directory of another user's, one others can write: `EX_CANTCREAT`); nothing was changed.
pub const EXIT_UNSAFE_PATH: i32 = 73;
/// Exit code of `carma wait --timeout` when the tasks are still running (as timeout(1)).
pub const EXIT_WAIT_TIMEOUT: i32 = 124;

/// Everything the carma library can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The state directory has not been created yet; `hint` says which `carma init`.
    #[error("state directory {} does not exist; {hint}", path.display())]
    NotInitialized {
        /// The state directory that was looked for.
        path: PathBuf,
        /// What to run to create it ([`Home::init_hint`](crate::home::Home::init_hint)).
        hint: String,
    },

    /// A task spec, command line or input file the user supplied is invalid.
    #[error("{0}")]
    BadInput(String),

    /// Another carma process held the lock for the whole bounded wait.
    #[error("lock {} is held by another carma process (waited {waited_ms} ms); retry later, or find the holder with `fuser {}`", path.display(), path.display())]
    LockBusy {
        /// The lock file.
        path: PathBuf,
        /// How long this process waited for it, ms.
        waited_ms: u64,
    },

    /// A journal record was written by a newer carma. Nothing is dropped: the journal is left
    /// as is.
    #[error(
        "journal {}: record {seq} was written by a newer carma ({detail}); use that carma or a later one (nothing was changed)", path.display()
    )]
    NewerRecord {
        /// The journal file.
        path: PathBuf,
        /// The record's sequence number.
        seq: u64,
        /// What is newer about it, as the decoder said.
        detail: String,
    },

    /// A journal record is damaged (checksum, frame, a missing or moved record). Nothing is
    /// dropped: the journal is left as is.
    #[error(
        "journal {}: record {seq}{} is damaged ({detail}); run `carma journal check` and see \"Recovering a damaged journal\" in the README (nothing was changed)",
        path.display(),
        task.as_ref().map(|t| format!(" (task {t})")).unwrap_or_default()
    )]
    DamagedRecord {
        /// The journal file.
        path: PathBuf,
        /// The damaged record's sequence number.
        seq: u64,
        /// The task the record is probably about, when its bytes still name one.
        task: Option<String>,
        /// What is wrong with it.
        detail: String,
    },

    /// `carma journal check` found problems; the report printed before this error names them.
    #[error("journal {}: {summary}; {next}", path.display())]
    JournalDamaged {
        /// The journal file.
        path: PathBuf,
        /// How many problems were found, in words (`2 problems found`).
        summary: String,
        /// What to do next (salvage, or use a newer carma).
        next: String,
    },

    /// A writer refused to append to a journal that `carma journal check` calls damaged
    /// (`journal::verdict`); `reason` is its first problem. The file was not written.
    #[error(
        "journal {} is damaged ({reason}); nothing was written; run `carma journal check` for details and `carma journal salvage` to recover",
        path.display()
    )]
    WriteRefused {
        /// The journal file.
        path: PathBuf,
        /// The check's first problem.
        reason: String,
    },

    /// The redb file could not be opened, read or committed.
    #[error("journal {}: {detail}", path.display())]
    Journal {
        /// The journal file.
        path: PathBuf,
        /// What went wrong and what to do (redb's message, a permission, a format version).
        detail: String,
    },

    /// `carma wait`: some tasks ended without finishing.
    #[error("{0}")]
    TasksFailed(String),

    /// `carma wait --timeout` passed before the tasks ended.
    #[error("{0}")]
    WaitTimeout(String),

    /// The user may not do this (see `access`); the message names the task and who may.
    #[error("{0}")]
    Denied(String),

    /// A bound of the queue was reached; the message gives the bound and what to do.
    #[error("{0}")]
    OverLimit(String),

    /// A task id named on the command line is not in the journal.
    #[error("no task {0}; `carma queue --all` lists the known tasks")]
    UnknownTask(String),

    /// A Slurm command (sbatch, scontrol, sinfo) could not be run or failed; `detail` is
    /// its message and the next step.
    #[error("`{command}` failed: {detail}")]
    Slurm {
        /// The command line that failed.
        command: String,
        /// Its message and the next step.
        detail: String,
    },

    /// The system config (`/etc/carma/carma.toml`) is unreadable or holds a bad value.
    #[error("{0}")]
    BadConfig(String),

    /// A path carma would make, change or read as its own is not safely its own: a link, a
    /// directory of another user's, one others can write. Nothing was changed there.
    #[error("refusing {}: {why}; nothing was changed there; {fix}", path.display())]
    UnsafePath {
        /// The refused path.
        path: PathBuf,
        /// What it is instead (`a symbolic link`, `owned by uid 1001, not by you (uid 0)`).
        why: String,
        /// What to do.
        fix: String,
    },

    /// An operating-system call failed; `context` says on what.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, on which path.
        context: String,
        /// The operating system's error.
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
            Error::Denied(_) => EXIT_DENIED,
            Error::BadConfig(_) => EXIT_CONFIG,
            Error::OverLimit(_) => EXIT_LIMIT,
            Error::TasksFailed(_) => EXIT_RUNTIME,
            Error::WaitTimeout(_) => EXIT_WAIT_TIMEOUT,
            Error::UnsafePath { .. } => EXIT_UNSAFE_PATH,
            Error::JournalDamaged { .. } | Error::WriteRefused { .. } => EXIT_DAMAGED,
            Error::NewerRecord { .. }
            | Error::DamagedRecord { .. }
            | Error::Journal { .. }
            | Error::Slurm { .. }
            | Error::Io { .. } => EXIT_RUNTIME,
        }
    }

    /// Wraps an I/O error with what was being done and on which path.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }
}

/// Result alias for the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;
