//! Parser tests on small hand-written inputs in each format.

use super::*;
use crate::estimate::summary::Family;

const TORCHSUMMARY: &str = "----------------------------------------------------------------
        Layer (type)               Output Shape         Param #
================================================================
            Conv2d-1         [-1, 64, 112, 112]           9,408
       BatchNorm2d-2         [-1, 64, 112, 112]             128
              ReLU-3         [-1, 64, 112, 112]               0
            Linear-4                 [-1, 1000]       2,049,000
================================================================
Total params: 2,058,536
Trainable params: 2,058,536
----------------------------------------------------------------
";

/// Goal: torchsummary lines give type, shape without the batch axis, activations and params.
#[test]
fn torchsummary_table() {
    let s = parse_any(TORCHSUMMARY).unwrap();
    assert_eq!(s.family, Family::Cnn);
    assert_eq!(s.layers.len(), 4);
    assert_eq!(s.layers[0].kind, "Conv2d");
    assert_eq!(s.layers[0].output_shape.as_deref(), Some(&[64, 112, 112][..]));
    assert_eq!(s.layers[0].activations, 64 * 112 * 112);
    assert_eq!(s.layers[3].params, 2_049_000);
    assert_eq!(s.stats().params, 2_058_536);
}

/// Goal: module dump leaf lines with "N params"; containers are skipped; Linear's
/// out_features and element-wise inheritance give activations; a bracketed shape wins.
#[test]
fn module_dump_lines() {
    let text = "Net(
  (body): Sequential(
    (0): Linear(in_features=784, out_features=128, bias=True) 100480 params
    (1): BatchNorm1d(128, eps=1e-05) 256 params
    (2): ReLU() 0 params
    (3): Dropout(p=0.5) 0 params
    (4): Linear(in_features=128, out_features=10, bias=True) [10] 1,290 params
  )
)";
    let s = parse_any(text).unwrap();
    assert_eq!(s.family, Family::Mlp);
    let kinds: Vec<&str> = s.layers.iter().map(|l| l.kind.as_str()).collect();
    assert_eq!(kinds, ["Linear", "BatchNorm1d", "ReLU", "Dropout", "Linear"]);
    let acts: Vec<u64> = s.layers.iter().map(|l| l.activations).collect();
    assert_eq!(acts, [128, 128, 128, 128, 10]);
    assert_eq!(s.stats().params, 100480 + 256 + 1290);
    let stats = s.stats();
    assert_eq!((stats.linear_layers, stats.batchnorm_layers, stats.dropout_layers), (2, 1, 1));
    assert_eq!(stats.activation_function, "ReLU");
}

/// Goal: the GPUMemNet column parses with its own layer spellings mapped to PyTorch's.
#[test]
fn gpumemnet_column() {
    let s = parse_any("[('linear', 1173, 2753031), ('batch_normalization', 1173, 2346), ('ReLU', 1173, 0), ('dropout', 1173, 0), ('linear', 197, 115639), ('Softmax', 197, 0)]").unwrap();
    assert_eq!(s.family, Family::Mlp);
    let stats = s.stats();
    assert_eq!(stats.params, 2753031 + 2346 + 115639);
    assert_eq!(stats.activations, 1173 * 4 + 197 * 2);
    assert_eq!(stats.activations_layer_max, 1173);
    assert_eq!((stats.linear_layers, stats.batchnorm_layers, stats.dropout_layers), (2, 1, 1));
}

/// Goal: the committed example is valid and JSON round-trips.
#[test]
fn example_json_round_trips() {
    let text = include_str!("../../../schema/examples/model-summary.mlp.json");
    let s = parse_any(text).unwrap();
    assert_eq!(s.batch_size, Some(996));
    let again = parse_any(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(s, again);
}

/// Goal: bad inputs are refused with a message naming the problem.
#[test]
fn bad_inputs_are_refused() {
    assert!(parse_any("hello").unwrap_err().contains("unknown summary format"));
    assert!(parse_any("[('linear', x, 3)]").unwrap_err().contains("activations"));
    let shape_mismatch = r#"{"version":1,"family":"mlp","layers":[{"type":"Linear","output_shape":[3],"activations":4,"params":5}]}"#;
    assert!(parse_any(shape_mismatch).unwrap_err().contains("not the product"));
    let no_params = r#"{"version":1,"family":"mlp","layers":[{"type":"ReLU","activations":4,"params":0}]}"#;
    assert!(parse_any(no_params).unwrap_err().contains("no parameters"));
    assert!(parse_any(r#"{"version":2,"family":"mlp","layers":[]}"#).unwrap_err().contains("version"));
}

/// Goal: the family follows the layer types.
#[test]
fn family_inference() {
    let layer = |kind: &str| Layer { kind: kind.into(), output_shape: None, activations: 1, params: 1 };
    assert_eq!(infer_family(&[layer("Embedding"), layer("LayerNorm"), layer("Linear")]), Family::Transformer);
    assert_eq!(infer_family(&[layer("Conv2d"), layer("Linear")]), Family::Cnn);
    assert_eq!(infer_family(&[layer("Linear"), layer("GELU"), layer("Softmax")]), Family::Mlp);
    assert_eq!(infer_family(&[layer("LSTM"), layer("Linear")]), Family::Other);
}
