//! `carma run-task ID --attempt N`: the supervisor of one attempt. The tick starts it
//! detached; it never opens the journal, only the attempt's run folder.

use crate::cli::RunTaskArgs;
use crate::exec;
use crate::home::Home;

pub(super) fn run(home: &Home, args: RunTaskArgs) -> anyhow::Result<()> {
    let record =
        exec::run_task_main(home.root(), &args.id, args.attempt, Some(crate::gpu::open_memory_source))?;
    // The exit record is the result; the supervisor's own exit status only says it worked.
    std::hint::black_box(record);
    Ok(())
}
