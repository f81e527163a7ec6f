//! Why one KV head kept what it kept: the selection of [`super::select_keep`] returned
//! with the terms that decided it, for a recorder that shows compression events
//! (`rkv inspect`).
//!
//! Owns: [`Explained`] and [`select_keep_explained`], which keeps exactly the slots
//! `select_keep` keeps and leaves the head state exactly as it leaves it (the tests say
//! so), at the price of keeping the terms instead of folding them into the score.
//! Must not know: positions, layers, events, how a recorder stores or shows the terms.

use super::{
    score_validated, select, validate_observation, HeadObservation, HeadState, PolicyError,
    RedundancyPath, StateRef,
};
use crate::config::CompressionConfig;

/// One head's selection and the terms that decided it. Candidate slots are `0..L-r` for
/// a scored policy that always keeps its `r` most recent slots (`r = w` for R-KV,
/// SnapKV, G-KV, KeyDiff; `B/2` for H2O, whose importance is the accumulated attention).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Explained {
    /// Ascending kept slot indices, as [`super::select_keep`] returns them.
    pub kept: Vec<usize>,
    /// `[L - r]` the attention-like term (R-KV and SnapKV: importance after the
    /// max-pool; G-KV: the global score; H2O: accumulated attention, all `[L]`); empty
    /// for policies without one and when the cache was not scored (`L < B`).
    pub importance: Vec<f32>,
    /// `[L - r]` the term subtracted from it (R-KV's and G-KV's redundancy; KeyDiff's
    /// cosine to the mean key); else empty.
    pub redundancy: Vec<f64>,
    /// `[L]` each slot's latest similar slot `r(i)` over all `L` slots, `None` where no
    /// key passes the threshold (R-KV only; else empty). For an evicted slot `i`, an
    /// `r(i) > i` is the newer slot whose key made `i` redundant.
    pub latest_similar: Vec<Option<usize>>,
}

/// [`super::select_keep`], returning the terms beside the kept slots.
pub fn select_keep_explained(
    cfg: &CompressionConfig,
    obs: &HeadObservation<'_>,
    state: &mut HeadState,
) -> Result<Explained, PolicyError> {
    validate_observation(cfg, obs)?;
    let policy = cfg.policy.policy();
    if obs.len < cfg.budget || !policy.compresses() {
        return Ok(Explained {
            kept: (0..obs.len).collect(),
            ..Explained::default()
        });
    }
    policy.explain(cfg, obs, state, RedundancyPath::Fast)
}

/// R-KV's and SnapKV's explained selection (the scores kept beside the kept slots).
pub(crate) fn explain_rkv_family(
    cfg: &CompressionConfig,
    obs: &HeadObservation<'_>,
    state: &mut HeadState,
    path: RedundancyPath,
) -> Result<Explained, PolicyError> {
    let (scores, pass) = score_validated(cfg, obs, StateRef::Shared(state), path)?;
    let kept = select::top_k_plus_window(&scores.score, cfg.budget, obs.window);
    let latest_similar = match pass {
        Some(pass) => {
            pass.commit(&kept, state)?;
            pass.latest()
        }
        None => Vec::new(),
    };
    Ok(Explained {
        kept,
        importance: scores.importance,
        redundancy: scores.redundancy,
        latest_similar,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyKind;
    use crate::policy::tests::noise;
    use crate::policy::{redundancy_oracle, score_head, select_keep, KeyRows};

    /// Keys of `len` slots that repeat every 7 slots with noise, so that many rows have
    /// a similar slot.
    fn keys(seed: u64, len: usize, d: usize) -> Vec<f32> {
        let n = noise(seed, len * d);
        (0..len * d)
            .map(|e| (((e / d) % 7 * d + e % d) as f32 * 0.7).sin() + 0.3 * n[e])
            .collect()
    }

    fn cfg(policy: PolicyKind) -> CompressionConfig {
        CompressionConfig {
            policy,
            budget: 24,
            buffer: 8,
            window: 4,
            kernel: 3,
            sinks: 2,
            ..CompressionConfig::default()
        }
    }

    /// Over several compressions of one head (the state carried from one to the next,
    /// new slots appended between them), every policy keeps what `select_keep` keeps and
    /// leaves the same state; the terms are the scoring's own, and R-KV's latest similar
    /// slots are the oracle's.
    #[test]
    fn explained_selection_is_select_keep_with_its_terms() {
        let (d, g) = (8, 2);
        for policy in [
            PolicyKind::RKv,
            PolicyKind::SnapKv,
            PolicyKind::H2o,
            PolicyKind::StreamingLlm,
            PolicyKind::Full,
        ] {
            let c = cfg(policy);
            let (mut plain, mut explained) = (HeadState::new(), HeadState::new());
            let mut all_keys = keys(1, 32, d);
            let mut n_redundant = 0;
            for round in 0..4u64 {
                let len = all_keys.len() / d;
                let logits: Vec<f32> = noise(10 + round, g * c.window * (len - c.window))
                    .iter()
                    .map(|x| x * 4.0)
                    .collect();
                let h2o: Vec<f32> = noise(20 + round, len).iter().map(|x| x.abs()).collect();
                let obs = HeadObservation {
                    len,
                    head_dim: d,
                    keys: KeyRows::flat_f32(&all_keys, d),
                    group: g,
                    window: c.window,
                    window_logits: &logits,
                    h2o_scores: &h2o,
                    values: &[],
                };
                let scored = score_head(&c, &obs, &plain, RedundancyPath::Fast).ok();
                let want = select_keep(&c, &obs, &mut plain).expect("select");
                let got = select_keep_explained(&c, &obs, &mut explained).expect("explain");
                assert_eq!(got.kept, want, "{policy} round {round}");
                assert_eq!(plain, explained, "{policy} round {round}: state");
                match policy {
                    PolicyKind::RKv | PolicyKind::SnapKv => {
                        let (s, _) = scored.expect("scored");
                        assert_eq!(got.importance, s.importance);
                        assert_eq!(got.redundancy, s.redundancy);
                        assert_eq!(got.importance.len(), len - c.window);
                    }
                    PolicyKind::H2o => assert_eq!(got.importance, h2o),
                    _ => assert!(got.importance.is_empty()),
                }
                if policy == PolicyKind::RKv {
                    let oracle = redundancy_oracle(&all_keys, d, c.threshold, c.window);
                    assert_eq!(got.latest_similar, oracle.latest);
                    assert_eq!(got.redundancy.len(), len - c.window);
                    n_redundant += got.latest_similar.iter().flatten().count();
                } else {
                    assert!(got.latest_similar.is_empty());
                }
                // The cache keeps the selection and 8 new slots arrive.
                let mut next: Vec<f32> = got
                    .kept
                    .iter()
                    .flat_map(|&s| all_keys[s * d..(s + 1) * d].to_vec())
                    .collect();
                next.extend(keys(30 + round, 8, d));
                all_keys = next;
            }
            if policy == PolicyKind::RKv {
                assert!(n_redundant > 0, "the keys should repeat");
            }
        }
    }

    #[test]
    fn short_caches_keep_everything_unexplained() {
        let c = cfg(PolicyKind::RKv);
        let keys = noise(5, 10 * 8);
        let logits = noise(6, 2 * 4 * 6);
        let obs = HeadObservation {
            len: 10,
            head_dim: 8,
            keys: KeyRows::flat_f32(&keys, 8),
            group: 2,
            window: 4,
            window_logits: &logits,
            h2o_scores: &[],
            values: &[],
        };
        let got = select_keep_explained(&c, &obs, &mut HeadState::new()).expect("explain");
        assert_eq!(got.kept, (0..10).collect::<Vec<_>>());
        assert!(got.importance.is_empty() && got.latest_similar.is_empty());
    }
}
