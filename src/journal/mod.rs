//! The journal: an append-only, crash-safe log of events in one redb file, and the State
//! folded from it.
//!
//! `event` defines the records, `frame` and `wire` their bytes, `store` is the only code that
//! touches redb, and `state` is the pure fold. `check` decides whether a journal is damaged,
//! and `verdict` makes every writer abide by it. The lock-then-open protocol every command
//! follows is `crate::session`, a layer above this one.

pub mod backup;
pub mod check;
mod energy;
pub mod event;
mod fold;
pub mod frame;
pub(crate) mod guard;
mod header;
pub mod inspect;
mod invariants;
mod isolate;
pub mod notices;
pub mod phase;
pub mod readings;
pub mod reservations;
pub mod salvage;
pub mod state;
pub mod store;
mod suspension;
pub mod verdict;
pub mod wire;
mod withdrawal;

pub use event::{Event, ProcessRef, REQUEUE_EXIT_CODE, Record, RequeueMode, USER_REQUEUE};
pub use fold::Applied;
pub use frame::check_submitted_fits;
pub use phase::{End, Phase, Queue};
pub use state::{State, Status, Task};
pub use store::{Journal, StateCache};

#[cfg(test)]
mod tests;
