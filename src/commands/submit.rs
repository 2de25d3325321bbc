//! `carma submit`: validate a spec as the submitter and drop it into the spool. Never opens
//! the journal.
//!
//! Everything that depends on who submits is settled here, in the submitter's own process:
//! the environment is captured (`--export`, ALL by default, as sbatch does), the program is
//! resolved with the PATH the job will get, the workdir and the program are checked with the
//! submitter's permissions, and a model summary is read (a regular file, bounded) and
//! embedded. The tick, which may run as root, then never looks anything up on the
//! submitter's behalf.
//!
//! The same holds for the workflow flags: dependencies are resolved here against the
//! published view (`@`, prefixes, array ids become full ids), a job script is read and copied
//! here with the submitter's permissions (`script`), and an array or sweep is expanded here
//! into its tasks (`workflow`), each a spool file of its own.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::cli::SubmitArgs;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::error::Error;
use crate::home::Home;
use crate::id::TaskId;
use crate::intake;
use crate::inventory::Inventory;
use crate::spec::export::Export;
use crate::spec::{self, SpecFile, Submission};
pub(in crate::commands) use program::resolve_program;
use program::{accessible, is_executable_file};

mod dry_run;
mod fit;
mod given;
mod limits;
mod outputs;
mod program;
mod script;
mod workflow;

pub(super) use given::Given;

/// PATH a job gets when its environment has none (`--export=NONE`), set at submit.
const PATH_DEFAULT: &str = "/usr/local/bin:/usr/bin:/bin";

pub(super) fn run(home: &Home, args: SubmitArgs) -> anyhow::Result<()> {
    run_to(home, args, &Given::default(), &mut std::io::stdout().lock())
}

/// `run`, writing to `out` (stdout, or `carma mcp`'s answer).
pub(super) fn run_to(
    home: &Home,
    args: SubmitArgs,
    extra: &Given,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    submit_to(home, args, extra, out, None).map(drop)
}

/// `carma submit`'s whole path, which `carma alloc` and `carma run` take too: their task is
/// marked `interactive` (`alloc`, `run` or `hold`) and nothing is printed, their caller tells
/// the user what happens. The ids written (none for `--dry-run`).
pub(super) fn submit(
    home: &Home,
    args: SubmitArgs,
    interactive: Option<&str>,
) -> anyhow::Result<Vec<TaskId>> {
    submit_to(home, args, &Given::default(), &mut std::io::stdout().lock(), interactive)
}

fn submit_to(
    home: &Home,
    args: SubmitArgs,
    extra: &Given,
    mut out: &mut dyn Write,
    interactive: Option<&str>,
) -> anyhow::Result<Vec<TaskId>> {
    home.require_initialized()?;
    let cwd = std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    // A broken config.toml is the tick's to report; submit then checks only the spec.
    let config = Config::load(home).unwrap_or_default();
    let inventory = Inventory::load(home);
    let host = dry_run::HostEnforcement::here(home);
    let server = crate::spec::sbatch::Server {
        gpus: inventory.as_ref().map(|inv| inv.gpus.iter().map(|g| g.name.clone()).collect()),
        node: crate::spec::sbatch::node_name(),
        sends_mail: !config.notify.sendmail.is_empty(),
        mails_submitter: config.notify.mail_submitter,
        host_limits_unenforced: host.memory.clone(),
        cpu_limit_unenforced: host.cpu.clone(),
    };
    let (args, script, sources, notes) = load_script(args, &cwd, &server)?;
    let (args, mem_warning) = script::gpu_mem_spelling(args);
    let (mut file, origin, base) = load_spec(&args, script.as_ref(), extra.spec_text.as_deref(), &cwd)?;
    apply_workflow_flags(&mut file, &args)?;
    check_mail(&file, &config)?;
    if !file.after.is_empty() {
        file.after = resolve_dependencies(home, &file.after, &config)?;
    }
    let mut limits = inventory.map(|inv| inv.limits()).unwrap_or_default();
    limits.time_limit_max_ms = config.limits.time_limit_max_ms;
    limits.retries_max = Some(config.limits.retries_max);
    // Where a host limit is enforced, more than the machine has would be a limit that never
    // holds: refused, as Slurm refuses what its node cannot meet (where it is not, the note says so).
    if let Some((cpus, mib)) = crate::exec::hostlimit::machine() {
        limits.machine_host = (host.cpu.is_none().then_some(cpus), host.memory.is_none().then_some(mib));
    }
    let mut submission = file.validate_submission(&origin, &base, limits).map_err(Error::BadInput)?;
    // Only carma's own verbs make a session (`spec::carma_only`), in a shape ingest accepts.
    submission.spec.interactive = interactive.map(String::from);
    spec::carma_only::check_session(&submission.spec).map_err(Error::BadInput)?;
    let actor = crate::access::Actor::current(&config.access);
    if let Some(refusal) =
        crate::tick::priority_refusal(&actor, submission.spec.priority, submission.spec.nice, &config)
    {
        return Err(Error::BadInput(format!("{origin}: {refusal}")).into());
    }
    if let Some(name) = &submission.spec.reservation {
        super::reserve::check_at_submit(home, name, actor.uid)?;
    }
    // Slurm's SLURM_SUBMIT_DIR: where the job was submitted from (the tick adds the others).
    let submit_dir = spec::path_to_string(&cwd, "the current directory").map_err(Error::BadInput)?;
    submission.env.entry("SLURM_SUBMIT_DIR".into()).or_insert(submit_dir);
    let skipped = capture_environment(&args, &file, &origin, &mut submission)?;
    check_workdir(&submission.spec.workdir)?;
    let path_var = submission.env.get("PATH").map_or(PATH_DEFAULT, String::as_str).to_string();
    let workdir = PathBuf::from(&submission.spec.workdir);
    let is_script = script.is_some();
    match script {
        Some(script) => attach_script(&mut submission, script)?,
        None => {
            let program = resolve_program(&submission.spec.command[0], &path_var, &workdir)?;
            submission.spec.program = Some(program);
        }
    }
    if let Some(first) = submission.spec.notify.first_mut() {
        *first = resolve_program(first, &path_var, &workdir)
            .map_err(|e| Error::BadInput(format!("--notify: {e}")))?;
    }
    submission.summary_text = read_model_summary(&submission.spec)?;
    // Said on stderr as they come, or kept for the JSON answer.
    let mut said = Vec::new();
    let mut say = |line: String| if extra.json { said.push(line) } else { eprintln!("{line}") };
    if let Some(text) = &submission.summary_text
        && let Some(warning) = fit::too_big_warning(home, &submission.spec, text)
    {
        say(warning);
    }
    if !skipped.is_empty() {
        say(format!("note: not exported: {}", skipped.join(", ")));
    }
    for note in &notes {
        say(format!("note: {note}"));
    }
    if let Some(warning) = mem_warning {
        say(warning.to_string());
    }
    let now = SystemClock.now_ms();
    let expansion = expansion(&args)?;
    let array_id = TaskId::generate(now);
    let tasks = workflow::expand(&submission, &expansion, array_id.clone())?;
    for task in &tasks {
        spec::validate_name(&task.spec.name)
            .map_err(|e| Error::BadInput(format!("--name-template gives {e}")))?;
    }
    outputs::check_folders(&tasks)?;
    for note in outputs::attempt_notes(&tasks) {
        say(format!("note: {note}"));
    }
    if args.dry_run {
        let sources = if is_script { sources } else { dry_run::flag_sources(&args, &file, &origin) };
        // An agent's call (`extra.json`) gets the document whichever way it asked for a dry
        // run: the tool's dry_run, `--dry-run` in its argv, or a script's `#SBATCH --test-only`.
        if args.json || extra.json {
            return dry_run::print_json(&tasks, &sources, &host, &config.limits, &notes, &mut out)
                .map(|()| Vec::new());
        }
        return dry_run::print(&tasks, &sources, &host, &config.limits, &mut out).map(|()| Vec::new());
    }
    intake::check_queue_room(home, tasks.len(), config.limits.spool_entries_max)?;
    let ids = write_all(home, &tasks, now)?;
    let name = &submission.spec.name;
    let array = tasks[0].spec.array.is_some().then_some(&array_id);
    if interactive.is_some() {
        return Ok(ids);
    }
    if extra.json {
        given::write_json(out, &ids, array, name, said)?;
    } else {
        given::print_submitted(&mut out, &ids, array, name, args.parsable)?;
    }
    Ok(ids)
}

/// Mail asked for where it cannot go: no sendmail, or mail types with no one to mail.
fn check_mail(file: &spec::SpecFile, config: &Config) -> Result<(), Error> {
    if file.mail_user.is_some() && config.notify.sendmail.is_empty() {
        return Err(Error::BadInput(
            "--mail-user: this queue sends no mail (no [notify] sendmail in its config.toml); ask the administrator to set one, or use --notify CMD".into(),
        )
        );
    }
    if file.mail_type.is_some() && file.mail_user.is_none() && !config.notify.mail_submitter {
        return Err(Error::BadInput(
            "--mail-type: no one to mail; add --mail-user ADDRESS (this queue mails no submitter by default)"
                .into(),
        ));
    }
    Ok(())
}

/// The job's environment, as `--export` (or the spec's `export`) captures it from this
/// process, with the spec's [env] and `--env` over it; returns the names not exported.
fn capture_environment(
    args: &SubmitArgs,
    file: &spec::SpecFile,
    origin: &str,
    submission: &mut Submission,
) -> Result<Vec<String>, Error> {
    let export = match &args.export {
        Some(text) => Export::parse(Some(text)),
        None => Export::from_file(file.export.as_ref()),
    }
    .map_err(|e| Error::BadInput(format!("{origin}: {e}")))?;
    let captured = export.capture(std::env::vars_os());
    // The spec's [env] and --env win over the captured environment.
    let mut env = captured.env;
    env.extend(std::mem::take(&mut submission.env));
    // Without one (`--export NONE`) the job would inherit the supervisor's PATH, which is
    // root's: it gets this minimal, documented one instead.
    env.entry("PATH".to_string()).or_insert_with(|| PATH_DEFAULT.to_string());
    submission.spec.env_names = env.keys().cloned().collect();
    submission.spec.export = Some(export.label);
    submission.env = env;
    Ok(captured.skipped)
}

/// Writes every task of the submission into the spool; if one fails, withdraws those
/// already written (a tick may have taken some in meanwhile: they are named in the error).
fn write_all(home: &Home, tasks: &[Submission], now_ms: u64) -> anyhow::Result<Vec<TaskId>> {
    let mut ids = Vec::with_capacity(tasks.len());
    for task in tasks {
        match intake::submit(home, task, now_ms) {
            Ok(id) => ids.push(id),
            Err(e) => {
                let taken: Vec<String> =
                    ids.iter().filter(|id| !intake::withdraw(home, id)).map(TaskId::to_string).collect();
                let note = if taken.is_empty() {
                    String::new()
                } else {
                    format!(" (already taken in by a tick, cancel them: {})", taken.join(" "))
                };
                // The error keeps its kind (and so its exit code), with the note added.
                return Err(match e {
                    _ if note.is_empty() => e.into(),
                    Error::OverLimit(m) => Error::OverLimit(format!("{m}{note}")).into(),
                    Error::BadInput(m) => Error::BadInput(format!("{m}{note}")).into(),
                    other => anyhow::anyhow!("{other}{note}"),
                });
            }
        }
    }
    Ok(ids)
}

/// A job script becomes the task's program: its copy runs through the interpreter of its
/// `#!` line, which `script::merge_directives` checked the submitter can run now.
fn attach_script(submission: &mut Submission, script: script::JobScript) -> Result<(), Error> {
    submission.spec.program = Some(script.path.clone());
    submission.spec.script = Some(script.path);
    submission.script_text = Some(script.text);
    Ok(())
}

/// The spec file's and the flags' dependencies, resolved against the published view.
fn resolve_dependencies(home: &Home, after: &[String], config: &Config) -> Result<Vec<String>, Error> {
    let mut requests = Vec::new();
    for text in after {
        requests.extend(crate::spec::workflow::parse_after(text).map_err(Error::BadInput)?);
    }
    let state = crate::view::load(home)?;
    let spooled = crate::view::lookup::spooled(home, &state);
    let actor = crate::access::Actor::current(&config.access);
    workflow::resolve_after(&state, &spooled, &requests, &actor, &config.access)
}

/// `--array`, `--param` and `--name-template`, parsed.
fn expansion(args: &SubmitArgs) -> Result<workflow::Expansion, Error> {
    let array =
        args.array.as_deref().map(crate::spec::workflow::parse_array).transpose().map_err(Error::BadInput)?;
    let params = args
        .params
        .iter()
        .map(|p| crate::spec::workflow::parse_param(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::BadInput)?;
    Ok(workflow::Expansion { array, params, name_template: args.name_template.clone() })
}

/// The workflow flags over the spec (file or flags): dependencies add to the file's, the
/// others replace its values.
fn apply_workflow_flags(file: &mut SpecFile, args: &SubmitArgs) -> Result<(), Error> {
    if let Some(after) = &args.after {
        file.after.push(after.clone());
    }
    file.keep_on_dependency_failure |= args.keep_on_dependency_failure;
    file.hold |= args.hold;
    if let Some(priority) = whole_number("priority", &args.priority)? {
        file.priority = Some(priority);
    }
    if let Some(nice) = whole_number("nice", &args.nice)? {
        file.nice = Some(nice);
    }
    if let Some(notify) = &args.notify {
        file.notify = crate::spec::rad::split_words(notify)
            .map_err(|e| Error::BadInput(format!("--notify {notify:?}: {e}")))?;
        if file.notify.is_empty() {
            return Err(Error::BadInput(
                "--notify is empty; give a command, e.g. --notify 'notify-send done'".into(),
            ));
        }
    }
    if let Some(address) = &args.mail_user {
        file.mail_user = Some(address.clone());
    }
    if let Some(types) = &args.mail_type {
        crate::spec::mail::MailTypes::parse(types)
            .map_err(|e| Error::BadInput(format!("--mail-type: {e}")))?;
        file.mail_type = Some(types.clone());
    }
    Ok(())
}

/// For a job script (`carma submit train.sh`): its `#CARMA` options merged under the command
/// line's, and the script itself.
type Loaded = (SubmitArgs, Option<script::JobScript>, script::Sources, Vec<String>);

fn load_script(args: SubmitArgs, cwd: &Path, server: &crate::spec::sbatch::Server) -> Result<Loaded, Error> {
    let args = script_after_escape(args, cwd)?;
    let Some(path) =
        args.spec.clone().filter(|p| p.extension().is_none_or(|e| e != "toml") && script::is_script(p))
    else {
        let (args, notes) = script::command_line_options(args, server)?;
        return Ok((args, None, script::Sources::default(), notes));
    };
    let job_script = script::read(&path, cwd)?;
    let (merged, sources, notes) =
        script::merge_directives(&job_script, &path.display().to_string(), args, server)?;
    Ok((merged, Some(job_script), sources, notes))
}

/// `carma submit -- ./train.sh x` runs a job script as `carma submit train.sh x` does, its
/// `#CARMA` lines included: a command whose program is named by a path to a file starting
/// with `#!`, or a bare name that is not on the PATH but is such a file in the workdir (as
/// sbatch finds `train.sh` in the current directory). A program found on the PATH stays a
/// program, whatever its first bytes.
fn script_after_escape(mut args: SubmitArgs, cwd: &Path) -> Result<SubmitArgs, Error> {
    if args.spec.is_some() || args.rad.is_some() {
        return Ok(args);
    }
    let Some(first) = args.command.first().map(PathBuf::from) else { return Ok(args) };
    let base = args.workdir.as_ref().map_or_else(|| cwd.to_path_buf(), |w| cwd.join(w));
    let at_path = base.join(&first);
    let named_as_path = first.as_os_str().as_bytes().contains(&b'/');
    if !named_as_path {
        let path_var = std::env::var("PATH").unwrap_or_else(|_| PATH_DEFAULT.into());
        let on_path = path_var
            .split(':')
            .filter(|d| !d.is_empty())
            .any(|d| is_executable_file(&base.join(d).join(&first)));
        if on_path || !at_path.is_file() {
            return Ok(args);
        }
        if !crate::submit_argv::is_job_script(&at_path) {
            let shown = first.display();
            return Err(Error::BadInput(format!(
                "`{shown}` is not on the PATH but is a file in {}; to run it give its path: carma submit [options] -- ./{shown}",
                base.display()
            )));
        }
    }
    if crate::submit_argv::is_job_script(&at_path) {
        args.spec = Some(if args.workdir.is_some() { at_path } else { first });
        args.command.remove(0);
    }
    Ok(args)
}

/// The workdir must exist and the submitter must be able to enter it, now, while they can
/// still fix it.
fn check_workdir(workdir: &str) -> Result<(), Error> {
    let path = Path::new(workdir);
    if !path.is_dir() {
        return Err(Error::BadInput(format!(
            "workdir {workdir} is not a directory; create it or pass --workdir DIR"
        )));
    }
    if !accessible(path, libc::X_OK) {
        return Err(Error::BadInput(format!(
            "workdir {workdir} cannot be entered by you; fix its permissions or pass --workdir DIR"
        )));
    }
    Ok(())
}

/// The model summary as the submitter can read it now, checked and embedded; refused here,
/// while the submitter can fix it, rather than silently placed without an estimate.
fn read_model_summary(spec: &spec::TaskSpec) -> Result<Option<String>, Error> {
    let Some(path) = &spec.model_summary else { return Ok(None) };
    let hint = "give a summary JSON, torchsummary text or module dump (schema/model-summary.schema.json), or drop model_summary";
    let text = crate::estimate::read_summary_text(Path::new(path))
        .map_err(|e| Error::BadInput(format!("model summary {e}; {hint}")))?;
    let summary = crate::estimate::parse_summary(&text)
        .map_err(|e| Error::BadInput(format!("model summary {path}: {e}; {hint}")))?;
    crate::estimate::batch_size(&summary, spec.batch_size)
        .map_err(|e| Error::BadInput(format!("model summary {path}: {e}")))?;
    Ok(Some(text))
}

/// Returns the raw spec, the name used in errors, and the directory relative paths resolve
/// against.
fn load_spec(
    args: &SubmitArgs,
    script: Option<&script::JobScript>,
    spec_text: Option<&str>,
    cwd: &Path,
) -> Result<(SpecFile, String, PathBuf), Error> {
    if let Some(text) = spec_text {
        return given::spec_from_text(args, text, cwd);
    }
    let (mut file, origin, base) = if let Some(script) = script {
        if args.rad.is_some() {
            return Err(Error::BadInput("a job script and --rad cannot be combined".into()));
        }
        let mut command = vec![OsString::from(&script.path)];
        command.extend(script::arguments(args));
        (
            flag_spec(args, &command)?,
            args.spec.as_ref().map_or_else(String::new, |p| p.display().to_string()),
            cwd.to_path_buf(),
        )
    } else if !args.stray.is_empty() {
        return Err(stray_words(args));
    } else if let Some(path) = &args.spec {
        refuse_command_with_file(args, "a spec file")?;
        refuse_non_spec(path)?;
        let mut file = spec::read_spec_file(path).map_err(|e| not_toml(path, e))?;
        flags_over_file(&mut file, args)?;
        (file, path.display().to_string(), parent_dir(path, cwd))
    } else if let Some(path) = &args.rad {
        refuse_command_with_file(args, "--rad")?;
        let mut file = spec::rad::read_rad_file(path).map_err(Error::BadInput)?;
        flags_over_file(&mut file, args)?;
        (file, path.display().to_string(), parent_dir(path, cwd))
    } else {
        (flag_spec(args, &args.command)?, "command line".to_string(), cwd.to_path_buf())
    };
    if let Some(workdir) = &args.workdir {
        file.workdir = Some(spec::path_to_string(&cwd.join(workdir), "--workdir").map_err(Error::BadInput)?);
    }
    Ok((file, origin, base))
}

/// `carma submit python train.py`: words that only make sense after `--`.
fn stray_words(args: &SubmitArgs) -> Error {
    let words: Vec<String> = args
        .spec
        .iter()
        .map(|p| p.as_os_str().to_os_string())
        .chain(args.stray.iter().cloned())
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    Error::BadInput(format!(
        "`{}` looks like a command; put it after `--`: carma submit [options] -- {}",
        words.join(" "),
        words.join(" ")
    ))
}

/// A spec must be TOML (a script, starting with `#!`, was taken before); a program is a
/// command, which goes after `--`.
fn refuse_non_spec(path: &Path) -> Result<(), Error> {
    let shown = path.display();
    let is_toml = path.extension().is_some_and(|e| e == "toml");
    if !is_toml && path.is_file() && is_executable_file(path) {
        let run = if path.is_absolute() || shown.to_string().starts_with('.') {
            shown.to_string()
        } else {
            format!("./{shown}")
        };
        return Err(Error::BadInput(format!(
            "{shown} is a program, not a TOML spec or a script with #!; run it with: carma submit [options] -- {run}"
        )));
    }
    if !is_toml && !path.exists() && (shown.to_string().contains(['/', '.'])) {
        return Err(Error::BadInput(format!(
            "{shown}: no such file; give the path of a TOML spec or a job script (a command goes after `--`)"
        )));
    }
    if is_toml && !path.exists() {
        return Err(Error::BadInput(format!("{shown}: no such file; give the path of a TOML spec")));
    }
    if !is_toml && !path.exists() {
        return Err(Error::BadInput(format!(
            "{shown} is not a spec file; to run a command put it after `--`: carma submit [options] -- {shown}"
        )));
    }
    Ok(())
}

fn parent_dir(path: &Path, cwd: &Path) -> PathBuf {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    cwd.join(parent)
}

/// A file brings its own command; one after `--` as well is refused.
fn refuse_command_with_file(args: &SubmitArgs, what: &str) -> Result<(), Error> {
    if !args.command.is_empty() {
        return Err(Error::BadInput(format!(
            "{what} brings its own command; drop the one after `--`, or drop the file"
        )));
    }
    Ok(())
}

/// The task flags over a spec file's values, as for a job script's `#CARMA` lines: a flag
/// given wins, `--env` adds to the file's `[env]`.
fn flags_over_file(file: &mut SpecFile, args: &SubmitArgs) -> Result<(), Error> {
    let set = |slot: &mut Option<String>, flag: &Option<String>| {
        if let Some(value) = flag {
            *slot = Some(value.clone());
        }
    };
    set(&mut file.name, &args.name);
    set(&mut file.memory, &checked_mem(&args.gpu_mem)?);
    set(&mut file.time_limit, &args.time_limit);
    set(&mut file.signal, &args.signal);
    set(&mut file.begin, &args.begin);
    set(&mut file.output, &args.output);
    set(&mut file.error, &args.error);
    set(&mut file.mig_profile, &args.mig_profile);
    set(&mut file.reservation, &args.reservation);
    set(&mut file.host_mem, &limits::host_mem(&args.host_mem)?);
    file.requeue = limits::requeue(args).or(file.requeue);
    for (flag, slot, text) in [
        ("gpus", &mut file.gpus, &args.gpus),
        ("batch-size", &mut file.batch_size, &args.batch_size),
        ("max-retries", &mut file.max_retries, &args.max_retries),
        ("cpus-per-task", &mut file.cpus, &args.cpus_per_task),
    ] {
        if let Some(value) = whole_number(flag, text)? {
            *slot = Some(value);
        }
    }
    if let Some(path) = &args.model_summary {
        file.model_summary = Some(spec::path_to_string(path, "--model-summary").map_err(Error::BadInput)?);
    }
    for pair in &args.env {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| Error::BadInput(format!("--env {pair:?} has no '='; use --env NAME=VALUE")))?;
        file.env.insert(key.to_string(), value.to_string());
    }
    Ok(())
}

/// `--gpu-mem 12` would be 12 MiB, almost never what was meant: a flag's size needs a unit.
pub(super) fn checked_mem(mem: &Option<String>) -> Result<Option<String>, Error> {
    match mem {
        Some(text)
            if !text.trim().is_empty() && text.trim().bytes().all(|b| b.is_ascii_digit() || b == b'.') =>
        {
            Err(Error::BadInput(format!(
                "--gpu-mem {text} has no unit; give one, e.g. --gpu-mem {t}GiB or --gpu-mem {t}MiB",
                t = text.trim()
            )))
        }
        other => Ok(other.clone()),
    }
}

/// A file that is not a job script and does not read as TOML: say what it should be rather
/// than show a TOML parser's complaint about a shell script.
/// A file that could not be read at all (a FIFO, a directory, too large) keeps its own reason.
fn not_toml(path: &Path, error: String) -> Error {
    let is_toml = path.extension().is_some_and(|e| e == "toml");
    let unreadable = error.starts_with(&format!("{}: cannot read spec: ", path.display()));
    if is_toml || unreadable {
        return Error::BadInput(error);
    }
    Error::BadInput(format!(
        "{} is neither a job script (its first line must be #! and an interpreter, e.g. #!/bin/bash) nor a TOML spec (name it .toml)",
        path.display()
    ))
}

/// A whole number given as a flag, with a one-line error naming the flag.
fn whole_number(flag: &str, text: &Option<String>) -> Result<Option<i64>, Error> {
    text.as_deref()
        .map(|t| {
            t.trim().parse::<i64>().map_err(|_| {
                Error::BadInput(format!("--{flag} {t:?} is not a whole number; give e.g. --{flag} 2"))
            })
        })
        .transpose()
}

fn flag_spec(args: &SubmitArgs, words: &[OsString]) -> Result<SpecFile, Error> {
    if words.is_empty() {
        return Err(Error::BadInput(
            "nothing to submit; give a spec file, a job script, --rad FILE, or a command after `--` (e.g. carma submit --gpus 1 -- python train.py)".into(),
        ));
    }
    let mut command = Vec::with_capacity(words.len());
    for arg in words {
        command.push(utf8_arg(arg)?);
    }
    let program = Path::new(&command[0]).file_name().and_then(|n| n.to_str()).unwrap_or("task");
    let default_name: String =
        program.chars().filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c)).collect();
    let mut env = std::collections::BTreeMap::new();
    for pair in &args.env {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| Error::BadInput(format!("--env {pair:?} has no '='; use --env NAME=VALUE")))?;
        env.insert(key.to_string(), value.to_string());
    }
    let model_summary = args
        .model_summary
        .as_deref()
        .map(|p| spec::path_to_string(p, "--model-summary"))
        .transpose()
        .map_err(Error::BadInput)?;
    Ok(SpecFile {
        name: Some(args.name.clone().unwrap_or(if default_name.is_empty() {
            "task".into()
        } else {
            default_name
        })),
        command: Some(command),
        env,
        output: args.output.clone(),
        error: args.error.clone(),
        gpus: whole_number("gpus", &args.gpus)?,
        memory: checked_mem(&args.gpu_mem)?,
        model_summary,
        batch_size: whole_number("batch-size", &args.batch_size)?,
        max_retries: whole_number("max-retries", &args.max_retries)?,
        time_limit: args.time_limit.clone(),
        signal: args.signal.clone(),
        begin: args.begin.clone(),
        mig_profile: args.mig_profile.clone(),
        reservation: args.reservation.clone(),
        host_mem: limits::host_mem(&args.host_mem)?,
        cpus: whole_number("cpus-per-task", &args.cpus_per_task)?,
        requeue: limits::requeue(args),
        ..SpecFile::default()
    })
}

fn utf8_arg(arg: &OsString) -> Result<String, Error> {
    arg.to_str().map(str::to_string).ok_or_else(|| {
        Error::BadInput(format!(
            "command argument {} is not valid UTF-8; carma stores commands as UTF-8",
            arg.to_string_lossy()
        ))
    })
}
