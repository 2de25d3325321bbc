//! Who is over its share of a GPU's memory, and is stopped for it: the pure decision of
//! memory enforcement.
//!
//! The tick attributes every process on a GPU to the attempt it belongs to (by the
//! supervisor's process tree and the job's cgroup, never by anything the job says about
//! itself), sums each attempt's memory per GPU, and hands this room one [`GpuUse`] per GPU.
//! [`over_share`] then says which attempts are stopped, with the words journaled for each.
//!
//! # Rules
//! - An attempt's share of a GPU is what it declared there: the memory per GPU its placement
//!   assumed ([`AttemptUse::declared_mib`]) on a GPU it was placed on, and nothing on any
//!   other GPU (a job that unset `CUDA_VISIBLE_DEVICES` and reached a GPU it was not given).
//! - It is over its share when it uses more than its share plus `margin_mib`.
//! - It is stopped only while it shares the GPU: another attempt is placed on the same GPU.
//!   An attempt alone on its GPU, and an exclusive attempt on its own GPU (alone by
//!   placement), is never stopped: it can only hurt itself. On a GPU it was not given, an
//!   exclusive attempt is a trespasser like any other.
//! - An attempt placed without a memory figure on its own GPU has no share to exceed there.
//! - Each attempt is stopped at most once, for its first GPU (in the input's order) where it
//!   is over; its neighbours are never stopped for its memory.
//!
//! The property tests below hold each rule (`never_stops_within_share_plus_margin`,
//! `never_stops_an_attempt_alone_or_exclusive`, `stops_exactly_the_over_share_attempts`).

use std::collections::BTreeSet;

use super::reason::gib;

/// What one attempt holds on one GPU, as the tick observed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptUse<K> {
    /// The attempt (the tick uses its task id and attempt number).
    pub key: K,
    /// Whether the attempt was placed on this GPU (it may reach others by unsetting
    /// `CUDA_VISIBLE_DEVICES`).
    pub placed_here: bool,
    /// Placed with nobody else allowed on its GPUs.
    pub exclusive: bool,
    /// Its placement's memory per GPU, MiB; `None` when it was placed without a figure.
    pub declared_mib: Option<u64>,
    /// The memory its processes hold on this GPU, MiB (0 when none was seen).
    pub used_mib: u64,
}

/// One GPU's attempts: every attempt placed on it, and every other attempt whose processes
/// hold memory on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuUse<K> {
    /// The GPU's UUID.
    pub uuid: String,
    /// How people name it: `GPU0`.
    pub label: String,
    /// The attempts, each at most once.
    pub attempts: Vec<AttemptUse<K>>,
}

/// An attempt to stop, with the figures that condemn it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverShare<K> {
    /// The attempt.
    pub key: K,
    /// The GPU where it was over, by UUID.
    pub gpu: String,
    /// What it used there, MiB.
    pub used_mib: u64,
    /// Its share there, MiB (0 on a GPU it was not placed on).
    pub declared_mib: u64,
    /// The margin allowed above the share, MiB.
    pub margin_mib: u64,
    /// `used 9.8 GiB on GPU0, declared 1.0 GiB (+ 1.0 GiB margin)`.
    pub reason: String,
}

/// The attempts over their share of a GPU they share, in the input's order (see the module
/// docs). Pure: the same input gives the same answer.
pub fn over_share<K: Clone + Ord>(gpus: &[GpuUse<K>], margin_mib: u64) -> Vec<OverShare<K>> {
    let mut stopped: BTreeSet<K> = BTreeSet::new();
    let mut verdicts = Vec::new();
    for gpu in gpus {
        let placed = gpu.attempts.iter().filter(|a| a.placed_here).count();
        for one in &gpu.attempts {
            let declared_mib = match (one.placed_here, one.declared_mib) {
                (true, Some(mib)) => mib,
                (true, None) => continue,
                (false, _) => 0,
            };
            let neighbours = placed - usize::from(one.placed_here);
            let own_exclusive = one.exclusive && one.placed_here;
            let shares = neighbours > 0 && !own_exclusive;
            let over = one.used_mib > declared_mib.saturating_add(margin_mib);
            // Each attempt is stopped once, whichever of its GPUs saw it over first.
            if !(shares && over && stopped.insert(one.key.clone())) {
                continue;
            }
            verdicts.push(OverShare {
                key: one.key.clone(),
                gpu: gpu.uuid.clone(),
                used_mib: one.used_mib,
                declared_mib,
                margin_mib,
                reason: reason(one.used_mib, &gpu.label, declared_mib, one.placed_here, margin_mib),
            });
        }
    }
    verdicts
}

/// `used 9.8 GiB on GPU0, declared 1.0 GiB (+ 1.0 GiB margin)`; on a GPU the attempt was not
/// given, `used 3.0 GiB on GPU1, which it was not given (+ 1.0 GiB margin)`.
fn reason(used_mib: u64, label: &str, declared_mib: u64, placed_here: bool, margin_mib: u64) -> String {
    let declared = if placed_here {
        format!("declared {}", gib(declared_mib))
    } else {
        "which it was not given".to_string()
    };
    format!("used {} on {label}, {declared} (+ {} margin)", gib(used_mib), gib(margin_mib))
}

#[cfg(test)]
mod tests {
    //! Goal: the three rules of the module docs, as properties over random GPUs and
    //! attempts, and the exact words of a verdict.
    use super::*;
    use proptest::prelude::*;

    fn one(
        key: u32,
        placed_here: bool,
        exclusive: bool,
        declared: Option<u64>,
        used: u64,
    ) -> AttemptUse<u32> {
        AttemptUse { key, placed_here, exclusive, declared_mib: declared, used_mib: used }
    }

    fn gpu(attempts: Vec<AttemptUse<u32>>) -> GpuUse<u32> {
        GpuUse { uuid: "GPU-a".into(), label: "GPU0".into(), attempts }
    }

    fn attempts() -> impl Strategy<Value = Vec<AttemptUse<u32>>> {
        let attempt = (any::<bool>(), any::<bool>(), proptest::option::of(0u64..20_000), 0u64..40_000);
        proptest::collection::vec(attempt, 0..6).prop_map(|list| {
            list.into_iter()
                .enumerate()
                .map(|(k, (placed, exclusive, declared, used))| {
                    one(k as u32, placed, exclusive, declared, used)
                })
                .collect()
        })
    }

    #[test]
    fn the_words_of_a_verdict() {
        let gpus =
            [gpu(vec![one(1, true, false, Some(1024), 10_035), one(2, true, false, Some(4096), 4000)])];
        let verdicts = over_share(&gpus, 1024);
        assert_eq!(verdicts.len(), 1);
        assert_eq!(verdicts[0].key, 1);
        assert_eq!(verdicts[0].reason, "used 9.8 GiB on GPU0, declared 1.0 GiB (+ 1.0 GiB margin)");
        let trespass = [gpu(vec![one(1, false, false, None, 3072), one(2, true, false, Some(4096), 10)])];
        assert_eq!(
            over_share(&trespass, 1024)[0].reason,
            "used 3.0 GiB on GPU0, which it was not given (+ 1.0 GiB margin)"
        );
    }

    proptest! {
        #[test]
        fn never_stops_within_share_plus_margin(list in attempts(), margin in 0u64..4096) {
            let gpus = [gpu(list.clone())];
            for verdict in over_share(&gpus, margin) {
                let a = list.iter().find(|a| a.key == verdict.key).unwrap();
                let share = if a.placed_here { a.declared_mib.unwrap() } else { 0 };
                prop_assert!(a.used_mib > share + margin, "{a:?} stopped within {share} + {margin}");
                prop_assert_eq!(verdict.used_mib, a.used_mib);
            }
        }

        #[test]
        fn never_stops_an_attempt_alone_or_exclusive(list in attempts(), margin in 0u64..4096) {
            let gpus = [gpu(list.clone())];
            let placed = list.iter().filter(|a| a.placed_here).count();
            for verdict in over_share(&gpus, margin) {
                let a = list.iter().find(|a| a.key == verdict.key).unwrap();
                prop_assert!(!(a.exclusive && a.placed_here), "an exclusive attempt was stopped: {a:?}");
                prop_assert!(placed > usize::from(a.placed_here), "an attempt alone was stopped: {a:?}");
            }
        }

        #[test]
        fn stops_exactly_the_over_share_attempts(list in attempts(), margin in 0u64..4096) {
            let gpus = [gpu(list.clone())];
            let placed = list.iter().filter(|a| a.placed_here).count();
            let expected: Vec<u32> = list
                .iter()
                .filter(|a| {
                    let share = match (a.placed_here, a.declared_mib) {
                        (true, Some(mib)) => mib,
                        (true, None) => return false,
                        (false, _) => 0,
                    };
                    let own_exclusive = a.exclusive && a.placed_here;
                    !own_exclusive && placed > usize::from(a.placed_here) && a.used_mib > share + margin
                })
                .map(|a| a.key)
                .collect();
            let stopped: Vec<u32> = over_share(&gpus, margin).into_iter().map(|v| v.key).collect();
            prop_assert_eq!(stopped, expected);
        }

        #[test]
        fn an_attempt_is_stopped_once_whatever_its_gpus(list in attempts(), margin in 0u64..4096) {
            let gpus = [gpu(list.clone()), GpuUse { uuid: "GPU-b".into(), label: "GPU1".into(), attempts: list }];
            let keys: Vec<u32> = over_share(&gpus, margin).into_iter().map(|v| v.key).collect();
            let unique: BTreeSet<u32> = keys.iter().copied().collect();
            prop_assert_eq!(keys.len(), unique.len());
        }
    }
}
