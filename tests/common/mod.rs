//! Helpers shared by the integration tests: run the real `carma` binary against a
//! temporary state directory.

#![allow(dead_code)]

pub mod cluster;
pub mod journals;
pub mod skip;
pub mod slurm;
pub mod ticker;
pub mod users;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Copies the built `carma` to `dest` (for tests that need a copy other users can run).
///
/// The copy is written by a `cp` child process, never through a descriptor of this test
/// process: a file this multi-threaded process held open for writing could be inherited by a
/// child another test thread forks at that moment, and until that child's exec closes it,
/// running the copy fails with "Text file busy" (ETXTBSY; seen in CI in `lab_queue`).
pub fn copy_carma(dest: &Path) {
    let out = Command::new("cp").arg(env!("CARGO_BIN_EXE_carma")).arg(dest).output().expect("run cp");
    assert!(out.status.success(), "cp carma {}: {}", dest.display(), stderr(&out));
}

/// A temporary, initialised state directory.
pub struct TestHome {
    pub dir: tempfile::TempDir,
}

impl TestHome {
    pub fn new() -> TestHome {
        TestHome::initialised(TestHome::uninitialised())
    }

    /// [`TestHome::new`] in a folder under `parent` (a filesystem a test made for it).
    pub fn new_in(parent: &Path) -> TestHome {
        TestHome::initialised(TestHome { dir: tempfile::tempdir_in(parent).expect("tempdir") })
    }

    fn initialised(home: TestHome) -> TestHome {
        let out = home.run(&["init"]);
        assert!(out.status.success(), "init failed: {}", stderr(&out));
        // Tests choose their GPUs explicitly; the default (NVML) depends on the machine.
        home.set_config("[tick]\ngpus = \"none\"\n");
        home
    }

    pub fn uninitialised() -> TestHome {
        TestHome { dir: tempfile::tempdir().expect("tempdir") }
    }

    /// Replaces config.toml.
    pub fn set_config(&self, text: &str) {
        std::fs::write(self.path().join("config.toml"), text).expect("write config");
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// This user's spool folder (`spool/<uid>/`), made as `carma submit` makes it.
    pub fn spool(&self) -> PathBuf {
        // SAFETY: geteuid cannot fail.
        self.spool_of(unsafe { libc::geteuid() })
    }

    /// The spool folder of `uid` (made 0700 if missing, owned by whoever runs the test).
    pub fn spool_of(&self, uid: u32) -> PathBuf {
        use std::os::unix::fs::DirBuilderExt;
        let folder = self.spool_top().join(uid.to_string());
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&folder);
        folder
    }

    /// As root: moves a file of this user's spool folder into `uid`'s folder, owned by `uid`,
    /// as if `uid` had written it there. Returns its new path.
    pub fn hand_to(&self, path: &Path, uid: u32) -> PathBuf {
        let folder = self.spool_of(uid);
        std::os::unix::fs::chown(&folder, Some(uid), Some(uid)).expect("chown folder");
        let moved = folder.join(path.file_name().expect("a file name"));
        std::fs::rename(path, &moved).expect("move into the other folder");
        std::os::unix::fs::chown(&moved, Some(uid), Some(uid)).expect("chown file");
        moved
    }

    /// The top of the spool, where only users' folders belong.
    pub fn spool_top(&self) -> PathBuf {
        self.path().join("spool")
    }

    /// A `carma` command with `--home` set and a short lock timeout.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_carma"));
        cmd.env("CARMA_HOME", self.path()).env("CARMA_LOCK_TIMEOUT", "5s");
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("spawn carma")
    }

    /// Runs one `carma tick`; a tick still running after `limit` is killed and fails the
    /// test (it must never block). Returns its output and how long it took.
    pub fn tick_within(&self, limit: std::time::Duration) -> (Output, std::time::Duration) {
        let started = std::time::Instant::now();
        let mut child = self
            .cmd()
            .arg("tick")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn carma tick");
        while started.elapsed() < limit {
            if child.try_wait().expect("wait for the tick").is_some() {
                return (child.wait_with_output().expect("tick output"), started.elapsed());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("the tick blocked for {limit:?}");
    }

    /// Runs and asserts success, returning stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "carma {args:?} failed ({:?}): {}", out.status.code(), stderr(&out));
        stdout(&out)
    }

    /// `carma events --json`, parsed.
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.ok(&["events", "--json"])
            .lines()
            .map(|l| serde_json::from_str(l).expect("event line is JSON"))
            .collect()
    }
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts exit code and the exact one-line error.
pub fn assert_error(out: &Output, code: i32, message: &str) {
    assert_eq!(stderr(out), format!("error: {message}\n"), "stderr");
    assert_eq!(out.status.code(), Some(code), "exit code; stderr: {}", stderr(out));
}

/// Offsets of every version-2 frame of record `seq` in a journal's bytes (redb writes pages
/// copy-on-write, so older copies of a page may hold the same record).
pub fn frame_offsets(bytes: &[u8], seq: u64) -> Vec<usize> {
    let mut marker = vec![carma::journal::frame::FORMAT_VERSION];
    marker.extend_from_slice(&carma::journal::frame::FRAME_MAGIC);
    marker.extend_from_slice(&seq.to_le_bytes());
    (0..bytes.len()).filter(|&at| bytes[at..].starts_with(&marker)).collect()
}

/// Flips one payload bit in every copy of record `seq` in the journal at `path`, so that no
/// intact copy is left; returns how many copies there were.
pub fn damage_every_copy(path: &Path, seq: u64) -> usize {
    let mut bytes = std::fs::read(path).expect("read journal");
    let copies = frame_offsets(&bytes, seq);
    for at in &copies {
        bytes[at + 20] ^= 0x10;
    }
    std::fs::write(path, &bytes).expect("write journal");
    copies.len()
}
