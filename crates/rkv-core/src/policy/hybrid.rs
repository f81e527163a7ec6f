//! Hybrid: H2O's accumulated attention, the window queries' attention (SnapKV's
//! importance) and R-KV's redundancy in one score, with a recent share kept whole.
//! The measurement-driven mix the policies issue asks to try ("a hybrid of a recency
//! window, cumulative attention and redundancy"); docs/compression.md has the numbers.
//!
//! Per (layer, KV head), at a compression of `L` slots, `r` recent slots protected:
//! `score = (1 - beta) * mass / max(mass) + beta * importance / max(importance)
//!          - gamma * redundancy / max(redundancy)` over the candidates `0..L - r`.
//! Must not know: the engine, the other policies.

use super::h2o::{recent_slots, RECENT};
use super::h2o_mean::attention_rates;
use super::rkv::THRESHOLD;
use super::with_redundancy::{divide_by_max, oracle_redundancy, select_with_redundancy};
use super::{
    importance, Explained, HeadObservation, HeadState, KvPolicy, Needs, ParamField, ParamSpec,
    PolicyError, RedundancyPath, Scored,
};
use crate::config::CompressionConfig;

const PARAMS: [ParamSpec; 6] = [
    ParamSpec {
        field: ParamField::Extra(0),
        default: 0.125,
        ..RECENT
    },
    ParamSpec {
        name: "beta",
        help: "weight of the window queries' attention against the accumulated attention",
        min: 0.0,
        max: 1.0,
        open: false,
        integer: false,
        default: 0.0,
        field: ParamField::Extra(1),
    },
    ParamSpec {
        name: "gamma",
        help: "weight of the redundancy subtracted",
        min: 0.0,
        max: 10.0,
        open: false,
        integer: false,
        default: 0.0,
        field: ParamField::Extra(2),
    },
    THRESHOLD,
    ParamSpec {
        name: "mean",
        help: "1: divide each slot's accumulated attention by the queries that saw it",
        min: 0.0,
        max: 1.0,
        open: false,
        integer: true,
        default: 1.0,
        field: ParamField::Extra(3),
    },
    ParamSpec {
        name: "halflife",
        help: "steps over which attention received counts half as much (0: never decays)",
        min: 0.0,
        max: 1e9,
        open: false,
        integer: false,
        default: 0.0,
        field: ParamField::Extra(4),
    },
];

/// Accumulated attention, window attention and redundancy, mixed. The defaults (an
/// eighth of the budget recent, the mean, beta 0, gamma 0) are the best of the sweep in
/// docs/compression.md (every redundancy weight tried made it worse): they keep what
/// `h2o-mean` keeps.
#[derive(Debug, Clone, Copy)]
pub struct Hybrid;

impl Hybrid {
    /// `[L - r]` the score of the candidates from R-KV's `redundancy` (`[L - w]`).
    fn mix(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &HeadState,
        redundancy: &[f64],
    ) -> Scored {
        let n = obs.len - self.protected_recent(cfg);
        let (beta, gamma) = (PARAMS[1].get(cfg), PARAMS[2].get(cfg));
        let (mean, halflife) = (PARAMS[4].get(cfg) == 1.0, PARAMS[5].get(cfg));
        let (mass, stats) = if mean || halflife > 0.0 {
            let (rates, rows) = attention_rates(obs.h2o_scores, state.carried(), halflife);
            (divide_by_max(&rates[..n]), Some(rows))
        } else {
            (divide_by_max(&obs.h2o_scores[..n]), None)
        };
        let imp = if beta > 0.0 {
            let all = obs.len - obs.window;
            let i =
                importance::importance(obs.window_logits, obs.group, obs.window, all, cfg.kernel);
            divide_by_max(&i[..n])
        } else {
            vec![0.0; n]
        };
        let red = divide_by_max(&redundancy[..n.min(redundancy.len())]);
        let score = (0..n)
            .map(|j| {
                (1.0 - beta) * mass[j] + beta * imp[j] - gamma * red.get(j).copied().unwrap_or(0.0)
            })
            .collect();
        Scored {
            score,
            importance: mass.iter().map(|&m| m as f32).collect(),
            redundancy: red,
            carried: stats,
        }
    }
}

impl KvPolicy for Hybrid {
    fn name(&self) -> &'static str {
        "hybrid"
    }

    fn about(&self) -> &'static str {
        "accumulated attention + window attention - redundancy, recent share kept"
    }

    fn needs(&self) -> Needs {
        Needs {
            window_logits: true,
            attention_mass: true,
            keys: true,
            redundancy: true,
            ..Needs::default()
        }
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn protected_recent(&self, cfg: &CompressionConfig) -> usize {
        recent_slots(cfg, PARAMS[0].get(cfg))
    }

    fn score(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &mut HeadState,
        _path: RedundancyPath,
    ) -> Result<Scored, PolicyError> {
        Ok(Scored {
            carried: None,
            ..self.mix(cfg, obs, state, &oracle_redundancy(cfg, obs))
        })
    }

    fn explain(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &mut HeadState,
        path: RedundancyPath,
    ) -> Result<Explained, PolicyError> {
        let recent = self.protected_recent(cfg);
        select_with_redundancy(cfg, obs, state, path, recent, |state, red| {
            self.mix(cfg, obs, state, &red)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyKind;
    use crate::policy::tests::noise;
    use crate::policy::{redundancy_oracle, select_keep_with, KeyRows};

    /// The score written out in f64 from the formula above, and its top-k plus the
    /// recent slots.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        mass: &[f32],
        logits: &[f32],
        keys: &[f32],
        d: usize,
        (w, kernel, budget, recent): (usize, usize, usize, usize),
        (beta, gamma, threshold, mean): (f64, f64, f32, bool),
    ) -> Vec<usize> {
        let len = mass.len();
        // A first compression: slot i has been seen by the len - i queries from its own.
        let rate: Vec<f64> = (0..len)
            .map(|i| {
                let m = f64::from(mass[i]);
                if mean {
                    m / (len - i) as f64
                } else {
                    m
                }
            })
            .collect();
        let all = len - w;
        let mut imp = vec![0.0f64; all];
        for q in 0..w {
            let row = &logits[q * all..(q + 1) * all];
            let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
            let z: f64 = row.iter().map(|&x| (x as f64 - m).exp()).sum();
            for j in 0..all {
                imp[j] += (row[j] as f64 - m).exp() / z / w as f64;
            }
        }
        let h = kernel / 2;
        let pooled: Vec<f64> = (0..all)
            .map(|j| {
                (j.saturating_sub(h)..(j + h + 1).min(all))
                    .map(|i| imp[i])
                    .fold(f64::MIN, f64::max)
            })
            .collect();
        let red = redundancy_oracle(keys, d, threshold, w).redundancy;
        let n = len - recent;
        let max = |x: &[f64]| x.iter().cloned().fold(f64::MIN, f64::max);
        let mass: Vec<f64> = rate[..n].to_vec();
        let (mm, im, rm) = (max(&mass), max(&pooled[..n]), max(&red[..n]));
        let score: Vec<f64> = (0..n)
            .map(|j| (1.0 - beta) * mass[j] / mm + beta * pooled[j] / im - gamma * red[j] / rm)
            .collect();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
        let mut kept = order[..budget - recent].to_vec();
        kept.extend(n..len);
        kept.sort_unstable();
        kept
    }

    #[test]
    fn matches_the_scalar_reference() {
        let (d, w, len) = (8, 4, 48);
        for (budget, share, beta, gamma, mean) in [
            (24, 0.5, 0.2, 0.0, false),
            (24, 0.25, 0.5, 0.3, false),
            (20, 0.0, 0.0, 1.0, true),
            (32, 0.5, 1.0, 0.0, false),
            (24, 0.125, 0.0, 0.0, true),
            (24, 0.25, 0.3, 0.2, true),
        ] {
            let mut cfg = CompressionConfig {
                policy: "hybrid".parse::<PolicyKind>().expect("registered"),
                budget,
                buffer: 8,
                window: w,
                kernel: 3,
                ..CompressionConfig::default()
            };
            cfg.set_param("recent", share).expect("recent");
            cfg.set_param("beta", beta).expect("beta");
            cfg.set_param("gamma", gamma).expect("gamma");
            cfg.set_param("mean", f64::from(u8::from(mean)))
                .expect("mean");
            let recent = ((budget as f64 * share).floor() as usize).max(w);
            let keys: Vec<f32> = (0..len * d)
                .map(|e| (((e / d) % 6 * d + e % d) as f32 * 0.7).sin())
                .zip(noise(1, len * d))
                .map(|(a, b)| a + 0.3 * b)
                .collect();
            let logits: Vec<f32> = noise(2, w * (len - w)).iter().map(|x| x * 4.0).collect();
            let mass: Vec<f32> = noise(3, len).iter().map(|x| x.abs() * 3.0).collect();
            let obs = HeadObservation {
                len,
                head_dim: d,
                keys: KeyRows::flat_f32(&keys, d),
                group: 1,
                window: w,
                window_logits: &logits,
                h2o_scores: &mass,
                values: &[],
            };
            let want = reference(
                &mass,
                &logits,
                &keys,
                d,
                (w, 3, budget, recent),
                (beta, gamma, 0.5, mean),
            );
            for path in [RedundancyPath::Fast, RedundancyPath::Oracle] {
                let got = select_keep_with(&cfg, &obs, &mut HeadState::new(), path).expect("keep");
                assert_eq!(
                    got, want,
                    "budget {budget} share {share} beta {beta} gamma {gamma} mean {mean}"
                );
            }
        }
    }

    /// At its defaults (no window term, no redundancy, mean attention, B/8 recent) the
    /// hybrid keeps what `h2o-mean` keeps, observing more.
    #[test]
    fn defaults_keep_what_h2o_mean_keeps() {
        let (d, w, len, budget) = (4, 8, 300, 64);
        let cfg = CompressionConfig {
            policy: "hybrid".parse::<PolicyKind>().expect("registered"),
            budget,
            buffer: 16,
            window: w,
            ..CompressionConfig::default()
        };
        let keys = noise(5, len * d);
        let logits = noise(6, w * (len - w));
        let mass: Vec<f32> = noise(7, len).iter().map(|x| x.abs() * 9.0).collect();
        let obs = HeadObservation {
            len,
            head_dim: d,
            keys: KeyRows::flat_f32(&keys, d),
            group: 1,
            window: w,
            window_logits: &logits,
            h2o_scores: &mass,
            values: &[],
        };
        let got = crate::policy::select_keep(&cfg, &obs, &mut HeadState::new()).expect("keep");
        assert_eq!(
            got,
            crate::policy::h2o_mean::h2o_mean_keep(&mass, budget, budget / 8)
        );
    }
}
