//! `carma submit`'s command line as sbatch reads it, before clap does.
//!
//! sbatch takes its own options up to the script and hands every word after the script to
//! the script: `sbatch train.sh --lr 0.1`. clap would read `--lr` as one of carma's flags
//! (and refuse it), so [`sbatch_form`] finds the first word that is not an option or an
//! option's value and, when it names a job script, puts a `--` after it: the words that
//! follow then reach the script untouched, flags that happen to be carma's included.
//!
//! The same walk tells a mistyped flag (`--tim 5m train.sh`) from a command that belongs
//! after `--` (`python train.py --lr 0.1`), so that the first is named as clap names it.

use std::ffi::OsString;
use std::path::Path;

use clap::CommandFactory;

/// Where the walk over `submit`'s words stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The first operand, at this index of the whole argv.
    Operand(usize),
    /// A `--` before any operand: what follows is the command.
    Escape,
    /// A word that looks like a flag but is none of submit's (at this index): clap's error
    /// names it.
    UnknownFlag(usize),
    /// Only options.
    End,
}

/// Walks the words after `submit` (if the command is submit) to the first operand.
fn walk(words: &[String]) -> Option<Stop> {
    let at = words.iter().position(|w| w == "submit")?;
    let mut command = crate::cli::Cli::command();
    // Settles each argument's number of values (unset until built).
    command.build();
    let submit = command.find_subcommand("submit")?;
    // `None`: not a flag of submit's (or a global one); `Some(takes_value)` otherwise.
    let flag = |word: &str| -> Option<bool> {
        let (long, short) = match word.strip_prefix("--") {
            Some(name) => (Some(name.split('=').next().unwrap_or(name)), None),
            None => (None, word.strip_prefix('-').and_then(|s| s.chars().next())),
        };
        submit.get_arguments().chain(command.get_arguments()).find_map(|arg| {
            let by_long = long.is_some_and(|l| {
                arg.get_long() == Some(l) || arg.get_all_aliases().is_some_and(|a| a.contains(&l))
            });
            let by_short = short.is_some_and(|s| arg.get_short() == Some(s));
            (by_long || by_short).then(|| arg.get_num_args().is_some_and(|n| n.takes_values()))
        })
    };
    let mut index = at + 1;
    while index < words.len() {
        let word = &words[index];
        if word == "--" {
            return Some(Stop::Escape);
        }
        if word.len() > 1 && word.starts_with('-') {
            let Some(takes_value) = flag(word) else { return Some(Stop::UnknownFlag(index)) };
            // `--mem=1GiB` and `-t5m` carry their value; `--mem 1GiB` takes the next word.
            let attached = word.contains('=') || (!word.starts_with("--") && word.len() > 2);
            index += if takes_value && !attached { 2 } else { 1 };
            continue;
        }
        return Some(Stop::Operand(index));
    }
    Some(Stop::End)
}

/// `carma submit [options] train.sh a b` as `carma submit [options] train.sh -- a b` when
/// `train.sh` is a job script (a file starting with `#!`); an sbatch option among the options
/// (`--gres=gpu:2`, `-N 1`, a prefix as getopt reads it) kept as sbatch's, for submit to read
/// with the script's `#SBATCH` lines ([`sbatch_options`]); any other command line unchanged.
pub fn sbatch_form(args: Vec<OsString>) -> Vec<OsString> {
    let args = sbatch_options(args);
    let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let Some(Stop::Operand(at)) = walk(&words) else { return args };
    let after = args.get(at + 1).map(|w| w.as_os_str());
    let is_toml = Path::new(&args[at]).extension().is_some_and(|e| e == "toml");
    if after.is_none() || after == Some("--".as_ref()) || is_toml || !is_job_script(Path::new(&args[at])) {
        return args;
    }
    let mut rewritten = args;
    rewritten.insert(at + 1, OsString::from("--"));
    rewritten
}

/// Whether `path` is a file starting with `#!` (read as the submitter: submit runs as them).
pub fn is_job_script(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 2];
    path.is_file()
        && std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok()
        && crate::spec::script::looks_like_script(&head)
}

/// A one-line hint for `carma submit python train.py --lr 0.1`, which clap refuses at `--lr`:
/// the words from the first operand on are a command, and belong after `--`. `None` for any
/// other command line, a mistyped flag before the operand included (clap's error names it).
pub fn stray_command_hint(args: &[OsString]) -> Option<String> {
    let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let Some(Stop::Operand(at)) = walk(&words) else { return None };
    let command = words[at..].join(" ");
    Some(format!("`{command}` looks like a command; put it after `--`: carma submit [options] -- {command}"))
}

/// Each word before the operand that is no option of carma's but is sbatch's (and its value,
/// when it takes one and it is not attached) becomes `--sbatch-option=WORD`: sbatch takes its
/// options on its command line, where they win over the script's, and so does carma.
fn sbatch_options(mut args: Vec<OsString>) -> Vec<OsString> {
    use crate::spec::sbatch;
    // Each round turns one unknown word into a known one, so the walk ends.
    loop {
        let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let Some(Stop::UnknownFlag(at)) = walk(&words) else { return args };
        let word = &words[at];
        let option = match word.strip_prefix("--") {
            Some(long) => sbatch::by_long(long.split('=').next().unwrap_or(long)),
            None => word.chars().nth(1).and_then(sbatch::by_short),
        };
        let Some(option) = option else { return args };
        let attached = if word.starts_with("--") { word.contains('=') } else { word.chars().count() > 2 };
        let end = if option.takes_value && !attached { (at + 2).min(args.len()) } else { at + 1 };
        let kept: Vec<OsString> = args[at..end]
            .iter()
            .map(|w| {
                let mut flag = OsString::from("--sbatch-option=");
                flag.push(w);
                flag
            })
            .collect();
        args.splice(at..end, kept);
    }
}

/// clap's error on one line: its first line and its tip (`a similar argument exists`), without
/// the usage block.
pub fn one_line(error: &clap::Error) -> String {
    let text = error.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default().trim_start_matches("error: ").to_string();
    // clap's other tip (`to pass '--tim' as a value, use '-- --tim'`) misleads before the
    // program is named: the flag was meant for carma.
    let tips: Vec<&str> =
        lines.filter_map(|l| l.strip_prefix("tip: ")).filter(|t| t.contains("similar")).collect();
    if tips.is_empty() { first } else { format!("{first}; {}", tips.join("; ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_string).collect()
    }

    /// Goal: the walk skips options and their values, stops at the first operand, and tells
    /// an unknown flag and `--` apart from it.
    #[test]
    fn the_walk_finds_the_first_operand() {
        assert_eq!(walk(&words("carma submit --gpus 1 -t5m --mem=1GiB -H x.sh a")), Some(Stop::Operand(7)));
        assert_eq!(walk(&words("carma submit --gpus 1 --tim 5m train.sh")), Some(Stop::UnknownFlag(4)));
        assert_eq!(walk(&words("carma submit --time 5m -- x")), Some(Stop::Escape));
        assert_eq!(walk(&words("carma --home /h submit --hold")), Some(Stop::End));
        assert_eq!(walk(&words("carma queue")), None);
    }

    /// Goal: sbatch options before the script are kept as sbatch's (a value word with its
    /// option, a prefix as getopt reads it), carma's own and a mistyped flag are left alone.
    #[test]
    fn sbatch_options_on_the_command_line_are_kept_as_sbatchs() {
        let form = |line: &str| -> String {
            let args = sbatch_options(words(line).into_iter().map(OsString::from).collect());
            args.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
        };
        assert_eq!(
            form("carma submit --gres=gpu:2 -N 1 --gpus 1 train.sh -N 3"),
            "carma submit --sbatch-option=--gres=gpu:2 --sbatch-option=-N --sbatch-option=1 --gpus 1 train.sh -N 3"
        );
        assert_eq!(
            form("carma submit --ntasks-per-n 4 x.sh"),
            "carma submit --sbatch-option=--ntasks-per-n --sbatch-option=4 x.sh"
        );
        assert_eq!(
            form("carma submit --tim 5m train.sh"),
            "carma submit --tim 5m train.sh",
            "ambiguous: clap names it"
        );
        assert_eq!(form("carma queue --gres=x"), "carma queue --gres=x");
    }
}
