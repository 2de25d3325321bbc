//! `config.toml`: operator settings, with every key optional and documented.
//!
//! `carma init` writes [`DEFAULT_CONFIG_TOML`], which shows each default as a comment, so an
//! operator edits a documented file instead of guessing keys. Unknown keys are refused.

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::home::Home;
use crate::sched::SchedConfig;

mod keys;
mod retention;

pub use keys::{documented_keys, keys_new_since};
pub use retention::{RUNS_KEEP_MS_DEFAULT, RUNS_KEEP_MS_MIN, RUNS_PER_USER_MAX_DEFAULT, RetentionConfig};

/// The file `carma init` writes.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("config/default.toml");

/// Parsed configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[tick]`: where readings come from and how jobs share a GPU.
    pub tick: TickConfig,
    /// `[sched]`: placement policy, margins, caps and recovery.
    pub sched: SchedConfig,
    /// `[limits]`: the queue's bounds per user.
    pub limits: QueueLimits,
    /// `[notify]`: how end notices and mails are sent.
    pub notify: NotifyConfig,
    /// Who administers the queue (`access`).
    pub access: crate::access::Policy,
    /// What each tick exports for monitoring (`metrics`).
    pub metrics: MetricsConfig,
    /// `[enforce]`: GPU memory enforcement.
    pub enforce: EnforceConfig,
    /// `[retention]`: how long ended tasks' run folders are kept.
    pub retention: RetentionConfig,
}

/// Default of `[enforce] margin-mib`: a CUDA context and allocator slack above a declared
/// figure.
pub const ENFORCE_MARGIN_MIB_DEFAULT: u64 = 1024;

/// `[enforce]`: stopping the job over its declared GPU memory on a shared GPU.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct EnforceConfig {
    /// Whether the tick stops jobs over their share (`enabled`).
    pub enabled: bool,
    /// MiB allowed above a job's declared memory per GPU (`margin-mib`).
    pub margin_mib: u64,
    /// The MPS control program told each user's limit under `sharing = "mps"`; empty: none.
    pub mps_control: String,
    /// How often each job's supervisor reads its GPUs' memory itself, ms; 0: never
    /// (`supervisor-sample-ms`, [`crate::exec::gpu_watch`]).
    pub supervisor_sample_ms: u64,
}

impl Default for EnforceConfig {
    fn default() -> Self {
        EnforceConfig {
            enabled: true,
            margin_mib: ENFORCE_MARGIN_MIB_DEFAULT,
            mps_control: "nvidia-cuda-mps-control".into(),
            supervisor_sample_ms: crate::exec::gpu_watch::INTERVAL_MS_DEFAULT,
        }
    }
}

/// `[metrics]`: files each tick writes for Prometheus and dcgm-exporter; off by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct MetricsConfig {
    /// The Prometheus text file; empty: none.
    pub textfile: String,
    /// dcgm-exporter's job-mapping directory; empty: none.
    pub job_mapping_dir: String,
}

/// Default of `[limits] log-bytes-max`: 1 GiB per log, large enough for any log a person
/// reads, small against a state directory's disk.
pub const LOG_BYTES_MAX_DEFAULT: u64 = 1 << 30;
/// Default of `[limits] free-space-floor`: room for many journal commits (a few KiB each) and
/// for the view's files, whatever the disk's size.
pub const FREE_SPACE_FLOOR_BYTES_DEFAULT: u64 = 512 << 20;

/// Default of `[limits] spool-entries-max`: ten users at their own cap; listing that many
/// names at submit takes tens of milliseconds.
pub const SPOOL_ENTRIES_MAX_DEFAULT: usize = 100_000;

/// Default of `[limits] state-bytes-per-user-max`: eight logs at the default log-bytes-max.
pub const STATE_BYTES_PER_USER_MAX_DEFAULT: u64 = 8 << 30;
/// Default of `[limits] free-space-reserve`: a quarter of the default floor.
pub const FREE_SPACE_RESERVE_BYTES_DEFAULT: u64 = 128 << 20;
/// Default of `[limits] requeues-max`: Slurm's `MaxBatchRequeue` default.
pub const REQUEUES_MAX_DEFAULT: u32 = 5;
/// Default of `[limits] retries-max`: what `carma simulate` gives every task, well above the
/// default `max_retries` (3).
pub const RETRIES_MAX_DEFAULT: u32 = 10;

/// `[limits]`: what submissions may ask for, and what the queue's own disk must keep.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct QueueLimits {
    /// Given to tasks without a time limit, in ms; `None`: unlimited.
    #[serde(rename = "time-limit-default", deserialize_with = "optional_duration_ms")]
    pub time_limit_default_ms: Option<u64>,
    /// The longest time limit a task may ask for, in ms; `None`: any.
    #[serde(rename = "time-limit-max", deserialize_with = "optional_duration_ms")]
    pub time_limit_max_ms: Option<u64>,
    /// Highest priority an ordinary user may set.
    pub user_priority_max: i32,
    /// Cap of each run-folder log of an attempt, in bytes ([`crate::exec::logcap`]);
    /// `None`: uncapped.
    #[serde(rename = "log-bytes-max", deserialize_with = "optional_log_bytes")]
    pub log_bytes_max: Option<u64>,
    /// Free bytes the state directory's filesystem must keep for new attempts to start; 0:
    /// no floor.
    #[serde(rename = "free-space-floor", deserialize_with = "size_bytes")]
    pub free_space_floor_bytes: u64,
    /// Entries all users together may have waiting in the spool; `carma submit` refuses past
    /// it (the queue-wide cap beside the per-user one, `intake::SPOOL_ENTRIES_PER_USER_MAX`).
    pub spool_entries_max: usize,
    /// Bytes of one user's files in the state directory past which, below the free-space
    /// floor, that user's tasks wait and the others' do not (`tick::userbytes`).
    #[serde(rename = "state-bytes-per-user-max", deserialize_with = "size_bytes")]
    pub state_bytes_per_user_max: u64,
    /// Free bytes below which every task waits, whoever's bytes filled the disk; used as at
    /// most `free_space_floor_bytes`.
    #[serde(rename = "free-space-reserve", deserialize_with = "size_bytes")]
    pub free_space_reserve_bytes: u64,
    /// Requeues a job may ask for (exit 99) before its task fails instead (Slurm's
    /// `MaxBatchRequeue`).
    pub requeues_max: u32,
    /// The most retries a task may ask for (`max_retries`); submit refuses more and the tick
    /// holds older tasks to it.
    pub retries_max: u32,
}

impl Default for QueueLimits {
    fn default() -> Self {
        QueueLimits {
            time_limit_default_ms: None,
            time_limit_max_ms: None,
            user_priority_max: 0,
            log_bytes_max: Some(LOG_BYTES_MAX_DEFAULT),
            free_space_floor_bytes: FREE_SPACE_FLOOR_BYTES_DEFAULT,
            spool_entries_max: SPOOL_ENTRIES_MAX_DEFAULT,
            state_bytes_per_user_max: STATE_BYTES_PER_USER_MAX_DEFAULT,
            free_space_reserve_bytes: FREE_SPACE_RESERVE_BYTES_DEFAULT,
            requeues_max: REQUEUES_MAX_DEFAULT,
            retries_max: RETRIES_MAX_DEFAULT,
        }
    }
}

/// `[notify]`: how task ends are announced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct NotifyConfig {
    /// Path of sendmail; empty: no mail.
    pub sendmail: String,
    /// Run for tasks that name no notify command; empty: none.
    pub default_command: Vec<String>,
    /// Mail the submitter when a task that names no address ends.
    pub mail_submitter: bool,
}

/// `[tick]` settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TickConfig {
    /// Where GPU readings come from: `nvml`, `none`, or `fake:FILE` (`gpus`).
    pub gpus: String,
    /// Window over which SM activity is averaged for the SM-activity cap, ms (`window`).
    #[serde(deserialize_with = "humantime_ms")]
    pub window: u64,
    /// Which memory figure placement uses (`memory`).
    pub memory: MemorySource,
    /// How collocated jobs share a GPU (`sharing`).
    pub sharing: Sharing,
    /// The MPS memory limit each job gets under `sharing = "mps"` (`mps-cap`).
    #[serde(rename = "mps-cap")]
    pub mps_cap: MpsCap,
}

impl Default for TickConfig {
    fn default() -> Self {
        TickConfig {
            gpus: "nvml".into(),
            window: crate::sched::WINDOW_MS_DEFAULT,
            memory: MemorySource::Declared,
            sharing: Sharing::Streams,
            mps_cap: MpsCap::Requirement,
        }
    }
}

/// Which memory figure placement uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemorySource {
    /// The task's declared memory (the paper's oracle); tasks without one get the larger margin.
    Declared,
    /// No memory knowledge: every task is placed with the no-figure margin.
    None,
    /// The declared figure (or estimate) until an earlier run of the same workload (same
    /// submitter, name and command) has shown its peak: then that peak, observed on a server
    /// that ran it, replaces the figure, whether the figure was above it or below.
    Learned,
}

/// The MPS pinned-memory limit a job gets (only under `sharing = "mps"`, only with a figure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MpsCap {
    /// Requirement + `margin-with-figure-mib`: a job that overruns its figure fails alone.
    Requirement,
    /// The GPU's free memory at launch minus what the other jobs on it have reserved and not
    /// yet allocated (their requirement + margin), never below requirement + margin: a job
    /// still cannot take its co-runners' memory, but an under-estimate on a GPU with room to
    /// spare (an otherwise free GPU, say) is no longer a crash.
    Room,
}

/// How collocated jobs share a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharing {
    /// Plain CUDA contexts side by side (`streams`).
    Streams,
    /// Under the MPS daemon, each job capped with `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` (`mps`).
    Mps,
}

fn humantime_ms<'de, D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<u64, D::Error> {
    let text = String::deserialize(deserializer)?;
    let duration = humantime::parse_duration(&text).map_err(serde::de::Error::custom)?;
    Ok(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

/// `"none"` or a humantime duration of at least a second, as milliseconds.
fn optional_duration_ms<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<u64>, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.trim() == "none" {
        return Ok(None);
    }
    crate::spec::parse_time_limit_ms(&text).map(Some).map_err(serde::de::Error::custom)
}

/// `"none"` or a size of at least [`crate::exec::logcap::LOG_BYTES_MAX_MIN`], in bytes.
fn optional_log_bytes<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<u64>, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.trim() == "none" {
        return Ok(None);
    }
    let bytes = parse_size_bytes(&text).map_err(serde::de::Error::custom)?;
    let min = crate::exec::logcap::LOG_BYTES_MAX_MIN;
    if bytes < min {
        let shown = crate::text::bytes(min);
        return Err(serde::de::Error::custom(format!(
            "log-bytes-max {text:?} is below {shown}, too small for a log's head, note and tail; use at least {shown} or \"none\""
        )));
    }
    Ok(Some(bytes))
}

fn size_bytes<'de, D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<u64, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_size_bytes(&text).map_err(serde::de::Error::custom)
}

/// Parses a whole number of bytes with an optional binary unit: `512MiB`, `64 KiB`, `1GiB`,
/// `4096`. Decimal sizes are refused: a byte count has no fraction.
pub fn parse_size_bytes(text: &str) -> std::result::Result<u64, String> {
    let hint = "use a whole number with B, KiB, MiB, GiB or TiB, e.g. \"512MiB\"";
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        other => return Err(format!("size {text:?} has an unknown unit {other:?}; {hint}")),
    };
    let value: u64 = number.parse().map_err(|_| format!("size {text:?} is not a size; {hint}"))?;
    value.checked_mul(1 << shift).ok_or_else(|| format!("size {text:?} is too large; {hint}"))
}

impl Config {
    /// Checks what serde cannot: absolute paths for the notify programs.
    fn check(self) -> std::result::Result<Config, String> {
        let notify = &self.notify;
        if !notify.sendmail.is_empty() && !notify.sendmail.starts_with('/') {
            return Err(format!("[notify] sendmail {:?} is not an absolute path", notify.sendmail));
        }
        if let Some(program) = notify.default_command.first()
            && !program.starts_with('/')
        {
            return Err(format!("[notify] default-command program {program:?} is not an absolute path"));
        }
        for (key, path) in
            [("textfile", &self.metrics.textfile), ("job-mapping-dir", &self.metrics.job_mapping_dir)]
        {
            if !path.is_empty() && !path.starts_with('/') {
                return Err(format!("[metrics] {key} {path:?} is not an absolute path"));
            }
        }
        if !notify.default_command.is_empty() {
            crate::spec::workflow::validate_notify(&notify.default_command)
                .map_err(|e| format!("[notify] default-command: {e}"))?;
        }
        Ok(self)
    }

    /// Checks the values serde accepts but carma cannot use: `window = "0s"`, and the
    /// `[sched]` ones (see [`SchedConfig::check_values`]). The first bad key is the error.
    fn check_values(&self) -> std::result::Result<(), String> {
        // Shorter than a second, the window holds no sample of a tick a few seconds apart: SM
        // activity would always read unknown, and unknown passes the SM cap.
        if self.tick.window < 1000 {
            let shown = humantime::format_duration(std::time::Duration::from_millis(self.tick.window));
            let expected = "a duration of at least 1s";
            return Err(crate::sched::bad_value(
                "tick",
                "window",
                &format!("\"{shown}\""),
                expected,
                "\"90s\"",
            ));
        }
        // Faster than this, the readings would cost the machine a core per job.
        let sample_ms = self.enforce.supervisor_sample_ms;
        if sample_ms != 0 && sample_ms < crate::exec::gpu_watch::INTERVAL_MS_MIN {
            return Err(crate::sched::bad_value(
                "enforce",
                "supervisor-sample-ms",
                &sample_ms.to_string(),
                &format!("0 (off) or at least {} ms", crate::exec::gpu_watch::INTERVAL_MS_MIN),
                "500",
            ));
        }
        // Zero would refuse every submission.
        if self.limits.spool_entries_max == 0 {
            return Err(crate::sched::bad_value(
                "limits",
                "spool-entries-max",
                "0",
                "a count of at least 1",
                "100000",
            ));
        }
        self.sched.check_values()
    }

    /// Parses config text; errors start with `origin` (the file's path) and are one line.
    pub fn parse(origin: &str, text: &str) -> Result<Config> {
        let bad = |at: String, message: &str| {
            Error::BadInput(format!(
                "{origin}{at}: {}; fix the file (defaults are documented in it after `carma init`)",
                message.trim().replace('\n', " ")
            ))
        };
        // serde's message names the type, not the key (`integer `-1`, expected u32`): the line
        // number says which key it is about.
        let config: Config = toml::from_str(text).map_err(|e| {
            let line =
                |span: std::ops::Range<usize>| text[..span.start.min(text.len())].matches('\n').count() + 1;
            bad(e.span().map(|span| format!(":{}", line(span))).unwrap_or_default(), e.message())
        })?;
        // A bad value's message already says what to write instead.
        config.check_values().map_err(|e| Error::BadInput(format!("{origin}: {e}")))?;
        config.check().map_err(|e| bad(String::new(), &e))
    }

    /// Reads `config.toml`; a missing file means all defaults. The access policy's owner is
    /// the state directory's owner and its admin group is resolved here, once.
    pub fn load(home: &Home) -> Result<Config> {
        let mut config = Config::load_file(home)?;
        config.access.owner_uid =
            std::fs::metadata(home.root()).map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
        let group = config.access.admin_group.clone();
        if !group.is_empty() {
            config.access.admin_gid = Some(crate::access::users::gid_of(&group).ok_or_else(|| {
                Error::BadInput(format!(
                    "{}: [access] admin-group {group:?} is not a group on this machine; create it or set admin-group = \"\"",
                    home.config_path().display()
                ))
            })?);
        }
        Ok(config)
    }

    fn load_file(home: &Home) -> Result<Config> {
        let path = home.config_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
        };
        Config::parse(&path.display().to_string(), &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_text_parses_to_defaults() {
        let parsed = Config::parse("config.toml", DEFAULT_CONFIG_TOML).expect("default config parses");
        assert_eq!(parsed.tick.gpus, "nvml");
        assert_eq!(parsed.sched, SchedConfig::default());
    }

    #[test]
    fn every_documented_key_parses_when_uncommented() {
        // Uncommenting each `# key = value` line must give a valid config equal to the
        // defaults: the documentation cannot drift from the code.
        let uncommented: String = DEFAULT_CONFIG_TOML
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.contains(" = ") => rest,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let parsed = Config::parse("config.toml", &uncommented).expect("uncommented config parses");
        assert_eq!(parsed.sched, SchedConfig::default());
        assert_eq!(parsed.limits, QueueLimits::default());
        assert_eq!(parsed.notify, NotifyConfig::default());
        assert_eq!(parsed.retention, RetentionConfig::default());
        assert!(uncommented.contains("[sched.fair-share]\n") && uncommented.contains("half-life-ms = "));
        assert_eq!(parsed.tick.window, crate::sched::WINDOW_MS_DEFAULT);
        assert_eq!(parsed.tick.memory, MemorySource::Declared);
        assert_eq!(parsed.limits.log_bytes_max, Some(LOG_BYTES_MAX_DEFAULT));
        assert_eq!(parsed.limits.free_space_floor_bytes, FREE_SPACE_FLOOR_BYTES_DEFAULT);
    }

    #[test]
    fn sizes_parse_and_bad_ones_say_what_to_write() {
        assert_eq!(parse_size_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size_bytes(" 64 KiB "), Ok(64 << 10));
        assert_eq!(parse_size_bytes("4096"), Ok(4096));
        assert_eq!(parse_size_bytes("0"), Ok(0));
        assert!(parse_size_bytes("1.5GiB").expect_err("decimal").contains("unknown unit"));
        assert!(parse_size_bytes("GiB").expect_err("no number").contains("is not a size"));
        assert!(parse_size_bytes("99999999999TiB").expect_err("overflow").contains("too large"));
        let limits = |text: &str| toml::from_str::<Config>(text).map(|c| c.limits);
        let parsed = limits("[limits]\nlog-bytes-max = \"none\"\nfree-space-floor = \"0\"\n").expect("parse");
        assert_eq!((parsed.log_bytes_max, parsed.free_space_floor_bytes), (None, 0));
        let err = limits("[limits]\nlog-bytes-max = \"1KiB\"\n").expect_err("too small").to_string();
        assert!(err.contains("log-bytes-max \"1KiB\" is below 16 KiB"), "{err}");
    }

    /// The message `Config::load` gives for `config.toml` holding `line` in `[section]`.
    fn error_of(section: &str, line: &str) -> String {
        let text = format!("[{section}]\n{line}\n");
        Config::parse("config.toml", &text).expect_err(line).to_string()
    }

    fn accepts(section: &str, line: &str) -> bool {
        Config::parse("config.toml", &format!("[{section}]\n{line}\n")).is_ok()
    }

    /// Goal (issue 43): the deprecated `size-order-delay-ms` still reads alone, and together
    /// with the size order it is refused with one line naming the key and the fix; a bad
    /// `overtake-max` names the duration format. Method: the parsed files' errors, verbatim.
    #[test]
    fn the_deprecated_delay_is_refused_beside_the_size_order() {
        assert!(accepts("sched", "size-order-delay-ms = 5400000"));
        assert!(accepts("sched.order", "size = \"size\"\nhead-start = \"1h\"\novertake-max = \"3h\""));
        assert_eq!(
            error_of("sched", "size-order-delay-ms = 5400000\n[sched.order]\nsize = \"size\""),
            "config.toml: [sched] size-order-delay-ms = 5400000 is deprecated and cannot be combined with [sched.order] size = \"size\"; remove it"
        );
        let bad = error_of("sched.order", "overtake-max = \"3 fortnights\"");
        assert!(bad.contains("write e.g. \"60s\", \"10m\" or \"1h\""), "{bad}");
        assert!(!accepts("sched.order", "size = \"tail\""), "only fifo and size");
    }

    /// Goal: `sm-cap` takes a fraction in (0, 1] and nothing else, and the message quotes the
    /// value as the file spells it. Method: every kind of bad float TOML can hold.
    #[test]
    fn sm_cap_outside_0_to_1_is_refused_with_the_key_and_a_fix() {
        for (value, shown) in [
            ("nan", "nan"),
            ("-nan", "nan"),
            ("inf", "inf"),
            ("-inf", "-inf"),
            ("-1", "-1"),
            ("0", "0"),
            ("1.5", "1.5"),
            ("1e40", "inf"),
        ] {
            assert_eq!(
                error_of("sched", &format!("sm-cap = {value}")),
                format!(
                    "config.toml: [sched] sm-cap = {shown} is not a number above 0 and at most 1; write e.g. sm-cap = 0.80"
                )
            );
        }
        assert!(accepts("sched", "sm-cap = 1") && accepts("sched", "sm-cap = 0.05"));
    }

    /// Goal: the projected gate's cap may exceed 1 and 0 turns it off, but it must be a number.
    #[test]
    fn sm_projected_cap_and_sm_unknown_are_checked() {
        for value in ["nan", "inf", "-0.5"] {
            assert_eq!(
                error_of("sched", &format!("sm-projected-cap = {value}")),
                format!(
                    "config.toml: [sched] sm-projected-cap = {value} is not a finite number of at least 0 (0 is off); write e.g. sm-projected-cap = 1.8"
                )
            );
        }
        assert!(accepts("sched", "sm-projected-cap = 0.0") && accepts("sched", "sm-projected-cap = 2.5"));
        for value in ["nan", "-inf", "-0.1", "1.01"] {
            assert_eq!(
                error_of("sched", &format!("sm-unknown = {value}")),
                format!(
                    "config.toml: [sched] sm-unknown = {value} is not a number from 0 to 1; write e.g. sm-unknown = 0.5"
                )
            );
        }
        assert!(accepts("sched", "sm-unknown = 0") && accepts("sched", "sm-unknown = 1"));
    }

    /// Goal: a zero where zero would mean "never" is refused; zeros documented as "off" or
    /// "no cap" are kept.
    #[test]
    fn zero_limits_that_would_stop_scheduling_are_refused() {
        assert_eq!(
            error_of("sched", "placements-per-tick-max = 0"),
            "config.toml: [sched] placements-per-tick-max = 0 is not a count of at least 1; write e.g. placements-per-tick-max = 16"
        );
        assert_eq!(
            error_of("sched", "backfill-depth-max = 0"),
            "config.toml: [sched] backfill-depth-max = 0 is not a count of at least 1 (to turn backfill off, set backfill to false); write e.g. backfill-depth-max = 64"
        );
        assert_eq!(
            error_of("sched.recovery", "step-mib = 0"),
            "config.toml: [sched.recovery] step-mib = 0 is not a size of at least 1 MiB; write e.g. step-mib = 5120"
        );
        assert_eq!(
            error_of("tick", "window = \"0s\""),
            "config.toml: [tick] window = \"0s\" is not a duration of at least 1s; write e.g. window = \"90s\""
        );
        assert_eq!(
            error_of("tick", "window = \"500ms\""),
            "config.toml: [tick] window = \"500ms\" is not a duration of at least 1s; write e.g. window = \"90s\""
        );
        assert!(accepts("sched", "size-order-delay-ms = 0\nin-flight-grace-ms = 0\nidle-used-mib-max = 0"));
        assert!(
            accepts("sched.fair-share", "half-life-ms = 0") && accepts("sched.user-limits", "gpus-max = 0")
        );
        assert!(accepts("sched.recovery", "looser-steps-max = 0") && accepts("tick", "window = \"1s\""));
        assert_eq!(
            error_of("limits", "spool-entries-max = 0"),
            "config.toml: [limits] spool-entries-max = 0 is not a count of at least 1; write e.g. spool-entries-max = 100000"
        );
        assert!(accepts("limits", "spool-entries-max = 1"));
    }

    /// Goal: the negative count TOML allows is a type error serde already names, not a panic.
    #[test]
    fn negative_counts_are_refused_by_the_parser() {
        let error = error_of("sched", "placements-per-tick-max = -1");
        assert_eq!(
            error,
            "config.toml:2: invalid value: integer `-1`, expected u32; fix the file (defaults are documented in it after `carma init`)"
        );
    }

    /// Goal: `[sched.preemption]` reads the keys with durations as text, is off by
    /// default, and refuses a bad mode, a bad duration and a negative gap with the key and a fix.
    /// Fails on the code before preemption (no such table: unknown field).
    #[test]
    fn preemption_table_reads_durations_and_refuses_bad_values() {
        use crate::sched::PreemptionMode;
        assert_eq!(Config::parse("c", "").expect("empty").sched.preemption.mode, PreemptionMode::Off);
        let text = "[sched.preemption]\nmode = \"requeue\"\ngrace = \"90s\"\nmin-run = \"5m\"\nhead-wait = \"1h\"\nmax-per-task = 2\npriority-gap = 0\nrequeue-default = true\n";
        let preemption = Config::parse("c", text).expect("parses").sched.preemption;
        assert_eq!(preemption.mode, PreemptionMode::Requeue);
        assert_eq!(
            (preemption.grace_ms, preemption.min_run_ms, preemption.head_wait_ms),
            (90_000, 300_000, 3_600_000)
        );
        assert_eq!(
            (preemption.max_per_task, preemption.priority_gap, preemption.requeue_default),
            (2, 0, true)
        );
        assert!(accepts("sched.preemption", "mode = \"suspend\""));
        assert_eq!(
            error_of("sched.preemption", "mode = \"always\""),
            "config.toml:2: unknown variant `always`, expected one of `off`, `requeue`, `suspend`; fix the file (defaults are documented in it after `carma init`)"
        );
        assert_eq!(
            error_of("sched.preemption", "grace = \"soon\""),
            "config.toml:2: duration \"soon\": expected number at 0; write e.g. \"60s\", \"10m\" or \"1h\"; fix the file (defaults are documented in it after `carma init`)"
        );
        assert_eq!(
            error_of("sched.preemption", "priority-gap = -1"),
            "config.toml: [sched.preemption] priority-gap = -1 is not a priority difference of at least 0; write e.g. priority-gap = 1"
        );
    }
}
