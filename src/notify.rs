//! Telling a submitter that their task ended: the `--notify` command and the `--mail-user`
//! mail, built from the journal's facts.
//!
//! The fold keeps the ended tasks that asked and have not been told yet (`State::notify_due`);
//! each tick, after it has committed their end, hands at most [`NOTIFY_PER_TICK_MAX`] of them
//! to its runner ([`crate::tick::AttemptRunner::notify`]), which starts the command (or
//! `sendmail -t` with the message on its standard input) as the submitter, detached, and never
//! waits for it; the tick then journals Notified or NotifyFailed. A tick that dies between
//! starting the helper and that commit starts it again: a notice may come twice, never not at
//! all.
//!
//! The helper's environment names the task and its outcome and holds nothing else: not the
//! job's environment (whose values are private and gone with the task's private copy).

use std::collections::BTreeMap;

use crate::config::NotifyConfig;
use crate::id::TaskId;
use crate::journal::Task;

/// Tasks announced per tick, so a burst of ends cannot make one tick long.
pub const NOTIFY_PER_TICK_MAX: usize = 32;

/// How a notice is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// The task's `--notify` command (or the queue's default command).
    Command,
    /// `sendmail -t`, to the task's `--mail-user` (or the submitter, by the queue's default).
    Mail,
}

impl Channel {
    /// As journaled.
    pub fn name(self) -> &'static str {
        match self {
            Channel::Command => "command",
            Channel::Mail => "mail",
        }
    }
}

/// One helper process to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub task: TaskId,
    pub channel: Channel,
    /// Who runs it: the submitter.
    pub uid: u32,
    /// argv; `argv[0]` is an absolute path.
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub workdir: String,
    /// Its standard input (the mail), if any.
    pub stdin: Option<Vec<u8>>,
    /// What was done, for the Notified record.
    pub detail: String,
}

/// The notices `task` asked for, or why one cannot be sent.
pub fn notices(task: &Task, config: &NotifyConfig) -> Vec<Result<Notice, (Channel, String)>> {
    let mut out = Vec::new();
    let env = environment(task);
    let spec = &task.spec;
    if let Some(program) = spec.notify.first() {
        out.push(Ok(Notice {
            task: task.id.clone(),
            channel: Channel::Command,
            uid: task.submitter_uid,
            argv: spec.notify.clone(),
            env: env.clone(),
            workdir: spec.workdir.clone(),
            stdin: None,
            detail: format!("started {program} as uid {}", task.submitter_uid),
        }));
    }
    if let Some(address) = &spec.mail_user {
        if config.sendmail.is_empty() {
            let reason = "no sendmail is configured ([notify] sendmail in config.toml)".to_string();
            out.push(Err((Channel::Mail, reason)));
        } else {
            out.push(Ok(Notice {
                task: task.id.clone(),
                channel: Channel::Mail,
                uid: task.submitter_uid,
                argv: vec![config.sendmail.clone(), "-t".into()],
                env,
                workdir: "/".into(),
                stdin: Some(message(task, address).into_bytes()),
                detail: format!("mailed {address} through {}", config.sendmail),
            }));
        }
    }
    out
}

/// The outcome in the helper's environment: `CARMA_TASK_ID`, `CARMA_TASK_NAME`,
/// `CARMA_OUTCOME` (Finished, Failed or Cancelled), `CARMA_EXIT` (a number: see [`exit_number`]),
/// `CARMA_END` (the last attempt's end in words), `CARMA_REASON`, `CARMA_ATTEMPTS`, and `CARMA_ARRAY_ID`/`CARMA_ARRAY_INDEX` for an
/// array member.
pub fn environment(task: &Task) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("CARMA_TASK_ID".into(), task.id.to_string());
    env.insert("CARMA_TASK_NAME".into(), task.spec.name.clone());
    env.insert("CARMA_OUTCOME".into(), task.status().as_str().into());
    let end = task.attempts.last().and_then(|a| a.outcome.clone()).unwrap_or_else(|| "not started".into());
    env.insert("CARMA_EXIT".into(), exit_number(&end).to_string());
    env.insert("CARMA_END".into(), end);
    env.insert("CARMA_REASON".into(), task.end_reason().map(str::to_owned).unwrap_or_default());
    env.insert("CARMA_ATTEMPTS".into(), task.attempts.len().to_string());
    if let Some(array) = &task.spec.array {
        env.insert("CARMA_ARRAY_ID".into(), array.id.to_string());
        env.insert("CARMA_ARRAY_INDEX".into(), array.index.to_string());
    }
    env
}

/// `CARMA_EXIT`: the last attempt's exit status as a shell reports it, so scripts can test it
/// with `-eq`: the code for an exit, 128+N for signal N, 124 for the time limit (as
/// timeout(1)), and -1 when no attempt exited (not started, cancelled, lost).
pub fn exit_number(end: &str) -> i32 {
    if let Some(code) = end.strip_prefix("exit ").and_then(|r| r.split_whitespace().next()?.parse().ok()) {
        return code;
    }
    if let Some(signal) =
        end.strip_prefix("killed by signal ").and_then(|r| r.split_whitespace().next()?.parse::<i32>().ok())
    {
        return 128 + signal;
    }
    if end.starts_with("time limit") { 124 } else { -1 }
}

/// The mail `sendmail -t` reads: headers from carma's own words and the task's restricted
/// name only (no user text can add a header), then the outcome.
fn message(task: &Task, address: &str) -> String {
    let env = environment(task);
    let status = task.status().as_str();
    let mut text = format!(
        "To: {address}\nSubject: carma task {} ({}) {status}\nAuto-Submitted: auto-generated\n\n",
        task.id, task.spec.name
    );
    for key in [
        "CARMA_TASK_ID",
        "CARMA_TASK_NAME",
        "CARMA_OUTCOME",
        "CARMA_EXIT",
        "CARMA_END",
        "CARMA_REASON",
        "CARMA_ATTEMPTS",
    ] {
        let value = crate::text::escape(&env[key]).into_owned();
        text.push_str(&format!("{}: {value}\n", key.trim_start_matches("CARMA_").to_lowercase()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Event, Record, State};

    fn ended_task(notify: &[&str], mail: Option<&str>) -> Task {
        let mut spec = crate::spec::parse_toml("t", "name = \"train\"\ncommand = [\"true\"]\n")
            .and_then(|f| f.validate("t", std::path::Path::new("/w"), Default::default()))
            .unwrap();
        spec.notify = notify.iter().map(|s| s.to_string()).collect();
        spec.mail_user = mail.map(str::to_string);
        let id = TaskId::from_parts(1_700_000_000_000, 1);
        let mut state = State::default();
        let events = [
            Event::Submitted { task: id.clone(), submitter_uid: 1000, spec },
            Event::Cancelled { task: id.clone(), by_uid: 0, reason: "line\nBcc: x".into() },
        ];
        for (seq, event) in events.into_iter().enumerate() {
            state.apply(seq as u64 + 1, &Record { time_ms: 5, event });
        }
        assert!(state.notify_due.contains(&id) == (!notify.is_empty() || mail.is_some()));
        state.tasks[&id].clone()
    }

    /// Goal: a command notice carries the outcome, a mail has fixed headers whatever the
    /// reason says, and a mail without sendmail is a failure, not silence.
    #[test]
    fn notices_carry_the_outcome_and_mail_headers_cannot_be_forged() {
        let task = ended_task(&["/usr/bin/notify-send", "done"], Some("alice@example.org"));
        let mut config = NotifyConfig::default();
        let found = notices(&task, &config);
        let command = found[0].as_ref().unwrap();
        assert_eq!(command.argv, ["/usr/bin/notify-send", "done"]);
        assert_eq!(command.env["CARMA_OUTCOME"], "Cancelled");
        assert_eq!(command.env["CARMA_EXIT"], "-1");
        assert_eq!(command.env["CARMA_END"], "not started");
        assert_eq!(command.uid, 1000);
        assert_eq!(
            found[1],
            Err((Channel::Mail, "no sendmail is configured ([notify] sendmail in config.toml)".into()))
        );
        config.sendmail = "/usr/sbin/sendmail".into();
        let mail = notices(&task, &config).remove(1).unwrap();
        assert_eq!(mail.argv, ["/usr/sbin/sendmail", "-t"]);
        let text = String::from_utf8(mail.stdin.unwrap()).unwrap();
        let (headers, body) = text.split_once("\n\n").unwrap();
        assert_eq!(headers.lines().count(), 3, "{headers}");
        assert!(body.contains("reason: line\\nBcc: x"), "{body}");
        assert!(notices(&ended_task(&[], None), &config).is_empty());
    }
}
