//! The adversary harness in CI: `carma bench adversary` over a hundred seeds, as root (it
//! plays two users, made for the run), must find no broken invariant. Seeds, moves and
//! invariants are in `src/bench/adversary/`; the 10,000-seed figures are in
//! `reports/trust-boundary/README.md`. Issue 32's invariants (an honest task starts within a
//! bound, no supervisor dies on its own, per-user bytes, the dashboard answers, the job over
//! its memory is the one stopped, requeues bounded) fail on the code before issue 32's fixes:
//! that run is in `reports/trust-boundary/adversary-old-code-1-50.json`. The fifth wave's moves
//! (recovery: grabs, brief grabs, idle out-of-memory lines; the doors: attach writes, SIGCONT
//! of a suspended job, hold/release loops, unlimited limits, forged fields) are played too, and
//! each must have reached the code it attacks; invariants (10), (12), (15), (17) and (19) fail
//! on the code before issues 40 and 41's fixes (`reports/trust-boundary/` §6).

mod common;

use common::skip::{Need, is_root, skip};

#[test]
fn a_hostile_user_breaks_no_invariant_over_a_hundred_seeds() {
    if !is_root() {
        return skip(Need::Root, "the adversary plays two users and needs root");
    }
    if !common::users::can_create_users() {
        return skip(Need::Users, "the adversary's jobs run as two users it makes with useradd");
    }
    // Scratch in /dev/shm (the bench's default): the moves make thousands of files.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_carma"))
        .args(["bench", "adversary", "--seeds", "100", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", common::stdout(&out), common::stderr(&out)));
    assert_eq!(report["violations"], serde_json::json!([]), "{}", common::stderr(&out));
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(report["ticks"], 800);
    assert!(report["moves"].as_u64().unwrap() >= 800, "{report}");
    assert_eq!(report["jobs"], true, "the players are real users whose jobs run: {report}");
    assert!(report["job_moves"].as_u64().unwrap() >= 50, "mallory's jobs were played: {report}");
    assert!(report["hostile_clients"].as_u64().unwrap() >= 10, "her dashboard clients were played: {report}");
    // The fifth wave's moves, each where it reached the code it attacks.
    for reached in [
        "grabs",
        "brief_grabs",
        "idle_ooms",
        "attach_writes",
        "sigconts",
        "hold_release_loops",
        "unlimited_asks",
        "forged_fields",
        "preemption_notices",
        "suspensions",
    ] {
        assert!(report[reached].as_u64().unwrap() >= 1, "{reached} were played: {report}");
    }
    assert_eq!(report["forged_refused"], report["forged_fields"], "every forged field was refused: {report}");
    eprintln!(
        "adversary: 100 seeds, tick median {} ms, max {} ms",
        report["tick_ms_median"], report["tick_ms_max"]
    );
}

/// A small ext4 filesystem of its own, loop-mounted, with 10% of its blocks reserved for root:
/// where mallory can fill the disk and root's tick must still work. Unmounted on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
    image: std::path::PathBuf,
}

impl SmallDisk {
    fn mount() -> Result<SmallDisk, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = std::env::temp_dir().join(format!("carma-adversary-{}.img", std::process::id()));
        let run = |program: &str, args: &[&str]| {
            let out = std::process::Command::new(program).args(args).output();
            match out {
                Ok(out) if out.status.success() => Ok(()),
                Ok(out) => Err(format!("{program}: {}", String::from_utf8_lossy(&out.stderr).trim())),
                Err(e) => Err(format!("{program}: {e}")),
            }
        };
        let image_arg = image.to_str().ok_or("temp path is not UTF-8")?;
        run("truncate", &["-s", "256M", image_arg])?;
        run("mkfs.ext4", &["-q", "-F", "-m", "10", image_arg])?;
        let dir_arg = dir.path().to_str().ok_or("temp path is not UTF-8")?;
        if let Err(why) = run("mount", &["-o", "loop", image_arg, dir_arg]) {
            let _ = std::fs::remove_file(&image);
            return Err(why);
        }
        Ok(SmallDisk { dir, image })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(self.dir.path()).status();
        let _ = std::fs::remove_file(&self.image);
    }
}

#[test]
fn a_hostile_user_who_fills_the_disk_breaks_no_invariant() {
    if !is_root() {
        return skip(Need::Root, "the adversary plays two users and needs root");
    }
    let disk = match SmallDisk::mount() {
        Ok(disk) => disk,
        Err(why) => {
            return skip(Need::Mount, &format!("the full-disk seeds need a loop-mounted ext4 ({why})"));
        }
    };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_carma"))
        .args(["bench", "adversary", "--seeds", "60", "--first-seed", "5001", "--json", "--dir"])
        .arg(disk.dir.path())
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", common::stdout(&out), common::stderr(&out)));
    assert_eq!(report["violations"], serde_json::json!([]), "{}", common::stderr(&out));
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(report["ticks"], 480);
    let full = report["full_disks"].as_u64().unwrap();
    assert!(full >= 10, "mallory filled the disk in some seeds: {report}");
    eprintln!(
        "adversary on a small disk: 60 seeds, {full} full disks, tick max {} ms",
        report["tick_ms_max"]
    );
}
