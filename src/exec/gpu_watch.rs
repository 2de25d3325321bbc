//! The supervisor's own readings of its attempt's GPU memory: evidence where an out-of-memory
//! happens.
//!
//! A real CUDA out-of-memory comes in the first seconds of training, well inside one 5 s
//! tick, and the process's memory is gone the moment it dies. The tick's readings then miss
//! it, and an honest job's out-of-memory cannot be told from a printed line. So the root
//! supervisor samples, on a thread of its own, from the job's spawn to its exit:
//!
//! - **what:** each of its attempt's GPUs (or MIG instances): the memory in use and the total,
//!   and how much of it the attempt's own processes hold. A process counts as the attempt's
//!   by the attempt's marks ([`Selector`]: its cgroup, the supervisor's session and process
//!   tree), exactly as [`super::contain`] ends them, never by anything the job says;
//! - **how:** through the GPU source the tick uses (`nvml`, `fake:FILE`), opened once per
//!   supervisor by the binary's [`OpenSource`] (the `gpu` module sits above `exec`), so the
//!   NVML handle is initialised once and every reading is memory only (no utilisation, power
//!   or GPM);
//! - **how often:** the plan's `interval_ms` (`[enforce] supervisor-sample-ms`, 500 ms by
//!   default); 0 or no plan entry: no readings.
//!
//! It keeps the attempt's peak and its last [`LAST_READINGS_MAX`] readings, which the
//! supervisor writes into its root-owned `exit.json` ([`GpuReadings`]). The job cannot write
//! that file (the run folder is root's), so on a system queue these readings are carma's own;
//! on a personal queue the supervisor, the file and the job are the same user's, as is
//! everything else there. `sched::judge_oom` weighs them with the tick's readings: an
//! out-of-memory between two ticks that the supervisor saw is corroborated.
//!
//! What a reading costs is bounded whatever the job does: the readings kept are a fixed ring,
//! one entry per GPU of the plan (at most [`super::plan::GPU_COUNT_MAX`]); a process on a GPU
//! is judged once per pid and start time, from its own line of ancestors in `/proc`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::contain::Selector;
pub use super::readings::{
    GpuReading, GpuReadings, INTERVAL_MS_DEFAULT, INTERVAL_MS_MIN, LAST_READINGS_MAX, MemoryNow,
    MemorySource, OpenSource, Reading, WatchPlan,
};

/// Processes judged per reading at most (NVML lists at most this many per GPU anyway).
const PROCESSES_JUDGED_MAX: usize = 1024;

/// A running sampler; [`Watch::finish`] stops it and gives its readings.
pub(crate) struct Watch {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: JoinHandle<GpuReadings>,
}

impl Watch {
    /// Starts sampling `gpus` for the attempt `selector` marks, when the plan asks for it and
    /// the binary gave a source; `None` otherwise (the supervisor then writes no readings).
    pub(crate) fn start(
        plan: Option<&WatchPlan>,
        open: Option<OpenSource>,
        gpus: &[String],
        selector: Selector,
    ) -> Option<Watch> {
        let (plan, open) = (plan?.clone(), open?);
        if gpus.is_empty() || plan.interval_ms == 0 {
            return None;
        }
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let gpus = gpus.to_vec();
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("carma-gpu-watch".into())
            .spawn(move || sample(&plan, open, &gpus, &selector, &stopped))
            .map_err(|err| eprintln!("carma run-task: no GPU memory readings: cannot start a thread: {err}"))
            .ok()?;
        Some(Watch { stop, thread })
    }

    /// Stops the sampler (at once: it takes no reading after the job's exit) and returns what
    /// it read.
    pub(crate) fn finish(self) -> GpuReadings {
        let (flag, wake) = &*self.stop;
        *flag.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        wake.notify_all();
        self.thread.join().unwrap_or_else(|_| GpuReadings {
            interval_ms: 0,
            count: 0,
            peak_mib: None,
            last: Vec::new(),
            error: Some("the sampler thread panicked".into()),
        })
    }
}

/// The sampler's loop: open the source once, then read every `interval_ms` until stopped.
fn sample(
    plan: &WatchPlan,
    open: OpenSource,
    gpus: &[String],
    selector: &Selector,
    stop: &(Mutex<bool>, Condvar),
) -> GpuReadings {
    let interval_ms = plan.interval_ms.max(INTERVAL_MS_MIN);
    let mut kept = Kept::new(interval_ms);
    let mut source = match open(&plan.source) {
        Ok(source) => source,
        Err(why) => {
            kept.error = Some(format!("cannot open {}: {why}", plan.source));
            return kept.into_readings();
        }
    };
    let mut judged = Attribution::default();
    let (flag, wake) = stop;
    let mut stopped = flag.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    while !*stopped {
        match source.read() {
            Ok(all) => kept.push(reading_of(&all, gpus, selector, &mut judged)),
            Err(why) => kept.error = Some(why),
        }
        let wait = wake.wait_timeout(stopped, Duration::from_millis(interval_ms));
        stopped = wait.unwrap_or_else(std::sync::PoisonError::into_inner).0;
    }
    kept.into_readings()
}

/// One reading of the attempt's GPUs out of everything the source listed.
fn reading_of(all: &[MemoryNow], gpus: &[String], selector: &Selector, judged: &mut Attribution) -> Reading {
    let gpus = gpus
        .iter()
        .filter_map(|uuid| all.iter().find(|gpu| &gpu.uuid == uuid))
        .map(|gpu| {
            let attempt_mib = gpu
                .processes
                .iter()
                .take(PROCESSES_JUDGED_MAX)
                .filter(|(pid, _)| judged.is_attempts(*pid, selector))
                .map(|(_, mib)| *mib)
                .fold(0u64, u64::saturating_add);
            GpuReading {
                uuid: gpu.uuid.clone(),
                used_mib: gpu.used_mib,
                total_mib: gpu.total_mib,
                attempt_mib,
            }
        })
        .collect();
    Reading { time_ms: now_ms(), gpus }
}

/// Which GPU processes are the attempt's, judged once per pid and start time (a pid the
/// kernel hands out again is judged again).
#[derive(Default)]
struct Attribution {
    by_pid: BTreeMap<u32, (u64, bool)>,
}

impl Attribution {
    fn is_attempts(&mut self, pid: u32, selector: &Selector) -> bool {
        let Some(stat) = super::liveness::read_proc_stat(pid) else { return false };
        if let Some(&(start, ours)) = self.by_pid.get(&pid)
            && start == stat.start_time_ticks
        {
            return ours;
        }
        let Some((entry, ours)) = selector.judge(pid) else { return false };
        if self.by_pid.len() >= PROCESSES_JUDGED_MAX {
            self.by_pid.clear();
        }
        self.by_pid.insert(pid, (entry.start_time_ticks, ours));
        ours
    }
}

/// The peak and the ring of latest readings.
struct Kept {
    interval_ms: u64,
    count: u64,
    peak_mib: Option<u64>,
    last: VecDeque<Reading>,
    error: Option<String>,
}

impl Kept {
    fn new(interval_ms: u64) -> Kept {
        Kept { interval_ms, count: 0, peak_mib: None, last: VecDeque::new(), error: None }
    }

    fn push(&mut self, reading: Reading) {
        self.count += 1;
        let held = reading.gpus.iter().map(|gpu| gpu.attempt_mib).max().filter(|&mib| mib > 0);
        self.peak_mib = self.peak_mib.max(held);
        if self.last.len() == LAST_READINGS_MAX {
            self.last.pop_front();
        }
        self.last.push_back(reading);
    }

    fn into_readings(self) -> GpuReadings {
        GpuReadings {
            interval_ms: self.interval_ms,
            count: self.count,
            peak_mib: self.peak_mib,
            last: self.last.into(),
            error: self.error,
        }
    }
}

/// Wall-clock ms since the Unix epoch (0 before 1970), as the exit record's times.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    //! Goal: the sampler reads through the source it was given, counts only the attempt's own
    //! processes, keeps the peak and a bounded ring of the latest readings, stops at once, and
    //! says why when its source cannot be opened. Method: a scripted source on this process's
    //! own children (a `sleep` it spawned is its; pid 1 is not).
    use super::*;

    struct Scripted {
        child: u32,
        step: u64,
    }

    impl MemorySource for Scripted {
        fn read(&mut self) -> Result<Vec<MemoryNow>, String> {
            self.step += 1;
            let mine = (self.child, 100 * self.step.min(30));
            Ok(vec![
                MemoryNow {
                    uuid: "GPU-a".into(),
                    used_mib: 5000,
                    total_mib: 40960,
                    processes: vec![mine, (1, 4000)],
                },
                MemoryNow { uuid: "GPU-b".into(), used_mib: 7, total_mib: 40960, processes: vec![(1, 7)] },
            ])
        }
    }

    static CHILD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

    fn scripted(_: &str) -> Result<Box<dyn MemorySource>, String> {
        Ok(Box::new(Scripted { child: CHILD.load(std::sync::atomic::Ordering::SeqCst), step: 0 }))
    }

    fn refused(spec: &str) -> Result<Box<dyn MemorySource>, String> {
        Err(format!("no such source {spec}"))
    }

    fn mine() -> Selector {
        Selector {
            roots: vec![std::process::id()],
            exclude: vec![std::process::id(), 1],
            ..Selector::default()
        }
    }

    #[test]
    fn counts_only_the_attempts_processes_and_keeps_a_bounded_ring() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn sleep");
        CHILD.store(child.id(), std::sync::atomic::Ordering::SeqCst);
        let plan = WatchPlan { source: "scripted".into(), interval_ms: INTERVAL_MS_MIN };
        let gpus = vec!["GPU-a".to_string(), "GPU-c".to_string()];
        let watch = Watch::start(Some(&plan), Some(scripted), &gpus, mine()).expect("started");
        std::thread::sleep(Duration::from_millis(400));
        let readings = watch.finish();
        let _ = child.kill();
        let _ = child.wait();
        assert!(readings.count > LAST_READINGS_MAX as u64, "{readings:?}");
        assert_eq!(readings.last.len(), LAST_READINGS_MAX);
        assert_eq!(readings.error, None);
        let last = readings.last.last().expect("a reading");
        // GPU-c is not listed by the source; GPU-b is not the attempt's.
        assert_eq!(last.gpus.len(), 1);
        let gpu = &last.gpus[0];
        assert_eq!((gpu.uuid.as_str(), gpu.used_mib, gpu.total_mib), ("GPU-a", 5000, 40960));
        assert_eq!(gpu.attempt_mib, 100 * readings.count.min(30), "pid 1's 4000 MiB is not the attempt's");
        assert_eq!(readings.peak_mib, Some(100 * readings.count.min(30)));
        assert!(readings.last.windows(2).all(|w| w[0].time_ms <= w[1].time_ms), "oldest first");
    }

    #[test]
    fn a_source_that_cannot_be_opened_is_named_and_nothing_starts_without_a_plan() {
        let plan = WatchPlan { source: "fake:/nowhere".into(), interval_ms: 50 };
        let gpus = vec!["GPU-a".to_string()];
        let readings = Watch::start(Some(&plan), Some(refused), &gpus, mine()).expect("started").finish();
        assert_eq!(readings.count, 0);
        assert_eq!(
            readings.error.as_deref(),
            Some("cannot open fake:/nowhere: no such source fake:/nowhere")
        );
        assert!(Watch::start(None, Some(refused), &gpus, mine()).is_none());
        assert!(Watch::start(Some(&plan), None, &gpus, mine()).is_none());
        assert!(Watch::start(Some(&plan), Some(refused), &[], mine()).is_none());
        let off = WatchPlan { interval_ms: 0, ..plan };
        assert!(Watch::start(Some(&off), Some(refused), &gpus, mine()).is_none());
    }

    #[test]
    fn finish_stops_at_once() {
        let plan = WatchPlan { source: "scripted".into(), interval_ms: 60_000 };
        let gpus = vec!["GPU-a".to_string()];
        let started = std::time::Instant::now();
        let readings = Watch::start(Some(&plan), Some(scripted), &gpus, mine()).expect("started").finish();
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert!(readings.count <= 1);
    }
}
