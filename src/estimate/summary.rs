//! The model summary: what the estimators know about a network (schema/model-summary.schema.json).
//!
//! A summary is a list of layers in forward order, each with its kind, the activations it
//! produces per sample (or its output shape) and its parameter count, plus the training
//! settings that change memory: batch size, sequence length, optimizer and precision. Every
//! parser in `parse` produces this one type, so the estimators never see a source format.

use serde::{Deserialize, Serialize};

/// Version of the summary JSON this carma writes and reads.
pub const SUMMARY_VERSION: u32 = 1;
/// Most layers one summary may hold; GPT-2 large has about 600 modules.
pub const LAYERS_MAX: usize = 100_000;
/// Largest summary file read, in bytes.
pub const SUMMARY_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// Architecture family, which picks the estimator path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Fully connected layers only (GPUMemNet's data).
    Mlp,
    /// Convolutional.
    Cnn,
    /// Attention-based.
    Transformer,
    /// Anything else.
    Other,
}

/// One layer in forward order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// Layer type as the framework names it ("Linear", "Conv2d", "BatchNorm1d", "ReLU").
    #[serde(rename = "type")]
    pub kind: String,
    /// Output shape without the batch dimension, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_shape: Option<Vec<u64>>,
    /// Output elements per sample; the product of `output_shape` when that is given.
    pub activations: u64,
    /// Parameters the layer owns (not counting its children).
    pub params: u64,
}

/// A model summary (format version 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSummary {
    /// Always [`SUMMARY_VERSION`].
    pub version: u32,
    /// Model name, informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What kind of network it is.
    pub family: Family,
    /// Its leaf layers, in order.
    pub layers: Vec<Layer>,
    /// Training batch size; the task spec's `batch_size` or `--batch-size` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// Tokens per sample, for transformers; informational (activations already include it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_length: Option<u32>,
    /// "adam", "adamw", "sgd", "sgd-momentum"; Adam when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer: Option<String>,
    /// "fp32", "fp16", "bf16" or "amp"; fp32 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    /// Activation function name, when the network uses one kind ("ReLU", "GELU").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_function: Option<String>,
    /// The code that defines the model (`timm.models.resnet`): its architecture family,
    /// which `carma-train` groups cross-validation folds by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Input shape per sample (`[3, 224, 224]`, or `[tokens]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_shape: Option<Vec<u64>>,
    /// Bytes autograd keeps for the backward pass per sample, at the traced precision,
    /// without parameters; unlike the layers' outputs it includes what functional code saves
    /// (residual additions, attention scores). The dumper measures it; carma's real-model
    /// estimator needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_bytes_per_sample: Option<u64>,
    /// Bytes saved for backward whatever the batch size: weights the forward pass
    /// standardises or re-parameterises (NFNets, RepVGG); the dumper measures it by tracing
    /// two batch sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_bytes_fixed: Option<u64>,
    /// The part of `saved_bytes_per_sample` that is the attention probabilities of
    /// `F.scaled_dot_product_attention`, which its fused GPU kernels do not keep (attention
    /// written with an explicit softmax keeps them and is not counted here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_bytes_per_sample: Option<u64>,
}

/// Totals and counts derived from a summary; what the estimators' features are made of.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SummaryStats {
    /// Parameters over all layers.
    pub params: u64,
    /// Sum of every layer's output elements per sample.
    pub activations: u64,
    /// Largest single layer output per sample.
    pub activations_layer_max: u64,
    /// Linear layers.
    pub linear_layers: u32,
    /// Batch-norm layers.
    pub batchnorm_layers: u32,
    /// Dropout layers.
    pub dropout_layers: u32,
    /// 2-D convolutions.
    pub conv2d_layers: u32,
    /// Layer-norm layers.
    pub layernorm_layers: u32,
    /// The activation function's name: the summary's, else the first activation layer's kind.
    pub activation_function: String,
}

impl ModelSummary {
    /// Checks the invariants the estimators rely on; the message names what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.version != SUMMARY_VERSION {
            return Err(format!("summary version {} is not {SUMMARY_VERSION}", self.version));
        }
        if self.layers.is_empty() {
            return Err("summary has no layers".into());
        }
        if self.layers.len() > LAYERS_MAX {
            return Err(format!("summary has {} layers, more than {LAYERS_MAX}", self.layers.len()));
        }
        for (index, layer) in self.layers.iter().enumerate() {
            if let Some(shape) = &layer.output_shape {
                let product = shape.iter().try_fold(1u64, |acc, d| acc.checked_mul(*d));
                if product != Some(layer.activations) {
                    return Err(format!(
                        "layer {index} ({}): activations {} is not the product of output_shape {shape:?}",
                        layer.kind, layer.activations
                    ));
                }
            }
        }
        if self.stats().params == 0 {
            return Err("summary has no parameters".into());
        }
        if let (Some(saved), Some(attention)) = (self.saved_bytes_per_sample, self.attention_bytes_per_sample)
            && attention > saved
        {
            return Err(format!(
                "attention_bytes_per_sample {attention} is more than saved_bytes_per_sample {saved}"
            ));
        }
        Ok(())
    }

    /// Totals, counts and the activation function.
    pub fn stats(&self) -> SummaryStats {
        let mut stats = SummaryStats::default();
        for layer in &self.layers {
            stats.params = stats.params.saturating_add(layer.params);
            stats.activations = stats.activations.saturating_add(layer.activations);
            stats.activations_layer_max = stats.activations_layer_max.max(layer.activations);
            match layer_class(&layer.kind) {
                LayerClass::Linear => stats.linear_layers += 1,
                LayerClass::BatchNorm => stats.batchnorm_layers += 1,
                LayerClass::Dropout => stats.dropout_layers += 1,
                LayerClass::Conv2d => stats.conv2d_layers += 1,
                LayerClass::LayerNorm => stats.layernorm_layers += 1,
                LayerClass::Activation if stats.activation_function.is_empty() => {
                    stats.activation_function = layer.kind.clone();
                }
                LayerClass::Activation | LayerClass::Other => {}
            }
        }
        if let Some(name) = &self.activation_function {
            stats.activation_function = name.clone();
        }
        stats
    }

    /// Bytes per stored value: 2 for fp16/bf16 activations, 4 otherwise.
    pub fn activation_bytes(&self) -> u64 {
        match self.precision.as_deref() {
            Some("fp16" | "bf16" | "amp") => 2,
            _ => 4,
        }
    }

    /// Bytes of optimizer state plus gradients plus weights per parameter: 16 for Adam in
    /// fp32 (weight, gradient, two moments), 12 for SGD with momentum, 8 for plain SGD; mixed
    /// precision adds a 2-byte half copy of the weights.
    pub fn bytes_per_param(&self) -> u64 {
        let base = match self.optimizer.as_deref() {
            Some("sgd") => 8,
            Some("sgd-momentum") => 12,
            _ => 16,
        };
        match self.precision.as_deref() {
            Some("fp16" | "bf16" | "amp") => base + 2,
            _ => base,
        }
    }
}

/// What a layer type counts as, for the feature counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerClass {
    /// A fully connected layer.
    Linear,
    /// Batch norm of any dimension.
    BatchNorm,
    /// Dropout.
    Dropout,
    /// A 2-D convolution.
    Conv2d,
    /// Layer norm.
    LayerNorm,
    /// An activation function.
    Activation,
    /// Anything else.
    Other,
}

/// Activation functions of the GPUMemNet MLP data, in its spelling and alphabetical order;
/// GPUMemNet encodes the index in this list as an angle.
pub const ACTIVATION_FUNCTIONS: [&str; 11] =
    ["ELU", "GELU", "Identity", "LeakyReLU", "Mish", "PReLU", "ReLU", "SELU", "SiLU", "Softplus", "Tanh"];

/// Other element-wise activation layers, recognised for the counts only.
const OTHER_ACTIVATIONS: [&str; 6] =
    ["Sigmoid", "ReLU6", "Hardswish", "Hardsigmoid", "Softsign", "QuickGELU"];

/// Classifies a layer type name, case-insensitively.
pub fn layer_class(kind: &str) -> LayerClass {
    // Without allocating: the tick and `carma bench estimate` classify every layer of
    // summaries with hundreds of layers on each estimate.
    let is = |name: &str| kind.eq_ignore_ascii_case(name);
    let starts =
        |prefix: &str| kind.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix));
    if is("linear") || is("lazylinear") {
        return LayerClass::Linear;
    }
    if starts("batchnorm") || is("batch_normalization") || is("syncbatchnorm") {
        return LayerClass::BatchNorm;
    }
    if starts("dropout") || is("alphadropout") {
        return LayerClass::Dropout;
    }
    if is("conv2d") {
        return LayerClass::Conv2d;
    }
    if is("layernorm") {
        return LayerClass::LayerNorm;
    }
    if ACTIVATION_FUNCTIONS.iter().chain(OTHER_ACTIVATIONS.iter()).any(|name| name.eq_ignore_ascii_case(kind))
    {
        return LayerClass::Activation;
    }
    LayerClass::Other
}
