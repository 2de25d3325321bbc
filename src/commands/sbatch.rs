//! `carma sbatch`: a Slurm batch job whose shard request comes from its memory figure.
//!
//! It speaks sbatch: carma's options (`--gpu-mem`, `--model-summary`, `--batch-size`,
//! `--max-retries`, `--shards-per-gpu`, `--shard-mib`, `--margin-mib`, `--dry-run`,
//! `--parsable`) may come anywhere among sbatch's, and a script's `#CARMA` lines give them too
//! (there `--mem` is GPU memory, as in `carma submit` scripts; the command line wins). Every
//! other word goes to sbatch, which reads the script's `#SBATCH` lines itself; carma reads
//! them only to refuse a GPU request of its own (`--gpus`, `--gres=gpu`), which would
//! contradict the shard count.

use std::io::{Read, Write};
use std::path::Path;

use crate::cli::SbatchArgs;
use crate::error::Error;
use crate::slurm::request::{self, MemoryInput};
use crate::slurm::{ShardRule, command, scontrol, submit};
use crate::spec::script;

/// Longest wait for `sinfo` before a submission: with slurmctld down, Slurm's clients retry
/// for their MessageTimeout and more (18 s were seen), which cannot be set per call; carma
/// stops waiting sooner and says what to check.
const CONTROLLER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Most bytes of a script read for its directives.
const SCRIPT_BYTES_MAX: u64 = 1 << 20;

pub(super) fn run(mut args: SbatchArgs) -> anyhow::Result<()> {
    let is_script = sort_words(&mut args)?;
    if args.gpu_mem.is_none() && args.model_summary.is_none() {
        let mem = args.sbatch_options.iter().find(|o| *o == "--mem" || o.starts_with("--mem="));
        return Err(Error::BadInput(match mem {
            Some(mem) => format!(
                "{mem} is sbatch's host memory; give the GPU memory as --gpu-mem 12GiB (or --model-summary FILE --batch-size N)"
            ),
            None => "no memory figure; carma sbatch hands a job to a Slurm cluster with one: give --gpu-mem 12GiB, or --model-summary FILE --batch-size N (to queue a script on this server, carma submit SCRIPT)".into(),
        })
        .into());
    }
    // The options and the command are checked before Slurm is asked anything.
    let check = crate::slurm::CarmaComment::default();
    submit::sbatch_plan(&args.sbatch_options, &args.command, is_script, 1, &check, false)
        .map_err(Error::BadInput)?;
    let rule = ShardRule::new(args.shards.shard_mib, args.shards.margin_mib).map_err(Error::BadInput)?;
    let input = MemoryInput {
        mem: args.gpu_mem.as_deref(),
        model_summary: args.model_summary.as_deref(),
        batch_size: args.batch_size,
        owner_uid: None,
    };
    let need = request::need(&input)?;
    let per_gpu = match args.shards_per_gpu {
        Some(n) => Some(n),
        None if args.dry_run => None,
        None => Some(cluster_shards_per_gpu()?),
    };
    let shards = request::shards(&need, &rule, per_gpu)?;
    let comment = request::comment_for(&need, args.max_retries);
    let plan =
        submit::sbatch_plan(&args.sbatch_options, &args.command, is_script, shards, &comment, args.parsable)
            .map_err(Error::BadInput)?;
    let summary = format!(
        "carma: shard:{shards} = {} MiB ({}) + {} MiB margin, {} MiB per shard",
        need.mib, need.explanation, rule.margin_mib, rule.shard_mib
    );
    let mut out = std::io::stdout().lock();
    if args.dry_run {
        writeln!(out, "{summary}")?;
        writeln!(out, "{}", command::shown(&plan.argv))?;
        if let Some(script) = &plan.stdin_script {
            write!(out, "{script}")?;
        }
        return Ok(());
    }
    let answer =
        command::run(&plan.argv, plan.stdin_script.as_deref().map(str::as_bytes), command::COMMAND_TIMEOUT)?;
    if args.parsable {
        let id = submit::job_id_of(&answer).ok_or_else(|| Error::Slurm {
            command: "sbatch".into(),
            detail: format!("answered {:?} without a job id", answer.trim()),
        })?;
        writeln!(out, "{id}")?;
    } else {
        eprintln!("{summary}");
        write!(out, "{answer}")?;
    }
    Ok(())
}

/// Sorts the command line and a script's `#CARMA` lines into carma's options, sbatch's and
/// the command; true when the command is a script.
fn sort_words(args: &mut SbatchArgs) -> Result<bool, Error> {
    // clap hands `--` and what follows to the hyphen-accepting sbatch options once one
    // of them came first; split there.
    if let Some(at) = args.sbatch_options.iter().position(|a| a == "--") {
        let mut command = args.sbatch_options.split_off(at);
        command.remove(0);
        command.append(&mut args.command);
        args.command = command;
    }
    let words = std::mem::take(&mut args.sbatch_options);
    args.sbatch_options = take_carma_options(args, words, false).map_err(Error::BadInput)?;
    let is_script = args.command.first().is_some_and(|c| starts_with_shebang(Path::new(c)));
    if is_script {
        let path = args.command[0].clone();
        read_directives(args, &path).map_err(Error::BadInput)?;
    }
    Ok(is_script)
}

/// Moves carma's options out of `words` into `args` (a value already set is kept: the
/// command line wins over `#CARMA` lines); returns the rest, sbatch's. In a directive
/// (`directive`), `--mem` is carma's GPU memory and any other word is an error.
fn take_carma_options(
    args: &mut SbatchArgs,
    words: Vec<String>,
    directive: bool,
) -> Result<Vec<String>, String> {
    let mut rest = Vec::new();
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let (name, inline) = match word.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name.to_string(), Some(value.to_string())),
            _ => (word.clone(), None),
        };
        let flag = |args: &mut SbatchArgs, name: &str| match name {
            "--dry-run" => args.dry_run = true,
            _ => args.parsable = true,
        };
        match name.as_str() {
            "--dry-run" | "--parsable" if inline.is_none() => flag(args, &name),
            "--gpu-mem" | "--model-summary" | "--batch-size" | "--max-retries" | "--shards-per-gpu"
            | "--shard-mib" | "--margin-mib" => {
                let value = inline.or_else(|| words.next()).ok_or_else(|| format!("{name} needs a value"))?;
                set(args, &name, &value)?;
            }
            "--mem" if directive => {
                let value = inline.or_else(|| words.next()).ok_or_else(|| format!("{name} needs a value"))?;
                set(args, "--gpu-mem", &value)?;
            }
            _ if directive => {
                return Err(format!(
                    "{word} is not a carma sbatch option; put sbatch's options in #SBATCH lines"
                ));
            }
            _ => rest.push(word),
        }
    }
    Ok(rest)
}

fn set(args: &mut SbatchArgs, name: &str, value: &str) -> Result<(), String> {
    let number =
        |value: &str| value.parse::<u32>().map_err(|_| format!("{name} {value}: not a whole number"));
    let wide = |value: &str| value.parse::<u64>().map_err(|_| format!("{name} {value}: not a whole number"));
    match name {
        "--gpu-mem" => {
            args.gpu_mem.get_or_insert_with(|| value.to_string());
        }
        "--model-summary" => {
            args.model_summary.get_or_insert_with(|| value.into());
        }
        "--batch-size" => {
            let n = number(value)?;
            args.batch_size.get_or_insert(n);
        }
        "--max-retries" => {
            let n = number(value)?;
            args.max_retries.get_or_insert(n);
        }
        "--shards-per-gpu" => {
            let n = number(value)?;
            args.shards_per_gpu.get_or_insert(n);
        }
        "--shard-mib" => args.shards.shard_mib = wide(value)?,
        _ => args.shards.margin_mib = wide(value)?,
    }
    Ok(())
}

/// A script's `#CARMA` lines (carma's options) and `#SBATCH` lines (checked for a GPU
/// request carma makes itself).
fn read_directives(args: &mut SbatchArgs, path: &str) -> Result<(), String> {
    let mut text = String::new();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    file.take(SCRIPT_BYTES_MAX).read_to_string(&mut text).map_err(|e| format!("cannot read {path}: {e}"))?;
    for (line, words) in script::directives_of("#CARMA", path, &text)? {
        take_carma_options(args, words, true).map_err(|e| format!("{path}:{line}: #CARMA {e}"))?;
    }
    for (line, words) in script::directives_of("#SBATCH", path, &text)? {
        if let Some(owned) = submit::owned_option(&words) {
            return Err(format!(
                "{path}:{line}: #SBATCH {owned}: carma sbatch requests the GPU share itself (--gres=shard:N); remove the line"
            ));
        }
    }
    Ok(())
}

/// The most shards any node's GPU holds, from `sinfo` (`gpu:G,shard:S` per node). Without an
/// answer nothing is submitted: the check is never skipped.
fn cluster_shards_per_gpu() -> Result<u32, Error> {
    let argv: Vec<String> = ["sinfo", "-h", "-N", "-o", "%G"].iter().map(|s| s.to_string()).collect();
    let text = command::run(&argv, None, CONTROLLER_TIMEOUT).map_err(|e| {
        let detail = match &e {
            // The timeout's own hint is said below.
            Error::Slurm { detail, .. } => detail.split("; check slurmctld").next().unwrap_or_default().to_string(),
            other => other.to_string(),
        };
        Error::Slurm {
            command: "sinfo".into(),
            detail: format!(
                "{detail}; is slurmctld up (`systemctl status slurmctld`, `scontrol ping`)? retry then, or give --shards-per-gpu N"
            ),
        }
    })?;
    text.lines()
        .filter_map(|line| {
            let count = scontrol::parse_gres(line.trim());
            Some(count.shards? / count.gpus.filter(|&g| g > 0)?)
        })
        .max()
        .ok_or_else(|| Error::BadInput(
            "no node of this cluster has GPU shards (sinfo lists no gres gpu and shard); see `carma slurm gres`, or give --shards-per-gpu N".into(),
        ))
}

fn starts_with_shebang(path: &Path) -> bool {
    let mut head = [0u8; 2];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && &head == b"#!"
}
