//! carma's Debian package (issue 42), installed on this machine as a lab would install it:
//! `packaging/deb/build.sh` builds it from the binary under test with Debian's dpkg-deb,
//! `dpkg -i` installs it as root, and the test checks what a lab gets (the binary on PATH,
//! the units it runs, the man page `man` finds, the completions), that installing touched no
//! state, and that `dpkg -r` takes it all away again. `systemd-analyze verify` checks the
//! units where it is installed; the timer is started for real only where systemd is PID 1
//! (CI's container has none, and says so).

mod common;

use std::path::Path;
use std::process::Command;

use common::skip::{Need, skip};
use common::stderr;

const FILES: [&str; 7] = [
    "/usr/bin/carma",
    "/lib/systemd/system/carma-tick.service",
    "/lib/systemd/system/carma-tick.timer",
    "/lib/systemd/system/carma-mps.service",
    "/usr/share/man/man1/carma.1.gz",
    "/usr/share/bash-completion/completions/carma",
    "/usr/share/zsh/vendor-completions/_carma",
];

fn run(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"))
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Builds the package into `dir` and returns its path.
fn build(dir: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/deb/build.sh");
    // No compression: the test's binary is a debug build of a hundred megabytes.
    let out = Command::new("bash")
        .arg(&script)
        .args(["--compress", "none", env!("CARGO_BIN_EXE_carma")])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "build.sh: {}", stderr(&out));
    let deb = common::stdout(&out).trim().to_string();
    assert!(deb.ends_with(&format!("carma_{}_{}.deb", env!("CARGO_PKG_VERSION"), arch())), "{deb}");
    deb
}

fn arch() -> String {
    common::stdout(&run("dpkg", &["--print-architecture"])).trim().to_string()
}

/// Goal: the package holds the binary, the units for the system queue at /usr/bin/carma, the
/// man page and the completions. Runs anywhere dpkg-deb is (no root needed to build).
#[test]
fn the_package_holds_the_binary_units_man_page_and_completions() {
    if !have("dpkg-deb") {
        return skip(Need::Dpkg, "needs Debian's dpkg-deb (apt-get install dpkg)");
    }
    let dir = tempfile::tempdir().unwrap();
    let deb = build(dir.path());
    let listing = common::stdout(&run("dpkg-deb", &["--contents", &deb]));
    for file in FILES {
        assert!(
            listing.lines().any(|l| l.ends_with(&format!(".{file}"))),
            "{file} in the package:\n{listing}"
        );
    }
    assert!(listing.lines().all(|l| l.contains(" root/root ")), "owned by root:\n{listing}");
    let control = common::stdout(&run("dpkg-deb", &["--field", &deb, "Package", "Version", "Depends"]));
    assert_eq!(control, format!("Package: carma\nVersion: {}\nDepends: libc6\n", env!("CARGO_PKG_VERSION")));
    let extracted = dir.path().join("x");
    let out = run("dpkg-deb", &["--extract", &deb, extracted.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let service = std::fs::read_to_string(extracted.join("lib/systemd/system/carma-tick.service")).unwrap();
    assert!(service.lines().any(|l| l == "ExecStart=/usr/bin/carma --home /var/lib/carma tick"), "{service}");
}

/// Goal: `dpkg -i` installs a carma that runs, whose man page `man` finds and whose bash
/// completion loads, creates no queue, and `dpkg -r` removes every file again. Needs root.
#[test]
fn dpkg_installs_a_working_carma_and_removes_it() {
    if !have("dpkg-deb") {
        return skip(Need::Dpkg, "needs Debian's dpkg and dpkg-deb");
    }
    if !common::skip::is_root() {
        return skip(Need::Root, "dpkg -i needs root (run cargo test as root)");
    }
    let owned = run("dpkg-query", &["--show", "--showformat=${Status}", "carma"]);
    if Path::new("/usr/bin/carma").exists() && !owned.status.success() {
        panic!("/usr/bin/carma exists and is no package's: this test would replace it; remove it first");
    }
    let state_before = (Path::new("/var/lib/carma").exists(), Path::new("/etc/carma").exists());
    let dir = tempfile::tempdir().unwrap();
    let deb = build(dir.path());
    let installed = run("dpkg", &["-i", &deb]);
    assert!(installed.status.success(), "dpkg -i: {}", stderr(&installed));
    let checks = std::panic::catch_unwind(|| check_installed(state_before));
    let removed = run("dpkg", &["-r", "carma"]);
    assert!(removed.status.success(), "dpkg -r: {}", stderr(&removed));
    if let Err(panic) = checks {
        std::panic::resume_unwind(panic);
    }
    for file in FILES {
        assert!(!Path::new(file).exists(), "{file} is gone after dpkg -r");
    }
}

fn check_installed(state_before: (bool, bool)) {
    for file in FILES {
        assert!(Path::new(file).exists(), "{file} installed");
    }
    let version = run("/usr/bin/carma", &["--version"]);
    assert_eq!(common::stdout(&version), format!("carma {}\n", env!("CARGO_PKG_VERSION")));
    if have("man") {
        let found = run("man", &["-w", "carma"]);
        assert_eq!(common::stdout(&found).trim(), "/usr/share/man/man1/carma.1.gz", "{}", stderr(&found));
    }
    let complete =
        run("bash", &["-c", "source /usr/share/bash-completion/completions/carma && complete -p carma"]);
    assert!(common::stdout(&complete).contains("_carma_with_task_ids"), "{}", stderr(&complete));
    assert_eq!(
        (Path::new("/var/lib/carma").exists(), Path::new("/etc/carma").exists()),
        state_before,
        "installing creates no queue: `carma init` is the administrator's"
    );
    if have("systemd-analyze") {
        let verify = run(
            "systemd-analyze",
            &["verify", "/lib/systemd/system/carma-tick.service", "/lib/systemd/system/carma-tick.timer"],
        );
        assert!(
            verify.status.success(),
            "systemd-analyze verify: {}{}",
            common::stdout(&verify),
            stderr(&verify)
        );
    }
    if !Path::new("/run/systemd/system").is_dir() {
        return skip(Need::Systemd, "no systemd as PID 1 here: the timer units were verified, not started");
    }
    let start = run("systemctl", &["start", "carma-tick.timer"]);
    assert!(start.status.success(), "{}", stderr(&start));
    let active = run("systemctl", &["is-active", "carma-tick.timer"]);
    assert_eq!(common::stdout(&active).trim(), "active");
    let _ = run("systemctl", &["stop", "carma-tick.timer"]);
}
