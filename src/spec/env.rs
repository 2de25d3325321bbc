//! The environment a submission carries: which names are valid, which carma keeps for itself,
//! and the bound on its size.

use std::collections::BTreeMap;

use super::ENV_BYTES_MAX;

/// The names of `env`, once every name, value and the whole size are checked.
pub(super) fn validate_env(env: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    let mut bytes = 0;
    for (key, value) in env {
        if !is_env_name(key) {
            return Err(format!("env name {key:?} is invalid; use letters, digits and _ (not first)"));
        }
        if is_reserved_env(key) {
            return Err(format!("env {key} is set by carma itself; remove it from the spec"));
        }
        if value.contains('\0') {
            return Err(format!("env {key} contains a NUL byte; remove it"));
        }
        bytes += key.len() + value.len() + 2;
    }
    if bytes > ENV_BYTES_MAX {
        return Err(format!(
            "the environment is {} KiB, more than {} KiB; export fewer variables (--export=NAME,...)",
            bytes.div_ceil(1024),
            ENV_BYTES_MAX / 1024
        ));
    }
    Ok(env.keys().cloned().collect())
}

/// A POSIX-portable environment variable name: letters, digits and `_`, not starting with a
/// digit.
pub fn is_env_name(key: &str) -> bool {
    !key.is_empty()
        && !key.starts_with(|c: char| c.is_ascii_digit())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Variables carma sets for every job, which a submission may not carry.
pub fn is_reserved_env(key: &str) -> bool {
    key.starts_with("CARMA_") || key == "CUDA_VISIBLE_DEVICES" || key == "CUDA_DEVICE_ORDER"
}
