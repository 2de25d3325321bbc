//! `carma journal check` and the tick agree on which journals are damaged (issue 21, item 9).
//!
//! Goal: a writer (the tick's write path, `session::write`) never appends to a
//! journal that `carma journal check` calls damaged, and never refuses one it calls sound.
//! Before `journal::verdict`, 22 of 100 single-bit flips and 28 of 100 overwritten blocks left
//! a journal that check called damaged and the tick went on appending to.
//!
//! Method: the adversarial experiment itself. A real journal (the simulator's 1,200-odd
//! records, written again four to a commit with a snapshot every 600, so that most records lie
//! before the snapshot, where no tick reads) gets seeded damage in the pages that hold data: single-bit flips
//! and 4 KiB blocks (page-aligned) of random bytes. For each damaged copy, written in place as
//! another program would, `journal::check::check` runs, then a write through the session the
//! tick uses appends one record, and the test asserts:
//! - check leaves the file byte for byte as it was;
//! - check says not sound => the write is refused with exactly the one-line error
//!   `verdict::refusal` makes of that report (`journal PATH is damaged (...); nothing was
//!   written; ...`), exit code 3, and the file is byte for byte unchanged;
//! - check says sound => the write succeeds and check still says sound afterwards.
//!
//! It also counts the damaged copies that the writer of before (open, snapshot + tail replay)
//! would have appended to, to show that the experiment still finds the old disagreement.
//! `CARMA_VERDICT_EACH=N` sets the random cases of each kind (default 24, about 40 s with the
//! end-to-end test in a debug build on 2 cores; the experiment is
//! `CARMA_VERDICT_EACH=100`); `--nocapture` prints the counts. The simulator's journal is not
//! byte-identical from run to run, so the counts vary a little; the targeted cases do not.
//!
//! The end-to-end test runs the real `carma tick` binary on a journal damaged before its
//! snapshot (a record no tick reads) and asserts exit 3 and the exact one-line message.

mod common;

use std::path::Path;
use std::time::Duration;

use carma::home::Home;
use carma::journal::store::ReadOpen;
use carma::journal::{Event, Journal, Record, check, verdict};
use carma::session;
use carma::sim::faults::Rng;
use common::TestHome;

const PAGE: usize = 4096;
const REFUSED_TAIL: &str =
    "; nothing was written; run `carma journal check` for details and `carma journal salvage` to recover";

#[derive(Debug, Clone, Copy)]
enum Damage {
    Flip(usize, u8),
    Block(usize),
    /// One payload bit of every copy of a record's frame: no intact copy left.
    EveryCopy(u64),
}

impl Damage {
    fn apply(self, original: &[u8]) -> Vec<u8> {
        let mut bytes = original.to_vec();
        match self {
            Damage::Flip(at, bit) => bytes[at] ^= 1 << bit,
            Damage::Block(at) => {
                let mut rng = Rng::new(at as u64);
                let end = (at + PAGE).min(bytes.len());
                bytes[at..end].iter_mut().for_each(|b| *b = rng.next_u64() as u8);
            }
            Damage::EveryCopy(seq) => {
                common::frame_offsets(original, seq).iter().for_each(|at| bytes[at + 20] ^= 0x10)
            }
        }
        bytes
    }
}

/// Seeded flips and blocks in the pages that hold data (redb preallocates zeroed space).
fn plan(bytes: &[u8], each: usize, last_seq: u64) -> Vec<Damage> {
    let used: Vec<usize> = (0..bytes.len())
        .step_by(PAGE)
        .filter(|&at| bytes[at..(at + PAGE).min(bytes.len())].iter().any(|&b| b != 0))
        .collect();
    let mut rng = Rng::new(21);
    // Damage the writer of before never read (a record before the snapshot), and damage it
    // did (the last record), whatever the random cases hit.
    let mut plan = vec![Damage::EveryCopy(5), Damage::EveryCopy(last_seq)];
    for _ in 0..each {
        let page = used[(rng.next_u64() % used.len() as u64) as usize];
        let at = (page + (rng.next_u64() % PAGE as u64) as usize).min(bytes.len() - 1);
        plan.push(Damage::Flip(at, (rng.next_u64() % 8) as u8));
        plan.push(Damage::Block(used[(rng.next_u64() % used.len() as u64) as usize]));
    }
    plan
}

/// What one damaged copy did.
#[derive(Debug, Default, Clone)]
struct Outcome {
    damaged: bool,
    /// The writer of before (open, load the State) would have appended to it.
    old_writer_appends: bool,
    /// The kinds of problem check found, `+`-joined.
    kinds: String,
}

fn probe(n: u64) -> Record {
    Record { time_ms: n, event: Event::GpuProbeStatus { detail: format!("verdict {n}") } }
}

fn append_one(home: &Home) -> carma::Result<()> {
    session::write(home, Duration::from_secs(10), |journal, state| journal.append(&[probe(1)], state))
}

fn run_case(home: &Home, original: &[u8], damage: Damage) -> Result<Outcome, String> {
    let path = home.journal_path();
    let damaged = damage.apply(original);
    std::fs::write(&path, &damaged).unwrap();
    let report = check::check(&path).map_err(|e| format!("check could not run: {e}"))?;
    if std::fs::read(&path).unwrap() != damaged {
        return Err("check changed the file".into());
    }
    let kinds = report.problems.iter().map(|p| p.kind).collect::<std::collections::BTreeSet<_>>();
    let outcome = Outcome {
        damaged: !report.sound,
        old_writer_appends: old_writer_appends(&damaged),
        kinds: kinds.into_iter().collect::<Vec<_>>().join("+"),
    };
    match (report.sound, append_one(home)) {
        (false, Ok(())) => Err(format!("check says damaged, the write went through: {:?}", report.problems)),
        (false, Err(refused)) => {
            let expected = verdict::refusal(&path, &report).map(|e| e.to_string());
            let message = refused.to_string();
            if Some(&message) != expected.as_ref() || !message.ends_with(REFUSED_TAIL) {
                return Err(format!("refused with {message:?}, expected {expected:?}"));
            }
            if refused.exit_code() != carma::error::EXIT_DAMAGED {
                return Err(format!("exit code {} for {message}", refused.exit_code()));
            }
            if std::fs::read(&path).unwrap() != damaged {
                return Err("the refused write changed the file".into());
            }
            Ok(outcome)
        }
        (true, Err(e)) => Err(format!("check says sound, the write failed: {e}")),
        (true, Ok(())) => match check::check(&path) {
            Ok(after) if after.sound => Ok(outcome),
            after => Err(format!("sound before the write, not after: {after:?}")),
        },
    }
}

/// Whether the writer of before would have appended: it opened the file (after the header
/// check) and loaded the snapshot and the tail. Tried on a copy. The open is read-only where
/// redb allows it, because a debug build of redb walks every page on a writable open (its
/// `mark_allocated_page_for_debug`), which the release build that runs as `carma tick` does
/// not; a file that needs a repair gets the writable open, which walks every page in both.
fn old_writer_appends(bytes: &[u8]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.redb");
    std::fs::write(&copy, bytes).unwrap();
    match Journal::open_read_only(&copy) {
        Ok(ReadOpen::Ready(mut journal)) => journal.load_state().is_ok(),
        Ok(ReadOpen::NeedsRepair) => {
            Journal::open(&copy).and_then(|mut journal| journal.load_state()).is_ok()
        }
        Err(_) => false,
    }
}

/// The seq of the snapshot and of the last record of a sound journal's `bytes`.
fn shape(bytes: &[u8]) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.redb");
    std::fs::write(&copy, bytes).unwrap();
    let Ok(ReadOpen::Ready(journal)) = Journal::open_read_only(&copy) else { panic!("a sound journal") };
    (journal.snapshot_seq().unwrap(), journal.last_seq().unwrap())
}

fn cases_each() -> usize {
    std::env::var("CARMA_VERDICT_EACH").ok().and_then(|n| n.parse().ok()).unwrap_or(24)
}

#[test]
fn check_and_the_writer_agree_on_every_damaged_copy() {
    let scratch = tempfile::tempdir().unwrap();
    let simulated = common::journals::simulated_journal(scratch.path());
    let original = common::journals::with_snapshots(&simulated, scratch.path(), 600);
    assert!(old_writer_appends(&original), "the undamaged journal loads");
    let (snapshot_seq, last_seq) = shape(&original);
    assert!(snapshot_seq > 5, "the simulator's journal has a snapshot past record 5");
    let cases = plan(&original, cases_each(), last_seq);
    let outcomes = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for worker in 0..2 {
            let (cases, original, outcomes, next) = (&cases, &original, &outcomes, &next);
            let home = Home::at(scratch.path().join(format!("worker-{worker}"))).without_view();
            carma::session::init(&home, "").unwrap();
            scope.spawn(move || {
                while let Some(&damage) = cases.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                    let outcome = run_case(&home, original, damage);
                    outcomes.lock().unwrap().push((damage, outcome));
                }
            });
        }
    });
    let outcomes = outcomes.into_inner().unwrap();
    summarize(&outcomes);
    let failures: Vec<String> =
        outcomes.iter().filter_map(|(d, o)| o.as_ref().err().map(|e| format!("{d:?}: {e}"))).collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        outcomes.len(),
        failures.join("\n")
    );
    // Both outcomes must occur, or the experiment proves nothing; and the record before the
    // snapshot is the disagreement of before (the old writer appended to it).
    let ok: Vec<&Outcome> = outcomes.iter().filter_map(|(_, o)| o.as_ref().ok()).collect();
    assert!(ok.iter().any(|o| o.damaged) && ok.iter().any(|o| !o.damaged), "{ok:?}");
    let (before_snapshot, last) = (ok_of(&outcomes, 5), ok_of(&outcomes, last_seq));
    assert!(before_snapshot.damaged && before_snapshot.old_writer_appends, "{before_snapshot:?}");
    assert!(last.damaged && !last.old_writer_appends, "{last:?}");
}

fn ok_of(outcomes: &[(Damage, Result<Outcome, String>)], seq: u64) -> &Outcome {
    let found = outcomes.iter().find(|(d, _)| matches!(d, Damage::EveryCopy(s) if *s == seq));
    found.and_then(|(_, o)| o.as_ref().ok()).expect("the targeted case ran")
}

/// Prints, per kind of damage: copies, called damaged by check (and refused by the writer),
/// and of those, how many the writer of before would have appended to.
fn summarize(outcomes: &[(Damage, Result<Outcome, String>)]) {
    println!("damage  copies damaged(refused) old-writer-appended failed");
    for kind in ["flip", "block"] {
        let rows: Vec<_> = outcomes
            .iter()
            .filter(|(d, _)| matches!((kind, d), ("flip", Damage::Flip(..)) | ("block", Damage::Block(_))))
            .collect();
        let ok: Vec<&Outcome> = rows.iter().filter_map(|(_, o)| o.as_ref().ok()).collect();
        let damaged = ok.iter().filter(|o| o.damaged).count();
        let old: Vec<&str> =
            ok.iter().filter(|o| o.damaged && o.old_writer_appends).map(|o| o.kinds.as_str()).collect();
        println!("{kind:<7} {:>6} {damaged:>16} {:>19} {:>6}", rows.len(), old.len(), rows.len() - ok.len());
        let mut by_kind = std::collections::BTreeMap::new();
        old.iter().for_each(|k| *by_kind.entry(*k).or_insert(0) += 1);
        println!("        old writer appended to, by the problems check found: {by_kind:?}");
    }
}

/// Goal: the real `carma tick` refuses a journal damaged where no tick reads (a record before
/// the snapshot), with exit 3 and the one-line message, and leaves it unchanged.
#[test]
fn tick_refuses_a_journal_damaged_before_its_snapshot() {
    let scratch = tempfile::tempdir().unwrap();
    let simulated = common::journals::simulated_journal(scratch.path());
    let journal = common::journals::with_snapshots(&simulated, scratch.path(), 600);
    assert!(shape(&journal).0 > 5, "record 5 lies before the snapshot");
    let home = TestHome::new();
    let path = home.path().join("carma.redb");
    std::fs::write(&path, &journal).unwrap();
    home.ok(&["tick"]);
    let copies = common::damage_every_copy(&path, 5);
    assert!(copies > 0);
    let damaged = std::fs::read(&path).unwrap();
    let report = check::check(&path).unwrap();
    let task = report
        .problems
        .iter()
        .find_map(|p| p.task.clone())
        .map(|t| format!(" (task {t})"))
        .unwrap_or_default();
    let out = home.run(&["tick"]);
    let message = format!(
        "journal {} is damaged (record 5{task}: checksum mismatch, and 1 more problem){REFUSED_TAIL}",
        path.display()
    );
    common::assert_error(&out, 3, &message);
    assert_eq!(std::fs::read(&path).unwrap(), damaged, "nothing was written");
    assert!(!Path::new(&format!("{}.seal", path.display())).exists());
}
