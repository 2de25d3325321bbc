//! The host limit and requeue flags of `carma submit` (`--host-mem`, `--requeue`,
//! `--no-requeue`) as the spec's keys.

use crate::cli::SubmitArgs;
use crate::error::Error;
use crate::spec;

/// `--host-mem SIZE` read as Slurm reads `--mem` (`16g`, `16G`, `16GB` are GiB, a bare number
/// MiB), into the spec's `host_mem`; `0` (all of the node's memory) is no limit.
pub(super) fn host_mem(text: &Option<String>) -> Result<Option<String>, Error> {
    let Some(text) = text else { return Ok(None) };
    let mib =
        spec::sbatch::slurm_memory_mib(text).map_err(|e| Error::BadInput(format!("--host-mem: {e}")))?;
    Ok((mib > 0).then(|| format!("{mib}M")))
}

/// `--requeue` / `--no-requeue` as the spec's `requeue`; `None` when neither is given.
pub(super) fn requeue(args: &SubmitArgs) -> Option<bool> {
    match (args.requeue, args.no_requeue) {
        (true, _) => Some(true),
        (false, true) => Some(false),
        (false, false) => None,
    }
}
