//! Estimator tests on the committed example summary and on synthetic ones.

use super::*;

fn example() -> ModelSummary {
    parse::parse_any(include_str!("../../schema/examples/model-summary.mlp.json")).unwrap()
}

/// Goal: every estimator answers the example, carma's upper bound sits above its point, and
/// the point is near the measured 1545 MiB of this GPUMemNet row (row 0 of step 2).
#[test]
fn every_estimator_on_the_example() {
    let summary = example();
    let input = EstimateInput { summary: &summary, batch_size: 996, declared_mib: Some(2500) };
    for name in ESTIMATOR_NAMES {
        let e = by_name(name).unwrap().estimate(&input).unwrap();
        assert_eq!(e.method, name);
        assert!(e.upper_mib >= e.mib);
        assert!(!e.explanation().is_empty());
    }
    let carma = carma::Carma.estimate(&input).unwrap();
    assert!(carma.mib.abs_diff(1545) < 100, "{carma:?}");
    assert!(carma.upper_mib >= 1545, "{carma:?}");
    assert_eq!(gpumemnet::GpuMemNet.estimate(&input).unwrap().mib, 2000);
}

/// Goal: a CNN goes through carma's conservative formula, and GPUMemNet declines it.
#[test]
fn cnn_uses_the_formula_path() {
    let mut summary = example();
    summary.family = Family::Cnn;
    let input = EstimateInput { summary: &summary, batch_size: 64, declared_mib: None };
    let e = carma::Carma.estimate(&input).unwrap();
    let terms = physics::terms(&input);
    let point = CONTEXT_FLOOR_MIB as f64 + terms.state_mib + terms.activations_mib;
    assert_eq!(e.mib, point.ceil() as u64);
    assert!(e.upper_mib as f64 >= point * 1.1);
    assert!(e.note.contains("not calibrated"));
    assert!(matches!(gpumemnet::GpuMemNet.estimate(&input), Err(EstimateError::NotApplicable { .. })));
    assert!(matches!(physics::Oracle.estimate(&input), Err(EstimateError::NotApplicable { .. })));
}

/// Goal: carma's point grows with the batch size (more activations, more memory).
#[test]
fn carma_is_monotone_in_batch_on_the_example() {
    let summary = example();
    let at = |batch| {
        carma::Carma
            .estimate(&EstimateInput { summary: &summary, batch_size: batch, declared_mib: None })
            .unwrap()
            .mib
    };
    assert!(at(64) <= at(512) && at(512) <= at(4096), "{} {} {}", at(64), at(512), at(4096));
}

/// Goal: the GPUMemNet activation encoding keeps floats on the half circle (the original's
/// integer cast made every angle 0 or ±1).
#[test]
fn activation_angle_is_a_float_on_the_half_circle() {
    let (sin, cos) = gpumemnet::activation_angle("GELU");
    assert!(sin > 0.0 && sin < 1.0 && cos > 0.0 && cos < 1.0, "{sin} {cos}");
    assert_eq!(gpumemnet::activation_angle("ELU"), (0.0, 1.0));
    assert_eq!(gpumemnet::activation_angle("unknown"), gpumemnet::activation_angle("ReLU"));
}

/// Goal: bucket classes follow ceil(mib / width).
#[test]
fn bucket_classes() {
    assert_eq!(gpumemnet::class_of(1000.0, 1000), 0);
    assert_eq!(gpumemnet::class_of(1001.0, 1000), 1);
    assert_eq!(gpumemnet::class_of(1545.0, 1000), 1);
}

fn vit_large() -> ModelSummary {
    parse::parse_any(include_str!("../../schema/examples/model-summary.vit.json")).unwrap()
}

/// Goal: a dumper summary (it carries saved bytes) goes to the real-model networks, whose
/// upper figure covers ViT-L's measured 7,617 MiB at batch 8 (A100, timm runs), and whose
/// figures grow with the batch; without saved bytes the same model falls back to the formula.
#[test]
fn dumper_summaries_use_the_real_model_networks() {
    let summary = vit_large();
    assert_eq!(summary.family, Family::Transformer);
    let at = |summary: &ModelSummary, batch| {
        carma::Carma.estimate(&EstimateInput { summary, batch_size: batch, declared_mib: None }).unwrap()
    };
    let e = at(&summary, 8);
    assert!(e.note.contains("timm runs"), "{e:?}");
    assert!(e.terms.iter().any(|t| t.name == "saved for backward"), "{e:?}");
    assert!(e.upper_mib >= 7617 && e.upper_mib < 2 * 7617, "{e:?}");
    assert!(e.mib >= 4643, "below the weights, gradients and Adam state alone: {e:?}");
    let (small, large) = (at(&summary, 16), at(&summary, 64));
    assert!(e.mib < small.mib && small.mib < large.mib, "{} {} {}", e.mib, small.mib, large.mib);
    assert!(e.upper_mib < small.upper_mib && small.upper_mib < large.upper_mib);

    let mut bare = summary.clone();
    bare.saved_bytes_per_sample = None;
    bare.attention_bytes_per_sample = None;
    assert!(at(&bare, 8).note.contains("not calibrated"));
}

/// Goal: a summary whose attention part exceeds the saved bytes it is part of is refused
/// with a message naming both figures.
#[test]
fn attention_above_saved_bytes_is_refused() {
    let mut summary = vit_large();
    summary.saved_bytes_per_sample = Some(10);
    summary.attention_bytes_per_sample = Some(11);
    assert_eq!(
        summary.validate().unwrap_err(),
        "attention_bytes_per_sample 11 is more than saved_bytes_per_sample 10"
    );
}

/// Goal: every summary the dumper wrote for the paper's models (committed fixtures) parses,
/// validates, names its family and saved bytes, and gets a carma figure with upper ≥ point
/// that covers at least the context, the weights and their gradients (GPT-2 large, far from
/// the vision training data, once came out below its own weights).
#[test]
fn every_dumper_fixture_parses_and_is_estimated() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("estimator-training/fixtures/paper-models");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            files.push(path);
        }
    }
    assert_eq!(files.len(), 28, "18 CNN cases and 2 x 5 language-model cases");
    for path in files {
        let summary = read_summary(&path).unwrap();
        summary.validate().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(summary.saved_bytes_per_sample.is_some_and(|b| b > 0), "{}", path.display());
        assert!(matches!(summary.family, Family::Cnn | Family::Transformer), "{}", path.display());
        let batch_size = summary.batch_size.unwrap();
        let input = EstimateInput { summary: &summary, batch_size, declared_mib: None };
        let e = carma::Carma.estimate(&input).unwrap();
        let floor = CONTEXT_FLOOR_MIB as f64 + summary.stats().params as f64 * 8.0 / (1024.0 * 1024.0);
        assert!(e.upper_mib >= e.mib && e.mib as f64 >= floor, "{}: {e:?}", path.display());
    }
}

/// Goal: the real-model figure is the members' median row by row: the middle one of an odd
/// ensemble, the mean of the two middle ones of an even one (a sort along the wrong axis, or
/// the wrong slice, would give another member's figure).
#[test]
fn ensemble_figure_is_the_members_median() {
    use burn::tensor::{Device, Tensor, TensorData};
    let device = Device::flex();
    device.seed(5);
    let rows = 4;
    let matrix = |cols: usize, offset: f32| {
        let v: Vec<f32> = (0..rows * cols).map(|i| ((i as f32) * 0.37 + offset).sin()).collect();
        Tensor::<2>::from_data(TensorData::new(v, [rows, cols]), &device)
    };
    let (physical, features) = (matrix(vision::PHYSICAL, 0.1), matrix(vision::FEATURES, 0.7));
    for members in [1, 3, 4] {
        let nets = vision::VisionNets::new(members, &device);
        let each: Vec<Vec<f32>> =
            nets.point.iter().map(|n| nets::to_vec(n.forward(physical.clone(), features.clone()))).collect();
        let got = vision::median_forward(&nets.point, &physical, &features);
        for row in 0..rows {
            let mut column: Vec<f32> = each.iter().map(|m| m[row]).collect();
            column.sort_by(f32::total_cmp);
            let want = if members % 2 == 1 {
                column[members / 2]
            } else {
                (column[members / 2 - 1] + column[members / 2]) / 2.0
            };
            assert!((got[row] - want).abs() < 1e-6, "{members} members, row {row}: {} vs {want}", got[row]);
        }
        if members > 1 {
            assert!(each[0] != each[1], "members must differ for the test to mean anything");
        }
    }
}

/// Goal: metadata written before ensembles (no `members`) reads as one member, and metadata
/// claiming none is refused with a message that says so.
#[test]
fn vision_metadata_members() {
    let model = vision::embedded().unwrap();
    let mut meta = serde_json::to_value(&model.meta).unwrap();
    meta.as_object_mut().unwrap().remove("members");
    let old: vision::Meta = serde_json::from_value(meta.clone()).unwrap();
    assert_eq!(old.members, 1);
    meta["members"] = 0.into();
    let err = vision::Model::load(&[], &meta.to_string(), &burn::tensor::Device::flex()).unwrap_err();
    assert_eq!(err, "metadata: an ensemble needs at least one member");
}

/// Goal: the real-model networks flag what they were not trained on. Method: the paper's
/// fixtures: every CNN is in the domain and keeps its calibrated figure; every language model
/// (token input) is out, says so in its note, and its upper figure is the conservative bound,
/// at least the training card's capacity and never below its measured memory (the profiles'
/// figures: BERT base 20774, BERT large 13568, XLNet base 9718, XLNet large 14546, GPT-2 large
/// 27902 MiB), whatever the sequence length.
#[test]
fn language_models_are_outside_the_vision_domain_and_not_under_estimated() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("estimator-training/fixtures/paper-models");
    let model = vision::embedded().unwrap();
    let measured = [
        ("bert-base", 20774),
        ("bert-large", 13568),
        ("xlnet-base", 9718),
        ("xlnet-large", 14546),
        ("gpt2-large", 27902),
    ];
    let mut language_models = 0;
    for sub in ["", "seq128", "seq512"] {
        for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                continue;
            }
            let summary = read_summary(&path).unwrap();
            let batch_size = summary.batch_size.unwrap();
            let input = EstimateInput { summary: &summary, batch_size, declared_mib: None };
            let e = carma::Carma.estimate(&input).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if sub.is_empty() {
                assert_eq!(e.outside_domain, None, "{name}: a CNN is in the domain");
                assert_eq!(e.bound, Some(Bound::Calibrated), "{name}");
                assert!(!e.note.contains("OUTSIDE"), "{name}: {}", e.note);
                continue;
            }
            language_models += 1;
            let why = e.outside_domain.as_deref().unwrap_or_else(|| panic!("{name}: not flagged"));
            assert!(why.contains("tokens, not an image"), "{name}: {why}");
            assert!(e.note.starts_with("OUTSIDE THE TRAINING DOMAIN"), "{name}: {}", e.note);
            assert!(e.upper_mib as f64 >= model.meta.capacity_mib, "{name}: {e:?}");
            assert_eq!(e.bound, Some(Bound::WholeCard), "{name}");
            let (_, actual) = measured.iter().find(|(m, _)| name.starts_with(m)).unwrap();
            assert!(e.upper_mib >= *actual, "{name}: upper {} under measured {actual}", e.upper_mib);
        }
    }
    assert_eq!(language_models, 10);
}

/// Goal: a vision summary with a feature far beyond the training spread is flagged by name,
/// as above the spread.
#[test]
fn a_feature_far_outside_the_training_spread_is_out_of_domain() {
    let model = vision::embedded().unwrap();
    let summary = fixture("paper-models/resnet50_bs32.json");
    let input = EstimateInput { summary: &summary, batch_size: 32, declared_mib: None };
    let mut row = vision::inputs(&input).unwrap();
    assert_eq!(domain::domain(&summary, &row, &model.meta.scaler), Domain::Inside);
    // 1000 times the parameters, far beyond any timm model.
    row.features[0] = (summary.stats().params as f32 * 1000.0).ln_1p();
    let Domain::Outside(why) = domain::domain(&summary, &row, &model.meta.scaler) else {
        panic!("not outside")
    };
    assert!(why.starts_with("parameters is ") && why.contains("above the training mean"), "{why}");
}

fn fixture(name: &str) -> ModelSummary {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("estimator-training/fixtures");
    read_summary(&dir.join(name)).unwrap()
}

/// Goal: distances are measured on the log features the networks see, and the side decides
/// the case: only features below the spread make the input "below"; one above makes it
/// outside whatever the others. Method: resnet50's row with its largest layer moved to
/// 4.5 training standard deviations below the mean (a layer e^(4.5 sd) times smaller), then
/// its parameters also moved above.
#[test]
fn the_domain_check_is_on_the_log_scale_and_knows_its_sides() {
    let model = vision::embedded().unwrap();
    let scaler = &model.meta.scaler;
    let summary = fixture("paper-models/resnet50_bs32.json");
    let input = EstimateInput { summary: &summary, batch_size: 32, declared_mib: None };
    let mut row = vision::inputs(&input).unwrap();
    let largest = summary.stats().activations_layer_max as f32;
    assert!((row.features[6] - largest.ln_1p()).abs() < 1e-4, "the feature is ln(1 + largest layer)");
    row.features[6] = scaler.mean[6] - 4.5 * scaler.std[6];
    let Domain::Below(why) = domain::domain(&summary, &row, scaler) else { panic!("not below") };
    assert!(why.contains("largest layer 4.5") && why.contains("below the training mean"), "{why}");
    // Still inside at 3.9 sd: the limit is DOMAIN_Z_MAX on that scale.
    row.features[6] = scaler.mean[6] - 3.9 * scaler.std[6];
    assert_eq!(domain::domain(&summary, &row, scaler), Domain::Inside);
    row.features[6] = scaler.mean[6] - 4.5 * scaler.std[6];
    row.features[0] = scaler.mean[0] + 4.2 * scaler.std[0];
    let Domain::Outside(why) = domain::domain(&summary, &row, scaler) else { panic!("not outside") };
    assert!(why.starts_with("parameters is 4.2 standard deviations above"), "{why}");
}

/// Goal: a model smaller than every training model (timm's `test_vit`, 371k parameters,
/// 160 px) gets the physical bound, not the card: upper = ratio x (context + 16 B/param +
/// batch x saved bytes + fixed), computed here from the summary by hand, far below the
/// 40,000 MiB card and above the physical sum; the note and `bound` say which case applied.
#[test]
fn a_model_below_the_training_spread_gets_the_physical_bound_not_the_card() {
    let model = vision::embedded().unwrap();
    let ratio = model.meta.below_spread_ratio;
    assert!((1.0..4.0).contains(&ratio), "ratio {ratio}");
    for batch_size in [8, 128] {
        let summary = fixture(&format!("small-models/test_vit_bs{batch_size}.json"));
        let input = EstimateInput { summary: &summary, batch_size, declared_mib: None };
        let e = carma::Carma.estimate(&input).unwrap();
        assert_eq!(e.bound, Some(Bound::BelowSpread), "bs{batch_size}: {e:?}");
        let why = e.outside_domain.as_deref().unwrap();
        assert!(why.starts_with("smaller than every training model"), "{why}");
        assert!(e.note.starts_with("BELOW THE TRAINING SPREAD"), "{}", e.note);
        let mib = 1024.0 * 1024.0;
        let physical = CONTEXT_FLOOR_MIB as f64
            + 16.0 * summary.stats().params as f64 / mib
            + f64::from(batch_size) * summary.saved_bytes_per_sample.unwrap() as f64 / mib
            + summary.saved_bytes_fixed.unwrap_or(0) as f64 / mib;
        let networks = model.predict_mib(&[vision::inputs(&input).unwrap()])[0].1;
        let want = (ratio * physical).max(networks).ceil() as u64;
        assert!(e.upper_mib.abs_diff(want) <= 1, "bs{batch_size}: upper {} want {want}", e.upper_mib);
        assert!(e.upper_mib as f64 > physical && e.upper_mib < 5_000, "bs{batch_size}: {}", e.upper_mib);
        assert!(e.mib <= e.upper_mib);
    }
}

/// Goal: below the spread the upper figure is the physical bound or the networks' upper
/// figure, whichever is higher, so a model below the spread in shape only (a VGG: no norm
/// layers) never gets less than the networks would give it. Method: resnet50's row with its
/// norm-layer count moved 4.5 sd below the mean, decided with a network upper figure under
/// and then over the physical bound.
#[test]
fn below_the_spread_the_bound_never_undercuts_the_networks() {
    let model = vision::embedded().unwrap();
    let summary = fixture("paper-models/resnet50_bs32.json");
    let input = EstimateInput { summary: &summary, batch_size: 32, declared_mib: None };
    let mut row = vision::inputs(&input).unwrap();
    row.features[10] = model.meta.scaler.mean[10] - 4.5 * model.meta.scaler.std[10];
    let physical = physics::terms(&input);
    let bound = domain::below_spread_upper_mib(&row, model.meta.below_spread_ratio);
    let low = vision::decide(model, &input, &row, &physical, (bound * 0.5, bound * 0.8));
    assert_eq!(low.domain.bound(), Bound::BelowSpread, "{low:?}");
    assert_eq!(low.upper_mib, bound);
    assert_eq!(low.point_mib, bound * 0.5);
    let high = vision::decide(model, &input, &row, &physical, (bound * 0.9, bound * 1.7));
    assert_eq!(high.upper_mib, bound * 1.7);
    assert_eq!(high.point_mib, bound * 0.9);
    assert!(high.upper_mib < model.meta.capacity_mib, "not the card: {high:?}");
}

/// Goal: a model larger than every training model still gets the whole card. Method:
/// resnet50 with every layer's parameters multiplied by 1000.
#[test]
fn a_model_above_the_training_spread_still_gets_the_whole_card() {
    let model = vision::embedded().unwrap();
    let mut summary = fixture("paper-models/resnet50_bs32.json");
    for layer in &mut summary.layers {
        layer.params *= 1000;
    }
    let input = EstimateInput { summary: &summary, batch_size: 32, declared_mib: None };
    let e = carma::Carma.estimate(&input).unwrap();
    assert_eq!(e.bound, Some(Bound::WholeCard), "{e:?}");
    assert!(e.upper_mib as f64 >= model.meta.capacity_mib, "{e:?}");
    assert!(e.note.starts_with("OUTSIDE THE TRAINING DOMAIN"), "{}", e.note);
}

/// Goal: metadata written before the below-spread ratio existed reads with the default.
#[test]
fn vision_metadata_without_a_below_spread_ratio_reads_the_default() {
    let model = vision::embedded().unwrap();
    let mut meta = serde_json::to_value(&model.meta).unwrap();
    meta.as_object_mut().unwrap().remove("below_spread_ratio");
    let old: vision::Meta = serde_json::from_value(meta).unwrap();
    assert_eq!(old.below_spread_ratio, domain::BELOW_SPREAD_RATIO_DEFAULT);
}

/// Goal (issue 32, item 0): job_submit.lua's summary check (root) refuses a FIFO without
/// opening it, with its one-line reason; earlier it opened the path before checking it.
#[test]
fn a_summary_that_is_a_fifo_is_refused_unopened() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("summary.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let me = crate::access::uid::effective();
    let (result, opened) = crate::fsutil::opened_during(&fifo, || read_summary_owned_by(&fifo, me));
    assert_eq!(
        result.unwrap_err(),
        format!(
            "{}: not a regular file owned by uid {me}; summaries must belong to the submitter",
            fifo.display()
        )
    );
    assert!(!opened, "the FIFO was never opened");
}
