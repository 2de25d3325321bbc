//! The `carma` binary: parse, dispatch, map the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // `carma submit train.sh --lr 0.1`: the words after a job script are the script's.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Run as `srun` (the link on a job's PATH): Slurm's step launcher, `carma srun`.
    if args.first().is_some_and(|argv0| carma::exec::srun::is_launcher_name(argv0)) {
        return ExitCode::from(carma::exec::srun::main(&args[1..]));
    }
    args = carma::submit_argv::sbatch_form(args);
    let cli = match carma::cli::Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(err) if err.kind() == clap::error::ErrorKind::UnknownArgument => {
            let line = carma::submit_argv::stray_command_hint(&args)
                .unwrap_or_else(|| carma::submit_argv::one_line(&err));
            eprintln!("error: {}", carma::text::escape(&line));
            return ExitCode::from(2);
        }
        Err(err) => err.exit(),
    };
    match carma::commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            // Messages quote paths and values users wrote; escape them as every other human
            // output does, line by line so a deliberate second line stays a line.
            let message = err.to_string();
            let lines: Vec<_> = message.split('\n').map(carma::text::escape).collect();
            eprintln!("error: {}", lines.join("\n"));
            let code = err
                .downcast_ref::<carma::Error>()
                .map_or(carma::error::EXIT_RUNTIME, carma::Error::exit_code);
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
    }
}

/// `carma queue | head` closes our stdout early; that is not an error worth a message.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        let io = cause.downcast_ref::<std::io::Error>().map(std::io::Error::kind);
        let json = cause.downcast_ref::<serde_json::Error>().and_then(serde_json::Error::io_error_kind);
        io.or(json) == Some(std::io::ErrorKind::BrokenPipe)
    })
}
