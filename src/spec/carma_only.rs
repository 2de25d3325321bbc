//! The fields only carma sets, refused from users.
//!
//! A spec file is the user's words; some fields of a task are carma's own: which interactive
//! session a task is (`carma alloc` and `carma run` set it), and what the tick decides at
//! ingest (where its time limit came from). None of them is a key of a spec file: a spec
//! naming one is refused by name, at submit and again at ingest, where the spool file's
//! `[task]` table is read with the same rule (schema/task-spec.schema.json lists them).
//!
//! The session mode travels in the spool file's `[submit]` table, the part `carma submit`
//! writes for itself. The spool file is still the user's to write, so what that part may say
//! is only what `carma alloc`/`carma run` give (one task, its own command for a held
//! allocation, never requeued), and an interactive task is treated as one everywhere: never
//! a preemption victim, its time limit the queue's rule (`spec::time_limit`). What a task
//! shows is what the scheduler does: no interactive task can say `requeue: yes`.

use super::{INTERACTIVE_MODES, TaskSpec};

/// The keys only carma sets, with who sets them.
pub const CARMA_ONLY_KEYS: [(&str, &str); 1] = [(
    "interactive",
    "carma alloc and carma run set it (carma alloc gives a shell, carma run one command, carma alloc --no-shell a held allocation)",
)];

/// The session mode of a held allocation (`crate::exec::interactive::HOLD`).
const HOLD: &str = "hold";

/// The first process of a held allocation (`carma alloc --no-shell`): idle until its limit or
/// `carma cancel`.
pub const HOLD_COMMAND: [&str; 2] = ["sleep", "infinity"];

/// Refuses a spec file's table that names a key only carma sets.
pub fn refuse_in_spec(table: &toml::Table) -> Result<(), String> {
    match CARMA_ONLY_KEYS.iter().find(|(key, _)| table.contains_key(*key)) {
        Some((key, who)) => Err(format!("`{key}` is not a spec key: {who}; remove it from the spec")),
        None => Ok(()),
    }
}

/// A session mode as the spool's `[submit]` table gives it.
pub fn parse_mode(mode: &str) -> Result<String, String> {
    if INTERACTIVE_MODES.contains(&mode) {
        return Ok(mode.to_string());
    }
    Err(format!(
        "interactive = {:?} is not a session mode; use one of {}",
        crate::text::escape(mode),
        INTERACTIVE_MODES.join(", ")
    ))
}

/// Refuses an interactive task in a shape `carma alloc`/`carma run` never make; `Ok` for a
/// batch task.
pub fn check_session(spec: &TaskSpec) -> Result<(), String> {
    let Some(mode) = spec.interactive.as_deref() else { return Ok(()) };
    if spec.requeue == Some(true) {
        return Err(format!(
            "an interactive session (carma {}) is never preempted, so it is never requeued; drop --requeue",
            if mode == "run" { "run" } else { "alloc" }
        ));
    }
    if spec.array.is_some() {
        return Err("an interactive session is one task; --array and --param are for carma submit".into());
    }
    if mode == HOLD && spec.command != HOLD_COMMAND {
        return Err(
            "a held allocation runs carma's own idle command, not one of its own; make one with carma alloc --no-shell"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(mode: &str, command: &[&str]) -> TaskSpec {
        TaskSpec {
            interactive: Some(mode.into()),
            command: command.iter().map(|w| w.to_string()).collect(),
            ..TaskSpec::default()
        }
    }

    /// Goal (issue 41): a spec naming a carma-only key is refused by name, and an interactive
    /// task can never say it may be requeued. Method: each refusal alone.
    #[test]
    fn carma_only_keys_and_impossible_sessions_are_refused() {
        let table: toml::Table = toml::from_str("name = \"x\"\ninteractive = \"hold\"").unwrap();
        let refused = refuse_in_spec(&table).unwrap_err();
        assert!(
            refused.starts_with("`interactive` is not a spec key: carma alloc and carma run set it"),
            "{refused}"
        );
        assert!(refuse_in_spec(&toml::from_str("name = \"x\"").unwrap()).is_ok());
        assert_eq!(check_session(&spec("alloc", &["bash"])), Ok(()));
        assert_eq!(check_session(&TaskSpec { requeue: Some(true), ..TaskSpec::default() }), Ok(()), "batch");
        let requeued = TaskSpec { requeue: Some(true), ..spec("run", &["x"]) };
        assert_eq!(
            check_session(&requeued).unwrap_err(),
            "an interactive session (carma run) is never preempted, so it is never requeued; drop --requeue"
        );
        assert_eq!(check_session(&spec("hold", &HOLD_COMMAND)), Ok(()));
        assert!(
            check_session(&spec("hold", &["python", "train.py"]))
                .unwrap_err()
                .starts_with("a held allocation")
        );
        assert_eq!(
            parse_mode("tty").unwrap_err(),
            "interactive = \"tty\" is not a session mode; use one of alloc, run, hold"
        );
    }
}
