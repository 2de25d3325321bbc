//! `carma journal check`, `backup` and `salvage`: the administrator's tools for keeping a
//! journal and for a damaged one. Each reads the file directly, never changes it, and holds
//! the shared `carma.lock` while it reads a journal that a tick may be writing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::{JournalArgs, JournalWhat};
use crate::error::Error;
use crate::home::{Home, LockGuard, LockMode};
use crate::journal::backup::BackupReport;
use crate::journal::check::{self, CheckReport, Problem};
use crate::journal::salvage::{self, SalvageReport};

/// Problems or lost ranges listed in human output; `--json` has them all.
const LINES_MAX: usize = 50;

pub(super) fn run(home: &Home, wait: Duration, args: JournalArgs) -> anyhow::Result<()> {
    match args.what {
        JournalWhat::Check { journal, json } => {
            let (path, lock_home) = target(home, journal);
            unreadable(&path)?;
            let _lock = lock(lock_home.as_ref(), wait)?;
            let report = check::check(&path)?;
            if json {
                super::render::print_json(&report)?;
            } else {
                print_check(&report)?;
            }
            verdict(&path, &report)
        }
        JournalWhat::Backup { dest, json } => {
            unreadable(&home.journal_path())?;
            let report = crate::journal::backup::backup(home, &dest, wait)?;
            if json {
                super::render::print_json(&report)?;
            } else {
                print_backup(&report)?;
            }
            verdict(Path::new(&report.check.journal), &report.check)
        }
        JournalWhat::Salvage { out, journal, json } => {
            let (path, lock_home) = target(home, journal);
            let lock = lock(lock_home.as_ref(), wait)?;
            let report = salvage::salvage(&path, &out)?;
            drop(lock);
            if json { super::render::print_json(&report) } else { print_salvage(&report) }
        }
    }
}

/// The journal file to read, and the state directory whose lock guards it, if it is one's.
fn target(home: &Home, journal: Option<PathBuf>) -> (PathBuf, Option<Home>) {
    match journal {
        None => (home.journal_path(), Some(home.clone())),
        Some(dir) if dir.is_dir() => {
            let home = Home::at(&dir);
            (home.journal_path(), Some(home))
        }
        Some(file) => {
            // A state directory's own journal, named by its path: take that directory's lock.
            let owner =
                file.parent().map(Home::at).filter(|h| h.journal_path() == file && h.lock_path().exists());
            (file, owner)
        }
    }
}

/// A journal this user cannot read (the system queue's is root's, 0600) is refused with what
/// to run instead, not "Permission denied (os error 13)".
fn unreadable(path: &Path) -> Result<(), Error> {
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else { return Ok(()) };
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call.
    let readable = unsafe { libc::access(c_path.as_ptr(), libc::R_OK) == 0 };
    if readable || !path.exists() {
        return Ok(());
    }
    Err(Error::Denied(format!(
        "cannot check journal {}: only its owner may read it (root, for the system queue); read the queue with `carma queue` and `carma events`, or ask an administrator to run `sudo carma journal check`",
        path.display()
    )))
}

fn lock(home: Option<&Home>, wait: Duration) -> anyhow::Result<Option<LockGuard>> {
    let Some(home) = home else { return Ok(None) };
    Ok(Some(LockGuard::acquire(home, LockMode::Shared, wait)?))
}

/// Exit 0 for a sound journal; otherwise the one-line error (exit 3) after the report.
fn verdict(path: &Path, report: &CheckReport) -> anyhow::Result<()> {
    if report.sound {
        return Ok(());
    }
    let newer_only = report.problems.iter().all(|p| p.kind == "newer-format");
    let next = if newer_only {
        "use the carma that wrote those records or a later one (nothing is damaged)".to_string()
    } else {
        "stop the timer, then run `carma journal salvage --out NEW` and see \"Recovering a damaged journal\" in the README".to_string()
    };
    let count = report.problems.len();
    let summary = format!("{count} problem{} found", if count == 1 { "" } else { "s" });
    Err(Error::JournalDamaged { path: path.to_path_buf(), summary, next }.into())
}

fn print_check(r: &CheckReport) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let verdict = if r.sound { "sound" } else { "DAMAGED" };
    writeln!(out, "journal {} ({}): {verdict}", printable(&r.journal), size(r.bytes))?;
    let c = &r.records;
    match (c.first_seq, c.last_seq) {
        (Some(first), Some(last)) => writeln!(
            out,
            "  records    {} readable, seq {first} to {last}{}",
            c.readable,
            if c.legacy > 0 { format!(" ({} in carma 0.1's format)", c.legacy) } else { String::new() }
        )?,
        _ if r.opened == "unopenable" => writeln!(out, "  records    none: redb cannot open the file")?,
        _ => writeln!(out, "  records    none readable")?,
    }
    if let Some(committed) = c.committed_last_seq {
        writeln!(out, "  committed  up to seq {committed} (meta.last_seq)")?;
    }
    if let Some(tasks) = c.tasks {
        writeln!(out, "  fold       complete: {tasks} task{}", if tasks == 1 { "" } else { "s" })?;
    }
    let snapshot = match r.snapshot.seq {
        Some(seq) => format!("{} (seq {seq})", r.snapshot.status),
        None => r.snapshot.status.to_string(),
    };
    writeln!(out, "  snapshot   {snapshot}")?;
    writeln!(out, "  pages      redb's checksums {}", r.pages)?;
    if r.opened == "repaired-copy" {
        writeln!(out, "  note       the last writer did not close the file; a repaired copy was read")?;
    }
    let s = &r.raw_scan;
    writeln!(
        out,
        "  raw scan   {} frames, {} distinct seqs, {} damaged",
        s.frames, s.seqs, s.damaged_frames
    )?;
    if s.beyond_committed > 0 {
        writeln!(
            out,
            "  note       {} seqs past the last commit (a crash mid-commit; ignored)",
            s.beyond_committed
        )?;
    }
    if !r.problems.is_empty() {
        writeln!(out, "problems:")?;
        for problem in r.problems.iter().take(LINES_MAX) {
            writeln!(out, "  {}", describe(problem))?;
        }
        if r.problems.len() > LINES_MAX {
            writeln!(out, "  … and {} more (--json lists them all)", r.problems.len() - LINES_MAX)?;
        }
    }
    Ok(())
}

/// One problem in words: where, which task, what, and whether the raw scan has it.
fn describe(p: &Problem) -> String {
    let place = match (p.first_seq, p.last_seq) {
        (Some(first), Some(last)) if first == last => format!("seq {first}"),
        (Some(first), Some(last)) => format!("seqs {first} to {last}"),
        _ => p.kind.to_string(),
    };
    let task = p.task.as_ref().map(|t| format!(" (task {t})")).unwrap_or_default();
    let found = match (p.first_seq, p.last_seq) {
        (Some(first), Some(last)) if p.in_raw_scan > 0 => {
            format!("; {} of {} intact in the raw scan", p.in_raw_scan, last - first + 1)
        }
        _ => String::new(),
    };
    printable(&format!("{place}{task}: {}{found}", p.detail))
}

fn print_backup(r: &BackupReport) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "backed up into {} ({}, the lock held {} ms)",
        printable(&r.dest),
        size(r.bytes),
        r.lock_held_ms
    )?;
    writeln!(out, "  files      {}", r.files.join(" "))?;
    let c = &r.check.records;
    let records = match (c.first_seq, c.last_seq) {
        (Some(first), Some(last)) => format!("{} records, seq {first} to {last}", c.readable),
        _ => "no records".to_string(),
    };
    let verdict = if r.check.sound { "sound" } else { "DAMAGED" };
    writeln!(
        out,
        "  check      {verdict}: {records} (`carma journal check --journal {}` says the same)",
        printable(&r.check.journal)
    )?;
    Ok(())
}

fn print_salvage(r: &SalvageReport) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "salvaged {} into {}", printable(&r.journal), printable(&r.out))?;
    writeln!(
        out,
        "  kept       {} records ({} through redb, {} from the raw scan), renumbered 1 to {}",
        r.kept, r.from_redb, r.from_raw_scan, r.kept
    )?;
    if !r.extent_known {
        writeln!(out, "  note       redb cannot open the file, so only what the raw scan found is")?;
        writeln!(
            out,
            "             counted: records past seq {}, and carma 0.1's, are lost uncounted",
            r.original_last_seq
        )?;
    }
    if r.lost_records == 0 {
        writeln!(out, "  lost       nothing (original seqs 1 to {})", r.original_last_seq)?;
    } else {
        writeln!(out, "  lost       {} of {} records:", r.lost_records, r.original_last_seq)?;
        if r.lost.len() > LINES_MAX {
            writeln!(out, "    (the first {LINES_MAX} ranges of {}; --json lists them all)", r.lost.len())?;
        }
        for lost in r.lost.iter().take(LINES_MAX) {
            let place = if lost.first_seq == lost.last_seq {
                format!("seq {}", lost.first_seq)
            } else {
                format!("seqs {} to {}", lost.first_seq, lost.last_seq)
            };
            let tasks = if lost.tasks.is_empty() {
                String::new()
            } else {
                format!(" (task {})", lost.tasks.join(", "))
            };
            writeln!(out, "    {}", printable(&format!("{place}{tasks}: {}", lost.reason)))?;
        }
    }
    if !r.tasks_affected.is_empty() {
        writeln!(out, "  tasks      {} affected: {}", r.tasks_affected.len(), r.tasks_affected.join(" "))?;
    }
    if r.ignored_uncommitted > 0 {
        writeln!(
            out,
            "  ignored    {} records past the last commit (never committed)",
            r.ignored_uncommitted
        )?;
    }
    writeln!(out, "  check      the new journal is {}", if r.out_sound { "sound" } else { "NOT sound" })?;
    Ok(())
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

/// Control and invisible characters escaped, so a damaged name cannot move the terminal's
/// cursor or hide part of the line.
fn printable(text: &str) -> String {
    crate::text::escape(text).into_owned()
}
