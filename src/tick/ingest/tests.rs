//! Ingest's decision over random observations: deterministic, bounded per user, and what it
//! leaves is never settled.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::{IngestOutcome, decide};
use crate::config::Config;
use crate::id::TaskId;
use crate::intake::{BOUNDS, Entry, Observed, Seen};
use crate::journal::{Event, State};
use crate::spec::Limits;
use crate::spec::spool_form::parse_spool;

fn id(n: usize) -> TaskId {
    TaskId::from_parts(1_700_000_000_000 + n as u64, 0)
}

/// A submission as `intake::observe` gives it; `priority` above the users' cap is refused by
/// admission (a refusal that depends on the queue, not on the bytes).
fn submission(priority: i32) -> Seen {
    let text = format!("name = \"t\"\ncommand = [\"true\"]\nworkdir = \"/\"\npriority = {priority}\n");
    let submission = parse_spool("t", &text, Limits::default()).expect("a valid spool file");
    Seen::Submission { submission: Box::new(submission), bytes: text.into_bytes() }
}

/// One generated entry: its owner and what it is (see `entry`).
fn entry(index: usize, uid: u32, choice: u8) -> (Entry, Seen) {
    let spec = |seen: Seen| (Entry::listed(uid, &format!("{}.toml", id(index))), seen);
    // A request names the entry before it, so that some name a task of this batch.
    let named = id(index.checked_sub(1).unwrap_or(1_000_000));
    let request = |seen: Seen| (Entry::listed(uid, &format!("{named}.cancel")), seen);
    match choice {
        0 => spec(submission(0)),
        1 => spec(submission(1000)),
        2 => spec(Seen::Refused("spool file is junk".into())),
        3 => spec(Seen::NotReady),
        4 => spec(Seen::Later),
        5 => spec(Seen::Gone),
        6 => spec(Seen::NotRead),
        7 => (Entry::listed(uid, &format!("junk-{index}")), Seen::Unopened),
        8 => request(Seen::Request(String::new())),
        9 => request(Seen::Refused("request is not valid UTF-8".into())),
        10 => request(Seen::NotReady),
        11 => request(Seen::Later),
        _ => request(Seen::NotRead),
    }
}

fn observed(picks: &[(u32, u8)]) -> Observed {
    let entries = picks.iter().enumerate().map(|(i, (uid, choice))| entry(i, *uid, *choice)).collect();
    Observed { entries, deferred: 0, top_moved: None }
}

/// Every entry the outcome settles, by file name.
fn settled(out: &IngestOutcome) -> Vec<&str> {
    let settle = &out.settle;
    let accepted = settle.accepted.iter().chain(&settle.recovered).map(|(entry, _, _)| entry);
    let names = accepted.chain(&settle.consumed).chain(&settle.rejected);
    names.map(|entry| entry.file_name.as_str()).collect()
}

/// Each user's Rejected records: (file name, reason), in order.
fn rejected(out: &IngestOutcome) -> BTreeMap<u32, Vec<(&str, &str)>> {
    let mut by_user: BTreeMap<u32, Vec<(&str, &str)>> = BTreeMap::new();
    for record in &out.records {
        if let Event::Rejected { spool_file, submitter_uid, reason, .. } = &record.event {
            by_user.entry(*submitter_uid).or_default().push((spool_file, reason));
        }
    }
    by_user
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Goal: the same observation gives the same outcome; no user gets more than
    /// `refusals_per_user` Rejected records plus one summary; an entry left (not ready, over
    /// the byte budget, gone, unread, or past its owner's bound) is never settled, and the
    /// summary counts exactly the entries left past the bound.
    #[test]
    fn decide_is_pure_and_bounded_per_user(
        picks in proptest::collection::vec((1u32..=2, 0u8..13), 0..160),
    ) {
        let observed = observed(&picks);
        let (state, config) = (State::default(), Config::default());
        let out = decide(&state, &observed, Limits::default(), &config, 7);
        let again = decide(&state, &observed, Limits::default(), &config, 7);
        prop_assert_eq!(format!("{out:?}"), format!("{again:?}"));

        let settled = settled(&out);
        let mut once = settled.clone();
        once.sort_unstable();
        once.dedup();
        prop_assert_eq!(once.len(), settled.len(), "an entry settled twice");
        for (entry, seen) in &observed.entries {
            let waits = matches!(seen, Seen::NotReady | Seen::Later | Seen::Gone | Seen::NotRead);
            prop_assert!(!(waits && settled.contains(&entry.file_name.as_str())), "{} settled", entry.file_name);
        }

        let bound = BOUNDS.refusals_per_user;
        for (uid, records) in rejected(&out) {
            prop_assert!(records.len() <= bound + 1, "uid {} got {} Rejected records", uid, records.len());
            let refusals: Vec<&str> = records.iter().filter(|(f, _)| *f != "(more)").map(|(f, _)| *f).collect();
            let summary = records.iter().find(|(f, _)| *f == "(more)").map(|(_, reason)| *reason);
            let mine: Vec<&Entry> = observed.entries.iter().map(|(e, _)| e).filter(|e| e.uid == uid).collect();
            // The entries after the bound-th refusal: none settled, all counted in the summary.
            prop_assert!(refusals.len() <= bound, "uid {} got {} refusals", uid, refusals.len());
            let last = (refusals.len() == bound).then(|| refusals[bound - 1]);
            let past: Vec<&&Entry> = match last {
                Some(name) => {
                    let at = mine.iter().position(|e| e.file_name == *name).expect("a refused entry");
                    mine[at + 1..].iter().collect()
                }
                None => Vec::new(),
            };
            for entry in &past {
                prop_assert!(!settled.contains(&entry.file_name.as_str()), "{} settled past the bound", entry.file_name);
            }
            match summary {
                Some(reason) => prop_assert!(
                    reason.starts_with(&format!("{} more spool entries of uid {uid} were left", past.len())),
                    "{}", reason
                ),
                None => prop_assert!(past.is_empty(), "uid {} left {} entries without a summary", uid, past.len()),
            }
        }
    }
}

/// Goal: a flood of one user's refusals writes `refusals_per_user` records and one summary,
/// leaves the rest unsettled, and another user's entries in the same tick are all judged.
#[test]
fn one_users_flood_is_summarised_and_anothers_entries_are_judged() {
    let mut picks: Vec<(u32, u8)> = (0..40).map(|_| (1, 2)).collect();
    picks.extend((0..5).map(|_| (2, 0)));
    picks.extend((0..3).map(|_| (2, 2)));
    let observed = observed(&picks);
    let out = decide(&State::default(), &observed, Limits::default(), &Config::default(), 7);
    let by_user = rejected(&out);
    assert_eq!(by_user[&1].len(), BOUNDS.refusals_per_user + 1);
    assert_eq!(
        by_user[&1].last().unwrap().1,
        format!(
            "8 more spool entries of uid 1 were left for later ticks: after {} refusals in one tick, the rest of a user's folder waits",
            BOUNDS.refusals_per_user
        )
    );
    assert_eq!(by_user[&2].len(), 3, "uid 2's own refusals, no summary");
    assert_eq!((out.ingested, out.rejected), (5, 35));
    assert_eq!(out.settle.accepted.len(), 5);
    assert_eq!(out.settle.rejected.len(), 35, "uid 1's 8 left entries stay in the spool");
    let submitted = out.records.iter().filter(|r| matches!(r.event, Event::Submitted { .. })).count();
    assert_eq!(submitted, 5);
}

/// Goal: a cancel ends what a task's requests in the same tick can do: a hold, release or
/// update filed after it (judged against a State that still shows the task waiting) is
/// consumed without a record, so the tick never writes a record its fold ignores (found by
/// the guide's walk-through: `carma hold @`, `carma cancel @`, then one tick).
#[test]
fn requests_after_a_cancel_in_the_same_tick_write_nothing() {
    let task = id(0);
    let mut entries = vec![(Entry::listed(0, &format!("{task}.toml")), submission(0))];
    for verb in ["cancel", "hold", "release", "update"] {
        entries.push((Entry::listed(0, &format!("{task}.{verb}")), Seen::Request("priority = 1\n".into())));
    }
    let observed = Observed { entries, deferred: 0, top_moved: None };
    let out = decide(&State::default(), &observed, Limits::default(), &Config::default(), 7);
    let kinds: Vec<&str> = out.records.iter().map(|r| r.event.kind()).collect();
    assert_eq!(kinds, ["Submitted", "Cancelled"]);
    assert_eq!(out.settle.consumed.len(), 4, "every request is consumed");
    assert_eq!(out.rejected, 0);
}
