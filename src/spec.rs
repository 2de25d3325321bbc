//! Task specs: the TOML a user submits, its validation, and the record the journal keeps.
//!
//! One format serves three readers. `carma submit` parses the user's file (or flags) and
//! writes the *canonical* form of the same format into the spool; `carma tick` parses that
//! spool file again with the same code, because the spool is writable by others and may have
//! been tampered with; and the journal stores the validated [`TaskSpec`]. The command is an
//! argv array and is never handed to a shell.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod rad;

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

/// The validated task spec, as stored in the journal (format version 1).
///
/// Paths are UTF-8 strings because the journal and the JSON output must show them
/// faithfully; a non-UTF-8 path is refused at submit time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// Human name, shown by `carma queue`.
    pub name: String,
    /// The program and its arguments; `command[0]` is looked up on `PATH`.
    pub command: Vec<String>,
    /// Absolute working directory of the job.
    pub workdir: String,
    /// Extra environment variables, sorted by name.
    pub env: Vec<(String, String)>,
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
    /// Dataset name, informational (from `.rad` files).
    pub dataset: Option<String>,
    /// Policy hint, informational (from `.rad` files: "exclusive" or "collocation").
    pub policy_hint: Option<String>,
    /// Reference memory figures carried over from the original system's `.rad` files.
    pub reference: ReferenceMib,
}

/// The four memory figures a `.rad` file may carry, in MiB.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReferenceMib {
    pub oracle: Option<u64>,
    pub horus: Option<u64>,
    pub faketensor: Option<u64>,
    pub gpumemnet: Option<u64>,
}

/// What validation needs to know about the machine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    /// GPUs on this machine, when known (from the last tick's inventory).
    pub machine_gpus: Option<u32>,
}

/// The on-disk TOML form, before validation. Unknown keys are refused so a typo such as
/// `gpu = 2` is an error rather than a silently ignored line.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpecFile {
    pub name: Option<String>,
    pub command: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub gpus: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_summary: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<i64>,
    pub max_retries: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_hint: Option<String>,
    #[serde(default, skip_serializing_if = "ReferenceFile::is_empty")]
    pub reference: ReferenceFile,
}

/// `[reference]` table of a spec file.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle_mib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub horus_mib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faketensor_mib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpumemnet_mib: Option<u64>,
}

impl ReferenceFile {
    fn is_empty(&self) -> bool {
        self.oracle_mib.is_none()
            && self.horus_mib.is_none()
            && self.faketensor_mib.is_none()
            && self.gpumemnet_mib.is_none()
    }
}

/// Parses TOML text into the raw form; `origin` names the file in errors.
pub fn parse_toml(origin: &str, text: &str) -> Result<SpecFile, String> {
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

fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
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
            None => path_to_string(base, "workdir").map_err(fail)?,
        };
        let env = validate_env(&self.env).map_err(fail)?;
        let gpus = validate_gpus(self.gpus.unwrap_or(1), limits).map_err(fail)?;
        let memory_mib = self.memory.as_deref().map(parse_memory_mib).transpose().map_err(fail)?;
        let model_summary = self
            .model_summary
            .as_deref()
            .map(|p| resolve_path(base, Path::new(p), "model_summary"))
            .transpose()
            .map_err(fail)?;
        let batch_size = self.batch_size.map(validate_batch_size).transpose().map_err(fail)?;
        let max_retries = validate_retries(self.max_retries).map_err(fail)?;
        let time_limit_ms = self.time_limit.as_deref().map(parse_time_limit_ms).transpose().map_err(fail)?;
        Ok(TaskSpec {
            name,
            command,
            workdir,
            env,
            gpus,
            memory_mib,
            model_summary,
            batch_size,
            max_retries,
            time_limit_ms,
            dataset: self.dataset.clone(),
            policy_hint: self.policy_hint.clone(),
            reference: ReferenceMib {
                oracle: self.reference.oracle_mib,
                horus: self.reference.horus_mib,
                faketensor: self.reference.faketensor_mib,
                gpumemnet: self.reference.gpumemnet_mib,
            },
        })
    }
}

impl TaskSpec {
    /// The canonical spool form: a spec file that validates back to exactly `self`.
    pub fn to_spec_file(&self) -> SpecFile {
        SpecFile {
            name: Some(self.name.clone()),
            command: Some(self.command.clone()),
            workdir: Some(self.workdir.clone()),
            env: self.env.iter().cloned().collect(),
            gpus: Some(i64::from(self.gpus)),
            memory: self.memory_mib.map(|m| format!("{m}MiB")),
            model_summary: self.model_summary.clone(),
            batch_size: self.batch_size.map(i64::from),
            max_retries: Some(i64::from(self.max_retries)),
            time_limit: self.time_limit_ms.map(|ms| format!("{ms}ms")),
            dataset: self.dataset.clone(),
            policy_hint: self.policy_hint.clone(),
            reference: ReferenceFile {
                oracle_mib: self.reference.oracle,
                horus_mib: self.reference.horus,
                faketensor_mib: self.reference.faketensor,
                gpumemnet_mib: self.reference.gpumemnet,
            },
        }
    }

    /// Renders the canonical TOML written into the spool.
    pub fn to_toml(&self) -> String {
        // Serialising plain strings, integers, arrays and tables cannot fail.
        toml::to_string(&self.to_spec_file()).unwrap_or_else(|e| unreachable!("spec TOML: {e}"))
    }
}

fn validate_name(name: &str) -> Result<(), String> {
    let ok_chars = name.chars().all(|c| c.is_ascii_alphanumeric() || "._-+@".contains(c));
    if name.is_empty() || name.len() > 128 || !ok_chars {
        return Err(format!("name {name:?} is invalid; use 1-128 characters from A-Z a-z 0-9 . _ - + @"));
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

fn validate_env(env: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, String> {
    for (key, value) in env {
        let key_ok = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !key_ok {
            return Err(format!("env name {key:?} is invalid; use letters, digits and _ (not first)"));
        }
        if key.starts_with("CARMA_") || key == "CUDA_VISIBLE_DEVICES" {
            return Err(format!("env {key} is set by carma itself; remove it from the spec"));
        }
        if value.contains('\0') {
            return Err(format!("env {key} contains a NUL byte; remove it"));
        }
    }
    Ok(env.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn validate_gpus(gpus: i64, limits: Limits) -> Result<u32, String> {
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

/// Parses a memory size such as `12GiB`, `500 MiB`, `1.5GB` or `8192` (bare numbers are
/// MiB) into MiB, rounding up. Decimal units (KB, MB, GB, TB) are powers of 1000.
pub fn parse_memory_mib(text: &str) -> Result<u64, String> {
    let hint = "use a number with a unit, e.g. 12GiB or 500MiB";
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && number.len() <= 20)
        .ok_or_else(|| format!("memory {text:?} is not a size; {hint}"))?;
    let bytes_per_unit: f64 = match unit.trim() {
        "" | "MiB" | "M" | "Mi" => 1024.0 * 1024.0,
        "B" => 1.0,
        "KiB" | "K" | "Ki" => 1024.0,
        "GiB" | "G" | "Gi" => 1024.0 * 1024.0 * 1024.0,
        "TiB" | "T" | "Ti" => 1024f64.powi(4),
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => {
            return Err(format!("memory {text:?} has an unknown unit {:?}; {hint}", unit.trim()));
        }
    };
    let mib = (value * bytes_per_unit / (1024.0 * 1024.0)).ceil();
    if mib < 1.0 {
        return Err(format!("memory {text:?} is zero; {hint}"));
    }
    if mib > MEMORY_MIB_MAX as f64 {
        return Err(format!(
            "memory {text:?} is larger than any GPU (at most {} GiB); {hint}",
            MEMORY_MIB_MAX / 1024
        ));
    }
    Ok(mib as u64)
}

/// Parses a time limit in humantime form (`90s`, `2h 30m`). A bare number is refused,
/// as humantime does, because its unit would be a guess.
pub fn parse_time_limit_ms(text: &str) -> Result<u64, String> {
    let duration = humantime::parse_duration(text.trim())
        .map_err(|e| format!("time_limit {text:?} is not a duration ({e}); use e.g. 90s, 45m or 2h"))?;
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if ms < 1000 {
        return Err(format!("time_limit {text:?} is under one second; use e.g. 90s, 45m or 2h"));
    }
    Ok(ms)
}

fn resolve_path(base: &Path, path: &Path, field: &str) -> Result<String, String> {
    let joined: PathBuf = if path.is_absolute() { path.to_path_buf() } else { base.join(path) };
    path_to_string(&joined, field)
}

/// Converts a path to UTF-8, the only form the journal can store faithfully.
pub fn path_to_string(path: &Path, field: &str) -> Result<String, String> {
    path.to_str().map(str::to_string).ok_or_else(|| {
        format!("{field} {} is not valid UTF-8; use a path with UTF-8 characters only", path.display())
    })
}

#[cfg(test)]
mod tests;
