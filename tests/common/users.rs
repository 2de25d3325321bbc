//! Throw-away users for tests that need a second user (root only), removed when dropped.

use std::process::{Command, Output};
use std::time::Duration;

/// True when the tests run as root with `useradd`, `userdel` and `runuser` available.
pub fn can_create_users() -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let have = |tool: &str| Command::new(tool).arg("--help").output().is_ok_and(|o| o.status.success());
    root && have("useradd") && have("userdel") && have("runuser")
}

/// A user made with `useradd` for one test; `userdel` runs on drop.
pub struct ThrowawayUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl ThrowawayUser {
    /// `useradd` a user named `carma-<tag>-<pid>-<n>` with its own group and no home.
    /// Retries while another test holds the passwd lock.
    pub fn create(tag: &str) -> ThrowawayUser {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("carma-{tag}-{}-{n}", std::process::id());
        assert!(name.len() <= 32, "user name {name} is too long");
        let mut last = None;
        for _ in 0..50 {
            let out = Command::new("useradd")
                .args(["--no-create-home", "--user-group", "--shell", "/bin/sh", &name])
                .output()
                .expect("run useradd");
            if out.status.success() {
                let id = |flag: &str| -> u32 {
                    let out = Command::new("id").args([flag, &name]).output().expect("run id");
                    String::from_utf8_lossy(&out.stdout).trim().parse().expect("numeric id")
                };
                return ThrowawayUser { uid: id("-u"), gid: id("-g"), name };
            }
            last = Some(out);
            std::thread::sleep(Duration::from_millis(100));
        }
        let out = last.expect("tried");
        panic!("useradd {name} failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Runs `program args` as this user (`runuser -u NAME --`), with `env` added.
    pub fn run(&self, program: &str, args: &[&str], env: &[(&str, &str)], dir: &std::path::Path) -> Output {
        // By absolute path: `env` may hold a PATH of the user's, without the sbin folders.
        Command::new(runuser())
            .args(["-u", &self.name, "--", program])
            .args(args)
            .envs(env.iter().copied())
            .current_dir(dir)
            .output()
            .expect("run runuser")
    }
}

impl Drop for ThrowawayUser {
    fn drop(&mut self) {
        for _ in 0..50 {
            let done = Command::new("userdel").arg(&self.name).output().is_ok_and(|o| o.status.success());
            if done {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("could not userdel {}; remove it by hand", self.name);
    }
}

/// `runuser`'s absolute path.
pub fn runuser() -> &'static str {
    ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser", "/bin/runuser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("runuser")
}

/// Skips the calling test (through [`crate::common::skip`]) unless throw-away users can be made;
/// true when it skipped.
pub fn skip_without_users() -> bool {
    if can_create_users() {
        return false;
    }
    super::skip::skip(
        super::skip::Need::Users,
        "needs root with useradd, userdel and runuser (run `cargo test` as root)",
    );
    true
}

/// A root-owned queue on two fake A100s that every user can reach, with a copy of the binary
/// where throw-away users can run it.
pub struct SharedQueue {
    pub home: super::TestHome,
    pub exe: std::path::PathBuf,
}

impl SharedQueue {
    pub fn new() -> SharedQueue {
        use std::os::unix::fs::PermissionsExt;
        let home = super::TestHome::with_fake_gpus(super::cluster::TWO_A100, "magm");
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = home.path().join("carma");
        super::copy_carma(&exe);
        SharedQueue { home, exe }
    }

    /// `carma ARGS` as `user`, on this queue.
    pub fn as_user(&self, user: &ThrowawayUser, args: &[&str]) -> Output {
        let home = self.home.path().to_str().unwrap();
        user.run(
            self.exe.to_str().unwrap(),
            args,
            &[("CARMA_HOME", home), ("CARMA_LOCK_TIMEOUT", "5s")],
            std::path::Path::new("/tmp"),
        )
    }

    /// [`Self::as_user`], which must succeed; its stdout.
    pub fn ok_as(&self, user: &ThrowawayUser, args: &[&str]) -> String {
        let out = self.as_user(user, args);
        assert!(out.status.success(), "{} {args:?}: {}", user.name, super::stderr(&out));
        super::stdout(&out)
    }

    /// Ticks, as root, with the copy of the binary users can reach, every 200 ms until every
    /// task has ended: a job's `srun` links to the binary its tick ran, which must be one the
    /// job's user can run (the build folder may be under root's 0700 home, as in CI).
    #[allow(dead_code)]
    pub fn tick_until_done(&self, limit: std::time::Duration) {
        let started = std::time::Instant::now();
        loop {
            let out = std::process::Command::new(&self.exe)
                .args(["tick"])
                .env("CARMA_HOME", self.home.path())
                .env("CARMA_LOCK_TIMEOUT", "5s")
                .output()
                .unwrap();
            assert!(out.status.success(), "tick: {}", super::stderr(&out));
            let queue = self.queue();
            let done = queue["tasks"].as_array().unwrap().iter().all(|t| {
                matches!(t["state"].as_str(), Some("Finished" | "Failed" | "Timeout" | "Cancelled"))
            });
            if done {
                return;
            }
            assert!(started.elapsed() < limit, "tasks did not finish within {limit:?}: {queue:#}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// `carma queue --all --json`.
    pub fn queue(&self) -> serde_json::Value {
        serde_json::from_str(&self.home.ok(&["queue", "--all", "--json"])).unwrap()
    }
}
