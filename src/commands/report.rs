//! `carma report`: analyse each journal, render a table, JSON or CSV, optionally SVG plots.

use std::io::Write;

use crate::cli::ReportArgs;
use crate::error::Error;
use crate::report;

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    if !args.labels.is_empty() && args.labels.len() != args.journals.len() {
        return Err(Error::BadInput(format!(
            "{} --label for {} --journal; give one label per journal or none",
            args.labels.len(),
            args.journals.len()
        ))
        .into());
    }
    let mut reports = Vec::with_capacity(args.journals.len());
    for (i, path) in args.journals.iter().enumerate() {
        let label = args.labels.get(i).cloned().unwrap_or_else(|| {
            path.file_stem().map_or(format!("journal{}", i + 1), |s| s.to_string_lossy().into_owned())
        });
        reports.push(report::analyze(path, &label, args.plots.is_some())?);
    }
    let baseline = baseline_index(&reports, args.baseline.as_deref())?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", report::render_json(&reports, baseline))?;
    } else if args.csv {
        write!(out, "{}", report::render_csv(&reports, baseline))?;
    } else {
        write!(out, "{}", report::render_table(&reports, baseline))?;
    }
    if let Some(dir) = &args.plots {
        for path in report::write_plots(&reports, dir)? {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
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
