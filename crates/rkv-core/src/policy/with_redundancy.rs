//! R-KV's redundancy as a term of another policy's score (G-KV, hybrid): computed on the
//! incremental path the engine keeps up to date (or from scratch for tests), handed to
//! the policy's scorer, and committed to the head state with the slots kept.
//!
//! Owns: that pass-score-select-commit sequence. Must not know: any policy's own term.

use super::redundancy_fast::redundancy_incremental_lent;
use super::{
    redundancy_oracle, select_scored, Explained, HeadObservation, HeadState, PolicyError,
    RedundancyPath, Scored,
};
use crate::config::CompressionConfig;

/// `x / max(x)` (unchanged when the maximum is not positive and finite).
pub fn divide_by_max<T: Copy + Into<f64>>(x: &[T]) -> Vec<f64> {
    let max = x
        .iter()
        .map(|&v| v.into())
        .fold(f64::NEG_INFINITY, f64::max);
    if max > 0.0 && max.is_finite() {
        x.iter().map(|&v| v.into() / max).collect()
    } else {
        x.iter().map(|&v| v.into()).collect()
    }
}

/// `[L - w]` R-KV's redundancy from scratch (the oracle: O(L^2 d), nothing committed).
pub fn oracle_redundancy(cfg: &CompressionConfig, obs: &HeadObservation<'_>) -> Vec<f64> {
    let keys = obs.keys.to_f32();
    redundancy_oracle(&keys, obs.head_dim, cfg.threshold, obs.window).redundancy
}

/// Scores with `score(redundancy)` (`redundancy`: `[L - w]`, R-KV's, raw), keeps the top
/// candidates plus the `recent` newest slots, and commits the redundancy pass.
pub fn select_with_redundancy(
    cfg: &CompressionConfig,
    obs: &HeadObservation<'_>,
    state: &mut HeadState,
    path: RedundancyPath,
    recent: usize,
    score: impl FnOnce(&HeadState, Vec<f64>) -> Scored,
) -> Result<Explained, PolicyError> {
    let (redundancy, pass) = match path {
        RedundancyPath::Fast => {
            let mut pass = redundancy_incremental_lent(obs.keys, cfg.threshold, obs.window, state)?;
            (std::mem::take(&mut pass.redundancy), Some(pass))
        }
        RedundancyPath::Oracle => (oracle_redundancy(cfg, obs), None),
    };
    let scored = score(state, redundancy);
    let explained = select_scored(recent, cfg, obs, scored, state);
    if let Some(pass) = pass {
        match &explained {
            Ok(e) => {
                if let Err(err) = pass.commit(&e.kept, state) {
                    pass.give_back(state);
                    return Err(err);
                }
            }
            Err(_) => pass.give_back(state),
        }
    }
    explained
}
