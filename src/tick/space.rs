//! The floor under the state directory's free space (`[limits] free-space-floor`).
//!
//! The journal, the spool, the view and every attempt's logs share the state directory's
//! filesystem. When it fills, redb cannot commit and `carma tick`, `submit` and `cancel` all
//! fail; relaunching the job that filled it would fill it again. So below the floor the tick
//! starts no new attempt, and everything else (reconcile, cancels, the journal) goes on in the
//! space the floor keeps. The measurement is an input: the CLI takes it ([`free_bytes`]) at the
//! start of a tick, the decision here is pure, and the simulator, which measures nothing, is
//! never held.

use std::path::Path;

/// Why nothing may start this tick because the state directory is short of space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskFull {
    /// Every waiting task's pending reason. It names the floor, not the free figure: the
    /// figure moves with every byte a job writes, and a reason that changes is journaled
    /// again for every waiting task, on a disk that is full.
    pub reason: String,
    /// The same with the free figure, for the operator (`carma tick`'s output).
    pub detail: String,
}

/// Bytes free to unprivileged users (what `df` shows as available) on the filesystem that
/// holds `dir`: jobs write their logs as their users, so root's reserve does not count.
/// `None` when `statvfs` fails.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data, filled by the call below.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out pointer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between libc targets
    Some((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

/// The hold when `free_bytes` is below `floor_bytes`; `None` when there is room, when the
/// floor is 0, or when nothing was measured.
pub fn disk_full(free_bytes: Option<u64>, floor_bytes: u64, dir: &Path) -> Option<DiskFull> {
    let free = free_bytes?;
    if free >= floor_bytes {
        return None;
    }
    let (floor, dir) = (crate::text::bytes(floor_bytes), dir.display());
    Some(DiskFull {
        reason: format!(
            "DiskFull: less than {floor} free in {dir}, the [limits] free-space-floor; free space there or lower the floor"
        ),
        detail: format!(
            "{} free in {dir}, below the {floor} free-space-floor: no new attempt starts until there is more",
            crate::text::bytes(free)
        ),
    })
}

#[cfg(test)]
mod tests {
    //! Goal: the hold comes exactly below the floor, never without a measurement or a floor,
    //! and its words are pinned. Method: the pure decision, and one real `statvfs`.
    use super::*;

    #[test]
    fn below_the_floor_holds_with_a_stable_reason() {
        let dir = Path::new("/var/lib/carma");
        let floor = 512 << 20;
        let held = disk_full(Some(310 << 20), floor, dir).expect("below the floor");
        assert_eq!(
            held.reason,
            "DiskFull: less than 512 MiB free in /var/lib/carma, the [limits] free-space-floor; free space there or lower the floor"
        );
        assert_eq!(
            held.detail,
            "310 MiB free in /var/lib/carma, below the 512 MiB free-space-floor: no new attempt starts until there is more"
        );
        let other = disk_full(Some(10 << 20), floor, dir).expect("further below");
        assert_eq!(other.reason, held.reason, "the reason does not move with the free figure");
        assert_eq!(disk_full(Some(floor), floor, dir), None, "at the floor is enough");
        assert_eq!(disk_full(None, floor, dir), None, "not measured: plenty");
        assert_eq!(disk_full(Some(0), 0, dir), None, "no floor");
    }

    #[test]
    fn free_space_is_measured() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(free_bytes(dir.path()).is_some());
        assert_eq!(free_bytes(&dir.path().join("missing")), None);
    }
}
