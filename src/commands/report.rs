//! `carma report`: analyse each journal, render a table, JSON or CSV, optionally SVG plots.

use std::io::Write;

use crate::cli::ReportArgs;
use crate::error::Error;
use crate::report;

pub(super) fn run(home: &crate::home::Home, args: ReportArgs) -> anyhow::Result<()> {
    run_to(home, args, &mut std::io::stdout().lock())
}

/// `run`, writing to `out` (stdout, or `carma mcp`'s answer).
pub(super) fn run_to(
    home: &crate::home::Home,
    mut args: ReportArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    if args.journals.is_empty() && args.merge {
        // A login node's cluster report: CARMA_JOURNALS, or the system config's
        // `[slurm] journals` unless a home was named (`slurm::journals`).
        let explicit = home.origin() == crate::home::Origin::Explicit;
        args.journals = crate::slurm::journals::resolve(&[], !explicit)?;
    }
    if args.journals.is_empty() {
        // The queue's own journal, through its published view (any user may read it).
        home.require_initialized()?;
        args.journals.push(home.root().to_path_buf());
        if args.labels.is_empty() {
            args.labels.push("queue".into());
        }
    }
    let scope = scope(&args)?;
    let mut journals = Vec::with_capacity(args.journals.len());
    for path in &args.journals {
        journals.extend(report::journals_in(path)?);
    }
    let mut reports = analyze(&args, &journals, scope)?;
    if !args.tasks {
        reports.iter_mut().for_each(|r| r.attempts.clear());
    }
    let baseline = baseline_index(&reports, args.baseline.as_deref())?;
    if args.json {
        writeln!(out, "{}", report::render_json(&reports, baseline))?;
    } else if args.by_user && args.csv {
        write!(out, "{}", report::render_by_user_csv(&reports))?;
    } else if args.by_user {
        write!(out, "{}", report::render_by_user_table(&reports))?;
    } else if args.csv {
        write!(out, "{}", report::render_csv(&reports, baseline))?;
    } else {
        write!(out, "{}", report::render_table(&reports, baseline))?;
        if args.tasks {
            for r in &reports {
                write!(out, "{}", report::render_attempts(r))?;
            }
        }
    }
    if let Some(dir) = &args.plots {
        for path in report::write_plots(&reports, dir)? {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// One report over every journal (`--merge`), or one per journal with its label.
fn analyze(
    args: &ReportArgs,
    journals: &[std::path::PathBuf],
    scope: report::Scope,
) -> anyhow::Result<Vec<report::Report>> {
    let mut reports = Vec::with_capacity(journals.len());
    if args.merge {
        if args.labels.len() > 1 {
            return Err(Error::BadInput("--merge makes one report; give at most one --label".into()).into());
        }
        let label = args.labels.first().cloned().unwrap_or_else(|| "merged".into());
        reports.push(report::analyze_scoped(journals, &label, args.plots.is_some(), scope)?);
    } else {
        if !args.labels.is_empty() && args.labels.len() != journals.len() {
            return Err(Error::BadInput(format!(
                "{} --label for {} journals; give one label per journal or none",
                args.labels.len(),
                journals.len()
            ))
            .into());
        }
        for (i, path) in journals.iter().enumerate() {
            let label = args.labels.get(i).cloned().unwrap_or_else(|| {
                path.file_stem().map_or(format!("journal{}", i + 1), |s| s.to_string_lossy().into_owned())
            });
            reports.push(report::analyze_scoped(
                std::slice::from_ref(path),
                &label,
                args.plots.is_some(),
                scope,
            )?);
        }
    }
    Ok(reports)
}

fn baseline_index(reports: &[report::Report], baseline: Option<&str>) -> Result<usize, Error> {
    let Some(name) = baseline else { return Ok(0) };
    if let Some(i) = reports.iter().position(|r| r.label == name) {
        return Ok(i);
    }
    match name.parse::<usize>() {
        Ok(n) if (1..=reports.len()).contains(&n) => Ok(n - 1),
        _ => Err(Error::BadInput(format!(
            "no journal labelled {name:?}; use one of: {}",
            reports.iter().map(|r| r.label.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// `--since` (a duration ago, or an RFC 3339 time) and `--user` as a report scope.
fn scope(args: &ReportArgs) -> Result<report::Scope, Error> {
    use crate::clock::{Clock, SystemClock};
    let since_ms = args
        .since
        .as_deref()
        .map(|text| {
            if let Ok(ago) = humantime::parse_duration(text) {
                return Ok(SystemClock.now_ms().saturating_sub(ago.as_millis() as u64));
            }
            humantime::parse_rfc3339_weak(text)
                .map(|t| t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64))
                .map_err(|_| {
                    Error::BadInput(format!(
                        "--since {text:?} is neither a duration nor a time; use e.g. 24h, 7days or 2026-11-01T00:00:00Z"
                    ))
                })
        })
        .transpose()?;
    let user = args
        .user
        .as_deref()
        .map(|name| {
            crate::access::users::uid_of(name).or_else(|| name.parse().ok()).ok_or_else(|| {
                Error::BadInput(format!("--user {name}: no such user; give a login name or a uid"))
            })
        })
        .transpose()?;
    Ok(report::Scope { since_ms, user })
}
