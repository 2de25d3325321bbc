//! `carma submit train.sh [args]`: a job script, its `#CARMA` lines read with the command
//! line's own parser, and the command line winning over them (see `spec::script`).

use std::ffi::OsString;
use std::path::Path;

use clap::Parser;

use crate::cli::{Directive, SubmitArgs};
use crate::error::Error;
use crate::spec::script::{self, DIRECTIVE, SCRIPT_BYTES_MAX};

/// A job script as read at submit.
pub(super) struct JobScript {
    /// Absolute path of the script as given.
    pub path: String,
    pub text: String,
    pub shebang: script::Shebang,
}

/// Whether `path` is a job script (starts with `#!`).
pub(super) fn is_script(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 2];
    // Never blocks: a FIFO is not a script (and is refused, in one line, as a spec).
    crate::fsutil::open_regular(path, crate::fsutil::Symlinks::Follow)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && script::looks_like_script(&head)
}

/// Reads the script (as the submitter, bounded, UTF-8) and checks its `#!` line.
pub(super) fn read(path: &Path, cwd: &Path) -> Result<JobScript, Error> {
    use std::io::Read;
    let shown = path.display().to_string();
    let absolute = crate::spec::path_to_string(&cwd.join(path), "script").map_err(Error::BadInput)?;
    let mut bytes = Vec::new();
    crate::fsutil::open_regular(path, crate::fsutil::Symlinks::Follow)
        .and_then(|f| f.take(SCRIPT_BYTES_MAX + 1).read_to_end(&mut bytes))
        .map_err(|e| Error::BadInput(format!("{shown}: cannot read the job script: {e}")))?;
    if bytes.len() as u64 > SCRIPT_BYTES_MAX {
        return Err(Error::BadInput(format!(
            "{shown}: the job script is larger than {} KiB; keep the work in files it runs",
            SCRIPT_BYTES_MAX / 1024
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::BadInput(format!("{shown}: the job script is not UTF-8; save it as UTF-8")))?;
    let shebang = script::parse_shebang(&shown, &text).map_err(Error::BadInput)?;
    Ok(JobScript { path: absolute, text, shebang })
}

/// The script's `#CARMA` options merged under the command line's: a flag given on the command
/// line wins, lists (`--env`, `--param`) take the script's entries first.
pub(super) fn merge_directives(
    script: &JobScript,
    shown: &str,
    cli: SubmitArgs,
) -> Result<SubmitArgs, Error> {
    let lines = script::directives(shown, &script.text).map_err(Error::BadInput)?;
    let mut merged = cli;
    for (line, words) in lines.into_iter().rev() {
        let at = format!("{shown}:{line}");
        let directive = Directive::try_parse_from(words.iter().map(OsString::from)).map_err(|e| {
            Error::BadInput(format!("{at}: {DIRECTIVE} line: {}", crate::submit_argv::one_line(&e)))
        })?;
        let args = directive.args;
        if args.spec.is_some() || !args.stray.is_empty() || !args.command.is_empty() || args.rad.is_some() {
            return Err(Error::BadInput(format!(
                "{at}: {DIRECTIVE} lines take options only (no file, command or --rad)"
            )));
        }
        merged = over(merged, args);
    }
    Ok(merged)
}

/// `top`'s settings over `under`'s.
fn over(top: SubmitArgs, under: SubmitArgs) -> SubmitArgs {
    let list = |under: Vec<String>, top: Vec<String>| under.into_iter().chain(top).collect::<Vec<_>>();
    SubmitArgs {
        spec: top.spec,
        stray: top.stray,
        rad: top.rad,
        name: top.name.or(under.name),
        gpus: top.gpus.or(under.gpus),
        mem: top.mem.or(under.mem),
        workdir: top.workdir.or(under.workdir),
        export: top.export.or(under.export),
        env: list(under.env, top.env),
        output: top.output.or(under.output),
        error: top.error.or(under.error),
        model_summary: top.model_summary.or(under.model_summary),
        batch_size: top.batch_size.or(under.batch_size),
        max_retries: top.max_retries.or(under.max_retries),
        time_limit: top.time_limit.or(under.time_limit),
        signal: top.signal.or(under.signal),
        begin: top.begin.or(under.begin),
        after: top.after.or(under.after),
        keep_on_dependency_failure: top.keep_on_dependency_failure || under.keep_on_dependency_failure,
        array: top.array.or(under.array),
        params: list(under.params, top.params),
        name_template: top.name_template.or(under.name_template),
        priority: top.priority.or(under.priority),
        nice: top.nice.or(under.nice),
        hold: top.hold || under.hold,
        notify: top.notify.or(under.notify),
        mail_user: top.mail_user.or(under.mail_user),
        mail_type: top.mail_type.or(under.mail_type),
        mig_profile: top.mig_profile.or(under.mig_profile),
        dry_run: top.dry_run || under.dry_run,
        parsable: top.parsable || under.parsable,
        command: top.command,
    }
}

/// The script's arguments: words after the script, or after `--`.
pub(super) fn arguments(args: &SubmitArgs) -> Vec<OsString> {
    args.stray.iter().chain(args.command.iter()).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(text: &str) -> JobScript {
        JobScript {
            path: "/w/train.sh".into(),
            text: text.into(),
            shebang: script::parse_shebang("s", text).unwrap(),
        }
    }

    /// Goal: the command line wins over `#CARMA` lines, later lines over earlier ones, lists
    /// add up, and a line that is not options is refused with its line number.
    #[test]
    fn command_line_wins_over_directives() {
        let text = "#!/bin/sh\n#CARMA --gpus 2 --mem 12GiB --env A=1\n#CARMA --gpus 3 --hold\necho\n";
        let cli = SubmitArgs { mem: Some("1GiB".into()), env: vec!["B=2".into()], ..SubmitArgs::default() };
        let merged = merge_directives(&script(text), "train.sh", cli).unwrap();
        assert_eq!(merged.gpus.as_deref(), Some("3"));
        assert_eq!(merged.mem.as_deref(), Some("1GiB"));
        assert_eq!(merged.env, ["A=1", "B=2"]);
        assert!(merged.hold);
        let err = merge_directives(&script("#!/bin/sh\n#CARMA --gpu 2\n"), "t.sh", SubmitArgs::default());
        assert!(
            err.unwrap_err().to_string().starts_with("t.sh:2: #CARMA line: unexpected argument '--gpu'"),
            "one line naming the line"
        );
        let err =
            merge_directives(&script("#!/bin/sh\n#CARMA -- python x.py\n"), "t.sh", SubmitArgs::default());
        assert_eq!(
            err.unwrap_err().to_string(),
            "t.sh:2: #CARMA lines take options only (no file, command or --rad)"
        );
    }
}
