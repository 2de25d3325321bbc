//! The job's program as the submitter finds it: looked up on the PATH the job will get, and
//! checked with the submitter's own permissions (`access(2)` with this process's real ids).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::Error;
use crate::spec;

/// `argv0` as the job will find it: a path (relative to the workdir) or the first executable
/// match on `path_var`. Not canonicalised: a virtual environment's `python` is a symlink whose
/// own path is what makes it the environment's.
pub(in crate::commands) fn resolve_program(
    argv0: &str,
    path_var: &str,
    workdir: &Path,
) -> Result<String, Error> {
    let found = if argv0.contains('/') {
        let candidate = workdir.join(argv0);
        is_executable_file(&candidate).then_some(candidate)
    } else {
        path_var
            .split(':')
            .filter(|dir| !dir.is_empty())
            .map(|dir| workdir.join(dir).join(argv0))
            .find(|candidate| is_executable_file(candidate))
    };
    let Some(found) = found else {
        let hint = if argv0.contains('/') {
            format!(
                "program {argv0} is not an executable file (relative to the workdir {})",
                workdir.display()
            )
        } else {
            format!(
                "program `{argv0}` is not on the PATH the job gets ({path_var}); activate its environment before submitting, or give its full path"
            )
        };
        return Err(Error::BadInput(hint));
    };
    spec::path_to_string(&found, "program").map_err(Error::BadInput)
}

pub(super) fn is_executable_file(path: &Path) -> bool {
    path.is_file() && accessible(path, libc::X_OK)
}

/// `access(2)` as the submitter (this process's real ids).
pub(super) fn accessible(path: &Path, mode: libc::c_int) -> bool {
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(c_path.as_ptr(), mode) == 0 }
}
