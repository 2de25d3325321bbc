//! Parsers from the formats models are described in today into [`ModelSummary`].
//!
//! - the summary JSON itself (schema/model-summary.schema.json);
//! - torchsummary's text table (`Conv2d-1   [-1, 64, 112, 112]   9,408`), as in the
//!   original system's `.model` files;
//! - PyTorch module dumps (`print(model)`) whose leaf lines carry "N params", optionally with
//!   an output shape in brackets;
//! - the `Activations-Params` column of the GPUMemNet CSVs, a Python list of
//!   `('layer', activations_per_sample, params)` tuples.
//!
//! [`parse_any`] picks the format from the text. The family is inferred from the layer
//! types when the format does not carry it.

use super::summary::{Family, Layer, LayerClass, ModelSummary, SUMMARY_VERSION, layer_class};

/// Parses any supported format, chosen from the first non-blank character and markers.
pub fn parse_any(text: &str) -> Result<ModelSummary, String> {
    let trimmed = text.trim_start();
    let summary = if trimmed.starts_with('{') {
        serde_json::from_str::<ModelSummary>(text).map_err(|e| format!("summary JSON: {e}"))?
    } else if trimmed.starts_with('[') {
        activations_params(trimmed)?
    } else if text.contains("Layer (type)") {
        torchsummary(text)?
    } else if text.contains("params") {
        module_dump(text)?
    } else {
        return Err("unknown summary format: expected summary JSON, torchsummary text, a module dump \
                    with \"N params\" or a GPUMemNet Activations-Params list"
            .into());
    };
    summary.validate()?;
    Ok(summary)
}

/// Parses a GPUMemNet `Activations-Params` list: `[('linear', 629, 792540), ('ReLU', 629, 0)]`.
pub fn activations_params(text: &str) -> Result<ModelSummary, String> {
    let mut layers = Vec::new();
    let mut rest = text.trim();
    rest = rest.strip_prefix('[').and_then(|r| r.strip_suffix(']')).ok_or("expected a [...] list")?;
    for (index, tuple) in rest.split(')').enumerate() {
        let tuple = tuple.trim_start_matches([',', ' ', '\n', '\t']).trim();
        if tuple.is_empty() {
            continue;
        }
        let inner = tuple.strip_prefix('(').ok_or_else(|| format!("tuple {index}: expected '('"))?;
        let fields: Vec<&str> = inner.split(',').map(str::trim).collect();
        let [kind, activations, params] = fields.as_slice() else {
            return Err(format!("tuple {index}: expected (type, activations, params), got ({inner})"));
        };
        let kind = kind.trim_matches(|c| c == '\'' || c == '"');
        let number = |s: &str, what: &str| {
            s.parse::<u64>().map_err(|_| format!("tuple {index}: {what} {s:?} is not a whole number"))
        };
        layers.push(Layer {
            kind: canonical_kind(kind),
            output_shape: None,
            activations: number(activations, "activations")?,
            params: number(params, "params")?,
        });
    }
    Ok(summary_from_layers(layers))
}

/// Parses torchsummary's table. Lines between the header and the totals look like
/// `       Conv2d-1         [-1, 64, 112, 112]           9,408`.
pub fn torchsummary(text: &str) -> Result<ModelSummary, String> {
    let mut layers = Vec::new();
    let mut in_table = false;
    for (number, line) in text.lines().enumerate() {
        if line.contains("Layer (type)") {
            in_table = true;
            continue;
        }
        if !in_table || line.trim_start().starts_with(['=', '-']) || line.trim().is_empty() {
            continue;
        }
        if line.trim_start().starts_with("Total params") {
            break;
        }
        let (Some(open), Some(close)) = (line.find('['), line.rfind(']')) else {
            return Err(format!("line {}: expected an output shape in [...]: {line:?}", number + 1));
        };
        let name = line[..open].trim();
        let kind = name.rsplit_once('-').map_or(name, |(kind, _)| kind);
        let dims: Vec<u64> = line[open + 1..close]
            .split([',', '[', ']', ' '])
            .filter(|s| !s.is_empty() && *s != "-1")
            .map(|s| s.parse::<u64>().map_err(|_| format!("line {}: bad dimension {s:?}", number + 1)))
            .collect::<Result<_, _>>()?;
        let params_text: String = line[close + 1..].trim().chars().filter(|c| *c != ',').collect();
        let params = params_text
            .parse::<u64>()
            .map_err(|_| format!("line {}: parameter count {params_text:?} is not a number", number + 1))?;
        let nested = line[open + 1..close].contains('[');
        let activations = dims.iter().product();
        layers.push(Layer {
            kind: kind.to_string(),
            output_shape: (!nested).then_some(dims),
            activations,
            params,
        });
    }
    if layers.is_empty() {
        return Err("torchsummary text has no layer lines".into());
    }
    Ok(summary_from_layers(layers))
}

/// Parses a PyTorch module dump whose leaf lines end in "N params", e.g.
/// `(0): Linear(in_features=784, out_features=128, bias=True) [128] 100480 params`.
/// An optional `[d1, d2, ...]` before the count is the output shape per sample; without it a
/// Linear's `out_features` is its output and element-wise layers (activations, norms,
/// dropout) keep the previous layer's output. Container lines (ending in `(`) are skipped.
pub fn module_dump(text: &str) -> Result<ModelSummary, String> {
    let mut layers: Vec<Layer> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let Some(before) = line.trim_end().strip_suffix("params") else { continue };
        let before = before.trim_end().trim_end_matches([':', '#']).trim_end();
        let digits_start = before.rfind(|c: char| !(c.is_ascii_digit() || c == ',')).map_or(0, |i| i + 1);
        let count: String = before[digits_start..].chars().filter(|c| *c != ',').collect();
        let params = count
            .parse::<u64>()
            .map_err(|_| format!("line {}: no parameter count before \"params\"", number + 1))?;
        let head = before[..digits_start].trim_end().trim_end_matches(['#', ',', '-']).trim_end();
        let body = head.split_once("): ").map_or(head.trim_start(), |(_, b)| b);
        let kind: String = body.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if kind.is_empty() || body.trim_end().ends_with('(') {
            continue;
        }
        let shape = trailing_shape(head);
        let activations = match &shape {
            Some(dims) => dims.iter().product(),
            None => out_features(body).unwrap_or_else(|| match layer_class(&kind) {
                LayerClass::Linear | LayerClass::Conv2d | LayerClass::Other => 0,
                _ => layers.last().map_or(0, |l| l.activations),
            }),
        };
        layers.push(Layer { kind, output_shape: shape, activations, params });
    }
    if layers.is_empty() {
        return Err("module dump has no lines ending in \"N params\"".into());
    }
    Ok(summary_from_layers(layers))
}

fn trailing_shape(head: &str) -> Option<Vec<u64>> {
    let head = head.trim_end();
    let inner = head.strip_suffix(']')?;
    let open = inner.rfind('[')?;
    inner[open + 1..].split(',').map(|s| s.trim().parse::<u64>().ok()).collect()
}

fn out_features(body: &str) -> Option<u64> {
    let start = body.find("out_features=")? + "out_features=".len();
    body[start..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok()
}

/// The GPUMemNet data spells some layer types its own way.
fn canonical_kind(kind: &str) -> String {
    match kind {
        "linear" => "Linear".into(),
        "batch_normalization" => "BatchNorm1d".into(),
        "dropout" => "Dropout".into(),
        other => other.into(),
    }
}

fn summary_from_layers(layers: Vec<Layer>) -> ModelSummary {
    let family = infer_family(&layers);
    ModelSummary {
        version: SUMMARY_VERSION,
        name: None,
        family,
        layers,
        batch_size: None,
        sequence_length: None,
        optimizer: None,
        precision: None,
        activation_function: None,
        architecture: None,
        input_shape: None,
        saved_bytes_per_sample: None,
        saved_bytes_fixed: None,
        attention_bytes_per_sample: None,
    }
}

/// Conv layers make a CNN; attention, embeddings or LayerNorm a transformer; only dense,
/// norm, dropout and activation layers an MLP.
pub fn infer_family(layers: &[Layer]) -> Family {
    let lower = |l: &Layer| l.kind.to_ascii_lowercase();
    if layers.iter().any(|l| lower(l).starts_with("conv")) {
        return Family::Cnn;
    }
    if layers.iter().any(|l| {
        let k = lower(l);
        k.contains("attention") || k.contains("embedding") || k == "layernorm"
    }) {
        return Family::Transformer;
    }
    let dense = |l: &Layer| !matches!(layer_class(&l.kind), LayerClass::Other) || lower(l) == "softmax";
    if layers.iter().all(dense) { Family::Mlp } else { Family::Other }
}

#[cfg(test)]
mod tests;
