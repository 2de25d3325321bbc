//! `carma mcp`: a Model Context Protocol server on stdin/stdout for the user's agent, which
//! starts it as that user. The protocol is `crate::mcp`'s; this room is carma's side of it.
//!
//! Every tool is a carma command line: its arguments become the words a person would type
//! (`tools`), clap parses them as it parses `carma`'s own, and the verb's own function runs
//! with its output captured (each verb's `run_to`). So a tool goes through the CLI's code and
//! the CLI's access rules (`access::may`, the published view, the spool), and can do nothing
//! the user's own `carma` cannot: another user's task is refused with the CLI's message and
//! exit code, and what `show` keeps private (environment values) never reaches a result. The
//! answers are the verbs' `--json` documents (`schema/`), or their lines where a verb has no
//! `--json` (cancel, hold, release, wait).

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::time::Duration;

use clap::Parser;
use serde_json::{Map, Value};

use crate::cli::{Cli, Command};
use crate::home::Home;
use crate::mcp::{Handler, Outcome, ReadError, Request, Resource, Tool};

mod tools;
mod untrusted;

/// Serves one client on stdin and stdout until stdin ends.
pub(super) fn run(home: &Home, wait: Duration) -> anyhow::Result<()> {
    let answers = protocol_stdout()?;
    let mut output = std::io::BufWriter::new(answers);
    let door = Door { home: home.clone(), wait };
    crate::mcp::serve(&mut std::io::stdin().lock(), &mut output, &door)?;
    Ok(())
}

/// The protocol owns stdout: answers go to a copy of it, and descriptor 1 becomes stderr, so
/// nothing printed by mistake (a verb's stray line) can break a message.
fn protocol_stdout() -> anyhow::Result<std::fs::File> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) and dup2 act on descriptors only; the new descriptor is
    // owned by the File made from it and by nothing else.
    unsafe {
        let copy = libc::fcntl(libc::STDOUT_FILENO, libc::F_DUPFD_CLOEXEC, 3);
        if copy < 0 {
            return Err(crate::Error::io("cannot copy stdout", std::io::Error::last_os_error()).into());
        }
        if libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) < 0 {
            return Err(
                crate::Error::io("cannot point stdout at stderr", std::io::Error::last_os_error()).into()
            );
        }
        Ok(std::fs::File::from_raw_fd(copy))
    }
}

/// carma's side of the protocol: the state directory every tool works on.
struct Door {
    home: Home,
    wait: Duration,
}

impl Handler for Door {
    fn tools(&self) -> Vec<Tool> {
        tools::TOOLS.iter().map(tools::Spec::tool).collect()
    }

    fn call(&self, name: &str, arguments: &Map<String, Value>, request: &Request<'_>) -> Option<Outcome> {
        let spec = tools::TOOLS.iter().find(|t| t.name == name)?;
        Some(match tools::words(spec, arguments) {
            Ok(call) => self.run_words(call, request),
            Err(message) => {
                Outcome::Failed { said: String::new(), message, exit_code: crate::error::EXIT_USAGE }
            }
        })
    }

    fn resources(&self) -> Vec<Resource> {
        tools::RESOURCES.to_vec()
    }

    fn read(&self, uri: &str, request: &Request<'_>) -> Result<(&'static str, String), ReadError> {
        let Some(call) = tools::resource_words(uri) else {
            return Err(ReadError::NotFound(format!(
                "no resource {uri}; resources/list and resources/templates/list name them"
            )));
        };
        match self.run_words(call, request) {
            Outcome::Json { text, .. } => Ok(("application/json", text)),
            Outcome::Text(text) => Ok(("text/plain", text)),
            Outcome::Failed { message, exit_code, .. } => Err(ReadError::Failed { message, exit_code }),
        }
    }
}

impl Door {
    /// Parses `call.words` as `carma`'s command line and runs the verb, its output captured.
    fn run_words(&self, call: tools::Call, request: &Request<'_>) -> Outcome {
        let tools::Call { words: call_words, json, spec_text } = call;
        let verb = call_words.first().cloned().unwrap_or_default();
        let mut words: Vec<OsString> = vec!["carma".into()];
        words.extend(call_words.into_iter().map(OsString::from));
        // `carma submit train.sh --lr 0.1`: the words after a job script are the script's.
        let words = crate::submit_argv::sbatch_form(words);
        let cli = match Cli::try_parse_from(&words) {
            Ok(cli) => cli,
            Err(err) if matches!(err.kind(), clap::error::ErrorKind::DisplayHelp) => {
                return Outcome::Text(err.to_string());
            }
            Err(err) => {
                let line = crate::submit_argv::stray_command_hint(&words)
                    .unwrap_or_else(|| crate::submit_argv::one_line(&err));
                return Outcome::Failed {
                    said: String::new(),
                    message: line,
                    exit_code: crate::error::EXIT_USAGE,
                };
            }
        };
        let outcome = self.run_parsed(cli, spec_text, json, request);
        self.mark_untrusted(&verb, outcome)
    }

    /// Marks other users' words in an answer ([`untrusted`]), so an agent can tell them apart.
    fn mark_untrusted(&self, verb: &str, outcome: Outcome) -> Outcome {
        let view = std::cell::OnceCell::new();
        let owner_of = |id: &str| -> Option<u32> {
            let state = view.get_or_init(|| crate::view::load(&self.home).ok());
            let id = crate::id::TaskId::parse(id)?;
            state.as_ref()?.tasks.get(&id).map(|task| task.submitter_uid)
        };
        let owners = untrusted::Owners { me: crate::access::uid::effective(), owner_of: &owner_of };
        match outcome {
            Outcome::Json { mut document, .. } => {
                untrusted::mark_document(verb, &mut document, &owners);
                // The text is the document as marked, pretty as the verbs write theirs.
                let text = serde_json::to_string_pretty(&document).unwrap_or_default() + "\n";
                Outcome::Json { text, document }
            }
            Outcome::Text(text) => Outcome::Text(untrusted::mark_lines(&text, &owners)),
            Outcome::Failed { said, message, exit_code } => {
                Outcome::Failed { said: untrusted::mark_lines(&said, &owners), message, exit_code }
            }
        }
    }

    /// Runs the verb `cli` parsed, its output captured.
    fn run_parsed(&self, cli: Cli, spec_text: Option<String>, json: bool, request: &Request<'_>) -> Outcome {
        let mut out = Vec::new();
        let ran = match cli.command {
            Some(command) => self.dispatch(command, spec_text, json, request, &mut out),
            None => Err(crate::Error::BadInput("no verb".into()).into()),
        };
        if let Err(err) = ran {
            return failed(&err, String::from_utf8_lossy(&out).into_owned());
        }
        if !json {
            return Outcome::Text(String::from_utf8_lossy(&out).into_owned());
        }
        match serde_json::from_slice(&out) {
            Ok(document) => Outcome::Json { text: String::from_utf8_lossy(&out).into_owned(), document },
            Err(e) => Outcome::Failed {
                said: String::new(),
                message: format!("internal error: the verb's JSON did not read back: {e}"),
                exit_code: 1,
            },
        }
    }

    /// The verbs a tool may run, each through the function its command runs.
    fn dispatch(
        &self,
        command: Command,
        spec_text: Option<String>,
        json: bool,
        request: &Request<'_>,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let (home, wait) = (&self.home, self.wait);
        match command {
            Command::Submit(args) => {
                let given = super::submit::Given { spec_text, json };
                super::submit::run_to(home, *args, &given, out)
            }
            Command::Queue(args) => super::queue::run_to(home, wait, args, out),
            Command::Show(args) => super::show::run_to(home, wait, args, out),
            Command::Logs(args) => super::logs::run_to(home, args, out),
            Command::Cancel(args) => super::cancel::run_to(home, wait, args, out),
            Command::Hold(args) => super::hold::run_to(home, wait, args, true, out),
            Command::Release(args) => super::hold::run_to(home, wait, args, false, out),
            Command::Wait(args) => super::wait::run_watched(home, args, out, &mut watch(request)),
            Command::Gpus(args) => super::gpus::run_to(home, wait, args, out),
            Command::Report(args) => super::report::run_to(home, args, out),
            Command::Estimate(args) => super::estimate::run_to(args, out),
            _ => Err(crate::Error::BadInput("this verb is not a tool of carma mcp".into()).into()),
        }
    }
}

/// A wait's watcher for an agent's request: progress as `notifications/progress` (seconds
/// waited, out of the timeout, and how many tasks ended), and the end of the wait once the
/// request is cancelled.
fn watch<'a>(request: &'a Request<'_>) -> impl FnMut(&super::wait::Progress) -> bool + 'a {
    move |progress| {
        let message = format!("{} of {} task(s) ended", progress.ended, progress.of);
        request.progress(progress.waited_s.floor(), progress.timeout_s, &message);
        !request.cancelled()
    }
}

/// A verb's error as the CLI shows it: escaped line by line, with the CLI's exit code, after
/// what the verb `said` before it.
fn failed(err: &anyhow::Error, said: String) -> Outcome {
    let message = err.to_string();
    let lines: Vec<_> = message.split('\n').map(crate::text::escape).collect();
    let exit_code =
        err.downcast_ref::<crate::Error>().map_or(crate::error::EXIT_RUNTIME, crate::Error::exit_code);
    Outcome::Failed { said, message: lines.join("\n"), exit_code }
}
