//! The simulator's model parameters: interference, out-of-memory, power and job start-up.
//!
//! They live in a documented TOML file (`traces/sim-model.toml`, which holds exactly the
//! compiled-in defaults, and a test proves it) so that a reader can see and cite what the
//! simulation assumed. Every policy is simulated with the same parameters.

use serde::Deserialize;

/// The shipped, documented parameter file; equal to [`ModelParams::default`].
pub const DEFAULT_MODEL_TOML: &str = include_str!("../../traces/sim-model.toml");

/// Every parameter of the model.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ModelParams {
    /// Power and usable memory of every simulated GPU (`[gpu]`).
    pub gpu: GpuParams,
    /// Start-up, memory ramp and sampling noise of every job (`[job]`).
    pub job: JobParams,
    /// Slowdown of jobs sharing a GPU as plain CUDA streams (`[streams]`), used without MPS.
    pub streams: Interference,
    /// Slowdown of jobs sharing a GPU under MPS (`[mps]`), used when the run simulates MPS.
    pub mps: Interference,
}

/// Power and memory of one GPU.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct GpuParams {
    /// Power of a GPU with nothing running, W (`idle-w`).
    pub idle_w: f64,
    /// Power at full summed SM activity, W; also the board cap (`busy-w`).
    pub busy_w: f64,
    /// Exponent γ of the power law idle + (busy − idle)·min(1, S)^γ (`power-exponent`).
    pub power_exponent: f64,
    /// Memory lost to fragmentation and allocator caches: a GPU kills its newest job when
    /// the jobs' peaks exceed total minus this (`fragmentation-mib`).
    pub fragmentation_mib: u64,
}

/// Start-up of one job.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct JobParams {
    /// Time from launch to the first training step, s: the job holds its GPU but makes no
    /// progress and adds no SM activity (`startup-s`).
    pub startup_s: f64,
    /// Time over which a job's memory ramps linearly from 0 to its peak after launch, s; the
    /// out-of-memory check happens at its end (`ramp-s`).
    pub ramp_s: f64,
    /// Relative spread of the per-process SM-utilisation samples (uniform in ±this).
    pub sm_noise: f64,
    /// A requeueable task writes a checkpoint each time it has made this much progress, in
    /// exclusive-run seconds, unless its profile says otherwise (`checkpoint-every-s`).
    pub checkpoint_every_s: f64,
    /// What resuming from a checkpoint costs a requeueable task's next attempt before it makes
    /// progress again (loading the checkpoint), in exclusive-run seconds, unless its profile
    /// says otherwise (`restart-cost-s`).
    pub restart_cost_s: f64,
    /// A requeueable task traps the preemption's warning (`--signal`'s signal), saves a
    /// checkpoint at once and runs on until it is stopped at the end of the grace, so a
    /// preemption loses at most the grace's progress (`checkpoint-on-warning`; false: it keeps
    /// only its periodic checkpoints).
    pub checkpoint_on_warning: bool,
}

/// Slowdown of collocated jobs: (1 + epsilon) · max(1, S / eta).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Interference {
    /// Fixed slowdown ε any sharing costs, as a fraction (0.10 = 10 % slower).
    pub epsilon: f64,
    /// Summed SM activity η a GPU absorbs before jobs slow down in proportion to it.
    pub eta: f64,
}

impl Default for ModelParams {
    fn default() -> Self {
        ModelParams {
            gpu: GpuParams::default(),
            job: JobParams::default(),
            streams: Interference { epsilon: 0.10, eta: 0.90 },
            mps: Interference { epsilon: 0.05, eta: 1.10 },
        }
    }
}

impl Default for GpuParams {
    fn default() -> Self {
        GpuParams { idle_w: 55.0, busy_w: 280.0, power_exponent: 0.6, fragmentation_mib: 1024 }
    }
}

impl Default for JobParams {
    fn default() -> Self {
        JobParams {
            startup_s: 40.0,
            ramp_s: 40.0,
            sm_noise: 0.15,
            checkpoint_every_s: 900.0,
            restart_cost_s: 120.0,
            checkpoint_on_warning: false,
        }
    }
}

impl Default for Interference {
    fn default() -> Self {
        Interference { epsilon: 0.10, eta: 0.90 }
    }
}

impl ModelParams {
    /// Parses a parameter file; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<ModelParams, String> {
        let params: ModelParams =
            toml::from_str(text).map_err(|e| format!("{origin}: {}", e.message().trim()))?;
        params.check().map_err(|e| format!("{origin}: {e}"))?;
        Ok(params)
    }

    /// The ranges every parameter must lie in.
    pub fn check(&self) -> Result<(), String> {
        let g = &self.gpu;
        if !(g.idle_w >= 0.0 && g.busy_w >= g.idle_w && g.busy_w < 10_000.0) {
            return Err(format!("need 0 <= idle-w <= busy-w < 10000, got {} and {}", g.idle_w, g.busy_w));
        }
        if !(g.power_exponent > 0.0 && g.power_exponent <= 4.0) {
            return Err(format!("power-exponent must be in (0, 4], got {}", g.power_exponent));
        }
        let j = &self.job;
        if !(j.startup_s >= 0.0 && j.ramp_s >= 0.0 && j.startup_s < 86_400.0 && j.ramp_s < 86_400.0) {
            return Err("startup-s and ramp-s must be in [0, 86400)".into());
        }
        if !(j.checkpoint_every_s >= 1.0 && j.checkpoint_every_s < 864_000.0) {
            return Err(format!("checkpoint-every-s must be in [1, 864000), got {}", j.checkpoint_every_s));
        }
        if !(j.restart_cost_s >= 0.0 && j.restart_cost_s < 86_400.0) {
            return Err(format!("restart-cost-s must be in [0, 86400), got {}", j.restart_cost_s));
        }
        if !(0.0..=1.0).contains(&j.sm_noise) {
            return Err(format!("sm-noise must be in [0, 1], got {}", j.sm_noise));
        }
        for (name, i) in [("streams", &self.streams), ("mps", &self.mps)] {
            if !(i.epsilon >= 0.0 && i.epsilon < 10.0 && i.eta > 0.0 && i.eta <= 10.0) {
                return Err(format!("[{name}] needs 0 <= epsilon < 10 and 0 < eta <= 10"));
            }
        }
        Ok(())
    }

    /// Power of a GPU whose jobs sum to standalone SM activity `s`, in W.
    pub fn power_w(&self, s: f64) -> f64 {
        let g = &self.gpu;
        g.idle_w + (g.busy_w - g.idle_w) * s.clamp(0.0, 1.0).powf(g.power_exponent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the shipped, documented file holds exactly the compiled-in defaults.
    #[test]
    fn shipped_file_equals_defaults() {
        let parsed = ModelParams::parse("sim-model.toml", DEFAULT_MODEL_TOML).expect("parses");
        assert_eq!(parsed, ModelParams::default());
    }

    /// Goal: a typo is an error, not a silent default.
    #[test]
    fn unknown_key_is_refused() {
        let error = ModelParams::parse("m.toml", "[gpu]\nidle = 3\n").expect_err("refused");
        assert!(error.contains("unknown field"), "{error}");
    }

    #[test]
    fn power_is_idle_at_zero_and_busy_at_one() {
        let params = ModelParams::default();
        assert_eq!(params.power_w(0.0), 55.0);
        assert_eq!(params.power_w(2.0), 280.0);
        assert!((params.power_w(0.65) - 229.0).abs() < 1.0, "{}", params.power_w(0.65));
    }
}
