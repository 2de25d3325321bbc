//! Where a login node finds the node journals (edge: environment and the system config).
//!
//! Precedence: `--journal PATH` (repeatable) > `CARMA_JOURNALS=PATH` > `[slurm] journals` in
//! the system config (`/etc/carma/carma.toml`, or `$CARMA_SYSTEM_CONFIG`), which an admin
//! writes once for every user of a login node:
//!
//! ```toml
//! [slurm]
//! journals = ["/srv/carma"]            # a directory of the nodes' state directories
//! # journals = ["/srv/carma/gpu*", "/archive/n7.redb"]   # or globs, state directories, files
//! ```
//!
//! Each entry is an absolute path; `*` and `?` may appear in its last component, and match
//! names in that directory (sorted). A relative entry, a wildcard higher up, an entry that
//! matches nothing, or a file that does not parse is one line naming the file, exit 78
//! (`Error::BadConfig`): a config error is the admin's to fix, not the user's.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The environment variable naming the node journals' directory.
pub const JOURNALS_ENV: &str = "CARMA_JOURNALS";

/// The journal paths asked for: `flag`, else `CARMA_JOURNALS`, else the system config's
/// `[slurm] journals` when `config` is true (no explicit `--home`); empty when none says.
pub fn resolve(flag: &[PathBuf], config: bool) -> Result<Vec<PathBuf>> {
    if !flag.is_empty() {
        return Ok(flag.to_vec());
    }
    if let Some(env) = std::env::var_os(JOURNALS_ENV).filter(|v| !v.is_empty()) {
        return Ok(vec![PathBuf::from(env)]);
    }
    if !config {
        return Ok(Vec::new());
    }
    let entries = crate::home::system_slurm()?.journals;
    let origin = crate::home::system_config_path();
    let mut paths = Vec::new();
    for entry in &entries {
        paths.extend(expand(entry, &origin)?);
    }
    Ok(paths)
}

/// One `[slurm] journals` entry as paths (see the module docs).
pub fn expand(entry: &str, origin: &Path) -> Result<Vec<PathBuf>> {
    let bad = |what: String| {
        Error::BadConfig(format!("{}: [slurm] journals entry {entry:?} {what}", origin.display()))
    };
    let path = Path::new(entry);
    if !path.is_absolute() {
        return Err(bad("is not an absolute path; write it from / (e.g. \"/srv/carma\")".into()));
    }
    let (Some(parent), Some(last)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(bad("names no directory or file; write e.g. \"/srv/carma\"".into()));
    };
    if parent.to_str().is_some_and(has_wildcard) {
        return Err(bad("has a wildcard before its last component; only the last may have * or ?".into()));
    }
    if !has_wildcard(last) {
        if !path.exists() {
            return Err(bad("does not exist; mount the node journals there or fix the entry".into()));
        }
        return Ok(vec![path.to_path_buf()]);
    }
    let listing = std::fs::read_dir(parent).map_err(|e| {
        bad(format!("cannot be listed ({e}); mount the node journals there or fix the entry"))
    })?;
    let mut found: Vec<PathBuf> = listing
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|name| matches(last.as_bytes(), name.as_bytes())))
        .map(|e| e.path())
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(bad("matches nothing; mount the node journals there or fix the entry".into()));
    }
    Ok(found)
}

fn has_wildcard(text: &str) -> bool {
    text.contains(['*', '?'])
}

/// Whether `name` matches `pattern` (`*` any run, `?` one byte, the rest literally). Hidden
/// names match only a pattern that starts with a dot, as in the shell.
pub fn matches(pattern: &[u8], name: &[u8]) -> bool {
    if name.first() == Some(&b'.') && pattern.first() != Some(&b'.') {
        return false;
    }
    glob(pattern, name)
}

fn glob(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.split_first(), name.split_first()) {
        (None, _) => name.is_empty(),
        (Some((b'*', rest)), _) => (0..=name.len()).any(|skip| glob(rest, &name[skip..])),
        (Some((b'?', rest)), Some((_, tail))) => glob(rest, tail),
        (Some((p, rest)), Some((n, tail))) if p == n => glob(rest, tail),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    //! Goal: entries expand as an admin expects, and every bad one says what to write.
    use super::*;

    #[test]
    fn wildcards_match_as_in_the_shell() {
        for (pattern, name, expected) in [
            ("gpu*", "gpu01", true),
            ("gpu*", "gpu", true),
            ("gpu*", "cpu01", false),
            ("n?", "n1", true),
            ("n?", "n12", false),
            ("*.redb", "n1.redb", true),
            ("*", ".hidden", false),
            (".*", ".hidden", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
        ] {
            assert_eq!(matches(pattern.as_bytes(), name.as_bytes()), expected, "{pattern} {name}");
        }
    }

    #[test]
    fn entries_expand_or_say_what_to_fix() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["n1", "n2", "other"] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        let origin = Path::new("/etc/carma/carma.toml");
        let root = dir.path().display().to_string();
        let glob = format!("{root}/n*");
        assert_eq!(expand(&glob, origin).unwrap(), [dir.path().join("n1"), dir.path().join("n2")]);
        assert_eq!(expand(&root, origin).unwrap(), [dir.path()]);
        let message = |entry: &str| expand(entry, origin).unwrap_err().to_string();
        assert_eq!(
            message("srv/carma"),
            "/etc/carma/carma.toml: [slurm] journals entry \"srv/carma\" is not an absolute path; write it from / (e.g. \"/srv/carma\")"
        );
        assert_eq!(
            message(&format!("{root}/x*")),
            format!(
                "/etc/carma/carma.toml: [slurm] journals entry \"{root}/x*\" matches nothing; mount the node journals there or fix the entry"
            )
        );
        assert_eq!(
            message(&format!("{root}/*/carma.redb")),
            format!(
                "/etc/carma/carma.toml: [slurm] journals entry \"{root}/*/carma.redb\" has a wildcard before its last component; only the last may have * or ?"
            )
        );
        assert_eq!(
            message(&format!("{root}/gone")),
            format!(
                "/etc/carma/carma.toml: [slurm] journals entry \"{root}/gone\" does not exist; mount the node journals there or fix the entry"
            )
        );
        assert_eq!(expand("srv/carma", origin).unwrap_err().exit_code(), crate::error::EXIT_CONFIG);
    }
}
