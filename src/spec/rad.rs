//! Import of the original system's `.rad` task files.
//!
//! A `.rad` file is positional: a comment, an environment activation line, the command, the
//! model summary file, the dataset, the batch size, a policy hint, the GPU count, and then up
//! to four memory figures in MiB (oracle, Horus, FakeTensor, GPUMemNet). Each line may carry
//! a `key:` prefix and a trailing `# comment`. The original ran the command through bash;
//! carma never does, so the activation line is mapped to argv (`conda activate ENV` becomes
//! `conda run -n ENV --no-capture-output ...`, `source DIR/bin/activate` becomes a `PATH`
//! entry) and shell syntax in the command is refused.

use std::collections::BTreeMap;
use std::path::Path;

use super::{ReferenceFile, SpecFile};

/// The positional fields after the comment line, in file order.
const FIELDS: [&str; 11] = [
    "env",
    "command",
    "model",
    "dataset",
    "batch_size",
    "policy",
    "gpus",
    "oracle",
    "horus",
    "faketensor",
    "gpumemnet",
];

/// Converts `.rad` text into a spec file; `name` is usually the file stem.
pub fn parse_rad(origin: &str, name: &str, text: &str) -> Result<SpecFile, String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty()).peekable();
    if lines.peek().is_some_and(|l| l.starts_with('#')) {
        lines.next();
    }
    let mut values: BTreeMap<&str, String> = BTreeMap::new();
    for (index, line) in lines.enumerate() {
        let field = *FIELDS.get(index).ok_or_else(|| {
            format!("{origin}: more than {} lines after the comment; remove the extra lines", FIELDS.len())
        })?;
        let value = strip_comment(line);
        let value = strip_key(origin, field, value)?;
        values.insert(field, value.to_string());
    }
    let command_line = values.get("command").ok_or_else(|| {
        format!("{origin}: no command line; a .rad file needs at least a comment, an env line and a command")
    })?;
    let mut argv = split_words(command_line).map_err(|e| format!("{origin}: command: {e}"))?;
    let mut env = BTreeMap::new();
    if let Some(activation) = values.get("env") {
        argv = apply_activation(origin, activation, argv, &mut env)?;
    }
    let number = |field: &str| -> Result<Option<i64>, String> {
        values
            .get(field)
            .filter(|v| !v.is_empty() && v.as_str() != "-")
            .map(|v| v.parse::<i64>().map_err(|_| format!("{origin}: {field} {v:?} is not a whole number")))
            .transpose()
    };
    let mib = |field: &str| -> Result<Option<u64>, String> {
        let value = number(field)?;
        value
            .map(|v| u64::try_from(v).map_err(|_| format!("{origin}: {field} {v} MiB is negative")))
            .transpose()
    };
    let oracle = mib("oracle")?;
    Ok(SpecFile {
        name: Some(name.to_string()),
        command: Some(argv),
        env,
        gpus: Some(number("gpus")?.unwrap_or(1)),
        memory: oracle.map(|m| format!("{m}MiB")),
        model_summary: values.get("model").filter(|v| !v.is_empty()).cloned(),
        batch_size: number("batch_size")?,
        dataset: values.get("dataset").filter(|v| !v.is_empty()).cloned(),
        policy_hint: values.get("policy").filter(|v| !v.is_empty()).cloned(),
        reference: ReferenceFile {
            oracle_mib: oracle,
            horus_mib: mib("horus")?,
            faketensor_mib: mib("faketensor")?,
            gpumemnet_mib: mib("gpumemnet")?,
        },
        ..SpecFile::default()
    })
}

/// Reads a `.rad` file; the task is named after the file stem.
pub fn read_rad_file(path: &Path) -> Result<SpecFile, String> {
    let origin = path.display().to_string();
    let bytes = crate::fsutil::read_regular(path, super::SPEC_BYTES_MAX)
        .map_err(|e| format!("{origin}: cannot read .rad file: {e}"))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("{origin}: .rad file is not UTF-8; save it as UTF-8"))?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("rad-task");
    let name: String =
        stem.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    parse_rad(&origin, &name, &text)
}

fn strip_comment(line: &str) -> &str {
    line.split_once(" #").map_or(line, |(before, _)| before).trim()
}

fn strip_key<'a>(origin: &str, field: &str, value: &'a str) -> Result<&'a str, String> {
    let Some((key, rest)) = value.split_once(':') else {
        return Ok(value);
    };
    let key = key.trim().to_ascii_lowercase().replace(['-', ' '], "_");
    let known = FIELDS.contains(&key.as_str()) || key == "batch" || key == "model_file";
    if !known {
        return Ok(value);
    }
    let same = key == field
        || (key == "batch" && field == "batch_size")
        || (key == "model_file" && field == "model");
    if !same {
        return Err(format!(
            "{origin}: expected the {field} line here, found {key}:; keep the .rad line order"
        ));
    }
    Ok(rest.trim())
}

fn apply_activation(
    origin: &str,
    activation: &str,
    argv: Vec<String>,
    env: &mut BTreeMap<String, String>,
) -> Result<Vec<String>, String> {
    let words = split_words(activation).map_err(|e| format!("{origin}: env line: {e}"))?;
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] | ["none"] | ["-"] => Ok(argv),
        ["conda", "activate", name] | ["source", "activate", name] => {
            let mut wrapped: Vec<String> =
                ["conda", "run", "-n", name, "--no-capture-output"].iter().map(|s| s.to_string()).collect();
            wrapped.extend(argv);
            Ok(wrapped)
        }
        ["source", script] | [".", script] if script.ends_with("/bin/activate") => {
            let venv = script.trim_end_matches("/bin/activate");
            env.insert("VIRTUAL_ENV".into(), venv.to_string());
            env.insert("PATH".into(), format!("{venv}/bin:/usr/local/bin:/usr/bin:/bin"));
            Ok(argv)
        }
        _ => Err(format!(
            "{origin}: env line {activation:?} is not supported; use `conda activate ENV`, `source VENV/bin/activate` or `none`"
        )),
    }
}

/// Splits a command line into words with single and double quotes, refusing shell syntax
/// (pipes, redirections, `;`, `&`, `$`, backquotes) because nothing is run through a shell.
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => current.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            (None, '|' | ';' | '&' | '$' | '`' | '<' | '>' | '\\') => {
                return Err(format!(
                    "shell syntax {c:?} is not supported (carma runs no shell); wrap the pipeline in a script"
                ));
            }
            (None, c) => {
                current.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err("unterminated quote".into());
    }
    if in_word {
        words.push(current);
    }
    Ok(words)
}
