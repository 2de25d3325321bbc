//! The documented formats in `schema/` match what the code accepts and emits.
//!
//! Each test drives the real binary (or, for event kinds the CLI cannot produce yet, writes
//! journal records through the library) and compares the actual JSON with the JSON Schemas,
//! key by key, using only serde_json. A failure here means the code and `schema/` drifted:
//! update the schema (and its version tag if the change is not additive, see
//! schema/README.md) in the same change as the code.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use carma::journal::{Event, Journal, ProcessRef, Record};
use common::{TestHome, stderr};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// Schema files
// ---------------------------------------------------------------------------------------

/// The output formats: every key is always emitted, so every property must be required.
const OUTPUT_SCHEMAS: [&str; 19] = [
    "queue",
    "task",
    "array",
    "event",
    "inventory",
    "report",
    "gpus",
    "slurm-gres",
    "slurm-shards",
    "slurm-queue",
    "journal-check",
    "journal-salvage",
    "journal-backup",
    "config-check",
    "simulate-copies",
    "logs",
    "submitted",
    "dry-run",
    "reservations",
];

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schema")
}

fn examples_dir() -> PathBuf {
    schema_dir().join("examples")
}

/// The examples as shipped: they must submit from where they are, with the model summaries
/// and script they name (issue: examples that did not submit as shipped).
fn submittable_examples() -> PathBuf {
    examples_dir()
}

/// `schema/NAME.schema.json`, parsed.
fn schema(name: &str) -> Value {
    let path = schema_dir().join(format!("{name}.schema.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()))
}

/// Files in `dir` whose name ends with `suffix`, sorted.
fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(suffix)))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *{suffix} in {}", dir.display());
    files
}

/// The `schema` tag an output schema pins with `const`.
fn schema_tag(schema: &Value) -> &str {
    schema["properties"]["schema"]["const"].as_str().expect("output schema pins its tag with const")
}

// ---------------------------------------------------------------------------------------
// Key comparisons
// ---------------------------------------------------------------------------------------

/// Keys of a JSON object (empty for anything else).
fn keys(value: &Value) -> BTreeSet<String> {
    value.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

/// Strings of a JSON array such as `required` or `enum`.
fn strings(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// Asserts two key sets are equal, naming what is missing on each side.
fn assert_same_keys(what: &str, actual: &BTreeSet<String>, documented: &BTreeSet<String>) {
    let undocumented: Vec<_> = actual.difference(documented).collect();
    let missing: Vec<_> = documented.difference(actual).collect();
    assert!(
        undocumented.is_empty() && missing.is_empty(),
        "{what}: keys differ\n  in the code but not the schema: {undocumented:?}\n  in the schema but not the code: {missing:?}"
    );
}

/// Follows a local `$ref` such as `#/$defs/TaskSpec`.
fn resolve<'a>(root: &'a Value, reference: &str) -> &'a Value {
    let pointer = reference.strip_prefix('#').unwrap_or_else(|| panic!("non-local $ref {reference}"));
    root.pointer(pointer).unwrap_or_else(|| panic!("dangling $ref {reference}"))
}

fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        other => panic!("unknown JSON Schema type {other}"),
    }
}

/// The subset of JSON Schema our schemas use (`$ref`, `type`, `const`, `enum`, `minimum`,
/// `maximum`, `properties`, `required`, `additionalProperties`, `items`, `prefixItems`,
/// `anyOf`, `allOf`, `if`/`then`), checked recursively. Returns one line per problem.
fn problems(root: &Value, node: &Value, value: &Value, at: &str) -> Vec<String> {
    let mut out = Vec::new();
    if node == &Value::Bool(false) {
        out.push(format!("{at}: not allowed here"));
        return out;
    }
    if let Some(reference) = node["$ref"].as_str() {
        out.extend(problems(root, resolve(root, reference), value, at));
    }
    let types: Vec<&str> = match &node["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| type_matches(t, value)) {
        out.push(format!("{at}: {value} is not of type {types:?}"));
        return out;
    }
    if let Some(expected) = node.get("const")
        && expected != value
    {
        out.push(format!("{at}: {value} is not the const {expected}"));
    }
    if let Some(allowed) = node["enum"].as_array()
        && !allowed.contains(value)
    {
        out.push(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if let (Some(min), Some(v)) = (node["minimum"].as_f64(), value.as_f64())
        && v < min
    {
        out.push(format!("{at}: {value} is below the minimum {min}"));
    }
    if let (Some(max), Some(v)) = (node["maximum"].as_f64(), value.as_f64())
        && v > max
    {
        out.push(format!("{at}: {value} is above the maximum {max}"));
    }
    if let Some(object) = value.as_object() {
        let properties = node["properties"].as_object();
        for required in strings(&node["required"]) {
            if !object.contains_key(&required) {
                out.push(format!("{at}: required key `{required}` is missing"));
            }
        }
        for (key, item) in object {
            let path = format!("{at}.{key}");
            match properties.and_then(|p| p.get(key)) {
                Some(sub) => out.extend(problems(root, sub, item, &path)),
                None => match &node["additionalProperties"] {
                    Value::Bool(false) => out.push(format!("{path}: key not in the schema")),
                    extra @ Value::Object(_) => out.extend(problems(root, extra, item, &path)),
                    _ => {}
                },
            }
        }
    }
    if let Some(array) = value.as_array() {
        let prefix = node["prefixItems"].as_array().map_or(&[][..], Vec::as_slice);
        for (index, item) in array.iter().enumerate() {
            let sub = prefix.get(index).or_else(|| node.get("items"));
            if let Some(sub) = sub {
                out.extend(problems(root, sub, item, &format!("{at}[{index}]")));
            }
        }
    }
    if let Some(branches) = node["anyOf"].as_array() {
        let failures: Vec<Vec<String>> = branches.iter().map(|b| problems(root, b, value, at)).collect();
        if failures.iter().all(|f| !f.is_empty()) {
            out.push(format!("{at}: matches no anyOf branch: {failures:?}"));
        }
    }
    for sub in node["allOf"].as_array().into_iter().flatten() {
        out.extend(problems(root, sub, value, at));
    }
    if let Some(condition) = node.get("if")
        && problems(root, condition, value, at).is_empty()
        && let Some(then) = node.get("then")
    {
        out.extend(problems(root, then, value, at));
    }
    out
}

/// Asserts `value` conforms to `schema`: exactly its keys where `additionalProperties` is
/// false and every key required (see [`every_output_property_is_required`]), recursively.
fn assert_conforms(schema: &Value, value: &Value, what: &str) {
    let found = problems(schema, schema, value, "$");
    assert!(
        found.is_empty(),
        "{what} does not match {}:\n  {}\n{value:#}",
        schema["$id"],
        found.join("\n  ")
    );
}

/// Every object node of a schema (following `properties`, `items`, `$defs`, `anyOf`, ...),
/// with a path for messages.
fn object_nodes<'a>(node: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
    let Some(map) = node.as_object() else {
        if let Some(items) = node.as_array() {
            for (i, item) in items.iter().enumerate() {
                object_nodes(item, format!("{at}[{i}]"), out);
            }
        }
        return;
    };
    if map.contains_key("properties") {
        out.push((at.clone(), node));
    }
    for (key, child) in map {
        // `if`/`then` only narrow a property of the enclosing object; `$defs` are visited.
        if !["examples", "const", "enum", "default", "if", "then", "not", "propertyNames"]
            .contains(&key.as_str())
        {
            object_nodes(child, format!("{at}/{key}"), out);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Running carma
// ---------------------------------------------------------------------------------------

fn json_of(home: &TestHome, args: &[&str]) -> Value {
    let text = home.ok(args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("carma {args:?} printed no JSON ({e}): {text}"))
}

fn submit(home: &TestHome, args: &[&str]) -> String {
    let mut all = vec!["submit", "--parsable"];
    all.extend_from_slice(args);
    home.ok(&all).trim().to_string()
}

/// Goal: `carma show ARRAY --json` matches schema/array.schema.json, in the spool and after
/// ingest (issue 23).
#[test]
fn show_of_an_array_matches_its_schema() {
    let home = TestHome::new();
    let array = submit(&home, &["--array", "0-1", "--", "true"]);
    let array_schema = schema("array");
    for state in ["Submitted", "Pending"] {
        let shown = json_of(&home, &["show", &array, "--json"]);
        assert_conforms(&array_schema, &shown, &format!("carma show {array} --json"));
        assert_eq!(shown["tasks"][1]["index"], 1);
        assert_eq!(shown["tasks"][0]["state"], state);
        home.ok(&["tick"]);
    }
}

/// Writes a TOML spec built from a JSON object into the home and returns its path.
fn write_spec(home: &TestHome, file: &str, spec: &Value) -> String {
    let text = toml::to_string(spec).unwrap_or_else(|e| panic!("{spec} as TOML: {e}"));
    let path = home.path().join(file);
    std::fs::write(&path, text).unwrap();
    if let Some(summary) = spec["model_summary"].as_str() {
        let target = home.path().join(summary);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(examples_dir().join("model-summary.mlp.json"), target).unwrap();
    }
    path.display().to_string()
}

/// The field names serde lists after "unknown field `KEY`" in carma's one-line error.
fn fields_listed_in_error(error: &str, unknown: &str) -> BTreeSet<String> {
    let marker = format!("unknown field `{unknown}`");
    let start = error.find(&marker).unwrap_or_else(|| panic!("no `{marker}` in: {error}")) + marker.len();
    let rest = &error[start..];
    let rest = rest.split("; fix the spec").next().unwrap();
    rest.split('`').skip(1).step_by(2).map(String::from).collect()
}

/// Checks `carma queue --all --json`, `carma show --json` of every task and every line of
/// `carma events --json` against their schemas; returns the event kinds seen.
fn check_outputs(home: &TestHome) -> BTreeSet<String> {
    let queue_schema = schema("queue");
    let queue = json_of(home, &["queue", "--all", "--json"]);
    assert_conforms(&queue_schema, &queue, "carma queue --all --json");
    assert_eq!(queue["schema"], schema_tag(&queue_schema));
    assert_conforms(&queue_schema, &json_of(home, &["queue", "--json"]), "carma queue --json");

    let task_schema = schema("task");
    for row in queue["tasks"].as_array().unwrap() {
        let id = row["id"].as_str().unwrap();
        let shown = json_of(home, &["show", id, "--json"]);
        assert_conforms(&task_schema, &shown, &format!("carma show {id} --json"));
        assert_eq!(shown["schema"], schema_tag(&task_schema));
    }

    let event_schema = schema("event");
    let mut kinds = BTreeSet::new();
    for event in home.events() {
        let kind = event["kind"].as_str().unwrap().to_string();
        assert_conforms(&event_schema, &event, &format!("carma events --json line of kind {kind}"));
        assert_eq!(event["schema"], schema_tag(&event_schema));
        // The if/then in the schema picks the data shape; check it directly too, so a
        // schema whose if/then is broken cannot pass by checking nothing.
        let data_schema = &event_schema["$defs"][&kind];
        assert!(data_schema.is_object(), "event.schema.json has no $defs/{kind}");
        assert_same_keys(&format!("{kind} data"), &keys(&event["data"]), &keys(&data_schema["properties"]));
        kinds.insert(kind);
    }
    kinds
}

// ---------------------------------------------------------------------------------------
// The schema files themselves
// ---------------------------------------------------------------------------------------

#[test]
fn every_schema_file_is_json_with_id_title_and_described_properties() {
    for path in files_ending(&schema_dir(), ".schema.json") {
        let name = path.display().to_string();
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{name}: not JSON: {e}"));
        assert_eq!(doc["$schema"], "https://json-schema.org/draft/2020-12/schema", "{name}: $schema");
        for key in ["$id", "title", "description"] {
            assert!(doc[key].as_str().is_some_and(|s| !s.trim().is_empty()), "{name}: no {key}");
        }
        let mut nodes = Vec::new();
        object_nodes(&doc, String::new(), &mut nodes);
        for (at, node) in nodes {
            for (key, property) in node["properties"].as_object().unwrap() {
                assert!(
                    property["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "{name}: {at}/properties/{key} has no description"
                );
            }
        }
    }
}

#[test]
fn every_output_property_is_required_and_nothing_else_allowed() {
    for name in OUTPUT_SCHEMAS {
        let doc = schema(name);
        let mut nodes = Vec::new();
        object_nodes(&doc, String::new(), &mut nodes);
        for (at, node) in nodes {
            let what = format!("{name}.schema.json{at}");
            assert_eq!(node["additionalProperties"], false, "{what}: additionalProperties must be false");
            assert_same_keys(
                &format!("{what} required"),
                &strings(&node["required"]),
                &keys(&node["properties"]),
            );
        }
    }
}

#[test]
fn every_schema_example_matches_its_schema() {
    for path in files_ending(&schema_dir(), ".schema.json") {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let examples =
            doc["examples"].as_array().unwrap_or_else(|| panic!("{}: no examples", path.display()));
        assert!(!examples.is_empty(), "{}: no examples", path.display());
        for example in examples {
            assert_conforms(&doc, example, &format!("an example in {}", path.display()));
        }
    }
}

/// Goal: `carma estimate --json` matches schema/estimate.schema.json for an MLP summary
/// (every estimator answers) and a dumper summary (GPUMemNet declines it, carma's real-model
/// networks answer), with the headline figures of the tick's estimator.
#[test]
fn estimate_output_matches_its_schema() {
    let estimate_schema = schema("estimate");
    let tiny = "../../estimator-training/fixtures/small-models/test_vit_bs8.json";
    for (example, family) in
        [("model-summary.mlp.json", "mlp"), ("model-summary.vit.json", "transformer"), (tiny, "transformer")]
    {
        let path = examples_dir().join(example);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_carma"))
            .args(["estimate", "--summary", path.to_str().unwrap(), "--batch-size", "32", "--json"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let value: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_conforms(&estimate_schema, &value, &format!("carma estimate --json on {example}"));
        assert_eq!(value["family"], family);
        assert_eq!(value["estimator"], "carma");
        let carma =
            value["estimates"].as_array().unwrap().iter().find(|a| a["estimator"] == "carma").unwrap();
        assert_eq!(value["upper_mib"], carma["estimate"]["upper_mib"]);
        assert!(value["upper_mib"].as_u64().unwrap() >= value["mib"].as_u64().unwrap());
    }
}

#[test]
fn readme_indexes_every_schema_and_example_and_the_journal_version() {
    let readme = std::fs::read_to_string(schema_dir().join("README.md")).unwrap();
    let files = files_ending(&schema_dir(), ".schema.json")
        .into_iter()
        .chain(std::fs::read_dir(examples_dir()).unwrap().map(|e| e.unwrap().path()));
    for path in files {
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        assert!(readme.contains(&file), "schema/README.md does not mention {file}");
    }
    for name in OUTPUT_SCHEMAS {
        let tag = schema_tag(&schema(name)).to_string();
        assert!(readme.contains(&format!("`{tag}`")), "schema/README.md does not mention `{tag}`");
    }
    let version = carma::journal::frame::FORMAT_VERSION;
    assert!(
        readme.contains(&format!("FORMAT_VERSION = {version}")),
        "schema/README.md documents another journal FORMAT_VERSION than {version}"
    );
}

// ---------------------------------------------------------------------------------------
// Task spec (input)
// ---------------------------------------------------------------------------------------

#[test]
fn every_toml_example_is_accepted_by_submit_and_tick() {
    let spec_schema = schema("task-spec");
    let home = TestHome::new();
    let mut ids = Vec::new();
    for path in files_ending(&submittable_examples(), ".toml") {
        let file = path.display().to_string();
        let parsed: toml::Table = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_conforms(&spec_schema, &serde_json::to_value(&parsed).unwrap(), &file);
        ids.push(submit(&home, &[&file]));
    }
    home.ok(&["tick"]);
    let queue = json_of(&home, &["queue", "--json"]);
    let queued: BTreeSet<String> =
        queue["tasks"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_string()).collect();
    assert_same_keys("queued ids (the tick re-validates every example)", &queued, &ids.into_iter().collect());
    assert_eq!(queue["rejected"], json!([]));
}

#[test]
fn rad_example_imports_with_its_four_reference_figures() {
    let path = submittable_examples().join("resnet_cifar100.rad");
    let text = std::fs::read_to_string(&path).unwrap();
    // The last four lines are oracle, Horus, FakeTensor and GPUMemNet, in MiB.
    let figures: Vec<u64> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .rev()
        .take(4)
        .map(|l| l.split(" #").next().unwrap().trim().parse().expect("a MiB figure"))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let home = TestHome::new();
    let id = submit(&home, &["--rad", &path.display().to_string()]);
    home.ok(&["tick"]);
    let shown = json_of(&home, &["show", &id, "--json"]);
    let spec = &shown["task"]["spec"];
    assert_eq!(
        spec["reference"],
        json!({"oracle": figures[0], "horus": figures[1], "faketensor": figures[2], "gpumemnet": figures[3]})
    );
    assert_eq!(spec["memory_mib"], figures[0], "the oracle figure is the declared memory");
    assert_eq!(spec["name"], "resnet_cifar100");
    assert_eq!(spec["command"].as_array().unwrap()[..2], ["python3", "train.py"]);
    assert_eq!(spec["gpus"], 1);
    assert_eq!(spec["dataset"], "cifar100");
    assert_eq!(spec["policy_hint"], "collocation");
    assert_eq!(spec["batch_size"], 128);
    assert_conforms(&schema("task"), &shown, "carma show --json of the .rad task");
}

/// A spec with every schema property set to its first example.
fn spec_with_every_property(spec_schema: &Value) -> Value {
    let properties = spec_schema["properties"].as_object().unwrap();
    let spec: serde_json::Map<String, Value> = properties
        .iter()
        .map(|(key, property)| {
            let example = property["examples"][0].clone();
            assert!(!example.is_null(), "task-spec.schema.json: property {key} has no example");
            (key.clone(), example)
        })
        .collect();
    Value::Object(spec)
}

#[test]
fn every_spec_property_in_the_schema_is_accepted() {
    let spec_schema = schema("task-spec");
    let home = TestHome::new();
    // `mail_user` needs a queue that sends mail (issue 23): one is named, never run here.
    home.set_config("[tick]\ngpus = \"none\"\n\n[notify]\nsendmail = \"/usr/sbin/sendmail\"\n");
    let full = spec_with_every_property(&spec_schema);
    assert_conforms(&spec_schema, &full, "the spec with every property");
    let mut specs = vec![full];
    specs.extend(spec_schema["examples"].as_array().unwrap().iter().cloned());
    let mut ids = Vec::new();
    for (index, spec) in specs.iter().enumerate() {
        // Submit checks what the documentation's examples only name (a workdir, a program):
        // point those at things that exist here (`write_spec` provides the summary file).
        let mut spec = spec.clone();
        spec["workdir"] = json!(home.path().display().to_string());
        spec["command"][0] = json!("true");
        if spec.get("notify").is_some() {
            spec["notify"][0] = json!("true");
        }
        if spec.get("after").is_some() {
            // A dependency must name a task that exists: the first one submitted here.
            let first = submit(&home, &["--", "true"]);
            spec["after"] = json!([format!("afterany:{first}")]);
        }
        if let Some(name) = spec.get("reservation").and_then(Value::as_str) {
            // `submit --reservation` refuses a reservation that does not exist or is not
            // the submitter's: make it (there are no GPUs here for `carma reserve create`).
            reserve_for_me(&home, name);
        }
        let path = write_spec(&home, &format!("spec-{index}.toml"), &spec);
        ids.push(submit(&home, &[&path]));
    }
    home.ok(&["tick"]);
    let queue = json_of(&home, &["queue", "--json"]);
    let queued = queue["tasks"].as_array().unwrap();
    assert!(
        ids.iter().all(|id| queued.iter().any(|t| t["id"] == id.as_str())),
        "every spec is queued: {queue:#}"
    );
    // The reference figures survive into the journal under their output names.
    let shown = json_of(&home, &["show", &ids[0], "--json"]);
    let documented = &specs[0]["reference"];
    for (key, value) in documented.as_object().unwrap() {
        assert_eq!(
            &shown["task"]["spec"]["reference"][key.trim_end_matches("_mib")],
            value,
            "reference {key}"
        );
    }
}

/// Journals (and publishes) a reservation `name` for this test's user, unless it exists.
fn reserve_for_me(home: &TestHome, name: &str) {
    let mut journal = Journal::open(&home.path().join("carma.redb")).unwrap();
    let mut state = journal.load_state().unwrap();
    if state.gpu_reservations.contains_key(name) {
        return;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let now = carma::clock::Clock::now_ms(&carma::clock::SystemClock);
    let event = Event::ReservationCreated {
        name: name.into(),
        start_ms: now,
        end_ms: now + 3_600_000,
        users: vec![me],
        gpu_count: 1,
        gpus: vec![],
        by_uid: me,
    };
    journal.append(&[Record { time_ms: now, event }], &mut state).unwrap();
    carma::view::publish(&carma::home::Home::at(home.path()), &journal, &state).unwrap();
}

#[test]
fn the_spec_accepts_exactly_the_schema_properties() {
    let spec_schema = schema("task-spec");
    let home = TestHome::new();
    let mut spec = json!({"name": "x", "command": ["true"], "not_in_schema": 1});
    let path = write_spec(&home, "unknown-key.toml", &spec);
    let out = home.run(&["submit", &path]);
    assert_eq!(out.status.code(), Some(2), "an unknown key is refused: {}", stderr(&out));
    let accepted = fields_listed_in_error(&stderr(&out), "not_in_schema");
    assert_same_keys("spec keys", &accepted, &keys(&spec_schema["properties"]));

    spec = json!({"name": "x", "command": ["true"], "reference": {"not_in_schema_mib": 1}});
    let path = write_spec(&home, "unknown-reference-key.toml", &spec);
    let out = home.run(&["submit", &path]);
    assert_eq!(out.status.code(), Some(2), "an unknown [reference] key is refused: {}", stderr(&out));
    let accepted = fields_listed_in_error(&stderr(&out), "not_in_schema_mib");
    assert_same_keys(
        "[reference] keys",
        &accepted,
        &keys(&spec_schema["properties"]["reference"]["properties"]),
    );
}

#[test]
fn documented_spec_defaults_are_the_real_defaults() {
    let spec_schema = schema("task-spec");
    let home = TestHome::new();
    let path = write_spec(&home, "defaults.toml", &json!({"name": "x", "command": ["true"]}));
    let id = submit(&home, &[&path]);
    home.ok(&["tick"]);
    let spec = json_of(&home, &["show", &id, "--json"])["task"]["spec"].clone();
    for key in ["gpus", "max_retries"] {
        assert_eq!(spec[key], spec_schema["properties"][key]["default"], "default of {key}");
    }
    let home_dir = home.path().canonicalize().unwrap();
    assert_eq!(
        Path::new(spec["workdir"].as_str().unwrap()).canonicalize().unwrap(),
        home_dir,
        "workdir defaults to the spec file's directory"
    );
}

// ---------------------------------------------------------------------------------------
// Outputs
// ---------------------------------------------------------------------------------------

#[test]
fn scenario_outputs_match_the_schemas() {
    let home = TestHome::new();
    let fake_gpus = examples_dir().join("fake-gpus-2xA100.json");
    home.set_config(&format!("[tick]\ngpus = \"fake:{}\"\n", fake_gpus.display()));
    let example = submittable_examples().join("train-resnet.toml").display().to_string();
    let first = submit(&home, &[&example]);
    let _second = submit(&home, &["--gpus", "2", "--mem", "20GiB", "--", "python", "bert.py"]);
    // A third submission is garbled in the spool so the tick rejects it.
    let garbled = submit(&home, &["--", "true"]);
    std::fs::write(home.spool().join(format!("{garbled}.toml")), "this is not toml").unwrap();
    home.ok(&["tick"]);
    home.ok(&["cancel", &first]);

    let queue = json_of(&home, &["queue", "--all", "--json"]);
    assert_eq!(queue["tasks"].as_array().unwrap().len(), 2);
    assert_eq!(queue["rejected"].as_array().unwrap().len(), 1);
    let kinds = check_outputs(&home);
    for kind in ["GpuDiscovered", "MetricSample", "Submitted", "Rejected", "TickCompleted", "Cancelled"] {
        assert!(kinds.contains(kind), "the scenario journals a {kind} event; it journaled {kinds:?}");
    }
    // The tick wrote the inventory of the two fake GPUs.
    let text =
        std::fs::read_to_string(home.path().join("inventory.json")).expect("the tick writes inventory.json");
    let inventory: Value = serde_json::from_str(&text).unwrap();
    let inventory_schema = schema("inventory");
    assert_conforms(&inventory_schema, &inventory, "inventory.json");
    assert_eq!(inventory["schema"], schema_tag(&inventory_schema));
    assert_eq!(inventory["gpus"].as_array().unwrap().len(), 2);
}

/// The schema name of every `Event` variant. A compile error here means a new variant:
/// describe it in schema/event.schema.json (`kind` enum, `$defs`, `allOf`) and below.
fn documented_kind(event: &Event) -> &'static str {
    match event {
        Event::Submitted { .. } => "Submitted",
        Event::Rejected { .. } => "Rejected",
        Event::Cancelled { .. } => "Cancelled",
        Event::Estimated { .. } => "Estimated",
        Event::Pending { .. } => "Pending",
        Event::Placed { .. } => "Placed",
        Event::Launched { .. } => "Launched",
        Event::Finished { .. } => "Finished",
        Event::Failed { .. } => "Failed",
        Event::OomDetected { .. } => "OomDetected",
        Event::Lost { .. } => "Lost",
        Event::Requeued { .. } => "Requeued",
        Event::TickCompleted { .. } => "TickCompleted",
        Event::MetricSample { .. } => "MetricSample",
        Event::GpuDiscovered { .. } => "GpuDiscovered",
        Event::GpuProbeStatus { .. } => "GpuProbeStatus",
        Event::Stopped { .. } => "Stopped",
        Event::Usage { .. } => "Usage",
        Event::EstimateFailed { .. } => "EstimateFailed",
        Event::IngestDeferred { .. } => "IngestDeferred",
        Event::Reaped { .. } => "Reaped",
        Event::GpuHealthChanged { .. } => "GpuHealthChanged",
        Event::SlurmPlaced { .. } => "SlurmPlaced",
        Event::SmObserved { .. } => "SmObserved",
        Event::Held { .. } => "Held",
        Event::Released { .. } => "Released",
        Event::Updated { .. } => "Updated",
        Event::Reserved { .. } => "Reserved",
        Event::Notified { .. } => "Notified",
        Event::NotifyFailed { .. } => "NotifyFailed",
        Event::RequeueRequested { .. } => "RequeueRequested",
        Event::MemoryExceeded { .. } => "MemoryExceeded",
        Event::Preempted { .. } => "Preempted",
        Event::Checkpointed { .. } => "Checkpointed",
        Event::ReservationCreated { .. } => "ReservationCreated",
        Event::ReservationDeleted { .. } => "ReservationDeleted",
        Event::Suspended { .. } => "Suspended",
        Event::Resumed { .. } => "Resumed",
        Event::PreemptionWithdrawn { .. } => "PreemptionWithdrawn",
        Event::SuspensionEnded { .. } => "SuspensionEnded",
    }
}

/// The `sample` of the MetricSample example in event.schema.json.
fn documented_sample() -> Value {
    let event_schema = schema("event");
    let example = event_schema["examples"].as_array().unwrap().iter().find(|e| e["kind"] == "MetricSample");
    example.expect("event.schema.json has a MetricSample example")["data"]["sample"].clone()
}

/// A task's whole life, one event of every kind, as the tick and supervisor will write it.
fn one_event_of_every_kind(home: &TestHome) -> Vec<Event> {
    let spec = |name: &str| {
        let text = format!("name = \"{name}\"\ncommand = [\"python\", \"train.py\"]\nmemory = \"8GiB\"\n");
        carma::spec::parse_toml("test", &text)
            .unwrap()
            .validate("test", home.path(), carma::spec::Limits::default())
            .unwrap()
    };
    let id = |n: u32| carma::id::TaskId::from_parts(1_767_225_600_000 + u64::from(n), n);
    let (a, b, c, d, e) = (id(1), id(2), id(3), id(4), id(5));
    let gpu = |i: u32| vec![format!("GPU-0000000{i}-aaaa-bbbb-cccc-000000000000")];
    let supervisor =
        |pid: u32| ProcessRef { pid, start_time_ticks: 912_345, boot_id: "3f9d2c1e-8a4b-4c7d".into() };
    let placed = |task: &carma::id::TaskId, attempt: u32| Event::Placed {
        task: task.clone(),
        attempt,
        gpus: gpu(attempt),
        exclusive: attempt == 1,
        requirement_mib: Some(8192),
        reason: "fits on GPU 0".into(),
    };
    let launched = |task: &carma::id::TaskId, attempt: u32| Event::Launched {
        task: task.clone(),
        attempt,
        supervisor: supervisor(4000 + attempt),
        adopted: attempt == 2,
    };
    let submitted = |task: &carma::id::TaskId| Event::Submitted {
        task: task.clone(),
        submitter_uid: 1000,
        spec: spec(task.as_str()),
    };
    // A member of a sweep with every workflow field set.
    let w = id(7);
    let mut workflow_spec = spec("sweep");
    workflow_spec.dependencies =
        vec![carma::spec::Dependency { kind: carma::spec::DependencyKind::AfterAny, task: a.clone() }];
    workflow_spec.keep_on_dependency_failure = true;
    workflow_spec.array = Some(carma::spec::ArrayMember {
        id: id(6),
        index: 1,
        count: 4,
        running_max: Some(2),
        params: vec![("lr".into(), "0.01".into())],
    });
    workflow_spec.priority = 5;
    workflow_spec.nice = 1;
    workflow_spec.hold = true;
    workflow_spec.notify = vec!["/usr/bin/notify-send".into(), "done".into()];
    workflow_spec.mail_user = Some("alice@example.org".into());
    workflow_spec.script = Some("/home/alice/train.sh".into());
    workflow_spec.signal = Some("B:USR1@60".into());
    workflow_spec.begin_ms = Some(1_767_225_660_000);
    vec![
        submitted(&a),
        submitted(&b),
        submitted(&c),
        submitted(&d),
        submitted(&e),
        // A Slurm job's start, as a node's Prolog journals it.
        Event::SlurmPlaced {
            task: e.clone(),
            attempt: 1,
            cluster: "lab".into(),
            job_id: 4242,
            node: "gpu-node-3".into(),
            shards: Some(14),
            shard_mib: 1024,
        },
        placed(&e, 1),
        Event::Launched {
            task: e.clone(),
            attempt: 1,
            supervisor: ProcessRef { pid: 0, start_time_ticks: 0, boot_id: "3f9d2c1e-8a4b-4c7d".into() },
            adopted: false,
        },
        Event::Submitted { task: w.clone(), submitter_uid: 1000, spec: workflow_spec },
        Event::Released { task: w.clone(), by_uid: 1000 },
        Event::Held { task: w.clone(), by_uid: 0 },
        Event::Updated {
            task: w.clone(),
            by_uid: 1000,
            priority: Some(-3),
            nice: None,
            memory_mib: Some(4096),
            time_limit_ms: Some(7_200_000),
            gpus: None,
        },
        Event::Reserved { task: w.clone(), gpus: gpu(1) },
        Event::Cancelled {
            task: w.clone(),
            by_uid: 0,
            reason: "DependencyNeverSatisfied: afterok x failed".into(),
        },
        Event::Notified {
            task: w.clone(),
            channel: "command".into(),
            notice: "END".into(),
            detail: "started /usr/bin/notify-send as uid 1000 (pid 4242)".into(),
        },
        Event::NotifyFailed {
            task: w.clone(),
            channel: "mail".into(),
            notice: "BEGIN".into(),
            reason: "no sendmail is configured ([notify] sendmail in config.toml)".into(),
        },
        Event::Rejected {
            task: None,
            spool_file: "bad name.toml".into(),
            submitter_uid: 1001,
            reason: "bad".into(),
        },
        Event::Estimated {
            task: a.clone(),
            method: "declared".into(),
            mib: 8192,
            upper_mib: 9000,
            explanation: "declared 8 GiB".into(),
        },
        Event::Pending { task: a.clone(), reason: "waiting for a GPU".into() },
        placed(&a, 1),
        launched(&a, 1),
        Event::RequeueRequested { task: a.clone(), by_uid: 1000 },
        Event::OomDetected {
            task: a.clone(),
            attempt: 1,
            evidence: "CUDA out of memory".into(),
            peak_mib: Some(8100),
        },
        Event::Requeued {
            task: a.clone(),
            recovery: true,
            requirement_mib: Some(12288),
            recovery_mode: carma::journal::RequeueMode::Recovery(carma::sched::RecoveryMode::Exclusive),
            reason: "out of memory".into(),
        },
        placed(&a, 2),
        launched(&a, 2),
        placed(&b, 1),
        launched(&b, 1),
        Event::Reaped {
            task: b.clone(),
            attempt: 1,
            processes: 2,
            remaining: vec![4711],
            detail: "processes of attempt 1 survive SIGKILL: 4711 (state D)".into(),
        },
        Event::Reaped {
            task: b.clone(),
            attempt: 1,
            processes: 1,
            remaining: vec![],
            detail: "killed 1 leftover process(es) of attempt 1: 4711".into(),
        },
        Event::Lost { task: b.clone(), attempt: 1, reason: "supervisor died".into() },
        Event::Failed {
            task: b.clone(),
            attempt: 1,
            outcome: "lost".into(),
            reason: "no retries left".into(),
        },
        placed(&c, 1),
        launched(&c, 1),
        Event::Checkpointed { task: c.clone(), attempt: 1 },
        Event::Suspended { task: c.clone(), attempt: 1, by: d.clone() },
        Event::Resumed { task: c.clone(), attempt: 1 },
        Event::Suspended { task: c.clone(), attempt: 1, by: d.clone() },
        Event::SuspensionEnded {
            task: c.clone(),
            attempt: 1,
            reason: "suspended for 61 min, past [sched.preemption] suspend-max (60 min)".into(),
        },
        Event::PreemptionWithdrawn {
            task: c.clone(),
            attempt: 1,
            reason: "preemptor x was cancelled".into(),
        },
        Event::Preempted {
            task: c.clone(),
            attempt: 1,
            by: d.clone(),
            reason: "blocked head waited 31m".into(),
            lost_ms: 90_000,
        },
        Event::Finished { task: c.clone(), attempt: 1, exit_ms: 1_767_225_700_000 },
        placed(&d, 1),
        launched(&d, 1),
        Event::Cancelled { task: d.clone(), by_uid: 0, reason: "cancelled by uid 0".into() },
        Event::Stopped { task: d.clone(), attempt: 1, outcome: "cancelled".into() },
        placed(&d, 2),
        Event::MemoryExceeded {
            task: d.clone(),
            attempt: 2,
            gpu: "GPU-00000001-aaaa-bbbb-cccc-000000000000".into(),
            used_mib: 10_035,
            declared_mib: 1024,
            reason: "used 9.8 GiB on GPU0, declared 1.0 GiB (+ 1.0 GiB margin)".into(),
        },
        Event::ReservationCreated {
            name: "paper".into(),
            start_ms: 1_767_258_000_000,
            end_ms: 1_767_430_800_000,
            users: vec![1001, 1002],
            gpu_count: 2,
            gpus: vec![],
            by_uid: 0,
        },
        Event::ReservationDeleted { name: "paper".into(), by_uid: 0 },
        Event::Usage { task: c.clone(), attempt: 1, peak_mib: 9216 },
        Event::SmObserved { task: c.clone(), attempt: 1, sm_util: 0.625 },
        Event::EstimateFailed {
            task: d.clone(),
            reason: "/models/d.json: summary JSON: expected value at line 1 column 1".into(),
            summary_stamp: 0x1234_5678_9abc,
        },
        Event::TickCompleted { ingested: 4, rejected: 1, placed: 4, duration_us: 1450, rr_cursor: 1 },
        Event::GpuProbeStatus { detail: "NVML: driver not loaded".into() },
        Event::GpuProbeStatus { detail: String::new() },
        Event::IngestDeferred { entries: 12 },
        Event::GpuDiscovered {
            uuid: "GPU-00000001-aaaa-bbbb-cccc-000000000000".into(),
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_total_mib: 81559,
        },
        Event::GpuHealthChanged {
            uuid: "GPU-00000001-aaaa-bbbb-cccc-000000000000".into(),
            index: 0,
            health: carma::gpu::GpuHealth::XidError { xid: 79, detail: "fell off the bus".into() },
        },
        Event::GpuHealthChanged {
            uuid: "GPU-00000001-aaaa-bbbb-cccc-000000000000".into(),
            index: 0,
            health: carma::gpu::GpuHealth::Healthy,
        },
        // The documented example must deserialise into the real GpuSample.
        Event::MetricSample {
            sample: serde_json::from_value(documented_sample()).expect("the example is a GpuSample"),
        },
    ]
}

#[test]
fn every_event_kind_matches_its_documented_data() {
    let home = TestHome::new();
    let events = one_event_of_every_kind(&home);
    {
        let mut journal = Journal::open(&home.path().join("carma.redb")).unwrap();
        let mut state = journal.load_state().unwrap();
        let records: Vec<Record> = events
            .iter()
            .enumerate()
            .map(|(i, event)| Record { time_ms: 1_767_225_600_000 + i as u64, event: event.clone() })
            .collect();
        journal.append(&records, &mut state).unwrap();
        // What every journal writer does before it lets go of the lock: publish for readers.
        carma::view::publish(&carma::home::Home::at(home.path()), &journal, &state).unwrap();
    }
    let mut written = BTreeSet::new();
    for event in &events {
        assert_eq!(event.kind(), documented_kind(event), "Event::kind() and the schema name differ");
        written.insert(documented_kind(event).to_string());
    }
    let event_schema = schema("event");
    let documented = strings(&event_schema["properties"]["kind"]["enum"]);
    assert_same_keys("event kinds written by this test", &written, &documented);
    for kind in &documented {
        let dispatched = event_schema["allOf"].as_array().unwrap().iter().any(|rule| {
            rule["if"]["properties"]["kind"]["const"] == kind.as_str()
                && rule["then"]["properties"]["data"]["$ref"] == format!("#/$defs/{kind}")
        });
        assert!(dispatched, "event.schema.json: no allOf if/then maps kind {kind} to $defs/{kind}");
    }
    // Tasks with estimates, attempts, supervisors, recovery and every end state, too.
    let seen = check_outputs(&home);
    assert_eq!(seen, documented, "carma events --json shows every kind");
}

#[test]
fn inventory_schema_matches_the_code() {
    use carma::inventory::{INVENTORY_SCHEMA, Inventory, InventoryGpu};
    let inventory_schema = schema("inventory");
    assert_eq!(schema_tag(&inventory_schema), INVENTORY_SCHEMA);
    let written = Inventory {
        schema: INVENTORY_SCHEMA.into(),
        updated_ms: 1_767_225_600_000,
        gpus: vec![InventoryGpu {
            index: 0,
            uuid: "GPU-a".into(),
            name: "A100".into(),
            memory_total_mib: 40960,
            util_last_timestamp_us: Some(1_767_225_599_871_234),
        }],
    };
    assert_conforms(&inventory_schema, &serde_json::to_value(&written).unwrap(), "Inventory as serialised");

    // carma reads the documented example: submit then knows the machine's GPU count.
    let example = &inventory_schema["examples"][0];
    let count = example["gpus"].as_array().unwrap().len();
    let home = TestHome::new();
    std::fs::write(home.path().join("inventory.json"), serde_json::to_string_pretty(example).unwrap())
        .unwrap();
    let too_many = (count + 1).to_string();
    let out = home.run(&["submit", "--gpus", &too_many, "--", "true"]);
    common::assert_error(
        &out,
        2,
        &format!(
            "command line: gpus = {too_many}: this machine has only {count} GPU(s); ask for at most {count}"
        ),
    );
    submit(&home, &["--gpus", &count.to_string(), "--", "true"]);
}

/// Goal: `carma report --json` emits exactly what schema/report.schema.json documents.
/// Method: simulate a tiny synthetic trace (two tasks, one GPU) through the CLI, then compare
/// the report of its journal with the schema.
#[test]
fn report_json_matches_its_schema() {
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("profiles.csv");
    std::fs::write(
        &profiles,
        "workload,model,batch_size,gpus,exclusive_minutes,class,mem_actual_mib,est_horus_mib,est_faketensor_mib,est_gpumemnet_mib,smact_assumed\n\
         a,m,32,1,2,light,2000,1800,100,8000,0.3\n",
    )
    .unwrap();
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, "offset_s,workload\n0,a\n30,a\n").unwrap();
    let journal = dir.path().join("run.redb");
    let home = TestHome::new();
    let path = |p: &Path| p.display().to_string();
    let (trace, profiles, journal, scratch) =
        (path(&trace), path(&profiles), path(&journal), path(dir.path()));
    home.ok(&[
        "simulate",
        "--trace",
        &trace,
        "--profiles",
        &profiles,
        "--gpus",
        "1xA100-40GB",
        "--journal",
        &journal,
        "--scratch",
        &scratch,
        "-q",
    ]);
    let report = json_of(&home, &["report", "--journal", &journal, "--journal", &journal, "--json"]);
    assert_conforms(&schema("report"), &report, "carma report --json");
    assert_eq!(report["reports"][0]["finished"], 2);
    assert_eq!(report["reports"][0]["attempts"], json!([]), "attempts only with --tasks");
    let merged = json_of(&home, &["report", "--journal", &journal, "--merge", "--tasks", "--json"]);
    assert_conforms(&schema("report"), &merged, "carma report --merge --tasks --json");
    let attempts = merged["reports"][0]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{merged:#}");
    assert!(attempts.iter().all(|a| a["outcome"] == "exit 0" && a["gpus"] == json!(["0"])), "{merged:#}");
}

/// Goal: `carma slurm gres --json` and `carma slurm shards --json` emit exactly what their
/// schemas document. Method: a fake two-GPU node and a declared and an estimated figure.
#[test]
fn slurm_outputs_match_their_schemas() {
    let home = TestHome::new();
    let gpus = home.path().join("gpus.json");
    std::fs::write(&gpus, common::cluster::TWO_A100).unwrap();
    let spec = format!("fake:{}", gpus.display());
    let gres = json_of(&home, &["slurm", "gres", "--gpus", &spec, "--node", "n1", "--json"]);
    assert_conforms(&schema("slurm-gres"), &gres, "carma slurm gres --json");
    assert_eq!(
        (gres["node_gres"].as_str(), gres["shards_per_gpu"].as_u64()),
        (Some("gpu:2,shard:80"), Some(40))
    );
    let shards = json_of(&home, &["slurm", "shards", "--mem", "12GiB", "--json"]);
    assert_conforms(&schema("slurm-shards"), &shards, "carma slurm shards --json");
    assert_eq!(shards["shards"], 14);
    let summary = examples_dir().join("model-summary.mlp.json");
    let args =
        ["slurm", "shards", "--model-summary", summary.to_str().unwrap(), "--batch-size", "32", "--json"];
    let estimated = json_of(&home, &args);
    assert_conforms(&schema("slurm-shards"), &estimated, "carma slurm shards --model-summary --json");
    assert_eq!(estimated["source"], "carma");
}

/// Goal: `carma queue --journal DIR --json` (a Slurm cluster's view) emits exactly what
/// schema/slurm-queue.schema.json documents, shows an array member in Slurm's notation, and,
/// without squeue, says so in one line and still shows the journal.
/// Method: a Slurm start journaled through the hooks' record builder, squeue off the PATH.
#[test]
fn slurm_queue_matches_its_schema() {
    use carma::slurm::records::{JobStart, start_records};
    let home = TestHome::new();
    let start = JobStart {
        cluster: "lab".into(),
        job_id: 14,
        node: "n1".into(),
        restart_count: 0,
        uid: 0,
        name: "sweep".into(),
        workdir: "/tmp".into(),
        comment: None,
        submit_ms: 1_790_000_000_000,
        started_ms: 1_790_000_001_000,
        gpus: vec!["GPU-fake-0000".into()],
        shards: Some(4),
        rule: carma::slurm::ShardRule::default(),
        boot_id: "boot".into(),
        array: Some("13_0".into()),
    };
    let (_, records) = start_records(&carma::journal::State::default(), &start);
    let journal_path = home.path().join("carma.redb");
    {
        let mut journal = Journal::open(&journal_path).unwrap();
        let mut state = journal.load_state().unwrap();
        journal.append(&records, &mut state).unwrap();
    }
    let out = home
        .cmd()
        .env("PATH", "/nonexistent")
        .args(["queue", "--journal", journal_path.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "carma: squeue failed (squeue is not on PATH; install Slurm's clients (slurm-client)); pending jobs are missing, shown is what the node journals have; check slurmctld (`scontrol ping`, `systemctl status slurmctld`) and retry\n"
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_conforms(&schema("slurm-queue"), &json, "carma queue --journal --json");
    let job = &json["jobs"][0];
    assert_eq!(
        (&job["job"], &job["state"], &job["node"], &job["shards"], &job["source"], &job["user"]),
        (&json!("13_0"), &json!("R"), &json!("n1"), &json!(4), &json!("journal"), &json!("root"))
    );
    assert_eq!(json["squeue_error"], "squeue is not on PATH; install Slurm's clients (slurm-client)");
}

/// Goal: `carma gpus --json` emits exactly what schema/gpus.schema.json documents, for GPUs
/// with MIG instances, reserved memory, a coarse SM source, a lost GPU and an XID error, and
/// a task on a MIG instance; the human table fits 80 columns.
/// Method: the fake-GPU example with all of these, one task submitted and placed by a tick.
#[test]
fn gpus_json_matches_its_schema() {
    let home = TestHome::new();
    let fake_gpus = examples_dir().join("fake-gpus-mig-lost.json");
    home.set_config(&format!("[tick]\ngpus = \"fake:{}\"\n", fake_gpus.display()));
    let id = submit(&home, &["--mem", "4GiB", "--", "sleep", "30"]);
    home.ok(&["tick"]);
    let gpus = json_of(&home, &["gpus", "--json"]);
    let gpus_schema = schema("gpus");
    assert_conforms(&gpus_schema, &gpus, "carma gpus --json");
    assert_eq!(gpus["schema"], schema_tag(&gpus_schema));
    let rows = gpus["gpus"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let placed_on = rows[0]["mig_instances"][1]["tasks"].clone();
    assert_eq!(placed_on, json!([id]), "the idle 1g.10gb instance took the task: {gpus:#}");
    assert_eq!(rows[0]["mig_instances"][1]["carma_reserved_mib"], 4096);
    assert_eq!(rows[0]["memory_reserved_mib"], 1024);
    assert_eq!(rows[1]["sm_source"], "device_util");
    assert_eq!(rows[2]["unavailable_reason"], "lost (fell off the bus (XID 79))");
    assert_eq!(rows[3]["xid"], 48);
    let table = home.ok(&["gpus"]);
    for line in table.lines() {
        assert!(line.chars().count() <= 80, "wider than 80 columns: {line:?}");
    }
    home.ok(&["cancel", &id]);
    home.ok(&["tick"]);
}

/// Goal: `carma journal check --json` and `carma journal salvage --json` match their schemas
/// for a sound journal, a damaged one (every copy of record 1's frame has a flipped bit, so it
/// is lost), and a file redb cannot open (garbage holding one frame).
#[test]
fn journal_check_and_salvage_outputs_match_their_schemas() {
    let (check_schema, salvage_schema) = (schema("journal-check"), schema("journal-salvage"));
    let home = TestHome::new();
    for _ in 0..3 {
        submit(&home, &["--", "true"]);
    }
    home.ok(&["tick"]);
    let sound = json_of(&home, &["journal", "check", "--json"]);
    assert_conforms(&check_schema, &sound, "carma journal check --json (sound)");
    assert_eq!((&sound["schema"], &sound["sound"]), (&json!(schema_tag(&check_schema)), &json!(true)));

    let mut bytes = std::fs::read(home.path().join("carma.redb")).unwrap();
    let frames = common::frame_offsets(&bytes, 1);
    assert!(!frames.is_empty(), "record 1 has a frame in the file");
    for at in &frames {
        bytes[at + 20] ^= 0x10;
    }
    let damaged = home.path().join("damaged.redb");
    std::fs::write(&damaged, &bytes).unwrap();
    let damaged = damaged.to_str().unwrap();
    let check = home.run(&["journal", "check", "--journal", damaged, "--json"]);
    assert_eq!(check.status.code(), Some(3), "{}", stderr(&check));
    let report: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_conforms(&check_schema, &report, "carma journal check --json (damaged)");
    assert!(
        report["problems"].as_array().unwrap().iter().any(|p| p["kind"] == "damaged" && p["first_seq"] == 1)
    );
    let out = home.path().join("salvaged.redb");
    let salvage = json_of(
        &home,
        &["journal", "salvage", "--journal", damaged, "--out", out.to_str().unwrap(), "--json"],
    );
    assert_conforms(&salvage_schema, &salvage, "carma journal salvage --json (damaged)");
    assert_eq!((&salvage["lost_records"], &salvage["out_sound"]), (&json!(1), &json!(true)));
    assert_eq!(salvage["schema"], schema_tag(&salvage_schema));

    let mut garbage = vec![0x55u8; 8192];
    let whole = std::fs::read(home.path().join("carma.redb")).unwrap();
    let at = common::frame_offsets(&whole, 2)[0];
    let (_, _, len) = carma::journal::frame::decode_frame(&whole[at..]).unwrap();
    garbage.extend_from_slice(&whole[at..at + len]);
    let file = home.path().join("garbage.redb");
    std::fs::write(&file, &garbage).unwrap();
    let check = home.run(&["journal", "check", "--journal", file.to_str().unwrap(), "--json"]);
    assert_eq!(check.status.code(), Some(3), "{}", stderr(&check));
    let report: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_conforms(&check_schema, &report, "carma journal check --json (unopenable)");
    assert_eq!((&report["opened"], &report["raw_scan"]["frames"]), (&json!("unopenable"), &json!(1)));
    let out = home.path().join("from-garbage.redb");
    let args =
        ["journal", "salvage", "--journal", file.to_str().unwrap(), "--out", out.to_str().unwrap(), "--json"];
    let salvage = json_of(&home, &args);
    assert_conforms(&salvage_schema, &salvage, "carma journal salvage --json (unopenable)");
    assert_eq!((&salvage["kept"], &salvage["from_raw_scan"]), (&json!(1), &json!(1)));
}

/// Goal: `carma simulate --copies K --json` emits exactly what
/// schema/simulate-copies.schema.json documents, and its figures agree with themselves.
/// Method: the committed demo trace, 2 copies on 2 simulated GPUs, through the CLI.
#[test]
fn simulate_copies_json_matches_its_schema() {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = |p: &Path| p.display().to_string();
    // The demo trace's first 12 tasks: enough for collocation, quick in a debug build.
    let demo = std::fs::read_to_string(root.join("traces/demo-40.csv")).unwrap();
    let trace = dir.path().join("demo-12.csv");
    std::fs::write(&trace, demo.lines().take(13).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    let home = TestHome::new();
    let out = home.run(&[
        "simulate",
        "--trace",
        &path(&trace),
        "--profiles",
        &path(&root.join("traces/demo-profiles.csv")),
        "--gpus",
        "2xA100-40GB",
        "--estimator",
        "gpumemnet-paper",
        "--sharing",
        "mps",
        "--copies",
        "2",
        "--jitter",
        "30s",
        "--seed",
        "3",
        "--scratch",
        &path(dir.path()),
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    let copies_schema = schema("simulate-copies");
    assert_conforms(&copies_schema, &value, "carma simulate --copies 2 --json");
    assert_eq!(value["schema"], schema_tag(&copies_schema));
    let runs = value["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let makespans: Vec<f64> = runs.iter().map(|r| r["run"]["makespan_h"].as_f64().unwrap()).collect();
    let mean = value["run"]["makespan_h"]["mean"].as_f64().unwrap();
    assert!((mean - (makespans[0] + makespans[1]) / 2.0).abs() < 1e-9);
    assert_ne!(runs[0]["seed"], runs[1]["seed"], "each copy has its own seed");
    assert!(
        value["versus_exclusive"]["makespan_pct"]["mean"].as_f64().unwrap() < 0.0,
        "sharing beats exclusive"
    );
}

/// Goal: `carma reserve list --json` matches schema/reservations.schema.json, and `carma gpus
/// --json` names the reservation on the GPU it holds.
/// Method: two fake GPUs, a tick (so the GPUs are known), a reservation of GPU1 by the queue's
/// owner (an administrator), both documents checked against their schemas.
#[test]
fn reservation_list_matches_its_schema() {
    let home = TestHome::new();
    let fake_gpus = examples_dir().join("fake-gpus-2xA100.json");
    home.set_config(&format!("[tick]\ngpus = \"fake:{}\"\n", fake_gpus.display()));
    home.ok(&["tick"]);
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() }.to_string();
    let args =
        ["reserve", "create", "--name", "paper", "--gpu", "1", "--start", "now+1hour", "--duration", "2d"];
    let mut args: Vec<&str> = args.to_vec();
    args.extend(["--users", &me]);
    home.ok(&args);
    let list = json_of(&home, &["reserve", "list", "--json"]);
    let list_schema = schema("reservations");
    assert_conforms(&list_schema, &list, "carma reserve list --json");
    assert_eq!(list["schema"], schema_tag(&list_schema));
    let row = &list["reservations"][0];
    assert_eq!((row["name"].as_str(), row["state"].as_str()), (Some("paper"), Some("waiting")), "{list:#}");
    assert_eq!(row["gpus"], json!(["GPU1"]));
    let gpus = json_of(&home, &["gpus", "--json"]);
    assert_conforms(&schema("gpus"), &gpus, "carma gpus --json with a reservation");
    let held = gpus["gpus"][1]["reservations"].as_array().unwrap();
    assert_eq!(held.len(), 1, "{gpus:#}");
    assert!(held[0].as_str().unwrap().starts_with("\"paper\" from "), "{gpus:#}");
    assert_eq!(gpus["gpus"][0]["reservations"], json!([]));
}

/// Goal: `carma submit --dry-run --json` matches schema/dry-run.schema.json, for a command
/// and for an sbatch script whose host memory, CPUs, requeue and array come from its
/// directives, each with the line that set it and whether this queue enforces the limits.
#[test]
fn submit_dry_run_json_matches_its_schema() {
    let home = TestHome::new();
    let dry_schema = schema("dry-run");
    let plain = json_of(&home, &["submit", "--dry-run", "--json", "--", "true"]);
    assert_conforms(&dry_schema, &plain, "carma submit --dry-run --json -- true");
    assert_eq!(plain["schema"], schema_tag(&dry_schema));
    let unlimited = json!({"value": null, "source": "default", "enforced": false, "not_enforced": null});
    assert_eq!(plain["host_memory_mib"], unlimited);
    assert_eq!(plain["cpus"], unlimited);
    assert_eq!(plain["requeue"], json!({"value": null, "source": "default"}));
    assert_eq!(plain["tasks"][0]["argv"], json!(["true"]));

    let script = home.path().join("job.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n#SBATCH --mem=2G\n#SBATCH -c 2\n#SBATCH --requeue\n#SBATCH --array=0-2%1\n#SBATCH -t 15\ntrue\n",
    )
    .unwrap();
    let out = home
        .cmd()
        .current_dir(home.path())
        .args(["submit", "--dry-run", "--json", "job.sh"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_conforms(&dry_schema, &shown, "carma submit --dry-run --json job.sh");
    let memory_why = carma::exec::hostlimit::unenforced_here(
        carma::exec::hostlimit::queue_tick_is_root(home.path()),
        "memory",
    );
    let cpu_why = carma::exec::hostlimit::unenforced_here(
        carma::exec::hostlimit::queue_tick_is_root(home.path()),
        "cpu",
    );
    assert_eq!(
        shown["host_memory_mib"],
        json!({"value": 2048, "source": "job.sh:2 #SBATCH --mem=2G", "enforced": memory_why.is_none(), "not_enforced": memory_why})
    );
    assert_eq!(
        shown["cpus"],
        json!({"value": 2, "source": "job.sh:3 #SBATCH -c 2", "enforced": cpu_why.is_none(), "not_enforced": cpu_why})
    );
    assert_eq!(shown["requeue"], json!({"value": true, "source": "job.sh:4 #SBATCH --requeue"}));
    assert_eq!(shown["array"]["value"]["count"], 3);
    assert_eq!(shown["array"]["value"]["running_max"], 1);
    assert_eq!(shown["time_limit_ms"], json!({"value": 900_000, "source": "job.sh:6 #SBATCH -t 15"}));
    assert_eq!(shown["tasks"].as_array().map(Vec::len), Some(3));
    assert_eq!(shown["tasks"][2]["index"], 2);
}

/// Goal: `carma journal backup --json`, `carma config check --json` and `carma report --json`'s
/// per-user figures match their schemas (issue 42), for a queue that ran a task.
#[test]
fn backup_config_check_and_per_user_outputs_match_their_schemas() {
    let home = TestHome::with_fake_gpus(common::cluster::TWO_A100, "magm");
    submit(&home, &["--gpus", "1", "--gpu-mem", "1GiB", "--", "true"]);
    home.tick_until_done(std::time::Duration::from_secs(60));
    let dest = home.path().join("backup");
    let backup = json_of(&home, &["journal", "backup", dest.to_str().unwrap(), "--json"]);
    let backup_schema = schema("journal-backup");
    assert_conforms(&backup_schema, &backup, "carma journal backup --json");
    assert_conforms(&schema("journal-check"), &backup["check"], "carma journal backup --json's check");
    assert_eq!(backup["schema"], schema_tag(&backup_schema));
    let check = json_of(&home, &["config", "check", "--json"]);
    let check_schema = schema("config-check");
    assert_conforms(&check_schema, &check, "carma config check --json");
    assert_eq!((&check["schema"], &check["problems"]), (&json!(schema_tag(&check_schema)), &json!(0)));
    let report = json_of(&home, &["report", "--json"]);
    assert_conforms(&schema("report"), &report, "carma report --json");
    assert_eq!(report["reports"][0]["users"][0]["attempts"], 1);
}
