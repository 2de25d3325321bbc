//! `carma run --attach ID -- CMD`: a command in a held allocation (`carma alloc
//! --no-shell`), attached to this terminal. The program is resolved here, as the user, with
//! the user's `PATH` (as `carma submit` does); the allocation's supervisor runs it as the
//! user in the task's cgroup ([`crate::exec::interactive::attach`]).

use std::ffi::OsString;
use std::path::Path;

use crate::error::Error;
use crate::exec::interactive::HOLD;
use crate::home::Home;
use crate::journal::Status;
use crate::view::{self, lookup};

/// PATH for the lookup when the caller has none.
const PATH_DEFAULT: &str = "/usr/local/bin:/usr/bin:/bin";

pub(in crate::commands) fn run(home: &Home, query: &str, command: &[OsString]) -> anyhow::Result<()> {
    if command.is_empty() {
        return Err(Error::BadInput(format!(
            "carma run --attach needs a command after `--`, e.g. carma run --attach {query} -- nvidia-smi"
        ))
        .into());
    }
    let mut argv = Vec::with_capacity(command.len());
    for word in command {
        let word = word.to_str().ok_or_else(|| Error::BadInput(format!("{word:?} is not valid UTF-8")))?;
        argv.push(word.to_string());
    }
    let state = view::load(home)?;
    let spooled = lookup::spooled(home, &state);
    let lookup::Found::Task(task) = lookup::find(&state, &spooled, query)? else {
        return Err(Error::BadInput(format!(
            "task {query} has not started yet; wait for carma alloc's grant"
        ))
        .into());
    };
    let id = &task.id;
    if task.spec.interactive.as_deref() != Some(HOLD) {
        return Err(Error::BadInput(format!(
            "task {id} is not a held allocation; make one with carma alloc --no-shell"
        ))
        .into());
    }
    let me = crate::access::uid::effective();
    if task.submitter_uid != me {
        let owner = crate::access::users::display(task.submitter_uid);
        return Err(
            Error::Denied(format!("task {id} is {owner}'s; only its submitter can attach to it")).into()
        );
    }
    let attempt = match (task.status(), task.active_attempt()) {
        (Status::Running, Some(attempt)) if attempt.launched_ms.is_some() => attempt.number,
        (status, _) => {
            let status = status.as_str().to_lowercase();
            return Err(
                Error::BadInput(format!("task {id} is {status}, not running; nothing to attach to")).into()
            );
        }
    };
    let cwd = std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    let path_var = std::env::var("PATH").unwrap_or_else(|_| PATH_DEFAULT.into());
    argv[0] = crate::commands::submit::resolve_program(&argv[0], &path_var, Path::new(&cwd))?;
    // Refused here in the supervisor's words, before anything is sent: a frame would cut a
    // command too long for it.
    if let Some(why) = crate::exec::interactive::frame::command_refusal(&argv) {
        return Err(Error::BadInput(format!("task {id}: {why}")).into());
    }
    let stream = super::connect(home, id, attempt)?;
    let code = match super::terminal::relay(stream, Some(argv))? {
        super::terminal::Ending::Exit(code) => code,
        super::terminal::Ending::Lost => {
            super::terminal::note(&format!("carma: the command in task {id} ended without a status"), false);
            1
        }
    };
    std::process::exit(code & 0xff)
}
