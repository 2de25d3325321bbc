//! `carma init`: creates everything with tight permissions, and a second run changes nothing.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::TestHome;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn init_twice_is_harmless_and_modes_are_tight() {
    let home = TestHome::uninitialised();
    let first = home.ok(&["init"]);
    assert!(first.starts_with(&format!("initialised {}\n", home.path().display())), "{first}");
    for part in ["spool", "runs", "private", "view", "carma.lock", "config.toml", "carma.redb"] {
        assert!(first.contains(&format!("created {}", home.path().join(part).display())), "{part}: {first}");
    }
    let id = home.ok(&["submit", "--parsable", "--", "true"]).trim().to_string();
    home.ok(&["tick"]);
    let config_before = std::fs::read_to_string(home.path().join("config.toml")).unwrap();
    let second = home.ok(&["init"]);
    assert_eq!(second, format!("state directory {} is already initialised\n", home.path().display()));
    assert_eq!(std::fs::read_to_string(home.path().join("config.toml")).unwrap(), config_before);
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--json"])).unwrap();
    assert_eq!(queue["tasks"][0]["id"], id.as_str(), "the journal survived a second init");

    let root = unsafe { libc::geteuid() } == 0;
    let expected: [(&str, u32, u32); 6] = [
        // (part, as root, personal)
        ("carma.redb", 0o600, 0o600),
        ("carma.lock", 0o600, 0o600),
        ("spool", 0o1777, 0o700),
        ("runs", 0o711, 0o700),
        ("private", 0o700, 0o700),
        ("view", 0o755, 0o755),
    ];
    for (part, as_root, personal) in expected {
        let want = if root { as_root } else { personal };
        assert_eq!(mode(&home.path().join(part)), want, "{part}: mode {:o}", mode(&home.path().join(part)));
    }
}

/// Goal: `carma init` creates missing parents, and tightens the modes of a state directory an
/// older carma created (a world-readable journal and lock let any user stop every tick).
#[test]
fn init_creates_parents_and_tightens_old_modes() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("a/b/carma");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_carma"))
        .env("CARMA_HOME", &deep)
        .arg("init")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(deep.join("spool").is_dir());
    for part in ["carma.redb", "carma.lock"] {
        std::fs::set_permissions(deep.join(part), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_carma"))
        .env("CARMA_HOME", &deep)
        .arg("init")
        .output()
        .unwrap();
    assert!(again.status.success());
    assert_eq!(mode(&deep.join("carma.redb")), 0o600);
    assert_eq!(mode(&deep.join("carma.lock")), 0o600);
}
