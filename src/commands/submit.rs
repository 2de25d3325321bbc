//! `carma submit`: validate a spec and drop it into the spool. Never opens the journal.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::SubmitArgs;
use crate::clock::{Clock, SystemClock};
use crate::error::Error;
use crate::home::Home;
use crate::inventory::Inventory;
use crate::spec::{self, Limits, SpecFile};
use crate::spool;

pub fn run(home: &Home, args: SubmitArgs) -> anyhow::Result<()> {
    home.require_initialized()?;
    let (file, origin, base) = load_spec(&args)?;
    let limits = Limits { machine_gpus: Inventory::load(home).map(|inv| inv.gpus.len() as u32) };
    let spec = file.validate(&origin, &base, limits).map_err(Error::BadInput)?;
    check_model_summary(&spec)?;
    let id = spool::submit(home, &spec, SystemClock.now_ms())?;
    let mut out = std::io::stdout().lock();
    if args.parsable {
        writeln!(out, "{id}")?;
    } else {
        writeln!(out, "submitted task {id} ({})", spec.name)?;
    }
    Ok(())
}

/// A model summary is read by the tick's estimator; a missing or unreadable one is refused
/// here, while the submitter can still fix it, instead of silently placing without estimate.
fn check_model_summary(spec: &crate::spec::TaskSpec) -> Result<(), Error> {
    let Some(path) = &spec.model_summary else { return Ok(()) };
    let summary = crate::estimate::read_summary(Path::new(path)).map_err(|e| {
        Error::BadInput(format!(
            "model summary {e}; give a summary JSON, torchsummary text or module dump (schema/model-summary.schema.json), or drop model_summary"
        ))
    })?;
    crate::estimate::batch_size(&summary, spec.batch_size)
        .map(drop)
        .map_err(|e| Error::BadInput(format!("model summary {path}: {e}")))
}

/// Returns the raw spec, the name used in errors, and the directory relative paths resolve
/// against.
fn load_spec(args: &SubmitArgs) -> Result<(SpecFile, String, PathBuf), Error> {
    let cwd = std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    let (mut file, origin, base) = if let Some(path) = &args.spec {
        refuse_flags_with_file(args, "a spec file")?;
        let file = spec::read_spec_file(path).map_err(Error::BadInput)?;
        (file, path.display().to_string(), parent_dir(path, &cwd))
    } else if let Some(path) = &args.rad {
        refuse_flags_with_file(args, "--rad")?;
        let file = spec::rad::read_rad_file(path).map_err(Error::BadInput)?;
        (file, path.display().to_string(), parent_dir(path, &cwd))
    } else {
        (flag_spec(args)?, "command line".to_string(), cwd.clone())
    };
    if let Some(workdir) = &args.workdir {
        file.workdir = Some(spec::path_to_string(&cwd.join(workdir), "--workdir").map_err(Error::BadInput)?);
    }
    Ok((file, origin, base))
}

fn parent_dir(path: &Path, cwd: &Path) -> PathBuf {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    cwd.join(parent)
}

fn refuse_flags_with_file(args: &SubmitArgs, what: &str) -> Result<(), Error> {
    let flags = args.name.is_some()
        || args.gpus.is_some()
        || args.mem.is_some()
        || !args.env.is_empty()
        || args.model_summary.is_some()
        || args.batch_size.is_some()
        || args.max_retries.is_some()
        || args.time_limit.is_some()
        || !args.command.is_empty();
    if flags {
        return Err(Error::BadInput(format!(
            "task flags and {what} cannot be combined; put the settings in the file (only --workdir may override it)"
        )));
    }
    Ok(())
}

fn flag_spec(args: &SubmitArgs) -> Result<SpecFile, Error> {
    if args.command.is_empty() {
        return Err(Error::BadInput(
            "nothing to submit; give a spec file, --rad FILE, or a command after `--` (e.g. carma submit --gpus 1 -- python train.py)".into(),
        ));
    }
    let mut command = Vec::with_capacity(args.command.len());
    for arg in &args.command {
        let text = arg.to_str().ok_or_else(|| {
            Error::BadInput(format!(
                "command argument {} is not valid UTF-8; carma stores commands as UTF-8",
                arg.to_string_lossy()
            ))
        })?;
        command.push(text.to_string());
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
        gpus: args.gpus,
        memory: args.mem.clone(),
        model_summary,
        batch_size: args.batch_size,
        max_retries: args.max_retries,
        time_limit: args.time_limit.clone(),
        ..SpecFile::default()
    })
}
