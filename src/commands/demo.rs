//! `carma` with no command: a self-contained demonstration in two parts.
//!
//! 1. A throw-away state directory with two fake 40 GiB GPUs, a handful of real (tiny) jobs,
//!    and the real tick driven until they are done: collocation, a task that waits for
//!    memory, an out-of-memory crash recovered on an idle GPU, and a plain failure.
//! 2. The bundled synthetic trace (`traces/demo-40.csv`) simulated on four A100-40GB with
//!    the real tick in virtual time, one journal per policy, compared by `carma report`.
//!
//! Nothing touches the machine's GPUs or the system state directory. The demo's fake GPUs
//! show each job's memory while it runs, as a real GPU would ([`hardware`]), so the tick and
//! the jobs' supervisors judge the out-of-memory on the same evidence as on a server.

mod hardware;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, Sharing};
use crate::gpu::FakeProbe;
use crate::home::Home;
use crate::sim::{self, Estimator, FaultPlan, GpuSet, ModelParams, SimOptions};
use crate::spec::{self, Limits};
use crate::tick::{self, ExecRunner, TickContext};

const GPUS: &[hardware::Gpu] = &[
    hardware::Gpu { uuid: "GPU-demo-0000", name: "A100-SXM4-40GB (fake)", total_mib: 40960 },
    hardware::Gpu { uuid: "GPU-demo-0001", name: "A100-SXM4-40GB (fake)", total_mib: 40960 },
];

/// (name, declared memory, what its workload holds on its GPU in MiB, shell script): real
/// processes, a few seconds each. bert-base holds nearly all of its 12 GiB when its first
/// attempt runs out of memory, 2 s in.
const JOBS: &[(&str, &str, u64, &str)] = &[
    ("resnet18-cifar", "6GiB", 5_600, "sleep 3"),
    ("resnet34-cifar", "8GiB", 7_500, "sleep 4"),
    ("mobilenet-cifar", "5GiB", 4_700, "sleep 3"),
    (
        "bert-base",
        "12GiB",
        11_800,
        "if [ \"$CARMA_ATTEMPT\" = 1 ]; then sleep 2; echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1; fi; sleep 2",
    ),
    ("broken-script", "2GiB", 0, "echo 'ImportError: no module named torchvision' >&2; exit 3"),
    ("gpt2-large", "36GiB", 35_000, "sleep 2"),
];

pub(super) fn run() -> anyhow::Result<()> {
    // A fresh directory of its own (exclusive, random name, 0700), kept for the user to look
    // at: a name planted in /tmp beforehand is never used (see `scratch`).
    let dir = crate::scratch::ScratchDir::kept_in(&std::env::temp_dir(), "carma-demo")?;
    let home = Home::at(&dir);
    crate::session::init(&home, crate::config::DEFAULT_CONFIG_TOML)?;
    let gpus_file = dir.join("gpus.json");
    std::fs::write(home.config_path(), format!("[tick]\ngpus = \"fake:{}\"\n", gpus_file.display()))?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "carma demo: two fake 40 GiB GPUs, six real jobs, policy magm (state in {})\n",
        dir.display()
    )?;
    let mut holds = std::collections::BTreeMap::new();
    for (name, mem, held_mib, script) in JOBS {
        let file = spec::SpecFile {
            name: Some((*name).into()),
            command: Some(vec!["sh".into(), "-c".into(), (*script).into()]),
            memory: Some((*mem).into()),
            ..spec::SpecFile::default()
        };
        let task =
            file.validate_submission("demo", &dir, Limits::default()).map_err(crate::Error::BadInput)?;
        let id = crate::intake::submit(&home, &task, SystemClock.now_ms())?;
        holds.insert(id.to_string(), *held_mib);
        writeln!(out, "  submitted {id}  {name:<16} {mem:>6}  sh -c '{}'", short(script))?;
    }
    let gpus = hardware::Hardware::start(&dir, &gpus_file, GPUS, holds)?;
    drive(&home, &gpus_file, &mut out)?;
    drop(gpus);
    writeln!(out, "\nEverything above came from the journal. Look closer with:")?;
    writeln!(out, "  carma --home {} events", dir.display())?;
    writeln!(out, "  carma --home {} show <id>", dir.display())?;
    simulated(&dir, &mut out)
}

const DEMO_TRACE: &str = include_str!("../../traces/demo-40.csv");
const DEMO_PROFILES: &str = include_str!("../../traces/demo-profiles.csv");
const CARMA_CONFIG: &str = include_str!("../../reports/paper-reproduction/configs/carma.toml");
const EXCLUSIVE_CONFIG: &str = include_str!("../../reports/paper-reproduction/configs/exclusive.toml");

/// Part 2: the same tick in virtual time on a bundled trace, three ways, side by side.
fn simulated(dir: &Path, out: &mut impl Write) -> anyhow::Result<()> {
    writeln!(
        out,
        "\nPart 2: the bundled 40-task trace simulated on 4 x A100-40GB (virtual time, same tick):\n"
    )?;
    let profiles =
        sim::parse_profiles("traces/demo-profiles.csv", DEMO_PROFILES).map_err(crate::Error::BadInput)?;
    let trace =
        sim::parse_trace("traces/demo-40.csv", DEMO_TRACE, &profiles).map_err(crate::Error::BadInput)?;
    let runs: [(&str, &str, Estimator, Sharing); 3] = [
        ("exclusive", EXCLUSIVE_CONFIG, Estimator::None, Sharing::Streams),
        ("magm", "", Estimator::Oracle, Sharing::Streams),
        ("carma", CARMA_CONFIG, Estimator::Oracle, Sharing::Mps),
    ];
    // Three commits per tick over thousands of ticks: on tmpfs when there is one, because
    // the fsyncs, not the scheduling, would dominate on a disk.
    // The scratch directory is exclusive and random (see `scratch`), removed at the end or,
    // after a kill, by the next demo.
    let shm = Path::new("/dev/shm");
    let scratch = crate::scratch::ScratchDir::new_in(if shm.is_dir() { shm } else { dir }, "carma-demo-sim")?;
    let mut reports = Vec::new();
    for (label, config_text, estimator, sharing) in runs {
        let mut config: Config = toml::from_str(config_text)?;
        config.tick.sharing = sharing;
        let options = SimOptions {
            trace: trace.clone(),
            profiles: profiles.clone(),
            gpus: GpuSet::parse("4xA100-40GB").map_err(crate::Error::BadInput)?,
            config,
            estimator,
            params: ModelParams::default(),
            tick_ms: 5_000,
            seed: 1,
            faults: FaultPlan::parse("none").map_err(crate::Error::BadInput)?,
            mps_caps: true,
            placement_pause_ms: 0,
            max_retries: 10,
            time_limits: sim::TimeLimits::default(),
            home_dir: scratch.path().join(format!("sim-{label}")),
            reservations: Vec::new(),
        };
        let summary = sim::simulate(&options)?;
        reports.push(crate::report::analyze(&summary.journal, label, false)?);
    }
    drop(scratch);
    write!(out, "{}", crate::report::render_table(&reports, 0))?;
    writeln!(
        out,
        "\nReproduce the paper's evaluation with `sh reports/paper-reproduction/run.sh` (see README)."
    )?;
    Ok(())
}

fn drive(home: &Home, gpus_file: &Path, out: &mut impl Write) -> anyhow::Result<()> {
    let config = Config::load(home)?;
    let mut probe = FakeProbe::open(gpus_file)?;
    let mut runner = ExecRunner::new(home.root(), std::env::current_exe()?);
    let started = Instant::now();
    let mut shown_first = false;
    loop {
        let mut ctx = TickContext {
            home,
            clock: &SystemClock,
            lock_wait: Duration::from_secs(10),
            probe: &mut probe,
            probe_error: None,
            runner: &mut runner,
            config: &config,
            fault: None,
            state_cache: None,
            state_free_bytes: tick::free_bytes(home.root()),
        };
        tick::run(&mut ctx)?;
        let done = crate::view::load(home)?.tasks.values().all(|t| t.status().is_terminal());
        if !shown_first {
            writeln!(out, "\nafter the first tick (several jobs share each GPU; the big one waits):\n")?;
            super::queue::print(home, Duration::from_secs(10), false, out)?;
            shown_first = true;
        }
        if done || started.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    writeln!(
        out,
        "\nafter {:.0} s (the OOM task was recovered on an idle GPU; the broken one failed once):\n",
        started.elapsed().as_secs_f64()
    )?;
    super::queue::print(home, Duration::from_secs(10), true, out)
}

fn short(script: &str) -> String {
    let one_line = script.replace('\n', " ");
    if one_line.len() > 48 { format!("{}...", &one_line[..45]) } else { one_line }
}
