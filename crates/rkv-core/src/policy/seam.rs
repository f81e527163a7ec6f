//! The policy seam: what every KV policy is to the rest of rkv (after NVIDIA kvpress's
//! `ScorerPress`: a policy writes its score; the budget, the protected recent slots and
//! the top-k selection are shared).
//!
//! Owns: [`KvPolicy`] (name, the observations a policy needs, its typed parameters, its
//! scorer, its explanation for the inspector), [`Needs`], [`ParamSpec`] and the shared
//! selection of a scored policy ([`select_scored`]), and the per-slot scores a policy
//! carries from one compression to the next ([`HeadState::carried`]).
//! Must not know: any one policy's maths, the engine, tensors.

use super::{select, Explained, HeadObservation, HeadState, PolicyError, RedundancyPath};
use crate::config::{CompressionConfig, ConfigError};

/// The observations a policy reads; the engine captures exactly these, nothing more.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// `[w, L - w]` logits of the `w` most recent queries over the candidate slots, the
    /// maximum over each GQA group taken as they are captured.
    pub window_logits: bool,
    /// `[L]` attention probability each slot received, accumulated every step (H2O).
    pub attention_mass: bool,
    /// `[L, d]` post-RoPE keys.
    pub keys: bool,
    /// `[L, d]` values.
    pub values: bool,
    /// R-KV's redundancy: the keys, and the head state's incremental bookkeeping, which
    /// the engine's attention keeps up to date as it appends slots.
    pub redundancy: bool,
}

/// Which [`CompressionConfig`] field a parameter lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamField {
    Lambda,
    Threshold,
    Kernel,
    Sinks,
    /// Slot `i` of [`CompressionConfig::params`], the declaring policy's own.
    Extra(usize),
}

/// One typed parameter a policy declares: its name, range and default, validated once
/// when a configuration is built (CLI flag, request field) and never again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamSpec {
    pub name: &'static str,
    pub help: &'static str,
    pub min: f64,
    pub max: f64,
    /// Whether `min` and `max` themselves are excluded.
    pub open: bool,
    /// Whether only whole numbers are accepted.
    pub integer: bool,
    /// The value when none is given (shared fields: the config's own default).
    pub default: f64,
    pub field: ParamField,
}

impl ParamSpec {
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The range as a message shows it.
    pub fn range(&self) -> String {
        let (l, r) = if self.open { ('(', ')') } else { ('[', ']') };
        let kind = if self.integer { " (whole)" } else { "" };
        format!("{l}{}, {}{r}{kind}", self.min, self.max)
    }

    /// Whether `value` is acceptable; the error names the policy and the parameter.
    pub fn check(&self, policy: &'static str, value: f64) -> Result<(), ConfigError> {
        let inside = if self.open {
            value > self.min && value < self.max
        } else {
            value >= self.min && value <= self.max
        };
        if inside && (!self.integer || value.fract() == 0.0) {
            Ok(())
        } else {
            Err(ConfigError::ParamOutOfRange {
                policy,
                name: self.name,
                range: self.range(),
                value,
            })
        }
    }

    /// The value in `cfg` (the default where a policy-specific one is unset).
    pub fn get(&self, cfg: &CompressionConfig) -> f64 {
        match self.field {
            ParamField::Lambda => f64::from(cfg.lambda),
            ParamField::Threshold => f64::from(cfg.threshold),
            ParamField::Kernel => cfg.kernel as f64,
            ParamField::Sinks => cfg.sinks as f64,
            ParamField::Extra(i) => cfg.params.get(i).map_or(self.default, f64::from),
        }
    }

    /// Stores `value` (checked by the caller) in `cfg`.
    pub fn set(&self, cfg: &mut CompressionConfig, value: f64) {
        match self.field {
            ParamField::Lambda => cfg.lambda = value as f32,
            ParamField::Threshold => cfg.threshold = value as f32,
            ParamField::Kernel => cfg.kernel = value as usize,
            ParamField::Sinks => cfg.sinks = value as usize,
            ParamField::Extra(i) => cfg.params.set(i, value as f32),
        }
    }
}

/// What a scorer returns for one head.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scored {
    /// `[L - r]` one score per candidate slot (`r` = [`KvPolicy::protected_recent`]);
    /// larger is kept first, ties to the older slot, NaN last.
    pub score: Vec<f64>,
    /// The terms for the inspector: `[L - r]` the attention-like term (may be empty).
    pub importance: Vec<f32>,
    /// `[L - r]` the similarity-like term subtracted from it (may be empty).
    pub redundancy: Vec<f64>,
    /// `[L, k]` per-slot values (`k >= 1` of them) the policy carries to its next
    /// compression; the kept slots' rows are kept, in order ([`HeadState::carried`]).
    /// `None`: carries none.
    pub carried: Option<Vec<f32>>,
}

/// A KV-cache policy: scores in, kept slots out, per (layer, KV head) of one sequence.
///
/// Adding a policy that uses existing observations is one file implementing this trait
/// and one line in [`super::registry::POLICIES`].
pub trait KvPolicy: Sync + Send {
    /// The name `--kv-policy` and `kv_compression.policy` take (lowercase).
    fn name(&self) -> &'static str;

    /// One line for `--help` and the docs: what it keeps, and its source.
    fn about(&self) -> &'static str;

    /// The observations its scorer reads.
    fn needs(&self) -> Needs;

    /// The observations its scorer reads under `cfg`, where a parameter switches one on
    /// (`h2o-mean`'s value guard reads values only when it is on); at least [`Self::needs`].
    fn needs_for(&self, cfg: &CompressionConfig) -> Needs {
        let _ = cfg;
        self.needs()
    }

    /// Its parameters beyond budget, buffer and window.
    fn params(&self) -> &'static [ParamSpec] {
        &[]
    }

    /// Whether it ever evicts (FullKV does not). A compressing policy's sequence never
    /// holds more than `budget + buffer` slots per layer and KV head: that is its memory
    /// bound, the one the scheduler reserves.
    fn compresses(&self) -> bool {
        true
    }

    /// How many of the most recent slots are always kept (not scored).
    fn protected_recent(&self, cfg: &CompressionConfig) -> usize {
        cfg.window
    }

    /// The scores of one head's candidate slots `0..L - protected_recent`, for an
    /// observation already validated for [`Self::needs`] with `L >= budget`.
    fn score(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &mut HeadState,
        path: RedundancyPath,
    ) -> Result<Scored, PolicyError>;

    /// The kept slots (ascending, exactly `budget`) and the terms that decided them;
    /// leaves `state` as [`Self::select`] leaves it. Same preconditions as
    /// [`Self::score`].
    fn explain(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &mut HeadState,
        path: RedundancyPath,
    ) -> Result<Explained, PolicyError> {
        let scored = self.score(cfg, obs, state, path)?;
        select_scored(self.protected_recent(cfg), cfg, obs, scored, state)
    }

    /// The kept slots only (a policy may skip building the terms).
    fn select(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &mut HeadState,
        path: RedundancyPath,
    ) -> Result<Vec<usize>, PolicyError> {
        Ok(self.explain(cfg, obs, state, path)?.kept)
    }
}

/// The shared selection of a scored policy: the top `budget - recent` candidates and the
/// `recent` most recent slots, ascending; the carried scores follow the kept slots.
pub fn select_scored(
    recent: usize,
    cfg: &CompressionConfig,
    obs: &HeadObservation<'_>,
    scored: Scored,
    state: &mut HeadState,
) -> Result<Explained, PolicyError> {
    let recent = recent.min(obs.len);
    let candidates = obs.len - recent;
    if scored.score.len() != candidates {
        return Err(PolicyError::Shape {
            field: "score",
            expected: candidates,
            actual: scored.score.len(),
            shape: "[L - recent]",
        });
    }
    let kept = select::top_k_plus_window(&scored.score, cfg.budget, recent);
    if let Some(all) = scored.carried {
        let k = all.len().checked_div(obs.len).unwrap_or(0).max(1);
        if all.len() != k * obs.len {
            return Err(PolicyError::Shape {
                field: "carried",
                expected: k * obs.len,
                actual: all.len(),
                shape: "[L, k]",
            });
        }
        state.carried = kept
            .iter()
            .flat_map(|&s| all[s * k..(s + 1) * k].iter().copied())
            .collect();
    }
    Ok(Explained {
        kept,
        importance: scored.importance,
        redundancy: scored.redundancy,
        latest_similar: Vec::new(),
    })
}

impl HeadState {
    /// `[n, k]` the values a policy carried from its last compression for the cache's
    /// first `n` slots (those it kept then, in order; later slots have none yet), `k` per
    /// slot as the policy wrote them. Empty for policies that carry nothing.
    pub fn carried(&self) -> &[f32] {
        &self.carried
    }
}
