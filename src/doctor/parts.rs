//! The state directory's parts: each is what `carma init` made it (kind, owner, mode), read
//! with `lstat`, so a link in its place is named, never followed.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use super::Finding;
use crate::home::Home;

/// What a part must be: (path relative to the state directory, a directory?, mode as a
/// root queue, mode as a personal one).
const PARTS: [(&str, bool, u32, u32); 8] = [
    ("carma.redb", false, 0o600, 0o600),
    ("carma.lock", false, 0o600, 0o600),
    ("config.toml", false, 0o644, 0o644),
    ("spool", true, 0o1777, 0o700),
    ("runs", true, 0o711, 0o700),
    ("private", true, 0o700, 0o700),
    ("quarantine", true, 0o700, 0o700),
    ("view", true, 0o755, 0o755),
];

/// One finding per part that is wrong, or one `ok` line for all of them.
pub(super) fn check(home: &Home) -> Vec<Finding> {
    let Ok(top) = std::fs::symlink_metadata(home.root()) else {
        return vec![Finding::problem(
            "state-dir",
            format!("{} cannot be read", home.root().display()),
            "run `carma init`",
        )];
    };
    let owner = top.uid();
    let shared = owner == 0;
    let mut problems = Vec::new();
    for (part, is_dir, root_mode, personal_mode) in PARTS {
        let path = home.root().join(part);
        let want = if shared { root_mode } else { personal_mode };
        if let Some(problem) = judge(&path, is_dir, want, owner) {
            problems.push(problem);
        }
    }
    if problems.is_empty() {
        let whose = if shared { "root's system queue" } else { "a personal queue" };
        return vec![Finding::ok(
            "state-dir",
            format!("{} ({whose}): every part has its owner and mode", home.root().display()),
        )];
    }
    problems
}

/// The problem with one part, if any. `quarantine/` may be missing (the first refusal makes
/// it); a part with the wrong mode is one `carma init` fixes, a link or another owner's part
/// one it refuses.
fn judge(path: &Path, is_dir: bool, want: u32, owner: u32) -> Option<Finding> {
    let shown = path.display();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(_) if path.ends_with("quarantine") => return None,
        Err(e) => {
            return Some(Finding::problem(
                "state-dir",
                format!("{shown} is missing ({e})"),
                "run `carma init`, which makes it",
            ));
        }
    };
    let kind = meta.file_type();
    let unsafe_fix = format!("remove {shown} (not what carma made), then run `carma init`");
    if kind.is_symlink() {
        return Some(Finding::problem("state-dir", format!("{shown} is a symbolic link"), unsafe_fix));
    }
    if is_dir != kind.is_dir() || (!is_dir && (kind.is_fifo() || !kind.is_file())) {
        let what = if is_dir { "a directory" } else { "a regular file" };
        return Some(Finding::problem("state-dir", format!("{shown} is not {what}"), unsafe_fix));
    }
    if meta.uid() != owner {
        let detail = format!(
            "{shown} is owned by uid {}, not by the state directory's owner (uid {owner})",
            meta.uid()
        );
        return Some(Finding::problem("state-dir", detail, unsafe_fix));
    }
    let mode = meta.mode() & 0o7777;
    // An edited config.toml may have another mode: others must not write it, and on a system
    // queue every user's `carma submit` reads it.
    let config_ok = path.ends_with("config.toml") && mode & 0o022 == 0 && (owner != 0 || mode & 0o004 != 0);
    if mode != want && !config_ok {
        return Some(Finding::problem(
            "state-dir",
            format!("{shown} has mode {mode:o}, not {want:o}"),
            "run `carma init` as the state directory's owner: it sets the modes",
        ));
    }
    None
}
