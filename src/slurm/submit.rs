//! The `sbatch` command line `carma sbatch` runs (pure): the user's sbatch options, then the
//! shard request, `--requeue` and the `carma:` comment, then the command.
//!
//! sbatch runs a batch script. A command that is already one (a file starting with `#!`) is
//! passed as sbatch's script with its arguments. Any other command is wrapped in a two-line
//! `/bin/sh` script given on sbatch's stdin that `exec`s it with every argument in single
//! quotes, so the job runs exactly that argv: no word of it is expanded, split or globbed.

use super::comment::CarmaComment;

/// sbatch options carma sets itself; giving them too would contradict the memory figure.
const OWNED_OPTIONS: [&str; 9] = [
    "--gres",
    "--gpus",
    "-G",
    "--comment",
    "--tres-per-task",
    "--mem-per-gpu",
    "--gpus-per-node",
    "--gpus-per-task",
    "--gpus-per-socket",
];

/// The first of `options` that carma sbatch sets itself (a GPU request, the comment).
pub fn owned_option(options: &[String]) -> Option<&String> {
    options.iter().find(|o| OWNED_OPTIONS.iter().any(|own| is_option(o, own)))
}

/// What to run: sbatch's argv, and the script for its stdin when the command is wrapped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbatchPlan {
    /// `sbatch` and its arguments, with carma's `--gres=shard:N`, `--requeue` and `--comment`.
    pub argv: Vec<String>,
    /// The wrapper script sbatch reads on stdin when the command is not itself a script.
    pub stdin_script: Option<String>,
}

/// Builds the sbatch command. `command_is_script`: `command[0]` is a file starting with `#!`.
pub fn sbatch_plan(
    options: &[String],
    command: &[String],
    command_is_script: bool,
    shards: u32,
    comment: &CarmaComment,
    parsable: bool,
) -> Result<SbatchPlan, String> {
    if command.is_empty() {
        return Err(
            "no command; give it after `--`, e.g. carma sbatch --gpu-mem 12GiB -- python train.py".into()
        );
    }
    if let Some(owned) = owned_option(options) {
        return Err(format!("carma sbatch sets {owned} itself from the memory figure; remove it"));
    }
    let mut argv = vec!["sbatch".to_string()];
    argv.extend(options.iter().cloned());
    argv.push(format!("--gres=shard:{shards}"));
    argv.push("--requeue".into());
    argv.push(format!("--comment={}", comment.render()));
    if parsable {
        argv.push("--parsable".into());
    }
    if command_is_script {
        argv.extend(command.iter().cloned());
        return Ok(SbatchPlan { argv, stdin_script: None });
    }
    let words: Vec<String> = command.iter().map(|w| quote(w)).collect();
    let script = format!(
        "#!/bin/sh\n# written by carma sbatch: runs the command below as given, without shell expansion\nexec {}\n",
        words.join(" ")
    );
    Ok(SbatchPlan { argv, stdin_script: Some(script) })
}

/// Whether `arg` is the option `name` (`--gres`, `--gres=...`, `-G`, `-G1`).
fn is_option(arg: &str, name: &str) -> bool {
    match arg.strip_prefix(name) {
        Some(rest) => {
            rest.is_empty() || rest.starts_with('=') || (!name.starts_with("--") && !rest.is_empty())
        }
        None => false,
    }
}

/// One single-quoted shell word: inside single quotes nothing is special but the quote,
/// written as `'\''`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The job id in sbatch's answer (`Submitted batch job 12`, or `12` / `12;cluster` with
/// `--parsable`).
pub fn job_id_of(sbatch_stdout: &str) -> Option<u32> {
    let text = sbatch_stdout.trim();
    let last = text.rsplit(' ').next()?;
    last.split(';').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    //! Goal: sbatch gets the shard request, requeue and comment after the user's options; a
    //! wrapped command reaches the job as the exact argv, even with shell syntax in it.
    use super::*;

    fn words(text: &[&str]) -> Vec<String> {
        text.iter().map(|w| w.to_string()).collect()
    }

    fn comment() -> CarmaComment {
        CarmaComment { mem_mib: Some(3072), need_mib: Some(3072), ..CarmaComment::default() }
    }

    #[test]
    fn options_then_carma_then_the_script() {
        let plan = sbatch_plan(
            &words(&["-J", "train", "-t", "10"]),
            &words(&["./job.sh", "a b"]),
            true,
            5,
            &comment(),
            true,
        )
        .unwrap();
        assert_eq!(
            plan.argv,
            words(&[
                "sbatch",
                "-J",
                "train",
                "-t",
                "10",
                "--gres=shard:5",
                "--requeue",
                "--comment=carma:mem=3072MiB,need=3072",
                "--parsable",
                "./job.sh",
                "a b"
            ])
        );
        assert_eq!(plan.stdin_script, None);
    }

    #[test]
    fn a_program_is_wrapped_with_every_word_quoted() {
        let hostile = ["python", "-c", "print('hi')", "$(touch /tmp/x)", "a;b", "`id`", "*"];
        let plan = sbatch_plan(&[], &words(&hostile), false, 2, &comment(), false).unwrap();
        let script = plan.stdin_script.unwrap();
        assert_eq!(
            script.lines().last().unwrap(),
            r#"exec 'python' '-c' 'print('\''hi'\'')' '$(touch /tmp/x)' 'a;b' '`id`' '*'"#
        );
        // A real shell gives back exactly the argv.
        let printed = std::process::Command::new("sh")
            .arg("-c")
            .arg(script.replace("exec 'python'", "printf '%s\\n'"))
            .output()
            .unwrap();
        let argv: Vec<String> =
            String::from_utf8(printed.stdout).unwrap().lines().map(String::from).collect();
        assert_eq!(argv, words(&hostile[1..]));
    }

    #[test]
    fn options_carma_owns_are_refused() {
        for owned in ["--gres=gpu:1", "--gres", "-G1", "--gpus=2", "--comment=x"] {
            let err =
                sbatch_plan(&words(&[owned]), &words(&["true"]), false, 1, &comment(), false).unwrap_err();
            assert_eq!(err, format!("carma sbatch sets {owned} itself from the memory figure; remove it"));
        }
        assert!(
            sbatch_plan(
                &words(&["--gres-flags=enforce-binding"]),
                &words(&["true"]),
                false,
                1,
                &comment(),
                false
            )
            .is_ok()
        );
        assert_eq!(
            sbatch_plan(&[], &[], false, 1, &comment(), false).unwrap_err(),
            "no command; give it after `--`, e.g. carma sbatch --gpu-mem 12GiB -- python train.py"
        );
    }

    #[test]
    fn job_ids_from_sbatch() {
        assert_eq!(job_id_of("Submitted batch job 12\n"), Some(12));
        assert_eq!(job_id_of("12;cluster\n"), Some(12));
        assert_eq!(job_id_of("13\n"), Some(13));
        assert_eq!(job_id_of("sbatch: error"), None);
    }
}
