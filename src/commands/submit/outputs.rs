//! The folders of a task's output files, checked at submit with the submitter's rights: a
//! `-o logs/%x_%a.out` whose `logs/` does not exist would fail every attempt (every task of an
//! array) at its start, where Slurm's user learns it only from an empty queue. A folder that
//! depends on the task id or the attempt (`%j`, `%a` before the last `/`) is known only then,
//! and is left to the supervisor, which says "missing" too.

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::spec::Submission;

/// Every distinct output folder of `tasks` that is known now exists and is one the submitter
/// can create files in; the first that is not is the error, naming the fix.
pub(super) fn check_folders(tasks: &[Submission]) -> Result<(), Error> {
    let mut seen: Vec<PathBuf> = Vec::new();
    let user = crate::access::users::name_of(crate::access::uid::effective()).unwrap_or_default();
    for task in tasks {
        let spec = &task.spec;
        for (flag, template) in [("--output", &spec.output), ("--error", &spec.error)] {
            let Some(template) = template else { continue };
            let Some(folder) = folder_of(template, &spec.name, &user, Path::new(&spec.workdir)) else {
                continue;
            };
            if seen.contains(&folder) || writable_file(template, &folder) {
                continue;
            }
            check_folder(&folder, flag, template)?;
            seen.push(folder);
        }
    }
    Ok(())
}

/// A note for an array's `--output`/`--error` that has carma's `%a` (the attempt) where a
/// Slurm user means the array index, which carma spells `{index}` (an `#SBATCH` line's `%a` is
/// read as the index: `spec::sbatch` makes it `{index}`). `%a` keeps carma's meaning.
pub(super) fn attempt_notes(tasks: &[Submission]) -> Vec<String> {
    let Some(first) = tasks.first().filter(|t| t.spec.array.is_some()) else { return Vec::new() };
    [("--output", &first.spec.output), ("--error", &first.spec.error)]
        .into_iter()
        .filter_map(|(flag, template)| {
            let template = template.as_deref()?;
            has_attempt(template).then(|| {
                format!(
                    "{flag} {}: %a is the attempt (1, 2, ...) in carma's templates; for the array index write {{index}} (an #SBATCH line's %a is the index)",
                    crate::text::escape(template)
                )
            })
        })
        .collect()
}

/// Whether `template` has `%a` (not `%%a`).
fn has_attempt(template: &str) -> bool {
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c == '%' && chars.next() == Some('a') {
            return true;
        }
    }
    false
}

/// The folder `template` puts its file in, with `%x`, `%u` and `%%` filled in, relative to
/// `workdir`; `None` when the folder part has `%j` or `%a` (or anything only the attempt
/// knows), or the file is in the workdir itself (checked with the workdir).
fn folder_of(template: &str, name: &str, user: &str, workdir: &Path) -> Option<PathBuf> {
    let (folder, _) = template.rsplit_once('/')?;
    let mut out = String::with_capacity(folder.len());
    let mut chars = folder.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'x' => out.push_str(name),
            'u' => out.push_str(user),
            '%' => out.push('%'),
            _ => return None,
        }
    }
    let folder = PathBuf::from(if out.is_empty() { "/".to_string() } else { out });
    Some(if folder.is_absolute() { folder } else { workdir.join(folder) })
}

/// Whether `template` names one file, with no placeholder, that exists and the submitter may
/// write (`/dev/null`, a log made beforehand): no file is created in its folder.
fn writable_file(template: &str, folder: &Path) -> bool {
    let Some((_, name)) = template.rsplit_once('/') else { return false };
    let path = folder.join(name);
    !name.contains('%') && path.exists() && !path.is_dir() && super::program::accessible(&path, libc::W_OK)
}

/// `folder` exists, is a folder, and the submitter may create files in it.
fn check_folder(folder: &Path, flag: &str, template: &str) -> Result<(), Error> {
    let shown = folder.display();
    let template = crate::text::escape(template);
    if !folder.exists() {
        return Err(Error::BadInput(format!(
            "{flag} {template}: folder {shown} is missing; create it (mkdir -p {shown}) or choose another path"
        )));
    }
    if !folder.is_dir() {
        return Err(Error::BadInput(format!(
            "{flag} {template}: {shown} is not a folder; choose another path"
        )));
    }
    if !super::program::accessible(folder, libc::W_OK | libc::X_OK) {
        return Err(Error::BadInput(format!(
            "{flag} {template}: you cannot create files in folder {shown}; fix its permissions or choose another path"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the folder is what the file's path names before its last `/`, with what is known
    /// at submit filled in; one only the attempt knows is not checked here.
    #[test]
    fn folders_known_at_submit_are_found() {
        let w = Path::new("/w");
        assert_eq!(folder_of("logs/%x_7.out", "a b", "u", w), Some(PathBuf::from("/w/logs")));
        assert_eq!(folder_of("/abs/%u/%x/o", "n", "u", w), Some(PathBuf::from("/abs/u/n")));
        assert_eq!(folder_of("logs/%j/o", "n", "u", w), None);
        assert_eq!(folder_of("run-%a/o", "n", "u", w), None);
        assert_eq!(folder_of("plain.out", "n", "u", w), None);
        assert_eq!(folder_of("/top", "n", "u", w), Some(PathBuf::from("/")));
    }

    /// Goal: `%a` is found as a placeholder, not in `%%a`.
    #[test]
    fn the_attempt_placeholder_is_found() {
        assert!(has_attempt("logs/%x_%a.out") && !has_attempt("x_%%a.out") && !has_attempt("x_{index}.out"));
    }

    /// Goal: a missing folder says "missing" and how to make it.
    #[test]
    fn a_missing_folder_is_named_missing() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("logs");
        let error = check_folder(&missing, "--output", "logs/%x.out").unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "--output logs/%x.out: folder {0} is missing; create it (mkdir -p {0}) or choose another path",
                missing.display()
            )
        );
        assert!(check_folder(dir.path(), "--output", "x").is_ok());
    }
}
