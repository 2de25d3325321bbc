//! Shard arithmetic: how many Slurm shards a memory figure needs, how many a GPU holds, and
//! the `gres.conf` / `slurm.conf` lines that describe a node's GPUs as shards.
//!
//! One shard is a fixed amount of GPU memory (`shard_mib`, 1 GiB by default), the same on
//! every node, so a shard count means the same memory everywhere. A job needing `need_mib`
//! gets `ceil((need_mib + margin_mib) / shard_mib)` shards; the margin is the free memory carma
//! keeps above a figure on a shared GPU (`margin-with-figure-mib`). Every GPU of a node gets
//! the same count, that of its smallest GPU, because Slurm 22.05 ignores uneven per-GPU counts.

use std::fmt::Write;

/// Shard size when none is given, MiB.
pub const SHARD_MIB_DEFAULT: u64 = 1024;
/// Memory kept above a job's figure when none is given, MiB (carma's `margin-with-figure-mib`).
pub const MARGIN_MIB_DEFAULT: u64 = 2048;
/// Smallest shard accepted, MiB: smaller shards only multiply Slurm's bookkeeping.
pub const SHARD_MIB_MIN: u64 = 64;
/// Most shards one GPU may be split into (Slurm counts are 64-bit, but nobody needs more).
pub const SHARDS_PER_GPU_MAX: u64 = 65_536;

/// The cluster-wide shard size and margin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardRule {
    /// Memory one shard stands for, MiB (at least [`SHARD_MIB_MIN`]).
    pub shard_mib: u64,
    /// Free memory kept above a job's figure on a shared GPU, MiB: added before rounding up to shards.
    pub margin_mib: u64,
}

impl Default for ShardRule {
    fn default() -> Self {
        ShardRule { shard_mib: SHARD_MIB_DEFAULT, margin_mib: MARGIN_MIB_DEFAULT }
    }
}

/// Whether a request can ever be granted on one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// `shards` fit on a GPU with `per_gpu` shards (or the GPU size is unknown).
    Fits {
        /// Shards the request needs ([`ShardRule::shards_for`]).
        shards: u32,
    },
    /// `shards` are more than any GPU holds: Slurm would keep the job pending forever.
    Never {
        /// Shards the request needs.
        shards: u32,
        /// Shards one GPU holds.
        per_gpu: u32,
    },
}

impl ShardRule {
    /// Checks the rule; the message names the flag to fix.
    pub fn new(shard_mib: u64, margin_mib: u64) -> Result<ShardRule, String> {
        if shard_mib < SHARD_MIB_MIN {
            return Err(format!("--shard-mib {shard_mib} is too small; use at least {SHARD_MIB_MIN}"));
        }
        if margin_mib > crate::spec::MEMORY_MIB_MAX {
            return Err(format!("--margin-mib {margin_mib} is larger than any GPU"));
        }
        Ok(ShardRule { shard_mib, margin_mib })
    }

    /// Shards for a memory figure (per GPU), margin included; at least one.
    pub fn shards_for(&self, need_mib: u64) -> u32 {
        let total = need_mib.saturating_add(self.margin_mib);
        let shards = total.div_ceil(self.shard_mib).max(1);
        u32::try_from(shards).unwrap_or(u32::MAX)
    }

    /// Memory `shards` shards stand for, MiB: the MPS cap of a job granted them.
    pub fn mib_of(&self, shards: u32) -> u64 {
        u64::from(shards) * self.shard_mib
    }

    /// The largest figure `shards` shards cover once the margin is set aside, MiB.
    pub fn figure_covered_mib(&self, shards: u32) -> u64 {
        self.mib_of(shards).saturating_sub(self.margin_mib)
    }

    /// Shards per GPU for a node whose smallest GPU has `memory_total_mib`.
    pub fn per_gpu(&self, memory_total_mib: u64) -> u32 {
        let shards = (memory_total_mib / self.shard_mib).min(SHARDS_PER_GPU_MAX);
        shards as u32
    }

    /// Whether `need_mib` can ever run on one GPU of `per_gpu` shards (`None`: unknown).
    pub fn fit(&self, need_mib: u64, per_gpu: Option<u32>) -> Fit {
        let shards = self.shards_for(need_mib);
        match per_gpu {
            Some(per_gpu) if shards > per_gpu => Fit::Never { shards, per_gpu },
            _ => Fit::Fits { shards },
        }
    }
}

/// One GPU as `carma slurm gres` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GresGpu {
    /// Its NVML index: the `nvidiaINDEX` device file.
    pub index: u32,
    /// Its model name, for the `# GPU` comment line.
    pub name: String,
    /// Its UUID, for the `# GPU` comment line.
    pub uuid: String,
    /// Its total memory, MiB; the node's smallest GPU sets every GPU's shard count.
    pub memory_total_mib: u64,
}

/// A node's shard configuration: its `gres.conf` lines and its `Gres=` for slurm.conf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GresConfig {
    /// The node's name, as slurm.conf's `NodeName`.
    pub node: String,
    /// GPUs on the node.
    pub gpus: u32,
    /// Shards each GPU is split into (the smallest GPU's count, for all).
    pub shards_per_gpu: u32,
    /// `gres.conf` lines, comments included.
    pub gres_conf: Vec<String>,
    /// The value of `Gres=` on the node's `NodeName` line in slurm.conf.
    pub node_gres: String,
}

/// The configuration of node `node` with `gpus` (device files `DEV_DIR/nvidiaINDEX`).
/// Errors when there is no GPU or the smallest one holds no shard.
pub fn gres_config(
    node: &str,
    gpus: &[GresGpu],
    rule: &ShardRule,
    dev_dir: &str,
) -> Result<GresConfig, String> {
    let smallest = gpus.iter().map(|g| g.memory_total_mib).min().ok_or_else(|| {
        "no GPU found; check `nvidia-smi`, or pass --gpus fake:FILE to describe the node".to_string()
    })?;
    let per_gpu = rule.per_gpu(smallest);
    if per_gpu == 0 {
        return Err(format!(
            "a GPU of {smallest} MiB holds no shard of {} MiB; use a smaller --shard-mib",
            rule.shard_mib
        ));
    }
    let count = gpus.len() as u32;
    let total = u64::from(per_gpu) * u64::from(count);
    let mut lines = vec![format!(
        "# carma: node {node}, {count} GPU(s), {per_gpu} shards of {} MiB each (smallest GPU {smallest} MiB)",
        rule.shard_mib
    )];
    let dev_dir = dev_dir.trim_end_matches('/');
    for gpu in gpus {
        lines.push(format!("# GPU {}: {} {} ({} MiB)", gpu.index, gpu.name, gpu.uuid, gpu.memory_total_mib));
        lines.push(format!("NodeName={node} Name=gpu File={dev_dir}/nvidia{}", gpu.index));
    }
    lines.push(format!("NodeName={node} Name=shard Count={total}"));
    let mut node_gres = String::new();
    let _ = write!(node_gres, "gpu:{count},shard:{total}");
    Ok(GresConfig {
        node: node.to_string(),
        gpus: count,
        shards_per_gpu: per_gpu,
        gres_conf: lines,
        node_gres,
    })
}

#[cfg(test)]
mod tests {
    //! Goal: the arithmetic rounds the right way at every boundary and the gres lines are
    //! what Slurm 22.05 accepts (equal counts, one File per GPU).
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn shards_cover_the_figure_plus_margin() {
        let rule = ShardRule::default();
        assert_eq!(rule.shards_for(2048), 4);
        assert_eq!(rule.shards_for(2049), 5);
        assert_eq!(rule.shards_for(0), 2);
        assert_eq!(ShardRule { shard_mib: 1024, margin_mib: 0 }.shards_for(0), 1);
        assert_eq!(rule.mib_of(5), 5120);
        assert_eq!(rule.figure_covered_mib(5), 3072);
        assert_eq!(rule.figure_covered_mib(1), 0);
    }

    #[test]
    fn fit_refuses_what_no_gpu_holds() {
        let rule = ShardRule::default();
        assert_eq!(rule.fit(38 * 1024, Some(40)), Fit::Fits { shards: 40 });
        assert_eq!(rule.fit(38 * 1024 + 1, Some(40)), Fit::Never { shards: 41, per_gpu: 40 });
        assert_eq!(rule.fit(1 << 20, None), Fit::Fits { shards: 1026 });
    }

    #[test]
    fn bad_rules_name_the_flag() {
        assert_eq!(ShardRule::new(10, 0).unwrap_err(), "--shard-mib 10 is too small; use at least 64");
        assert!(ShardRule::new(1024, 2048).is_ok());
    }

    #[test]
    fn gres_lines_give_every_gpu_the_smallest_count() {
        let gpu = |index: u32, mib: u64| GresGpu {
            index,
            name: "A100".into(),
            uuid: format!("GPU-{index}"),
            memory_total_mib: mib,
        };
        let config =
            gres_config("n1", &[gpu(0, 40960), gpu(1, 40000)], &ShardRule::default(), "/dev/").unwrap();
        assert_eq!(config.shards_per_gpu, 39);
        assert_eq!(config.node_gres, "gpu:2,shard:78");
        let lines: Vec<&str> =
            config.gres_conf.iter().map(String::as_str).filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "NodeName=n1 Name=gpu File=/dev/nvidia0",
                "NodeName=n1 Name=gpu File=/dev/nvidia1",
                "NodeName=n1 Name=shard Count=78"
            ]
        );
        assert_eq!(
            gres_config("n1", &[], &ShardRule::default(), "/dev").unwrap_err(),
            "no GPU found; check `nvidia-smi`, or pass --gpus fake:FILE to describe the node"
        );
        assert_eq!(
            gres_config("n1", &[gpu(0, 1000)], &ShardRule::default(), "/dev").unwrap_err(),
            "a GPU of 1000 MiB holds no shard of 1024 MiB; use a smaller --shard-mib"
        );
    }

    proptest! {
        /// The shards granted always cover the figure plus margin, and one shard fewer never does.
        #[test]
        fn shards_are_the_smallest_cover(need in 0u64..2_000_000, shard in 64u64..8192, margin in 0u64..8192) {
            let rule = ShardRule { shard_mib: shard, margin_mib: margin };
            let shards = rule.shards_for(need);
            prop_assert!(rule.mib_of(shards) >= need + margin);
            prop_assert!(shards == 1 || rule.mib_of(shards - 1) < need + margin);
            prop_assert!(rule.figure_covered_mib(shards) >= need);
        }
    }
}
