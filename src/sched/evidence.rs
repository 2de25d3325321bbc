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
//! counter) for it, so the readings are the only evidence carma has.
//!
//! Two readers give them, and both count alike: the tick (a reading every tick, 5 s apart)
//! and the attempt's own root supervisor ([`SupervisorAtEnd`]: a reading every
//! `supervisor-sample-ms`, 500 ms by default, of its GPUs and of what the attempt's own
//! processes hold, kept in its root-owned exit record). A real out-of-memory comes within
//! seconds of a job's start, between two ticks, and its memory is gone with the process; the
//! supervisor's last readings before the exit still hold it. Each rule below takes, per GPU,
//! the most memory in use either reader saw near the end, and as the job's peak the larger of
//! the two; the words say whose reading it was. Neither reader is believed differently.
//!
//! Without evidence the message is an ordinary failure: the task fails at its normal place,
//! with a reason that gives the readings ([`judge_oom`]). Property: the verdict is
//! [`OomJudgement::Corroborated`] exactly when one of the two rules above holds over both
//! readers' readings, and the reason of an unsupported one names every GPU's figures
//! (`sched::tests::evidence`).

use super::RecoveryConfig;

/// One GPU (or MIG instance) of an attempt, as the tick and the attempt's supervisor read it
/// near the attempt's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuAtEnd {
    /// How reasons name it: `GPU0`, `GPU1/mig2`.
    pub name: String,
    /// The most memory in use among the tick's readings near the end, MiB; `None`: no reading.
    pub used_mib_max: Option<u64>,
    /// The GPU's total memory, MiB.
    pub total_mib: u64,
    /// The most memory in use among the supervisor's readings near the end, MiB; `None`: no
    /// such reading.
    pub supervisor_used_mib_max: Option<u64>,
}

/// What the attempt's own supervisor read of its memory, from the exit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorAtEnd {
    /// The most memory the attempt's own processes held on one of its GPUs by its readings,
    /// MiB; `None`: never seen holding any.
    pub peak_mib: Option<u64>,
    /// Its cadence, ms.
    pub interval_ms: u64,
    /// How many readings it took.
    pub count: u64,
    /// How long before the exit its last reading was, ms; `None`: it took none.
    pub last_before_exit_ms: Option<u64>,
}

/// What the tick and the attempt's supervisor saw of an attempt's memory near its end.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryAtEnd {
    /// Each of the attempt's GPUs, in placement order.
    pub gpus: Vec<GpuAtEnd>,
    /// The most memory the attempt's own processes were seen holding on one GPU by the tick,
    /// MiB.
    pub attempt_peak_mib: Option<u64>,
    /// The memory per GPU its placement assumed, MiB (its share), when it had one.
    pub requirement_mib: Option<u64>,
    /// The supervisor's own readings; `None` when it took none (no GPU source, readings off, a
    /// Slurm job, an exit record of carma before them).
    pub supervisor: Option<SupervisorAtEnd>,
}

impl MemoryAtEnd {
    /// The job's peak by either reader.
    pub fn peak_mib(&self) -> Option<u64> {
        self.attempt_peak_mib.max(self.supervisor.as_ref().and_then(|s| s.peak_mib))
    }
}

impl GpuAtEnd {
    /// The most memory in use either reader saw near the end.
    fn used_mib(&self) -> Option<u64> {
        self.used_mib_max.max(self.supervisor_used_mib_max)
    }

    /// `used near the end`, or, when only the supervisor's reading reaches `mib`, whose it was.
    fn when(&self, mib: u64) -> &'static str {
        if self.used_mib_max.is_some_and(|used| used >= mib) {
            "near the end"
        } else {
            "in its supervisor's readings before the exit"
        }
    }
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
        let used = gpu.used_mib()?;
        (gpu.total_mib > 0 && used.saturating_mul(100) >= gpu.total_mib.saturating_mul(gpu_percent))
            .then(|| format!("{} had {used} of {} MiB used {}", gpu.name, gpu.total_mib, gpu.when(used)))
    });
    if let Some(words) = full {
        return OomJudgement::Corroborated(words);
    }
    let share = share_threshold_mib(at_end.requirement_mib, cfg);
    if let (Some(threshold), Some(peak)) = (share, at_end.peak_mib())
        && peak >= threshold
        && let Some(gpu) = at_end.gpus.iter().find(|g| g.used_mib().is_some_and(|u| u >= threshold))
    {
        let requirement = at_end.requirement_mib.unwrap_or(0);
        let used = gpu.used_mib().unwrap_or(0);
        return OomJudgement::Corroborated(format!(
            "the job held {peak} MiB of its {requirement} MiB share, and {} had {used} MiB used {}",
            gpu.name,
            gpu.when(threshold)
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
/// be); its supervisor read its GPUs 4 times, every 500 ms, the last 0.3 s before the exit;
/// not retried".
fn unsupported_reason(at_end: &MemoryAtEnd, cfg: &RecoveryConfig, gpu_percent: u64) -> String {
    let gpus: Vec<String> = at_end
        .gpus
        .iter()
        .map(|gpu| match gpu.used_mib() {
            Some(used) => format!("{} had {used} of {} MiB used at the end", gpu.name, gpu.total_mib),
            None => format!("{} had no reading near the end", gpu.name),
        })
        .collect();
    let gpus = if gpus.is_empty() { "no GPU reading near the end".to_string() } else { gpus.join(", ") };
    let percent = cfg.evidence_process_percent.clamp(1, 100);
    let job = match (at_end.requirement_mib.filter(|&r| r > 0), at_end.peak_mib()) {
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
    let supervisor = match &at_end.supervisor {
        None => String::new(),
        Some(SupervisorAtEnd { last_before_exit_ms: None, .. }) => {
            "; its supervisor took no reading of its GPUs".to_string()
        }
        Some(SupervisorAtEnd { interval_ms, count, last_before_exit_ms: Some(before), .. }) => format!(
            "; its supervisor read its GPUs {count} time(s), every {interval_ms} ms, the last {:.1} s before the exit",
            *before as f64 / 1000.0
        ),
    };
    format!(
        "out-of-memory message without evidence: {gpus} ({gpu_percent} % of a GPU would be evidence); {job}\
         {supervisor}; not retried"
    )
}
