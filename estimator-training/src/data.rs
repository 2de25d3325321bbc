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
    /// The label as the data file gave it, before any cleaning rule or remeasurement: what
    /// `cv` also scores against, so a cleaning rule cannot hide a miss.
    pub file_label_mib: Option<f64>,
    /// Censored by the file's own peaks (before any remeasurement).
    pub file_censored: bool,
    /// Whether the file's own peak would have kept this row (a remeasured run that the file
    /// has as dying early would not): the rows `cv` scores against the file's labels.
    pub file_kept: bool,
    /// Why the row is set apart (rules 4 and 5 of [`read_timm`]): never trained or calibrated
    /// on, scored apart and against the file's label.
    pub apart: Option<Apart>,
}

/// Why a timm row is kept out of training and out of the cleaned scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Apart {
    /// Rule 4: the peak is far above what the run's tensors need: workspace an empty card lent.
    Spike,
    /// Rule 5: the summary traces far more than FakeTensor traced for the same run, so the two
    /// describe different inputs (`sam2_hiera_tiny`'s summary is at 1,024 px, its runs were not).
    SummaryMismatch,
}

impl Apart {
    /// The name in the predictions CSV.
    pub fn name(self) -> &'static str {
        match self {
            Apart::Spike => "spike",
            Apart::SummaryMismatch => "summary_mismatch",
        }
    }
}

impl Row {
    /// A row whose label is the file's own (censored at `label_mib` or not), set apart by
    /// nothing: every GPUMemNet row, and test fixtures.
    pub fn plain(
        group: String,
        summary: ModelSummary,
        batch_size: u32,
        label_mib: Option<f64>,
        censored: bool,
    ) -> Row {
        let (file_label_mib, file_censored, file_kept, apart) = (label_mib, censored, true, None);
        Row {
            group,
            summary,
            batch_size,
            label_mib,
            censored,
            baseline_mib: None,
            file_label_mib,
            file_censored,
            file_kept,
            apart,
        }
    }

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

/// A CSV file read whole: its header, for columns by name, and its non-empty records, each with
/// its 0-based data row (the timm readers' error messages name both the file and the row).
struct Table {
    path: std::path::PathBuf,
    header: Vec<String>,
    records: Vec<(usize, Vec<String>)>,
}

impl Table {
    fn read(path: &std::path::Path) -> Result<Table> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut lines = text.lines();
        let header = split_record(lines.next().with_context(|| format!("{}: empty CSV", path.display()))?);
        let records = lines
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(index, line)| (index, split_record(line)))
            .collect();
        Ok(Table { path: path.to_path_buf(), header, records })
    }

    /// Where column `name` is, or an error naming the file and the column.
    fn column(&self, name: &str) -> Result<usize> {
        self.header
            .iter()
            .position(|h| h == name)
            .with_context(|| format!("{}: no {name} column", self.path.display()))
    }
}

/// Field `at` of a record, empty where the record is short.
fn field(record: &[String], at: usize) -> &str {
    record.get(at).map(String::as_str).unwrap_or("")
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
        rows.push(Row::plain(group, summary, batch_size, label_mib, false));
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
/// The CUDA context in every timm peak (nvidia-smi on that A100, ../shared/data/gpumemnet/).
pub const TIMM_CONTEXT_MIB: f64 = 1443.0;
/// A peak more than this many times FakeTensor's figure above the context and
/// [`TIMM_SPIKE_FLOOR_MIB`] is taken for cuDNN workspace that the empty card lent, not a need.
/// Checked on the runs remeasured on an H200 (reports/gpu/h200-relabel-2026-11-26/): each of
/// the 12 it flags there was a spike (the need without the empty card's workspace was under
/// 80% of the file's peak). It flags 57 of the file's 2,957 usable runs; 45 once the 12
/// remeasured ones take their measured need.
pub const TIMM_SPIKE_FACTOR: f64 = 2.5;
/// A summary whose parameters and saved tensors (16 B per parameter, the batch's saved bytes)
/// come to more than this many times FakeTensor's figure for the same run does not describe
/// that run. Over the file's 3,450 runs the ratio's 99th percentile is 2.2 and the largest
/// but one model's is 4.6; `sam2_hiera_tiny`'s five are 20 to 22.
pub const TIMM_MISMATCH_FACTOR: f64 = 8.0;
/// What the libraries hold beyond the traced tensors (cuBLAS and cuDNN handles and workspace),
/// never a spike: without it the smallest models (a peak of 1,900 MiB against 130 MiB of
/// tensors) would count as spikes.
pub const TIMM_SPIKE_FLOOR_MIB: f64 = 512.0;

/// A remeasured need replaces the file's peak where the two differ by more than this factor
/// either way; inside it the file's own reading is kept.
pub const TIMM_REMEASURED_BAND: f64 = 1.25;

/// Rule 4 of [`read_timm`]: the peak is far above what the run's tensors need.
fn is_spike(label: f64, baseline: Option<f64>) -> bool {
    baseline.is_some_and(|b| label - TIMM_CONTEXT_MIB - TIMM_SPIKE_FLOOR_MIB > TIMM_SPIKE_FACTOR * b)
}

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
    /// Kept for scoring but never trained on: the peak is far above what the run's tensors
    /// need (rule 4), cuDNN workspace an empty card lent.
    pub spikes: usize,
    /// Labels taken from a remeasurement (`--remeasured`) instead of the file.
    pub remeasured: usize,
    /// Kept for scoring but never trained on: the summary does not describe the run (rule 5).
    pub summary_mismatch: usize,
}

/// The rows a model may train and calibrate on, among `candidates`: never one set apart.
pub fn trainable(rows: &[Row], candidates: impl IntoIterator<Item = usize>) -> Vec<usize> {
    candidates.into_iter().filter(|&i| rows[i].apart.is_none()).collect()
}

/// Reads remeasured needs, `model,batch_size,a100_equivalent_mib` (other columns ignored): the
/// same run measured again, in the file's terms (its context included).
pub fn read_remeasured(csv: &std::path::Path) -> Result<std::collections::HashMap<(String, u32), f64>> {
    let table = Table::read(csv)?;
    let (model_at, batch_at, need_at) =
        (table.column("model")?, table.column("batch_size")?, table.column("a100_equivalent_mib")?);
    let mut out = std::collections::HashMap::new();
    for (index, record) in &table.records {
        let get = |at: usize| field(record, at);
        let batch: u32 =
            get(batch_at).parse().with_context(|| format!("{}: row {index}: batch_size", csv.display()))?;
        let need: f64 = get(need_at)
            .parse()
            .ok()
            .filter(|n: &f64| n.is_finite() && *n > 0.0)
            .with_context(|| format!("{}: row {index}: a100_equivalent_mib", csv.display()))?;
        out.insert((get(model_at).to_string(), batch), need);
    }
    Ok(out)
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
///   left out;
/// - a peak more than [`TIMM_SPIKE_FACTOR`] times FakeTensor's figure above the context and
///   [`TIMM_SPIKE_FLOOR_MIB`] is workspace the empty card lent ([`Apart::Spike`]);
/// - a summary tracing more than [`TIMM_MISMATCH_FACTOR`] times FakeTensor's figure describes
///   another input than the run's ([`Apart::SummaryMismatch`]).
///
/// Rows set apart by the last two are kept, but never trained or calibrated on, and scored
/// apart against the file's peak.
///
/// `remeasured` (from [`read_remeasured`]) comes first: where a run was measured again and the
/// file's peak is outside [`TIMM_REMEASURED_BAND`] of it either way, or would be dropped as
/// failed early or a spike, the remeasured need is the label and no other rule judges it (at
/// capacity or above, it censors like a file peak would). `file_label_mib` keeps the file's.
///
/// The group is the architecture family: the last part of the summary's `architecture`
/// (`timm.models.resnet` → `resnet`), so folds hold out whole families.
pub fn read_timm(
    csv: &std::path::Path,
    summaries: &std::path::Path,
    remeasured: &std::collections::HashMap<(String, u32), f64>,
) -> Result<(Vec<Row>, TimmCounts)> {
    let table = Table::read(csv)?;
    let (model_at, batch_at, label_at) =
        (table.column("model")?, table.column("batch_size")?, table.column("max_gpu_memory_mib")?);
    let baseline_at = table.column("faketensor_last_numeric_mib").ok();
    let mut counts = TimmCounts::default();
    let mut raw = Vec::new();
    for (index, record) in &table.records {
        let get = |at: usize| field(record, at);
        let model = get(model_at).to_string();
        let batch_size: u32 = get(batch_at).parse().with_context(|| format!("row {index}: batch_size"))?;
        let label: f64 = get(label_at).parse().with_context(|| format!("row {index}: max_gpu_memory_mib"))?;
        let baseline = baseline_at.and_then(|at| get(at).parse::<f64>().ok());
        counts.rows += 1;
        let file_label = label;
        let failed = baseline.is_some_and(|b| label < TIMM_FAILED_FRACTION * b);
        let spike = is_spike(label, baseline);
        let (label, measured) = match remeasured.get(&(model.clone(), batch_size)) {
            Some(&need)
                if label < TIMM_CAPACITY_MIB
                    && (failed
                        || spike
                        || label > TIMM_REMEASURED_BAND * need
                        || label * TIMM_REMEASURED_BAND < need) =>
            {
                counts.remeasured += 1;
                (need, true)
            }
            _ => (label, false),
        };
        raw.push((model, batch_size, label, baseline, file_label, measured));
    }
    // The smallest batch size at which each model is censored.
    let mut censored_from: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    let mut file_censored_from: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    for (model, batch, label, baseline, file_label, _) in &raw {
        let over = baseline.is_some_and(|b| b >= TIMM_CAPACITY_MIB);
        for (from, peak) in [(&mut censored_from, label), (&mut file_censored_from, file_label)] {
            if *peak >= TIMM_CAPACITY_MIB || over {
                let at = from.entry(model.as_str()).or_insert(*batch);
                *at = (*at).min(*batch);
            }
        }
    }
    let mut rows = Vec::new();
    for (model, batch_size, label, baseline, file_label, measured) in &raw {
        let censored = censored_from.get(model.as_str()).is_some_and(|from| batch_size >= from);
        if !censored && !measured && baseline.is_some_and(|b| *label < TIMM_FAILED_FRACTION * b) {
            counts.failed_early += 1;
            continue;
        }
        let spike = !censored && !measured && is_spike(*label, *baseline);
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
        let file_censored = file_censored_from.get(model.as_str()).is_some_and(|from| batch_size >= from);
        let traced_mib = (summary.saved_bytes_per_sample.unwrap_or(0) as f64 * f64::from(*batch_size)
            + 16.0 * summary.stats().params as f64)
            / 1048576.0;
        let apart = if baseline.is_some_and(|b| b > 0.0 && traced_mib > TIMM_MISMATCH_FACTOR * b) {
            counts.summary_mismatch += 1;
            Some(Apart::SummaryMismatch)
        } else if censored {
            counts.censored += 1;
            None
        } else if spike {
            counts.spikes += 1;
            Some(Apart::Spike)
        } else {
            counts.labelled += 1;
            None
        };
        rows.push(Row {
            group,
            summary,
            batch_size: *batch_size,
            label_mib: Some(if censored { TIMM_CAPACITY_MIB } else { *label }),
            censored,
            baseline_mib: *baseline,
            file_label_mib: Some(if file_censored { TIMM_CAPACITY_MIB } else { *file_label }),
            file_censored,
            file_kept: file_censored || !baseline.is_some_and(|b| *file_label < TIMM_FAILED_FRACTION * b),
            apart,
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

    /// Writes a summary per (model, batch) in `runs` (a ResNet-family CNN, 1 MB saved per
    /// sample) and `runs.csv` with the timm header and `rows`; returns the CSV's path.
    fn timm_fixture(dir: &std::path::Path, runs: &[(&str, u32)], rows: &str) -> std::path::PathBuf {
        for (model, batch) in runs {
            let summary = serde_json::json!({
                "version": 1, "name": format!("timm:{model}"), "family": "cnn",
                "architecture": "timm.models.resnet", "saved_bytes_per_sample": 1_000_000,
                "layers": [{"type": "Conv2d", "activations": 100, "params": 1000}]
            });
            std::fs::write(dir.join(format!("{model}_bs{batch}.json")), summary.to_string()).unwrap();
        }
        let csv = dir.join("runs.csv");
        let header = "model,batch_size,max_gpu_memory_mib,faketensor_after_forward_mib,\
                      faketensor_after_backward_mib,faketensor_last_numeric_mib\n";
        std::fs::write(&csv, format!("{header}{rows}")).unwrap();
        csv
    }

    /// Goal: the three cleaning rules and the family grouping of `read_timm`: a peak at
    /// capacity censors that batch size and every larger one (even a later low reading), a
    /// FakeTensor figure above capacity censors too, a peak far below FakeTensor's figure is
    /// left out as a run that died early, and a model without a summary is counted, not fatal.
    #[test]
    fn timm_rows_are_censored_cleaned_and_grouped_by_family() {
        let dir = tempfile::tempdir().unwrap();
        let runs = [("a", 8), ("a", 16), ("a", 32), ("b", 8), ("c", 8)];
        let csv = timm_fixture(
            dir.path(),
            &runs,
            "a,8,3000,1,1,2000\na,16,40100,1,1,4000\na,32,3500,1,1,8000\nb,8,1000,1,1,3000\n\
             c,8,2000,1,1,45000\nd,8,2000,1,1,1000\n",
        );
        let (rows, counts) = read_timm(&csv, dir.path(), &Default::default()).unwrap();
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

    /// Goal: rule 4 and the remeasured labels. A peak far above its tensors (context + floor +
    /// 2.5 × FakeTensor) is kept as a spike, the file's label beside it; a small model's fixed
    /// overhead is not a spike; a remeasured need replaces a peak off by more than 25% either
    /// way (a spike or a run that died early), keeps one inside the band, and censors when
    /// it is at capacity; a remeasured row is judged by no other rule.
    #[test]
    fn spikes_are_kept_apart_and_remeasured_needs_replace_the_files_peak() {
        let dir = tempfile::tempdir().unwrap();
        let models = ["spike", "small", "far", "near", "early", "huge", "mism"];
        let runs: Vec<(&str, u32)> = models.iter().flat_map(|&m| [(m, 8), (m, 16)]).collect();
        let csv = timm_fixture(
            dir.path(),
            &runs,
            "spike,8,38835,1,1,786\nspike,16,4489,1,1,1515\nsmall,8,1919,1,1,136\nfar,8,7091,1,1,668\n\
             near,8,4139,1,1,1863\nearly,8,2000,1,1,5000\nhuge,8,4113,1,1,3000\nhuge,16,4200,1,1,6000\n\
             mism,8,3000,1,1,0.5\n",
        );
        let remeasured = dir.path().join("remeasured.csv");
        std::fs::write(
            &remeasured,
            "model,batch_size,h200_used_mib,a100_equivalent_mib\n\
             far,8,1789,2705\nnear,8,3337,4253\nearly,8,5000,5916\nhuge,8,131266,132182\n",
        )
        .unwrap();
        let remeasured = read_remeasured(&remeasured).unwrap();
        let (rows, counts) = read_timm(&csv, dir.path(), &remeasured).unwrap();
        let got: Vec<(u32, f64, f64, bool, bool)> = rows
            .iter()
            .map(|r| {
                (r.batch_size, r.label_mib.unwrap(), r.file_label_mib.unwrap(), r.censored, r.apart.is_some())
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (8, 38835.0, 38835.0, false, true), // spike: kept apart, file label kept
                (16, 4489.0, 4489.0, false, false), // the same model's next batch: a need
                (8, 1919.0, 1919.0, false, false),  // a small model's overhead: no spike
                (8, 2705.0, 7091.0, false, false),  // remeasured: 2.6x below the file
                (8, 4139.0, 4139.0, false, false),  // remeasured within 25%: the file's
                (8, 5916.0, 2000.0, false, false),  // died early in the file, remeasured
                (8, TIMM_CAPACITY_MIB, 4113.0, true, false), // would not fit the card
                (16, TIMM_CAPACITY_MIB, 4200.0, true, false), // nor its larger batch
                (8, 3000.0, 3000.0, false, true),   // the summary traces 15x FakeTensor's run
            ]
        );
        let apart: Vec<Option<Apart>> = rows.iter().map(|r| r.apart).collect();
        assert_eq!(apart[0], Some(Apart::Spike));
        assert_eq!(apart[8], Some(Apart::SummaryMismatch));
        // The file's own view: huge's peaks were under the card there; early died there.
        assert!(!rows[6].file_censored && !rows[7].file_censored);
        assert!(!rows[5].file_kept && rows.iter().filter(|r| !r.file_kept).count() == 1);
        assert_eq!((counts.spikes, counts.remeasured, counts.failed_early, counts.censored), (1, 3, 0, 2));
        assert_eq!(counts.summary_mismatch, 1);
        // Neither kind set apart is ever a training row.
        assert_eq!(trainable(&rows, 0..rows.len()), vec![1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(counts.labelled, 5);
    }
}
