//! The spec keys carma 0.5 added: the job's host limits (`host_mem`, `cpus`), whether it may
//! be preempted (`requeue`) and the reservation it names. Validated here so `spec.rs` keeps
//! to the older keys. (The interactive mode `carma alloc`/`carma run` set is no spec key:
//! `spec::carma_only`.)

use super::SpecFile;

/// The most CPUs a task may ask for (a machine with more is rare; a larger number is a typo).
pub const CPUS_MAX: i64 = 4096;

/// The longest reservation name.
pub const RESERVATION_NAME_MAX: usize = 64;

/// The validated carma 0.5 keys of one spec.
#[derive(Debug, Default)]
pub struct Extras {
    /// [`super::TaskSpec::host_mem_mib`].
    pub host_mem_mib: Option<u64>,
    /// [`super::TaskSpec::cpus`].
    pub cpus: Option<u32>,
    /// [`super::TaskSpec::requeue`].
    pub requeue: Option<bool>,
    /// [`super::TaskSpec::reservation`].
    pub reservation: Option<String>,
}

/// Checks the carma 0.5 keys of `file`; the error names the key and what to write.
pub fn validate(file: &SpecFile) -> Result<Extras, String> {
    // Read as Slurm reads --mem (every unit a power of 1024, a bare number MiB), so the key
    // and the flag and an #SBATCH line mean the same amount.
    let host_mem_mib = match file.host_mem.as_deref().map(super::sbatch::slurm_memory_mib).transpose() {
        Ok(Some(0)) => {
            return Err(
                "host_mem = 0 would mean all of the machine's memory; leave host_mem out for no limit".into(),
            );
        }
        Ok(mib) => mib,
        Err(e) => return Err(format!("host_mem: {e}")),
    };
    let cpus = file
        .cpus
        .map(|n| match u32::try_from(n) {
            Ok(n) if n >= 1 && i64::from(n) <= CPUS_MAX => Ok(n),
            _ => Err(format!("cpus = {n} is not a CPU count; give a whole number from 1 to {CPUS_MAX}")),
        })
        .transpose()?;
    let reservation = file.reservation.as_deref().map(validate_reservation_name).transpose()?;
    Ok(Extras { host_mem_mib, cpus, requeue: file.requeue, reservation })
}

/// Host memory and CPUs within what this machine has (`machine`: its CPUs and MiB, each
/// `None` where not checked), as Slurm refuses a job its node cannot meet.
pub fn fits_machine(extras: &Extras, machine: (Option<u32>, Option<u64>)) -> Result<(), String> {
    if let (Some(asked), Some(cpus)) = (extras.cpus, machine.0)
        && asked > cpus
    {
        return Err(format!("{asked} CPUs: this machine has {cpus}; ask for at most {cpus} (cpus, -c)"));
    }
    if let (Some(asked), Some(mib)) = (extras.host_mem_mib, machine.1)
        && asked > mib
    {
        return Err(format!(
            "host memory {asked} MiB: this machine has {mib} MiB; ask for at most {mib}M (host_mem, --mem)"
        ));
    }
    Ok(())
}

/// A reservation's name: 1 to [`RESERVATION_NAME_MAX`] letters, digits, `-`, `_` or `.`, not
/// starting with `-` (so it never reads as a flag).
pub fn validate_reservation_name(name: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= RESERVATION_NAME_MAX
        && !name.starts_with('-')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(name.to_string())
    } else {
        Err(format!(
            "reservation {:?} is not a reservation name; use up to {RESERVATION_NAME_MAX} letters, digits, '-', '_' or '.'",
            crate::text::escape(name)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(toml: &str) -> SpecFile {
        toml::from_str(&format!("command = [\"true\"]\n{toml}")).expect("spec file")
    }

    #[test]
    fn the_extras_are_read_and_checked() {
        let extras = validate(&file("host_mem = \"16g\"\ncpus = 8\nrequeue = true\nreservation = \"paper\""))
            .expect("valid");
        assert_eq!(extras.host_mem_mib, Some(16_384));
        assert_eq!(extras.cpus, Some(8));
        assert_eq!(extras.requeue, Some(true));
        assert_eq!(extras.reservation.as_deref(), Some("paper"));
        assert_eq!(
            validate(&file("cpus = 0")).unwrap_err(),
            "cpus = 0 is not a CPU count; give a whole number from 1 to 4096"
        );
        assert!(validate(&file("reservation = \"-x\"")).unwrap_err().starts_with("reservation \"-x\""));
        assert!(validate(&file("host_mem = \"lots\"")).unwrap_err().starts_with("host_mem: memory"));
        // As Slurm's --mem: GB is a power of 1024 too.
        assert_eq!(validate(&file("host_mem = \"16GB\"")).unwrap().host_mem_mib, Some(16_384));
    }

    /// Goal: more CPUs or host memory than the machine has is refused with what it has; what
    /// fits, or an unchecked machine, passes.
    #[test]
    fn host_limits_beyond_the_machine_are_refused() {
        let asked = validate(&file("host_mem = \"384G\"\ncpus = 40")).unwrap();
        assert_eq!(
            fits_machine(&asked, (Some(2), Some(23_000))).unwrap_err(),
            "40 CPUs: this machine has 2; ask for at most 2 (cpus, -c)"
        );
        let memory = validate(&file("host_mem = \"384G\"")).unwrap();
        assert_eq!(
            fits_machine(&memory, (Some(2), Some(23_000))).unwrap_err(),
            "host memory 393216 MiB: this machine has 23000 MiB; ask for at most 23000M (host_mem, --mem)"
        );
        assert!(
            fits_machine(&asked, (None, None)).is_ok()
                && fits_machine(&validate(&file("cpus = 2")).unwrap(), (Some(2), Some(1))).is_ok()
        );
    }
}
