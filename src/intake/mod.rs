//! The trust boundary: the one room of carma that touches what users leave for the tick.
//!
//! Everything a user hands the root tick passes through here and comes out as a validated,
//! bounded, owner-attributed submission or request, or as a refusal naming its owner. No
//! other code of the tick opens, reads, renames or removes a user's file.
//!
//! **Layout.** `spool/` (root's, sticky and open to all on a system queue) holds one folder
//! per user, `spool/<uid>/`, made by that user's first `carma submit` (mode 0755: others
//! may list the names, which are task ids, but the files are 0600). A user's
//! submissions (`<id>.toml`) and requests (`<id>.cancel`, `.hold`, `.release`, `.update`,
//! `.requeue`) live only in their own folder, so whoever owns the folder is who asked: ownership is
//! decided once, by `fstat` on the folder's open descriptor, and again on every file.
//!
//! **How a file is read** ([`scan`], [`Scan::read`]):
//! - every open is `openat` relative to a directory descriptor the tick opened itself, with
//!   `O_NOFOLLOW | O_NONBLOCK`: a symbolic link is refused (`ELOOP`), a FIFO never blocks;
//! - type, owner, link count, mode and size are checked on the open descriptor (`fstat`),
//!   never on a path; a file bigger than its cap is refused before a byte is read;
//! - bytes are read with a hard cap, then parsed.
//!
//! **What a tick reads** ([`observe`]): every entry ingest will judge, once, before anything
//! is decided, into an owned [`Observed`]: submissions parsed and validated, request bodies
//! checked to be UTF-8. Ingest's decision (`tick::ingest::decide`) reads only that.
//!
//! **What the tick writes** ([`settle`]): the private copy of an accepted submission (its
//! environment values) is written from the bytes already read into root's own vault
//! (`private/vault.redb`, a file the tick creates itself, see `vault`), one durable commit a
//! tick; the user's file is then unlinked by name in its checked folder. A user's file is
//! never renamed or read into root-only space.
//!
//! **Bounds, per user and per tick** ([`Bounds`]): names examined, bytes read, refusal
//! records written. One user's junk costs that user's budget only: every user with a folder
//! gets a share each tick, whatever another user left. What is left for later is journaled
//! (IngestDeferred). The top of `spool/` holds only users' folders; anything else there is
//! refused and moved to `quarantine/`, and a flood of it (more than [`Bounds::top_odd_max`])
//! moves the whole top level to `quarantine/` in one rename, keeping the users' folders.
//!
//! **Identifiers.** A file's name gives only the id carma minted at submit for that user's
//! own task; membership and ownership (arrays, dependencies) are checked by the tick against
//! the journal (`tick::admit` with `access::may`), never taken from the file.

mod deposit;
pub(crate) mod fd;
mod observe;
mod quarantine;
mod rooms;
mod scan;
mod settle;
mod vault;

pub use deposit::{
    Filed, Waiting, check_queue_room, request, submit, submit_for, submit_with_id, waiting, withdraw,
};
pub use observe::{Observed, Seen, observe};
pub use quarantine::{
    CLEAN_BOUNDS, CleanBounds, Cleaned, clean_quarantine, empty_quarantine, spool_bytes_by_user,
};
pub use scan::{Entry, EntryKind, Read, Scan, Verb, scan, scan_readonly, scan_within};
pub use settle::{Private, Settle, settle};
pub use vault::VAULT_FILE;

/// The bounds the tick keeps, per user and per tick (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Names one tick examines across every user's folder; shared out equally.
    pub files_total: usize,
    /// Names examined in one user's folder per tick: at least `files_per_user_min`, at most
    /// `files_per_user_max`, the equal share of `files_total` in between.
    pub files_per_user_min: usize,
    /// The most names examined in one user's folder per tick (see `files_per_user_min`).
    pub files_per_user_max: usize,
    /// Bytes read from one user's files per tick (their first file is always read, within
    /// its own cap, so a big submission still goes through).
    pub bytes_per_user: u64,
    /// Rejected records written for one user per tick; the rest are counted in one more.
    pub refusals_per_user: usize,
    /// Names looked at at the top of `spool/` per tick.
    pub top_names_max: usize,
    /// Odd entries at the top of `spool/` refused one by one per tick; at more than this,
    /// the top level is moved to quarantine whole.
    pub top_odd_max: usize,
}

/// The bounds of every real tick.
pub const BOUNDS: Bounds = Bounds {
    files_total: 16_384,
    files_per_user_min: 256,
    files_per_user_max: 4_096,
    bytes_per_user: 32 * 1024 * 1024,
    refusals_per_user: 32,
    top_names_max: 4_096,
    top_odd_max: 256,
};

/// Largest spool file accepted: a spec, its environment, an embedded model summary and a
/// job script. Refused on `fstat`, before any byte is read.
pub const SPOOL_BYTES_MAX: u64 = crate::spec::spool_form::SPOOL_BYTES_MAX;
/// Largest request body (an update's changes as TOML are a few lines).
pub const REQUEST_BYTES_MAX: u64 = 16 * 1024;
/// Submissions and requests one user may have waiting in the spool; `carma submit` refuses
/// more with a one-line reason.
pub const SPOOL_ENTRIES_PER_USER_MAX: usize = 10_000;
/// Temp files older than this are left by crashed submitters and are swept by the tick.
const STALE_TEMP_SECS: i64 = 3600;
/// A file with more than one link is a submit between its `link()` and the unlink of its
/// temp name for a few milliseconds; one that stays linked longer was linked by someone else.
const HARDLINK_GRACE_SECS: i64 = 10;
