//! The exposition text: families, values and escaping. Method: State folded from hand-written
//! events, rendered, and read line by line.

use super::{Input, escape_label, jobmap, render};
use crate::gpu::{GpuHealth, GpuSample, MigInfo, SmSource};
use crate::id::TaskId;
use crate::journal::{Event, Record, State};

fn id(n: u8) -> TaskId {
    TaskId::from_parts(1_700_000_000_000 + u64::from(n), u32::from(n))
}

fn spec(name: &str) -> crate::spec::TaskSpec {
    let text = format!("name = \"{name}\"\ncommand = [\"python\", \"x.py\"]\nmemory = \"8GiB\"\n");
    crate::spec::parse_toml("t", &text)
        .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
        .unwrap()
}

fn sample(uuid: &str, index: u32, used_mib: u64) -> GpuSample {
    GpuSample {
        uuid: uuid.into(),
        index,
        name: "A100 \"40GB\"".into(),
        memory_total_mib: 40960,
        memory_used_mib: used_mib,
        memory_free_mib: 40960 - used_mib,
        memory_reserved_mib: None,
        health: GpuHealth::Healthy,
        util_gpu_mean: None,
        util_last_timestamp_us: None,
        sm_active: Some(0.25),
        sm_active_source: SmSource::File,
        sm_occupancy: None,
        dram_active: None,
        power_mw: Some(88_500),
        energy_mj: Some(123_456_789),
        processes: Vec::new(),
        mig: MigInfo::not_supported(),
        unavailable: Vec::new(),
    }
}

fn placed(n: u8, gpu: &str) -> Event {
    Event::Placed {
        task: id(n),
        attempt: 1,
        gpus: vec![gpu.into()],
        exclusive: false,
        requirement_mib: Some(8192),
        reason: "fits".into(),
    }
}

/// Three tasks of uid 1000 and one of uid 1001: task 1 waited 4 s and runs on GPU 0, task 2
/// waited 100 s, ran out of memory and was placed again, tasks 3 and 4 wait.
fn state() -> State {
    let submitted = |n: u8, uid: u32| Event::Submitted { task: id(n), submitter_uid: uid, spec: spec("t") };
    let events = vec![
        (
            1_000,
            Event::GpuDiscovered {
                uuid: "GPU-a".into(),
                index: 0,
                name: "A100 \"40GB\"".into(),
                memory_total_mib: 40960,
            },
        ),
        (
            1_000,
            Event::GpuDiscovered {
                uuid: "GPU-b".into(),
                index: 1,
                name: "A100 \"40GB\"".into(),
                memory_total_mib: 40960,
            },
        ),
        (1_000, Event::MetricSample { sample: sample("GPU-a", 0, 10_240) }),
        (1_000, Event::MetricSample { sample: sample("GPU-b", 1, 0) }),
        (1_000, submitted(1, 1000)),
        (1_000, submitted(2, 1000)),
        (1_000, submitted(3, 1000)),
        (1_000, submitted(4, 1001)),
        (5_000, placed(1, "GPU-a")),
        (101_000, placed(2, "GPU-b")),
        (
            102_000,
            Event::OomDetected {
                task: id(2),
                attempt: 1,
                evidence: "CUDA out of memory".into(),
                peak_mib: None,
            },
        ),
        (
            103_000,
            Event::TickCompleted { ingested: 4, rejected: 0, placed: 1, duration_us: 1500, rr_cursor: 0 },
        ),
    ];
    let mut state = State::default();
    for (i, (time_ms, event)) in events.into_iter().enumerate() {
        state.apply(i as u64 + 1, &Record { time_ms, event });
    }
    state
}

fn text_of(state: &State) -> String {
    let names = |uid: u32| if uid == 1000 { "alice".to_string() } else { format!("a\"b\\c\n{uid}") };
    render(&Input {
        state,
        tick_duration_us: Some(1500),
        user_name: &names,
        assumed_without_figure_mib: 5120,
    })
}

fn has(text: &str, line: &str) {
    assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
}

#[test]
fn tasks_by_state_and_user() {
    let text = text_of(&state());
    has(&text, "# TYPE carma_tasks gauge");
    has(&text, "carma_tasks{state=\"pending\"} 3");
    has(&text, "carma_tasks{state=\"placed\"} 1");
    has(&text, "carma_tasks{state=\"failed\"} 0");
    has(&text, "carma_pending_tasks{user=\"alice\"} 2");
    // A user name is a label value: quote, backslash and newline escaped.
    has(&text, "carma_pending_tasks{user=\"a\\\"b\\\\c\\n1001\"} 1");
}

#[test]
fn counters_and_wait_histogram() {
    let text = text_of(&state());
    has(&text, "# TYPE carma_oom_total counter");
    has(&text, "carma_oom_total 1");
    has(&text, "carma_placements_total 2");
    has(&text, "carma_relaunches_total 0");
    has(&text, "# TYPE carma_wait_seconds histogram");
    // Waits of 4 s and 100 s: cumulative buckets.
    has(&text, "carma_wait_seconds_bucket{le=\"1\"} 0");
    has(&text, "carma_wait_seconds_bucket{le=\"5\"} 1");
    has(&text, "carma_wait_seconds_bucket{le=\"60\"} 1");
    has(&text, "carma_wait_seconds_bucket{le=\"300\"} 2");
    has(&text, "carma_wait_seconds_bucket{le=\"+Inf\"} 2");
    has(&text, "carma_wait_seconds_sum 104");
    has(&text, "carma_wait_seconds_count 2");
    has(&text, "carma_ticks_total 1");
    has(&text, "carma_tick_duration_seconds 0.0015");
    has(&text, "carma_last_tick_timestamp_seconds 103");
}

#[test]
fn gpus_with_their_labels() {
    let text = text_of(&state());
    let labels = "gpu=\"0\",uuid=\"GPU-a\",name=\"A100 \\\"40GB\\\"\"";
    has(&text, &format!("carma_gpu_memory_used_bytes{{{labels}}} 10737418240"));
    has(&text, &format!("carma_gpu_memory_total_bytes{{{labels}}} 42949672960"));
    has(&text, &format!("carma_gpu_sm_active_ratio{{{labels}}} 0.25"));
    has(&text, &format!("carma_gpu_power_watts{{{labels}}} 88.5"));
    has(&text, &format!("carma_gpu_energy_joules_total{{{labels}}} 123456.789"));
    has(&text, &format!("carma_gpu_tasks{{{labels}}} 1"));
    // Task 2's attempt ended with its OOM: GPU 1 holds nothing.
    has(&text, "carma_gpu_tasks{gpu=\"1\",uuid=\"GPU-b\",name=\"A100 \\\"40GB\\\"\"} 0");
}

#[test]
fn every_family_has_help_and_type_once() {
    let text = text_of(&state());
    let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let helps = text.lines().filter(|l| l.starts_with("# HELP ")).count();
    assert_eq!(types.len(), helps);
    let mut names: Vec<&str> = types.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
    let count = names.len();
    names.dedup();
    assert_eq!(names.len(), count, "a family twice: {types:?}");
    assert!(text.ends_with('\n'));
}

#[test]
fn an_empty_state_renders_zeros_not_gaps() {
    let names = |uid: u32| uid.to_string();
    let text = render(&Input {
        state: &State::default(),
        tick_duration_us: None,
        user_name: &names,
        assumed_without_figure_mib: 5120,
    });
    has(&text, "carma_tasks{state=\"running\"} 0");
    has(&text, "carma_wait_seconds_count 0");
    assert!(!text.contains("carma_tick_duration_seconds"), "no tick, no duration");
}

#[test]
fn label_escaping() {
    assert_eq!(escape_label("plain"), "plain");
    assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

#[test]
fn job_mapping_lists_running_tasks_per_gpu_index() {
    let mapping = jobmap::mapping(&state());
    assert_eq!(mapping.get(&0), Some(&vec![id(1).as_str().to_string()]));
    assert_eq!(mapping.get(&1), Some(&Vec::new()));
}

/// Defect: a task on a MIG instance was in no `carma_gpu_tasks` series (only whole GPUs had
/// one, and the task's attempt names the instance's UUID). Each instance now has its own
/// series after its GPU's, labelled with its slot and profile.
#[test]
fn a_task_on_a_mig_instance_counts_on_that_instance() {
    let text = text_of(&super::fixtures::mig_and_lost());
    has(&text, "carma_gpu_tasks{gpu=\"0\",mig=\"1\",uuid=\"MIG-z-1\",name=\"H100\",profile=\"1g.10gb\"} 1");
    has(&text, "carma_gpu_tasks{gpu=\"0\",mig=\"0\",uuid=\"MIG-z-0\",name=\"H100\",profile=\"3g.40gb\"} 1");
    has(&text, "carma_gpu_tasks{gpu=\"0\",uuid=\"GPU-z\",name=\"H100\"} 0");
    has(
        &text,
        "carma_gpu_memory_used_bytes{gpu=\"0\",mig=\"0\",uuid=\"MIG-z-0\",name=\"H100\",profile=\"3g.40gb\"} 12582912000",
    );
    has(&text, "carma_gpu_up{gpu=\"1\",uuid=\"GPU-a\",name=\"A100\"} 0");
}

/// Defect: GPUs came in UUID order. They come by index, each MIG instance after its GPU, by
/// slot.
#[test]
fn gpus_come_by_index_with_mig_instances_after_their_gpu() {
    let text = text_of(&super::fixtures::mig_and_lost());
    let uuids: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("carma_gpu_tasks{"))
        .map(|l| l.split("uuid=\"").nth(1).unwrap().split('"').next().unwrap())
        .collect();
    assert_eq!(uuids, ["GPU-z", "MIG-z-0", "MIG-z-1", "GPU-a"]);
}

/// Defect: nothing said how much memory carma had promised on a GPU. Each GPU and instance
/// now says what its placed and running attempts were placed with.
#[test]
fn each_gpu_says_what_carma_reserved_on_it() {
    let text = text_of(&super::fixtures::mig_and_lost());
    has(
        &text,
        "carma_gpu_memory_reserved_bytes{gpu=\"0\",mig=\"1\",uuid=\"MIG-z-1\",name=\"H100\",profile=\"1g.10gb\"} 8589934592",
    );
    has(&text, "carma_gpu_memory_reserved_bytes{gpu=\"0\",uuid=\"GPU-z\",name=\"H100\"} 0");
    let text = text_of(&state());
    has(
        &text,
        "carma_gpu_memory_reserved_bytes{gpu=\"0\",uuid=\"GPU-a\",name=\"A100 \\\"40GB\\\"\"} 8589934592",
    );
}

/// Defect (issue 42): the dashboard said "reserved by carma 0 B (8 tasks), free 40 GiB" while
/// placement counted 5 GiB for each task placed without a figure. A shared attempt with no
/// figure now counts what placement assumes for it; an exclusive one holds the GPU whole, and
/// its card already says no room is free.
#[test]
fn a_shared_attempt_without_a_figure_counts_what_placement_assumes() {
    let mut state = state();
    let mut seq = 1_000;
    let mut apply = |state: &mut State, event: Event| {
        seq += 1;
        state.apply(seq, &Record { time_ms: 104_000, event });
    };
    for (n, exclusive) in [(3, false), (4, true)] {
        let gpu = if exclusive { "GPU-b" } else { "GPU-a" };
        apply(
            &mut state,
            Event::Placed {
                task: id(n),
                attempt: 1,
                gpus: vec![gpu.into()],
                exclusive,
                requirement_mib: None,
                reason: "no figure".into(),
            },
        );
    }
    let entries = crate::metrics::gpu_list::entries(&state, 5120);
    let a = entries.iter().find(|e| e.uuid() == "GPU-a").unwrap();
    assert_eq!(
        (a.tasks.len(), a.reserved_mib),
        (2, 8192 + 5120),
        "task 1's 8 GiB and task 3's assumed 5 GiB"
    );
    let b = entries.iter().find(|e| e.uuid() == "GPU-b").unwrap();
    assert_eq!((b.tasks.len(), b.reserved_mib), (1, 0), "the exclusive attempt adds nothing");
    assert_eq!(b.free_for_new_mib(), 0);
    let text = text_of(&state);
    has(
        &text,
        "carma_gpu_memory_reserved_bytes{gpu=\"0\",uuid=\"GPU-a\",name=\"A100 \\\"40GB\\\"\"} 13958643712",
    );
}
