//! KeyDiff (Park et al., arXiv 2504.15364): keep the keys least like the others. A slot's
//! score is minus the cosine between its key and the anchor, the mean of all `L`
//! normalised keys of the head (NVIDIA kvpress `keydiff_press.py`). It reads no
//! attention at all, so it works where attention scores cannot be observed. The last
//! `w` slots are kept as for every scored policy (kvpress's press protects none).
//!
//! Owns: that score. Must not know: the engine, the other policies.

use super::{HeadObservation, HeadState, KvPolicy, Needs, PolicyError, RedundancyPath, Scored};
use crate::config::CompressionConfig;

/// KeyDiff: the keys farthest from the mean key.
#[derive(Debug, Clone, Copy)]
pub struct KeyDiff;

/// `[L - w]` minus the cosine of each candidate's key with the mean normalised key
/// (`keys`: `[L, d]`).
pub fn keydiff_scores(keys: &[f32], d: usize, window: usize) -> Vec<f64> {
    let len = keys.len().checked_div(d).unwrap_or(0);
    let norm = |row: &[f32]| {
        row.iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt()
    };
    let mut anchor = vec![0.0f64; d];
    for row in keys.chunks_exact(d) {
        let inv = 1.0 / (norm(row) + 1e-8);
        for (a, &x) in anchor.iter_mut().zip(row) {
            *a += f64::from(x) * inv;
        }
    }
    let anchor_norm = anchor.iter().map(|a| a * a).sum::<f64>().sqrt() / len.max(1) as f64;
    keys.chunks_exact(d)
        .take(len.saturating_sub(window))
        .map(|row| {
            let dot: f64 = row
                .iter()
                .zip(&anchor)
                .map(|(&x, &a)| f64::from(x) * a / len as f64)
                .sum();
            -dot / ((norm(row) + 1e-8) * (anchor_norm + 1e-8))
        })
        .collect()
}

impl KvPolicy for KeyDiff {
    fn name(&self) -> &'static str {
        "keydiff"
    }

    fn about(&self) -> &'static str {
        "KeyDiff: keys least similar to the mean key, no attention needed (arXiv 2504.15364)"
    }

    fn needs(&self) -> Needs {
        Needs {
            keys: true,
            ..Needs::default()
        }
    }

    fn score(
        &self,
        _cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        _state: &mut HeadState,
        _path: RedundancyPath,
    ) -> Result<Scored, PolicyError> {
        let keys = obs.keys.to_f32();
        let score = keydiff_scores(&keys, obs.head_dim, obs.window);
        Ok(Scored {
            redundancy: score.iter().map(|s| -s).collect(),
            score,
            ..Scored::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyKind;
    use crate::policy::{select_keep, KeyRows};

    /// Three keys along one direction, two off it: the outliers are kept first.
    #[test]
    fn keeps_the_keys_unlike_the_mean() {
        let d = 2;
        #[rustfmt::skip]
        let keys = [
            1.0, 0.0,   1.0, 0.05,   0.0, 1.0,   2.0, 0.0,   -1.0, 0.2,   1.0, 0.0,
        ];
        let s = keydiff_scores(&keys, d, 1);
        assert_eq!(s.len(), 5);
        // Slot 4 points away from the mean, slot 2 across it; slots 0, 1, 3 along it.
        assert!(s[4] > s[2] && s[2] > s[0] && s[2] > s[1] && s[2] > s[3]);
        // Scale does not matter: slot 3 is slot 0 doubled.
        assert!((s[3] - s[0]).abs() < 1e-6);
        let cfg = CompressionConfig {
            policy: "keydiff".parse::<PolicyKind>().expect("registered"),
            budget: 3,
            buffer: 1,
            window: 1,
            sinks: 0,
            ..CompressionConfig::default()
        };
        let obs = HeadObservation {
            len: 6,
            head_dim: d,
            keys: KeyRows::flat_f32(&keys, d),
            group: 1,
            window: 1,
            window_logits: &[],
            h2o_scores: &[],
            values: &[],
        };
        let kept = select_keep(&cfg, &obs, &mut HeadState::new()).expect("keep");
        assert_eq!(kept, vec![2, 4, 5]);
    }
}
