//! The `carma:` job comment: how a Slurm job tells carma its memory, and how carma finds a job
//! again after it requeued it.
//!
//! A job opts in with `--comment carma:KEY=VALUE,...`; each key at most once, nothing else:
//!
//! | key | value | written by |
//! |---|---|---|
//! | `mem` | memory per GPU, e.g. `12GiB` (the units of `spec::parse_memory_mib`) | the user |
//! | `summary` | absolute path of a model summary: letters, digits, `.` `_` `-` `/` only | the user |
//! | `bs` | batch size, 1 to 1000000 | the user |
//! | `need` | MiB the shard count was computed from (estimate upper bound, or `mem`) | `carma sbatch`, `job_submit.lua` |
//! | `retries` | out-of-memory requeues allowed, 0 to 100 (default 3) | the user |
//! | `submit` | the job's first submit time, Unix ms (Slurm resets SubmitTime on requeue) | the Epilog when it requeues |
//!
//! The grammar is strict, so a typo fails at submission (in `job_submit.lua`, which applies
//! the same rules) instead of being ignored, and the summary path's character set is what
//! lets `job_submit.lua` hand it to `carma slurm shards` through `io.popen` without any
//! shell metacharacter reaching the shell.

use std::fmt::Write;

use crate::spec::{MEMORY_MIB_MAX, RETRIES_MAX, parse_memory_mib};

/// What a carma comment starts with.
pub const PREFIX: &str = "carma:";
/// Longest comment carma reads or writes, in bytes.
pub const COMMENT_BYTES_MAX: usize = 4096;
/// Longest model summary path accepted in a comment, in bytes.
pub const SUMMARY_PATH_BYTES_MAX: usize = 1024;
/// Largest batch size accepted (as in task specs).
const BATCH_SIZE_MAX: u32 = 1_000_000;

/// A parsed `carma:` comment; absent keys are `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CarmaComment {
    /// Declared memory per GPU, MiB (`mem`).
    pub mem_mib: Option<u64>,
    /// Model summary path (`summary`).
    pub summary: Option<String>,
    /// Batch size for the estimate (`bs`).
    pub batch_size: Option<u32>,
    /// The figure the shard count was computed from, MiB (`need`).
    pub need_mib: Option<u64>,
    /// Out-of-memory requeues allowed (`retries`).
    pub retries: Option<u32>,
    /// First submit time, Unix ms (`submit`).
    pub submit_ms: Option<u64>,
}

impl CarmaComment {
    /// Parses a job comment: `Ok(None)` when it is not a carma comment at all, an error
    /// naming the bad part and the fix when it is one but breaks the grammar.
    pub fn parse(text: &str) -> Result<Option<CarmaComment>, String> {
        let Some(body) = text.trim().strip_prefix(PREFIX) else { return Ok(None) };
        if text.len() > COMMENT_BYTES_MAX {
            return Err(format!("comment is {} bytes; at most {COMMENT_BYTES_MAX} are allowed", text.len()));
        }
        let mut comment = CarmaComment::default();
        for item in body.split(',') {
            let Some((key, value)) = item.split_once('=').filter(|(k, v)| !k.is_empty() && !v.is_empty())
            else {
                return Err(format!("{item:?} is not KEY=VALUE; write e.g. carma:mem=12GiB"));
            };
            comment.set(key, value)?;
        }
        Ok(Some(comment))
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let duplicate = || format!("key {key} appears twice; give it once");
        match key {
            "mem" => replace(&mut self.mem_mib, parse_memory_mib(value)?).ok_or_else(duplicate),
            "summary" => replace(&mut self.summary, safe_path(value)?).ok_or_else(duplicate),
            "bs" => replace(&mut self.batch_size, number(key, value, 1, u64::from(BATCH_SIZE_MAX))? as u32)
                .ok_or_else(duplicate),
            "need" => {
                replace(&mut self.need_mib, number(key, value, 1, MEMORY_MIB_MAX)?).ok_or_else(duplicate)
            }
            "retries" => replace(&mut self.retries, number(key, value, 0, u64::from(RETRIES_MAX))? as u32)
                .ok_or_else(duplicate),
            "submit" => replace(&mut self.submit_ms, number(key, value, 1, u64::MAX)?).ok_or_else(duplicate),
            _ => Err(format!("unknown key {key:?}; use mem, summary, bs, need, retries or submit")),
        }
    }

    /// The canonical text: keys in the table's order, memory in MiB.
    pub fn render(&self) -> String {
        let mut out = String::from(PREFIX);
        let mut put = |key: &str, value: String| {
            if out.len() > PREFIX.len() {
                out.push(',');
            }
            let _ = write!(out, "{key}={value}");
        };
        if let Some(mib) = self.mem_mib {
            put("mem", format!("{mib}MiB"));
        }
        if let Some(path) = &self.summary {
            put("summary", path.clone());
        }
        if let Some(bs) = self.batch_size {
            put("bs", bs.to_string());
        }
        if let Some(mib) = self.need_mib {
            put("need", mib.to_string());
        }
        if let Some(retries) = self.retries {
            put("retries", retries.to_string());
        }
        if let Some(ms) = self.submit_ms {
            put("submit", ms.to_string());
        }
        out
    }
}

/// Stores `value` unless the slot is taken; `None` means it was (a duplicate key).
fn replace<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

fn number(key: &str, value: &str, min: u64, max: u64) -> Result<u64, String> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| (min..=max).contains(n) && value.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| format!("{key}={value:?} is not a whole number from {min} to {max}"))
}

/// Accepts an absolute path made of letters, digits, `.`, `_`, `-` and `/` only: the set
/// `job_submit.lua` may pass to a shell. Anything else is refused with that rule.
pub fn safe_path(path: &str) -> Result<String, String> {
    let charset = path.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
    if !path.starts_with('/') || !charset || path.len() > SUMMARY_PATH_BYTES_MAX {
        return Err(format!(
            "summary path {path:?} must be absolute, at most {SUMMARY_PATH_BYTES_MAX} bytes, and use only letters, digits, '.', '_', '-' and '/'"
        ));
    }
    Ok(path.to_string())
}

#[cfg(test)]
mod tests {
    //! Goal: the grammar accepts what the module table says and nothing else, and renders
    //! back to text that parses to the same value.
    use super::*;

    #[test]
    fn parses_every_key_and_renders_canonically() {
        let text =
            "carma:mem=12GiB,summary=/data/m-1/s_2.json,bs=32,need=13312,retries=2,submit=1700000000000";
        let comment = CarmaComment::parse(text).unwrap().unwrap();
        assert_eq!(comment.mem_mib, Some(12288));
        assert_eq!(comment.summary.as_deref(), Some("/data/m-1/s_2.json"));
        assert_eq!((comment.batch_size, comment.need_mib, comment.retries), (Some(32), Some(13312), Some(2)));
        assert_eq!(comment.submit_ms, Some(1_700_000_000_000));
        let rendered = comment.render();
        assert_eq!(
            rendered,
            "carma:mem=12288MiB,summary=/data/m-1/s_2.json,bs=32,need=13312,retries=2,submit=1700000000000"
        );
        assert_eq!(CarmaComment::parse(&rendered).unwrap().unwrap(), comment);
    }

    #[test]
    fn other_comments_are_not_carma_comments() {
        assert_eq!(CarmaComment::parse("my experiment 3"), Ok(None));
        assert_eq!(CarmaComment::parse(""), Ok(None));
    }

    #[test]
    fn bad_comments_say_what_is_wrong() {
        let err = |text: &str| CarmaComment::parse(text).unwrap_err();
        assert_eq!(err("carma:mem=12GiB,mem=1GiB"), "key mem appears twice; give it once");
        assert_eq!(err("carma:gpu=1"), "unknown key \"gpu\"; use mem, summary, bs, need, retries or submit");
        assert_eq!(err("carma:mem"), "\"mem\" is not KEY=VALUE; write e.g. carma:mem=12GiB");
        assert_eq!(err("carma:"), "\"\" is not KEY=VALUE; write e.g. carma:mem=12GiB");
        assert_eq!(err("carma:bs=0"), "bs=\"0\" is not a whole number from 1 to 1000000");
        assert_eq!(err("carma:retries=+1"), "retries=\"+1\" is not a whole number from 0 to 100");
        assert!(err("carma:mem=12 parsecs").contains("unknown unit"), "{}", err("carma:mem=12 parsecs"));
    }

    #[test]
    fn summary_paths_carry_no_shell_syntax() {
        for bad in ["rel/path.json", "/a b.json", "/a;rm -rf ~", "/a$(id)", "/a'b", "/a\"b", "/a`b`", "/a\nb"]
        {
            let text = format!("carma:summary={bad},bs=1");
            assert!(CarmaComment::parse(&text).unwrap_err().contains("must be absolute"), "{bad:?}");
        }
        assert!(CarmaComment::parse("carma:summary=/ok/Path_1.2-x.json,bs=1").is_ok());
    }
}
