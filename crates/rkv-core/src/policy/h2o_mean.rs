//! Mean-attention heavy hitters (`h2o-mean`): H2O's accumulated attention divided by the
//! number of queries that have attended each slot, so that a slot is ranked by how much
//! attention it gets per query rather than by how long it has been in the cache (H2O's
//! sum favours old slots), with a smaller share of the budget kept for the newest slots
//! (1/8 against H2O's 1/2). Optionally, attention received long ago weighs less
//! (`halflife`), and a share of the budget can be kept for the slots whose values span
//! the widest range (`values`, VaSE's guard against repetition loops). The mean is what
//! the policy sweep of docs/compression.md found closest
//! to FullKV on both models; it observes exactly what H2O observes, at H2O's cost.
//!
//! The count needs no new observation: every query attends every slot before it, so a
//! slot `i` of a cache of `L` slots that no compression has scored yet has been seen by
//! `L - i` queries, and a kept slot carries its count to the next compression
//! ([`super::HeadState::carried`]).
//! Must not know: the engine, the other policies.

use super::h2o::{recent_slots, RECENT};
use super::select::top_k_plus_window;
use super::{
    HeadObservation, HeadState, KvPolicy, Needs, ParamField, ParamSpec, PolicyError,
    RedundancyPath, Scored,
};
use crate::config::CompressionConfig;

const PARAMS: [ParamSpec; 4] = [
    ParamSpec {
        default: 0.125,
        ..RECENT
    },
    ParamSpec {
        name: "halflife",
        help: "queries over which attention received counts half as much (0: never decays)",
        min: 0.0,
        max: 1e9,
        open: false,
        integer: false,
        default: 0.0,
        field: ParamField::Extra(1),
    },
    ParamSpec {
        name: "power",
        help: "score = mass / count^power (0: H2O's sum, 1: the mean)",
        min: 0.0,
        max: 2.0,
        open: false,
        integer: false,
        default: 1.0,
        field: ParamField::Extra(2),
    },
    ParamSpec {
        name: "values",
        help: "share of the budget kept for the largest value ranges (VaSE)",
        min: 0.0,
        max: 1.0,
        open: false,
        integer: false,
        default: 0.0,
        field: ParamField::Extra(3),
    },
];

/// What is carried per slot: `[queries, mass, weighted mass]`.
const CARRIED: usize = 3;

/// Each slot's attention per query that saw it, `[len]`, from the accumulated mass
/// `[len]` and what the last compression carried (`[c, 3]` rows of [`CARRIED`] for the
/// first `c` slots). A slot kept at the last compression has been seen by its carried
/// count plus one query per slot appended since; a newer slot `i` by the `len - i`
/// queries from its own on (a prompt's too: its queries attend causally). With a
/// `halflife` (in queries), older queries weigh less: mass and count received before
/// the last compression are scaled by `0.5^(steps since / halflife)`; 0 keeps them
/// whole (the lifetime mean, `mass / count`).
///
/// Returns the rates and the `[len, 3]` rows to carry.
pub fn attention_rates(mass: &[f32], carried: &[f32], halflife: f64) -> (Vec<f64>, Vec<f32>) {
    let len = mass.len();
    let c = (carried.len() / CARRIED).min(len);
    let since = (len - c) as f64;
    let keep = if halflife > 0.0 {
        0.5f64.powf(since / halflife)
    } else {
        1.0
    };
    let mut rates = Vec::with_capacity(len);
    let mut rows = Vec::with_capacity(len * CARRIED);
    for (i, &m) in mass.iter().enumerate() {
        let m = f64::from(m);
        let (count, weighted) = if i < c {
            let row = &carried[i * CARRIED..(i + 1) * CARRIED];
            let (count, old_mass, weighted) =
                (f64::from(row[0]), f64::from(row[1]), f64::from(row[2]));
            (keep * count + since, keep * weighted + (m - old_mass))
        } else {
            ((len - i) as f64, m)
        };
        rates.push(weighted / count.max(1.0));
        rows.extend([count as f32, m as f32, weighted as f32]);
    }
    (rates, rows)
}

/// Mean-attention heavy hitters plus the newest slots.
#[derive(Debug, Clone, Copy)]
pub struct H2oMean;

impl KvPolicy for H2oMean {
    fn name(&self) -> &'static str {
        "h2o-mean"
    }

    fn about(&self) -> &'static str {
        "attention per query since a slot entered (H2O's sum over its age), B/8 recent"
    }

    fn needs(&self) -> Needs {
        Needs {
            attention_mass: true,
            ..Needs::default()
        }
    }

    fn needs_for(&self, cfg: &CompressionConfig) -> Needs {
        Needs {
            values: PARAMS[3].get(cfg) > 0.0,
            ..self.needs()
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
        let n = obs.len - self.protected_recent(cfg);
        let (rates, rows) = attention_rates(obs.h2o_scores, state.carried(), PARAMS[1].get(cfg));
        // mass / count^power = rate * count^(1 - power).
        let power = PARAMS[2].get(cfg);
        let score: Vec<f64> = if power == 1.0 {
            rates[..n].to_vec()
        } else {
            (0..n)
                .map(|j| rates[j] * f64::from(rows[j * CARRIED].max(1.0)).powf(1.0 - power))
                .collect()
        };
        // VaSE's guard (arXiv 2606.03928, terarachang/VaSE): the candidates whose value
        // rows span the widest range (max - min, as its scripts measure) are always kept.
        let mut score = score;
        let guard = (PARAMS[3].get(cfg) * cfg.budget as f64).floor() as usize;
        if guard > 0 && obs.head_dim > 0 {
            let range: Vec<f64> = obs
                .values
                .chunks_exact(obs.head_dim)
                .take(n)
                .map(|v| {
                    let (lo, hi) = v
                        .iter()
                        .fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
                    f64::from(hi - lo)
                })
                .collect();
            for j in super::select::top_k(&range, guard) {
                score[j] = f64::INFINITY;
            }
        }
        Ok(Scored {
            score,
            importance: rates[..n].iter().map(|&r| r as f32).collect(),
            redundancy: Vec::new(),
            carried: Some(rows),
        })
    }
}

/// Kept slots of a first compression, ascending (the scalar reference of the tests):
/// the `recent` newest and the others with the largest `mass[i] / (len - i)`.
pub fn h2o_mean_keep(mass: &[f32], budget: usize, recent: usize) -> Vec<usize> {
    let len = mass.len();
    if len <= budget {
        return (0..len).collect();
    }
    let recent = recent.min(budget);
    let rate: Vec<f64> = mass[..len - recent]
        .iter()
        .enumerate()
        .map(|(i, &m)| f64::from(m) / (len - i) as f64)
        .collect();
    top_k_plus_window(&rate, budget, recent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyKind;
    use crate::policy::{select_keep, KeyRows};

    /// The counts and rates carried across two compressions, by hand: 4 slots, keep
    /// slots 0 and 2, then 2 more slots arrive.
    #[test]
    fn rates_carry_counts_and_mass_across_compressions() {
        let (rates, rows) = attention_rates(&[4.0, 3.0, 2.0, 1.0], &[], 0.0);
        assert_eq!(rates, vec![1.0, 1.0, 1.0, 1.0]);
        assert_eq!(
            rows,
            vec![4.0, 4.0, 4.0, 3.0, 3.0, 3.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0]
        );
        // Kept: slots 0 and 2; slots 2 and 3 are new; 2 queries since for the old ones.
        let carried = [4.0, 4.0, 4.0, 2.0, 2.0, 2.0];
        let (rates, _) = attention_rates(&[5.0, 4.0, 1.0, 0.5], &carried, 0.0);
        assert_eq!(rates, vec![5.0 / 6.0, 1.0, 0.5, 0.5]);
        // A half-life of 2 queries halves what came before the last compression.
        let (rates, rows) = attention_rates(&[5.0, 4.0, 1.0, 0.5], &carried, 2.0);
        assert_eq!(rates[0], (0.5 * 4.0 + 1.0) / (0.5 * 4.0 + 2.0));
        assert_eq!(rates[1], (0.5 * 2.0 + 2.0) / (0.5 * 2.0 + 2.0));
        assert_eq!(&rows[..3], &[4.0, 5.0, 3.0]);
    }

    /// Through the seam: a slot heavy per query beats an old slot heavy in sum.
    #[test]
    fn ranks_by_attention_per_query() {
        let cfg = CompressionConfig {
            policy: "h2o-mean".parse::<PolicyKind>().expect("registered"),
            budget: 4,
            buffer: 2,
            window: 1,
            sinks: 0,
            ..CompressionConfig::default()
        };
        // Per query: slot 0 8/8, slot 5 2.5/3, slot 6 1.2/2 = 0.6, slot 2 only 3/6 = 0.5
        // though its sum is larger. Budget 4, recent floor(4 / 8) = 0 raised to the
        // window, 1.
        let mass = [8.0, 1.0, 3.0, 0.5, 2.0, 2.5, 1.2, 0.2];
        let obs = HeadObservation {
            len: 8,
            head_dim: 1,
            keys: KeyRows::flat_f32(&[], 1),
            group: 1,
            window: 1,
            window_logits: &[],
            h2o_scores: &mass,
            values: &[],
        };
        let kept = select_keep(&cfg, &obs, &mut HeadState::new()).expect("keep");
        assert_eq!(kept, h2o_mean_keep(&mass, 4, 1));
        assert_eq!(kept, vec![0, 5, 6, 7]);
    }

    /// With the value guard on, the slot whose value row spans the widest range is kept
    /// though its attention is the lowest, and only then are values required.
    #[test]
    fn value_guard_keeps_the_widest_value_range() {
        let mut cfg = CompressionConfig {
            policy: "h2o-mean".parse::<PolicyKind>().expect("registered"),
            budget: 4,
            buffer: 2,
            window: 1,
            sinks: 0,
            ..CompressionConfig::default()
        };
        let mass = [8.0, 1.0, 3.0, 0.01, 2.0, 2.5, 1.2, 0.2];
        let values: Vec<f32> = (0..8)
            .flat_map(|i| if i == 3 { [-5.0, 5.0] } else { [0.1, 0.2] })
            .collect();
        let obs = HeadObservation {
            len: 8,
            head_dim: 2,
            keys: KeyRows::flat_f32(&[], 2),
            group: 1,
            window: 1,
            window_logits: &[],
            h2o_scores: &mass,
            values: &values,
        };
        let plain = select_keep(&cfg, &obs, &mut HeadState::new()).expect("keep");
        assert_eq!(plain, vec![0, 5, 6, 7]);
        cfg.set_param("values", 0.25).expect("values");
        let guarded = select_keep(&cfg, &obs, &mut HeadState::new()).expect("keep");
        assert_eq!(guarded, vec![0, 3, 5, 7]);
        let without = HeadObservation { values: &[], ..obs };
        assert!(select_keep(&cfg, &without, &mut HeadState::new()).is_err());
    }
}
