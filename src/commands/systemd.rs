//! `carma systemd`: print the unit files, or install them with `--install`: root's into the
//! machine's manager (`/etc/systemd/system`), anyone else's as user units for their personal
//! queue (`~/.config/systemd/user`, `systemctl --user`).
//!
//! The units run the binary that printed them (or `--exe`). A binary in a cargo build folder
//! goes with the next `cargo clean`, and one another user can change would run as root every
//! five seconds, so `--install` refuses both without `--exe` or `--force`, and printing them
//! says so on stderr.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::cli::SystemdArgs;
use crate::error::Error;
use crate::home::{Home, is_root};
use crate::systemd::{self, Manager};

pub(super) fn run(home: &Home, args: SystemdArgs) -> anyhow::Result<()> {
    let manager = if is_root() || args.system { Manager::System } else { Manager::User };
    let explicit = args.exe.is_some();
    let exe = match args.exe {
        Some(exe) if exe.is_absolute() => exe,
        Some(exe) => {
            return Err(Error::BadInput(format!(
                "--exe {}: the units need an absolute path; give e.g. --exe /usr/local/bin/carma",
                exe.display()
            ))
            .into());
        }
        None => std::env::current_exe()?,
    };
    let problem = binary_problem(&exe, manager, explicit);
    let root = std::path::absolute(home.root())?;
    let units = systemd::units_for(manager, &exe, &root);
    let mut out = std::io::stdout().lock();
    if !args.install {
        if let Some(problem) = &problem {
            eprintln!("carma systemd: note: these units run {}, which {problem}", exe.display());
        }
        for unit in &units {
            writeln!(out, "# {}\n{}", unit.name, unit.text)?;
        }
        return Ok(());
    }
    if let Some(problem) = problem.filter(|_| !args.force) {
        return Err(Error::BadInput(format!(
            "refusing to install units that run {}: it {problem}; install carma first (the Debian package, or `cargo install --path . --root /usr/local`) and run that binary's `carma systemd --install`, or name the binary with --exe PATH (--force installs these anyway)",
            exe.display()
        ))
        .into());
    }
    let unit_dir = args.unit_dir.unwrap_or_else(|| default_unit_dir(manager));
    let man_dir = args.man_dir.unwrap_or_else(|| default_man_dir(manager));
    for dir in [&unit_dir, &man_dir] {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    for unit in &units {
        let path = unit_dir.join(unit.name);
        crate::exec::write_atomic(&path, unit.text.as_bytes(), 0o644)?;
        writeln!(out, "wrote {}", path.display())?;
    }
    let mut page = Vec::new();
    super::man_page(&mut page)?;
    let man = man_dir.join("carma.1");
    crate::exec::write_atomic(&man, &page, 0o644)?;
    writeln!(out, "wrote {} (man carma)", man.display())?;
    next_steps(&mut out, manager)
}

/// What to run after `--install`.
fn next_steps(out: &mut impl Write, manager: Manager) -> anyhow::Result<()> {
    match manager {
        Manager::System => {
            writeln!(out, "next: systemctl daemon-reload && systemctl enable --now carma-tick.timer")?;
            writeln!(
                out,
                "      (and `systemctl enable --now carma-mps` for sharing = \"mps\"); logs: journalctl -u carma-tick"
            )?;
        }
        Manager::User => {
            writeln!(
                out,
                "next: systemctl --user daemon-reload && systemctl --user enable --now carma-tick.timer"
            )?;
            writeln!(
                out,
                "      (`loginctl enable-linger` keeps it ticking while you are logged out; without systemd: carma tick --every 5s)"
            )?;
        }
    }
    Ok(())
}

/// Why `exe` should not be what the units run, if it should not: a cargo build folder's
/// binary (unless named with `--exe`), or, for root's units, one that is not root's alone.
fn binary_problem(exe: &Path, manager: Manager, explicit: bool) -> Option<String> {
    if !explicit && in_build_folder(exe) {
        return Some("is in a cargo build folder, which `cargo clean` or the next build empties".into());
    }
    if manager == Manager::User {
        return None;
    }
    // Only an existing file can be judged; `--exe` may name where a package will put carma.
    let meta = std::fs::metadata(exe).ok()?;
    if meta.uid() != 0 {
        return Some(format!(
            "is owned by uid {}, who could change what root runs every 5 s; install a root-owned copy",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "is writable by others (mode {:o}), who could change what root runs every 5 s; chmod go-w it",
            meta.mode() & 0o7777
        ));
    }
    None
}

/// Whether `exe` lies in a cargo target folder (`…/target/debug/carma`, `…/target/release/…`,
/// or a `CARGO_TARGET_DIR` holding `debug/` or `release/` with a `.fingerprint`).
fn in_build_folder(exe: &Path) -> bool {
    let Some(profile_dir) = exe.parent() else { return false };
    let profile = profile_dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if exe.components().any(|c| c.as_os_str() == "target") && matches!(profile, "debug" | "release") {
        return true;
    }
    profile_dir.join(".fingerprint").is_dir()
}

/// `/etc/systemd/system` for the machine; `$XDG_CONFIG_HOME/systemd/user` (else
/// `~/.config/systemd/user`) for a user.
fn default_unit_dir(manager: Manager) -> PathBuf {
    match manager {
        Manager::System => PathBuf::from("/etc/systemd/system"),
        Manager::User => xdg_dir("XDG_CONFIG_HOME", ".config").join("systemd/user"),
    }
}

/// `/usr/local/share/man/man1` for the machine; `$XDG_DATA_HOME/man/man1` (else
/// `~/.local/share/man/man1`, which `man` searches) for a user.
fn default_man_dir(manager: Manager) -> PathBuf {
    match manager {
        Manager::System => PathBuf::from("/usr/local/share/man/man1"),
        Manager::User => xdg_dir("XDG_DATA_HOME", ".local/share").join("man/man1"),
    }
}

fn xdg_dir(variable: &str, under_home: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(variable).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(under_home)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a build folder's binary is named as such, wherever the target directory is.
    #[test]
    fn build_folders_are_recognised() {
        assert!(in_build_folder(Path::new("/src/carma/target/debug/carma")));
        assert!(in_build_folder(Path::new("/src/carma/target/release/carma")));
        assert!(!in_build_folder(Path::new("/usr/local/bin/carma")));
        assert!(!in_build_folder(Path::new("/opt/target/carma")));
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("debug/.fingerprint")).unwrap();
        assert!(in_build_folder(&dir.path().join("debug/carma")), "a CARGO_TARGET_DIR");
        assert!(binary_problem(Path::new("/x/target/debug/carma"), Manager::User, false).is_some());
        assert_eq!(binary_problem(Path::new("/x/target/debug/carma"), Manager::User, true), None);
    }
}
