//! `carma srun` (and `srun`, the link a job finds on its PATH): Slurm's step launcher inside
//! a job, `exec::srun`'s. Its exit code is its tasks', so it leaves the process here.

use std::ffi::OsString;

pub(super) fn run(words: &[OsString]) -> anyhow::Result<()> {
    let code = crate::exec::srun::main(words);
    std::process::exit(i32::from(code))
}
