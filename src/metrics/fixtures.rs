//! A State for the GPU tests of `/metrics` and the dashboard, folded from hand-written events:
//! GPU-z (index 0, an H100 with MIG on: instance 0 `3g.40gb` with 12000 MiB in use, instance
//! 1 `1g.10gb` idle) and GPU-a (index 1, an A100, lost). UUID order is the reverse of index
//! order. Task 1 (8 GiB) is placed on MIG instance 1; tasks 2 to 4 are one array of three
//! (at most two at once), member 2 placed on GPU-z's instance 0, members 3 and 4 waiting.

use crate::gpu::{GpuHealth, GpuSample, MigInfo, MigInstance, SmSource};
use crate::id::TaskId;
use crate::journal::{Event, Record, State};
use crate::spec::ArrayMember;

/// The id of task `n`.
pub(crate) fn id(n: u8) -> TaskId {
    TaskId::from_parts(1_700_000_000_000 + u64::from(n), u32::from(n))
}

/// The array's id.
pub(crate) fn array_id() -> TaskId {
    TaskId::from_parts(1_700_000_000_000, 99)
}

fn spec(name: &str, array_index: Option<u32>) -> crate::spec::TaskSpec {
    let text = format!("name = \"{name}\"\ncommand = [\"python\", \"x.py\"]\nmemory = \"8GiB\"\n");
    let mut spec = crate::spec::parse_toml("t", &text)
        .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
        .unwrap();
    spec.array = array_index.map(|index| ArrayMember {
        id: array_id(),
        index,
        count: 3,
        running_max: Some(2),
        params: Vec::new(),
    });
    spec
}

fn sample(uuid: &str, index: u32, name: &str, health: GpuHealth, mig: MigInfo) -> GpuSample {
    GpuSample {
        uuid: uuid.into(),
        index,
        name: name.into(),
        memory_total_mib: 81920,
        memory_used_mib: 12288,
        memory_free_mib: 81920 - 12288,
        memory_reserved_mib: None,
        health,
        util_gpu_mean: None,
        util_last_timestamp_us: None,
        sm_active: Some(0.5),
        sm_active_source: SmSource::File,
        sm_occupancy: None,
        dram_active: None,
        power_mw: None,
        energy_mj: None,
        processes: Vec::new(),
        mig,
        unavailable: Vec::new(),
    }
}

fn instance(uuid: &str, index: u32, profile: &str, total: u64, used: u64) -> MigInstance {
    MigInstance {
        uuid: uuid.into(),
        index,
        profile: Some(profile.into()),
        memory_total_mib: total,
        memory_used_mib: used,
        processes: Vec::new(),
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

/// The State the module doc describes.
pub(crate) fn mig_and_lost() -> State {
    let discovered = |uuid: &str, index: u32, name: &str| Event::GpuDiscovered {
        uuid: uuid.into(),
        index,
        name: name.into(),
        memory_total_mib: 81920,
    };
    let mig = MigInfo {
        enabled: Some(true),
        instances: vec![
            instance("MIG-z-1", 1, "1g.10gb", 9856, 0),
            instance("MIG-z-0", 0, "3g.40gb", 40192, 12000),
        ],
    };
    let lost = GpuHealth::Lost { detail: "fell off the bus".into() };
    let events = vec![
        discovered("GPU-z", 0, "H100"),
        discovered("GPU-a", 1, "A100"),
        Event::MetricSample { sample: sample("GPU-z", 0, "H100", GpuHealth::Healthy, mig) },
        Event::MetricSample { sample: sample("GPU-a", 1, "A100", lost, MigInfo::not_supported()) },
        Event::Submitted { task: id(1), submitter_uid: 1000, spec: spec("small", None) },
        Event::Submitted { task: id(2), submitter_uid: 1000, spec: spec("sweep", Some(0)) },
        Event::Submitted { task: id(3), submitter_uid: 1000, spec: spec("sweep", Some(1)) },
        Event::Submitted { task: id(4), submitter_uid: 1000, spec: spec("sweep", Some(2)) },
        placed(1, "MIG-z-1"),
        placed(2, "MIG-z-0"),
        Event::Pending { task: id(3), reason: "array cap: 1 of 2 running".into() },
        Event::Pending { task: id(4), reason: "array cap: 1 of 2 running".into() },
    ];
    let mut state = State::default();
    for (i, event) in events.into_iter().enumerate() {
        state.apply(i as u64 + 1, &Record { time_ms: 1_000, event });
    }
    state
}
