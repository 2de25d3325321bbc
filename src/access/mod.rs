//! Who may do what: the permission model in one place.
//!
//! A queue has administrators and ordinary users. **An administrator is root, the owner of
//! the state directory (a personal queue's user), or a member of the configured
//! `[access] admin-group`** ([`Policy::is_admin`]); nothing else makes one (being able to
//! write the journal does not). Everything public is readable by everyone: the queue, each
//! task's spec (command, workdir, the *names* of its environment variables), its events, the
//! GPUs and the reports. What is private belongs to the task's submitter and the
//! administrators: environment values, log contents and run-folder files. Acting on a task
//! (cancel, hold, release, update) is for its submitter and the administrators; joining an
//! array is for the array's owner alone (an administrator's task joins no one else's array
//! either: membership is ownership); depending on a task is open to all (its state is
//! public). Priorities above the users' cap and the queue's own tools are administrators'.
//!
//! [`may`] is the only place that decides. It is pure: it takes the actor (uid and whether
//! they are in the admin group, looked up at the edge), the action, the target and the
//! policy, reads neither the system nor the journal, and is property-tested like `sched`.
//! The CLI checks it at request time so a refusal is immediate, and the tick checks it again
//! when it applies what a user left in the spool (`intake`, `tick::requests`, `tick::admit`).

pub mod uid;
pub mod users;

use serde::Deserialize;

/// The queue's access settings (`[access]` in config.toml) and its owner.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct Policy {
    /// Members of this group administer the queue, as root does ("": no such group).
    pub admin_group: String,
    /// The owner of the state directory (root for a system queue); set when the
    /// configuration is loaded, never read from the file.
    #[serde(skip)]
    pub owner_uid: u32,
    /// The admin group's gid, resolved when the configuration is loaded.
    #[serde(skip)]
    pub admin_gid: Option<u32>,
}

/// Someone acting on the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actor {
    /// Who acts: this process's effective uid, or the owner of a spool submission or request
    /// the tick admits (0: root).
    pub uid: u32,
    /// Whether the user is in the policy's admin group (looked up at the edge).
    pub in_admin_group: bool,
}

/// What an actor wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Cancel a task (`carma cancel`).
    Cancel,
    /// Keep a waiting task from starting (`carma hold`).
    Hold,
    /// Let a held task start again (`carma release`).
    Release,
    /// Change a waiting task's spec (`carma update`).
    Update,
    /// Stop a running task and queue it again (`carma requeue`).
    Requeue,
    /// Read the task's environment values.
    ReadSecrets,
    /// Read the task's output and run-folder files.
    ReadLogs,
    /// Make a new task a member of an array.
    JoinArray,
    /// Make a new task wait for this one (`--after`).
    DependOn,
    /// Set a priority above `[limits] user-priority-max`, or a negative nice.
    RaisePriority,
    /// The queue's own tools: journal check and salvage, init, another user's requests.
    Administer,
    /// Create or delete a GPU reservation (`carma reserve`).
    Reserve,
}

/// What the action is done to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// One task.
    Task {
        /// The task's submitter.
        owner_uid: u32,
    },
    /// An array, as a whole (its id).
    Array {
        /// The submitter of the array's tasks.
        owner_uid: u32,
    },
    /// The queue itself: no task, an administrator's action.
    Queue,
}

/// A refusal, with what was refused and whose it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("it belongs to uid {owner_uid}; only its submitter or root may {}", action.verb())]
    /// The task is another user's and the actor is no administrator.
    NotYours {
        /// What was refused.
        action: Action,
        /// Whose the task is.
        owner_uid: u32,
    },
    #[error("array belongs to uid {owner_uid}; only its submitter may add tasks to it")]
    /// A new task may join only its own submitter's array.
    NotYourArray {
        /// Whose the array is.
        owner_uid: u32,
    },
    #[error("only root or the queue's administrators may {}", action.verb())]
    /// The action is root's and the administrators' alone.
    NotAdmin {
        /// What was refused.
        action: Action,
    },
}

impl Actor {
    /// An actor with no admin-group membership (tests, and uids with no account).
    pub fn uid(uid: u32) -> Actor {
        Actor { uid, in_admin_group: false }
    }

    /// The user running this process.
    pub fn current(policy: &Policy) -> Actor {
        Actor::lookup(uid::effective(), policy)
    }

    /// `uid`, with their group membership looked up in the user database.
    pub fn lookup(uid: u32, policy: &Policy) -> Actor {
        let in_admin_group = policy.admin_gid.is_some_and(|gid| users::in_group(uid, gid));
        Actor { uid, in_admin_group }
    }
}

impl Policy {
    /// The one definition of an administrator.
    pub fn is_admin(&self, actor: &Actor) -> bool {
        actor.uid == 0 || actor.uid == self.owner_uid || actor.in_admin_group
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
            Action::Requeue => "requeue it",
            Action::ReadSecrets => "read its environment values",
            Action::ReadLogs => "read its output",
            Action::JoinArray => "add tasks to it",
            Action::DependOn => "depend on it",
            Action::RaisePriority => "set a priority above the users' cap or a negative nice",
            Action::Administer => "do this",
            Action::Reserve => "reserve GPUs",
        }
    }
}

/// Whether `actor` may do `action` to `target` under `policy`.
pub fn may(actor: &Actor, action: Action, target: Target, policy: &Policy) -> Result<(), Denied> {
    let admin = policy.is_admin(actor);
    match (target, action) {
        (_, Action::DependOn) => Ok(()),
        (Target::Array { owner_uid }, Action::JoinArray) if owner_uid != actor.uid => {
            Err(Denied::NotYourArray { owner_uid })
        }
        (Target::Array { .. }, Action::JoinArray) => Ok(()),
        (Target::Task { owner_uid } | Target::Array { owner_uid }, _) if admin || owner_uid == actor.uid => {
            Ok(())
        }
        (Target::Task { owner_uid } | Target::Array { owner_uid }, _) => {
            Err(Denied::NotYours { action, owner_uid })
        }
        (Target::Queue, _) if admin => Ok(()),
        (Target::Queue, _) => Err(Denied::NotAdmin { action }),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const ACTIONS: [Action; 12] = [
        Action::Cancel,
        Action::Hold,
        Action::Release,
        Action::Update,
        Action::Requeue,
        Action::ReadSecrets,
        Action::ReadLogs,
        Action::JoinArray,
        Action::DependOn,
        Action::RaisePriority,
        Action::Administer,
        Action::Reserve,
    ];

    fn target(kind: usize, owner_uid: u32) -> Target {
        match kind {
            0 => Target::Task { owner_uid },
            1 => Target::Array { owner_uid },
            _ => Target::Queue,
        }
    }

    proptest! {
        /// The whole model: admins (root, the queue's owner, the admin group) may do anything
        /// but join another's array; an owner anything to their own; dependencies are open;
        /// nobody else may do anything.
        #[test]
        fn the_permission_model(
            uid in 0u32..6, owner in 0u32..6, queue_owner in 0u32..6, in_group: bool,
            action in 0usize..12, kind in 0usize..3,
        ) {
            let policy = Policy { owner_uid: queue_owner, ..Policy::default() };
            let actor = Actor { uid, in_admin_group: in_group };
            let action = ACTIONS[action];
            let target = target(kind, owner);
            let admin = uid == 0 || uid == queue_owner || in_group;
            let expected = match (target, action) {
                (_, Action::DependOn) => true,
                (Target::Array { .. }, Action::JoinArray) => uid == owner,
                (Target::Queue, _) => admin,
                _ => admin || uid == owner,
            };
            prop_assert_eq!(may(&actor, action, target, &policy).is_ok(), expected);
        }
    }

    #[test]
    fn refusals_say_whose_it_is_and_who_may() {
        let policy = Policy::default();
        let denied =
            may(&Actor::uid(1001), Action::Cancel, Target::Task { owner_uid: 1002 }, &policy).unwrap_err();
        assert_eq!(denied.to_string(), "it belongs to uid 1002; only its submitter or root may cancel it");
        let denied =
            may(&Actor::uid(0), Action::JoinArray, Target::Array { owner_uid: 1002 }, &policy).unwrap_err();
        assert_eq!(denied.to_string(), "array belongs to uid 1002; only its submitter may add tasks to it");
        let denied = may(&Actor::uid(1001), Action::RaisePriority, Target::Queue, &policy).unwrap_err();
        assert_eq!(
            denied.to_string(),
            "only root or the queue's administrators may set a priority above the users' cap or a negative nice"
        );
    }
}
