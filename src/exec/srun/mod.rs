//! `srun` inside a batch job, on one node: a script written for sbatch starts its program
//! with `srun python train.py`, and on Slurm that starts the job's tasks, `--ntasks` copies
//! told `SLURM_PROCID`/`SLURM_LOCALID` 0 to N−1 (single-node DDP depends on exactly this).
//! carma's srun does the same inside a carma job.
//!
//! The supervisor puts it on the job's `PATH` ([`install`]): a root-owned folder `bin/` in
//! the attempt's run folder holding one link, `srun`, to the carma binary itself; the binary
//! reads its name (`argv[0]`) and runs [`main`] (`carma srun` is the same). It then runs as
//! the job's user, inside the job's cgroup and attempt: its tasks are the job's processes,
//! contained, stopped and counted as any other. Nothing runs through a shell.
//!
//! Three steps, as the tick's: the words read ([`options`], srun's getopt rules and one
//! table), the step decided purely from them and the job's environment ([`step`]), then the
//! processes started and waited for ([`ranks`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

mod options;
mod ranks;
mod step;

/// The run-folder folder that holds the `srun` link (listed in the run folder's owner table).
pub use super::rundir::LAUNCHER_DIR;
/// The name carma answers to as Slurm's step launcher.
pub const LAUNCHER_NAME: &str = "srun";

/// `srun WORDS...` inside a job: starts the step and returns srun's exit code (the highest of
/// its tasks'; 2 for a command line or step that cannot be had, said in one line).
pub fn main(words: &[OsString]) -> u8 {
    let inherited: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    let get =
        |key: &str| inherited.get(std::ffi::OsStr::new(key)).and_then(|v| v.to_str()).map(str::to_string);
    if get("SLURM_JOB_ID").is_none() {
        eprintln!(
            "srun: error: not inside a carma job (no SLURM_JOB_ID); submit the script with carma submit, or run one command on a GPU with carma run"
        );
        return 2;
    }
    let split = match options::split(words) {
        Ok(split) => split,
        Err(why) => {
            eprintln!("srun: error: {why}");
            return 2;
        }
    };
    let job = step::Job::from_env(&get);
    let step = match step::plan(&split.given, &job) {
        Ok(step) => step,
        Err(why) => {
            eprintln!("srun: error: {why}");
            return 2;
        }
    };
    for note in &step.notes {
        eprintln!("srun: note: {note}");
    }
    let inherited = match exported(step.export.as_deref(), inherited) {
        Ok(env) => env,
        Err(why) => {
            eprintln!("srun: error: {why}");
            return 2;
        }
    };
    ranks::run(&step, &split.command, inherited)
}

/// The tasks' environment under `--export`: all of srun's (the default), or the names and
/// values it lists; carma's and Slurm's own variables always (the job's placement included).
fn exported(
    export: Option<&str>,
    inherited: BTreeMap<OsString, OsString>,
) -> Result<BTreeMap<OsString, OsString>, String> {
    let Some(text) = export else { return Ok(inherited) };
    let export = crate::spec::export::Export::parse(Some(text)).map_err(|e| format!("--export: {e}"))?;
    if export.all {
        let mut env = inherited;
        env.extend(export.set.into_iter().map(|(k, v)| (k.into(), v.into())));
        return Ok(env);
    }
    let kept = |key: &OsString| {
        let key = key.to_string_lossy();
        key.starts_with("SLURM")
            || key == "PATH"
            || crate::spec::is_reserved_env(&key)
            || export.names.iter().any(|n| *n == key)
    };
    let mut env: BTreeMap<OsString, OsString> = inherited.into_iter().filter(|(k, _)| kept(k)).collect();
    env.extend(export.set.into_iter().map(|(k, v)| (k.into(), v.into())));
    Ok(env)
}

/// [`install`] for the supervisor: Slurm's step launcher for a batch script's `srun` lines;
/// without it (said in the supervisor's log) the script still runs.
pub fn put_on_path(run_dir: &Path, env: &mut BTreeMap<String, String>) {
    if let Err(why) = install(run_dir, env) {
        eprintln!("carma run-task: no srun on the job's PATH: {why}");
    }
}

/// Puts `srun` on the job's `PATH`: creates `bin/` in `run_dir` (root's, or the personal
/// queue's user's, 0755, exclusively: never an existing entry) with a link `srun` to this
/// binary, and puts the folder first on `env`'s `PATH`. An error says why the job runs
/// without it.
pub fn install(run_dir: &Path, env: &mut BTreeMap<String, String>) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    let binary = std::env::current_exe().map_err(|e| format!("cannot name carma's own binary: {e}"))?;
    if binary.to_string_lossy().ends_with(" (deleted)") {
        return Err(format!("carma's binary {} was replaced while it ran", binary.display()));
    }
    let dir = run_dir.join(LAUNCHER_DIR);
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // Whatever the umask: the job's user must pass through it. Only we can reach the name (the
    // run folder is ours alone to write).
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|e| format!("cannot chmod {}: {e}", dir.display()))?;
    let link = dir.join(LAUNCHER_NAME);
    std::os::unix::fs::symlink(&binary, &link)
        .map_err(|e| format!("cannot create {}: {e}", link.display()))?;
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    let path = env.get("PATH").cloned().unwrap_or_default();
    let joined =
        if path.is_empty() { dir.display().to_string() } else { format!("{}:{path}", dir.display()) };
    env.insert("PATH".into(), joined);
    Ok(())
}

/// Whether a process started as `argv0` is Slurm's step launcher (`srun`, by any path).
pub fn is_launcher_name(argv0: &std::ffi::OsStr) -> bool {
    Path::new(argv0).file_name().is_some_and(|name| name == LAUNCHER_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the link is made in a fresh folder, first on PATH, and never through an entry
    /// already there.
    #[test]
    fn the_launcher_is_linked_first_on_the_path() {
        let run_dir = tempfile::tempdir().unwrap();
        let mut env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        install(run_dir.path(), &mut env).unwrap();
        let link = run_dir.path().join("bin/srun");
        assert_eq!(std::fs::read_link(&link).unwrap(), std::env::current_exe().unwrap());
        assert_eq!(env["PATH"], format!("{}:/usr/bin:/bin", run_dir.path().join("bin").display()));
        assert!(install(run_dir.path(), &mut env).unwrap_err().starts_with("cannot create"), "never reused");
        assert!(is_launcher_name("/x/runs/a/1/bin/srun".as_ref()) && !is_launcher_name("carma".as_ref()));
    }

    /// Goal: `--export=NONE` keeps carma's and Slurm's variables (the placement), and a list
    /// keeps what it names.
    #[test]
    fn export_none_keeps_the_placement() {
        let env: BTreeMap<OsString, OsString> =
            [("HOME", "/h"), ("CUDA_VISIBLE_DEVICES", "GPU-1"), ("SLURM_JOB_ID", "x"), ("A", "1")]
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect();
        let none = exported(Some("NONE"), env.clone()).unwrap();
        let keys: Vec<_> = none.keys().map(|k| k.to_string_lossy().into_owned()).collect();
        assert_eq!(keys, ["CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID"]);
        let listed = exported(Some("A,B=2"), env).unwrap();
        assert_eq!(
            listed.get(std::ffi::OsStr::new("B")).map(|v| v.to_string_lossy().into_owned()).as_deref(),
            Some("2")
        );
        assert!(
            listed.contains_key(std::ffi::OsStr::new("A"))
                && !listed.contains_key(std::ffi::OsStr::new("HOME"))
        );
    }
}
