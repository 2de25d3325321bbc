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
    // A second init says what it checked and that it changed nothing (issue 42: it said only
    // "already initialised").
    let root = home.path().display();
    assert_eq!(
        second,
        format!(
            "state directory {root} was initialised; checked it for carma {}:\n  parts      spool/ runs/ private/ view/ carma.lock config.toml: all there, none a link or another user's\n  modes      as this carma sets them\n  config     {root}/config.toml: knows every key of this version\n  journal    format 2 (this carma's), 4 records, 1 tasks\n  view       published for readers\n",
            env!("CARGO_PKG_VERSION")
        )
    );
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
    let said = common::stdout(&again);
    for part in ["carma.lock", "carma.redb"] {
        let line = format!("  changed    {}: mode 644 → 600\n", deep.join(part).display());
        assert!(said.contains(&line), "init says what it changed: {said}");
    }
}

/// Goal: after an upgrade, `carma init` names the config keys the old config.toml lacks, writes
/// this version's documented file beside it (leaving config.toml alone), and a third run
/// changes nothing. Fails on the old code (it said only "already initialised").
#[test]
fn init_after_an_upgrade_names_the_new_config_keys_and_changes_nothing_twice() {
    let home = TestHome::new();
    let old = "[tick]\ngpus = \"none\"\n";
    home.set_config(old);
    let first = home.ok(&["init"]);
    let line = first.lines().find(|l| l.starts_with("  config     ")).expect(&first).to_string();
    assert!(
        line.contains("keys new in this version, their defaults apply: [access] admin-group, "),
        "{line}"
    );
    assert!(line.contains("[retention] runs-keep, [retention] runs-per-user-max"), "{line}");
    let defaults = home.path().join("config.toml.default");
    assert!(line.ends_with(&format!("; wrote {} (config.toml left as it is)", defaults.display())), "{line}");
    assert_eq!(std::fs::read_to_string(home.path().join("config.toml")).unwrap(), old);
    let written = std::fs::metadata(&defaults).unwrap().modified().unwrap();
    let second = home.ok(&["init"]);
    assert!(
        second.contains(&format!("; documented in {} (config.toml left as it is)", defaults.display())),
        "{second}"
    );
    assert_eq!(std::fs::metadata(&defaults).unwrap().modified().unwrap(), written, "not written again");
    assert!(!second.contains("changed    ") && !second.contains("created    "), "{second}");
}

/// Defect 10: a user's `carma init` on a machine with a system queue failed on `chmod` of root's
/// spool. It now says the queue needs no init (exit 0), or, before root set it up, that root
/// must (exit 2), and changes nothing either way.
#[test]
fn a_users_init_beside_the_system_queue_says_what_to_do() {
    if !common::users::can_create_users() {
        return common::skip::skip(common::skip::Need::Users, "needs root with useradd to play a user");
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (queue, config) = (dir.path().join("queue"), dir.path().join("carma.toml"));
    let exe = dir.path().join("carma");
    common::copy_carma(&exe);
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&config, format!("home = {:?}\n", queue.display().to_string())).unwrap();
    let env = [("CARMA_SYSTEM_CONFIG", config.to_str().unwrap())];
    let user = common::users::ThrowawayUser::create("in");
    let exe = exe.to_str().unwrap();
    let before = user.run(exe, &["init"], &env, dir.path());
    common::assert_error(
        &before,
        2,
        &format!(
            "{} is this machine's queue ({}), but root has not initialised it; ask root to run carma init \
             (or make a queue of your own: carma init --home DIR)",
            queue.display(),
            config.display()
        ),
    );
    assert!(!queue.exists(), "the user's init created nothing");
    let root = std::process::Command::new(exe).args(["init", "--system"]).envs(env).output().unwrap();
    assert!(root.status.success(), "{}", common::stderr(&root));
    let after = user.run(exe, &["init"], &env, dir.path());
    assert_eq!(after.status.code(), Some(0), "{}", common::stderr(&after));
    assert_eq!(
        common::stdout(&after),
        format!(
            "{} is this machine's queue, set up by root: submit to it as you are, no init needed \
             (for a queue of your own: carma init --home DIR)\n",
            queue.display()
        )
    );
}
