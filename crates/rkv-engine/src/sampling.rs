//! Choosing the next token from logits: greedy, temperature, top-k, top-p, seeded.
//!
//! Owns `SamplingParams` and `Sampler`. Greedy breaks ties towards the lower token id, so
//! runs are byte-for-byte reproducible.
//! Must not know: models, caches, tokenizers.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{EngineError, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = no top-k cut.
    pub top_k: usize,
    /// 1.0 = no nucleus cut.
    pub top_p: f32,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

impl SamplingParams {
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(EngineError::BadRequest(format!(
                "temperature must be a finite number >= 0, got {}",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(EngineError::BadRequest(format!(
                "top_p must be in (0, 1], got {}",
                self.top_p
            )));
        }
        Ok(())
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = StdRng::seed_from_u64(params.seed);
        Self { params, rng }
    }

    /// Picks a token from `logits`: [vocab].
    ///
    /// Without top-k the whole vocabulary is never sorted: with `top_p = 1` the draw
    /// walks the tokens in id order, and a nucleus is found among the tokens above a
    /// probability threshold that is lowered until they hold `top_p` of the mass (see
    /// [`nucleus`]); only those are sorted. Sorting all 49k logits of a small model's
    /// vocabulary cost more than its batched forward per token.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.temperature <= 0.0 || self.params.top_k == 1 {
            return argmax(logits);
        }
        let inv_t = 1.0 / self.params.temperature;
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, &l)| (i as u32, l * inv_t))
            .collect();
        if cand.is_empty() {
            return 0;
        }
        let k = self.params.top_k;
        if k > 0 && k < cand.len() {
            cand.select_nth_unstable_by(k - 1, order);
            cand.truncate(k);
        }
        let max = cand.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
        // Unnormalised probabilities, in the candidates' order (id order without top-k).
        let weights: Vec<f32> = cand.iter().map(|(_, l)| (l - max).exp()).collect();
        let sum: f32 = weights.iter().sum();
        let (ids, probs) = if self.params.top_p < 1.0 {
            nucleus(&cand, &weights, sum, self.params.top_p)
        } else {
            let ids = cand.iter().map(|c| c.0).collect();
            (ids, weights.iter().map(|w| w / sum).collect())
        };
        let total: f32 = probs.iter().sum();
        let mut r = self.rng.gen::<f32>() * total;
        for (i, p) in probs.iter().enumerate() {
            if r < *p {
                return ids[i];
            }
            r -= p;
        }
        ids[probs.len() - 1]
    }
}

/// Larger logit first, ties to the lower id: a total order, so the top-p prefix and a
/// top-k selection are the same whichever way the candidates arrive.
fn order(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// The smallest prefix of the candidates in [`order`] whose probabilities (`weights /
/// sum`) add up to at least `top_p`: its ids and probabilities, in that order.
///
/// The tokens whose weight is at least `t * sum` form a prefix of that order (ties
/// included); once such a prefix reaches `top_p`, the nucleus lies inside it, so only
/// it is sorted. `t` starts at 1/64 and falls 16-fold until the prefix suffices; at 0
/// every candidate is in, the full sort of before.
fn nucleus(cand: &[(u32, f32)], weights: &[f32], sum: f32, top_p: f32) -> (Vec<u32>, Vec<f32>) {
    let mut t = 1.0 / 64.0;
    loop {
        let floor = if t < 1e-9 { f32::NEG_INFINITY } else { t * sum };
        let mut prefix: Vec<(u32, f32, f32)> = cand
            .iter()
            .zip(weights)
            .filter(|(_, &w)| w >= floor)
            .map(|(&(id, l), &w)| (id, l, w / sum))
            .collect();
        prefix.sort_unstable_by(|a, b| order(&(a.0, a.1), &(b.0, b.1)));
        let mut acc = 0.0;
        let keep = prefix.iter().position(|p| {
            acc += p.2;
            acc >= top_p
        });
        let everyone = prefix.len() == cand.len();
        if keep.is_some() || everyone {
            prefix.truncate(keep.map_or(prefix.len(), |k| k + 1));
            return prefix.into_iter().map(|(id, _, p)| (id, p)).unzip();
        }
        t /= 16.0;
    }
}

/// Index of the largest value; the lowest index wins ties; NaN never wins.
pub fn argmax(xs: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut bv = f32::NEG_INFINITY;
    for (i, &v) in xs.iter().enumerate() {
        if v > bv {
            bv = v;
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_prefers_lowest_index_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, 0.2]), 1);
    }

    #[test]
    fn greedy_when_temperature_zero() {
        let mut s = Sampler::new(SamplingParams::default());
        assert_eq!(s.sample(&[0.1, 0.9, 0.3]), 1);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_respects_top_k() {
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 2,
            top_p: 1.0,
            seed: 7,
        };
        let logits = [1.0, 1.1, 1.2, -5.0];
        let a: Vec<u32> = {
            let mut s = Sampler::new(p.clone());
            (0..50).map(|_| s.sample(&logits)).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(p);
            (0..50).map(|_| s.sample(&logits)).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().all(|&t| t == 1 || t == 2));
        assert!(a.contains(&1) && a.contains(&2));
    }

    #[test]
    fn tiny_top_p_is_greedy() {
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1e-6,
            seed: 1,
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&[0.0, 2.0, 1.0]), 1);
        }
    }

    /// The nucleus by sorting every candidate (the sampler before the threshold).
    fn nucleus_by_full_sort(
        cand: &[(u32, f32)],
        weights: &[f32],
        sum: f32,
        top_p: f32,
    ) -> Vec<u32> {
        let mut all: Vec<(u32, f32, f32)> = cand
            .iter()
            .zip(weights)
            .map(|(&(id, l), &w)| (id, l, w / sum))
            .collect();
        all.sort_unstable_by(|a, b| order(&(a.0, a.1), &(b.0, b.1)));
        let mut acc = 0.0;
        let keep = all
            .iter()
            .position(|p| {
                acc += p.2;
                acc >= top_p
            })
            .map_or(all.len(), |k| k + 1);
        all.iter().take(keep).map(|p| p.0).collect()
    }

    proptest::proptest! {
        /// Peaked, flat and tied logits: the threshold search finds the same nucleus,
        /// in the same order, as sorting everything.
        #[test]
        fn nucleus_matches_full_sort(
            raw in proptest::collection::vec(-40i32..40, 1..400),
            scale in proptest::sample::select(vec![0.0f32, 0.05, 0.5, 1.0, 4.0]),
            top_p in 0.01f32..1.0,
        ) {
            let cand: Vec<(u32, f32)> =
                raw.iter().enumerate().map(|(i, &r)| (i as u32, r as f32 * scale)).collect();
            let max = cand.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
            let weights: Vec<f32> = cand.iter().map(|c| (c.1 - max).exp()).collect();
            let sum: f32 = weights.iter().sum();
            let (ids, probs) = nucleus(&cand, &weights, sum, top_p);
            proptest::prop_assert_eq!(&ids, &nucleus_by_full_sort(&cand, &weights, sum, top_p));
            proptest::prop_assert_eq!(ids.len(), probs.len());
        }
    }

    #[test]
    fn top_p_one_draws_every_token_in_proportion() {
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 3,
        });
        // Probabilities 1/6, 2/6, 3/6.
        let logits = [0.0, 2f32.ln(), 3f32.ln()];
        let mut counts = [0usize; 3];
        for _ in 0..6000 {
            counts[s.sample(&logits) as usize] += 1;
        }
        for (c, want) in counts.iter().zip([1000.0, 2000.0, 3000.0]) {
            assert!((*c as f64 - want).abs() < 200.0, "counts {counts:?}");
        }
    }

    #[test]
    fn top_p_cuts_the_tail() {
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
            seed: 5,
        });
        // Token 2 alone holds 0.6 of the mass: the nucleus at 0.5 is just it.
        let logits = [0.0, 0.0, 6f32.ln() + 2f32.ln() - 4f32.ln()];
        for _ in 0..50 {
            assert_eq!(s.sample(&logits), 2);
        }
    }

    #[test]
    fn validation_names_the_field() {
        let bad = SamplingParams {
            top_p: 0.0,
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("top_p"));
        let bad = SamplingParams {
            temperature: -1.0,
            ..Default::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("temperature"));
    }
}
