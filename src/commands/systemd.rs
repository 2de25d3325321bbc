//! `carma systemd`: print the unit files, or install them with `--install`.

use std::io::Write;

use crate::cli::SystemdArgs;
use crate::home::Home;
use crate::systemd;

pub(super) fn run(home: &Home, args: SystemdArgs) -> anyhow::Result<()> {
    let exe = match args.exe {
        Some(exe) => exe,
        None => std::env::current_exe()?,
    };
    let root = std::path::absolute(home.root())?;
    let units = systemd::units(&exe, &root);
    let mut out = std::io::stdout().lock();
    let Some(dir) = args.install.then_some(args.unit_dir) else {
        for unit in &units {
            writeln!(out, "# {}\n{}", unit.name, unit.text)?;
        }
        return Ok(());
    };
    for unit in &units {
        let path = dir.join(unit.name);
        crate::exec::write_atomic(&path, unit.text.as_bytes(), 0o644)?;
        writeln!(out, "wrote {}", path.display())?;
    }
    std::fs::create_dir_all(&args.man_dir)
        .map_err(|e| crate::Error::io(format!("cannot create {}", args.man_dir.display()), e))?;
    let mut page = Vec::new();
    super::man_page(&mut page)?;
    let man = args.man_dir.join("carma.1");
    crate::exec::write_atomic(&man, &page, 0o644)?;
    writeln!(out, "wrote {} (man carma)", man.display())?;
    writeln!(out, "next: systemctl daemon-reload && systemctl enable --now carma-tick.timer")?;
    writeln!(
        out,
        "      (and `systemctl enable --now carma-mps` for sharing = \"mps\"); logs: journalctl -u carma-tick"
    )?;
    Ok(())
}
