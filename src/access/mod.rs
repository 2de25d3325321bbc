//! Who may do what: the permission model in one place.
//!
//! A queue has one kind of privileged user, root (the administrator, and the tick), and
//! ordinary users. Everything public is readable by everyone: the queue, each task's spec
//! (command, workdir, the *names* of its environment variables), its events, the GPUs and the
//! reports, all through the published view (`view`). What is private belongs to the task's
//! submitter and root only: environment values (in `private/`, root-only), log contents and
//! the run-folder files (owned by the submitter or by root, mode 0600, in folders others may
//! traverse but not list). Acting on a task (cancel, hold, release, update) is for its
//! submitter and root. [`may`] is the only place that decides; the CLI checks it at request
//! time so a refusal is immediate, and the tick checks it again when it applies a request,
//! because a request file is written by a user.
//!
//! `may` is pure: it takes the actor, the action and the task's owner, and neither reads the
//! system nor the journal, so it is property-tested like `sched`.

pub mod users;

/// Someone acting on the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actor {
    pub uid: u32,
}

/// What an actor wants to do to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Cancel,
    Hold,
    Release,
    Update,
    /// Read the task's environment values.
    ReadSecrets,
    /// Read the task's output and run-folder files.
    ReadLogs,
}

/// A refusal, with what was refused and whose task it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("it belongs to uid {owner_uid}; only its submitter or root may {}", action.verb())]
pub struct Denied {
    pub action: Action,
    pub owner_uid: u32,
}

impl Actor {
    /// The user running this process (its effective uid).
    pub fn current() -> Actor {
        // SAFETY: geteuid has no preconditions and cannot fail.
        Actor { uid: unsafe { libc::geteuid() } }
    }

    pub fn uid(uid: u32) -> Actor {
        Actor { uid }
    }

    pub fn is_root(self) -> bool {
        self.uid == 0
    }
}

impl Action {
    /// The action in words, as in "only its submitter or root may cancel it".
    pub fn verb(self) -> &'static str {
        match self {
            Action::Cancel => "cancel it",
            Action::Hold => "hold it",
            Action::Release => "release it",
            Action::Update => "update it",
            Action::ReadSecrets => "read its environment values",
            Action::ReadLogs => "read its output",
        }
    }
}

/// Whether `actor` may do `action` to a task submitted by `owner_uid`.
pub fn may(actor: Actor, action: Action, owner_uid: u32) -> Result<(), Denied> {
    if actor.is_root() || actor.uid == owner_uid { Ok(()) } else { Err(Denied { action, owner_uid }) }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const ACTIONS: [Action; 6] = [
        Action::Cancel,
        Action::Hold,
        Action::Release,
        Action::Update,
        Action::ReadSecrets,
        Action::ReadLogs,
    ];

    proptest! {
        /// Root may do everything, an owner everything to their own task, nobody else anything.
        #[test]
        fn only_root_and_the_owner_may_act(actor in 0u32..5, owner in 0u32..5, action in 0usize..6) {
            let action = ACTIONS[action];
            let allowed = may(Actor::uid(actor), action, owner).is_ok();
            prop_assert_eq!(allowed, actor == 0 || actor == owner);
        }
    }

    #[test]
    fn a_refusal_says_whose_task_it_is_and_who_may() {
        let denied = may(Actor::uid(1001), Action::Cancel, 1002).unwrap_err();
        assert_eq!(denied.to_string(), "it belongs to uid 1002; only its submitter or root may cancel it");
    }
}
