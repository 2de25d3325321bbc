//! `carma slurm`: node setup (`gres`, `hooks`), shard counts (`shards`), and the hooks slurmd
//! runs (`prolog`, `task-prolog`, `epilog`, the Epilog's detached `follow`, and the
//! Prolog's detached `watch`).
//!
//! A hook never fails: whatever goes wrong is one line on stderr and in the state
//! directory's `slurm-hooks.log`, and the exit code is 0, because a Prolog or Epilog that
//! exits non-zero drains the node (and a TaskProlog's kills the job).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::cli::{ShardArgs, SlurmArgs, SlurmWhat};
use crate::config::Config;
use crate::error::Error;
use crate::gpu::{self, SinceMarks};
use crate::home::Home;
use crate::slurm::follow::{self, Follow};
use crate::slurm::hooks::{self, HookEnv, HookOptions, HookOutcome};
use crate::slurm::request::{self, MemoryInput};
use crate::slurm::setup::{self, HookSetup};
use crate::slurm::shards::{self, GresGpu};
use crate::slurm::watch::{self, WatchJob};
use crate::slurm::{ShardRule, records};

use super::render;

/// Schema tag of `carma slurm gres --json` (schema/slurm-gres.schema.json).
pub(super) const GRES_SCHEMA: &str = "carma.slurm-gres/1";
/// Schema tag of `carma slurm shards --json` (schema/slurm-shards.schema.json).
pub(super) const SHARDS_SCHEMA: &str = "carma.slurm-shards/1";

pub(super) fn run(
    home: &Home,
    home_flag: Option<&Path>,
    wait: Duration,
    args: SlurmArgs,
) -> anyhow::Result<()> {
    match args.what {
        SlurmWhat::Gres { gpus, node, dev_dir, shards, json } => {
            gres(home, gpus, node, &dev_dir, shards, json)
        }
        SlurmWhat::Shards {
            mem,
            model_summary,
            batch_size,
            owner_uid,
            shards_per_gpu,
            shards,
            parsable,
            json,
        } => {
            let input = MemoryInput {
                mem: mem.as_deref(),
                model_summary: model_summary.as_deref(),
                batch_size,
                owner_uid,
            };
            shard_count(&input, shards_per_gpu, shards, parsable, json)
        }
        SlurmWhat::Hooks { install, dir, exe, shards_per_gpu, gpus, shards } => {
            hook_files(home, home_flag, install, dir, exe, shards_per_gpu, gpus, shards)
        }
        SlurmWhat::Prolog { shards } => {
            run_hook(home, "prolog", shards, wait, |options, env| hooks::prolog(home, options, env));
            Ok(())
        }
        SlurmWhat::Epilog { shards } => {
            run_hook(home, "epilog", shards, wait, |options, env| hooks::epilog(home, options, env));
            Ok(())
        }
        SlurmWhat::TaskProlog { shards } => {
            task_prolog(shards);
            Ok(())
        }
        SlurmWhat::Follow { job, cluster, node, attempt, shards, comment, ended_ms, rule } => {
            let outcome = rule_of(rule).and_then(|rule| {
                let requeue = shards.zip(comment);
                let f =
                    Follow { cluster, job_id: job, node, attempt, requeue, ended_ms, rule, lock_wait: wait };
                follow::follow(home, &f)
            });
            let line = match &outcome {
                Ok(done) => format!("carma slurm follow: {done}"),
                Err(e) => format!("carma slurm follow: job {job}: {e}"),
            };
            log_hook_line(home, &line);
            Ok(())
        }
        SlurmWhat::Watch { job, restart, uid, gpus } => {
            let watched = WatchJob { job_id: job, restart_count: restart, uid, gpus };
            let line = match watch::watch(home, &watched) {
                Ok(done) => format!("carma slurm watch: {done}"),
                Err(e) => format!("carma slurm watch: job {job}: {e}"),
            };
            log_hook_line(home, &line);
            Ok(())
        }
    }
}

fn rule_of(args: ShardArgs) -> Result<ShardRule, Error> {
    ShardRule::new(args.shard_mib, args.margin_mib).map_err(Error::BadInput)
}

#[derive(Serialize)]
struct GresJson<'a> {
    schema: &'static str,
    node: &'a str,
    gpus: u32,
    shard_mib: u64,
    shards_per_gpu: u32,
    node_gres: &'a str,
    gres_conf: &'a [String],
}

fn gres(
    home: &Home,
    gpus: Option<String>,
    node: Option<String>,
    dev_dir: &str,
    args: ShardArgs,
    json: bool,
) -> anyhow::Result<()> {
    let rule = rule_of(args)?;
    let node = node.unwrap_or_else(short_hostname);
    let found = probe_gpus(home, gpus)?;
    let config = shards::gres_config(&node, &found, &rule, dev_dir).map_err(Error::BadInput)?;
    if json {
        return render::print_json(&GresJson {
            schema: GRES_SCHEMA,
            node: &config.node,
            gpus: config.gpus,
            shard_mib: rule.shard_mib,
            shards_per_gpu: config.shards_per_gpu,
            node_gres: &config.node_gres,
            gres_conf: &config.gres_conf,
        });
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "# gres.conf")?;
    for line in &config.gres_conf {
        writeln!(out, "{}", render::escape(line))?;
    }
    writeln!(out, "# slurm.conf: on the NodeName={} line\nGres={}", render::escape(&node), config.node_gres)?;
    Ok(())
}

/// The GPUs of this node through `spec`, or the config's probe, or NVML.
fn probe_gpus(home: &Home, spec: Option<String>) -> anyhow::Result<Vec<GresGpu>> {
    let spec = match spec {
        Some(spec) => spec,
        None if home.require_initialized().is_ok() => Config::load(home)?.tick.gpus,
        None => "nvml".into(),
    };
    // Without NVML the probe's own words ("carma keeps working on the spool") do not help
    // here: say how to describe the GPUs instead.
    let hint = |e: String| {
        let e = e.split("; carma keeps working").next().unwrap_or_default().to_string();
        if spec == "nvml" {
            Error::BadInput(format!(
                "{e}; without NVML, describe the GPUs with --gpus fake:FILE (schema/fake-gpus.schema.json)"
            ))
        } else {
            Error::BadInput(e)
        }
    };
    let mut probe = gpu::probe_from_spec(&spec).map_err(|e| hint(e.to_string()))?;
    let samples = probe.sample(&SinceMarks::new()).map_err(|e| hint(e.to_string()))?;
    Ok(samples
        .into_iter()
        .map(|s| GresGpu { index: s.index, name: s.name, uuid: s.uuid, memory_total_mib: s.memory_total_mib })
        .collect())
}

fn short_hostname() -> String {
    crate::spec::sbatch::node_name()
}

#[derive(Serialize)]
struct ShardsJson<'a> {
    schema: &'static str,
    shards: u32,
    need_mib: u64,
    source: &'a str,
    explanation: &'a str,
    shard_mib: u64,
    margin_mib: u64,
}

fn shard_count(
    input: &MemoryInput,
    per_gpu: Option<u32>,
    args: ShardArgs,
    parsable: bool,
    json: bool,
) -> anyhow::Result<()> {
    let rule = rule_of(args)?;
    let need = request::need(input)?;
    let shards = request::shards(&need, &rule, per_gpu)?;
    if json {
        return render::print_json(&ShardsJson {
            schema: SHARDS_SCHEMA,
            shards,
            need_mib: need.mib,
            source: &need.source,
            explanation: &need.explanation,
            shard_mib: rule.shard_mib,
            margin_mib: rule.margin_mib,
        });
    }
    let mut out = std::io::stdout().lock();
    if parsable {
        writeln!(out, "{shards} {}", need.mib)?;
    } else {
        writeln!(
            out,
            "shard:{shards} = {} MiB ({}) + {} MiB margin, {} MiB per shard",
            need.mib,
            render::escape(&need.explanation),
            rule.margin_mib,
            rule.shard_mib
        )?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn hook_files(
    home: &Home,
    home_flag: Option<&Path>,
    install: Option<PathBuf>,
    dir: Option<PathBuf>,
    exe: Option<PathBuf>,
    shards_per_gpu: Option<u32>,
    gpus: Option<String>,
    args: ShardArgs,
) -> anyhow::Result<()> {
    let rule = rule_of(args)?;
    let exe = match exe {
        Some(exe) => exe,
        None => std::env::current_exe()?,
    };
    let shards_per_gpu = match shards_per_gpu {
        Some(n) => n,
        None => {
            let found = probe_gpus(home, gpus)?;
            let smallest = found.iter().map(|g| g.memory_total_mib).max().ok_or_else(|| {
                Error::BadInput(
                    "no GPU found to count shards on; pass --shards-per-gpu N or --gpus fake:FILE".into(),
                )
            })?;
            rule.per_gpu(smallest)
        }
    };
    let dir = dir.or_else(|| install.clone()).unwrap_or_else(|| PathBuf::from("/etc/slurm"));
    let text = |p: &Path, what: &str| {
        p.to_str()
            .map(str::to_string)
            .ok_or_else(|| Error::BadInput(format!("{what} {} is not UTF-8", p.display())))
    };
    let setup = HookSetup {
        exe: text(&exe, "carma path")?,
        home: home_flag.map(|h| text(h, "--home")).transpose()?,
        rule,
        shards_per_gpu,
        dir: text(&dir, "--dir")?,
    };
    let files = setup::hook_files(&setup).map_err(Error::BadInput)?;
    let mut out = std::io::stdout().lock();
    match install {
        Some(target) => {
            for file in &files {
                let path = target.join(file.name);
                crate::exec::write_atomic(&path, file.text.as_bytes(), file.mode)?;
                writeln!(out, "wrote {}", path.display())?;
            }
        }
        None => {
            for file in &files {
                writeln!(out, "# ==> {} <==\n{}", file.name, file.text)?;
            }
        }
    }
    writeln!(out)?;
    for line in setup::slurm_conf_lines(&setup) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// Runs a root hook body; every failure, even a panic, becomes a logged line.
fn run_hook(
    home: &Home,
    name: &str,
    args: ShardArgs,
    wait: Duration,
    body: impl FnOnce(&HookOptions, &HookEnv) -> crate::error::Result<HookOutcome>,
) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let rule = rule_of(args)?;
        let env = HookEnv::read(&|key| std::env::var(key).ok())?;
        let options = HookOptions { rule, lock_wait: wait, exe: std::env::current_exe()? };
        let outcome = body(&options, &env)?;
        Ok::<_, anyhow::Error>((env.job_id, outcome))
    }));
    let line = match outcome {
        Ok(Ok((job, HookOutcome::Journaled { task, note }))) => {
            let task = task.map_or("no task".into(), |t| t.to_string());
            format!("carma slurm {name}: job {job}: {note} (task {task})")
        }
        Ok(Ok((job, HookOutcome::Skipped(why)))) => format!("carma slurm {name}: job {job}: skipped, {why}"),
        Ok(Err(e)) => format!("carma slurm {name}: error: {e}"),
        Err(_) => format!("carma slurm {name}: internal error (panic); please report it"),
    };
    log_hook_line(home, &line);
}

/// One line on stderr and in the hook log.
fn log_hook_line(home: &Home, line: &str) {
    let line = render::escape(line);
    eprintln!("{line}");
    if let Ok(mut log) = std::fs::OpenOptions::new().create(true).append(true).open(hooks::hook_log(home)) {
        let _ = writeln!(
            log,
            "{} {line}",
            crate::clock::format_ms(crate::clock::Clock::now_ms(&crate::clock::SystemClock))
        );
    }
}

/// The TaskProlog: `export NAME=value` lines slurmd adds to the job's environment.
fn task_prolog(args: ShardArgs) {
    let rule = rule_of(args).unwrap_or_default();
    let shards = std::env::var("SLURM_SHARDS_ON_NODE").ok();
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let mut out = std::io::stdout().lock();
    for (name, value) in records::task_exports(shards.as_deref(), visible.as_deref(), &rule) {
        let _ = writeln!(out, "export {name}={value}");
    }
}
