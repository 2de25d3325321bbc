//! One file per verb. Each parses nothing itself (clap did), resolves the state directory,
//! makes one library call and renders the result: tables for people, `--json` for programs.

use crate::cli::{Cli, Command};
use crate::home::Home;

mod bench;
mod cancel;
mod demo;
mod estimate;
mod events;
mod init;
mod queue;
mod render;
mod replay;
mod report;
mod run_task;
mod show;
mod simulate;
mod submit;
mod systemd;
mod tick;
mod trace;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let home = Home::resolve(cli.home.clone());
    let wait = cli.lock_timeout;
    match cli.command {
        None => demo::run(),
        Some(Command::Init) => init::run(&home),
        Some(Command::Submit(args)) => submit::run(&home, *args),
        Some(Command::Tick(args)) => tick::run(&home, wait, args),
        Some(Command::Queue(args)) => queue::run(&home, wait, args),
        Some(Command::Show(args)) => show::run(&home, wait, args),
        Some(Command::Events(args)) => events::run(&home, wait, args),
        Some(Command::Cancel(args)) => cancel::run(&home, wait, args),
        Some(Command::Bench(args)) => bench::run(args),
        Some(Command::Estimate(args)) => estimate::run(args),
        Some(Command::RunTask(args)) => run_task::run(&home, args),
        Some(Command::Systemd(args)) => systemd::run(&home, args),
        Some(Command::Simulate(args)) => simulate::run(*args),
        Some(Command::Report(args)) => report::run(args),
        Some(Command::Trace(args)) => trace::run(args),
        Some(Command::Replay(args)) => replay::run(&home, *args),
    }
}
