//! Evidence before privilege: whether the tick's own readings corroborate a job's
//! out-of-memory message.
//!
//! An out-of-memory line in a job's log is the job's word. The recovery queue (ahead of the
//! main queue, and a whole GPU in exclusive mode) is spent on it only when what the tick
//! itself read of the GPU memory near the attempt's end agrees:
//!
//! - **the GPU was near full**: a reading of one of the attempt's GPUs near its end with at
//!   least `evidence-gpu-percent` (95 %) of the GPU's memory in use; or
//! - **the job was near its share**: the attempt's own processes were seen holding at least
//!   `evidence-process-percent` (90 %) of its requirement, and a reading of one of its GPUs
//!   near its end still shows at least that much in use (the peak alone could be long past).
//!
//! "Near the end" is the caller's to gather ([`MemoryAtEnd`]): the readings of the attempt's
//! GPUs taken in the last `evidence-window-ms` (30 s) before its exit, up to the tick that
//! observed the exit. There is no driver signal for a CUDA out-of-memory today: the CUDA
//! allocator fails the allocation inside the process and NVML reports no event (no XID, no
//! counter) for it, so the readings are the only evidence the tick has.
//!
//! Without evidence the message is an ordinary failure: the task fails at its normal place,
//! with a reason that gives the readings ([`judge_oom`]). Property: the verdict is
//! [`OomJudgement::Corroborated`] exactly when one of the two rules above holds, and the
//! reason of an unsupported one names every GPU's figures (`sched::tests::evidence`).

use super::RecoveryConfig;

/// One GPU (or MIG instance) of an attempt, as the tick read it near the attempt's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuAtEnd {
    /// How reasons name it: `GPU0`, `GPU1/mig2`.
    pub name: String,
    /// The most memory in use among the readings near the end, MiB; `None`: no reading.
    pub used_mib_max: Option<u64>,
    /// The GPU's total memory, MiB.
    pub total_mib: u64,
}

/// What the tick saw of an attempt's memory near its end.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryAtEnd {
    /// Each of the attempt's GPUs, in placement order.
    pub gpus: Vec<GpuAtEnd>,
    /// The most memory the attempt's own processes were seen holding on one GPU, MiB.
    pub attempt_peak_mib: Option<u64>,
    /// The memory per GPU its placement assumed, MiB (its share), when it had one.
    pub requirement_mib: Option<u64>,
}

/// Whether an out-of-memory message is corroborated, in words for the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OomJudgement {
    /// The readings agree: the task may enter the recovery queue. The words say which rule.
    Corroborated(String),
    /// The readings do not agree: an ordinary failure. The words are the task's Failed reason.
    Unsupported(String),
}

/// Judges an out-of-memory message against the readings near the attempt's end (see the
/// module docs). Pure: the same readings and thresholds give the same verdict.
pub fn judge_oom(at_end: &MemoryAtEnd, cfg: &RecoveryConfig) -> OomJudgement {
    let gpu_percent = u64::from(cfg.evidence_gpu_percent.clamp(1, 100));
    let full = at_end.gpus.iter().find_map(|gpu| {
        let used = gpu.used_mib_max?;
        (gpu.total_mib > 0 && used.saturating_mul(100) >= gpu.total_mib.saturating_mul(gpu_percent))
            .then(|| format!("{} had {used} of {} MiB used near the end", gpu.name, gpu.total_mib))
    });
    if let Some(words) = full {
        return OomJudgement::Corroborated(words);
    }
    let share = share_threshold_mib(at_end.requirement_mib, cfg);
    if let (Some(threshold), Some(peak)) = (share, at_end.attempt_peak_mib)
        && peak >= threshold
        && let Some(gpu) = at_end.gpus.iter().find(|g| g.used_mib_max.is_some_and(|u| u >= threshold))
    {
        let requirement = at_end.requirement_mib.unwrap_or(0);
        return OomJudgement::Corroborated(format!(
            "the job held {peak} MiB of its {requirement} MiB share, and {} had {} MiB used near the end",
            gpu.name,
            gpu.used_mib_max.unwrap_or(0)
        ));
    }
    OomJudgement::Unsupported(unsupported_reason(at_end, cfg, gpu_percent))
}

/// `evidence-process-percent` of the requirement, rounded up; `None` without a requirement.
fn share_threshold_mib(requirement_mib: Option<u64>, cfg: &RecoveryConfig) -> Option<u64> {
    let requirement = requirement_mib.filter(|&r| r > 0)?;
    let percent = u64::from(cfg.evidence_process_percent.clamp(1, 100));
    Some(requirement.saturating_mul(percent).div_ceil(100))
}

/// "out-of-memory message without evidence: GPU0 had 1200 of 40960 MiB used at the end (95 %
/// of a GPU would be evidence); the job's own peak was 300 of its 8192 MiB share (90 % would
/// be); not retried".
fn unsupported_reason(at_end: &MemoryAtEnd, cfg: &RecoveryConfig, gpu_percent: u64) -> String {
    let gpus: Vec<String> = at_end
        .gpus
        .iter()
        .map(|gpu| match gpu.used_mib_max {
            Some(used) => format!("{} had {used} of {} MiB used at the end", gpu.name, gpu.total_mib),
            None => format!("{} had no reading near the end", gpu.name),
        })
        .collect();
    let gpus = if gpus.is_empty() { "no GPU reading near the end".to_string() } else { gpus.join(", ") };
    let percent = cfg.evidence_process_percent.clamp(1, 100);
    let job = match (at_end.requirement_mib.filter(|&r| r > 0), at_end.attempt_peak_mib) {
        (Some(share), Some(peak)) => {
            format!("the job's own peak was {peak} of its {share} MiB share ({percent} % would be)")
        }
        (Some(share), None) => {
            format!(
                "the job's own memory was never seen, against its {share} MiB share ({percent} % would be)"
            )
        }
        (None, _) => "the job had no memory share to compare with".to_string(),
    };
    format!(
        "out-of-memory message without evidence: {gpus} ({gpu_percent} % of a GPU would be evidence); {job}; \
         not retried"
    )
}
