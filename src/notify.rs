//! Telling a submitter what became of their task: the `--notify` command at its end and the
//! `--mail-user` mails `--mail-type` asks for, built from the journal's facts.
//!
//! The fold keeps the ended tasks that asked and have not been told yet (`State::notify_due`);
//! each tick, after it has committed their end, hands at most [`NOTIFY_PER_TICK_MAX`] of them,
//! an equal share per user (`tick::notices`), to its runner ([`crate::tick::AttemptRunner::notify`]), which starts the command (or
//! `sendmail -t` with the message on its standard input) as the submitter, detached, and never
//! waits for it; the tick then journals Notified or NotifyFailed. A tick that dies between
//! starting the helper and that commit starts it again: a notice may come twice, never not at
//! all.
//!
//! The helper's environment names the task and its outcome and holds nothing else: not the
//! job's environment (whose values are private and gone with the task's private copy).
//!
//! Mail follows sbatch's `--mail-type` ([`crate::spec::mail`]): besides the end (END, or FAIL
//! for a failed end), BEGIN and REQUEUE mails come from the fold's `mail_due`, time-limit
//! mails from the run time the tick sees ([`limit_mails_due`]), and an array without
//! ARRAY_TASKS gets one summary mail ([`array_notice`]) instead of one per member.

pub mod efficiency;

use std::collections::BTreeMap;

use crate::config::NotifyConfig;
use crate::id::TaskId;
use crate::journal::notices::{ARRAY, end_mail_wanted, mails_per_task};
use crate::journal::{State, Status, Task};
use crate::spec::mail::{MailKind, TIME_LIMIT_KINDS};

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
    /// The task whose end (or time limit) the notice is about.
    pub task: TaskId,
    /// Whether it is the task's `--notify` command or a mail.
    pub channel: Channel,
    /// Who runs it: the submitter.
    pub uid: u32,
    /// argv; `argv[0]` is an absolute path.
    pub argv: Vec<String>,
    /// The helper's whole environment: the task's facts (`CARMA_TASK_ID`, `CARMA_OUTCOME`, …) for
    /// a command, `CARMA_NOTICE` for sendmail.
    pub env: BTreeMap<String, String>,
    /// Where it runs: the task's workdir for a command, `/` for sendmail.
    pub workdir: String,
    /// Its standard input (the mail), if any.
    pub stdin: Option<Vec<u8>>,
    /// What was done, for the Notified record.
    pub detail: String,
    /// Which notice, as journaled (`END`, `BEGIN`, `ARRAY`, ...).
    pub kind: String,
}

/// A notice to start, or the channel it could not go through and why.
pub type Prepared = Result<Notice, (Channel, String)>;

/// The end notices `task` asked for (its command, its END or FAIL mail), or why one cannot
/// be sent.
pub fn notices(task: &Task, config: &NotifyConfig) -> Vec<Prepared> {
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
            kind: crate::journal::notices::END.into(),
        }));
    }
    if end_mail_wanted(spec, task.status()) {
        out.push(mail_notice(task, crate::journal::notices::END, config).map_err(|e| (Channel::Mail, e)));
    }
    out
}

/// The mail of `kind` (a [`MailKind`] name, or END) for `task`, or why none can be sent.
pub fn mail_notice(task: &Task, kind: &str, config: &NotifyConfig) -> Result<Notice, String> {
    let Some(address) = &task.spec.mail_user else {
        return Err("the task names no mail address".into());
    };
    // A failed end that FAIL asked for is labelled so; it is journaled as the END notice.
    let failed = task.status() == Status::Failed && task.spec.mail_types.wants(MailKind::Fail);
    let label = if kind == crate::journal::notices::END && failed { MailKind::Fail.name() } else { kind };
    let mut text =
        headers(address, &format!("carma task {} ({}) {}", task.id, task.spec.name, what(task, label)));
    text.push_str(&body(task, label));
    let mut notice = mail(config, task.id.clone(), task.submitter_uid, address, kind, text)?;
    notice.env.extend(environment(task));
    Ok(notice)
}

/// The words that end a mail's subject for `kind`: "began", "was queued again", "reached 80%
/// of its time limit", or the outcome at the end.
fn what(task: &Task, kind: &str) -> String {
    let limit = TIME_LIMIT_KINDS.iter().find(|(k, _)| k.name() == kind).map(|(_, percent)| *percent);
    match (MailKind::from_name(kind), limit) {
        (_, Some(percent)) => format!("reached {percent}% of its time limit"),
        (Some(MailKind::Begin), _) => "began".into(),
        (Some(MailKind::Requeue), _) => "was queued again".into(),
        _ => task.status().as_str().into(),
    }
}

/// `sendmail -t` as `uid` with `text` on its input, or why not.
fn mail(
    config: &NotifyConfig,
    task: TaskId,
    uid: u32,
    address: &str,
    kind: &str,
    text: String,
) -> Result<Notice, String> {
    if config.sendmail.is_empty() {
        return Err("no sendmail is configured ([notify] sendmail in config.toml)".into());
    }
    let mut env = BTreeMap::new();
    env.insert("CARMA_NOTICE".into(), kind.to_string());
    Ok(Notice {
        task,
        channel: Channel::Mail,
        uid,
        argv: vec![config.sendmail.clone(), "-t".into()],
        env,
        workdir: "/".into(),
        stdin: Some(text.into_bytes()),
        detail: format!("mailed {address} through {}", config.sendmail),
        kind: kind.to_string(),
    })
}

/// The time-limit mails due for `task` at `now_ms`: each kind its types ask for whose share
/// of the limit the running attempt has used, not yet sent for that attempt.
pub fn limit_mails_due(task: &Task, now_ms: u64) -> Vec<&'static str> {
    let spec = &task.spec;
    let (Some(limit_ms), Some(attempt)) = (spec.time_limit_ms, task.active_attempt()) else {
        return Vec::new();
    };
    let Some(launched_ms) = attempt.launched_ms.filter(|_| mails_per_task(spec)) else {
        return Vec::new();
    };
    let ran_ms = now_ms.saturating_sub(launched_ms);
    TIME_LIMIT_KINDS
        .iter()
        .enumerate()
        .filter(|(bit, (kind, percent))| {
            spec.mail_types.wants(*kind)
                && attempt.limit_mails & (1 << bit) == 0
                && u128::from(ran_ms) * 100 >= u128::from(limit_ms) * u128::from(*percent)
        })
        .map(|(_, (kind, _))| kind.name())
        .collect()
}

/// The one mail for array `array` whose every member ended: counts per outcome and each
/// member's id, index and end; mailed as the array's owner to its first member's address.
pub fn array_notice(state: &State, array: &TaskId, config: &NotifyConfig) -> Result<Notice, String> {
    let members: Vec<&Task> =
        state.tasks.values().filter(|t| t.spec.array.as_ref().is_some_and(|a| &a.id == array)).collect();
    let Some(first) = members.first() else { return Err("the array has no member".into()) };
    let Some(address) = &first.spec.mail_user else { return Err("the array names no mail address".into()) };
    let count = |status: Status| members.iter().filter(|t| t.status() == status).count();
    let (finished, failed, cancelled) =
        (count(Status::Finished), count(Status::Failed), count(Status::Cancelled));
    let subject = format!(
        "carma array {array} ({}) ended: {finished} finished, {failed} failed, {cancelled} cancelled",
        first.spec.name
    );
    let mut text = headers(address, &subject);
    text.push_str(&format!(
        "array: {array}\nmembers: {}\nfinished: {finished}\nfailed: {failed}\ncancelled: {cancelled}\n\n",
        members.len()
    ));
    for task in &members {
        let index = task.spec.array.as_ref().map_or(0, |a| a.index);
        let end =
            task.attempts.last().and_then(|a| a.outcome.clone()).unwrap_or_else(|| "not started".into());
        let end = crate::text::escape(&end).into_owned();
        text.push_str(&format!("{} [{index}] {} {end}\n", task.id, task.status().as_str()));
    }
    let uid = state.array_owner(array).unwrap_or(first.submitter_uid);
    mail(config, array.clone(), uid, address, ARRAY, text)
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
    let end = end_words(task);
    env.insert("CARMA_EXIT".into(), exit_number(&end).to_string());
    env.insert("CARMA_END".into(), end);
    env.insert("CARMA_REASON".into(), task.end_reason().unwrap_or_default().to_string());
    env.insert("CARMA_ATTEMPTS".into(), task.attempts.len().to_string());
    if let Some(array) = &task.spec.array {
        env.insert("CARMA_ARRAY_ID".into(), array.id.to_string());
        env.insert("CARMA_ARRAY_INDEX".into(), array.index.to_string());
    }
    env
}

/// The last attempt that ran (or ended) in words: how it ended; "running" while it runs;
/// "cancelled while running" for a task that ended while its attempt was still being stopped;
/// "not started" when none was launched. An attempt only placed (the next one, after a
/// requeue) does not hide the end of the one before it.
fn end_words(task: &Task) -> String {
    let ran = task.attempts.iter().rev().find(|a| a.outcome.is_some() || a.launched_ms.is_some());
    let Some(attempt) = ran else { return "not started".into() };
    match &attempt.outcome {
        Some(outcome) => outcome.clone(),
        None if task.status().is_terminal() => {
            format!("{} while running", task.status().as_str().to_lowercase())
        }
        None => "running".into(),
    }
}

/// Why a REQUEUE mail's task runs again: the end of the attempt before (for a preempted one,
/// who preempted it, why, and the work lost), and, while it still waits there, that it is
/// first in line in the recovery queue. (By the time the mail goes, the
/// next attempt may already be placed.)
fn requeue_reason(task: &Task) -> String {
    let ended = task.attempts.iter().rev().find(|a| a.outcome.is_some());
    let Some(attempt) = ended else { return "queued again".into() };
    let outcome = attempt.outcome.as_deref().unwrap_or_default();
    if let Some(preempted) = &attempt.preempted {
        let lost = crate::spec::render_ms(preempted.lost_ms);
        return format!(
            "attempt {} was preempted by {} ({}); {lost} of work lost; queued again for attempt {}",
            attempt.number,
            preempted.by,
            preempted.reason,
            attempt.number + 1
        );
    }
    let first = if task.in_recovery() { ", first in line (recovery queue)" } else { "" };
    format!(
        "attempt {} ended ({outcome}); queued again for attempt {}{first}",
        attempt.number,
        attempt.number + 1
    )
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

/// The headers `sendmail -t` reads: carma's own words and the task's restricted name only
/// (no user text can add a header).
fn headers(address: &str, subject: &str) -> String {
    format!("To: {address}\nSubject: {subject}\nAuto-Submitted: auto-generated\n\n")
}

/// A task mail's body: the notice's kind, then the outcome as the helper's environment has it
/// (no `exit` line where no attempt exited, no empty `reason`), and after the end the run time
/// and efficiency `show` gives (as Slurm's END mail has them).
fn body(task: &Task, kind: &str) -> String {
    let env = environment(task);
    let requeue = MailKind::from_name(kind) == Some(MailKind::Requeue);
    let mut text = format!("notice: {kind}\n");
    for key in [
        "CARMA_TASK_ID",
        "CARMA_TASK_NAME",
        "CARMA_OUTCOME",
        "CARMA_EXIT",
        "CARMA_END",
        "CARMA_REASON",
        "CARMA_ATTEMPTS",
    ] {
        let value = match key {
            "CARMA_OUTCOME" if requeue => "Requeued".to_string(),
            "CARMA_REASON" if requeue => requeue_reason(task),
            "CARMA_EXIT" if env[key] == "-1" => continue,
            "CARMA_REASON" if env[key].is_empty() => continue,
            _ => env[key].clone(),
        };
        let value = crate::text::escape(&value).into_owned();
        text.push_str(&format!("{}: {value}\n", key.trim_start_matches("CARMA_").to_lowercase()));
    }
    let end_mail = kind == crate::journal::notices::END || kind == MailKind::Fail.name();
    if end_mail && task.status().is_terminal() {
        for (label, value) in efficiency::lines(task) {
            let label = if label == "wall" { "run time" } else { label };
            text.push_str(&format!("{label}: {value}\n"));
        }
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
        assert!(headers.lines().nth(1).is_some_and(|l| l.ends_with(" (train) Cancelled")), "{headers}");
        assert!(body.starts_with("notice: END\n"), "{body}");
        assert!(body.contains("reason: line\\nBcc: x"), "{body}");
        assert!(notices(&ended_task(&[], None), &config).is_empty());
    }

    /// The body of `kind`'s mail for the task `events` leave (a mail user, sendmail set).
    fn body_after(types: &str, events: Vec<Event>, kind: &str) -> String {
        let text = "name = \"train\"\ncommand = [\"true\"]\nmail_user = \"a@x\"\n";
        let mut spec = crate::spec::parse_toml("t", text)
            .and_then(|f| f.validate("t", std::path::Path::new("/w"), Default::default()))
            .unwrap();
        spec.mail_types = crate::spec::mail::MailTypes::parse(types).unwrap();
        let id = TaskId::from_parts(1_700_000_000_000, 1);
        let mut state = State::default();
        state.apply(
            1,
            &Record { time_ms: 0, event: Event::Submitted { task: id.clone(), submitter_uid: 1000, spec } },
        );
        for (seq, event) in events.into_iter().enumerate() {
            state.apply(seq as u64 + 2, &Record { time_ms: 300_000 * (seq as u64 + 1), event });
        }
        let config = NotifyConfig { sendmail: "/usr/sbin/sendmail".into(), ..NotifyConfig::default() };
        let mail = mail_notice(&state.tasks[&id], kind, &config).unwrap();
        let text = String::from_utf8(mail.stdin.unwrap()).unwrap();
        text.split_once("\n\n").unwrap().1.to_string()
    }

    fn placed_and_launched(attempt: u32) -> Vec<Event> {
        let task = TaskId::from_parts(1_700_000_000_000, 1);
        vec![
            Event::Placed {
                task: task.clone(),
                attempt,
                gpus: vec!["GPU-0".into()],
                exclusive: false,
                requirement_mib: Some(1024),
                reason: "fits".into(),
            },
            Event::Launched {
                task,
                attempt,
                supervisor: crate::journal::ProcessRef { pid: 42, start_time_ticks: 9, boot_id: "b".into() },
                adopted: false,
            },
        ]
    }

    /// Issue 33, defect 3: a running task's BEGIN mail said `exit: -1` and `end: not started`;
    /// a job cancelled while it ran said `end: not started`.
    #[test]
    fn a_running_or_cancelled_task_is_not_said_to_have_not_started() {
        let task = TaskId::from_parts(1_700_000_000_000, 1);
        let begin = body_after("BEGIN", placed_and_launched(1), "BEGIN");
        let id = task.to_string();
        assert_eq!(
            begin,
            format!(
                "notice: BEGIN\ntask_id: {id}\ntask_name: train\noutcome: Running\nend: running\nattempts: 1\n"
            )
        );
        let mut events = placed_and_launched(1);
        events.push(Event::Cancelled {
            task: task.clone(),
            by_uid: 1000,
            reason: "cancelled by alice".into(),
        });
        let end = body_after("END", events, "END");
        assert!(
            end.starts_with(&format!(
                "notice: END\ntask_id: {id}\ntask_name: train\noutcome: Cancelled\nend: cancelled while running\nreason: cancelled by alice\nattempts: 1\nrun time: 5m (no time limit)\n"
            )),
            "{end}"
        );
    }

    /// Issue 33, defect 3: REQUEUE said `outcome: Pending` with an empty reason; a FAIL-only
    /// request was labelled `notice: END`; the END mail had no run time nor efficiency.
    #[test]
    fn requeue_fail_and_end_mails_say_what_happened() {
        let task = TaskId::from_parts(1_700_000_000_000, 1);
        let id = task.to_string();
        let mut events = placed_and_launched(1);
        events.push(Event::OomDetected {
            task: task.clone(),
            attempt: 1,
            evidence: "CUDA out of memory".into(),
            peak_mib: Some(9),
        });
        events.push(Event::Requeued {
            task: task.clone(),
            recovery: true,
            requirement_mib: Some(2048),
            recovery_mode: crate::journal::RequeueMode::Recovery(Default::default()),
            reason: "oom".into(),
        });
        let requeue = body_after("REQUEUE", events, "REQUEUE");
        assert_eq!(
            requeue,
            format!(
                "notice: REQUEUE\ntask_id: {id}\ntask_name: train\noutcome: Requeued\nend: out of memory\nreason: attempt 1 ended (out of memory); queued again for attempt 2, first in line (recovery queue)\nattempts: 1\n"
            )
        );
        let mut events = placed_and_launched(1);
        events.push(Event::Failed {
            task: task.clone(),
            attempt: 1,
            outcome: "exit 3".into(),
            reason: "exit 3".into(),
        });
        let fail = body_after("FAIL", events, crate::journal::notices::END);
        assert_eq!(
            fail,
            format!(
                "notice: FAIL\ntask_id: {id}\ntask_name: train\noutcome: Failed\nexit: 3\nend: exit 3\nreason: exit 3\nattempts: 1\n\
                 run time: 5m (no time limit)\ngpu memory: peak not observed\n\
                 sm activity: no reading (the tick journals one a minute while the job computes on a GPU it can read)\n\
                 gpu-hours: 0.083 over 1 attempt(s)\nenergy: no reading (its GPUs' energy counters gave none while it ran)\n"
            )
        );
    }

    /// Issue 34: a preempted task's REQUEUE mail names who preempted it, why, and the work
    /// lost. Fails on the code before preemption (the reason named only the attempt's end).
    #[test]
    fn a_preempted_task_s_requeue_mail_names_the_preemptor_and_the_work_lost() {
        let task = TaskId::from_parts(1_700_000_000_000, 1);
        let by = TaskId::from_parts(1_700_000_000_500, 2);
        let mut events = placed_and_launched(1);
        events.push(Event::Preempted {
            task: task.clone(),
            attempt: 1,
            by: by.clone(),
            reason: "priority 5 preempts priority 4 or lower (priority-gap 1)".into(),
            lost_ms: 125_000,
        });
        events.push(Event::Stopped {
            task: task.clone(),
            attempt: 1,
            outcome: format!("exit 99: preempted by {by}"),
        });
        events.push(Event::Requeued {
            task: task.clone(),
            recovery: false,
            requirement_mib: None,
            recovery_mode: crate::journal::RequeueMode::User,
            reason: "preempted".into(),
        });
        let requeue = body_after("REQUEUE", events, "REQUEUE");
        assert!(
            requeue.contains(&format!(
                "reason: attempt 1 was preempted by {by} (priority 5 preempts priority 4 or lower (priority-gap 1)); 2m 5s of work lost; queued again for attempt 2\n"
            )),
            "{requeue}"
        );
    }
}
