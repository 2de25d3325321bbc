//! `carma submit train.sh [args]`: a job script, its `#CARMA` lines read with the command
//! line's own parser, and the command line winning over them (see `spec::script`).

use std::ffi::OsString;
use std::path::Path;

use clap::Parser;

use crate::cli::{Directive, SubmitArgs};
use crate::error::Error;
use crate::spec::sbatch;
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

/// What set each of the settings `--dry-run` shows: a directive (`train.sh:4 #SBATCH
/// --gres=gpu:2`), the command line, or nothing (`None`: carma's default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Sources {
    pub gpus: Option<String>,
    pub gpu_mem: Option<String>,
    pub time_limit: Option<String>,
    pub array: Option<String>,
    pub name: Option<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub host_mem: Option<String>,
    pub cpus: Option<String>,
    pub requeue: Option<String>,
    pub signal: Option<String>,
    pub after: Option<String>,
}

impl Sources {
    /// `label` for each setting `args` gives, over what an earlier layer gave.
    pub(super) fn layer(&mut self, label: &str, args: &SubmitArgs) {
        let mark = |slot: &mut Option<String>, set: bool| {
            if set {
                *slot = Some(label.to_string());
            }
        };
        mark(&mut self.gpus, args.gpus.is_some());
        mark(&mut self.gpu_mem, args.gpu_mem.is_some() || args.mem.is_some());
        mark(&mut self.time_limit, args.time_limit.is_some());
        mark(&mut self.array, args.array.is_some());
        mark(&mut self.name, args.name.is_some());
        mark(&mut self.output, args.output.is_some());
        mark(&mut self.error, args.error.is_some());
        mark(&mut self.host_mem, args.host_mem.is_some());
        mark(&mut self.cpus, args.cpus_per_task.is_some());
        mark(&mut self.requeue, args.requeue || args.no_requeue);
        mark(&mut self.signal, args.signal.is_some());
        mark(&mut self.after, args.after.is_some());
    }
}

/// A script's options merged: its `#SBATCH` lines (Slurm's rules, see `spec::sbatch`) under
/// its `#CARMA` lines under the command line (its sbatch options, then carma's flags); a flag
/// given later wins, lists (`--env`, `--param`) add up, and what this server cannot give for
/// a setting a later layer sets again is a note, not a refusal. Every problem of every
/// directive, the `#!` line's included, is in the one error; the notes are returned (and, with
/// a refusal, are part of the error).
pub(super) fn merge_directives(
    script: &JobScript,
    shown: &str,
    mut cli: SubmitArgs,
    server: &sbatch::Server,
) -> Result<(SubmitArgs, Sources, Vec<String>), Error> {
    let mut problems = Vec::new();
    if let Some(problem) = interpreter_problem(script, shown) {
        problems.push(problem);
    }
    let mut carma_problems = Vec::new();
    let carma_lines = carma_layers(script, shown, &mut carma_problems);
    let above = settings_above(&carma_lines, &cli);
    let command_line = std::mem::take(&mut cli.sbatch_options);
    let translation = sbatch::translate_with(&script.text, server, &command_line, &above);
    // As the script reads: the #! line, the #SBATCH lines, then the #CARMA lines.
    problems.extend(translation.refusals.iter().map(|f| f.render(shown)));
    problems.extend(carma_problems);
    let notes: Vec<String> = translation.notes.iter().map(|f| f.render(shown)).collect();
    let mut layers = Vec::new();
    let mut typed = Vec::new();
    for carma in translation.carma.iter().filter(|c| !c.words.is_empty()) {
        let at = match carma.line {
            sbatch::COMMAND_LINE => format!("command line {}", carma.written),
            line => format!("{shown}:{line} {} {}", sbatch::DIRECTIVE, carma.written),
        };
        match Directive::try_parse_from(carma.words.iter().map(OsString::from)) {
            Ok(d) if carma.line == sbatch::COMMAND_LINE => typed.push((at, d.args)),
            Ok(directive) => layers.push((at, directive.args)),
            Err(e) => problems.push(format!("{at}: {}", crate::submit_argv::one_line(&e))),
        }
    }
    if !problems.is_empty() {
        return Err(Error::BadInput(refusal(shown, &problems, &notes)));
    }
    let mut sources = Sources::default();
    let mut merged = SubmitArgs::default();
    for (label, args) in layers.into_iter().chain(carma_lines).chain(typed) {
        sources.layer(&label, &args);
        merged = over(args, merged);
    }
    sources.layer("command line", &cli);
    let mut merged = over(cli, merged);
    if sbatch::has_directives(&script.text) {
        slurm_default_outputs(&mut merged, &mut sources);
    }
    Ok((merged, sources, notes))
}

/// For a command that is no job script: the sbatch options typed on the command line, read as
/// sbatch reads them, under carma's own flags; their notes, or every refusal in one error.
pub(super) fn command_line_options(
    mut cli: SubmitArgs,
    server: &sbatch::Server,
) -> Result<(SubmitArgs, Vec<String>), Error> {
    let words = std::mem::take(&mut cli.sbatch_options);
    if words.is_empty() {
        return Ok((cli, Vec::new()));
    }
    let translation = sbatch::translate_with("#!/bin/sh\n", server, &words, &settings_above(&[], &cli));
    let shown = "command line";
    let mut problems: Vec<String> = translation.refusals.iter().map(|f| f.render(shown)).collect();
    let notes: Vec<String> = translation.notes.iter().map(|f| f.render(shown)).collect();
    let mut merged = SubmitArgs::default();
    for carma in translation.carma.iter().filter(|c| !c.words.is_empty()) {
        match Directive::try_parse_from(carma.words.iter().map(OsString::from)) {
            Ok(directive) => merged = over(directive.args, merged),
            Err(e) => problems.push(format!("{}: {}", carma.written, crate::submit_argv::one_line(&e))),
        }
    }
    if !problems.is_empty() {
        return Err(Error::BadInput(refusal(shown, &problems, &notes)));
    }
    Ok((over(cli, merged), notes))
}

/// The script's `#!` interpreter, when the submitter cannot run it: a problem beside the
/// directives' (Slurm finds it only when the job starts).
fn interpreter_problem(script: &JobScript, shown: &str) -> Option<String> {
    let interpreter = Path::new(&script.shebang.interpreter);
    (!super::program::is_executable_file(interpreter)).then(|| {
        format!(
            "{shown}:1: interpreter {} from its #! line is not a program you can run; fix the #! line",
            interpreter.display()
        )
    })
}

/// The script's `#CARMA` lines, each parsed with the command line's parser and labelled with
/// its line; a line that does not parse is a problem.
fn carma_layers(script: &JobScript, shown: &str, problems: &mut Vec<String>) -> Vec<(String, SubmitArgs)> {
    let mut layers = Vec::new();
    let lines = match script::directives(shown, &script.text) {
        Err(e) => {
            problems.push(e);
            return layers;
        }
        Ok(lines) => lines,
    };
    for (line, words) in lines {
        let at = format!("{shown}:{line}");
        match Directive::try_parse_from(words.iter().map(OsString::from)) {
            Err(e) => {
                problems.push(format!("{at}: {DIRECTIVE} line: {}", crate::submit_argv::one_line(&e)));
            }
            Ok(d)
                if d.args.spec.is_some()
                    || !d.args.stray.is_empty()
                    || !d.args.command.is_empty()
                    || d.args.rad.is_some() =>
            {
                problems
                    .push(format!("{at}: {DIRECTIVE} lines take options only (no file, command or --rad)"));
            }
            Ok(d) => layers.push((format!("{at} {DIRECTIVE}"), d.args)),
        }
    }
    layers
}

/// The settings the `#CARMA` lines and carma's flags on the command line give, which win over
/// every `#SBATCH` line: the carma flag and where it was given.
fn settings_above(carma_lines: &[(String, SubmitArgs)], cli: &SubmitArgs) -> Vec<sbatch::Above> {
    let mut above = Vec::new();
    let mut add = |label: &str, args: &SubmitArgs| {
        let set: [(&'static str, &Option<String>); 4] = [
            ("--gpus", &args.gpus),
            ("--time-limit", &args.time_limit),
            ("--host-mem", &args.host_mem),
            ("--cpus-per-task", &args.cpus_per_task),
        ];
        for (flag, value) in set {
            if let Some(value) = value {
                above.push((flag, format!("{label} {flag} {value}")));
            }
        }
    };
    for (label, args) in carma_lines {
        add(label, args);
    }
    add("the command line's", cli);
    above
}

/// One problem as one line (as before `#SBATCH` was read); several under a line that counts
/// them, with the notes after them.
fn refusal(shown: &str, problems: &[String], notes: &[String]) -> String {
    if let ([only], []) = (problems, notes) {
        return only.clone();
    }
    let mut text = format!("{shown}: {} problem(s) in its directives; nothing submitted:", problems.len());
    for problem in problems {
        text.push_str(&format!("\n  {problem}"));
    }
    for note in notes {
        text.push_str(&format!("\n  note: {note}"));
    }
    text
}

/// Slurm's output files for a script with `#SBATCH` lines: `slurm-%j.out` (an array's
/// `slurm-%A_%a.out`) in the working directory, and standard error into the output file
/// unless `-e` names another.
fn slurm_default_outputs(args: &mut SubmitArgs, sources: &mut Sources) {
    if args.output.is_none() {
        let file = if args.array.is_some() { "slurm-{array}_{index}.out" } else { "slurm-%j.out" };
        args.output = Some(file.into());
        sources.output = Some("Slurm's default".into());
    }
    if args.error.is_none() {
        args.error.clone_from(&args.output);
        sources.error = Some("into the output file, as Slurm does without -e".into());
    }
}

/// `--mem` is carma 0.x's spelling of `--gpu-mem`: kept for one release, with a warning
/// (returned, printed once the task is accepted, so that a refusal stays one line).
pub(super) fn gpu_mem_spelling(mut args: SubmitArgs) -> (SubmitArgs, Option<&'static str>) {
    let Some(mem) = args.mem.take() else { return (args, None) };
    args.gpu_mem = args.gpu_mem.or(Some(mem));
    (args, Some(MEM_WARNING))
}

/// The warning for carma 0.x's `--mem`.
pub(super) const MEM_WARNING: &str =
    "warning: --mem is GPU memory in carma 0.x and becomes host memory; write --gpu-mem";

/// `top`'s settings over `under`'s.
fn over(top: SubmitArgs, under: SubmitArgs) -> SubmitArgs {
    let list = |under: Vec<String>, top: Vec<String>| under.into_iter().chain(top).collect::<Vec<_>>();
    SubmitArgs {
        spec: top.spec,
        stray: top.stray,
        rad: top.rad,
        name: top.name.or(under.name),
        gpus: top.gpus.or(under.gpus),
        gpu_mem: top.gpu_mem.or(under.gpu_mem),
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
        reservation: top.reservation.or(under.reservation),
        host_mem: top.host_mem.or(under.host_mem),
        cpus_per_task: top.cpus_per_task.or(under.cpus_per_task),
        requeue: top.requeue || (under.requeue && !top.no_requeue),
        no_requeue: top.no_requeue || (under.no_requeue && !top.requeue),
        json: top.json || under.json,
        dry_run: top.dry_run || under.dry_run,
        parsable: top.parsable || under.parsable,
        sbatch_options: top.sbatch_options,
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
        let server = sbatch::Server::default();
        let (merged, _, _) = merge_directives(&script(text), "train.sh", cli, &server).unwrap();
        assert_eq!(merged.gpus.as_deref(), Some("3"));
        assert_eq!(merged.mem.as_deref(), Some("1GiB"));
        assert_eq!(merged.env, ["A=1", "B=2"]);
        assert!(merged.hold);
        let err =
            merge_directives(&script("#!/bin/sh\n#CARMA --gpu 2\n"), "t.sh", SubmitArgs::default(), &server);
        assert!(
            err.unwrap_err().to_string().starts_with("t.sh:2: #CARMA line: unexpected argument '--gpu'"),
            "one line naming the line"
        );
        let err = merge_directives(
            &script("#!/bin/sh\n#CARMA -- python x.py\n"),
            "t.sh",
            SubmitArgs::default(),
            &server,
        );
        assert_eq!(
            err.unwrap_err().to_string(),
            "t.sh:2: #CARMA lines take options only (no file, command or --rad)"
        );
    }

    /// Goal: `#CARMA` wins over `#SBATCH` for the same setting, the command line over both;
    /// each setting names what set it; Slurm's default output file; a refusal and a bad
    /// `#CARMA` line are reported together, with the notes.
    #[test]
    fn carma_lines_win_over_sbatch_lines_and_every_problem_comes_at_once() {
        let text = "#!/bin/sh\n#SBATCH --gres=gpu:2 -t 15 -J sb\n#CARMA --gpus 1\n#SBATCH -p gpu\necho\n";
        let server = sbatch::Server::default();
        let cli = SubmitArgs { name: Some("cli".into()), ..SubmitArgs::default() };
        let (merged, sources, notes) = merge_directives(&script(text), "t.sh", cli, &server).unwrap();
        assert_eq!(merged.gpus.as_deref(), Some("1"));
        assert_eq!(merged.time_limit.as_deref(), Some("15m"));
        assert_eq!(merged.name.as_deref(), Some("cli"));
        assert_eq!(sources.gpus.as_deref(), Some("t.sh:3 #CARMA"));
        assert_eq!(sources.time_limit.as_deref(), Some("t.sh:2 #SBATCH -t 15"));
        assert_eq!(sources.name.as_deref(), Some("command line"));
        assert_eq!(
            (merged.output.as_deref(), merged.error.as_deref()),
            (Some("slurm-%j.out"), Some("slurm-%j.out"))
        );
        assert_eq!(notes, ["t.sh:4: #SBATCH -p gpu: partitions: only matter on a cluster; ignored"]);
        let text = "#!/bin/sh\n#SBATCH -N 2 -p gpu\n#CARMA --gpu 2\n";
        let err = merge_directives(&script(text), "t.sh", SubmitArgs::default(), &server).unwrap_err();
        let text = err.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "t.sh: 2 problem(s) in its directives; nothing submitted:");
        assert_eq!(
            lines[1],
            "  t.sh:2: #SBATCH -N 2: 2 nodes: this server is one node; ask for the GPUs one node has with --gpus N"
        );
        assert!(lines[2].starts_with("  t.sh:3: #CARMA line: unexpected argument '--gpu'"), "{text}");
        assert_eq!(lines[3], "  note: t.sh:2: #SBATCH -p gpu: partitions: only matter on a cluster; ignored");
    }
}
