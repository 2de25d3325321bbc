//! Who this process is: the one place carma asks the kernel.

/// The effective uid of this process: whose files it creates and whose permissions apply.
pub fn effective() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The effective gid of this process.
pub fn effective_gid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}
