//! Importance of candidate slots from the observation window's attention (R-KV, arXiv
//! 2505.24133; `compute_attention_scores` and `update_kv` of Zefan-Cai/R-KV).
//!
//! Owns: GQA max over the group on raw logits (before the softmax), the softmax over the
//! `L - w` candidates in f32, the mean over the `w` window queries, and the 1-D max-pool
//! (kernel `k`, stride 1, same-size output, clipped at the ends); a hook is called every
//! [`TICK`] exponentials (the caller interleaves its own memory requests with them).
//!
//! Must not know: keys, redundancy, budgets, selection. Shapes are checked by the caller.

use crate::exp::{exp_into_lanes, max_lanes};

/// Max over the `g` query heads of a group, on raw logits.
///
/// `logits`: `[g, w, n]`. Returns `[w, n]`.
pub fn group_max(logits: &[f32], group: usize, window: usize, n: usize) -> Vec<f32> {
    let plane = window * n;
    let mut out = logits.get(..plane).map(<[f32]>::to_vec).unwrap_or_default();
    for head in 1..group {
        let Some(src) = logits.get(head * plane..(head + 1) * plane) else {
            break;
        };
        max_into(&mut out, src);
    }
    out
}

/// `acc[j] = max(acc[j], x[j])`, the rule of [`group_max`]: `f32::max` ignores NaN, this
/// keeps NaN visible. Callers that reduce a group themselves (the engine, as it captures
/// the window) use it so their result is bit-identical.
#[inline]
pub fn max_into(acc: &mut [f32], x: &[f32]) {
    // Through a buffer on the stack: written in place, the select becomes a masked store,
    // which is slow on some CPUs (AMD's among them).
    let mut t = [0.0f32; 64];
    for (a, b) in acc.chunks_mut(64).zip(x.chunks(64)) {
        let t = &mut t[..a.len().min(b.len())];
        nan_max_of(t, a, b);
        a[..t.len()].copy_from_slice(t);
    }
}

/// `out[j] = max(a[j], b[j])` by [`nan_max`]'s rule; `out` is apart from both, so that
/// the select vectorises as a blend (see [`max_into`], its only caller).
#[inline]
fn nan_max_of(out: &mut [f32], a: &[f32], b: &[f32]) {
    for ((o, &m), &v) in out.iter_mut().zip(a).zip(b) {
        *o = nan_max(m, v);
    }
}

/// In-place softmax in f32: subtract the max, exponentiate, divide by the sum.
/// A row whose entries are all `-inf` becomes uniform.
pub fn softmax_in_place(row: &mut [f32]) {
    softmax_in_place_with(row, &mut || {});
}

/// [`softmax_in_place`], calling `tick` after every [`TICK`] exponentials. The max and
/// the sum run in eight lanes and the exponential is [`crate::exp::exp`], so that the
/// compiler vectorises all three, with the same bits on every target.
pub fn softmax_in_place_with(row: &mut [f32], tick: &mut impl FnMut()) {
    if row.is_empty() {
        return;
    }
    let max = max_lanes(row);
    if max == f32::NEG_INFINITY {
        let u = 1.0 / row.len() as f32;
        row.iter_mut().for_each(|x| *x = u);
        return;
    }
    let mut lanes = [0.0f32; 8];
    // TICK is a multiple of 8: element i of the row goes to lane i % 8 in every chunk.
    for chunk in row.chunks_mut(TICK) {
        exp_into_lanes(chunk, max, &mut lanes);
        tick();
    }
    let inv = 1.0 / lanes.iter().sum::<f32>();
    row.iter_mut().for_each(|x| *x *= inv);
}

/// The rule of the group max and the max-pool for one more value `v`: it wins when
/// larger, and NaN always wins (so that a NaN stays visible, as the reference's pooling
/// propagates it).
#[inline(always)]
fn nan_max(m: f32, v: f32) -> f32 {
    if v > m || v.is_nan() {
        v
    } else {
        m
    }
}

/// Same-size 1-D max-pool, stride 1: `out[j] = max(x[j-k/2 ..= j+k/2])`, clipped at the
/// ends (padding never wins). `kernel` must be odd; an even kernel is treated as `k+1`.
/// Computed as two [`max_into`] passes per distance over shifted slices (each vectorises).
pub fn max_pool_same(x: &[f32], kernel: usize) -> Vec<f32> {
    let len = x.len();
    let mut out = x.to_vec();
    for shift in 1..=(kernel / 2).min(len) {
        let n = len - shift;
        max_into(&mut out[..n], &x[shift..]);
        max_into(&mut out[shift..], &x[..n]);
    }
    out
}

/// Importance of the `n` candidates: group max, per-query softmax over the candidates,
/// mean over the `w` queries, max-pool.
///
/// `window_logits`: `[g, w, n]`. Returns `[n]`.
pub fn importance(
    window_logits: &[f32],
    group: usize,
    window: usize,
    n: usize,
    kernel: usize,
) -> Vec<f32> {
    importance_with(window_logits, group, window, n, kernel, &mut || {})
}

/// Exponentials between two calls of the tick of [`importance_with`].
pub const TICK: usize = 32;

/// [`importance`], calling `tick` after every [`TICK`] exponentials.
pub fn importance_with(
    window_logits: &[f32],
    group: usize,
    window: usize,
    n: usize,
    kernel: usize,
    tick: &mut impl FnMut(),
) -> Vec<f32> {
    let mut rows = group_max(window_logits, group, window, n);
    let mut mean = vec![0.0f32; n];
    if n == 0 {
        return mean;
    }
    for row in rows.chunks_exact_mut(n) {
        softmax_in_place_with(row, tick);
        for (m, &p) in mean.iter_mut().zip(row.iter()) {
            *m += p;
        }
    }
    let inv_w = 1.0 / window.max(1) as f32;
    mean.iter_mut().for_each(|m| *m *= inv_w);
    max_pool_same(&mean, kernel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_max_takes_max_over_heads() {
        // g = 2, w = 1, n = 3
        let logits = [1.0, 5.0, -2.0, 3.0, 4.0, -1.0];
        assert_eq!(group_max(&logits, 2, 1, 3), vec![3.0, 5.0, -1.0]);
        assert_eq!(group_max(&logits[..3], 1, 1, 3), vec![1.0, 5.0, -2.0]);
    }

    #[test]
    fn softmax_basic_and_stable() {
        let mut r = [0.0f32, 0.0, f32::ln(2.0)];
        softmax_in_place(&mut r);
        assert!((r[0] - 0.25).abs() < 1e-7 && (r[2] - 0.5).abs() < 1e-7);
        let mut big = [1000.0f32, 1000.0];
        softmax_in_place(&mut big);
        assert_eq!(big, [0.5, 0.5]);
        let mut ninf = [f32::NEG_INFINITY; 4];
        softmax_in_place(&mut ninf);
        assert_eq!(ninf, [0.25; 4]);
        let mut empty: [f32; 0] = [];
        softmax_in_place(&mut empty);
    }

    #[test]
    fn max_pool_edges() {
        let x = [5.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0];
        // kernel 7: half 3. Slot 3 still sees slot 0, slot 4 does not; slot 5 first sees slot 8.
        let p = max_pool_same(&x, 7);
        assert_eq!(p, vec![5.0, 5.0, 5.0, 5.0, 1.0, 2.0, 2.0, 2.0, 2.0]);
        // kernel 1 is the identity.
        assert_eq!(max_pool_same(&x, 1), x.to_vec());
        // kernel larger than the input: everything is the global max.
        assert_eq!(max_pool_same(&[1.0, 3.0, 2.0], 9), vec![3.0; 3]);
        // negative values: padding (which would be -inf or 0) never wins.
        assert_eq!(
            max_pool_same(&[-3.0, -1.0, -2.0], 3),
            vec![-1.0, -1.0, -1.0]
        );
        assert_eq!(
            max_pool_same(&[-3.0, -4.0, -5.0, -6.0], 3),
            vec![-3.0, -3.0, -4.0, -5.0]
        );
        assert!(max_pool_same(&[], 7).is_empty());
    }

    /// The vectorised max-pool and group max against the plain fold they replaced, on
    /// values with repeats, infinities and NaN, for every kernel up to 9, lengths up to
    /// 40 and a few past `max_into`'s chunks of 64 (NaN compared as NaN: its payload is
    /// not part of the rule).
    #[test]
    fn max_pool_and_group_max_match_the_fold() {
        let fold = |w: &[f32]| {
            w.iter().copied().fold(
                f32::NEG_INFINITY,
                |m, v| if v > m || v.is_nan() { v } else { m },
            )
        };
        let same = |a: f32, b: f32| (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            match (state >> 33) % 23 {
                0 => f32::NAN,
                1 => f32::NEG_INFINITY,
                2 => f32::INFINITY,
                k => (k % 7) as f32 - 3.0,
            }
        };
        for len in (0..40).chain([64, 65, 130]) {
            let x: Vec<f32> = (0..len).map(|_| next()).collect();
            for kernel in 1..=9 {
                let half = kernel / 2;
                let got = max_pool_same(&x, kernel);
                for (j, &g) in got.iter().enumerate() {
                    let want = fold(&x[j.saturating_sub(half)..(j + half + 1).min(len)]);
                    assert!(
                        same(g, want),
                        "len {len} kernel {kernel} slot {j}: {g} vs {want}"
                    );
                }
            }
            for group in 1..=4 {
                let logits: Vec<f32> = (0..group * len).map(|_| next()).collect();
                let got = group_max(&logits, group, 1, len);
                let mut acc = logits[..len].to_vec();
                for h in 1..group {
                    max_into(&mut acc, &logits[h * len..(h + 1) * len]);
                }
                for j in 0..len {
                    let col: Vec<f32> = (0..group).map(|h| logits[h * len + j]).collect();
                    assert!(same(got[j], fold(&col)), "group {group} slot {j}");
                    assert!(same(acc[j], fold(&col)), "max_into, group {group} slot {j}");
                }
            }
        }
    }

    #[test]
    fn importance_is_mean_of_softmaxes_then_pooled() {
        // g = 1, w = 2, n = 3, kernel 1.
        let l = [0.0, 0.0, 0.0, f32::ln(2.0), 0.0, 0.0];
        let imp = importance(&l, 1, 2, 3, 1);
        let expect = [
            (1.0 / 3.0 + 0.5) / 2.0,
            (1.0 / 3.0 + 0.25) / 2.0,
            (1.0 / 3.0 + 0.25) / 2.0,
        ];
        for (a, e) in imp.iter().zip(expect) {
            assert!((a - e).abs() < 1e-6, "{imp:?}");
        }
        // The softmax happens after the group max: two heads, each peaking elsewhere.
        let l2 = [10.0, 0.0, 0.0, 10.0];
        let imp2 = importance(&l2, 2, 1, 2, 1);
        assert!((imp2[0] - 0.5).abs() < 1e-6 && (imp2[1] - 0.5).abs() < 1e-6);
    }
}
