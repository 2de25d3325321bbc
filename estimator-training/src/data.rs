//! Reading GPUMemNet-style CSVs into estimator inputs, and grouped fold assignment.
//!
//! Columns used: `Filename` (the group key, with the batch size removed, so that runs of one
//! architecture at several batch sizes fall in the same fold), `Activations-Params` (parsed
//! with carma's own parser), `Activation Function`, `Batch Size` and, when present,
//! `Max GPU Memory (MiB)` (the label).

use anyhow::{Context, Result, bail};
use carma::estimate::parse::activations_params;
use carma::estimate::{EstimateInput, ModelSummary};

/// One data row.
#[derive(Clone, Debug)]
pub struct Row {
    pub group: String,
    pub summary: ModelSummary,
    pub batch_size: u32,
    /// The measured peak; for a censored row, the capacity it reached (a lower bound).
    pub label_mib: Option<f64>,
    /// The run filled the card: the need is at least `label_mib`, not equal to it.
    pub censored: bool,
    /// A baseline's figure for the same run (FakeTensor in the timm data), MiB.
    pub baseline_mib: Option<f64>,
}

impl Row {
    pub fn input(&self) -> EstimateInput<'_> {
        EstimateInput { summary: &self.summary, batch_size: self.batch_size, declared_mib: None }
    }
}

/// Splits one CSV record honouring double quotes ("" is a literal quote).
fn split_record(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// Removes `batch:N` from a GPUMemNet file name, leaving the architecture.
fn group_key(filename: &str) -> String {
    filename.split('_').filter(|part| !part.starts_with("batch:")).collect::<Vec<_>>().join("_")
}

/// Reads every row of a CSV file.
pub fn read(path: &std::path::Path) -> Result<Vec<Row>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("in {}", path.display()))
}

/// Parses CSV text (one record per line; the data has no embedded newlines).
pub fn parse(text: &str) -> Result<Vec<Row>> {
    let mut lines = text.lines();
    let header = split_record(lines.next().context("empty CSV")?);
    let column = |name: &str| header.iter().position(|h| h == name);
    let Some(layers_at) = column("Activations-Params") else { bail!("no Activations-Params column") };
    let Some(batch_at) = column("Batch Size") else { bail!("no Batch Size column") };
    let label_at = column("Max GPU Memory (MiB)");
    let name_at = column("Filename");
    let function_at = column("Activation Function");
    let mut rows = Vec::new();
    for (index, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let fields = split_record(line);
        let get = |at: usize| fields.get(at).map(String::as_str).unwrap_or("");
        let mut summary =
            activations_params(get(layers_at)).map_err(|e| anyhow::anyhow!("row {index}: {e}"))?;
        if let Some(at) = function_at {
            summary.activation_function = Some(get(at).to_string()).filter(|f| !f.is_empty());
        }
        let batch_size: u32 = get(batch_at).parse().with_context(|| format!("row {index}: Batch Size"))?;
        let label_mib = match label_at {
            Some(at) => Some(get(at).parse::<f64>().with_context(|| format!("row {index}: label"))?),
            None => None,
        };
        let group = name_at.map_or_else(|| format!("row{index}"), |at| group_key(get(at)));
        rows.push(Row { group, summary, batch_size, label_mib, censored: false, baseline_mib: None });
    }
    if rows.is_empty() {
        bail!("no data rows");
    }
    Ok(rows)
}

/// Card capacity of the timm runs (A100-40GB): a peak at or above it means the run filled
/// the card, almost always out of memory (../shared/data/gpumemnet/README.md).
pub const TIMM_CAPACITY_MIB: f64 = 40_000.0;
/// A measured peak below this fraction of the tensors FakeTensor traced for the same run
/// cannot be the run's need: the run died before its peak. Such rows are left out.
pub const TIMM_FAILED_FRACTION: f64 = 0.6;

/// What `read_timm` kept and why it dropped the rest.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TimmCounts {
    pub rows: usize,
    pub labelled: usize,
    pub censored: usize,
    /// Left out: the peak is far below what the run's tensors need (it died early).
    pub failed_early: usize,
    /// Left out: no summary in the summaries directory (the dumper skipped the model).
    pub no_summary: usize,
}

/// Reads timm training runs (`model,batch_size,max_gpu_memory_mib,faketensor_*`) and pairs
/// each with `<summaries>/<model>_bs<batch>.json` from dump_model.py.
///
/// Labels are cleaned by three physical rules, counted in [`TimmCounts`]:
/// - a peak ≥ capacity, or a FakeTensor figure ≥ capacity (the run's tensors alone do not
///   fit), is censored at the capacity;
/// - once a model is censored at some batch size, every larger batch size is too (memory
///   grows with the batch);
/// - a peak below [`TIMM_FAILED_FRACTION`] of FakeTensor's figure is a run that died early:
///   left out.
///
/// The group is the architecture family: the last part of the summary's `architecture`
/// (`timm.models.resnet` → `resnet`), so folds hold out whole families.
pub fn read_timm(csv: &std::path::Path, summaries: &std::path::Path) -> Result<(Vec<Row>, TimmCounts)> {
    let text = std::fs::read_to_string(csv).with_context(|| format!("reading {}", csv.display()))?;
    let mut lines = text.lines();
    let header = split_record(lines.next().context("empty CSV")?);
    let column = |name: &str| {
        header.iter().position(|h| h == name).with_context(|| format!("{}: no {name} column", csv.display()))
    };
    let (model_at, batch_at, label_at) =
        (column("model")?, column("batch_size")?, column("max_gpu_memory_mib")?);
    let baseline_at = column("faketensor_last_numeric_mib").ok();
    let mut counts = TimmCounts::default();
    let mut raw = Vec::new();
    for (index, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let fields = split_record(line);
        let get = |at: usize| fields.get(at).map(String::as_str).unwrap_or("");
        let model = get(model_at).to_string();
        let batch_size: u32 = get(batch_at).parse().with_context(|| format!("row {index}: batch_size"))?;
        let label: f64 = get(label_at).parse().with_context(|| format!("row {index}: max_gpu_memory_mib"))?;
        let baseline = baseline_at.and_then(|at| get(at).parse::<f64>().ok());
        counts.rows += 1;
        raw.push((model, batch_size, label, baseline));
    }
    // The smallest batch size at which each model is censored.
    let mut censored_from: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    for (model, batch, label, baseline) in &raw {
        if *label >= TIMM_CAPACITY_MIB || baseline.is_some_and(|b| b >= TIMM_CAPACITY_MIB) {
            let at = censored_from.entry(model.as_str()).or_insert(*batch);
            *at = (*at).min(*batch);
        }
    }
    let mut rows = Vec::new();
    for (model, batch_size, label, baseline) in &raw {
        let censored = censored_from.get(model.as_str()).is_some_and(|from| batch_size >= from);
        if !censored && baseline.is_some_and(|b| *label < TIMM_FAILED_FRACTION * b) {
            counts.failed_early += 1;
            continue;
        }
        let path = summaries.join(format!("{model}_bs{batch_size}.json"));
        let summary = match carma::estimate::read_summary(&path) {
            Ok(summary) => summary,
            Err(_) if !path.exists() => {
                counts.no_summary += 1;
                continue;
            }
            Err(e) => bail!("{e}"),
        };
        summary.validate().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let group = summary
            .architecture
            .as_deref()
            .and_then(|a| a.rsplit('.').next())
            .unwrap_or(model.as_str())
            .to_string();
        if censored {
            counts.censored += 1;
        } else {
            counts.labelled += 1;
        }
        rows.push(Row {
            group,
            summary,
            batch_size: *batch_size,
            label_mib: Some(if censored { TIMM_CAPACITY_MIB } else { *label }),
            censored,
            baseline_mib: *baseline,
        });
    }
    if rows.is_empty() {
        bail!("no rows paired with a summary in {}", summaries.display());
    }
    Ok((rows, counts))
}

/// Fold of each of `indices` (same order), dealt by group as in [`grouped_folds`].
pub fn grouped_folds_of(rows: &[Row], indices: &[usize], k: usize, seed: u64) -> Vec<usize> {
    let mut groups: Vec<&str> = indices.iter().map(|&i| rows[i].group.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut rng = Rng::new(seed);
    rng.shuffle(&mut groups);
    let fold_of: std::collections::HashMap<&str, usize> =
        groups.iter().enumerate().map(|(i, g)| (*g, i % k)).collect();
    indices.iter().map(|&i| fold_of[rows[i].group.as_str()]).collect()
}

/// Fold of each row: groups are shuffled with `seed` and dealt round-robin into `k` folds.
pub fn grouped_folds(rows: &[Row], k: usize, seed: u64) -> Vec<usize> {
    assert!(k >= 2, "need at least 2 folds");
    grouped_folds_of(rows, &(0..rows.len()).collect::<Vec<_>>(), k, seed)
}

/// A small deterministic generator (SplitMix64) for shuffles; burn's own seed covers the
/// weight initialisation.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: quoted fields with commas survive, and the batch size leaves the group key.
    #[test]
    fn parses_quoted_layers_and_groups_by_architecture() {
        let csv = "Filename,Depth,Activations-Params,Activation Function,Batch Size,Max GPU Memory (MiB)\n\
                   input:4_output:2_depth:1_arch:uniform_batch:8.out,2,\"[('linear', 4, 20), ('ReLU', 4, 0), ('linear', 2, 10)]\",ReLU,8,1500\n";
        let rows = parse(csv).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].group, "input:4_output:2_depth:1_arch:uniform");
        assert_eq!(rows[0].summary.stats().params, 30);
        assert_eq!(rows[0].label_mib, Some(1500.0));
        assert_eq!(rows[0].summary.activation_function.as_deref(), Some("ReLU"));
    }

    /// Goal: the three cleaning rules and the family grouping of `read_timm`: a peak at
    /// capacity censors that batch size and every larger one (even a later low reading), a
    /// FakeTensor figure above capacity censors too, a peak far below FakeTensor's figure is
    /// left out as a run that died early, and a model without a summary is counted, not fatal.
    #[test]
    fn timm_rows_are_censored_cleaned_and_grouped_by_family() {
        let dir = tempfile::tempdir().unwrap();
        let summary = |name: &str| {
            serde_json::json!({
                "version": 1, "name": format!("timm:{name}"), "family": "cnn",
                "architecture": "timm.models.resnet", "saved_bytes_per_sample": 1_000_000,
                "layers": [{"type": "Conv2d", "activations": 100, "params": 1000}]
            })
        };
        for (model, batch) in [("a", 8), ("a", 16), ("a", 32), ("b", 8), ("c", 8)] {
            std::fs::write(dir.path().join(format!("{model}_bs{batch}.json")), summary(model).to_string())
                .unwrap();
        }
        let csv = dir.path().join("runs.csv");
        std::fs::write(
            &csv,
            "model,batch_size,max_gpu_memory_mib,faketensor_after_forward_mib,faketensor_after_backward_mib,faketensor_last_numeric_mib\n\
             a,8,3000,1,1,2000\n\
             a,16,40100,1,1,4000\n\
             a,32,3500,1,1,8000\n\
             b,8,1000,1,1,3000\n\
             c,8,2000,1,1,45000\n\
             d,8,2000,1,1,1000\n",
        )
        .unwrap();
        let (rows, counts) = read_timm(&csv, dir.path()).unwrap();
        let got: Vec<(String, u32, Option<f64>, bool)> = rows
            .iter()
            .map(|r| (r.summary.name.clone().unwrap(), r.batch_size, r.label_mib, r.censored))
            .collect();
        assert_eq!(
            got,
            vec![
                ("timm:a".into(), 8, Some(3000.0), false),
                ("timm:a".into(), 16, Some(TIMM_CAPACITY_MIB), true),
                ("timm:a".into(), 32, Some(TIMM_CAPACITY_MIB), true),
                ("timm:c".into(), 8, Some(TIMM_CAPACITY_MIB), true),
            ]
        );
        assert!(rows.iter().all(|r| r.group == "resnet"));
        assert_eq!((counts.rows, counts.labelled, counts.censored), (6, 1, 3));
        assert_eq!((counts.failed_early, counts.no_summary), (1, 1));
    }
}
