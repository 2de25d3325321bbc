//! `carma systemd` prints the units and `--install` writes them, pointing at this binary and
//! this state directory.

mod common;

use common::{TestHome, stdout};

#[test]
fn install_writes_three_units_for_this_home() {
    let home = TestHome::new();
    let units = tempfile::tempdir().unwrap();
    let man = tempfile::tempdir().unwrap();
    let out = home.ok(&[
        "systemd",
        "--install",
        "--unit-dir",
        units.path().to_str().unwrap(),
        "--man-dir",
        man.path().to_str().unwrap(),
        "--exe",
        "/usr/local/bin/carma",
    ]);
    // The units point at man:carma(1), and the install puts that page where man finds it.
    let page = std::fs::read_to_string(man.path().join("carma.1")).unwrap();
    assert!(page.contains(".TH carma 1"), "{page}");
    for verb in ["submit", "queue", "logs", "wait", "gpus", "completions"] {
        assert!(page.contains(&format!("carma {verb}")), "the man page describes {verb}");
    }
    assert!(out.contains("systemctl daemon-reload && systemctl enable --now carma-tick.timer"), "{out}");
    let service = std::fs::read_to_string(units.path().join("carma-tick.service")).unwrap();
    let exec = format!("ExecStart=/usr/local/bin/carma --home {} tick", home.path().display());
    assert!(service.lines().any(|l| l == exec), "{service}");
    let timer = std::fs::read_to_string(units.path().join("carma-tick.timer")).unwrap();
    for line in ["OnUnitActiveSec=5s", "AccuracySec=1s", "Persistent=true"] {
        assert!(timer.lines().any(|l| l == line), "{line} in {timer}");
    }
    assert!(units.path().join("carma-mps.service").exists());
    let printed = home.ok(&["systemd", "--exe", "/usr/local/bin/carma"]);
    assert!(printed.starts_with("# carma-tick.service\n[Unit]\n"), "{printed}");
}

/// Goal: shell completions are generated from the CLI itself; an unknown shell is a usage error.
#[test]
fn completions_cover_the_verbs_and_refuse_an_unknown_shell() {
    let home = TestHome::new();
    let bash = home.ok(&["completions", "bash"]);
    for verb in ["submit", "queue", "logs", "wait", "cancel"] {
        assert!(bash.contains(verb), "bash completion knows {verb}");
    }
    let out = home.run(&["completions", "zsh"]);
    assert!(out.status.success());
    let bad = home.run(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// Goal: bash completes task ids for the verbs that take them (defect 10), from what
/// `carma queue --all` shows, and not where a flag or a flag's value goes.
#[test]
fn bash_completes_task_ids() {
    let home = TestHome::new();
    let id = home.ok(&["submit", "--parsable", "--hold", "--", "true"]).trim().to_string();
    home.ok(&["tick"]);
    let script = home.path().join("carma.bash");
    std::fs::write(&script, home.ok(&["completions", "bash"])).unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_carma")).parent().unwrap();
    let complete = |words: &str| {
        let program = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             _carma_with_task_ids carma \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        );
        let out = std::process::Command::new("bash")
            .args(["-c", &program])
            .env("CARMA_HOME", home.path())
            .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
            .output()
            .expect("bash");
        stdout(&out)
    };
    let offered = complete("carma show ''");
    let shown = offered.lines().find(|l| id.starts_with(l) && l.len() >= 6);
    assert!(shown.is_some(), "show offers the held task's shown id ({id}): {offered:?}");
    assert!(complete("carma release 06").lines().any(|l| id.starts_with(l)), "a prefix narrows");
    assert!(!complete("carma submit ''").lines().any(|l| id.starts_with(l)), "submit takes no id");
    assert!(!complete("carma update --time-limit ''").lines().any(|l| id.starts_with(l)), "a flag's value");
}
