//! `carma bench`: measured, never asserted, speed of carma's own machinery.
//!
//! Every figure is a median over repeated runs in one process, and where a floor exists
//! (one fsync of a small file on the same disk) it is measured in the same run, so ratios
//! compare like with like.

mod adversary;
mod estimate;
mod faults;
mod journal;
mod sim;
mod supervisor;
mod tick;

pub use adversary::{AdversaryBench, INGEST_TICKS_MAX, adversary};
pub use estimate::{EstimateBench, EstimateBenchRow, estimate};
pub use faults::{FaultsBench, FaultsBenchOptions, faults, faults_scratch};
pub use journal::{JournalBench, fold_child, journal, peak_rss_mib};
pub use sim::{
    BUILTIN_PROFILES, ReferenceRow, ReportBench, SimBench, SimBenchOptions, SyntheticBench, TickBucket, sim,
    sim_child_run,
};
pub use supervisor::{SupervisorBench, SupervisorBenchOptions, SupervisorSide, supervisor};
pub use tick::{TickBench, TickBenchRow, tick};

/// Median of `runs` timings of `work`, in microseconds.
pub(crate) fn median_us<E>(runs: usize, mut work: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = std::time::Instant::now();
        work()?;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}
