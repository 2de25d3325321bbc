//! Which of the submitter's environment variables a job gets, as Slurm's `--export` does.
//!
//! `carma submit` runs as the submitter, in the submitter's shell: an activated virtual
//! environment or conda environment is just variables (`PATH`, `VIRTUAL_ENV`,
//! `CONDA_PREFIX`, ...), so capturing them at submit time is what makes `python` mean the
//! same thing when the job runs, possibly started by a root tick. The grammar is Slurm's:
//! a comma-separated list of `ALL`, `NONE`, `NAME` (take it from the environment) and
//! `NAME=value` (set it). The default is `ALL`. Variables carma sets itself, names that are not
//! portable (bash's exported functions, `BASH_FUNC_x%%`) and shell bookkeeping (`_`, `PWD`,
//! `OLDPWD`, `SHLVL`) are never carried; values that are not UTF-8 cannot be stored and are
//! skipped with a note.

use std::collections::BTreeMap;
use std::ffi::OsString;

use super::{ExportFile, is_env_name, is_reserved_env};

/// Shell bookkeeping that describes the submitting shell, not the job.
const SHELL_STATE: [&str; 4] = ["_", "PWD", "OLDPWD", "SHLVL"];

/// A parsed `--export` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// Take every variable of the submitter's environment.
    pub all: bool,
    /// Take these from the submitter's environment (when not `all`).
    pub names: Vec<String>,
    /// Set these explicitly.
    pub set: BTreeMap<String, String>,
    /// How it is shown and journaled: `ALL`, `NONE`, or the items.
    pub label: String,
}

/// What capturing found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The job's environment: the submitter's variables the export lets through, then `set` on top.
    pub env: BTreeMap<String, String>,
    /// Names skipped, with why, for a note on stderr.
    pub skipped: Vec<String>,
}

impl Export {
    /// Parses Slurm's `--export` grammar; `ALL` when `text` is `None`.
    pub fn parse(text: Option<&str>) -> Result<Export, String> {
        let text = text.unwrap_or("ALL");
        let hint = "use ALL, NONE, or NAME[,NAME=value...] as sbatch --export does";
        let mut export =
            Export { all: false, names: Vec::new(), set: BTreeMap::new(), label: text.to_string() };
        let mut none = false;
        for item in text.split(',').map(str::trim) {
            match item {
                "ALL" => export.all = true,
                "NONE" => none = true,
                "" => return Err(format!("--export {text:?} has an empty item; {hint}")),
                _ => {
                    let (name, value) = match item.split_once('=') {
                        Some((name, value)) => (name, Some(value)),
                        None => (item, None),
                    };
                    if !is_env_name(name) {
                        return Err(format!("--export {text:?}: {name:?} is not a variable name; {hint}"));
                    }
                    if is_reserved_env(name) {
                        return Err(format!("--export {text:?}: {name} is set by carma itself; remove it"));
                    }
                    match value {
                        Some(value) => {
                            export.set.insert(name.to_string(), value.to_string());
                        }
                        None => export.names.push(name.to_string()),
                    }
                }
            }
        }
        if none && (export.all || !export.names.is_empty()) {
            return Err(format!("--export {text:?} mixes NONE with other variables; {hint}"));
        }
        Ok(export)
    }

    /// The export a spec file asks for (`export = "ALL"`, `"NONE"` or a list of names).
    pub fn from_file(file: Option<&ExportFile>) -> Result<Export, String> {
        match file {
            None => Export::parse(None),
            Some(ExportFile::Mode(mode)) => Export::parse(Some(mode)),
            Some(ExportFile::Names(names)) => Export::parse(Some(&names.join(","))),
        }
    }

    /// The variables this export takes from `environment` (the submitter's, as `vars_os`).
    pub fn capture(&self, environment: impl IntoIterator<Item = (OsString, OsString)>) -> Captured {
        let mut captured = Captured::default();
        for (name, value) in environment {
            let Some(name) = name.to_str().map(str::to_string) else { continue };
            let wanted = self.all || self.names.contains(&name);
            if !wanted || SHELL_STATE.contains(&name.as_str()) || is_reserved_env(&name) {
                continue;
            }
            if !is_env_name(&name) {
                if !self.all {
                    captured.skipped.push(format!("{name} (not a portable variable name)"));
                }
                continue;
            }
            match value.into_string() {
                Ok(value) if !value.contains('\0') => {
                    captured.env.insert(name, value);
                }
                _ => captured.skipped.push(format!("{name} (its value is not UTF-8)")),
            }
        }
        captured.env.extend(self.set.clone());
        captured
    }
}

/// Checks an `export` label from a spec file or the spool and returns it as journaled.
pub fn check_label(file: &ExportFile) -> Result<String, String> {
    let export = Export::from_file(Some(file))?;
    Ok(match file {
        ExportFile::Mode(_) => export.label,
        ExportFile::Names(names) => names.join(","),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
    }

    #[test]
    fn all_takes_everything_but_carma_and_shell_state() {
        let export = Export::parse(None).unwrap();
        let got = export.capture(env(&[
            ("PATH", "/venv/bin:/usr/bin"),
            ("VIRTUAL_ENV", "/venv"),
            ("CARMA_TASK_ID", "x"),
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("PWD", "/home/a"),
            ("BASH_FUNC_module%%", "() { :; }"),
        ]));
        assert_eq!(got.env.keys().collect::<Vec<_>>(), ["PATH", "VIRTUAL_ENV"]);
        assert!(got.skipped.is_empty(), "{:?}", got.skipped);
    }

    #[test]
    fn names_and_values_follow_slurm() {
        let export = Export::parse(Some("HOME,WANDB_MODE=offline")).unwrap();
        let got = export.capture(env(&[("HOME", "/home/a"), ("PATH", "/bin")]));
        assert_eq!(
            got.env,
            BTreeMap::from([("HOME".into(), "/home/a".into()), ("WANDB_MODE".into(), "offline".into())])
        );
        let none = Export::parse(Some("NONE")).unwrap().capture(env(&[("PATH", "/bin")]));
        assert!(none.env.is_empty());
        let all_plus = Export::parse(Some("ALL,X=1")).unwrap().capture(env(&[("PATH", "/bin")]));
        assert_eq!(all_plus.env.len(), 2);
    }

    #[test]
    fn bad_exports_are_refused_with_one_line() {
        let hint = "use ALL, NONE, or NAME[,NAME=value...] as sbatch --export does";
        assert_eq!(Export::parse(Some("A,,B")), Err(format!("--export \"A,,B\" has an empty item; {hint}")));
        assert_eq!(
            Export::parse(Some("1X")),
            Err(format!("--export \"1X\": \"1X\" is not a variable name; {hint}"))
        );
        assert_eq!(
            Export::parse(Some("NONE,PATH")),
            Err(format!("--export \"NONE,PATH\" mixes NONE with other variables; {hint}"))
        );
        assert_eq!(
            Export::parse(Some("CARMA_X=1")),
            Err("--export \"CARMA_X=1\": CARMA_X is set by carma itself; remove it".into())
        );
    }

    #[test]
    fn non_utf8_values_are_skipped_with_a_note() {
        use std::os::unix::ffi::OsStringExt;
        let bad = vec![(OsString::from("ODD"), OsString::from_vec(vec![0xff, 0xfe]))];
        let got = Export::parse(None).unwrap().capture(bad);
        assert!(got.env.is_empty());
        assert_eq!(got.skipped, ["ODD (its value is not UTF-8)"]);
    }
}
