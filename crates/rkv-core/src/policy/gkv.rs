//! G-KV (arXiv 2512.00504, microsoft/G-KV): a global score that remembers how much a slot
//! mattered at earlier compressions, decayed, with R-KV's redundancy on top.
//!
//! Per (layer, KV head), at each compression of `L` slots with window `w`
//! (`gkv/model/compression/score_based.py` and `gkv/utils/compression_score.py` of the
//! reference, at the flags of its `scripts/inference.sh`):
//! - local `[L - w]`: the window queries' attention over the candidates, mean over the
//!   window, no pooling, divided by its maximum;
//! - global = `max(alpha * old, local)`, `old` the global score the slot was kept with
//!   at the previous compression (a slot that was not scored then takes its local
//!   score), alpha 0.8;
//! - redundancy: R-KV's, divided by its maximum;
//! - score = `lambda * global - (1 - lambda) * redundancy`, lambda 0.5; top `B - w` plus
//!   the window; the kept candidates carry their global score to the next compression.
//!
//! Two differences from the reference, both from rkv's shared observation: the maximum
//! over a GQA group is taken on the logits as the engine captures them (the reference
//! takes it on probabilities), and each window query's softmax runs over the candidates
//! only (the reference's includes the window's own slots). Both keep a slot's rank
//! within one query.
//! Must not know: the engine, the other policies.

use super::rkv::THRESHOLD;
use super::with_redundancy::{divide_by_max, oracle_redundancy, select_with_redundancy};
use super::{
    importance, Explained, HeadObservation, HeadState, KvPolicy, Needs, ParamField, ParamSpec,
    PolicyError, RedundancyPath, Scored,
};
use crate::config::CompressionConfig;

const PARAMS: [ParamSpec; 3] = [
    ParamSpec {
        name: "alpha",
        help: "decay of a slot's global score per compression",
        min: 0.0,
        max: 1.0,
        open: false,
        integer: false,
        default: 0.8,
        field: ParamField::Extra(0),
    },
    ParamSpec {
        name: "lambda",
        help: "score = lambda * global - (1 - lambda) * redundancy",
        min: 0.0,
        max: 1.0,
        open: false,
        integer: false,
        default: 0.5,
        field: ParamField::Extra(1),
    },
    THRESHOLD,
];

/// G-KV: decayed global attention minus redundancy.
#[derive(Debug, Clone, Copy)]
pub struct Gkv;

/// `[L - w]` global scores: `max(alpha * carried, local)` where a slot carries one.
pub fn global_scores(local: &[f64], carried: &[f32], alpha: f64) -> Vec<f64> {
    local
        .iter()
        .enumerate()
        .map(|(j, &l)| match carried.get(j) {
            Some(&old) if old.is_finite() => (alpha * f64::from(old)).max(l),
            _ => l,
        })
        .collect()
}

impl Gkv {
    /// The terms of one head from R-KV's `redundancy` (`[L - w]`): the global scores
    /// (`[L - w]`), the score, and the global scores to carry (`[L]`, the window's
    /// slots, which were not scored, carry -inf: nothing).
    fn terms(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &HeadState,
        redundancy: &[f64],
    ) -> Scored {
        let n = obs.len - obs.window;
        let attn = importance::importance(obs.window_logits, obs.group, obs.window, n, 1);
        let global = global_scores(&divide_by_max(&attn), state.carried(), PARAMS[0].get(cfg));
        let lambda = PARAMS[1].get(cfg);
        let red = divide_by_max(redundancy);
        let score = global
            .iter()
            .zip(&red)
            .map(|(&g, &r)| lambda * g - (1.0 - lambda) * r)
            .collect();
        let importance: Vec<f32> = global.iter().map(|&g| g as f32).collect();
        let mut carried = importance.clone();
        carried.resize(obs.len, f32::NEG_INFINITY);
        Scored {
            score,
            importance,
            redundancy: red,
            carried: Some(carried),
        }
    }
}

impl KvPolicy for Gkv {
    fn name(&self) -> &'static str {
        "gkv"
    }

    fn about(&self) -> &'static str {
        "G-KV: decayed global attention minus redundancy (arXiv 2512.00504)"
    }

    fn needs(&self) -> Needs {
        Needs {
            window_logits: true,
            keys: true,
            redundancy: true,
            ..Needs::default()
        }
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    /// The terms without committing anything (the redundancy from scratch).
    fn score(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &mut HeadState,
        _path: RedundancyPath,
    ) -> Result<Scored, PolicyError> {
        Ok(Scored {
            carried: None,
            ..self.terms(cfg, obs, state, &oracle_redundancy(cfg, obs))
        })
    }

    fn explain(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &mut HeadState,
        path: RedundancyPath,
    ) -> Result<Explained, PolicyError> {
        // The redundancy pass is committed to the state with the kept slots, and the
        // kept candidates carry their global score.
        select_with_redundancy(cfg, obs, state, path, obs.window, |state, redundancy| {
            self.terms(cfg, obs, state, &redundancy)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyKind;
    use crate::policy::tests::noise;
    use crate::policy::{redundancy_oracle, select_keep, select_keep_with, KeyRows};

    /// A scalar reference written from the formulas above, in f64, from scratch.
    fn reference(
        logits: &[f32], // [w, L - w]
        keys: &[f32],   // [L, d]
        d: usize,
        w: usize,
        budget: usize,
        carried: &[f32],
        (alpha, lambda, threshold): (f64, f64, f32),
    ) -> (Vec<usize>, Vec<f64>) {
        let len = keys.len() / d;
        let n = len - w;
        let mut local = vec![0.0f64; n];
        for q in 0..w {
            let row = &logits[q * n..(q + 1) * n];
            let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
            let z: f64 = row.iter().map(|&x| (x as f64 - m).exp()).sum();
            for j in 0..n {
                local[j] += (row[j] as f64 - m).exp() / z / w as f64;
            }
        }
        let lmax = local.iter().cloned().fold(f64::MIN, f64::max);
        let global: Vec<f64> = (0..n)
            .map(|j| {
                let l = local[j] / lmax;
                match carried.get(j) {
                    Some(&c) if c.is_finite() => (alpha * c as f64).max(l),
                    _ => l,
                }
            })
            .collect();
        let red = redundancy_oracle(keys, d, threshold, w).redundancy;
        let rmax = red.iter().cloned().fold(f64::MIN, f64::max);
        let score: Vec<f64> = (0..n)
            .map(|j| lambda * global[j] - (1.0 - lambda) * red[j] / rmax)
            .collect();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
        let mut kept: Vec<usize> = order[..budget - w].to_vec();
        kept.extend(n..len);
        kept.sort_unstable();
        (kept, global)
    }

    /// Over several compressions of a growing cache, the fast and oracle paths keep what
    /// the scalar reference keeps, and carry the kept candidates' global scores.
    #[test]
    fn matches_the_scalar_reference_across_compressions() {
        let (d, w, budget) = (8, 4, 24);
        let cfg = CompressionConfig {
            policy: "gkv".parse::<PolicyKind>().expect("registered"),
            budget,
            buffer: 8,
            window: w,
            ..CompressionConfig::default()
        };
        for path in [RedundancyPath::Fast, RedundancyPath::Oracle] {
            let mut state = HeadState::new();
            let mut keys: Vec<f32> = (0..40 * d)
                .map(|e| (((e / d) % 5 * d + e % d) as f32 * 0.7).sin())
                .zip(noise(1, 40 * d))
                .map(|(a, b)| a + 0.3 * b)
                .collect();
            let mut carried_want: Vec<f32> = Vec::new();
            for round in 0..4u64 {
                let len = keys.len() / d;
                let logits: Vec<f32> = noise(10 + round, w * (len - w))
                    .iter()
                    .map(|x| x * 5.0)
                    .collect();
                let obs = HeadObservation {
                    len,
                    head_dim: d,
                    keys: KeyRows::flat_f32(&keys, d),
                    group: 1,
                    window: w,
                    window_logits: &logits,
                    h2o_scores: &[],
                    values: &[],
                };
                let (want, global) =
                    reference(&logits, &keys, d, w, budget, &carried_want, (0.8, 0.5, 0.5));
                let got = select_keep_with(&cfg, &obs, &mut state, path).expect("select");
                assert_eq!(got, want, "{path:?} round {round}");
                carried_want = want
                    .iter()
                    .map(|&s| global.get(s).map_or(f32::NEG_INFINITY, |&g| g as f32))
                    .collect();
                assert_eq!(state.carried().len(), budget);
                for (a, b) in state.carried().iter().zip(&carried_want) {
                    assert!(a == b || (a - b).abs() < 1e-6, "{a} vs {b}");
                }
                // The cache keeps the selection and 8 new slots arrive.
                let mut next: Vec<f32> = want
                    .iter()
                    .flat_map(|&s| keys[s * d..(s + 1) * d].to_vec())
                    .collect();
                next.extend(noise(30 + round, 8 * d));
                keys = next;
            }
        }
        // A plain select_keep (fast path) agrees as well on a fresh state.
        let keys = noise(3, 30 * d);
        let logits = noise(4, w * 26);
        let obs = HeadObservation {
            len: 30,
            head_dim: d,
            keys: KeyRows::flat_f32(&keys, d),
            group: 1,
            window: w,
            window_logits: &logits,
            h2o_scores: &[],
            values: &[],
        };
        let (want, _) = reference(&logits, &keys, d, w, budget, &[], (0.8, 0.5, 0.5));
        assert_eq!(
            select_keep(&cfg, &obs, &mut HeadState::new()).expect("keep"),
            want
        );
    }

    #[test]
    fn a_decayed_old_score_outranks_a_lower_local_one() {
        let g = global_scores(&[0.1, 0.9, 0.5], &[1.0, 0.2, f32::NEG_INFINITY], 0.8);
        assert_eq!(g.len(), 3);
        assert!((g[0] - 0.8).abs() < 1e-12 && (g[1] - 0.9).abs() < 1e-12);
        assert!((g[2] - 0.5).abs() < 1e-12);
    }
}
