//! The spool file: a task's spec file plus what only `carma submit` can know.
//!
//! ```toml
//! [task]                      # a spec file, canonical: every path absolute, every default spelled out
//! name = "train"
//! command = ["python", "train.py"]
//! workdir = "/home/alice/proj"
//! export = "ALL"
//! ...
//! [task.env]                  # the captured environment: values are private
//! PATH = "/home/alice/venv/bin:/usr/bin"
//! [submit]
//! program = "/home/alice/venv/bin/python"     # argv[0] resolved with the submitter's PATH
//! model_summary_text = "..."                   # the summary as the submitter read it
//! script = "/home/alice/proj/train.sh"         # a job script: where it was,
//! script_text = "#!/bin/bash\n..."             # and its text as copied at submit
//! interactive = "alloc"                        # carma alloc's and carma run's session mode
//! [submit.array]                               # a member of an array or sweep
//! id = "01jd..."
//! index = 3
//! count = 10
//! running_max = 2
//! params = [["lr", "0.01"]]
//! ```
//!
//! The tick parses it with the same validation as a user's spec file, because any user can
//! write into the spool: `[task]` may name no key only carma sets, and `[submit]` may say
//! only what `carma submit`, `carma alloc` and `carma run` write there. Spool files written by carma 0.1 (a bare spec file, no `[task]`) are
//! still read.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::script::{SCRIPT_BYTES_MAX, parse_shebang};
use super::workflow::{ARRAY_INDEX_MAX, ARRAY_TASKS_MAX};
use super::{ArrayMember, Limits, SpecFile, Submission, carma_only, is_env_name, parse_toml};

/// Largest model summary `carma submit` embeds. Below the estimators' own limit on purpose:
/// the tick reads every spool file, so a spool file stays small enough to be refused or
/// parsed in milliseconds (a summary of a large vision model is a few hundred KiB).
pub const SUMMARY_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// Largest spool file accepted: the spec, its environment, a model summary and a job script
/// (both escaped).
pub const SPOOL_BYTES_MAX: u64 = 2 * SUMMARY_BYTES_MAX + 2 * SCRIPT_BYTES_MAX + 1024 * 1024;

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct SpoolForm {
    task: SpecFile,
    #[serde(default)]
    submit: SubmitPart,
}

#[derive(Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct SubmitPart {
    #[serde(skip_serializing_if = "Option::is_none")]
    program: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_summary_text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    script: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    script_text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    array: Option<ArrayMember>,
    /// The session mode `carma alloc`/`carma run` give their task (`super::carma_only`).
    #[serde(skip_serializing_if = "Option::is_none")]
    interactive: Option<String>,
}

impl Submission {
    /// The spool file's text.
    pub fn to_spool_toml(&self) -> String {
        let form = SpoolForm {
            task: self.to_spec_file(),
            submit: SubmitPart {
                program: self.spec.program.clone(),
                model_summary_text: self.summary_text.clone(),
                script: self.spec.script.clone(),
                script_text: self.script_text.clone(),
                array: self.spec.array.clone(),
                interactive: self.spec.interactive.clone(),
            },
        };
        // Serialising plain strings, integers, arrays and tables cannot fail.
        toml::to_string(&form).unwrap_or_else(|e| unreachable!("spool TOML: {e}"))
    }
}

/// Parses and validates a spool file's text; `origin` names it in errors.
pub fn parse_spool(origin: &str, text: &str, limits: Limits) -> Result<Submission, String> {
    let table = text.parse::<toml::Table>().ok();
    let task_table = table.as_ref().and_then(|table| table.get("task")).and_then(toml::Value::as_table);
    let is_new_form = table.as_ref().is_some_and(|table| table.contains_key("task"));
    if let Some(task) = task_table {
        // The user's part of the spool file, held to a spec file's rule.
        carma_only::refuse_in_spec(task).map_err(|e| format!("{origin}: {e}"))?;
    }
    let (file, submit) = if is_new_form {
        let form: SpoolForm = toml::from_str(text).map_err(|e| {
            format!(
                "{origin}: {}; it was not written by `carma submit`",
                e.message().trim().replace('\n', " ")
            )
        })?;
        (form.task, form.submit)
    } else {
        (parse_toml(origin, text)?, SubmitPart::default())
    };
    if file.workdir.is_none() {
        return Err(format!("{origin}: missing workdir; it was not written by `carma submit`"));
    }
    let mut submission = file.validate_submission(origin, Path::new("/"), limits)?;
    if let Some(program) = submit.program {
        if !program.starts_with('/') || program.contains('\0') {
            return Err(format!(
                "{origin}: program {program:?} is not an absolute path; it was not written by `carma submit`"
            ));
        }
        submission.spec.program = Some(program);
    }
    if let Some(text) = &submit.model_summary_text
        && text.len() as u64 > SUMMARY_BYTES_MAX
    {
        return Err(format!("{origin}: the embedded model summary is over {} MiB", SUMMARY_BYTES_MAX >> 20));
    }
    submission.summary_text = submit.model_summary_text;
    if let Some(program) = submission.spec.notify.first()
        && !program.starts_with('/')
    {
        return Err(format!(
            "{origin}: notify program {program:?} is not an absolute path; it was not written by `carma submit`"
        ));
    }
    submission.spec.array = submit.array.map(|a| check_array(origin, a)).transpose()?;
    submission.spec.interactive = submit
        .interactive
        .as_deref()
        .map(carma_only::parse_mode)
        .transpose()
        .map_err(|e| format!("{origin}: {e}"))?;
    carma_only::check_session(&submission.spec).map_err(|e| format!("{origin}: {e}"))?;
    match (submit.script, submit.script_text) {
        (Some(path), Some(text)) => {
            if !path.starts_with('/') || text.len() as u64 > SCRIPT_BYTES_MAX {
                return Err(format!(
                    "{origin}: the job script is not an absolute path or is over {} KiB",
                    SCRIPT_BYTES_MAX / 1024
                ));
            }
            parse_shebang(&format!("{origin}: job script"), &text)?;
            submission.spec.script = Some(path);
            submission.script_text = Some(text);
        }
        (None, None) => {}
        _ => {
            return Err(format!(
                "{origin}: a job script needs both script and script_text; it was not written by `carma submit`"
            ));
        }
    }
    Ok(submission)
}

/// Parses root's private copy of an accepted submission (`intake::settle`). The copy holds
/// the bytes ingest accepted, so one from carma 0.5, whose `carma alloc` wrote the session
/// mode into `[task]`, still reads: the mode is taken as its `[submit]` part says it now.
pub fn parse_private_copy(origin: &str, text: &str) -> Result<Submission, String> {
    let mut table = match text.parse::<toml::Table>() {
        Ok(table) => table,
        Err(_) => return parse_spool(origin, text, Limits::default()),
    };
    let mode =
        table.get_mut("task").and_then(toml::Value::as_table_mut).and_then(|task| task.remove("interactive"));
    let Some(mode) = mode else { return parse_spool(origin, text, Limits::default()) };
    let submit = table.entry("submit").or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let Some(submit) = submit.as_table_mut() {
        submit.entry("interactive").or_insert(mode);
    }
    parse_spool(origin, &table.to_string(), Limits::default())
}

/// An array membership as the spool file states it, within the bounds submit keeps.
fn check_array(origin: &str, array: ArrayMember) -> Result<ArrayMember, String> {
    let sound = array.count >= 1
        && array.count as usize <= ARRAY_TASKS_MAX
        && array.index <= ARRAY_INDEX_MAX
        && array.running_max.is_none_or(|n| n >= 1)
        && array.params.len() <= 64
        && array.params.iter().all(|(name, value)| is_env_name(name) && !value.contains('\0'));
    if !sound {
        return Err(format!(
            "{origin}: the array membership is out of bounds; it was not written by `carma submit`"
        ));
    }
    Ok(array)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn submission() -> Submission {
        let file = parse_toml(
            "t",
            "name = \"t\"\ncommand = [\"python\", \"x.py\"]\nexport = \"ALL\"\n[env]\nSECRET = \"s3\"\n",
        )
        .unwrap();
        let mut submission = file.validate_submission("t", Path::new("/w"), Limits::default()).unwrap();
        submission.spec.program = Some("/venv/bin/python".into());
        submission.summary_text = Some("{\"layers\": []}".into());
        submission
    }

    #[test]
    fn spool_form_round_trips_with_its_private_parts() {
        let submission = submission();
        let text = submission.to_spool_toml();
        let back = parse_spool("spool file x", &text, Limits::default()).unwrap();
        assert_eq!(back, submission);
        assert_eq!(back.env, BTreeMap::from([("SECRET".to_string(), "s3".to_string())]));
        assert_eq!(back.spec.env_names, ["SECRET"]);
        assert_eq!(back.spec.export.as_deref(), Some("ALL"));
    }

    #[test]
    fn the_0_5_keys_survive_the_spool_and_the_journal() {
        let file = parse_toml(
            "t",
            "name = \"t\"\ncommand = [\"sleep\", \"infinity\"]\nhost_mem = \"16G\"\ncpus = 4\nrequeue = false\nreservation = \"paper\"\n",
        )
        .unwrap();
        let mut submission = file.validate_submission("t", Path::new("/w"), Limits::default()).unwrap();
        submission.spec.interactive = Some("hold".into());
        let back = parse_spool("spool file x", &submission.to_spool_toml(), Limits::default()).unwrap();
        assert_eq!(back, submission);
        let spec = back.spec;
        assert_eq!(
            (
                spec.host_mem_mib,
                spec.cpus,
                spec.requeue,
                spec.reservation.as_deref(),
                spec.interactive.as_deref()
            ),
            (Some(16_384), Some(4), Some(false), Some("paper"), Some("hold"))
        );
        let task = crate::id::TaskId::generate(1);
        let record = crate::journal::Record {
            time_ms: 1,
            event: crate::journal::Event::Submitted { task, submitter_uid: 1000, spec: spec.clone() },
        };
        let decoded = crate::journal::wire::from_wire(crate::journal::wire::to_wire(&record));
        assert_eq!(decoded, record);
    }

    /// Goal (issue 41): at ingest the spool's `[task]` is a spec like any other (a key only
    /// carma sets is refused), and `[submit]` says only what carma's verbs write: no
    /// interactive task that could be requeued. Method: hand-written spool files.
    #[test]
    fn carma_only_fields_are_refused_in_the_spool() {
        let text = submission().to_spool_toml().replace("[task]\n", "[task]\ninteractive = \"hold\"\n");
        let refused = parse_spool("spool file x", &text, Limits::default()).unwrap_err();
        assert!(
            refused.starts_with("spool file x: `interactive` is not a spec key: carma alloc"),
            "{refused}"
        );
        let refused = parse_spool(
            "spool file x",
            "name = \"t\"\ncommand = [\"true\"]\nworkdir = \"/w\"\ninteractive = \"run\"\n",
            Limits::default(),
        )
        .unwrap_err();
        assert!(
            refused.starts_with("spool file x: `interactive` is not a spec key"),
            "a carma 0.1 form: {refused}"
        );
        let mut session = submission();
        session.spec.interactive = Some("run".into());
        let text = session.to_spool_toml();
        assert_eq!(parse_spool("spool file x", &text, Limits::default()).unwrap(), session);
        let text = text.replace("[task]\n", "[task]\nrequeue = true\n");
        assert_eq!(
            parse_spool("spool file x", &text, Limits::default()).unwrap_err(),
            "spool file x: an interactive session (carma run) is never preempted, so it is never requeued; drop --requeue"
        );
    }

    /// Goal: a private copy carma 0.5 accepted (its session mode in `[task]`) still launches.
    #[test]
    fn a_0_5_private_copy_of_a_session_still_reads() {
        let text = submission().to_spool_toml().replace("[task]\n", "[task]\ninteractive = \"alloc\"\n");
        let copy = parse_private_copy("private copy of task x", &text).unwrap();
        assert_eq!(copy.spec.interactive.as_deref(), Some("alloc"));
        assert_eq!(copy.env, submission().env);
        let plain = parse_private_copy("private copy of task x", &submission().to_spool_toml()).unwrap();
        assert_eq!(plain, submission());
    }

    #[test]
    fn carma_0_1_spool_files_still_parse() {
        let text = "name = \"t\"\ncommand = [\"true\"]\nworkdir = \"/w\"\ngpus = 1\nmax_retries = 3\n[env]\nA = \"1\"\n";
        let back = parse_spool("spool file x", text, Limits::default()).unwrap();
        assert_eq!(back.spec.program, None);
        assert_eq!(back.env["A"], "1");
    }

    #[test]
    fn a_relative_program_or_unknown_key_is_refused() {
        let text =
            submission().to_spool_toml().replace("program = \"/venv/bin/python\"", "program = \"python\"");
        assert_eq!(
            parse_spool("spool file x", &text, Limits::default()).unwrap_err(),
            "spool file x: program \"python\" is not an absolute path; it was not written by `carma submit`"
        );
        let text = format!("{}\n[other]\nx = 1\n", submission().to_spool_toml());
        let err = parse_spool("spool file x", &text, Limits::default()).unwrap_err();
        assert!(err.starts_with("spool file x: unknown field `other`"), "{err}");
    }
}
