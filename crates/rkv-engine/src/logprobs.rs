//! Log-probabilities of tokens, as OpenAI and vLLM report them: the log-softmax of the
//! model's raw logits (before temperature, top-k and top-p), for the token that came
//! next and for the most likely alternatives.
//!
//! Owns what a request asks for ([`LogprobsRequest`]) and the arithmetic over one logits
//! row ([`token_logprob`]). Must not know: tokens' text, response shapes, sampling.

use crate::error::{EngineError, Result};

/// The most alternatives a token may list (OpenAI's bound, and vLLM's default).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Most prompt tokens of a request with prompt log-probabilities fed in one step: each
/// has a logits row (`[vocab]` floats, 600 KB for a 150k vocabulary).
pub const PROMPT_LOGITS_PER_STEP: usize = 256;

/// Which log-probabilities a request wants; `None`: none. `Some(k)`: the token's own,
/// with its `k` most likely alternatives (`k <= MAX_TOP_LOGPROBS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogprobsRequest {
    /// For each generated token, from the logits it was sampled from.
    pub generated: Option<usize>,
    /// For each prompt token after the first, from the logits of the token before it.
    /// The prompt's keys and values are then all computed (none from the prefix cache).
    pub prompt: Option<usize>,
}

impl LogprobsRequest {
    pub fn validate(&self) -> Result<()> {
        for (what, k) in [
            ("logprobs", self.generated),
            ("prompt logprobs", self.prompt),
        ] {
            if let Some(k) = k.filter(|&k| k > MAX_TOP_LOGPROBS) {
                return Err(EngineError::BadRequest(format!(
                    "{what}: at most {MAX_TOP_LOGPROBS} alternatives per token, got {k}"
                )));
            }
        }
        Ok(())
    }
}

/// One token's log-probability and the most likely tokens at its position.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    /// 1 + how many tokens are strictly more likely (vLLM's `Logprob.rank`).
    pub rank: u32,
    /// `(id, logprob)` of the most likely tokens, most likely first, ties to the lower id.
    pub top: Vec<(u32, f32)>,
}

/// The log-softmax of `logits` (`[vocab]`) at `token`, and its `top` most likely tokens.
/// Sums in f64, so a 150k vocabulary loses nothing to rounding; a logit of -inf has
/// log-probability -inf, and a NaN logit counts as -inf.
pub fn token_logprob(logits: &[f32], token: u32, top: usize) -> TokenLogprob {
    let finite = |l: f32| if l.is_nan() { f32::NEG_INFINITY } else { l };
    let max = logits
        .iter()
        .map(|&l| finite(l))
        .fold(f32::NEG_INFINITY, f32::max);
    let log_z = if max == f32::NEG_INFINITY {
        0.0
    } else {
        let sum: f64 = logits
            .iter()
            .map(|&l| (f64::from(finite(l)) - f64::from(max)).exp())
            .sum();
        f64::from(max) + sum.ln()
    };
    let lp = |l: f32| (f64::from(finite(l)) - log_z) as f32;
    let logprob = logits
        .get(token as usize)
        .map_or(f32::NEG_INFINITY, |&l| lp(l));
    let own = logits.get(token as usize).map(|&l| finite(l));
    let above = match own {
        Some(o) => logits.iter().filter(|&&l| finite(l) > o).count(),
        None => logits.len(),
    };
    let rank = u32::try_from(above + 1).unwrap_or(u32::MAX);
    let mut best: Vec<(u32, f32)> = Vec::new();
    if top > 0 {
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, finite(l)))
            .collect();
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let k = top.min(cand.len());
        if k > 0 && k < cand.len() {
            cand.select_nth_unstable_by(k - 1, order);
        }
        cand.truncate(k);
        cand.sort_unstable_by(order);
        best = cand.into_iter().map(|(i, l)| (i, lp(l))).collect();
    }
    TokenLogprob {
        token,
        logprob,
        rank,
        top: best,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, in f64 and without any shortcut.
    fn reference(logits: &[f32], token: usize) -> f64 {
        let z: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        f64::from(logits[token]) - z.ln()
    }

    #[test]
    fn equals_the_definition_and_sums_to_one() {
        let logits: Vec<f32> = (0..1000)
            .map(|i| ((i * 37 % 101) as f32) * 0.07 - 3.0)
            .collect();
        let mut total = 0f64;
        for t in 0..logits.len() {
            let got = token_logprob(&logits, t as u32, 0);
            assert!((f64::from(got.logprob) - reference(&logits, t)).abs() < 1e-5);
            total += f64::from(got.logprob).exp();
        }
        assert!((total - 1.0).abs() < 1e-4, "{total}");
    }

    #[test]
    fn top_lists_the_most_likely_first_with_ties_to_the_lower_id() {
        let logits = [0.5, 2.0, -1.0, 2.0, 1.0];
        let got = token_logprob(&logits, 2, 3);
        let ids: Vec<u32> = got.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![1, 3, 4]);
        assert_eq!(got.top[0].1, got.top[1].1);
        assert!((f64::from(got.top[2].1) - reference(&logits, 4)).abs() < 1e-6);
        assert!((f64::from(got.logprob) - reference(&logits, 2)).abs() < 1e-6);
        // Token 2 is the least likely of five; tied tokens share the better rank.
        assert_eq!(got.rank, 5);
        assert_eq!(token_logprob(&logits, 3, 0).rank, 1);
        assert_eq!(token_logprob(&logits, 4, 0).rank, 3);
        // More alternatives than tokens: all of them.
        assert_eq!(token_logprob(&logits, 0, 20).top.len(), 5);
    }

    #[test]
    fn large_logits_do_not_overflow_and_masked_ones_are_impossible() {
        let logits = [1000.0, 999.0, f32::NEG_INFINITY, f32::NAN];
        let a = token_logprob(&logits, 0, 4);
        assert!((a.logprob - (-(1.0 + (-1f64).exp()).ln() as f32)).abs() < 1e-6);
        assert_eq!(token_logprob(&logits, 2, 0).logprob, f32::NEG_INFINITY);
        assert_eq!(token_logprob(&logits, 3, 0).logprob, f32::NEG_INFINITY);
        assert_eq!(a.top.len(), 4);
        // A token outside the row has no probability.
        assert_eq!(token_logprob(&logits, 9, 0).logprob, f32::NEG_INFINITY);
    }

    #[test]
    fn more_than_twenty_alternatives_are_refused() {
        let ok = LogprobsRequest {
            generated: Some(20),
            prompt: Some(0),
        };
        assert!(ok.validate().is_ok());
        let bad = LogprobsRequest {
            generated: None,
            prompt: Some(21),
        };
        assert!(bad.validate().unwrap_err().to_string().contains("21"));
    }
}
