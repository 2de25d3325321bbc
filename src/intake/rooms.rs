//! Root's own rooms in the state directory (`private/`, `quarantine/`), the check of a user's
//! folder at the top of `spool/`, and the flood mover that parks a whole top level in
//! quarantine. Below `scan`, `settle` and `vault`, which all use it.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;

use super::fd;
use crate::error::{Error, Result};
use crate::home::Home;

/// The uid a top-level name stands for: canonical decimal, as `carma submit` makes it.
pub(super) fn user_folder_uid(name: &OsStr) -> Option<u32> {
    let text = name.to_str()?;
    let uid: u32 = text.parse().ok()?;
    (uid.to_string() == text).then_some(uid)
}

/// Why a user's folder cannot be used, if it cannot: checked on its open descriptor.
pub(super) fn folder_refusal(stat: fd::Stat, uid: u32, shown: &str) -> Option<String> {
    if !stat.is_dir() {
        return Some(format!("spool entry {shown} is {}, not a user's spool folder", stat.kind()));
    }
    if stat.uid != uid {
        return Some(format!(
            "spool folder {shown} belongs to uid {}, not uid {uid}; each user's folder is named by their uid",
            stat.uid
        ));
    }
    None
}

pub(super) fn private_dir(home: &Home) -> Result<OwnedFd> {
    own_dir(home, "private")
}

pub(super) fn quarantine_dir(home: &Home) -> Result<OwnedFd> {
    own_dir(home, "quarantine")
}

/// One of root's own folders in the state directory, made 0700 if missing.
fn own_dir(home: &Home, name: &str) -> Result<OwnedFd> {
    let path = home.root().join(name);
    let err = |e| Error::io(format!("cannot open {}", path.display()), e);
    let root = fd::open_dir(home.root()).map_err(err)?;
    match fd::open_dir_at(&root, OsStr::new(name)) {
        Ok(dir) => Ok(dir),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            fd::make_dir_at(&root, OsStr::new(name), 0o700).map_err(err)
        }
        Err(e) => Err(err(e)),
    }
}

/// A unique name in quarantine for `name`, printable and bounded: root's stamp (ns since the
/// epoch, which `quarantine` reads back as the entry's age), a dash, the name made safe.
pub(super) fn stamped(name: &str) -> OsString {
    let stamp =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    OsString::from(format!("{stamp}-{}", safe_name(name)))
}

/// `name`, printable and at most 100 characters, for the part after a quarantine stamp.
pub(super) fn stamped_suffix(name: &OsStr) -> String {
    safe_name(&name.to_string_lossy())
}

fn safe_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_graphic() && c != '/' { c } else { '_' }).take(100).collect()
}

/// A flood at the top of `spool/`: the whole top level goes to `quarantine/` in one rename
/// and a fresh `spool/` takes its place; the users' folders (checked on their descriptors)
/// are moved back into it. Costs one pass over the flood, once, instead of every tick.
/// Returns how many entries stayed in quarantine.
pub(super) fn move_top_level(home: &Home, spool: &OwnedFd) -> Result<u64> {
    let err = |what: &str, e| Error::io(format!("cannot {what} {}", home.spool_dir().display()), e);
    let stat = fd::fstat(spool).map_err(|e| err("read", e))?;
    let root = fd::open_dir(home.root()).map_err(|e| err("open the folder of", e))?;
    let quarantine = quarantine_dir(home)?;
    let parked = stamped("spool");
    fd::rename_at(&root, OsStr::new("spool"), &quarantine, &parked).map_err(|e| err("move", e))?;
    let fresh =
        fd::make_dir_at(&root, OsStr::new("spool"), stat.mode & 0o7777).map_err(|e| err("recreate", e))?;
    let _ = fd::chown(&fresh, stat.uid, u32::MAX);
    let old = fd::open_dir_at(&quarantine, &parked).map_err(|e| err("reopen", e))?;
    let mut kept = Vec::new();
    let mut left = 0u64;
    fd::visit(&old, |name| {
        let name = <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name);
        let folder = user_folder_uid(name).and_then(|uid| {
            let dir = fd::open_dir_at(&old, name).ok()?;
            let stat = fd::fstat(&dir).ok()?;
            folder_refusal(stat, uid, "").is_none().then_some(())
        });
        match folder {
            Some(()) => kept.push(name.to_os_string()),
            None => left += 1,
        }
        true
    })
    .map_err(|e| err("list", e))?;
    for name in kept {
        let _ = fd::rename_at(&old, &name, &fresh, &name);
    }
    Ok(left)
}
