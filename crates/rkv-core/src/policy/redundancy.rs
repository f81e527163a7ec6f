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

/// Column sums to redundancy: mean over the `len` rows, softmax over all `len` slots
/// (f64), then the last `window` entries dropped. `column_sums`: `[len]`.
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
    let mut exps: Vec<f64> = column_sums
        .iter()
        .map(|c| exp_in_range((c * inv_len - max).clamp(-EXP_RANGE, EXP_RANGE)))
        .collect();
    // Outside the range (or NaN), f64::exp; checked first so that the loop above stays
    // free of calls, and without stopping early so that the check itself vectorises.
    let outside = |x: f64| x.is_nan() | (x.abs() > EXP_RANGE);
    if column_sums
        .iter()
        .fold(false, |any, c| any | outside(c * inv_len - max))
    {
        for (e, c) in exps.iter_mut().zip(column_sums) {
            let x = c * inv_len - max;
            if outside(x) {
                *e = x.exp();
            }
        }
    }
    // Sum in 8 independent partial sums (not one chain of dependent adds).
    let mut part = [0.0f64; 8];
    let mut chunks = exps.chunks_exact(8);
    for c in &mut chunks {
        for (p, &e) in part.iter_mut().zip(c) {
            *p += e;
        }
    }
    for (p, &e) in part.iter_mut().zip(chunks.remainder()) {
        *p += e;
    }
    let sum = sum_parts(part);
    let inv_sum = 1.0 / sum;
    exps.truncate(len.saturating_sub(window));
    exps.iter_mut().for_each(|e| *e *= inv_sum);
    exps
}

/// The total of eight partial sums, in one fixed tree.
#[inline]
pub(super) fn sum_parts(part: [f64; 8]) -> f64 {
    ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]))
}

/// Where [`exp_in_range`] applies: `|x| <= EXP_RANGE` (no overflow, no subnormals).
const EXP_RANGE: f64 = 700.0;

/// `e^x` for `|x| <= EXP_RANGE`, within a few ulp of `f64::exp`, without branches or
/// calls (so a loop over it vectorises): `x = k ln 2 + r`, `|r| <= ln 2 / 2`, `e^r` by its
/// Taylor polynomial of degree 13 (truncation error below 1e-17), times `2^k`.
#[inline(always)]
fn exp_in_range(x: f64) -> f64 {
    // ln 2 split so that `k * LN2_HI` is exact for |k| < 2^20 (fdlibm's constants).
    const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
    let k = (x * std::f64::consts::LOG2_E).round_ties_even();
    let r = (x - k * LN2_HI) - k * LN2_LO;
    // 1/13!, 1/12!, ..., 1/1!, 1/0!
    const C: [f64; 14] = [
        1.0 / 6_227_020_800.0,
        1.0 / 479_001_600.0,
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ];
    let mut p = C[0];
    for &c in &C[1..] {
        p = p * r + c;
    }
    // 2^k from the bits of the biased exponent k + 1023 (in 13..=2033 here), read off
    // `(k + 1023) + 2^52`, whose low mantissa bits it is (no float-to-int conversion, so
    // the loop vectorises).
    const TWO_52: f64 = 4_503_599_627_370_496.0;
    let biased = ((k + 1023.0) + TWO_52).to_bits() - TWO_52.to_bits();
    p * f64::from_bits(biased << 52)
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
    fn exp_in_range_matches_std() {
        for i in -7000..=7000 {
            let x = f64::from(i) * 0.1 + 0.012_345;
            let (a, e) = (exp_in_range(x.clamp(-EXP_RANGE, EXP_RANGE)), x.exp());
            if x.abs() <= EXP_RANGE {
                assert!(
                    (a - e).abs() <= 4.0 * f64::EPSILON * e,
                    "{x}: {a:e} vs {e:e}"
                );
            }
        }
        for x in [0.0, -1e-300, 1e-12, -2.0, -0.5 * std::f64::consts::LN_2] {
            let (a, e) = (exp_in_range(x), x.exp());
            assert!(
                (a - e).abs() <= 4.0 * f64::EPSILON * e,
                "{x}: {a:e} vs {e:e}"
            );
        }
        // Outside the range (and NaN) the softmax falls back to f64::exp.
        let red = redundancy_from_column_sums(&[0.0, -1e6, f64::NEG_INFINITY], 0);
        assert_eq!(red, vec![1.0, 0.0, 0.0]);
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
