//! The bytes carma keeps for a user in the state directory end with the attempt: once the
//! tick has committed an attempt's end, its run-folder logs and script copy are sealed
//! ([`crate::exec::seal`]): root's, readable by the submitter, cut to `log-bytes-max`. After
//! that, nothing of the submitter's in `runs/` can grow.
//!
//! Sealing follows the commit of the end, so a tick killed between the two leaves that
//! attempt's files unsealed (still under the cap the supervisor kept): a crash window of one
//! commit, not a way to choose.

use crate::config::Config;
use crate::home::Home;
use crate::journal::State;
use crate::journal::state::AttemptRef;

use super::runner::ActiveAttempt;

/// Seals the files of every attempt in `before` (active when the tick began) that `state`
/// (after the commit) has ended. A file that cannot be sealed is named on stderr.
pub(super) fn seal_ended(home: &Home, state: &State, before: &[ActiveAttempt], config: &Config) {
    for ended in ended_attempts(state, before) {
        let Ok(run_dir) = crate::exec::run_dir(home.root(), ended.task.as_str(), ended.attempt) else {
            continue;
        };
        if let Err(why) = crate::exec::seal::seal_ended_attempt(&run_dir, config.limits.log_bytes_max) {
            eprintln!("carma tick: task {} attempt {}: {why}", ended.task, ended.attempt);
        }
    }
}

/// The local attempts of `before` that have ended in `state`.
fn ended_attempts<'a>(state: &State, before: &'a [ActiveAttempt]) -> Vec<&'a ActiveAttempt> {
    before
        .iter()
        .filter(|active| matches!(active.at, AttemptRef::Local(_)))
        .filter(|active| {
            state.tasks.get(&active.task).is_some_and(|task| {
                task.attempts.iter().any(|a| a.number == active.attempt && a.ended_ms.is_some())
            })
        })
        .collect()
}
