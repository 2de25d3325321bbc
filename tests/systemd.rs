//! `carma systemd` prints the units and `--install` writes them, pointing at this binary and
//! this state directory.

mod common;

use common::TestHome;

#[test]
fn install_writes_three_units_for_this_home() {
    let home = TestHome::new();
    let units = tempfile::tempdir().unwrap();
    let out = home.ok(&[
        "systemd",
        "--install",
        "--unit-dir",
        units.path().to_str().unwrap(),
        "--exe",
        "/usr/local/bin/carma",
    ]);
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
