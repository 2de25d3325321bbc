//! `carma replay`: a trace submitted in real time through the real spool. Goals: one task per
//! row with the profile's name, GPUs and memory and the substituted command; submissions
//! spaced by offset / speedup in wall time; bad input refused with one line and exit code 2
//! before anything is submitted. Method: a 3-row trace at speedup 100 (0, 0.1 s, 0.2 s)
//! against a temp state directory without GPUs, then `carma tick` and `carma queue --json`.

mod common;

use common::{TestHome, assert_error, stdout};

const PROFILES: &str = "workload,model,batch_size,gpus,exclusive_minutes,class,mem_actual_mib,est_horus_mib,est_faketensor_mib,est_gpumemnet_mib,smact_assumed\n\
    light,mlp,32,1,3,light,2000,1800,100,8000,0.3\n\
    cnn,resnet50,64,1,8,medium,12000,11000,6000,16000,0.65\n\
    duo,gpt2,8,2,12,heavy,14000,5000,40000,16000,0.8\n";

const TRACE: &str = "offset_s,workload\n0,cnn\n10,light\n20,duo\n";

fn inputs(home: &TestHome, trace: &str) -> (String, String) {
    let trace_path = home.path().join("trace.csv");
    let profiles_path = home.path().join("profiles.csv");
    std::fs::write(&trace_path, trace).unwrap();
    std::fs::write(&profiles_path, PROFILES).unwrap();
    (trace_path.display().to_string(), profiles_path.display().to_string())
}

#[test]
fn replay_submits_each_row_in_real_time() {
    let home = TestHome::new();
    let (trace, profiles) = inputs(&home, TRACE);
    let out = home.ok(&[
        "replay",
        "--trace",
        &trace,
        "--profiles",
        &profiles,
        "--speedup",
        "100",
        "--parsable",
        "--",
        "true",
        "{workload}",
        "--model={model}",
        "{batch_size}",
        "{minutes}",
    ]);
    let ids: Vec<&str> = out.lines().collect();
    assert_eq!(ids.len(), 3, "{out}");
    let times: Vec<u64> =
        ids.iter().map(|id| carma::id::TaskId::parse(id).expect("a task id").unix_ms()).collect();
    // 10 s and 20 s at speedup 100: due 100 ms and 200 ms after the start (sleeps never end
    // early). The first submission may itself run late on a loaded machine, which shortens
    // the measured gaps by as much, so the bound allows for it.
    assert!(times[1] >= times[0] + 60 && times[2] >= times[0] + 160, "spacing: {times:?}");
    assert!(times[2] >= times[1] + 60, "spacing: {times:?}");
    assert!(times[2] - times[0] < 5_000, "not waiting the unscaled offsets: {times:?}");

    home.ok(&["tick"]);
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--json"])).unwrap();
    let tasks = queue["tasks"].as_array().unwrap();
    let rows: Vec<(&str, &str, u64, u64)> = tasks
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap(),
                t["name"].as_str().unwrap(),
                t["gpus"].as_u64().unwrap(),
                t["memory_mib"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [(ids[0], "cnn", 1, 12000), (ids[1], "light", 1, 2000), (ids[2], "duo", 2, 14000)],
        "{queue:#}"
    );
    assert!(tasks.iter().all(|t| t["state"] == "Pending"), "{queue:#}");
    let show: serde_json::Value = serde_json::from_str(&home.ok(&["show", "--json", ids[0]])).unwrap();
    let command = show.to_string();
    // 8 minutes at speedup 100 is 0.08 minutes.
    assert!(command.contains(r#"["true","cnn","--model=resnet50","64","0.08"]"#), "{show:#}");
}

#[test]
fn dry_run_and_memory_figure() {
    let home = TestHome::new();
    let (trace, profiles) = inputs(&home, TRACE);
    let out = home.ok(&[
        "replay",
        "--trace",
        &trace,
        "--profiles",
        &profiles,
        "--speedup",
        "10",
        "--memory",
        "horus",
        "--dry-run",
        "--",
        "run",
        "{workload}",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "+      0.00s cnn gpus=1 memory=11000 MiB -- \"run\" \"cnn\"",
            "+      1.00s light gpus=1 memory=1800 MiB -- \"run\" \"light\"",
            "+      2.00s duo gpus=2 memory=5000 MiB -- \"run\" \"duo\"",
        ]
    );
    assert!(
        !home.spool().read_dir().unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".toml"))
    );
}

#[test]
fn bad_input_is_refused_before_anything_is_submitted() {
    let home = TestHome::new();
    let (trace, profiles) = inputs(&home, "offset_s,workload\n0,cnn\n5,nope\n");
    let out = home.run(&["replay", "--trace", &trace, "--profiles", &profiles, "--", "true"]);
    assert_error(&out, 2, &format!("{trace}:3: workload \"nope\" has no profile"));

    let (trace, profiles) = inputs(&home, TRACE);
    let out = home.run(&["replay", "--trace", &trace, "--profiles", &profiles, "--", "true", "--bs={batch}"]);
    assert_error(
        &out,
        2,
        "unknown placeholder {batch} in command template argument \"--bs={batch}\"; use {workload}, {model}, {batch_size}, {minutes}, {mem_mib}",
    );
    let out =
        home.run(&["replay", "--trace", &trace, "--profiles", &profiles, "--speedup", "0", "--", "true"]);
    assert_error(&out, 2, "--speedup 0 must be a positive number, e.g. 1 or 60");
    let out = home.run(&["replay", "--trace", &trace, "--profiles", &profiles]);
    assert_error(
        &out,
        2,
        "no command template; give one after `--`, e.g. -- python train.py --model {model}",
    );
    let out =
        home.run(&["replay", "--trace", &trace, "--profiles", &profiles, "--memory", "exact", "--", "true"]);
    assert_error(
        &out,
        2,
        "unknown memory figure \"exact\"; use actual, horus, faketensor, gpumemnet or none",
    );
    assert_eq!(stdout(&out), "");
    let spooled = home
        .spool()
        .read_dir()
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".toml"));
    assert_eq!(spooled.count(), 0, "nothing was submitted");
}
