//! One file per verb. Each parses nothing itself (clap did), resolves the state directory,
//! makes one library call and renders the result: tables for people, `--json` for programs.

use crate::cli::{Cli, Command};
use crate::home::Home;

mod act;
mod alloc;
mod bench;
mod cancel;
mod checkpointed;
mod cluster_queue;
mod config;
mod demo;
mod estimate;
mod events;
mod gpus;
mod hold;
mod init;
mod journal;
mod logs;
mod mcp;
mod progress;
mod queue;
mod render;
mod replay;
mod report;
mod requeue;
mod reserve;
mod run_task;
mod sbatch;
mod select;
mod show;
mod simulate;
mod simulate_copies;
mod slurm;
mod srun;
mod status;
mod submit;
mod systemd;
mod tick;
mod trace;
mod update;
mod wait;
mod workflow_view;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let home = Home::resolve(cli.home.clone());
    let wait = cli.lock_timeout;
    match cli.command {
        None => demo::run(),
        Some(Command::Init(args)) => init::run(&home, args),
        Some(Command::Submit(args)) => submit::run(&home, *args),
        Some(Command::Tick(args)) => tick::run(&home, wait, args),
        Some(Command::Queue(args)) => queue::run(&home, wait, args),
        Some(Command::Gpus(args)) => gpus::run(&home, wait, args),
        Some(Command::Show(args)) => show::run(&home, wait, args),
        Some(Command::Events(args)) => events::run(&home, wait, args),
        Some(Command::Cancel(args)) => cancel::run(&home, wait, args),
        Some(Command::Hold(args)) => hold::run(&home, wait, args, true),
        Some(Command::Release(args)) => hold::run(&home, wait, args, false),
        Some(Command::Update(args)) => update::run(&home, wait, args),
        Some(Command::Requeue(args)) => requeue::run(&home, wait, args),
        Some(Command::Checkpointed) => checkpointed::run(),
        Some(Command::Logs(args)) => logs::run(&home, args),
        Some(Command::Wait(args)) => wait::run(&home, args),
        Some(Command::Completions(args)) => completions(args.shell),
        Some(Command::Man) => man_page(&mut std::io::stdout().lock()),
        Some(Command::Bench(args)) => bench::run(args),
        Some(Command::Estimate(args)) => estimate::run(args),
        Some(Command::RunTask(args)) => run_task::run(&home, args),
        Some(Command::Systemd(args)) => systemd::run(&home, args),
        Some(Command::Simulate(args)) => match args.copies {
            Some(copies) => simulate_copies::run(&args, copies),
            None => simulate::run(*args),
        },
        Some(Command::Report(args)) => report::run(&home, args),
        Some(Command::Trace(args)) => trace::run(args),
        Some(Command::Replay(args)) => replay::run(&home, *args),
        Some(Command::Sbatch(args)) => sbatch::run(*args),
        Some(Command::Slurm(args)) => slurm::run(&home, cli.home.as_deref(), wait, args),
        Some(Command::Journal(args)) => journal::run(&home, wait, args),
        Some(Command::Config(args)) => config::run(&home, args),
        Some(Command::Serve(args)) => Ok(crate::serve::run(&home, &args.listen)?),
        Some(Command::Alloc(args)) => alloc::run_alloc(&home, wait, *args),
        Some(Command::Run(args)) => alloc::run_command(&home, wait, *args),
        Some(Command::Reserve(args)) => reserve::run(&home, wait, args),
        Some(Command::Mcp) => mcp::run(&home, wait),
        Some(Command::Srun(args)) => srun::run(&args.words),
    }
}

/// `carma completions SHELL`: generated from the same clap definitions as the CLI.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut command = <Cli as clap::CommandFactory>::command();
    // Into a buffer first: clap_complete panics when its writer fails (`| head`).
    let mut text = Vec::new();
    clap_complete::generate(shell, &mut command, "carma", &mut text);
    if shell == clap_complete::Shell::Bash {
        text.extend_from_slice(BASH_TASK_IDS.as_bytes());
    }
    std::io::Write::write_all(&mut std::io::stdout().lock(), &text)?;
    Ok(())
}

/// Task ids for bash: clap's generated completion knows the flags but not the queue, so the
/// verbs that take ids also offer what `carma queue --all` shows (its prefixes are unique, and
/// an array's is its id), asked of carma itself when Tab is pressed.
const BASH_TASK_IDS: &str = r#"
_carma_with_task_ids() {
    _carma "$@"
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    case "${COMP_WORDS[1]}" in
        show|cancel|logs|wait|hold|release|update|requeue) ;;
        *) return 0 ;;
    esac
    # Not for a flag, nor for the value a flag takes.
    [[ "$cur" == -* || "$prev" == -* ]] && return 0
    local ids
    ids="$(carma queue --all --format id 2>/dev/null | tail -n +2 | sed 's/\[.*//')"
    COMPREPLY+=( $(compgen -W "${ids}" -- "${cur}") )
}
complete -F _carma_with_task_ids -o bashdefault -o default carma
"#;

/// The man page, carma(1), in roff: the top-level help and every verb's.
pub fn man_page(out: &mut impl std::io::Write) -> anyhow::Result<()> {
    let command = <Cli as clap::CommandFactory>::command();
    let man = clap_mangen::Man::new(command.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    // clap_mangen's own list cites carma-submit(1) and the like, pages that do not exist: the
    // verbs are sections of this page.
    writeln!(out, ".SH SUBCOMMANDS")?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        writeln!(
            out,
            ".TP\n\\fBcarma {}\\fR\n{} (section \\fBcarma {}\\fR below)",
            sub.get_name(),
            roff(&about),
            sub.get_name()
        )?;
    }
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        writeln!(out, ".SH \\fBcarma {}\\fR", sub.get_name())?;
        if let Some(about) = sub.get_about() {
            writeln!(out, "{about}")?;
        }
        clap_mangen::Man::new(sub.clone()).render_options_section(out)?;
    }
    out.write_all(MAN_EXTRA.as_bytes())?;
    man.render_version_section(out)?;
    Ok(())
}

/// Text for a roff line: backslashes and hyphens escaped, no leading control character.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) { format!("\\&{escaped}") } else { escaped }
}

/// The parts of carma(1) clap does not know: files, environment, exit status.
const MAN_EXTRA: &str = r#".SH FILES
.TP
\fB/etc/carma/carma.toml\fR
Names the machine's system queue (\fBhome = "/var/lib/carma"\fR); written by root's \fBcarma init\fR.
On a Slurm login node, \fB[slurm] journals = ["/srv/carma"]\fR names the node journals for
\fBcarma queue\fR and \fBcarma report --merge\fR (after \fB--journal\fR and \fBCARMA_JOURNALS\fR).
.TP
\fB/var/lib/carma\fR
The system queue: \fBcarma.redb\fR (the journal, root only), \fBspool/\fR (submissions),
\fBprivate/\fR (environment values, root only), \fBruns/\fR (attempts; logs belong to their
submitter), \fBview/\fR (what every user reads), \fBconfig.toml\fR.
.SH ENVIRONMENT
.TP
\fBCARMA_HOME\fR
The state directory, as \fB--home\fR.
.TP
\fBCARMA_SYSTEM_CONFIG\fR
Another file in place of /etc/carma/carma.toml.
.TP
\fBCARMA_LOCK_TIMEOUT\fR
As \fB--lock-timeout\fR.
.SH EXIT STATUS
0 success; 1 a runtime failure (or, for \fBcarma wait\fR, a task that did not finish);
2 a usage error or bad input; 3 \fBcarma journal check\fR found damage; 73 carma refused a
path it would make or change as its own (a link, another user's); 75 the state lock
stayed busy; 77 the task belongs to another user; 78 the system config is unreadable or holds
a bad value; 124 \fBcarma wait --timeout\fR expired.
"#;
