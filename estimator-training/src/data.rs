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
    pub label_mib: Option<f64>,
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
        rows.push(Row { group, summary, batch_size, label_mib });
    }
    if rows.is_empty() {
        bail!("no data rows");
    }
    Ok(rows)
}

/// Fold of each row: groups are shuffled with `seed` and dealt round-robin into `k` folds.
pub fn grouped_folds(rows: &[Row], k: usize, seed: u64) -> Vec<usize> {
    assert!(k >= 2, "need at least 2 folds");
    let mut groups: Vec<&str> = rows.iter().map(|r| r.group.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut rng = Rng::new(seed);
    rng.shuffle(&mut groups);
    let fold_of: std::collections::HashMap<&str, usize> =
        groups.iter().enumerate().map(|(i, g)| (*g, i % k)).collect();
    rows.iter().map(|r| fold_of[r.group.as_str()]).collect()
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
}
