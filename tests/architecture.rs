//! The house's layers hold: no import runs back up the declared layers, no files import each
//! other in a circle, no source file is over 700 lines, and every top-level module has a
//! layer. Method: `reports/architecture/modgraph.py --json` (python3's standard library only)
//! on this checkout's `src/`; where python3 is absent the test says it skipped.

use std::process::Command;

#[path = "common/skip.rs"]
mod skip;
use skip::{Need, skip};

#[test]
fn imports_point_down_without_circles_or_long_files() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = match Command::new("python3")
        .arg(format!("{root}/reports/architecture/modgraph.py"))
        .arg(format!("{root}/src"))
        .arg("--json")
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            return skip(Need::Python3, &format!("python3 is needed to read the module graph ({e})"));
        }
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let graph: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    for key in ["back_arrows", "circles", "files_over_700_lines", "unplaced_modules"] {
        assert_eq!(graph[key], serde_json::json!([]), "{key}: {}", graph[key]);
    }
    assert!(graph["arrows"].as_u64().unwrap() > 500, "the graph was read: {}", graph["arrows"]);
}
