//! The system's user database (NSS), in one place: uid ↔ name for people, and the entry the
//! supervisor needs to run a job as its submitter.

use std::ffi::{CStr, CString};

/// A passwd entry's fields carma uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passwd {
    /// The login name (`pw_name`).
    pub name: String,
    /// The user's uid (`pw_uid`).
    pub uid: u32,
    /// The primary group (`pw_gid`): the job's gid when its plan names none.
    pub gid: u32,
    /// The home directory (`pw_dir`), the job's `HOME`.
    pub home: String,
    /// The login shell (`pw_shell`), what `carma alloc` runs; empty when the entry has none.
    pub shell: String,
}

/// The entry of `uid`, when the user database knows it.
pub fn entry(uid: u32) -> Option<Passwd> {
    lookup(|entry, buffer, result| {
        // SAFETY: all pointers are valid for the stated lengths.
        unsafe { libc::getpwuid_r(uid, entry, buffer.as_mut_ptr(), buffer.len(), result) }
    })
}

/// The login name of `uid`, when the user database knows it.
pub fn name_of(uid: u32) -> Option<String> {
    entry(uid).map(|e| e.name)
}

/// The uid of the user called `name`, when the user database knows it.
pub fn uid_of(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    lookup(|entry, buffer, result| {
        // SAFETY: all pointers are valid for the stated lengths; `name` is NUL-terminated.
        unsafe { libc::getpwnam_r(name.as_ptr(), entry, buffer.as_mut_ptr(), buffer.len(), result) }
    })
    .map(|e| e.uid)
}

/// Whether `name` looks like a portable user name (POSIX: letters, digits, `.`, `_`, `-`,
/// not starting with `-`), at most 32 characters. Used for the simulator's synthetic users.
pub fn is_user_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// `uid`'s name, or the number when the database does not know it (a deleted user).
pub fn display(uid: u32) -> String {
    name_of(uid).unwrap_or_else(|| uid.to_string())
}

/// Runs a `getpw*_r` call with a growing buffer.
fn lookup(
    call: impl Fn(&mut libc::passwd, &mut [libc::c_char], &mut *mut libc::passwd) -> libc::c_int,
) -> Option<Passwd> {
    let mut buffer_len = 16 * 1024;
    while buffer_len <= 1024 * 1024 {
        let mut buffer = vec![0 as libc::c_char; buffer_len];
        // SAFETY: passwd is plain old data; zeroed is a valid value for it.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let code = call(&mut entry, &mut buffer, &mut result);
        if code == libc::ERANGE {
            buffer_len *= 2;
            continue;
        }
        if code != 0 || result.is_null() || entry.pw_name.is_null() || entry.pw_dir.is_null() {
            return None;
        }
        // SAFETY: on success pw_name and pw_dir point to NUL-terminated strings inside
        // `buffer`, which is still alive.
        let (name, home) = unsafe { (CStr::from_ptr(entry.pw_name), CStr::from_ptr(entry.pw_dir)) };
        // SAFETY: the same for pw_shell, which may be null.
        let shell = (!entry.pw_shell.is_null()).then(|| unsafe { CStr::from_ptr(entry.pw_shell) });
        return Some(Passwd {
            name: name.to_string_lossy().into_owned(),
            uid: entry.pw_uid,
            gid: entry.pw_gid,
            home: home.to_string_lossy().into_owned(),
            shell: shell.map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        });
    }
    None
}

/// Whether `uid` is in group `gid` (primary or supplementary), per the user database.
pub fn in_group(uid: u32, gid: u32) -> bool {
    let Some(entry) = entry(uid) else { return false };
    if entry.gid == gid {
        return true;
    }
    let Ok(name) = CString::new(entry.name) else { return false };
    let mut groups = vec![0 as libc::gid_t; 256];
    let mut count = groups.len() as libc::c_int;
    // SAFETY: `groups` holds `count` entries; `name` is NUL-terminated. A user in more
    // groups than that gets -1 and a larger count: retry once with room for all.
    let mut rc = unsafe { libc::getgrouplist(name.as_ptr(), entry.gid, groups.as_mut_ptr(), &mut count) };
    if rc < 0 && count > 0 {
        groups.resize(count as usize, 0);
        // SAFETY: as above, with the size the first call asked for.
        rc = unsafe { libc::getgrouplist(name.as_ptr(), entry.gid, groups.as_mut_ptr(), &mut count) };
    }
    rc >= 0 && groups[..count.max(0) as usize].contains(&gid)
}

/// The gid of the group called `name`, when the group database knows it.
pub fn gid_of(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    let mut group: libc::group = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 64 * 1024];
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the stated lengths; `name` is NUL-terminated.
    let rc = unsafe {
        libc::getgrnam_r(name.as_ptr(), &mut group, buffer.as_mut_ptr(), buffer.len(), &mut result)
    };
    (rc == 0 && !result.is_null()).then_some(group.gr_gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_known_both_ways() {
        assert_eq!(name_of(0).as_deref(), Some("root"));
        assert_eq!(uid_of("root"), Some(0));
        assert_eq!(entry(0).map(|e| e.gid), Some(0));
        assert_eq!(uid_of("no-such-user-carma"), None);
        assert_eq!(display(4_000_000_000), "4000000000");
    }
}
