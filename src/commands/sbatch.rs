//! `carma sbatch`: a Slurm batch job whose shard request comes from its memory figure.

use std::io::{Read, Write};
use std::path::Path;

use crate::cli::SbatchArgs;
use crate::error::Error;
use crate::slurm::request::{self, MemoryInput};
use crate::slurm::{ShardRule, command, scontrol, submit};

pub fn run(mut args: SbatchArgs) -> anyhow::Result<()> {
    // clap hands `--` and what follows to the hyphen-accepting sbatch options once one
    // of them came first; split there.
    if let Some(at) = args.sbatch_options.iter().position(|a| a == "--") {
        let mut command = args.sbatch_options.split_off(at);
        command.remove(0);
        command.append(&mut args.command);
        args.command = command;
    }
    let rule = ShardRule::new(args.shards.shard_mib, args.shards.margin_mib).map_err(Error::BadInput)?;
    let input = MemoryInput {
        mem: args.mem.as_deref(),
        model_summary: args.model_summary.as_deref(),
        batch_size: args.batch_size,
        owner_uid: None,
    };
    let need = request::need(&input)?;
    let per_gpu = match args.shards_per_gpu {
        Some(n) => Some(n),
        None if args.dry_run => None,
        None => cluster_shards_per_gpu(),
    };
    let shards = request::shards(&need, &rule, per_gpu)?;
    let comment = request::comment_for(&need, args.max_retries);
    let is_script = args.command.first().is_some_and(|c| starts_with_shebang(Path::new(c)));
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

/// The most shards any node's GPU holds, from `sinfo` (`gpu:G,shard:S` per node); `None`
/// when sinfo cannot say, and then Slurm itself is the only check.
fn cluster_shards_per_gpu() -> Option<u32> {
    let argv: Vec<String> = ["sinfo", "-h", "-N", "-o", "%G"].iter().map(|s| s.to_string()).collect();
    let text = command::run(&argv, None, command::COMMAND_TIMEOUT).ok()?;
    text.lines()
        .filter_map(|line| {
            let count = scontrol::parse_gres(line.trim());
            Some(count.shards? / count.gpus.filter(|&g| g > 0)?)
        })
        .max()
}

fn starts_with_shebang(path: &Path) -> bool {
    let mut head = [0u8; 2];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && &head == b"#!"
}
