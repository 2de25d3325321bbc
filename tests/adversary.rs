//! The adversary harness in CI: `carma bench adversary` over a few hundred seeds, as root (it
//! plays two users), must find no broken invariant. Seeds, moves and invariants are in
//! `src/bench/adversary.rs`; the 10,000-seed figure is in `reports/trust-boundary.md`.

mod common;

#[test]
fn a_hostile_user_breaks_no_invariant_over_two_hundred_seeds() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the adversary plays two users and needs root");
        return;
    }
    // Scratch in /dev/shm (the bench's default): the moves make thousands of files.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_carma"))
        .args(["bench", "adversary", "--seeds", "200", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", common::stdout(&out), common::stderr(&out)));
    assert_eq!(report["violations"], serde_json::json!([]), "{}", common::stderr(&out));
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(report["ticks"], 1200);
    assert!(report["moves"].as_u64().unwrap() >= 1200, "{report}");
    eprintln!(
        "adversary: 200 seeds, tick median {} ms, max {} ms",
        report["tick_ms_median"], report["tick_ms_max"]
    );
}
