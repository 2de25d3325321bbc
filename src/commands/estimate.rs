//! `carma estimate`: every requested estimator's figure for one model summary, with the terms
//! that produced it.

use std::io::Write;

use serde::Serialize;

use crate::cli::EstimateArgs;
use crate::error::Error;
use crate::estimate::{self, ESTIMATOR_NAMES, Estimate, EstimateInput};

/// One estimator's answer, for `--json` (schema/estimate-output.schema.json).
#[derive(Serialize)]
struct Answer {
    estimator: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    estimate: Option<Estimate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct Output {
    version: u32,
    summary: String,
    family: estimate::Family,
    batch_size: u32,
    params: u64,
    activations_per_sample: u64,
    /// The headline: the requested estimator's answer, or with `all` the one the tick uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    estimator: Option<&'static str>,
    /// Its point estimate, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    mib: Option<u64>,
    /// Its upper figure, MiB: what placement reserves.
    #[serde(skip_serializing_if = "Option::is_none")]
    upper_mib: Option<u64>,
    /// Its terms as one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    explanation: Option<String>,
    estimates: Vec<Answer>,
}

pub(super) fn run(args: EstimateArgs) -> anyhow::Result<()> {
    run_to(args, &mut std::io::stdout().lock())
}

/// `run`, writing to `out` (stdout, or `carma mcp`'s answer).
pub(super) fn run_to(args: EstimateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let names: Vec<&'static str> = if args.estimator == "all" {
        ESTIMATOR_NAMES.to_vec()
    } else {
        let Some(known) = ESTIMATOR_NAMES.iter().find(|n| **n == args.estimator) else {
            return Err(Error::BadInput(format!(
                "unknown estimator {:?}\nhint: use one of {} or all",
                args.estimator,
                ESTIMATOR_NAMES.join(", ")
            ))
            .into());
        };
        vec![*known]
    };
    let summary = estimate::read_summary(&args.summary).map_err(|e| {
        Error::BadInput(format!("{e}\nhint: see schema/model-summary.schema.json for the formats"))
    })?;
    let batch_size = estimate::batch_size(&summary, args.batch_size).map_err(Error::BadInput)?;
    let input = EstimateInput { summary: &summary, batch_size, declared_mib: args.memory_mib };
    let stats = summary.stats();
    let answers: Vec<Answer> = names
        .iter()
        .map(|name| {
            let estimator = estimate::by_name(name).expect("names come from ESTIMATOR_NAMES");
            match estimator.estimate(&input) {
                Ok(e) => Answer { estimator: name, estimate: Some(e), error: None },
                Err(e) => Answer { estimator: name, estimate: None, error: Some(e.to_string()) },
            }
        })
        .collect();
    let headline_name = if names.len() == 1 { names[0] } else { estimate::TICK_ESTIMATOR };
    let headline = answers
        .iter()
        .find(|a| a.estimator == headline_name)
        .and_then(|a| a.estimate.as_ref().map(|e| (a.estimator, e)));
    let output = Output {
        version: 1,
        estimator: headline.map(|(name, _)| name),
        mib: headline.map(|(_, e)| e.mib),
        upper_mib: headline.map(|(_, e)| e.upper_mib),
        explanation: headline.map(|(_, e)| e.explanation()),
        summary: args.summary.display().to_string(),
        family: summary.family,
        batch_size,
        params: stats.params,
        activations_per_sample: stats.activations,
        estimates: answers,
    };
    if args.json {
        return super::render::write_json(out, &output);
    }
    render(&output, out)
}

fn render(output: &Output, out: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(
        out,
        "{} ({:?}, batch {}, {} params, {} activations per sample)",
        output.summary, output.family, output.batch_size, output.params, output.activations_per_sample
    )?;
    for answer in &output.estimates {
        match (&answer.estimate, &answer.error) {
            (Some(e), _) => {
                writeln!(out, "{:<10} {:>8} MiB  upper {:>8} MiB", answer.estimator, e.mib, e.upper_mib)?;
                for term in &e.terms {
                    writeln!(out, "           {:<26} {:>10.1} MiB  {}", term.name, term.mib, term.detail)?;
                }
                writeln!(out, "           {}", e.note)?;
                if let Some(bound) = e.bound {
                    writeln!(out, "           bound: {}", bound_line(bound))?;
                }
            }
            (None, Some(error)) => writeln!(out, "{:<10} -  ({error})", answer.estimator)?,
            (None, None) => unreachable!("an answer has an estimate or an error"),
        }
    }
    Ok(())
}

/// Which upper figure applies, in words, for the human output.
fn bound_line(bound: estimate::Bound) -> &'static str {
    match bound {
        estimate::Bound::Calibrated => "calibrated (inside the training spread: quantile networks)",
        estimate::Bound::BelowSpread => {
            "below-spread (smaller than every training model: physical sum x calibrated ratio, not the card)"
        }
        estimate::Bound::WholeCard => {
            "whole-card (larger than every training model, or not an image model: at least the training card)"
        }
    }
}
