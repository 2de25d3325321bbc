//! Issue 23: `update` cannot shorten a time limit below the task's `--signal` lead.
//!
//! Goal: the refusal is submit's, word for word, in one line with exit 2, and the task keeps
//! its limit; a limit that still leaves room is taken.
//! Method: the real binary on a state directory with no GPUs; a held task waits in the
//! journal.

mod common;

use common::{TestHome, assert_error};

#[test]
fn update_refuses_a_limit_shorter_than_the_signal_lead() {
    let home = TestHome::new();
    home.set_config("[tick]\ngpus = \"none\"\n");
    let id = home.ok(&["submit", "--parsable", "--hold", "-t", "2m", "--signal", "USR1@60", "--", "true"]);
    let id = id.trim();
    home.ok(&["tick"]);
    assert_error(
        &home.run(&["update", id, "--time-limit", "30s"]),
        2,
        &format!(
            "cannot update task {id} (true): signal \"USR1@60\" comes 60 s before a time limit of 30s; give a time limit longer than that or fewer seconds"
        ),
    );
    let shown = home.ok(&["show", id]);
    assert!(shown.lines().any(|l| l == "time limit  2m"), "{shown}");
    home.ok(&["update", id, "--time-limit", "90s"]);
    let shown = home.ok(&["show", id]);
    assert!(shown.lines().any(|l| l == "time limit  1m 30s"), "{shown}");
}
