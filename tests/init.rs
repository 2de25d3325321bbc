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
    for part in ["spool", "runs", "carma.lock", "config.toml", "carma.redb"] {
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

    assert_eq!(mode(&home.path().join("carma.redb")), 0o640, "journal readable by owner and group only");
    let root = unsafe { libc::geteuid() } == 0;
    let spool = mode(&home.path().join("spool"));
    if root {
        assert_eq!(spool, 0o1733, "as root: anyone may drop a spec in, nobody may list or delete others'");
    } else {
        assert_eq!(spool, 0o700, "a personal state directory is private");
    }
}
