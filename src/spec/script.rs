//! Job scripts: `carma submit train.sh` as `sbatch train.sh`.
//!
//! A job script is a file whose first line is `#!interpreter [argument]`. Options may be
//! given in `#CARMA` lines at the top of the script, written exactly as on the command line
//! (`#CARMA --gpus 1 --mem 12GiB`); as with `#SBATCH`, only lines before the first command
//! count, and flags on the command line win. The script is copied at submit (its text travels
//! in the private part of the spool file, never in the journal) and each attempt runs that
//! copy, so editing the file after submitting changes nothing, as with sbatch.
//!
//! The script is run the way the kernel would run it, without the kernel: its `#!` line is
//! parsed here and the interpreter is executed with the copy as its argument, so a script
//! runs through a shell only when its `#!` line names one.

/// Largest job script accepted (its text is embedded in the spool file).
pub const SCRIPT_BYTES_MAX: u64 = 512 * 1024;
/// The directive prefix, as `#SBATCH` for sbatch.
pub const DIRECTIVE: &str = "#CARMA";
/// Longest `#!` line the kernel reads (BINPRM_BUF_SIZE on Linux 5.1+).
const SHEBANG_BYTES_MAX: usize = 256;

/// A script's `#!` line: the interpreter and at most one argument, as Linux splits it (the
/// whole rest of the line, trimmed, is one argument: `#!/usr/bin/env python3` runs
/// `/usr/bin/env python3 SCRIPT`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shebang {
    /// The interpreter's path, the line's first word.
    pub interpreter: String,
    /// The rest of the line, trimmed, as one argument; `None` when empty.
    pub argument: Option<String>,
}

impl Shebang {
    /// The interpreter's argv up to the script: `[interpreter, argument?]`.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.interpreter.clone()).chain(self.argument.clone()).collect()
    }
}

/// Whether `head` (the first bytes of a file) starts like a script.
pub fn looks_like_script(head: &[u8]) -> bool {
    head.starts_with(b"#!")
}

/// Parses the `#!` line of `text`; the interpreter must be an absolute path.
pub fn parse_shebang(origin: &str, text: &str) -> Result<Shebang, String> {
    let hint = "the first line must be #! and the interpreter's absolute path, e.g. #!/bin/bash or #!/usr/bin/env python3";
    let first = text.lines().next().unwrap_or_default();
    let Some(rest) = first.strip_prefix("#!") else {
        return Err(format!("{origin}: not a script; {hint}"));
    };
    if first.len() > SHEBANG_BYTES_MAX {
        return Err(format!("{origin}: the #! line is longer than {SHEBANG_BYTES_MAX} bytes; shorten it"));
    }
    let rest = rest.trim_matches(|c| c == ' ' || c == '\t' || c == '\r');
    let (interpreter, argument) = match rest.split_once([' ', '\t']) {
        Some((interpreter, argument)) => (interpreter, Some(argument.trim_matches([' ', '\t']))),
        None => (rest, None),
    };
    if !interpreter.starts_with('/') {
        return Err(format!("{origin}: interpreter {interpreter:?} is not an absolute path; {hint}"));
    }
    Ok(Shebang {
        interpreter: interpreter.to_string(),
        argument: argument.filter(|a| !a.is_empty()).map(str::to_string),
    })
}

/// The words of every `#CARMA` line before the first command, each with its line number.
/// Blank lines and other comments may come between them, as with `#SBATCH`.
pub fn directives(origin: &str, text: &str) -> Result<Vec<(usize, Vec<String>)>, String> {
    directives_of(DIRECTIVE, origin, text)
}

/// The words of every `prefix` line (`#CARMA`, `#SBATCH`) before the first command.
pub fn directives_of(prefix: &str, origin: &str, text: &str) -> Result<Vec<(usize, Vec<String>)>, String> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate().skip(1) {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if !line.starts_with('#') {
            break;
        }
        let Some(rest) = line.strip_prefix(prefix) else { continue };
        if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
            continue;
        }
        let words = super::rad::split_words(rest)
            .map_err(|e| format!("{origin}:{}: {prefix} line: {e}", number + 1))?;
        found.push((number + 1, words));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs_split_as_the_kernel_does() {
        let shebang = parse_shebang("s", "#!/usr/bin/env python3\nprint()\n").unwrap();
        assert_eq!(shebang.argv(), ["/usr/bin/env", "python3"]);
        let shebang = parse_shebang("s", "#! /bin/bash\n").unwrap();
        assert_eq!(shebang, Shebang { interpreter: "/bin/bash".into(), argument: None });
        let shebang = parse_shebang("s", "#!/usr/bin/env -S python3 -u\n").unwrap();
        assert_eq!(shebang.argv(), ["/usr/bin/env", "-S python3 -u"], "one argument, like Linux");
        assert!(parse_shebang("s", "#!bash\n").unwrap_err().contains("not an absolute path"));
        assert!(parse_shebang("s", "echo hi\n").unwrap_err().starts_with("s: not a script"));
    }

    #[test]
    fn directives_stop_at_the_first_command() {
        let text = "#!/bin/sh\n#CARMA --gpus 2\n\n# a comment\n#CARMA --mem '12 GiB' --name x\n#CARMAX --no\necho go\n#CARMA --late\n";
        let found = directives("s", text).unwrap();
        assert_eq!(
            found,
            [
                (2, vec!["--gpus".to_string(), "2".into()]),
                (5, vec!["--mem".into(), "12 GiB".into(), "--name".into(), "x".into()])
            ]
        );
        let err = directives("s", "#!/bin/sh\n#CARMA --name 'x\n").unwrap_err();
        assert_eq!(err, "s:2: #CARMA line: unterminated quote");
    }
}
