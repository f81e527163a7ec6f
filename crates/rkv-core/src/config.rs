//! Compression configuration and the decode-time compression schedule (DESIGN.md §2).
//!
//! Owns: which KV policy runs, its parameters (budget, buffer, window, kernel, lambda,
//! threshold, sinks), their validation, and the schedule arithmetic every engine uses
//! ("after a step appends its tokens, if `L >= B + b`, compress to exactly `B` using the
//! queries of the `w` most recent tokens"). Defaults follow the R-KV paper
//! (arXiv 2505.24133) and its reference repository Zefan-Cai/R-KV.
//!
//! Must not know: tensors, models, files, environment variables, the policies' maths.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use crate::policy::{registry, KvPolicy, Needs};
use crate::prompt::PromptMode;

/// Which KV-cache policy a sequence runs: a handle on one entry of the policy registry
/// ([`crate::policy::registry`]), copied freely; what the policy is and does is asked of
/// the entry ([`PolicyKind::policy`]), never matched on.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicyKind(u8);

#[allow(non_upper_case_globals)]
impl PolicyKind {
    /// No compression: the baseline.
    pub const Full: PolicyKind = PolicyKind(0);
    /// R-KV: importance mixed with redundancy (arXiv 2505.24133).
    pub const RKv: PolicyKind = PolicyKind(1);
    /// Decoding-time SnapKV: R-KV with lambda = 1 (importance only).
    pub const SnapKv: PolicyKind = PolicyKind(2);
    /// H2O heavy hitters (accumulated attention) plus recent slots.
    pub const H2o: PolicyKind = PolicyKind(3);
    /// StreamingLLM: attention sinks plus recent slots.
    pub const StreamingLlm: PolicyKind = PolicyKind(4);

    /// Every registered policy, in registry order (their names are the accepted names).
    pub const ALL: [PolicyKind; registry::COUNT] = {
        let mut all = [PolicyKind(0); registry::COUNT];
        let mut i = 0;
        while i < registry::COUNT {
            all[i] = PolicyKind(i as u8);
            i += 1;
        }
        all
    };

    /// The registered policy this handle names.
    pub fn policy(self) -> &'static dyn KvPolicy {
        registry::POLICIES[usize::from(self.0)]
    }

    /// The canonical lowercase name.
    pub fn name(self) -> &'static str {
        self.policy().name()
    }

    /// What the policy observes.
    pub fn needs(self) -> Needs {
        self.policy().needs()
    }

    /// Whether the policy ever evicts (every policy but FullKV).
    pub fn compresses(self) -> bool {
        self.policy().compresses()
    }

    /// Whether the policy scores slots with the window queries' logits.
    pub fn needs_window_logits(self) -> bool {
        self.needs().window_logits
    }

    /// Whether the policy needs per-slot accumulated attention probabilities (H2O).
    pub fn needs_h2o_scores(self) -> bool {
        self.needs().attention_mass
    }
}

impl fmt::Debug for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyKind {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        PolicyKind::ALL
            .into_iter()
            .find(|p| p.name() == wanted)
            .ok_or_else(|| ConfigError::UnknownPolicy {
                name: s.to_string(),
                valid: PolicyKind::ALL.map(PolicyKind::name).join(", "),
            })
    }
}

/// Values of the parameters a policy declares beyond the shared fields of
/// [`CompressionConfig`] ([`crate::policy::ParamField::Extra`]), by slot; NaN is unset,
/// the declaring policy's default (so the config stays small and `Copy`). Validated with
/// the config; equal when bit for bit equal.
#[derive(Debug, Clone, Copy)]
pub struct PolicyParams(pub [f32; PolicyParams::SLOTS]);

impl PolicyParams {
    /// How many policy-specific parameters one policy may declare.
    pub const SLOTS: usize = 6;

    /// Slot `i`'s value, `None` when unset.
    pub fn get(&self, i: usize) -> Option<f32> {
        self.0.get(i).copied().filter(|v| !v.is_nan())
    }

    /// Sets slot `i` (ignored past the last slot; the specs are checked by a test).
    pub fn set(&mut self, i: usize, value: f32) {
        if let Some(slot) = self.0.get_mut(i) {
            *slot = value;
        }
    }
}

impl Default for PolicyParams {
    fn default() -> Self {
        PolicyParams([f32::NAN; PolicyParams::SLOTS])
    }
}

impl PartialEq for PolicyParams {
    fn eq(&self, other: &Self) -> bool {
        self.0
            .iter()
            .zip(&other.0)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

/// A configuration error; the message names the offending field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown policy {name:?}; valid policies: {valid}")]
    UnknownPolicy { name: String, valid: String },
    #[error("budget ({budget}) must exceed window ({window})")]
    BudgetNotAboveWindow { budget: usize, window: usize },
    #[error("budget ({budget}) must exceed sinks ({sinks})")]
    BudgetNotAboveSinks { budget: usize, sinks: usize },
    #[error("window must be >= 1, got {0}")]
    WindowZero(usize),
    #[error("buffer must be >= 1, got {0}")]
    BufferZero(usize),
    #[error("kernel must be odd and >= 1, got {0}")]
    KernelInvalid(usize),
    #[error("lambda must lie in [0, 1], got {0}")]
    LambdaOutOfRange(f32),
    #[error("threshold must lie in (-1, 1), got {0}")]
    ThresholdOutOfRange(f32),
    #[error("unknown prompt mode {0:?} (expected keep or compress)")]
    UnknownPromptMode(String),
    #[error("prompt_chunk ({chunk}) must be at least twice the window ({window}): each chunk's last window of queries scores the cache, the last chunk's too")]
    PromptChunkBelowWindow { chunk: usize, window: usize },
    #[error("unknown parameter {name:?} for policy {policy}; its parameters: {valid}")]
    UnknownParam {
        policy: &'static str,
        name: String,
        valid: String,
    },
    #[error("parameter {name} of policy {policy} must lie in {range}, got {value}")]
    ParamOutOfRange {
        policy: &'static str,
        name: &'static str,
        range: String,
        value: f64,
    },
}

/// KV compression parameters for one sequence (the same for every layer and head).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompressionConfig {
    pub policy: PolicyKind,
    /// `B`: slots kept per layer per KV head after a compression, window included.
    pub budget: usize,
    /// `b`: slots that may accumulate above the budget before compressing.
    pub buffer: usize,
    /// `w`: observation window (most recent tokens, always kept, their queries score).
    pub window: usize,
    /// Max-pool kernel over importance (odd).
    pub kernel: usize,
    /// R-KV mixing weight: `score = lambda * importance - (1 - lambda) * redundancy`.
    pub lambda: f32,
    /// Cosine threshold of the redundancy's "latest similar slot" (strict `>`).
    pub threshold: f32,
    /// StreamingLLM attention sinks.
    pub sinks: usize,
    /// The parameters the policy declares beyond these fields (G-KV's decay, ...).
    pub params: PolicyParams,
    /// Whether the prompt is held whole or compressed between chunks
    /// ([`crate::prompt::PromptMode`]).
    pub prompt: PromptMode,
    /// Tokens of the prompt appended between two runs of the schedule when the prompt is
    /// compressed.
    pub prompt_chunk: usize,
}

impl Default for CompressionConfig {
    fn default() -> Self {
        CompressionConfig {
            policy: PolicyKind::RKv,
            budget: 1024,
            buffer: 128,
            window: 8,
            kernel: 7,
            lambda: 0.1,
            threshold: 0.5,
            sinks: 4,
            params: PolicyParams::default(),
            prompt: PromptMode::Keep,
            prompt_chunk: 512,
        }
    }
}

/// What one engine step means for the schedule (see [`CompressionConfig::plan_step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepPlan {
    /// Resident slots after the step's append, before any compression.
    pub len_after: usize,
    /// Whether the cache is compressed right after this step's append.
    pub compress: bool,
    /// Indices, within this step's new tokens, whose queries form the end of the
    /// window (empty unless `compress` and the policy uses window queries).
    pub window_from_step: Range<usize>,
    /// How many of the most recent tokens of *earlier* steps complete the window
    /// (0 unless `compress`). An engine that appends fewer than `w` tokens per step
    /// therefore keeps the queries of its last `w` tokens per layer.
    pub window_from_history: usize,
}

impl CompressionConfig {
    /// The FullKV baseline (no compression), other fields at their defaults.
    pub fn full() -> Self {
        CompressionConfig {
            policy: PolicyKind::Full,
            ..Self::default()
        }
    }

    /// Defaults with the given policy.
    pub fn with_policy(policy: PolicyKind) -> Self {
        CompressionConfig {
            policy,
            ..Self::default()
        }
    }

    /// The lambda the scorer uses: `lambda` where the policy subtracts R-KV's redundancy,
    /// else 1 (importance only: SnapKV).
    pub fn effective_lambda(&self) -> f32 {
        if self.policy.needs().redundancy {
            self.lambda
        } else {
            1.0
        }
    }

    /// Sets the policy's parameter `name` (as [`KvPolicy::params`] names it) to `value`,
    /// checked against its range; an unknown name is an error that lists the known ones.
    /// Nothing changes on error.
    pub fn set_param(&mut self, name: &str, value: f64) -> Result<(), ConfigError> {
        let policy = self.policy.policy();
        let spec = policy
            .params()
            .iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| ConfigError::UnknownParam {
                policy: policy.name(),
                name: name.to_string(),
                valid: match policy.params() {
                    [] => "none".to_string(),
                    ps => ps.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
                },
            })?;
        spec.check(policy.name(), value)?;
        spec.set(self, value);
        Ok(())
    }

    /// The value of the policy's parameter `name` (its default when unset).
    pub fn param(&self, name: &str) -> Option<f64> {
        let spec = self
            .policy
            .policy()
            .params()
            .iter()
            .find(|p| p.name() == name)?;
        Some(spec.get(self))
    }

    /// [`Self::validate`] for a compressing policy; FullKV never reads the other fields,
    /// so any values pass.
    pub fn validate_if_compressing(&self) -> Result<(), ConfigError> {
        if !self.policy.compresses() {
            Ok(())
        } else {
            self.validate()
        }
    }

    /// Check every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.window == 0 {
            return Err(ConfigError::WindowZero(self.window));
        }
        if self.budget <= self.window {
            return Err(ConfigError::BudgetNotAboveWindow {
                budget: self.budget,
                window: self.window,
            });
        }
        if self.budget <= self.sinks {
            return Err(ConfigError::BudgetNotAboveSinks {
                budget: self.budget,
                sinks: self.sinks,
            });
        }
        if self.buffer == 0 {
            return Err(ConfigError::BufferZero(self.buffer));
        }
        if self.kernel % 2 != 1 {
            return Err(ConfigError::KernelInvalid(self.kernel));
        }
        if !(0.0..=1.0).contains(&self.lambda) {
            return Err(ConfigError::LambdaOutOfRange(self.lambda));
        }
        if !(self.threshold > -1.0 && self.threshold < 1.0) {
            return Err(ConfigError::ThresholdOutOfRange(self.threshold));
        }
        self.validate_prompt()?;
        let policy = self.policy.policy();
        for spec in policy.params() {
            spec.check(policy.name(), spec.get(self))?;
        }
        Ok(())
    }

    /// Whether a cache of `len` resident slots (after a step's append) is compressed.
    pub fn should_compress(&self, len: usize) -> bool {
        self.policy.compresses() && len >= self.budget.saturating_add(self.buffer)
    }

    /// The most slots a sequence ever holds per layer per KV head: `B + b`
    /// (`None` for FullKV, which is unbounded).
    pub fn max_resident_slots(&self) -> Option<usize> {
        self.policy
            .compresses()
            .then(|| self.budget.saturating_add(self.buffer))
    }

    /// Resident slots right after a compression (`min(len, B)`).
    pub fn len_after_compression(&self, len: usize) -> usize {
        len.min(self.budget)
    }

    /// Plan a step that appends `n_new` tokens to a cache of `len_before` slots
    /// (a prefill appends the whole prompt): whether it compresses afterwards and which
    /// tokens' queries form the observation window of that compression.
    pub fn plan_step(&self, len_before: usize, n_new: usize) -> StepPlan {
        let len_after = len_before.saturating_add(n_new);
        let compress = self.should_compress(len_after);
        if !compress || !self.policy.needs_window_logits() {
            return StepPlan {
                len_after,
                compress,
                window_from_step: 0..0,
                window_from_history: 0,
            };
        }
        let from_step = n_new.min(self.window);
        StepPlan {
            len_after,
            compress,
            window_from_step: n_new - from_step..n_new,
            window_from_history: self.window - from_step,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in PolicyKind::ALL {
            assert_eq!(p.to_string().parse::<PolicyKind>(), Ok(p));
        }
        assert_eq!("SnapKV".parse::<PolicyKind>(), Ok(PolicyKind::SnapKv));
    }

    #[test]
    fn unknown_name_lists_valid_names() {
        let err = "r-kv".parse::<PolicyKind>().unwrap_err();
        let msg = err.to_string();
        for name in PolicyKind::ALL.map(PolicyKind::name) {
            assert!(msg.contains(name), "{msg}");
        }
        assert!(msg.contains("r-kv"));
    }

    #[test]
    fn defaults_are_valid() {
        let c = CompressionConfig::default();
        assert_eq!(c.policy, PolicyKind::RKv);
        assert_eq!(
            (c.budget, c.buffer, c.window, c.kernel, c.sinks),
            (1024, 128, 8, 7, 4)
        );
        assert_eq!((c.lambda, c.threshold), (0.1, 0.5));
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(CompressionConfig::full().policy, PolicyKind::Full);
        assert_eq!(CompressionConfig::full().validate(), Ok(()));
    }

    fn field_of(c: CompressionConfig) -> String {
        c.validate().unwrap_err().to_string()
    }

    #[test]
    fn validation_names_the_field() {
        let d = CompressionConfig::default();
        let cases: Vec<(CompressionConfig, &str)> = vec![
            (CompressionConfig { budget: 8, ..d }, "window"),
            (
                CompressionConfig {
                    budget: 4,
                    window: 2,
                    ..d
                },
                "sinks",
            ),
            (CompressionConfig { window: 0, ..d }, "window"),
            (CompressionConfig { buffer: 0, ..d }, "buffer"),
            (CompressionConfig { kernel: 0, ..d }, "kernel"),
            (CompressionConfig { kernel: 4, ..d }, "kernel"),
            (CompressionConfig { lambda: -0.1, ..d }, "lambda"),
            (CompressionConfig { lambda: 1.01, ..d }, "lambda"),
            (
                CompressionConfig {
                    lambda: f32::NAN,
                    ..d
                },
                "lambda",
            ),
            (
                CompressionConfig {
                    threshold: 1.0,
                    ..d
                },
                "threshold",
            ),
            (
                CompressionConfig {
                    threshold: -1.0,
                    ..d
                },
                "threshold",
            ),
            (
                CompressionConfig {
                    threshold: f32::NAN,
                    ..d
                },
                "threshold",
            ),
        ];
        for (c, field) in cases {
            let msg = field_of(c);
            assert!(msg.contains(field), "{msg} should name {field}");
        }
        assert!(field_of(CompressionConfig { budget: 8, ..d }).contains("budget"));
        // Boundaries that are allowed.
        for c in [
            CompressionConfig { lambda: 0.0, ..d },
            CompressionConfig { lambda: 1.0, ..d },
            CompressionConfig {
                threshold: -0.99,
                ..d
            },
            CompressionConfig {
                kernel: 1,
                buffer: 1,
                budget: 9,
                ..d
            },
        ] {
            assert_eq!(c.validate(), Ok(()), "{c:?}");
        }
    }

    #[test]
    fn schedule_thresholds() {
        let c = CompressionConfig {
            budget: 64,
            buffer: 32,
            ..Default::default()
        };
        assert!(!c.should_compress(95));
        assert!(c.should_compress(96));
        assert!(c.should_compress(500));
        assert_eq!(c.max_resident_slots(), Some(96));
        assert_eq!(c.len_after_compression(96), 64);
        assert_eq!(c.len_after_compression(30), 30);
        let f = CompressionConfig::full();
        assert!(!f.should_compress(1 << 40));
        assert_eq!(f.max_resident_slots(), None);
    }

    #[test]
    fn snapkv_lambda_is_one() {
        let mut c = CompressionConfig::with_policy(PolicyKind::SnapKv);
        c.lambda = 0.1;
        assert_eq!(c.effective_lambda(), 1.0);
        c.policy = PolicyKind::RKv;
        assert_eq!(c.effective_lambda(), 0.1);
    }

    #[test]
    fn plan_step_window_split() {
        let c = CompressionConfig {
            budget: 64,
            buffer: 32,
            ..Default::default()
        };
        // Decode step that triggers: 1 new token, 7 from history.
        let p = c.plan_step(95, 1);
        assert_eq!(
            p,
            StepPlan {
                len_after: 96,
                compress: true,
                window_from_step: 0..1,
                window_from_history: 7
            }
        );
        // Prefill of 300 tokens: the window is the prompt's last 8.
        let p = c.plan_step(0, 300);
        assert!(p.compress);
        assert_eq!((p.window_from_step, p.window_from_history), (292..300, 0));
        // A 3-token step.
        let p = c.plan_step(94, 3);
        assert_eq!((p.window_from_step, p.window_from_history), (0..3, 5));
        // No compression: nothing to capture.
        let p = c.plan_step(10, 1);
        assert!(!p.compress);
        assert_eq!((p.window_from_step, p.window_from_history), (0..0, 0));
        // StreamingLLM compresses but needs no queries.
        let s = CompressionConfig {
            policy: PolicyKind::StreamingLlm,
            ..c
        };
        let p = s.plan_step(95, 1);
        assert!(p.compress);
        assert_eq!((p.window_from_step, p.window_from_history), (0..0, 0));
    }
}
