//! Redundancy of slots, computed from scratch: the O(L^2 d) oracle (R-KV, arXiv
//! 2505.24133; `cal_similarity` of Zefan-Cai/R-KV `rkv/utils.py`, golden README §3).
//!
//! Owns: the definition the fast path must reproduce. Per head, over all `L` keys
//! (window included): cosine matrix `S` with zero diagonal; per row the latest similar
//! slot `r(i)` (largest `j` with `S[i][j] > threshold`, or 0 when there is none: a quirk
//! of the reference kept for conformance); `S[i][r(i)] = 0`; column mean; softmax over
//! the `L` slots; the last `w` entries dropped. Also the shared tail (column sums to
//! redundancy) that the incremental path reuses.
//!
//! Must not know: importance, budgets, selection, state kept between compressions.

use super::cosine::CosineRows;
use super::dot::inv_norms;
use super::keys::Rows;
use crate::exp::exp_slice;

/// Everything the redundancy computation decides for one head.
#[derive(Debug, Clone, PartialEq)]
pub struct Redundancy {
    /// `[L]` latest similar slot per row; `None` when the row has no match (the reference
    /// then zeroes `S[i][0]`).
    pub latest: Vec<Option<usize>>,
    /// `[L]` column sums of `S` after the zeroing (not yet divided by `L`).
    pub column_sums: Vec<f64>,
    /// `[L - w]` redundancy of the candidates: softmax of the column means, window dropped.
    pub redundancy: Vec<f64>,
}

/// The column (`r(i)`, or 0 for a row without a match) whose entry row `i` zeroes.
#[inline]
pub fn zeroed_column(latest: Option<usize>) -> usize {
    latest.unwrap_or(0)
}

/// Column sums to redundancy: mean over the `len` rows, softmax over all `len` slots,
/// then the last `window` entries dropped. `column_sums`: `[len]`.
///
/// The means and their shift by the largest are f64; the exponentials are
/// [`crate::exp::exp`]'s f32 (relative error below 2.5e-7, the precision the importance
/// term has; a shifted mean of cosines lies in `[-2, 0]`, where f32 loses nothing to
/// range), added in f64 and normalised in f64.
pub fn redundancy_from_column_sums(column_sums: &[f64], window: usize) -> Vec<f64> {
    let len = column_sums.len();
    if len == 0 {
        return Vec::new();
    }
    let inv_len = 1.0 / len as f64;
    // The largest mean (NaN ignored): scaling by `inv_len > 0` is monotone, so it is the
    // largest sum scaled. Eight running maxima (not one chain of dependent compares); the
    // largest of them is the same value in any order (of two zeros either may win, and
    // `x - 0.0` and `x + 0.0` exponentiate alike below).
    let larger = |m: f64, c: f64| if c > m { c } else { m };
    let mut part = [f64::NEG_INFINITY; 8];
    let mut chunks = column_sums.chunks_exact(8);
    for c in &mut chunks {
        for (m, &x) in part.iter_mut().zip(c) {
            *m = larger(*m, x);
        }
    }
    let max = part
        .into_iter()
        .chain(chunks.remainder().iter().copied())
        .fold(f64::NEG_INFINITY, larger)
        * inv_len;
    // `exp` takes every f32, NaN and the infinities included: no range to check.
    let mut exps: Vec<f32> = column_sums
        .iter()
        .map(|c| (c * inv_len - max) as f32)
        .collect();
    exp_slice(&mut exps, 0.0);
    // Sum in 8 independent f64 partial sums (not one chain of dependent adds).
    let mut part = [0.0f64; 8];
    let mut chunks = exps.chunks_exact(8);
    for c in &mut chunks {
        for (p, &e) in part.iter_mut().zip(c) {
            *p += f64::from(e);
        }
    }
    for (p, &e) in part.iter_mut().zip(chunks.remainder()) {
        *p += f64::from(e);
    }
    let inv_sum = 1.0 / sum_parts(part);
    exps[..len.saturating_sub(window)]
        .iter()
        .map(|&e| f64::from(e) * inv_sum)
        .collect()
}

/// The total of eight partial sums, in one fixed tree.
#[inline]
pub(super) fn sum_parts(part: [f64; 8]) -> f64 {
    ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]))
}

/// The from-scratch oracle: `O(L^2 d)` time, `O(L d)` memory.
///
/// `keys`: `[len, dim]` post-RoPE keys of one head in slot (position) order.
pub fn redundancy_oracle(keys: &[f32], dim: usize, threshold: f32, window: usize) -> Redundancy {
    let inv = inv_norms(keys, dim);
    let s = CosineRows {
        keys: Rows::flat(keys, dim),
        inv_norm: &inv,
    };
    let len = s.len();
    let mut latest = Vec::with_capacity(len);
    let mut column_sums = vec![0.0f64; len];
    let mut row = vec![0.0f32; len];
    for i in 0..len {
        s.entries(i, &mut row);
        let r = (0..len).rev().find(|&j| row[j] > threshold);
        latest.push(r);
        row[zeroed_column(r)] = 0.0;
        for (c, &v) in column_sums.iter_mut().zip(&row) {
            *c += f64::from(v);
        }
    }
    let redundancy = redundancy_from_column_sums(&column_sums, window);
    Redundancy {
        latest,
        column_sums,
        redundancy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys a, a', b, a'' (a-copies at slots 0, 1, 3), d = 2.
    fn copies() -> Vec<f32> {
        vec![1.0, 0.0, 1.0, 0.01, 0.0, 1.0, 1.0, 0.02]
    }

    #[test]
    fn latest_similar_slot_and_quirk() {
        let r = redundancy_oracle(&copies(), 2, 0.5, 0);
        assert_eq!(r.latest, vec![Some(3), Some(3), None, Some(1)]);
        // Row 2 (b) has no match: it zeroes S[2][0], which was ~0 anyway.
        // Column 3 (newest a) loses rows 0 and 1; column 1 loses row 3; column 0 keeps
        // rows 1 and 3 (~1 each).
        let c = &r.column_sums;
        assert!((c[0] - 2.0).abs() < 1e-3, "{c:?}");
        assert!((c[1] - 1.01).abs() < 1e-3, "{c:?}");
        assert!((c[2] - 0.03).abs() < 1e-3, "{c:?}");
        assert!((c[3] - 0.02).abs() < 1e-3, "{c:?}");
    }

    #[test]
    fn quirk_zeroes_slot_zero_for_matchless_rows() {
        // No pair exceeds 0.5 (slots 0 and 2 are at 0.45): every row zeroes its S[i][0].
        let keys = [1.0, 0.0, 0.0, -1.0, 0.45, (1.0f32 - 0.45 * 0.45).sqrt()];
        let r = redundancy_oracle(&keys, 2, 0.5, 0);
        assert_eq!(r.latest, vec![None, None, None]);
        // Column 0 receives S[1][0] = 0 and S[2][0] is zeroed: sum 0.
        assert!(r.column_sums[0].abs() < 1e-7, "{:?}", r.column_sums);
        // Column 2 still gets S[0][2] = 0.45 and S[1][2] (row 0 zeroes its own diagonal).
        let expect = 0.45 - (1.0f64 - 0.45 * 0.45).sqrt();
        assert!(
            (r.column_sums[2] - expect).abs() < 1e-6,
            "{:?}",
            r.column_sums
        );
    }

    #[test]
    fn softmax_matches_f64_within_f32_precision() {
        // Column sums of cosines over 1200 rows: means in [-1, 1], shifted into [-2, 0].
        let len = 1200usize;
        let sums: Vec<f64> = (0..len)
            .map(|i| (i as f64 * 0.7311).sin() * len as f64 * 0.9)
            .collect();
        let red = redundancy_from_column_sums(&sums, 8);
        let max = sums.iter().copied().fold(f64::NEG_INFINITY, f64::max) / len as f64;
        let exps: Vec<f64> = sums.iter().map(|c| (c / len as f64 - max).exp()).collect();
        let total: f64 = exps.iter().sum();
        assert_eq!(red.len(), len - 8);
        for (j, (a, e)) in red.iter().zip(&exps).enumerate() {
            let e = e / total;
            assert!((a - e).abs() <= 5e-7 * e, "{j}: {a:e} vs {e:e}");
        }
        // Far below the largest mean (and -inf) the exponential is 0; a NaN sum makes the
        // whole softmax NaN, as the oracle's arithmetic would.
        let red = redundancy_from_column_sums(&[0.0, -1e6, f64::NEG_INFINITY], 0);
        assert_eq!(red, vec![1.0, 0.0, 0.0]);
        let red = redundancy_from_column_sums(&[0.0, f64::NAN, 0.0], 0);
        assert!(red.iter().all(|r| r.is_nan()), "{red:?}");
    }

    #[test]
    fn redundancy_is_softmax_of_means_without_window() {
        let red = redundancy_from_column_sums(&[0.0, 0.0, 4.0 * f64::ln(2.0), 0.0], 1);
        // means 0, 0, ln 2, 0 -> softmax 1/5, 1/5, 2/5, 1/5; last dropped.
        assert_eq!(red.len(), 3);
        for (a, e) in red.iter().zip([0.2, 0.2, 0.4]) {
            assert!((a - e).abs() < 1e-12);
        }
        assert!(redundancy_from_column_sums(&[], 8).is_empty());
        assert!(redundancy_from_column_sums(&[1.0, 2.0], 8).is_empty());
    }
}
