//! `[retention]`: how long the run folders of ended tasks are kept (`tick::retention` applies
//! it each tick).

use serde::Deserialize;

/// Default of `[retention] runs-keep`: two weeks of logs to look back at.
pub const RUNS_KEEP_MS_DEFAULT: u64 = 14 * 24 * 3_600_000;
/// Default of `[retention] runs-per-user-max`: a few arrays' worth per user.
pub const RUNS_PER_USER_MAX_DEFAULT: u32 = 200;
/// The shortest `[retention] runs-keep`: `carma logs` right after an end must still work.
pub const RUNS_KEEP_MS_MIN: u64 = 3_600_000;

/// `[retention]`: the run folders (`runs/ID/`: logs, script copies, exit records) of ended
/// tasks, which the tick removes past these bounds (`tick::retention`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct RetentionConfig {
    /// How long after its end a task's run folder is kept, ms; `None` (`"none"`): forever.
    #[serde(rename = "runs-keep", deserialize_with = "optional_keep_ms")]
    pub runs_keep_ms: Option<u64>,
    /// Most run folders of ended tasks kept per submitter (the latest ended); 0: no bound.
    pub runs_per_user_max: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            runs_keep_ms: Some(RUNS_KEEP_MS_DEFAULT),
            runs_per_user_max: RUNS_PER_USER_MAX_DEFAULT,
        }
    }
}

/// `"none"` or a humantime duration of at least [`RUNS_KEEP_MS_MIN`], as milliseconds.
fn optional_keep_ms<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<u64>, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.trim() == "none" {
        return Ok(None);
    }
    let hint = "write e.g. \"14days\", \"12h\" or \"none\"";
    let keep = humantime::parse_duration(text.trim())
        .map_err(|e| serde::de::Error::custom(format!("runs-keep {text:?}: {e}; {hint}")))?;
    let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX);
    if keep_ms < RUNS_KEEP_MS_MIN {
        return Err(serde::de::Error::custom(format!(
            "runs-keep {text:?} is shorter than 1h, too soon for `carma logs` after an end; {hint}"
        )));
    }
    Ok(Some(keep_ms))
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    fn error_of(section: &str, line: &str) -> String {
        Config::parse("config.toml", &format!("[{section}]\n{line}\n")).expect_err(line).to_string()
    }

    /// Goal: `[retention]` reads a duration or "none" and a count, and refuses a keep under an
    /// hour with the key and a fix.
    #[test]
    fn retention_reads_its_keys_and_refuses_too_short_a_keep() {
        assert_eq!(Config::parse("c", "").unwrap().retention, RetentionConfig::default());
        let parsed =
            Config::parse("c", "[retention]\nruns-keep = \"none\"\nruns-per-user-max = 0\n").unwrap();
        assert_eq!(parsed.retention, RetentionConfig { runs_keep_ms: None, runs_per_user_max: 0 });
        let two_days = Config::parse("c", "[retention]\nruns-keep = \"2days\"\n").unwrap().retention;
        assert_eq!(two_days.runs_keep_ms, Some(2 * 24 * 3_600_000));
        assert_eq!(
            error_of("retention", "runs-keep = \"10m\""),
            "config.toml:2: runs-keep \"10m\" is shorter than 1h, too soon for `carma logs` after an end; write e.g. \"14days\", \"12h\" or \"none\"; fix the file (defaults are documented in it after `carma init`)"
        );
    }
}
