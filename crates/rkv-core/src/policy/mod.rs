//! KV-cache policies: scores in, kept slot indices out, per KV head (DESIGN.md §2).
//!
//! Owns: the boundary the engine calls ([`HeadObservation`] + [`HeadState`] in, ascending
//! kept slot indices out, via [`select_keep`]), shape validation of what each policy
//! declares it needs, and the dispatch through the registry to the policies behind the
//! [`KvPolicy`] seam, one file each: FullKV, R-KV (arXiv 2505.24133, reference
//! Zefan-Cai/R-KV), SnapKV (R-KV with lambda = 1), StreamingLLM, H2O, G-KV and KeyDiff.
//! The golden vectors in `shared/golden/` pin the first five down.
//!
//! Must not know: tensors, devices, models, the block pool, files. The engine gathers
//! the slices (keys, window logits, H2O accumulations) and applies the kept indices.

pub mod cosine;
pub mod describe;
pub mod dot;
pub mod explain;
pub mod full;
pub mod gkv;
pub mod h2o;
pub mod h2o_mean;
pub mod hybrid;
pub mod importance;
mod kept;
pub mod keydiff;
pub mod keys;
pub mod redundancy;
pub mod redundancy_fast;
pub mod registry;
pub mod rkv;
pub mod seam;
pub mod select;
pub mod snapkv;
pub mod streaming;
/// The incremental redundancy's tiled passes, both built on every x86-64 target and
/// chosen at run time (`crate::simd`): 8 rows x 2 vectors where the CPU has AVX-512F
/// (`tile_avx512`), 4 x 2 where it has x86-64-v3 (AVX2, FMA, F16C) only (`tile_avx2`),
/// with the same functions and constants; callers check `simd::avx512()`, then
/// `simd::v3()`, and keep their portable loops for the rest.
#[cfg(target_arch = "x86_64")]
mod tile_avx2;
#[cfg(target_arch = "x86_64")]
mod tile_avx512;
pub mod with_redundancy;

pub use describe::{appended_dots, AppendedRows};
pub use explain::{select_keep_explained, Explained};
pub use keys::{KeyElem, KeyRows, Prefetcher, Rows};
pub use redundancy::{redundancy_oracle, Redundancy};
pub use redundancy_fast::{redundancy_incremental, FastRedundancy, HeadState};
pub use seam::{select_scored, KvPolicy, Needs, ParamField, ParamSpec, Scored};

use crate::config::{CompressionConfig, ConfigError};

/// What a policy may look at for one KV head of one layer of one sequence.
#[derive(Debug, Clone, Copy)]
pub struct HeadObservation<'a> {
    /// `L`: resident slots, in position order.
    pub len: usize,
    /// `d`: head dimension.
    pub head_dim: usize,
    /// `[L, d]` post-RoPE keys of this KV head, f32 or f16, flat or in the cache's runs
    /// (R-KV only; else may be empty).
    pub keys: KeyRows<'a>,
    /// `g`: query heads per KV head in `window_logits` (1 when the caller already took the
    /// maximum over the group, which is all importance uses: the engine does, as it captures).
    pub group: usize,
    /// `w` (must equal the config's window).
    pub window: usize,
    /// `[g, w, L - w]` raw logits `q.k/sqrt(d)` of the `w` most recent queries (query head
    /// `h*g+i`, window row `t`) over the candidate slots `0..L-w` (R-KV, SnapKV; else
    /// may be empty).
    pub window_logits: &'a [f32],
    /// `[L]` accumulated attention probability per slot (H2O only; else may be empty).
    pub h2o_scores: &'a [f32],
    /// `[L, d]` values, f32 (policies that declare [`Needs::values`]; else may be empty).
    pub values: &'a [f32],
}

/// A bad observation, state or configuration. Never a panic.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("invalid compression config: {0}")]
    Config(#[from] ConfigError),
    #[error("{field} has {actual} elements, expected {expected} ({shape})")]
    Shape {
        field: &'static str,
        expected: usize,
        actual: usize,
        shape: &'static str,
    },
    #[error("{field} must be >= 1")]
    Zero { field: &'static str },
    #[error("observation window {observed} differs from the config's window {configured}")]
    WindowMismatch { observed: usize, configured: usize },
    #[error("head state describes {described} slots but the cache holds only {len}")]
    StateAhead { described: usize, len: usize },
    #[error("head state has a key sum of width {state} but head_dim is {head_dim}")]
    StateDim { state: usize, head_dim: usize },
    #[error("kept slot {slot} is outside the cache of {len} slots")]
    KeptOutOfRange { slot: usize, len: usize },
    #[error("kept slots must be strictly ascending (slot {slot} out of order)")]
    KeptNotAscending { slot: usize },
    #[error("key runs do not describe the cache: {why}")]
    KeyRuns { why: String },
    #[error("cache of {len} slots is too long for the redundancy bookkeeping")]
    TooLong { len: usize },
}

/// The scores of one R-KV/SnapKV compression of one head (candidates `0..L-w`).
#[derive(Debug, Clone, PartialEq)]
pub struct HeadScores {
    /// `[L - w]` importance after the max-pool.
    pub importance: Vec<f32>,
    /// `[L - w]` redundancy (empty for SnapKV / lambda = 1 via SnapKV).
    pub redundancy: Vec<f64>,
    /// `[L - w]` `lambda * importance - (1 - lambda) * redundancy`.
    pub score: Vec<f64>,
}

/// How the redundancy term is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedundancyPath {
    /// Incremental, reusing [`HeadState`] (the engine's path).
    Fast,
    /// From scratch, O(L^2 d) (the test oracle); the state is left untouched.
    Oracle,
}

fn check_len(
    field: &'static str,
    shape: &'static str,
    actual: usize,
    expected: usize,
) -> Result<(), PolicyError> {
    if actual == expected {
        Ok(())
    } else {
        Err(PolicyError::Shape {
            field,
            expected,
            actual,
            shape,
        })
    }
}

/// Validate the observation's shapes for the fields `cfg.policy` declares it needs.
pub fn validate_observation(
    cfg: &CompressionConfig,
    obs: &HeadObservation<'_>,
) -> Result<(), PolicyError> {
    cfg.validate()?;
    if obs.window != cfg.window {
        return Err(PolicyError::WindowMismatch {
            observed: obs.window,
            configured: cfg.window,
        });
    }
    if obs.len < cfg.budget {
        return Ok(());
    }
    let needs = cfg.policy.policy().needs_for(cfg);
    if needs.window_logits {
        if obs.group == 0 {
            return Err(PolicyError::Zero { field: "group" });
        }
        let n = obs.len - obs.window;
        let expected = obs.group.saturating_mul(obs.window).saturating_mul(n);
        check_len(
            "window_logits",
            "[g, w, L - w]",
            obs.window_logits.len(),
            expected,
        )?;
    }
    if (needs.keys || needs.redundancy || needs.values) && obs.head_dim == 0 {
        return Err(PolicyError::Zero { field: "head_dim" });
    }
    if needs.keys || needs.redundancy {
        check_len(
            "keys",
            "[L, d]",
            obs.keys.values(),
            obs.len.saturating_mul(obs.head_dim),
        )?;
        check_len("keys", "[L, d] (row width)", obs.keys.dim(), obs.head_dim)?;
    }
    if needs.attention_mass {
        check_len("h2o_scores", "[L]", obs.h2o_scores.len(), obs.len)?;
    }
    if needs.values {
        check_len(
            "values",
            "[L, d]",
            obs.values.len(),
            obs.len.saturating_mul(obs.head_dim),
        )?;
    }
    Ok(())
}

/// R-KV / SnapKV scores of one head. `obs.len` must be `>= cfg.budget` (validated);
/// with [`RedundancyPath::Fast`] the returned pass must be committed to the state.
pub fn score_head<'a>(
    cfg: &CompressionConfig,
    obs: &HeadObservation<'a>,
    state: &HeadState,
    path: RedundancyPath,
) -> Result<(HeadScores, Option<FastRedundancy<'a>>), PolicyError> {
    validate_observation(cfg, obs)?;
    score_validated(cfg, obs, StateRef::Shared(state), path)
}

/// The head state a scoring reads, which also says what the caller needs: shared by
/// [`score_head`], which returns both terms beside the combined score; lent by
/// [`select_keep_with`], which needs only the score and commits the pass to the state
/// right after (see [`redundancy_fast::redundancy_incremental_lent`]).
enum StateRef<'s> {
    Shared(&'s HeadState),
    Lent(&'s mut HeadState),
}

impl StateRef<'_> {
    fn get(&self) -> &HeadState {
        match self {
            StateRef::Shared(s) => s,
            StateRef::Lent(s) => s,
        }
    }
}

/// [`score_head`] of an observation [`validate_observation`] has accepted (with a lent
/// state, `redundancy` comes back empty).
fn score_validated<'a>(
    cfg: &CompressionConfig,
    obs: &HeadObservation<'a>,
    mut state: StateRef<'_>,
    path: RedundancyPath,
) -> Result<(HeadScores, Option<FastRedundancy<'a>>), PolicyError> {
    let n = obs.len.saturating_sub(obs.window);
    let with_redundancy = cfg.policy.needs().redundancy;
    let importance = if with_redundancy && path == RedundancyPath::Fast {
        // The redundancy reads keys next (every key unless the state describes them all),
        // mostly for the first time since they were written: the memory fetches them
        // while the importance's exponentials run (a few rows per tick, all of them by
        // the end).
        let mut keys = Prefetcher::rows(obs.keys, state.get().rows_read(obs.len));
        let ticks = (obs.window * n).div_ceil(importance::TICK).max(1);
        let per_tick = keys.left().div_ceil(ticks) + 1;
        importance::importance_with(
            obs.window_logits,
            obs.group,
            obs.window,
            n,
            cfg.kernel,
            &mut || keys.advance(per_tick),
        )
    } else {
        importance::importance(obs.window_logits, obs.group, obs.window, n, cfg.kernel)
    };
    let lambda = f64::from(cfg.effective_lambda());
    let (mut redundancy, pass) = if with_redundancy {
        match path {
            RedundancyPath::Fast => {
                let (keys, threshold, window) = (obs.keys, cfg.threshold, obs.window);
                let mut pass = match &mut state {
                    StateRef::Shared(s) => redundancy_incremental(keys, threshold, window, s)?,
                    StateRef::Lent(s) => {
                        redundancy_fast::redundancy_incremental_lent(keys, threshold, window, s)?
                    }
                };
                (std::mem::take(&mut pass.redundancy), Some(pass))
            }
            RedundancyPath::Oracle => {
                let keys = obs.keys.to_f32();
                let r = redundancy_oracle(&keys, obs.head_dim, cfg.threshold, obs.window);
                (r.redundancy, None)
            }
        }
    } else {
        (Vec::new(), None)
    };
    let score = if redundancy.is_empty() {
        importance.iter().map(|&i| f64::from(i)).collect()
    } else {
        // In the redundancy's place when the caller does not keep the terms.
        let mut score = match state {
            StateRef::Shared(_) => redundancy.clone(),
            StateRef::Lent(_) => std::mem::take(&mut redundancy),
        };
        for (s, &i) in score.iter_mut().zip(&importance) {
            *s = lambda * f64::from(i) - (1.0 - lambda) * *s;
        }
        score
    };
    Ok((
        HeadScores {
            importance,
            redundancy,
            score,
        },
        pass,
    ))
}

/// Choose the slots one KV head keeps: ascending indices, exactly `min(L, budget)` of
/// them (all `L` for FullKV), always including the policy's protected recent slots.
/// A policy may update `state` (R-KV's incremental redundancy bookkeeping, carried
/// scores); the engine must then keep exactly these slots, in this order.
pub fn select_keep(
    cfg: &CompressionConfig,
    obs: &HeadObservation<'_>,
    state: &mut HeadState,
) -> Result<Vec<usize>, PolicyError> {
    select_keep_with(cfg, obs, state, RedundancyPath::Fast)
}

/// [`select_keep`] with an explicit redundancy path ([`RedundancyPath::Oracle`] for tests).
pub fn select_keep_with(
    cfg: &CompressionConfig,
    obs: &HeadObservation<'_>,
    state: &mut HeadState,
    path: RedundancyPath,
) -> Result<Vec<usize>, PolicyError> {
    validate_observation(cfg, obs)?;
    let policy = cfg.policy.policy();
    if obs.len < cfg.budget || !policy.compresses() {
        return Ok((0..obs.len).collect());
    }
    policy.select(cfg, obs, state, path)
}

/// R-KV's and SnapKV's selection: the top `B - w` of [`score_head`]'s score plus the
/// window, the redundancy pass committed to the state.
pub(crate) fn select_rkv_family(
    cfg: &CompressionConfig,
    obs: &HeadObservation<'_>,
    state: &mut HeadState,
    path: RedundancyPath,
) -> Result<Vec<usize>, PolicyError> {
    let (scores, pass) = score_validated(cfg, obs, StateRef::Lent(state), path)?;
    let kept = select::top_k_plus_window(&scores.score, cfg.budget, obs.window);
    if let Some(pass) = pass {
        // The kept slots are the selection's own (ascending, below `L`): the commit does
        // not fail; if it did, the state gets back what it lent.
        if let Err(e) = pass.commit(&kept, state) {
            pass.give_back(state);
            return Err(e);
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests;
