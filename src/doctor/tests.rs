//! Goal: each check names what is wrong with its fix, and a sound queue has no problem.
//! Method: a real state directory made by `Home::init` on a temporary folder, then broken one
//! part at a time.

use std::os::unix::fs::PermissionsExt;

use super::*;

fn queue() -> (tempfile::TempDir, Home) {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path().join("q"));
    home.init(crate::config::DEFAULT_CONFIG_TOML).unwrap();
    std::fs::write(home.journal_path(), b"").unwrap();
    std::fs::set_permissions(home.journal_path(), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(home.config_path(), "[tick]\ngpus = \"none\"\n").unwrap();
    (dir, home)
}

fn problems(report: &DoctorReport) -> Vec<(&'static str, &str)> {
    report
        .findings
        .iter()
        .filter(|f| f.level == Level::Problem)
        .map(|f| (f.check, f.detail.as_str()))
        .collect()
}

#[test]
fn a_fresh_queue_has_only_the_missing_tick_as_a_problem() {
    let (_dir, home) = queue();
    let report = check(&home);
    assert_eq!(problems(&report), [("timer", "no tick has run yet")], "{report:#?}");
    assert_eq!(report.problems, 1);
    std::fs::write(home.inventory_path(), b"{}").unwrap();
    assert_eq!(check(&home).problems, 0, "{:#?}", check(&home));
}

#[test]
fn a_bad_mode_a_link_and_a_bad_config_are_named_with_their_fixes() {
    let (dir, home) = queue();
    std::fs::write(home.inventory_path(), b"{}").unwrap();
    std::fs::set_permissions(home.runs_dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::remove_dir(home.view_dir()).unwrap();
    std::os::unix::fs::symlink(dir.path(), home.view_dir()).unwrap();
    let report = check(&home);
    let found = problems(&report);
    let runs = format!("{} has mode 777, not", home.runs_dir().display());
    assert!(found.iter().any(|(c, d)| *c == "state-dir" && d.starts_with(&runs)), "{found:?}");
    let link = format!("{} is a symbolic link", home.view_dir().display());
    assert!(found.contains(&("state-dir", link.as_str())), "{found:?}");
    let fixes: Vec<&str> = report.findings.iter().map(|f| f.fix.as_str()).collect();
    assert!(fixes.iter().any(|f| f.contains("carma init")), "{fixes:?}");

    std::fs::write(home.config_path(), "[tick]\ngpus = \"none\"\nbogus = 1\n").unwrap();
    let report = check(&home);
    let config = report.findings.iter().find(|f| f.check == "config").unwrap();
    assert_eq!(config.level, Level::Problem);
    assert!(config.detail.contains("config.toml:3"), "{}", config.detail);
}

#[test]
fn mail_without_sendmail_and_a_missing_metrics_folder_are_problems() {
    let (_dir, home) = queue();
    std::fs::write(home.inventory_path(), b"{}").unwrap();
    std::fs::write(
        home.config_path(),
        "[tick]\ngpus = \"none\"\n[notify]\nmail-submitter = true\n[metrics]\ntextfile = \"/nonexistent/carma/x.prom\"\n",
    )
    .unwrap();
    let report = check(&home);
    let checks: Vec<&str> = problems(&report).iter().map(|(c, _)| *c).collect();
    assert_eq!(checks, ["sendmail", "metrics"], "{report:#?}");
}
