//! The windowed GPU view: raw samples of one GPU reduced to what the
//! scheduler compares.
//!
//! Activities (SM active, SM occupancy, DRAM active) are means over the
//! samples taken in `(now − window, now]` (default window 90 s, as in the
//! paper), ignoring missing and non-finite values; a metric with no value in
//! the window is unknown (`None`). Memory comes from the newest sample, which
//! is less stale than any mean. `sample_age_ms` is the newest sample's age,
//! so the caller can refuse to act on a stale view. Samples dated after `now`
//! count as taken at `now`. The SM basis is that of the newest sample in the
//! window with an SM value, so a reason names the source of what it shows.
//! MIG targets and availability are not windowed: the caller sets them from
//! the newest sample.

use super::{GpuView, SmBasis};

/// The paper's SM-activity window.
pub const WINDOW_MS_DEFAULT: u64 = 90_000;

/// One sample of one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowSample {
    /// GPU UUID; every sample passed to [`window`] names the same GPU.
    pub uuid: String,
    /// NVML index.
    pub index: u32,
    /// When it was taken.
    pub at_ms: u64,
    /// Total memory.
    pub memory_total_mib: u64,
    /// Free memory.
    pub memory_free_mib: u64,
    /// Memory the driver reserves, if known.
    pub memory_reserved_mib: Option<u64>,
    /// SM activity 0..1, if measured.
    pub sm_active: Option<f32>,
    /// What `sm_active` measures.
    pub sm_basis: SmBasis,
    /// SM occupancy 0..1, if measured.
    pub sm_occupancy: Option<f32>,
    /// DRAM activity 0..1, if measured.
    pub dram_active: Option<f32>,
}

/// Reduces one GPU's samples to a [`GpuView`]; `None` when there are none.
pub fn window(samples: &[WindowSample], now_ms: u64, window_ms: u64) -> Option<GpuView> {
    let newest = samples.iter().max_by_key(|s| s.at_ms)?;
    assert!(samples.iter().all(|s| s.uuid == newest.uuid), "window takes the samples of one GPU");
    // In the window when younger than it: age = now − at, saturating.
    let in_window = || samples.iter().filter(move |s| now_ms.saturating_sub(s.at_ms) < window_ms);
    let view = GpuView {
        uuid: newest.uuid.clone(),
        index: newest.index,
        memory_total_mib: newest.memory_total_mib,
        memory_free_mib: newest.memory_free_mib.min(newest.memory_total_mib),
        sm_active: mean(in_window().map(|s| s.sm_active)),
        sm_occupancy: mean(in_window().map(|s| s.sm_occupancy)),
        dram_active: mean(in_window().map(|s| s.dram_active)),
        sample_age_ms: now_ms.saturating_sub(newest.at_ms),
        memory_reserved_mib: newest.memory_reserved_mib.unwrap_or(0).min(newest.memory_total_mib),
        sm_basis: in_window()
            .filter(|s| s.sm_active.is_some_and(f32::is_finite))
            .max_by_key(|s| s.at_ms)
            .map_or(SmBasis::Measured, |s| s.sm_basis),
        mig: None,
        unavailable: None,
    };
    Some(view)
}

/// Mean of the finite values, clamped to 0..1; `None` when there are none.
fn mean(values: impl Iterator<Item = Option<f32>>) -> Option<f32> {
    let (sum, count) = values
        .flatten()
        .filter(|v| v.is_finite())
        .fold((0.0f64, 0u64), |(sum, count), v| (sum + f64::from(v), count + 1));
    if count == 0 {
        return None;
    }
    Some(((sum / count as f64) as f32).clamp(0.0, 1.0))
}
