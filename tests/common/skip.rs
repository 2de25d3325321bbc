//! One way for a test to say that it cannot run here, and why.
//!
//! A test that lacks what it needs calls [`skip`] and returns: it prints `skipped: TEST: why`
//! (on stderr, and appended to the file `CARMA_SKIP_LOG` names, because libtest hides a
//! passing test's stderr). CI must not pass green on a test that never ran: `.ci/run` sets
//! `CARMA_CI_PROVIDES` to the needs its machine meets (root, users, slurm, python3, …), and a
//! skip for one of those fails the test instead.

#![allow(dead_code)] // Each test binary uses a part.

use std::io::Write;

/// What a test may lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Running as root.
    Root,
    /// Root with `useradd`, `userdel` and `runuser`, to play throw-away users.
    Users,
    /// Debian's Slurm daemons and clients, and munge.
    Slurm,
    /// python3 (standard library only).
    Python3,
    /// Chromium and chromedriver, for the dashboard.
    Browser,
    /// Mounting a tmpfs or a loop-mounted ext4 (root, and a kernel and container that allow it).
    Mount,
    /// A writable cgroup v1 freezer.
    CgroupV1Freezer,
    /// PyTorch, for the GPU kit's label section.
    Torch,
    /// A machine without NVML (the case checks the no-driver path).
    NoNvml,
    /// strace, to kill a process at a chosen system call.
    Strace,
    /// A memory controller carma limits a job's host memory with: cgroup v2's, delegated by
    /// the hierarchy's root, or else cgroup v1's.
    CgroupMemory,
    /// A cgroup v1 memory hierarchy that carma uses because cgroup v2 lacks the controller (a
    /// hybrid host, as CI's).
    CgroupV1Memory,
    /// The Python MCP SDK (`pip install mcp`), a real client for `carma mcp`.
    McpSdk,
    /// Node and the TypeScript MCP SDK (`npm install @modelcontextprotocol/sdk`), the second
    /// real client for `carma mcp`.
    McpNodeSdk,
    /// Debian's dpkg and dpkg-deb, to build and install carma's package.
    Dpkg,
    /// systemd running as PID 1, to start the timer units for real.
    Systemd,
}

impl Need {
    /// The name `CARMA_CI_PROVIDES` lists.
    pub fn name(self) -> &'static str {
        match self {
            Need::Root => "root",
            Need::Users => "users",
            Need::Slurm => "slurm",
            Need::Python3 => "python3",
            Need::Browser => "browser",
            Need::Mount => "mount",
            Need::CgroupV1Freezer => "cgroup-v1-freezer",
            Need::Torch => "torch",
            Need::NoNvml => "no-nvml",
            Need::Strace => "strace",
            Need::CgroupMemory => "cgroup-memory",
            Need::CgroupV1Memory => "cgroup-v1-memory",
            Need::McpSdk => "mcp-sdk",
            Need::McpNodeSdk => "mcp-node-sdk",
            Need::Dpkg => "dpkg",
            Need::Systemd => "systemd",
        }
    }
}

/// Says that the calling test skips for lack of `need`; the caller returns after it. Panics
/// (fails the test) where `CARMA_CI_PROVIDES` says this machine meets the need.
pub fn skip(need: Need, why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let line = format!("skipped: {test}: {why}");
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("CARMA_SKIP_LOG") {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(log);
        // One write per line keeps lines whole when test threads append at once.
        let _ = file.and_then(|mut f| f.write_all(format!("{line} [{}]\n", need.name()).as_bytes()));
    }
    let provided = std::env::var("CARMA_CI_PROVIDES").unwrap_or_default();
    assert!(
        !provided.split(',').any(|n| n.trim() == need.name()),
        "{test} skipped for lack of `{}`, which CARMA_CI_PROVIDES says this machine has: {why}",
        need.name()
    );
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
