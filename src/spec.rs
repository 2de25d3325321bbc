//! Task specs: the TOML a user submits, its validation, and the record the journal keeps.
//!
//! One format serves three readers. `carma submit` parses the user's file (or flags) and
//! writes the *canonical* form of the same format into the spool (`spool_file`); `carma tick`
//! parses that spool file again with the same code, because the spool is writable by others
//! and may have been tampered with; and the journal stores the validated [`TaskSpec`]. The
//! command is an argv array and is never handed to a shell.
//!
//! **Secrets stay out of the journal.** A [`Submission`] is the public [`TaskSpec`] (which the
//! journal keeps and every user may read: the names of the job's environment variables, never
//! their values) plus its private parts: the environment values and the model summary as read
//! at submit time. The spool file carries both; the tick journals the spec and moves the file
//! into the root-only `private/` folder, from where the job's environment is read at launch.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod carma_only;
pub mod env;
pub mod export;
pub mod extras;
pub mod mail;
pub mod rad;
mod reference;
pub mod sbatch;
pub mod script;
pub mod spool_form;
pub mod time_limit;
pub mod timing;
pub mod units;
pub mod workflow;

pub use reference::{ReferenceFile, ReferenceMib};

use env::validate_env;
pub use env::{is_env_name, is_reserved_env};
pub use units::{parse_memory_mib, parse_time_limit_ms};

pub use workflow::{ArrayMember, Dependency, DependencyKind};

/// Largest memory figure accepted for a task (1 TiB): no GPU has more.
pub const MEMORY_MIB_MAX: u64 = 1024 * 1024;
/// Largest GPU count one task may ask for.
pub const GPUS_PER_TASK_MAX: u32 = 64;
/// Largest retry budget.
pub const RETRIES_MAX: u32 = 100;
/// Largest spec file accepted, in bytes; specs are small and the journal stores them whole.
pub const SPEC_BYTES_MAX: u64 = 64 * 1024;
/// Retries when the spec does not say.
pub const RETRIES_DEFAULT: u32 = 3;
/// Longest time limit accepted (one year): longer is a typo, and it must fit in milliseconds.
pub const TIME_LIMIT_MS_MAX: u64 = 365 * 24 * 3600 * 1000;
/// Most bytes of environment (names and values) a task may carry.
pub const ENV_BYTES_MAX: usize = 256 * 1024;

/// The validated task spec, as the journal keeps it (written as `journal::wire::SpecV2`).
/// Everyone may read it, so it holds no secret: the environment's names, not its values.
///
/// Paths are UTF-8 strings because the journal and the JSON output must show them
/// faithfully; a non-UTF-8 path is refused at submit time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// Human name, shown by `carma queue`.
    pub name: String,
    /// The program and its arguments, as the user typed them.
    pub command: Vec<String>,
    /// `command[0]` resolved to an absolute path with the submitter's `PATH` at submit time
    /// (not canonicalised: a virtual environment's `python` is a symlink that must stay one);
    /// `None` for tasks submitted by carma 0.1, which are resolved at launch.
    pub program: Option<String>,
    /// Absolute working directory of the job.
    pub workdir: String,
    /// Names of the environment variables the job gets from its submission, sorted; the values
    /// are private (see the module docs).
    pub env_names: Vec<String>,
    /// How the environment was captured: `ALL`, `NONE` or the names given to `--export`;
    /// `None` for tasks submitted by carma 0.1 (only the spec's `[env]` table).
    pub export: Option<String>,
    /// Where the job's standard output goes, a template (`%j` task id, `%a` attempt, `%x` name,
    /// `%u` user, `%%`), relative to `workdir`; `None`: `runs/ID/N/stdout.log`.
    pub output: Option<String>,
    /// The same for standard error; `None`: `runs/ID/N/stderr.log`.
    pub error: Option<String>,
    /// MIG profile the task asks for (e.g. `1g.10gb`): only MIG instances of that profile take
    /// it. `None`: any GPU without MIG, or a MIG instance that fits. Only with `gpus = 1`.
    pub mig_profile: Option<String>,
    /// GPUs the task needs, all on this machine.
    pub gpus: u32,
    /// Memory the user declared per GPU, in MiB (the "oracle" figure).
    pub memory_mib: Option<u64>,
    /// Absolute path to a model summary, for the estimators.
    pub model_summary: Option<String>,
    /// Training batch size, for the estimators.
    pub batch_size: Option<u32>,
    /// How many times an out-of-memory or lost attempt may be retried.
    pub max_retries: u32,
    /// Wall-clock limit per attempt, in milliseconds.
    pub time_limit_ms: Option<u64>,
    /// Where `time_limit_ms` came from ([`time_limit::effective`]), set at ingest; `None` for
    /// a task journaled before carma 0.6 said, and for a spec not yet ingested.
    #[serde(default)]
    pub time_limit_source: Option<time_limit::TimeLimitSource>,
    /// Dataset name, informational (from `.rad` files).
    pub dataset: Option<String>,
    /// Policy hint, informational (from `.rad` files: "exclusive" or "collocation").
    pub policy_hint: Option<String>,
    /// Reference memory figures carried over from the original system's `.rad` files.
    pub reference: ReferenceMib,
    /// Tasks that must end, as each dependency's kind says, before this one may start
    /// (`--after`); sorted, no task twice.
    pub dependencies: Vec<Dependency>,
    /// Stay pending, instead of being cancelled, when a dependency can no longer be satisfied.
    pub keep_on_dependency_failure: bool,
    /// The task's place in an array or sweep (`--array`, `--param`).
    pub array: Option<ArrayMember>,
    /// Order in the main queue: higher first (`--priority`, default 0).
    pub priority: i32,
    /// Subtracted from the priority (`--nice`, default 0); only root may make it negative.
    pub nice: i32,
    /// Submitted held (`--hold`): it waits until released.
    pub hold: bool,
    /// A program and its arguments run as the submitter when the task ends (`--notify`);
    /// `command[0]` resolved at submit like `program`. Empty: none.
    pub notify: Vec<String>,
    /// Mailed through the configured sendmail when the task ends (`--mail-user`).
    pub mail_user: Option<String>,
    /// Which mails `mail_user` gets (`--mail-type`); none given: one at the end.
    #[serde(default)]
    pub mail_types: mail::MailTypes,
    /// The job script the task runs (`carma submit train.sh`), as an absolute path at submit;
    /// its text was copied then and is private like the environment.
    pub script: Option<String>,
    /// Signal sent before the time limit (`--signal`), canonical `[B:]SIG@SECONDS`.
    pub signal: Option<String>,
    /// Not started before this time, ms since the epoch (`--begin`).
    pub begin_ms: Option<u64>,
    /// Host memory for the whole job, MiB (Slurm's `--mem`, or `--mem-per-cpu` × CPUs).
    pub host_mem_mib: Option<u64>,
    /// CPUs for the whole job (Slurm's `-c` × `--ntasks`).
    pub cpus: Option<u32>,
    /// May the scheduler stop and queue it again (`--requeue` true, `--no-requeue` false)?
    /// `None`: the administrator's `[sched.preemption] requeue-default`.
    pub requeue: Option<bool>,
    /// The reservation it runs in (`--reservation NAME`).
    pub reservation: Option<String>,
    /// How an interactive session is attached: [`INTERACTIVE_MODES`]; `None` for a batch task.
    /// Only carma sets it ([`carma_only`]): the spool's `[submit]` part, never a spec key.
    pub interactive: Option<String>,
}

/// The values of [`TaskSpec::interactive`]: a shell (`carma alloc`), one command (`carma
/// run`), or an allocation held for `carma run --attach` (`carma alloc --no-shell`).
pub const INTERACTIVE_MODES: [&str; 3] = ["alloc", "run", "hold"];

/// A spec with its private parts: what `carma submit` hands the tick through the spool.
#[derive(Clone, Debug, PartialEq)]
pub struct Submission {
    /// The public spec (the journal's).
    pub spec: TaskSpec,
    /// The job's environment values by name; the keys are `spec.env_names`.
    pub env: BTreeMap<String, String>,
    /// The model summary's text as the submitter could read it at submit time, so the tick
    /// never opens a file a user controls.
    pub summary_text: Option<String>,
    /// The job script's text as copied at submit (`spec.script` names where it came from).
    pub script_text: Option<String>,
}

impl Submission {
    /// A submission with no environment and no summary text (simulations, tests).
    pub fn bare(spec: TaskSpec) -> Submission {
        Submission { spec, env: BTreeMap::new(), summary_text: None, script_text: None }
    }
}

/// What validation needs to know about the machine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    /// GPUs on this machine, when known (from the last tick's inventory).
    pub machine_gpus: Option<u32>,
    /// Memory of the largest GPU on this machine, MiB, when known.
    pub largest_gpu_mib: Option<u64>,
    /// The longest time limit this queue accepts (`[limits] time-limit-max`), when set.
    pub time_limit_max_ms: Option<u64>,
    /// The most retries this queue accepts (`[limits] retries-max`), where it is checked
    /// (submit and update; the tick holds queued tasks to it instead).
    pub retries_max: Option<u32>,
    /// This machine's CPUs and host memory (MiB), each where checked (submit, where this queue
    /// enforces that limit: more would be "enforced" and never hold), as Slurm refuses what
    /// its node cannot meet.
    pub machine_host: (Option<u32>, Option<u64>),
}

/// The on-disk TOML form, before validation. Unknown keys are refused so a typo such as
/// `gpu = 2` is an error rather than a silently ignored line.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpecFile {
    /// The task's name ([`TaskSpec::name`]); required.
    pub name: Option<String>,
    /// The program and its arguments ([`TaskSpec::command`]); required.
    pub command: Option<Vec<String>>,
    /// The working directory; a relative one resolves against the spec file's folder (or the
    /// submitter's working directory for flags), which is also the default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// The `[env]` table: variables set for the job, on top of `export`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `ALL` (the default: the submitter's environment), `NONE`, or a list of names to take
    /// from it; the `[env]` table is added on top.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export: Option<ExportFile>,
    /// Standard output path template (see [`TaskSpec::output`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Standard error path template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The MIG profile to run on ([`TaskSpec::mig_profile`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<String>,
    /// GPUs the task needs, 1 when absent ([`TaskSpec::gpus`]).
    pub gpus: Option<i64>,
    /// Declared memory per GPU, a size such as `12GiB` or `500MB` (a bare number is MiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Dependencies, `KIND:ID` or a bare full id (afterok); see [`workflow::parse_after`]
    /// for what `carma submit` accepts and resolves into this form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// See [`TaskSpec::keep_on_dependency_failure`].
    #[serde(default, skip_serializing_if = "is_false")]
    pub keep_on_dependency_failure: bool,
    /// See [`TaskSpec::priority`]; within ±[`workflow::PRIORITY_ABS_MAX`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// See [`TaskSpec::nice`]; within ±[`workflow::PRIORITY_ABS_MAX`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nice: Option<i64>,
    /// Submit held ([`TaskSpec::hold`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub hold: bool,
    /// The program run when the task ends ([`TaskSpec::notify`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<String>,
    /// Where the task's mails go ([`TaskSpec::mail_user`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mail_user: Option<String>,
    /// sbatch's `--mail-type` list ([`mail::MailTypes::parse`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mail_type: Option<String>,
    /// A model summary file for the estimators; relative paths resolve like `workdir`'s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_summary: Option<String>,
    /// Training batch size for the estimators.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<i64>,
    /// Retries after an out-of-memory or lost attempt; [`RETRIES_DEFAULT`] when absent.
    pub max_retries: Option<i64>,
    /// Wall-clock limit per attempt, a humantime duration (`90m`, `2h 30m`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<String>,
    /// See [`TaskSpec::dataset`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// See [`TaskSpec::policy_hint`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_hint: Option<String>,
    /// The `[reference]` table: the `.rad` files' memory figures.
    #[serde(default, skip_serializing_if = "ReferenceFile::is_empty")]
    pub reference: ReferenceFile,
    /// `[B:]SIG@SECONDS` before the time limit ([`timing::parse_signal`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The earliest start ([`timing::parse_begin`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub begin: Option<String>,
    /// Host memory for the whole job, a size (`16G`, `512M`) ([`TaskSpec::host_mem_mib`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_mem: Option<String>,
    /// CPUs for the whole job ([`TaskSpec::cpus`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<i64>,
    /// See [`TaskSpec::requeue`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue: Option<bool>,
    /// See [`TaskSpec::reservation`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
}

/// `export = "ALL" | "NONE" | ["NAME", ...]` in a spec file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ExportFile {
    /// `"ALL"` or `"NONE"` (checked at validation).
    Mode(String),
    /// The names of the submitter's variables to pass.
    Names(Vec<String>),
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Parses TOML text into the raw form; `origin` names the file in errors. A key only carma
/// sets is refused by name ([`carma_only`]).
pub fn parse_toml(origin: &str, text: &str) -> Result<SpecFile, String> {
    if let Ok(table) = text.parse::<toml::Table>() {
        carma_only::refuse_in_spec(&table).map_err(|e| format!("{origin}: {e}"))?;
    }
    toml::from_str::<SpecFile>(text).map_err(|e| {
        let at = e
            .span()
            .map(|span| {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                format!(":{line}")
            })
            .unwrap_or_default();
        let message = e.message().trim().replace('\n', " ");
        format!("{origin}{at}: {message}; fix the spec (format: schema/task-spec.schema.json)")
    })
}

/// Reads a spec file from disk, refusing non-UTF-8 and oversized files with one-line errors.
pub fn read_spec_file(path: &Path) -> Result<SpecFile, String> {
    let origin = path.display().to_string();
    let bytes = read_bounded(path).map_err(|e| format!("{origin}: cannot read spec: {e}"))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("{origin}: spec is not valid UTF-8; save it as UTF-8 TOML"))?;
    parse_toml(&origin, &text)
}

/// Without blocking on what is not a regular file: a FIFO named as the spec would otherwise
/// hang `carma submit` at the open (`fsutil::open_regular`: `O_NONBLOCK`, checked on `fstat`).
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = crate::fsutil::open_regular(path, crate::fsutil::Symlinks::Follow)?;
    let mut bytes = Vec::new();
    file.take(SPEC_BYTES_MAX + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > SPEC_BYTES_MAX {
        return Err(std::io::Error::other(format!("larger than {} KiB", SPEC_BYTES_MAX / 1024)));
    }
    Ok(bytes)
}

impl SpecFile {
    /// Validates the raw spec. Relative `workdir` and `model_summary` resolve against `base`
    /// (the spec file's directory, or the submitter's working directory for flag specs).
    // Long on purpose: one check per field, in the order the README documents them; each is a
    // line or two, none depends on another, and a split would only move the list elsewhere.
    pub fn validate(&self, origin: &str, base: &Path, limits: Limits) -> Result<TaskSpec, String> {
        let fail = |what: String| format!("{origin}: {what}");
        let name = self.name.clone().ok_or_else(|| fail("missing `name`; add name = \"my-job\"".into()))?;
        validate_name(&name).map_err(fail)?;
        let command = self
            .command
            .clone()
            .ok_or_else(|| fail("missing `command`; add command = [\"python\", \"train.py\"]".into()))?;
        validate_command(&command).map_err(fail)?;
        let workdir = match &self.workdir {
            Some(dir) => resolve_path(base, Path::new(dir), "workdir").map_err(fail)?,
            None => path_to_string(&lexical(base), "workdir").map_err(fail)?,
        };
        let env_names = validate_env(&self.env).map_err(fail)?;
        let export = self.export.as_ref().map(export::check_label).transpose().map_err(fail)?;
        let output =
            self.output.as_deref().map(|t| validate_output(t, "output")).transpose().map_err(fail)?;
        let error = self.error.as_deref().map(|t| validate_output(t, "error")).transpose().map_err(fail)?;
        let gpus = validate_gpus(self.gpus.unwrap_or(1), limits).map_err(fail)?;
        let mig_profile =
            self.mig_profile.as_deref().map(|p| validate_mig_profile(p, gpus)).transpose().map_err(fail)?;
        let memory_mib = self.memory.as_deref().map(parse_memory_mib).transpose().map_err(fail)?;
        if let (Some(mib), Some(largest)) = (memory_mib, limits.largest_gpu_mib.filter(|&l| l > 0))
            && mib > largest
        {
            return Err(fail(format!(
                "memory {:.1} GiB per GPU is more than the largest GPU here has ({:.1} GiB); ask for at most {:.1} GiB",
                mib as f64 / 1024.0,
                largest as f64 / 1024.0,
                largest as f64 / 1024.0
            )));
        }
        let model_summary = self
            .model_summary
            .as_deref()
            .map(|p| resolve_path(base, Path::new(p), "model_summary"))
            .transpose()
            .map_err(fail)?;
        let batch_size = self.batch_size.map(validate_batch_size).transpose().map_err(fail)?;
        let max_retries = validate_retries(self.max_retries).map_err(fail)?;
        if let Some(bound) = limits.retries_max.filter(|&bound| max_retries > bound) {
            return Err(fail(format!(
                "max_retries = {max_retries} is more than this queue allows ([limits] retries-max is {bound}); ask for at most {bound}"
            )));
        }
        let time_limit_ms = time_limit::validate(self.time_limit.as_deref(), limits).map_err(fail)?;
        let signal = self.signal.as_deref().map(timing::parse_signal).transpose().map_err(fail)?;
        signal.as_deref().map_or(Ok(()), |s| timing::check_signal_fits(s, time_limit_ms)).map_err(fail)?;
        let now_ms = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
        let begin_ms =
            self.begin.as_deref().map(|b| timing::parse_begin(b, now_ms)).transpose().map_err(fail)?;
        let dependencies = validate_dependencies(&self.after).map_err(fail)?;
        let priority = workflow::validate_priority("priority", self.priority.unwrap_or(0)).map_err(fail)?;
        let nice = workflow::validate_priority("nice", self.nice.unwrap_or(0)).map_err(fail)?;
        if !self.notify.is_empty() {
            workflow::validate_notify(&self.notify).map_err(fail)?;
        }
        if let Some(address) = &self.mail_user {
            workflow::validate_mail_user(address).map_err(fail)?;
        }
        let mail_types = self.mail_type.as_deref().map(mail::MailTypes::parse).transpose();
        let mail_types = mail_types.map_err(|e| fail(format!("mail_type: {e}")))?;
        let extras = extras::validate(self).map_err(fail)?;
        extras::fits_machine(&extras, limits.machine_host).map_err(fail)?;
        Ok(TaskSpec {
            name,
            command,
            program: None,
            workdir,
            env_names,
            export,
            output,
            error,
            mig_profile,
            gpus,
            memory_mib,
            model_summary,
            batch_size,
            max_retries,
            time_limit_ms,
            // The queue's rule decides it at ingest (`tick::admit`), with the queue's limits.
            time_limit_source: None,
            dataset: self.dataset.clone(),
            policy_hint: self.policy_hint.clone(),
            reference: ReferenceMib {
                oracle: self.reference.oracle_mib,
                horus: self.reference.horus_mib,
                faketensor: self.reference.faketensor_mib,
                gpumemnet: self.reference.gpumemnet_mib,
            },
            dependencies,
            keep_on_dependency_failure: self.keep_on_dependency_failure,
            array: None,
            priority,
            nice,
            hold: self.hold,
            notify: self.notify.clone(),
            mail_user: self.mail_user.clone(),
            mail_types: mail_types.unwrap_or_default(),
            script: None,
            signal,
            begin_ms,
            host_mem_mib: extras.host_mem_mib,
            cpus: extras.cpus,
            requeue: extras.requeue,
            reservation: extras.reservation,
            // Only carma sets it (`carma_only`), after validation.
            interactive: None,
        })
    }
}

/// Canonical dependency entries, sorted, each task once (its strongest-listed kind first).
fn validate_dependencies(after: &[String]) -> Result<Vec<Dependency>, String> {
    if after.len() > workflow::DEPENDENCIES_MAX {
        return Err(format!(
            "{} dependencies; at most {} are allowed",
            after.len(),
            workflow::DEPENDENCIES_MAX
        ));
    }
    let mut dependencies =
        after.iter().map(|a| Dependency::parse_canonical(a)).collect::<Result<Vec<_>, _>>()?;
    dependencies.sort();
    dependencies.dedup();
    for pair in dependencies.windows(2) {
        if pair[0].task == pair[1].task {
            return Err(format!(
                "task {} is named as {} and as {}; give each dependency one type",
                pair[0].task,
                pair[0].kind.name(),
                pair[1].kind.name()
            ));
        }
    }
    Ok(dependencies)
}

/// A duration in milliseconds as humantime writes it (`2h 30m`).
pub fn render_ms(ms: u64) -> String {
    humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
}

impl SpecFile {
    /// [`SpecFile::validate`] plus the private parts: the `[env]` values.
    pub fn validate_submission(
        &self,
        origin: &str,
        base: &Path,
        limits: Limits,
    ) -> Result<Submission, String> {
        let spec = self.validate(origin, base, limits)?;
        Ok(Submission { spec, env: self.env.clone(), summary_text: None, script_text: None })
    }
}

impl ExportFile {
    /// How the export is shown: `ALL`, `NONE` or the names joined by commas.
    pub fn label(&self) -> String {
        match self {
            ExportFile::Mode(mode) => mode.clone(),
            ExportFile::Names(names) => names.join(","),
        }
    }
}

impl Submission {
    /// The canonical spec file of this submission: it validates back to exactly `self.spec`
    /// with `self.env` (the spool adds the parts a spec file cannot hold, see `spool_form`).
    pub fn to_spec_file(&self) -> SpecFile {
        let spec = &self.spec;
        SpecFile {
            name: Some(spec.name.clone()),
            command: Some(spec.command.clone()),
            workdir: Some(spec.workdir.clone()),
            env: self.env.clone(),
            export: spec.export.clone().map(ExportFile::Mode),
            output: spec.output.clone(),
            error: spec.error.clone(),
            mig_profile: spec.mig_profile.clone(),
            gpus: Some(i64::from(spec.gpus)),
            memory: spec.memory_mib.map(|m| format!("{m}MiB")),
            model_summary: spec.model_summary.clone(),
            batch_size: spec.batch_size.map(i64::from),
            max_retries: Some(i64::from(spec.max_retries)),
            time_limit: spec.time_limit_ms.map(|ms| format!("{ms}ms")),
            dataset: spec.dataset.clone(),
            policy_hint: spec.policy_hint.clone(),
            reference: ReferenceFile {
                oracle_mib: spec.reference.oracle,
                horus_mib: spec.reference.horus,
                faketensor_mib: spec.reference.faketensor,
                gpumemnet_mib: spec.reference.gpumemnet,
            },
            after: spec.dependencies.iter().map(Dependency::label).collect(),
            keep_on_dependency_failure: spec.keep_on_dependency_failure,
            priority: (spec.priority != 0).then_some(i64::from(spec.priority)),
            nice: (spec.nice != 0).then_some(i64::from(spec.nice)),
            hold: spec.hold,
            notify: spec.notify.clone(),
            mail_user: spec.mail_user.clone(),
            mail_type: spec.mail_types.is_given().then(|| spec.mail_types.render()),
            signal: spec.signal.clone(),
            begin: spec.begin_ms.map(timing::render_begin),
            host_mem: spec.host_mem_mib.map(|mib| format!("{mib}M")),
            cpus: spec.cpus.map(i64::from),
            requeue: spec.requeue,
            reservation: spec.reservation.clone(),
        }
    }
}

/// A task name: 1-128 characters, none a control character or `/` (sbatch takes spaces and
/// `*`; a `/` would make `%x` in an output path a folder); shown escaped (`text`).
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok_chars = name.chars().all(|c| !c.is_control() && c != '/');
    if name.trim().is_empty() || name.chars().count() > 128 || !ok_chars {
        return Err(format!("name {name:?} is invalid; use 1-128 characters, no control character or /"));
    }
    Ok(())
}

fn validate_command(command: &[String]) -> Result<(), String> {
    if command.is_empty() || command[0].is_empty() {
        return Err(
            "`command` is empty; give the program and its arguments, e.g. [\"python\", \"train.py\"]".into(),
        );
    }
    if command.len() > 4096 {
        return Err(format!("`command` has {} arguments; at most 4096 are allowed", command.len()));
    }
    if command.iter().any(|a| a.contains('\0')) {
        return Err("`command` contains a NUL byte; remove it".into());
    }
    Ok(())
}

/// Longest MIG profile name accepted; NVML's are like `1c.3g.40gb+me`.
const MIG_PROFILE_CHARS_MAX: usize = 32;

/// A MIG profile name as NVML and `nvidia-smi mig -lgip` print it (`1g.10gb`, `3g.40gb`,
/// `1g.10gb+me`), for a one-GPU task: CUDA shows a process one MIG device.
fn validate_mig_profile(profile: &str, gpus: u32) -> Result<String, String> {
    let ok_chars = profile.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".+".contains(c));
    if profile.is_empty() || profile.len() > MIG_PROFILE_CHARS_MAX || !ok_chars || !profile.contains('.') {
        return Err(format!(
            "mig_profile {profile:?} is invalid; use a MIG profile name such as \"1g.10gb\" (see nvidia-smi mig -lgip)"
        ));
    }
    if gpus != 1 {
        return Err(format!(
            "mig_profile = {profile:?} with gpus = {gpus}: a task gets one MIG instance (CUDA shows a process one MIG device); set gpus = 1"
        ));
    }
    Ok(profile.to_owned())
}

/// An output path template: non-empty, no NUL, and only the placeholders carma expands.
fn validate_output(template: &str, field: &str) -> Result<String, String> {
    let hint = "use a path with %j (task id), %a (attempt), %x (name), %u (user) or %%";
    if template.is_empty() || template.contains('\0') {
        return Err(format!("{field} path {template:?} is empty or has a NUL byte; {hint}"));
    }
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some('j' | 'a' | 'x' | 'u' | '%') => {}
                other => {
                    let found = other.map_or("a trailing %".to_string(), |o| format!("%{o}"));
                    return Err(format!("{field} path {template:?} has {found}; {hint}"));
                }
            }
        }
    }
    Ok(template.to_string())
}

pub(crate) fn validate_gpus(gpus: i64, limits: Limits) -> Result<u32, String> {
    if gpus < 1 {
        return Err(format!("gpus = {gpus}: a task needs at least 1 GPU"));
    }
    if let Some(machine) = limits.machine_gpus.filter(|&m| gpus > i64::from(m)) {
        return Err(format!(
            "gpus = {gpus}: this machine has only {machine} GPU(s); ask for at most {machine}"
        ));
    }
    if gpus > i64::from(GPUS_PER_TASK_MAX) {
        return Err(format!("gpus = {gpus}: at most {GPUS_PER_TASK_MAX} GPUs per task"));
    }
    Ok(gpus as u32)
}

fn validate_batch_size(batch: i64) -> Result<u32, String> {
    if !(1..=1_000_000).contains(&batch) {
        return Err(format!("batch_size = {batch}: use a value from 1 to 1000000"));
    }
    Ok(batch as u32)
}

fn validate_retries(retries: Option<i64>) -> Result<u32, String> {
    let retries = retries.unwrap_or(i64::from(RETRIES_DEFAULT));
    if !(0..=i64::from(RETRIES_MAX)).contains(&retries) {
        return Err(format!("max_retries = {retries}: use a value from 0 to {RETRIES_MAX}"));
    }
    Ok(retries as u32)
}

fn resolve_path(base: &Path, path: &Path, field: &str) -> Result<String, String> {
    let joined: PathBuf = if path.is_absolute() { path.to_path_buf() } else { base.join(path) };
    path_to_string(&lexical(&joined), field)
}

/// `path` without its `.` components and doubled slashes (`/home/u/ex/./.` is `/home/u/ex`).
/// `..` stays: it means something else beside a symbolic link, and nothing is resolved here.
fn lexical(path: &Path) -> PathBuf {
    let mut clean: PathBuf = path.components().filter(|c| *c != std::path::Component::CurDir).collect();
    if clean.as_os_str().is_empty() {
        clean.push(".");
    }
    clean
}

/// Converts a path to UTF-8, the only form the journal can store faithfully.
pub fn path_to_string(path: &Path, field: &str) -> Result<String, String> {
    path.to_str().map(str::to_string).ok_or_else(|| {
        format!("{field} {} is not valid UTF-8; use a path with UTF-8 characters only", path.display())
    })
}

#[cfg(test)]
mod tests;
