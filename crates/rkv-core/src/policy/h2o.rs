//! H2O heavy-hitter eviction (Zhang et al., arXiv 2306.14048; DESIGN.md §2 — the
//! reference repository's H2O does not run, so this follows the paper).
//!
//! Owns: keeping the `B/2` most recent slots plus the `B - B/2` other slots with the
//! largest accumulated attention probability. Must not know: how the engine accumulates
//! those probabilities (every decoding step, from the query heads of the group), keys,
//! the schedule.

use super::select::top_k_plus_window;
use super::{
    HeadObservation, HeadState, KvPolicy, Needs, ParamField, ParamSpec, PolicyError,
    RedundancyPath, Scored,
};
use crate::config::CompressionConfig;

const PARAMS: [ParamSpec; 1] = [RECENT];

/// The share of the budget kept for the most recent slots (H2O's is one half).
pub(crate) const RECENT: ParamSpec = ParamSpec {
    name: "recent",
    help: "share of the budget kept for the most recent slots",
    min: 0.0,
    max: 1.0,
    open: false,
    integer: false,
    default: 0.5,
    field: ParamField::Extra(0),
};

/// `floor(budget * share)` recent slots, at least the window (the policies that take a
/// share from [`RECENT`] but, unlike H2O, observe the window's queries).
pub(crate) fn recent_slots(cfg: &CompressionConfig, share: f64) -> usize {
    ((cfg.budget as f64 * share).floor() as usize).clamp(cfg.window.min(cfg.budget), cfg.budget)
}

/// H2O: the `B/2` most recent slots and the `B - B/2` heaviest others.
#[derive(Debug, Clone, Copy)]
pub struct H2o;

impl KvPolicy for H2o {
    fn name(&self) -> &'static str {
        "h2o"
    }

    fn about(&self) -> &'static str {
        "H2O: accumulated attention (heavy hitters) plus B/2 recent slots (arXiv 2306.14048)"
    }

    fn needs(&self) -> Needs {
        Needs {
            attention_mass: true,
            ..Needs::default()
        }
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn protected_recent(&self, cfg: &CompressionConfig) -> usize {
        // B/2 at the default share: `floor(B * 0.5)`, whatever the window.
        ((cfg.budget as f64 * RECENT.get(cfg)).floor() as usize).min(cfg.budget)
    }

    fn score(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        _state: &mut HeadState,
        _path: RedundancyPath,
    ) -> Result<Scored, PolicyError> {
        let candidates = obs.len.saturating_sub(self.protected_recent(cfg));
        Ok(Scored {
            score: obs.h2o_scores[..candidates]
                .iter()
                .map(|&x| f64::from(x))
                .collect(),
            // The inspector shows every slot's accumulated attention, recent ones too.
            importance: obs.h2o_scores.to_vec(),
            ..Scored::default()
        })
    }
}

/// Kept slots, ascending. `accumulated`: `[len]` attention probability mass each slot has
/// received since it entered the cache. Ties go to the lower (older) index.
/// The scalar reference the seam's H2O (default share) is tested against.
pub fn h2o_keep(accumulated: &[f32], budget: usize) -> Vec<usize> {
    let len = accumulated.len();
    if len <= budget {
        return (0..len).collect();
    }
    let recent = budget / 2;
    let scores: Vec<f64> = accumulated[..len - recent]
        .iter()
        .map(|&x| f64::from(x))
        .collect();
    top_k_plus_window(&scores, budget, recent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_kept_set() {
        // budget 4: 2 recent (slots 6, 7) and the 2 heaviest of slots 0..6.
        let acc = [0.9, 0.1, 0.5, 0.05, 0.7, 0.2, 0.0, 0.0];
        assert_eq!(h2o_keep(&acc, 4), vec![0, 4, 6, 7]);
        // Recent slots are kept even with no mass; heavy ones of the recent part do not
        // count twice.
        let acc = [0.0, 0.3, 0.0, 9.0, 9.0];
        assert_eq!(h2o_keep(&acc, 3), vec![1, 3, 4]);
    }

    #[test]
    fn odd_budget_and_ties() {
        // budget 5: 2 recent, 3 heavy; ties to the older slot.
        let acc = [1.0, 1.0, 1.0, 1.0, 2.0, 0.0, 0.0];
        assert_eq!(h2o_keep(&acc, 5), vec![0, 1, 4, 5, 6]);
    }

    #[test]
    fn short_cache_kept_whole() {
        assert_eq!(h2o_keep(&[0.1, 0.2], 4), vec![0, 1]);
        assert_eq!(h2o_keep(&[0.1; 4], 4), vec![0, 1, 2, 3]);
    }
}
