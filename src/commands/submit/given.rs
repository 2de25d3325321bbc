//! What `carma mcp`'s submit tool hands `carma submit` beyond a command line: a spec as text,
//! and the wish for one JSON answer.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{flags_over_file, refuse_command_with_file};
use crate::cli::SubmitArgs;
use crate::error::Error;
use crate::id::TaskId;
use crate::spec::{self, SpecFile};

/// Schema tag of the JSON answer (schema/submitted.schema.json).
pub(super) const SUBMITTED_SCHEMA: &str = "carma.submitted/1";

/// What `carma mcp`'s submit tool gives beyond the command line.
#[derive(Default)]
pub(in crate::commands) struct Given {
    /// A TOML spec as text, read as a spec file in the current directory would be.
    pub(in crate::commands) spec_text: Option<String>,
    /// Answer one JSON document (`carma.submitted/1`), the notes in it, instead of lines.
    pub(in crate::commands) json: bool,
}

/// A spec given as text (`carma mcp`'s submit tool): read as a spec file in `cwd` would be,
/// with the flags over it.
pub(super) fn spec_from_text(
    args: &SubmitArgs,
    text: &str,
    cwd: &Path,
) -> Result<(SpecFile, String, PathBuf), Error> {
    let origin = "the spec given".to_string();
    if args.spec.is_some() || args.rad.is_some() || !args.stray.is_empty() {
        return Err(Error::BadInput("a spec as text brings its own command; drop the file from argv".into()));
    }
    refuse_command_with_file(args, "a spec")?;
    if text.len() as u64 > spec::SPEC_BYTES_MAX {
        return Err(Error::BadInput(format!(
            "{origin} is larger than {} KiB; shorten it",
            spec::SPEC_BYTES_MAX / 1024
        )));
    }
    let mut file = spec::parse_toml(&origin, text).map_err(Error::BadInput)?;
    flags_over_file(&mut file, args)?;
    if let Some(workdir) = &args.workdir {
        file.workdir = Some(spec::path_to_string(&cwd.join(workdir), "--workdir").map_err(Error::BadInput)?);
    }
    Ok((file, origin, cwd.to_path_buf()))
}

/// The submission as one JSON document: the task ids, the array's, and what `carma submit`
/// would have said on stderr.
pub(super) fn write_json(
    out: &mut dyn Write,
    ids: &[TaskId],
    array: Option<&TaskId>,
    name: &str,
    notes: Vec<String>,
) -> anyhow::Result<()> {
    let ids: Vec<&str> = ids.iter().map(TaskId::as_str).collect();
    let doc = serde_json::json!({
        "schema": SUBMITTED_SCHEMA, "array": array.map(TaskId::as_str), "name": name, "tasks": ids,
        "notes": notes,
    });
    crate::commands::render::write_json(out, &doc)
}

/// One line for the submission: the task's id, or the array's with its size.
pub(super) fn print_submitted(
    out: &mut impl Write,
    ids: &[TaskId],
    array: Option<&TaskId>,
    name: &str,
    parsable: bool,
) -> anyhow::Result<()> {
    match array {
        Some(array) if parsable => writeln!(out, "{array}")?,
        Some(array) => writeln!(out, "submitted array {array} ({name}): {} tasks", ids.len())?,
        // Without an array a submission is one task.
        None => {
            for id in ids {
                if parsable { writeln!(out, "{id}")? } else { writeln!(out, "submitted task {id} ({name})")? }
            }
        }
    }
    Ok(())
}
