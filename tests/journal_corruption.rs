//! A damaged journal never crashes carma and never reads as something it was not.
//!
//! Goal (issue 13): on seeded damage of real journals, 0 panics and 0 silent changes; `carma
//! journal check` flags every copy whose reading changed; `carma journal salvage` recovers
//! every record whose bytes were outside the damage.
//!
//! Method: three journals, written by the real code: one by `carma tick` with real tiny jobs on
//! two fake GPUs (OOM recovery, a failure, a cancel), one by the simulator (over a thousand
//! records, so it has a snapshot), and carma 0.1's golden `tick.redb` (format 1: records with
//! no checksum). Each gets seeded truncations, random 512-byte blocks and single-bit flips (in
//! the pages that hold data), plus two header flips: the god byte's primary bit, and the
//! current commit slot's root pointer (which redb would follow unchecked). For every damaged
//! copy the read
//! verbs (`queue --all --json`, `events --json`, `report --journal --json`), `journal check`
//! and `journal salvage` run as subprocesses, and the test asserts:
//! - no run panics or dies of a signal, and every failure is a one-line `error: ...`;
//! - each read verb either fails or prints exactly what it printed for the undamaged journal
//!   (format 2 only: a changed byte inside a format-1 record is undetectable by design, so
//!   there the assertion is the next one);
//! - `journal check` exits 3 whenever a read verb's output differs or it fails, except when
//!   the only failure is `report` refusing a file that redb wants repaired first (as after a
//!   crash: the god byte's primary bit can do that); check must then say it read a repaired
//!   copy;
//! - salvage succeeds, its new journal passes `journal check`, every record it kept is the
//!   original record with that seq (by its `kept_ranges` mapping), and (format 2) it kept
//!   every record that has at least one intact frame in the damaged file: a frame of the
//!   undamaged file (found by scanning its bytes, old copies included) whose byte range lies
//!   inside the damaged file and does not overlap the damaged bytes.
//!
//! `CARMA_CORRUPTION_EACH=N` sets the cases of each kind per format-2 journal (default 12) for a
//! longer run; the summary line (`--nocapture`) gives the counts.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use carma::journal::frame::{self, FORMAT_VERSION, FRAME_MAGIC};
use carma::journal::{Journal, Record, store::ReadOpen};
use carma::sim::faults::Rng;
use common::TestHome;
use common::cluster::{TWO_A100, TWO_A100_FULL};

/// What was done to a copy.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Truncate(usize),
    Block(usize),
    Flip(usize, u8),
}

impl Damage {
    fn apply(self, original: &[u8], rng: &mut Rng) -> Vec<u8> {
        let mut bytes = original.to_vec();
        match self {
            Damage::Truncate(len) => bytes.truncate(len),
            Damage::Block(at) => {
                for byte in &mut bytes[at..at + 512] {
                    *byte = rng.next_u64() as u8;
                }
            }
            Damage::Flip(at, bit) => bytes[at] ^= 1 << bit,
        }
        bytes
    }

    /// True when the byte range `start..end` of the undamaged file is intact in the copy.
    fn spares(self, start: usize, end: usize) -> bool {
        match self {
            Damage::Truncate(len) => end <= len,
            Damage::Block(at) => end <= at || start >= at + 512,
            Damage::Flip(at, _) => !(start..end).contains(&at),
        }
    }
}

/// A journal under test, with what the undamaged file reads as.
struct Subject {
    name: &'static str,
    bytes: Vec<u8>,
    checksummed: bool,
    baseline: Vec<Output>,
    records: Vec<Record>,
    /// (start, end, seq) of every sound frame in the undamaged file, old copies included.
    frames: Vec<(usize, usize, u64)>,
}

/// The seeded damage for `bytes`: truncations anywhere, blocks and flips in pages that hold
/// data (redb preallocates; damage in zeroed space tells nothing).
fn plan(bytes: &[u8], seed: u64, each: usize) -> Vec<Damage> {
    const PAGE: usize = 4096;
    let used: Vec<usize> = (0..bytes.len())
        .step_by(PAGE)
        .filter(|&at| bytes[at..(at + PAGE).min(bytes.len())].iter().any(|&b| b != 0))
        .collect();
    let mut rng = Rng::new(seed);
    let in_use = |rng: &mut Rng, room: usize| {
        let page = used[(rng.next_u64() % used.len() as u64) as usize];
        (page + (rng.next_u64() % PAGE as u64) as usize).min(bytes.len() - room)
    };
    let mut plan = Vec::new();
    for _ in 0..each {
        plan.push(Damage::Truncate((rng.next_u64() % bytes.len() as u64) as usize));
        plan.push(Damage::Block(in_use(&mut rng, 512)));
        let at = in_use(&mut rng, 1);
        plan.push(Damage::Flip(at, (rng.next_u64() % 8) as u8));
    }
    plan
}

#[test]
fn damaged_journals_never_panic_never_change_silently_and_salvage_keeps_the_rest() {
    let scratch = scratch();
    let subjects = [
        subject("tick", tick_journal(), true),
        subject("simulated", common::journals::simulated_journal(scratch.path()), true),
        subject("carma-0.1", golden("tick.redb"), false),
    ];
    let mut cases = Vec::new();
    for (i, s) in subjects.iter().enumerate() {
        let each = if s.checksummed { cases_each() } else { cases_each().div_ceil(2) };
        cases.extend(plan(&s.bytes, 13 + i as u64, each).into_iter().map(|d| (i, d)));
        if s.checksummed {
            // The god byte's primary bit, and the current commit slot's root pointer.
            let primary = usize::from(s.bytes[9] & 1 != 0);
            cases.push((i, Damage::Flip(9, 0)));
            cases.push((i, Damage::Flip(64 + 128 * primary + 8, 2)));
        }
    }
    let outcomes = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for worker in 0..2 {
            let (cases, subjects, outcomes, next) = (&cases, &subjects, &outcomes, &next);
            let dir = scratch.path().join(format!("worker-{worker}"));
            scope.spawn(move || {
                let home = TestHome::new();
                std::fs::create_dir_all(&dir).unwrap();
                while let Some(&(i, damage)) =
                    cases.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    let outcome = run_case(&home, &dir, &subjects[i], damage);
                    outcomes.lock().unwrap().push((subjects[i].name, damage, outcome));
                }
            });
        }
    });
    let outcomes = outcomes.into_inner().unwrap();
    summarize(&outcomes);
    let failures: Vec<String> = outcomes
        .iter()
        .filter_map(|(name, damage, o)| o.as_ref().err().map(|e| format!("{name} {damage:?}: {e}")))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        outcomes.len(),
        failures.join("\n")
    );
    // The matrix must exercise both outcomes, or it proves nothing.
    let changed = outcomes.iter().filter(|(_, _, o)| o.as_ref().is_ok_and(Outcome::changed)).count();
    assert!(changed > outcomes.len() / 5, "only {changed} of {} copies read differently", outcomes.len());
    assert!(changed < outcomes.len(), "every copy read differently");
}

fn cases_each() -> usize {
    std::env::var("CARMA_CORRUPTION_EACH").ok().and_then(|n| n.parse().ok()).unwrap_or(12)
}

/// What one damaged copy did.
#[derive(Debug, Clone, Copy, Default)]
struct Outcome {
    /// Some read verb failed (with one line).
    error: bool,
    /// Some read verb printed something else with exit 0 (format 1 only; flagged by check).
    silent: bool,
    /// `journal check` exited 3.
    flagged: bool,
    /// Records salvage lost, and kept from the raw scan only.
    lost: u64,
    from_scan: u64,
}

impl Outcome {
    fn changed(&self) -> bool {
        self.error || self.silent
    }
}

/// Prints, per journal and kind of damage: copies, how they read, what check and salvage did.
fn summarize(outcomes: &[(&str, Damage, Result<Outcome, String>)]) {
    let mut rows: std::collections::BTreeMap<(&str, &str), [u64; 8]> = Default::default();
    for (name, damage, outcome) in outcomes {
        let kind = match damage {
            Damage::Truncate(_) => "truncate",
            Damage::Block(_) => "block",
            Damage::Flip(_, _) => "flip",
        };
        let row = rows.entry((name, kind)).or_default();
        row[0] += 1;
        match outcome {
            Ok(o) => {
                row[1] += u64::from(!o.changed());
                row[2] += u64::from(o.error);
                row[3] += u64::from(o.silent && !o.error);
                row[4] += u64::from(o.flagged);
                row[5] += o.lost;
                row[6] += o.from_scan;
            }
            Err(_) => row[7] += 1,
        }
    }
    println!("journal    damage   copies same error silent flagged lost from-scan failed");
    for ((name, kind), r) in rows {
        println!(
            "{name:<10} {kind:<8} {:>6} {:>4} {:>5} {:>6} {:>7} {:>4} {:>9} {:>6}",
            r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]
        );
    }
}

/// Runs everything on one damaged copy.
fn run_case(home: &TestHome, dir: &Path, subject: &Subject, damage: Damage) -> Result<Outcome, String> {
    let mut rng = Rng::new(damage_seed(damage));
    let damaged = damage.apply(&subject.bytes, &mut rng);
    let file = dir.join("damaged.redb");
    let mut outcome = Outcome::default();
    // Whether every failure was `report` refusing a file to repair.
    let mut needs_repair_only = true;
    for (args, baseline) in read_verbs(&file).iter().zip(&subject.baseline) {
        std::fs::write(home.path().join("carma.redb"), &damaged).unwrap();
        std::fs::write(&file, &damaged).unwrap();
        let out = run(home, args);
        let err = one_line_error(&out).map_err(|e| format!("{args:?}: {e}"))?;
        match (out.status.code(), err) {
            (Some(0), None) if normalized(&out) == normalized(baseline) => {}
            (Some(0), None) if !subject.checksummed => (outcome.silent, needs_repair_only) = (true, false),
            (Some(0), None) => return Err(format!("{args:?} changed silently")),
            (_, err) => {
                outcome.error = true;
                needs_repair_only &= err.is_some_and(|e| e.contains("needs a repair after a crash"));
            }
        }
    }
    std::fs::write(&file, &damaged).unwrap();
    let check = run(home, &["journal", "check", "--journal", file.to_str().unwrap(), "--json"]);
    one_line_error(&check).map_err(|e| {
        // CARMA_CORRUPTION_KEEP=DIR keeps the copies whose check failed, to replay by hand.
        if let Some(keep) = std::env::var_os("CARMA_CORRUPTION_KEEP") {
            let name = format!("{}-{damage:?}.redb", subject.name).replace(['(', ')', ',', ' '], "_");
            let _ = std::fs::write(Path::new(&keep).join(name), &damaged);
        }
        format!("check: {e}")
    })?;
    let report: serde_json::Value =
        serde_json::from_str(&common::stdout(&check)).map_err(|e| format!("check printed no JSON: {e}"))?;
    outcome.flagged = check.status.code() == Some(3);
    match check.status.code() {
        Some(3) => {}
        Some(0) if !outcome.changed() => {}
        // A file that redb wants repaired before reading (as after a crash) is read by the
        // other verbs after their repair; `report --journal` refuses it. check must say so.
        Some(0) if needs_repair_only && report["opened"] == "repaired-copy" => {}
        code => return Err(format!("check exited {code:?} though the reading changed: {report}")),
    }
    (outcome.lost, outcome.from_scan) = salvage_case(home, dir, subject, damage, &file)?;
    Ok(outcome)
}

fn salvage_case(
    home: &TestHome,
    dir: &Path,
    subject: &Subject,
    damage: Damage,
    file: &Path,
) -> Result<(u64, u64), String> {
    let new = dir.join("salvaged.redb");
    let _ = std::fs::remove_file(&new);
    let out = run(
        home,
        &[
            "journal",
            "salvage",
            "--journal",
            file.to_str().unwrap(),
            "--out",
            new.to_str().unwrap(),
            "--json",
        ],
    );
    if out.status.code() != Some(0) {
        return Err(format!("salvage failed: {}", common::stderr(&out)));
    }
    let report: serde_json::Value = serde_json::from_str(&common::stdout(&out)).map_err(|e| e.to_string())?;
    if report["out_sound"] != true {
        return Err(format!("the salvaged journal is not sound: {report}"));
    }
    let salvaged = read_records(&new);
    let mut kept = std::collections::BTreeSet::new();
    for range in report["kept_ranges"].as_array().unwrap() {
        let (first, last, new_first) = (
            range["first_seq"].as_u64().unwrap(),
            range["last_seq"].as_u64().unwrap(),
            range["new_first_seq"].as_u64().unwrap(),
        );
        for seq in first..=last {
            let original = subject.records.get(seq as usize - 1);
            let copy = salvaged.get((new_first + seq - first) as usize - 1);
            if subject.checksummed && (original.is_none() || original != copy) {
                return Err(format!("salvaged record for original seq {seq} is not the original"));
            }
            kept.insert(seq);
        }
    }
    if salvaged.len() != kept.len() {
        return Err(format!("{} records salvaged, {} in kept_ranges", salvaged.len(), kept.len()));
    }
    if subject.checksummed {
        let intact = subject.frames.iter().filter(|(start, end, _)| damage.spares(*start, *end));
        if let Some((_, _, seq)) = intact.copied().find(|(_, _, seq)| !kept.contains(seq)) {
            return Err(format!("record {seq} has an intact frame but was not salvaged: {report}"));
        }
    }
    Ok((report["lost_records"].as_u64().unwrap_or(0), report["from_raw_scan"].as_u64().unwrap_or(0)))
}

/// `Err` when the run panicked, died of a signal, or failed without exactly one error line.
fn one_line_error(out: &Output) -> Result<Option<String>, String> {
    let err = common::stderr(out);
    if err.contains("panicked") || out.status.code().is_none() {
        return Err(format!("panic or signal ({:?}): {err}", out.status));
    }
    if out.status.success() {
        return Ok(None);
    }
    if !err.starts_with("error: ") || err.lines().count() != 1 {
        return Err(format!("not a one-line error: {err}"));
    }
    Ok(Some(err))
}

fn read_verbs(file: &Path) -> Vec<Vec<String>> {
    let file = file.to_str().unwrap().to_string();
    vec![
        vec!["queue".into(), "--all".into(), "--json".into()],
        vec!["events".into(), "--json".into()],
        vec!["report".into(), "--journal".into(), file, "--json".into()],
    ]
}

fn run(home: &TestHome, args: &[impl AsRef<std::ffi::OsStr>]) -> Output {
    let mut cmd: Command = home.cmd();
    cmd.env("TMPDIR", scratch_base()).args(args).output().expect("spawn carma")
}

/// stdout without the time of reading (`carma queue`'s `generated_ms`) and the journal's
/// path (`carma report`'s `journal`).
fn normalized(out: &Output) -> String {
    let text = common::stdout(out);
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(&text) else { return text };
    if let Some(object) = value.as_object_mut() {
        object.remove("generated_ms");
    }
    for report in value["reports"].as_array_mut().into_iter().flatten() {
        report.as_object_mut().map(|r| r.remove("journal"));
    }
    value.to_string()
}

fn damage_seed(damage: Damage) -> u64 {
    match damage {
        Damage::Truncate(n) | Damage::Block(n) | Damage::Flip(n, _) => n as u64,
    }
}

fn subject(name: &'static str, bytes: Vec<u8>, checksummed: bool) -> Subject {
    let home = TestHome::new();
    let file = home.path().join("damaged.redb");
    std::fs::write(&file, &bytes).unwrap();
    let baseline = read_verbs(&file)
        .iter()
        .map(|args| {
            std::fs::write(home.path().join("carma.redb"), &bytes).unwrap();
            let out = run(&home, args);
            assert!(out.status.success(), "{name} {args:?}: {}", common::stderr(&out));
            out
        })
        .collect();
    let records = read_records(&file);
    assert!(records.len() > 20, "{name}: only {} records", records.len());
    Subject { name, frames: frames(&bytes), bytes, checksummed, baseline, records }
}

fn read_records(path: &Path) -> Vec<Record> {
    let ReadOpen::Ready(journal) = Journal::open_read_only(path).unwrap() else { panic!("needs repair") };
    let mut records = Vec::new();
    journal
        .for_each(1, |_, r| {
            records.push(r);
            Ok(true)
        })
        .unwrap();
    records
}

/// Every sound version-2 frame in `bytes`: (start, end, seq).
fn frames(bytes: &[u8]) -> Vec<(usize, usize, u64)> {
    let mut marker = vec![FORMAT_VERSION];
    marker.extend_from_slice(&FRAME_MAGIC);
    (0..bytes.len().saturating_sub(marker.len()))
        .filter(|&at| bytes[at..].starts_with(&marker))
        .filter_map(|at| frame::decode_frame(&bytes[at..]).ok().map(|(seq, _, len)| (at, at + len, seq)))
        .collect()
}

/// A journal written by `carma tick` with real jobs: collocation, an OOM recovered, a plain
/// failure, a cancelled task.
fn tick_journal() -> Vec<u8> {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let oom = r#"if [ "$CARMA_ATTEMPT" = 1 ]; then echo 'torch.OutOfMemoryError: CUDA out of memory.' >&2; exit 1; fi"#;
    home.submit_sh("a", Some("10GiB"), "sleep 0.3");
    home.submit_sh("b", Some("10GiB"), "true");
    let oom = home.submit_sh("oom", Some("8GiB"), oom);
    home.submit_sh("fail", Some("1GiB"), "exit 3");
    let big = home.submit_sh("big", Some("39GiB"), "true");
    home.ok(&["tick"]);
    home.ok(&["cancel", &big]);
    // The OOM ends while the GPUs read full, so it is recovered (issue 32).
    home.tick_oom_on_full_gpus(&oom, 1, TWO_A100_FULL, TWO_A100);
    home.tick_until_done(Duration::from_secs(60));
    std::fs::read(home.path().join("carma.redb")).unwrap()
}

fn golden(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v0.1.0").join(name)).unwrap()
}

/// Temporary files in memory when the machine has it: salvage and check fsync their copies.
fn scratch_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(scratch_base()).expect("temp dir")
}

/// Goal: the README's procedure ("Recovering a damaged journal") turns a damaged state
/// directory back into a working one, and the tick relearns from the run folders what the lost
/// records said. Method: real jobs on two fake GPUs; every copy of one finished task's
/// Finished record and of one running task's Launched record gets a flipped bit; then the
/// symptoms, `journal check`, `journal salvage`, the swap of files, and ticks to the end.
#[test]
fn the_readme_procedure_recovers_running_and_finished_tasks() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let done = home.submit_sh("done", Some("1GiB"), "true");
    home.tick_until_done(Duration::from_secs(30));
    let starts = home.path().join("starts.log");
    let running =
        home.submit_sh("running", Some("1GiB"), &format!("echo start >> {}; sleep 2", starts.display()));
    home.ok(&["tick"]);
    let events = home.events();
    let seq_of = |task: &str, kind: &str| {
        let event = events.iter().find(|e| e["task"] == task && e["kind"] == kind);
        event.unwrap_or_else(|| panic!("no {kind} for {task}"))["seq"].as_u64().unwrap()
    };
    let (finished, launched) = (seq_of(&done, "Finished"), seq_of(&running, "Launched"));
    let journal = home.path().join("carma.redb");
    assert!(common::damage_every_copy(&journal, finished) > 0);
    assert!(common::damage_every_copy(&journal, launched) > 0);

    // Symptoms: the tick (and every verb that opens the journal) stops with one line naming
    // the record; readers keep answering from the view as of the last good tick.
    let queue = home.run(&["queue", "--all"]);
    assert_eq!(queue.status.code(), Some(0), "{}", common::stderr(&queue));
    assert!(common::stdout(&queue).contains(&running[..8]), "{}", common::stdout(&queue));
    let out = home.run(&["tick"]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(3), "tick: {err}");
    let named = format!(
        "error: journal {} is damaged (record {finished} (task {done}): checksum mismatch, and ",
        journal.display()
    );
    assert!(err.starts_with(&named) && err.lines().count() == 1, "tick: {err}");
    assert!(err.ends_with("; nothing was written; run `carma journal check` for details and `carma journal salvage` to recover\n"), "tick: {err}");
    let check = home.run(&["journal", "check"]);
    assert_eq!(check.status.code(), Some(3), "{}", common::stderr(&check));
    let report = common::stdout(&check);
    for (seq, task) in [(finished, &done), (launched, &running)] {
        assert!(report.contains(&format!("seq {seq} (task {task}): checksum mismatch")), "{report}");
    }

    let new = home.path().join("carma.redb.new");
    let salvage = home.ok(&["journal", "salvage", "--out", new.to_str().unwrap(), "--json"]);
    let salvage: serde_json::Value = serde_json::from_str(&salvage).unwrap();
    assert_eq!(salvage["lost_records"], 2, "{salvage:#}");
    let mut affected = vec![done.clone(), running.clone()];
    affected.sort();
    assert_eq!(salvage["tasks_affected"], serde_json::json!(affected), "{salvage:#}");
    std::fs::rename(&journal, home.path().join("carma.redb.damaged")).unwrap();
    std::fs::rename(&new, &journal).unwrap();

    // The tick adopts the running attempt and reads the finished one's exit record again.
    home.ok(&["tick"]);
    let adopted = home.task_events(&running);
    assert!(adopted.iter().any(|e| e["kind"] == "Launched" && e["data"]["adopted"] == true), "{adopted:#?}");
    assert!(home.task_events(&done).iter().any(|e| e["kind"] == "Finished"));
    let queue = home.tick_until_done(Duration::from_secs(30));
    assert!(queue["tasks"].as_array().unwrap().iter().all(|t| t["state"] == "Finished"), "{queue:#}");
    assert_eq!(std::fs::read_to_string(&starts).unwrap(), "start\n", "the running job ran once");
    home.ok(&["journal", "check"]);
}

/// Goal: the journal verbs refuse bad input with one line and exit 2, and salvage never
/// overwrites a file.
#[test]
fn journal_verbs_refuse_bad_input_with_one_line() {
    let home = TestHome::new();
    let missing = home.path().join("nowhere.redb");
    common::assert_error(
        &home.run(&["journal", "check", "--journal", missing.to_str().unwrap()]),
        2,
        &format!("no journal at {}; give --journal a journal file or a state directory", missing.display()),
    );
    let existing = home.path().join("config.toml");
    let before = std::fs::read(&existing).unwrap();
    common::assert_error(
        &home.run(&["journal", "salvage", "--out", existing.to_str().unwrap()]),
        2,
        &format!("{} exists; salvage never overwrites a file: give --out a new path", existing.display()),
    );
    assert_eq!(std::fs::read(&existing).unwrap(), before);
    let out = home.path().join("new.redb");
    let missing_home = home.path().join("no-home");
    let out = home
        .cmd()
        .env("CARMA_HOME", &missing_home)
        .args(["journal", "salvage", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    common::assert_error(
        &out,
        2,
        &format!(
            "state directory {} does not exist; run `carma init --home {}`",
            missing_home.display(),
            missing_home.display()
        ),
    );
}
