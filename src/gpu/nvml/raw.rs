//! The compute-process list through NVML's C function, where nvml-wrapper's answer would be
//! silently wrong.
//!
//! nvml.h specifies that `nvmlDeviceGetComputeRunningProcesses_v3` with a null buffer answers
//! `NVML_ERROR_INSUFFICIENT_SIZE` and the count when processes exist. nvml-wrapper 0.13
//! trusts that and reads a `SUCCESS` as "no processes". NVIDIA's own mock library answers the
//! size query with `SUCCESS` and the count, so through nvml-wrapper a GPU with processes would
//! read as empty. This call takes the count from either answer, reads the list with a buffer,
//! and says in a note when the library broke the rule, so carma never records an empty list
//! it did not read.
//!
//! The unsafe part is confined here: the buffer is allocated with the count the library gave
//! (plus headroom) and zeroed, the library is told its length, and only the entries the
//! library says it filled are read.

use nvml_wrapper::Device;
use nvml_wrapper::Nvml;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper_sys::bindings::{
    nvmlProcessInfo_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE,
    nvmlReturn_enum_NVML_SUCCESS as SUCCESS,
};

/// Room for processes started between the count and the list.
const HEADROOM: u32 = 8;

/// The compute processes of `device`, and a note when the library answered the size query
/// against nvml.h.
pub(super) fn compute_processes(
    nvml: &Nvml,
    device: &Device<'_>,
) -> Result<(Vec<ProcessInfo>, Option<String>), NvmlError> {
    let call = nvml_sym(nvml.lib().nvmlDeviceGetComputeRunningProcesses_v3.as_ref())?;
    // SAFETY: `handle` is a live device handle of this `Nvml`; the size query passes a valid
    // count pointer and a null buffer, which nvml.h allows.
    let handle = unsafe { device.handle() };
    let mut count: u32 = 0;
    let code = unsafe { call(handle, &mut count, std::ptr::null_mut()) };
    let note = match code {
        INSUFFICIENT_SIZE => None,
        SUCCESS if count == 0 => return Ok((Vec::new(), None)),
        SUCCESS => Some(format!(
            "processes: NVML answered the size query with SUCCESS and {count} (nvml.h: INSUFFICIENT_SIZE); read the list anyway"
        )),
        other => return Err(nvml_try(other).err().unwrap_or(NvmlError::Unknown)),
    };
    let mut capacity = count.saturating_add(HEADROOM);
    // SAFETY: nvmlProcessInfo_t is plain old data; all-zero is a valid value.
    let mut buffer: Vec<nvmlProcessInfo_t> = vec![unsafe { std::mem::zeroed() }; capacity as usize];
    // SAFETY: `buffer` holds `capacity` entries and NVML is told so; it writes at most that
    // many and sets `capacity` to the number written.
    nvml_try(unsafe { call(handle, &mut capacity, buffer.as_mut_ptr()) })?;
    buffer.truncate((capacity as usize).min(buffer.len()));
    Ok((buffer.into_iter().map(ProcessInfo::from).collect(), note))
}
