//! Crash safety of submit + ingest against real SIGKILLs.
//!
//! Method: for 200 iterations, several `carma submit` processes run at once while
//! `carma tick` runs in a loop and is SIGKILLed at random moments (sometimes mid-commit,
//! sometimes between the commit and the spool cleanup). Afterwards one clean tick drains
//! the spool. Then every id that submit printed must appear exactly once as Submitted,
//! nothing but Submitted, Pending and TickCompleted may be in the journal, and the journal must open
//! cleanly (the fake machine has no GPUs, so tasks only gain a Pending reason). The seed is printed so a failure can be replayed with CARMA_CRASH_SEED.

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::TestHome;

const ITERATIONS: usize = 200;
const SUBMITTERS: usize = 3;

/// xorshift64*: enough randomness for kill timing, with no extra dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn spawn_submit(home: &TestHome, n: usize) -> Child {
    home.cmd()
        .args(["submit", "--parsable", "--name", &format!("job{n}"), "--", "python", "train.py"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn submit")
}

#[test]
fn killed_ticks_never_lose_or_duplicate_a_submission() {
    let seed = std::env::var("CARMA_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    eprintln!("crash-safety seed: {seed} (rerun with CARMA_CRASH_SEED={seed})");
    let mut rng = Rng(seed);
    let home = TestHome::new();
    let mut printed: Vec<String> = Vec::new();
    let mut kills = 0;
    for iteration in 0..ITERATIONS {
        let submits: Vec<Child> =
            (0..SUBMITTERS).map(|n| spawn_submit(&home, iteration * SUBMITTERS + n)).collect();
        // A tick loop running alongside, killed after a random delay of 0–8 ms.
        let mut tick =
            home.cmd().arg("tick").stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn tick");
        std::thread::sleep(Duration::from_micros(rng.below(8000)));
        if tick.try_wait().expect("poll tick").is_none() {
            kills += 1;
        }
        let _ = tick.kill();
        let _ = tick.wait();
        for child in submits {
            let out = child.wait_with_output().expect("submit output");
            assert!(out.status.success(), "submit failed: {}", String::from_utf8_lossy(&out.stderr));
            printed.push(String::from_utf8(out.stdout).unwrap().trim().to_string());
        }
    }
    assert!(kills > ITERATIONS / 4, "the test must actually kill ticks mid-run (killed {kills})");
    // One clean tick drains everything left in the spool.
    let started = Instant::now();
    home.ok(&["tick"]);
    assert!(started.elapsed() < Duration::from_secs(60));
    let leftover: Vec<_> =
        std::fs::read_dir(home.spool()).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    assert!(leftover.is_empty(), "spool drained, found {leftover:?}");

    let mut submitted: BTreeMap<String, usize> = BTreeMap::new();
    for event in home.events() {
        match event["kind"].as_str().unwrap() {
            "Submitted" => *submitted.entry(event["task"].as_str().unwrap().to_string()).or_default() += 1,
            // Without GPUs every task waits, with its reason recorded once.
            "TickCompleted" | "Pending" => {}
            other => panic!("unexpected event {other}: {event}"),
        }
    }
    let duplicates: Vec<_> = submitted.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicates.is_empty(), "ids submitted twice: {duplicates:?}");
    let mut expected = printed.clone();
    expected.sort();
    let journaled: Vec<String> = submitted.into_keys().collect();
    assert_eq!(journaled.len(), ITERATIONS * SUBMITTERS);
    assert_eq!(journaled, expected, "journal ids == printed ids");
    // The journal opens cleanly for writing too, and redb finds it consistent.
    let mut db = redb::Database::open(home.path().join("carma.redb")).expect("journal opens");
    assert!(db.check_integrity().expect("integrity check runs"), "redb integrity");
}
