//! The files an administrator installs (pure text): the three hook scripts, `job_submit.lua`
//! with the cluster's constants filled in, and the slurm.conf lines that name them.
//!
//! Slurm runs a hook as a bare path without arguments, so each hook is a two-line `sh`
//! script that `exec`s carma with its settings; `%n` in the state directory stands for the
//! node's name (`$SLURMD_NODENAME`), as in Slurm's own paths, for nodes whose state
//! directories share one file system.

use super::comment::safe_path;
use super::shards::ShardRule;

/// `job_submit.lua` as shipped; `@NAME@` marks the values [`hook_files`] fills in.
pub const JOB_SUBMIT_LUA: &str = include_str!("job_submit.lua");

/// Where the hooks' settings come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookSetup {
    /// The carma binary the hooks run (absolute).
    pub exe: String,
    /// The node's state directory (`--home`), possibly with `%n`; `None`: carma's default.
    pub home: Option<String>,
    /// The cluster's shard rule, embedded in the scripts and `job_submit.lua`.
    pub rule: ShardRule,
    /// Shards one GPU holds: requests above this are refused at submission.
    pub shards_per_gpu: u32,
    /// The directory the scripts are installed in.
    pub dir: String,
}

/// One file to install.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookFile {
    /// The file name under [`HookSetup::dir`] (`carma-prolog`, `job_submit.lua`, …).
    pub name: &'static str,
    /// The file's content.
    pub text: String,
    /// The file's permission bits (0o755 for scripts).
    pub mode: u32,
}

/// The Prolog, Epilog and TaskProlog scripts and `job_submit.lua`. The carma path is
/// embedded in shell and Lua text, so it must be a plain absolute path.
pub fn hook_files(setup: &HookSetup) -> Result<Vec<HookFile>, String> {
    safe_path(&setup.exe).map_err(|_| {
        format!(
            "carma path {:?} must be absolute and use only letters, digits, '.', '_', '-' and '/'",
            setup.exe
        )
    })?;
    let rule = format!("--shard-mib {} --margin-mib {}", setup.rule.shard_mib, setup.rule.margin_mib);
    let home = match &setup.home {
        Some(home) => format!(" --home {}", shell_word_with_node(home)),
        None => String::new(),
    };
    let exe = quote(&setup.exe);
    let script = |hook: &str, what: &str, carma_args: String| {
        format!(
            "#!/bin/sh\n\
             # carma's Slurm {what}, written by `carma slurm hooks`; see slurm.conf {what}=.\n\
             # carma logs its errors in the state directory's slurm-hooks.log and exits 0: a failing\n\
             # Prolog or Epilog would drain the node.\n\
             [ -x {exe} ] || exit 0\n\
             exec {exe}{carma_args} slurm {hook} {rule}\n"
        )
    };
    let lua = JOB_SUBMIT_LUA
        .replace("@SHARD_MIB@", &setup.rule.shard_mib.to_string())
        .replace("@MARGIN_MIB@", &setup.rule.margin_mib.to_string())
        .replace("@SHARDS_PER_GPU@", &setup.shards_per_gpu.to_string())
        .replace("@CARMA@", &setup.exe);
    Ok(vec![
        HookFile {
            name: "carma-prolog",
            text: script("prolog", "Prolog", format!("{home} --lock-timeout 5s")),
            mode: 0o755,
        },
        HookFile {
            name: "carma-epilog",
            text: script("epilog", "Epilog", format!("{home} --lock-timeout 5s")),
            mode: 0o755,
        },
        HookFile {
            name: "carma-task-prolog",
            text: script("task-prolog", "TaskProlog", String::new()),
            mode: 0o755,
        },
        HookFile { name: "job_submit.lua", text: lua, mode: 0o644 },
    ])
}

/// The slurm.conf lines that enable the hooks installed in `setup.dir`.
pub fn slurm_conf_lines(setup: &HookSetup) -> Vec<String> {
    let dir = setup.dir.trim_end_matches('/');
    vec![
        "# carma on Slurm: in slurm.conf on every node and the controller".into(),
        "GresTypes=gpu,shard".into(),
        "JobRequeue=1".into(),
        format!("Prolog={dir}/carma-prolog"),
        format!("Epilog={dir}/carma-epilog"),
        format!("TaskProlog={dir}/carma-task-prolog"),
        "# job_submit.lua must sit next to slurm.conf on the controller".into(),
        "JobSubmitPlugins=lua".into(),
    ]
}

/// `text` as one single-quoted shell word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A path as a shell word, each `%n` replaced by `"$SLURMD_NODENAME"`.
fn shell_word_with_node(path: &str) -> String {
    path.split("%n").map(quote).collect::<Vec<_>>().join("\"$SLURMD_NODENAME\"")
}

#[cfg(test)]
mod tests {
    //! Goal: the scripts run carma with the settings given, the Lua file has no placeholder
    //! left, and nothing unsafe reaches the generated shell or Lua text.
    use super::*;

    fn setup() -> HookSetup {
        HookSetup {
            exe: "/usr/local/bin/carma".into(),
            home: Some("/srv/carma/%n".into()),
            rule: ShardRule { shard_mib: 512, margin_mib: 1024 },
            shards_per_gpu: 80,
            dir: "/etc/slurm/".into(),
        }
    }

    #[test]
    fn scripts_exec_carma_with_the_settings() {
        let files = hook_files(&setup()).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.name).collect();
        assert_eq!(names, ["carma-prolog", "carma-epilog", "carma-task-prolog", "job_submit.lua"]);
        let last = |i: usize| files[i].text.lines().last().unwrap().to_string();
        assert_eq!(
            last(0),
            "exec '/usr/local/bin/carma' --home '/srv/carma/'\"$SLURMD_NODENAME\"'' --lock-timeout 5s slurm prolog --shard-mib 512 --margin-mib 1024"
        );
        assert_eq!(
            last(2),
            "exec '/usr/local/bin/carma' slurm task-prolog --shard-mib 512 --margin-mib 1024"
        );
        assert!(files[0].text.starts_with("#!/bin/sh\n"));
        let lua = &files[3].text;
        assert!(!lua.contains('@'), "a placeholder is left:\n{lua}");
        assert!(lua.contains("local SHARD_MIB = 512\n") && lua.contains("local SHARDS_PER_GPU = 80\n"));
        assert!(lua.contains("local CARMA = \"/usr/local/bin/carma\"\n"));
        assert_eq!(slurm_conf_lines(&setup())[3], "Prolog=/etc/slurm/carma-prolog");
    }

    #[test]
    fn an_unsafe_carma_path_is_refused() {
        let bad = HookSetup { exe: "/opt/my carma/carma\"; os.execute('x')".into(), ..setup() };
        assert!(hook_files(&bad).unwrap_err().starts_with("carma path"));
        let relative = HookSetup { exe: "carma".into(), ..setup() };
        assert!(hook_files(&relative).is_err());
    }
}
