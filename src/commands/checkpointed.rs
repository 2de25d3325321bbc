//! `carma checkpointed`: run by a job once it has written a checkpoint. It touches the file
//! `$CARMA_CHECKPOINT_FILE` of its attempt, and the next tick journals `Checkpointed`, so a
//! preemption knows how much work it costs. Silent on success: it runs inside the job, and
//! its output would land in the job's log.

use crate::error::Error;
use crate::exec::checkpoint::{self, ReportError};

pub(super) fn run() -> anyhow::Result<()> {
    let value = std::env::var_os(checkpoint::CHECKPOINT_FILE_ENV);
    match checkpoint::report_checkpoint(value.as_deref()) {
        Ok(_) => Ok(()),
        Err(error @ ReportError::NotInJob) => Err(Error::BadInput(error.to_string()).into()),
        Err(error) => Err(error.into()),
    }
}
