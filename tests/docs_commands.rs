//! The guide's commands run: every command of every ```sh fence in README.md and docs/*.md.
//!
//! Goal: a command the documentation shows works as shown, and a command that no longer works
//! (a renamed flag, a verb gone) fails CI with the page and line that shows it.
//! Method: each page gets a fresh state directory (`carma init`, then two fake A100-40GB GPUs
//! from `schema/examples/fake-gpus-2xA100.json`, as tests/common does) and a working folder;
//! its commands run in order, for real: the built `carma` for `carma` (and for `cargo run
//! --release`, which is how the README starts the demo), `sh -c` for a line that needs a shell
//! (a pipe, a redirection). The working folder has the repository's `traces/`, `reports/` and
//! `schema/` (links), as a reader at the repository's root has. A line's exit code must be 0, or the one its `# exit N` comment
//! states. A fence whose info string says `file=NAME` (```python file=train.py) is written
//! into the working folder where it stands, so pages show the files their commands use. Ticks
//! happen where the page says `carma tick`; while `carma wait` or `carma logs -f` runs, the
//! test ticks every 200 ms as the timer would. A ```sh line that names a program this test
//! does not know fails: what cannot run here belongs in a ```text fence, with a sentence why.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Programs a ```sh line may start (or pipe into) besides `carma`.
const PROGRAMS: &[&str] = &[
    "carma", "cargo", "xargs", "cat", "echo", "grep", "head", "tail", "ls", "mkdir", "printf", "python",
    "python3", "sh",
];

/// The longest one documented command may take (the README's demo takes 90 s to 3 minutes in a
/// debug build on a busy 2-core machine).
const COMMAND_LIMIT: Duration = Duration::from_secs(600);

/// One command of a ```sh fence, or a file a fence asks to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// A command: its 1-based line, its text (continuations joined, comment removed) and the
    /// exit code expected.
    Run { line: usize, text: String, exit: i32 },
    /// A `file=NAME` fence: the file's name and contents.
    File { line: usize, name: String, text: String },
}

/// How one command runs.
#[derive(Debug, PartialEq, Eq)]
enum Invocation {
    /// argv, with `carma` as the built binary.
    Argv(Vec<String>),
    /// `sh -c TEXT` (pipes, redirections, variables).
    Shell(String),
    /// `cargo test`: the command that runs this very test, not run again inside it.
    TheSuite,
}

/// The steps of a page, in order. Errors name `page:line`.
fn steps(page: &str, text: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    while let Some((number, line)) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else { continue };
        let info = info.trim();
        let mut body = Vec::new();
        let mut closed = false;
        for (n, l) in lines.by_ref() {
            if l.trim_start().starts_with("```") {
                closed = true;
                break;
            }
            body.push((n, l));
        }
        if !closed {
            return Err(format!("{page}:{number}: this fence is never closed"));
        }
        if let Some(name) = info.split_whitespace().find_map(|w| w.strip_prefix("file=")) {
            let text: String = body.iter().map(|(_, l)| format!("{l}\n")).collect();
            steps.push(Step::File { line: number, name: name.to_string(), text });
        } else if info == "sh" || info.starts_with("sh ") {
            steps.extend(fence_commands(page, &body)?);
        }
    }
    Ok(steps)
}

/// The commands of one ```sh fence's lines.
fn fence_commands(page: &str, body: &[(usize, &str)]) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for &(number, raw) in body {
        let (code, comment) = split_comment(raw);
        let (start, mut joined) = pending.take().unwrap_or((number, String::new()));
        let code = code.trim_end();
        if let Some(head) = code.strip_suffix('\\') {
            if comment.is_some() {
                return Err(format!("{page}:{number}: a comment before a line continuation"));
            }
            joined.push_str(head);
            pending = Some((start, joined));
            continue;
        }
        joined.push_str(code);
        let text = joined.trim().to_string();
        if text.is_empty() {
            continue;
        }
        // `# exit 3` or `# exit 3: what is damaged`.
        let exit = match comment.and_then(|c| c.trim().strip_prefix("exit ")) {
            Some(rest) => {
                let digits: String = rest.trim_start().chars().take_while(char::is_ascii_digit).collect();
                digits.parse().map_err(|_| format!("{page}:{number}: `# exit {rest}` names no exit code"))?
            }
            None => 0,
        };
        steps.push(Step::Run { line: start, text, exit });
    }
    if let Some((start, _)) = pending {
        return Err(format!("{page}:{start}: the fence ends inside a line continuation"));
    }
    Ok(steps)
}

/// A line's code and its trailing `# comment` (a `#` that starts a word outside quotes).
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let mut quote = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if previous.is_whitespace() => return (&line[..at], Some(&line[at + 1..])),
            _ => {}
        }
        previous = c;
    }
    (line, None)
}

/// Splits a command into words as sh would, or says it needs a shell.
fn invocation(page: &str, line: usize, text: &str) -> Result<Invocation, String> {
    let words = match split_words(text) {
        Some(words) => words,
        None => {
            for segment in text.split(['|', ';', '&']) {
                let first = segment.split_whitespace().next().unwrap_or("");
                if !first.is_empty() && !PROGRAMS.contains(&first) && !first.starts_with('>') {
                    return Err(unknown(page, line, first));
                }
            }
            return Ok(Invocation::Shell(text.to_string()));
        }
    };
    let strs: Vec<&str> = words.iter().map(String::as_str).collect();
    match strs.as_slice() {
        ["cargo", "test", ..] => Ok(Invocation::TheSuite),
        ["cargo", "run", "--release"] => Ok(Invocation::Argv(vec!["carma".into()])),
        ["cargo", "run", "--release", "--", rest @ ..] => Ok(Invocation::Argv(
            std::iter::once("carma").chain(rest.iter().copied()).map(String::from).collect(),
        )),
        [first, ..] if *first != "cargo" && PROGRAMS.contains(first) => Ok(Invocation::Argv(words)),
        [first, ..] => Err(unknown(page, line, first)),
        [] => Err(format!("{page}:{line}: an empty command")),
    }
}

fn unknown(page: &str, line: usize, program: &str) -> String {
    format!(
        "{page}:{line}: `{program}` is not a command this test knows how to run; put the line in a ```text fence with a sentence saying why it cannot run here"
    )
}

/// sh's word splitting for a line with quotes but no shell syntax; None when it has some
/// (a pipe, a redirection, a variable, a glob, `~`, a backquote, `;` or `&`).
fn split_words(text: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    w.push(q);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '$' | '`' => return None,
                        '\\' => w.push(chars.next()?),
                        _ => w.push(q),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).push(chars.next()?),
            '|' | '>' | '<' | ';' | '&' | '$' | '`' | '*' | '?' | '(' | ')' => return None,
            '~' if word.is_none() => return None,
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Some(words)
}

/// A page's place to run: a fresh state directory with fake GPUs and a working folder.
struct Bench {
    _dir: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    path: String,
    user_home: PathBuf,
}

impl Bench {
    fn new() -> Result<Bench, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let (home, work, bin) = (dir.path().join("home"), dir.path().join("work"), dir.path().join("bin"));
        for folder in [&work, &bin] {
            std::fs::create_dir(folder).map_err(|e| format!("mkdir {}: {e}", folder.display()))?;
        }
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_carma"), bin.join("carma"))
            .map_err(|e| format!("{e}"))?;
        // Pages that say "from the repository's root" name traces/, reports/ and schema/.
        let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
        for folder in ["traces", "reports", "schema"] {
            std::os::unix::fs::symlink(repository.join(folder), work.join(folder))
                .map_err(|e| format!("{e}"))?;
        }
        let system_path = std::env::var("PATH").unwrap_or_default();
        // `python` and `python3` as the interpreter itself (not a version manager's shim, which
        // would need the real HOME), `python` as python-is-python3 provides it.
        if let Some(python) = interpreter(&system_path) {
            for name in ["python", "python3"] {
                std::os::unix::fs::symlink(&python, bin.join(name)).map_err(|e| format!("{e}"))?;
            }
        }
        let path = format!("{}:{system_path}", bin.display());
        // Pages' commands never touch the tester's own home (`~/.local/share/...`).
        let user_home = dir.path().join("user-home");
        std::fs::create_dir(&user_home).map_err(|e| format!("mkdir {}: {e}", user_home.display()))?;
        let bench = Bench { _dir: dir, home, work, path, user_home };
        bench.carma(&["init"])?;
        let gpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/examples/fake-gpus-2xA100.json");
        let config = format!("[tick]\ngpus = \"fake:{}\"\n", gpus.display());
        std::fs::write(bench.home.join("config.toml"), config).map_err(|e| format!("config: {e}"))?;
        Ok(bench)
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command
            .current_dir(&self.work)
            .env("CARMA_HOME", &self.home)
            .env("CARMA_LOCK_TIMEOUT", "10s")
            .env("PATH", &self.path)
            .env("HOME", &self.user_home)
            .stdin(Stdio::null());
        command
    }

    fn carma(&self, args: &[&str]) -> Result<(), String> {
        let out =
            self.command(env!("CARGO_BIN_EXE_carma")).args(args).output().map_err(|e| format!("{e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!("carma {args:?}: {}", String::from_utf8_lossy(&out.stderr)))
    }

    /// Runs one invocation to its end (ticking beside it when it waits on the queue);
    /// returns its exit code and output.
    fn run(&self, invocation: &Invocation) -> Result<(i32, String), String> {
        let (mut command, waits_on_queue) = match invocation {
            Invocation::TheSuite => return Ok((0, String::new())),
            Invocation::Shell(text) => {
                let mut command = self.command("sh");
                command.args(["-c", text]);
                (command, false)
            }
            Invocation::Argv(words) => {
                let program =
                    if words[0] == "carma" { env!("CARGO_BIN_EXE_carma") } else { words[0].as_str() };
                let mut command = self.command(program);
                command.args(&words[1..]);
                let verb = words.get(1).map(String::as_str);
                let follows = words.iter().any(|w| w == "-f" || w == "--follow");
                (command, words[0] == "carma" && (verb == Some("wait") || (verb == Some("logs") && follows)))
            }
        };
        let out_file = tempfile::tempfile().map_err(|e| format!("{e}"))?;
        let err_file = out_file.try_clone().map_err(|e| format!("{e}"))?;
        let child = command.stdout(out_file.try_clone().map_err(|e| format!("{e}"))?).stderr(err_file);
        let mut child = child.spawn().map_err(|e| format!("cannot start it: {e}"))?;
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().map_err(|e| format!("{e}"))? {
                break status;
            }
            if started.elapsed() > COMMAND_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("still running after {COMMAND_LIMIT:?}; killed"));
            }
            if waits_on_queue {
                let _ = self.carma(&["tick"]);
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let mut output = String::new();
        let mut file = out_file;
        use std::io::{Read, Seek};
        let _ = file.rewind();
        let _ = file.take(64 * 1024).read_to_string(&mut output);
        Ok((status.code().unwrap_or(-1), output))
    }
}

/// The Python interpreter's own path (`sys.executable`), from python3 or python on `path`.
fn interpreter(path: &str) -> Option<PathBuf> {
    let found = which("python3", path).or_else(|| which("python", path))?;
    let out = Command::new(found).args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
    let executable = String::from_utf8(out.stdout).ok()?;
    Some(PathBuf::from(executable.trim())).filter(|p| p.is_file())
}

fn which(program: &str, path: &str) -> Option<PathBuf> {
    path.split(':').map(|dir| Path::new(dir).join(program)).find(|p| p.is_file())
}

/// Runs a page's steps in a fresh bench; returns one line per failure (`page:line: ...`).
fn run_page(page: &str, text: &str) -> Vec<String> {
    let steps = match steps(page, text) {
        Ok(steps) => steps,
        Err(error) => return vec![error],
    };
    let bench = match Bench::new() {
        Ok(bench) => bench,
        Err(error) => return vec![format!("{page}: cannot prepare a state directory: {error}")],
    };
    let mut failures = Vec::new();
    let commands = steps.iter().filter(|s| matches!(s, Step::Run { .. })).count();
    let started = Instant::now();
    for step in steps {
        match step {
            Step::File { line, name, text } => {
                let path = bench.work.join(&name);
                if let Err(e) = std::fs::write(&path, text) {
                    failures.push(format!("{page}:{line}: cannot write {name}: {e}"));
                }
                if name.ends_with(".sh") {
                    use std::os::unix::fs::PermissionsExt;
                    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755));
                }
            }
            Step::Run { line, text, exit } => match invocation(page, line, &text).and_then(|i| bench.run(&i))
            {
                Ok((code, _)) if code == exit => {}
                Ok((code, output)) => failures.push(format!(
                    "{page}:{line}: `{text}` exited {code}, the page expects {exit}; it printed:\n{}",
                    output.trim_end()
                )),
                Err(error) if error.starts_with(page) => failures.push(error),
                Err(error) => failures.push(format!("{page}:{line}: `{text}`: {error}")),
            },
        }
    }
    eprintln!(
        "{page}: {commands} commands in {:.1} s, {} failed",
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    failures
}

/// README.md and every docs/*.md, as (name, text).
fn pages() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut names = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    names.extend(docs);
    names
        .into_iter()
        .map(|n| (n.clone(), std::fs::read_to_string(root.join(&n)).expect("read page")))
        .collect()
}

/// Goal: every ```sh command of the README and docs/ runs as shown (each page in a fresh
/// state directory with two fake GPUs; pages run side by side).
#[test]
fn every_documented_command_runs() {
    let path = std::env::var("PATH").unwrap_or_default();
    if which("python3", &path).is_none() && which("python", &path).is_none() {
        // The pages' jobs are Python scripts, as users' are.
        return common::skip::skip(common::skip::Need::Python3, "the guide's jobs need python3");
    }
    let mut pages = pages();
    // CARMA_DOCS_PAGE=docs/users.md runs one page, for whoever is writing it (or a draft: any
    // Markdown file by its path).
    if let Ok(only) = std::env::var("CARMA_DOCS_PAGE") {
        pages.retain(|(name, _)| *name == only);
        if pages.is_empty() {
            let text =
                std::fs::read_to_string(&only).unwrap_or_else(|e| panic!("CARMA_DOCS_PAGE={only}: {e}"));
            pages.push((only, text));
        }
    }
    let failures: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> =
            pages.iter().map(|(name, text)| scope.spawn(move || run_page(name, text))).collect();
        runs.into_iter().flat_map(|r| r.join().expect("a page's thread")).collect()
    });
    assert!(failures.is_empty(), "{} documented command(s) failed:\n{}", failures.len(), failures.join("\n"));
}

/// Goal: the guide's index links every page of docs/, and user documentation names no issue.
#[test]
fn the_index_links_every_page_and_no_page_names_an_issue() {
    let pages = pages();
    let index = &pages.iter().find(|(n, _)| n == "docs/README.md").expect("docs/README.md").1;
    for (name, text) in &pages {
        if let Some(file) = name.strip_prefix("docs/") {
            assert!(
                file == "README.md" || index.contains(&format!("({file})")),
                "docs/README.md does not link {file}"
            );
        }
        for (number, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            let names_issue = lower.contains("issue ")
                && lower.split("issue ").skip(1).any(|t| t.starts_with(|c: char| c.is_ascii_digit()));
            let hash_number = line.split("(#").skip(1).any(|t| t.starts_with(|c: char| c.is_ascii_digit()));
            assert!(
                !names_issue && !hash_number,
                "{name}:{}: user documentation names an issue: {line}",
                number + 1
            );
        }
    }
}

/// Goal: the extractor reads commands as a reader does: continuations joined, comments and
/// prompts kept out, `# exit N` read, files from `file=` fences, other fences ignored.
#[test]
fn the_extractor_reads_fences_as_written() {
    let page = "intro\n```sh\ncarma queue   # everyone's tasks\ncarma submit --gpus 1 \\\n    -- python train.py\n\ncarma show nope  # exit 2: no such task\n```\n```text\nsudo carma init\n```\n```python file=train.py\nprint('hi')\n```\n";
    let got = steps("p.md", page).unwrap();
    assert_eq!(
        got,
        vec![
            Step::Run { line: 3, text: "carma queue".into(), exit: 0 },
            Step::Run { line: 4, text: "carma submit --gpus 1     -- python train.py".into(), exit: 0 },
            Step::Run { line: 7, text: "carma show nope".into(), exit: 2 },
            Step::File { line: 12, name: "train.py".into(), text: "print('hi')\n".into() },
        ]
    );
    assert_eq!(
        invocation("p.md", 1, "carma cancel -n 'sweep*' --me").unwrap(),
        Invocation::Argv(vec!["carma".into(), "cancel".into(), "-n".into(), "sweep*".into(), "--me".into()])
    );
    assert_eq!(
        invocation("p.md", 1, "carma queue -o id --noheader | xargs carma cancel").unwrap(),
        Invocation::Shell("carma queue -o id --noheader | xargs carma cancel".into())
    );
    assert_eq!(
        invocation("p.md", 1, "cargo run --release -- bench tick").unwrap(),
        Invocation::Argv(vec!["carma".into(), "bench".into(), "tick".into()])
    );
}

/// Goal: the test can fail. A documented flag that carma lacks fails with the page and line;
/// a wrong `# exit` fails; a program the test does not know fails with the fix; an unclosed
/// fence fails.
#[test]
fn a_wrong_command_fails_with_its_page_and_line() {
    let failures = run_page(
        "bad.md",
        "# Bad\n\n```sh\ncarma queue --no-such-flag\ncarma queue  # exit 3\nsudo carma init\n```\n",
    );
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(failures[0].starts_with("bad.md:4: `carma queue --no-such-flag` exited 2, the page expects 0; it printed:\nerror: unexpected argument '--no-such-flag' found"), "{}", failures[0]);
    assert!(
        failures[1].starts_with("bad.md:5: `carma queue` exited 0, the page expects 3"),
        "{}",
        failures[1]
    );
    assert_eq!(
        failures[2],
        "bad.md:6: `sudo` is not a command this test knows how to run; put the line in a ```text fence with a sentence saying why it cannot run here"
    );
    assert_eq!(
        run_page("open.md", "```sh\ncarma queue\n"),
        vec!["open.md:1: this fence is never closed".to_string()]
    );
    assert!(run_page("good.md", "```sh\ncarma queue\ncarma gpus\n```\n").is_empty());
}
