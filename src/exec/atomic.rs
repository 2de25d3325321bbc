//! Crash-safe file writes for the run dir: a reader sees the old file, the
//! new file, or nothing, never half of one.
//!
//! Both helpers write a temp file in the target's directory (same file
//! system, so rename and link are atomic), fsync it, publish it, then fsync
//! the directory so the new name survives a power cut.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::ExecError;

/// Version of every JSON file in the run dir (plan, claim, job, exit).
pub(super) const RUN_DIR_FORMAT_VERSION: u32 = 1;

/// Largest JSON file read back from a run dir; bigger means corruption.
const JSON_FILE_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// Write `bytes` to `path` atomically with permission bits `mode`: temp file
/// in the same directory, fsync, rename over `path`, fsync the directory.
pub fn write_file_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ExecError> {
    let temp = write_temp(path, bytes, mode)?;
    if let Err(source) = fs::rename(&temp, path) {
        let _ = fs::remove_file(&temp);
        return Err(io_error("rename into place", path, source));
    }
    sync_parent_dir(path)
}

/// [`write_file_atomic`] for the rest of carma, in the library's error type.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> crate::error::Result<()> {
    use crate::error::Error;
    write_file_atomic(path, bytes, mode).map_err(|e| match e {
        ExecError::Io { op, path, source } => Error::io(format!("cannot {op} {}", path.display()), source),
        other => {
            Error::io(format!("cannot write {}", path.display()), std::io::Error::other(other.to_string()))
        }
    })
}

/// Create `path` with `bytes` only if it does not exist, atomically: the temp
/// file is hard-linked to `path`, and `link(2)` fails with `EEXIST` when the
/// name is taken. Returns `Ok(false)` when `path` already existed.
pub(crate) fn create_file_exclusive(path: &Path, bytes: &[u8], mode: u32) -> Result<bool, ExecError> {
    let temp = write_temp(path, bytes, mode)?;
    let linked = fs::hard_link(&temp, path);
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => {
            sync_parent_dir(path)?;
            Ok(true)
        }
        Err(source) if source.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(source) => Err(io_error("create", path, source)),
    }
}

/// Serialize `body` as JSON with a `format_version` field and write it
/// atomically.
pub(crate) fn write_json_atomic<T: Serialize>(path: &Path, body: &T, mode: u32) -> Result<(), ExecError> {
    write_file_atomic(path, &to_versioned_json(path, body)?, mode)
}

/// `body` as JSON bytes with a `format_version` field added.
pub(crate) fn to_versioned_json<T: Serialize>(path: &Path, body: &T) -> Result<Vec<u8>, ExecError> {
    let value = serde_json::to_value(body).map_err(|err| corrupt(path, err))?;
    let serde_json::Value::Object(fields) = value else {
        unreachable!("run dir records are structs, which serialize to JSON objects");
    };
    let mut object = serde_json::Map::new();
    object.insert("format_version".into(), RUN_DIR_FORMAT_VERSION.into());
    object.extend(fields);
    let mut bytes = serde_json::to_vec_pretty(&object).map_err(|err| corrupt(path, err))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Read a versioned JSON file. `Ok(None)` when it does not exist; a file that
/// does not decode, is too big or has another version is an error.
/// It is opened without following a link and without blocking (a FIFO in its place
/// must not hang the tick), and must be a regular file.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, ExecError> {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(source) if source.kind() == ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io_error("open", path, source)),
    };
    if !file.metadata().map_err(|source| io_error("stat", path, source))?.is_file() {
        return Err(corrupt(path, "not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(JSON_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| io_error("read", path, source))?;
    if bytes.len() as u64 > JSON_FILE_BYTES_MAX {
        return Err(corrupt(path, format!("larger than {JSON_FILE_BYTES_MAX} bytes")));
    }
    let mut value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|err| corrupt(path, err))?;
    let version = value
        .as_object_mut()
        .and_then(|object| object.remove("format_version"))
        .and_then(|version| version.as_u64());
    match version {
        None => Err(corrupt(path, "no numeric format_version field")),
        Some(found) if found != u64::from(RUN_DIR_FORMAT_VERSION) => Err(ExecError::UnsupportedFormat {
            path: path.to_path_buf(),
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: RUN_DIR_FORMAT_VERSION,
        }),
        Some(_) => serde_json::from_value(value).map(Some).map_err(|err| corrupt(path, err)),
    }
}

/// fsync the directory holding `path`, so a rename or link in it is durable.
pub(crate) fn sync_parent_dir(path: &Path) -> Result<(), ExecError> {
    let dir = parent_dir(path);
    let handle = File::open(dir).map_err(|source| io_error("open directory", dir, source))?;
    handle.sync_all().map_err(|source| io_error("fsync directory", dir, source))
}

/// Shorthand for [`ExecError::Io`].
pub(crate) fn io_error(op: &'static str, path: &Path, source: std::io::Error) -> ExecError {
    ExecError::Io { op, path: path.to_path_buf(), source }
}

/// Shorthand for [`ExecError::Corrupt`].
pub(crate) fn corrupt(path: &Path, detail: impl ToString) -> ExecError {
    ExecError::Corrupt { path: path.to_path_buf(), detail: detail.to_string() }
}

/// Write `bytes` to a fresh, fsynced temp file next to `path` and return its
/// path. The mode is set with fchmod so the umask does not change it.
fn write_temp(path: &Path, bytes: &[u8], mode: u32) -> Result<PathBuf, ExecError> {
    let temp = temp_path(path);
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).mode(mode).open(&temp)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    match result {
        Ok(()) => Ok(temp),
        Err(source) => {
            let _ = fs::remove_file(&temp);
            Err(io_error("write", &temp, source))
        }
    }
}

/// A temp name unique within this process and across processes (pid).
fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let sequence = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    parent_dir(path).join(format!(".{name}.tmp.{}.{sequence}", std::process::id()))
}

/// The file name an in-progress write's temp `name` (`.NAME.tmp.PID.SEQ`, as `temp_path` names it) will
/// publish, if `name` is one. A reader of a folder that a writer may be publishing into sees
/// these for the moment of the write, and one is left behind by a writer killed mid-write.
pub(super) fn temp_target(name: &str) -> Option<&str> {
    let rest = name.strip_prefix('.')?;
    let (target, numbers) = rest.rsplit_once(".tmp.")?;
    let (pid, sequence) = numbers.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (!target.is_empty() && digits(pid) && digits(sequence)).then_some(target)
}

/// The directory holding `path`; "." for a bare file name.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    //! Goal: atomic writes replace content, keep the mode, leave no temp
    //! files, and exclusive creation refuses an existing name.
    use super::*;

    #[test]
    fn write_replaces_and_sets_mode_without_leftovers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("exit.json");
        write_file_atomic(&path, b"one", 0o600).expect("first write");
        write_file_atomic(&path, b"two", 0o640).expect("second write");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        let mode = fs::metadata(&path).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let names: Vec<_> = fs::read_dir(dir.path()).expect("read_dir").collect();
        assert_eq!(names.len(), 1, "temp file left behind: {names:?}");
    }

    #[test]
    fn a_temp_names_the_file_it_will_publish_and_nothing_else_does() {
        let temp = temp_path(Path::new("/run/x/exit.json"));
        let name = temp.file_name().unwrap().to_str().unwrap();
        assert_eq!(temp_target(name), Some("exit.json"));
        assert_eq!(temp_target(".exit.json.tmp.17999.2"), Some("exit.json"));
        for not_a_temp in [
            "exit.json",
            ".exit.json.tmp.",
            ".exit.json.tmp.1",
            ".exit.json.tmp.1.x",
            "..tmp.1.2",
            "x.tmp.1.2",
        ] {
            assert_eq!(temp_target(not_a_temp), None, "{not_a_temp}");
        }
    }

    #[test]
    fn exclusive_create_refuses_existing_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("claim.json");
        assert!(create_file_exclusive(&path, b"first", 0o644).expect("create"));
        assert!(!create_file_exclusive(&path, b"second", 0o644).expect("second create"));
        assert_eq!(fs::read(&path).expect("read"), b"first");
        assert_eq!(fs::read_dir(dir.path()).expect("read_dir").count(), 1);
    }

    #[test]
    fn versioned_json_round_trips_and_rejects_other_versions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.json");
        let body = std::collections::BTreeMap::from([("a".to_string(), 1u32)]);
        write_json_atomic(&path, &body, 0o644).expect("write");
        let back: Option<std::collections::BTreeMap<String, u32>> = read_json(&path).expect("read");
        assert_eq!(back, Some(body));
        fs::write(&path, br#"{"format_version": 9, "a": 1}"#).expect("write");
        let err = read_json::<std::collections::BTreeMap<String, u32>>(&path).expect_err("v9");
        assert!(matches!(err, ExecError::UnsupportedFormat { found: 9, .. }), "{err}");
        fs::write(&path, b"{\"format_ver").expect("write");
        let err = read_json::<std::collections::BTreeMap<String, u32>>(&path).expect_err("torn");
        assert!(err.to_string().contains("x.json"), "{err}");
        let missing = read_json::<std::collections::BTreeMap<String, u32>>(&dir.path().join("no"));
        assert!(matches!(missing, Ok(None)));
    }

    #[test]
    fn reading_refuses_links_and_fifos_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("real.json");
        fs::write(&target, br#"{"format_version": 1, "a": 1}"#).expect("write");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let err = read_json::<std::collections::BTreeMap<String, u32>>(&link).expect_err("link");
        assert!(matches!(err, ExecError::Io { .. }), "{err}");
        let fifo = dir.path().join("fifo.json");
        let c_path = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("no NUL");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let err = read_json::<std::collections::BTreeMap<String, u32>>(&fifo).expect_err("fifo");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
