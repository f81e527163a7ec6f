//! The row-batched GQA kernels of `gqa.rs` on AVX-512F for head sizes that are a multiple
//! of 16 up to 256 (128 in the Qwen2 and Llama shapes), any number of query heads at
//! once. Called from `gqa.rs` only when the CPU has AVX-512F (asked at run time), with
//! the shapes `gqa::shape` checked.
//!
//! Owns: scores in blocks of 16 cached rows (each row widened once into a buffer for all
//! the heads, each head's 16 products reduced together by [`reduce16`]; a last partial
//! block zero-padded and stored under a mask) and the weighted sum in column chunks of
//! up to 64 held in registers for up to six heads across all rows.
//! Must not know: the scalar references' summation order (agreement is to f32 rounding).

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use half::f16;

/// Rows scored together: one register of results per head.
const BLOCK: usize = 16;

/// Widest head the score kernel's stack buffer takes.
const MAX_D: usize = 256;

/// Heads whose weighted sums share one pass over the rows (6 x 4 accumulators): the most
/// [`weighted_sum`] takes at once.
pub(crate) const SUM_HEADS: usize = 6;

/// Whether these kernels take head size `d`.
pub(crate) fn fits(d: usize) -> bool {
    d > 0 && d <= MAX_D && d.is_multiple_of(16)
}

/// `scores[h * n + j] = dot(row j, qs[h])` for the `g` heads and `n` rows.
///
/// # Safety
/// The target must have AVX-512F; [`fits`]`(d)`; `qs.len() == g * d`,
/// `scores.len() == g * n`, row `j < n` is `k[j * stride..j * stride + d]`, in bounds.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn scores(
    k: &[f16],
    stride: usize,
    d: usize,
    qs: &[f32],
    scores: &mut [f32],
    g: usize,
    n: usize,
) {
    assert!(fits(d) && qs.len() >= g * d && scores.len() >= g * n);
    // [BLOCK, d] the block's rows, widened; rows past the last are zeros. Not zeroed
    // as a whole: only the `BLOCK * d` values written below are read.
    let mut buf = [MaybeUninit::<f32>::uninit(); BLOCK * MAX_D];
    let rows = buf.as_mut_ptr() as *mut f32;
    let mut j0 = 0;
    while j0 < n {
        let m = BLOCK.min(n - j0);
        for r in 0..BLOCK {
            let dst = rows.add(r * d);
            for c in (0..d).step_by(16) {
                let x = if r < m {
                    // SAFETY: row j0 + r < n lies in k (caller's contract); c + 16 <= d.
                    let src = k.as_ptr().add((j0 + r) * stride + c);
                    _mm512_cvtph_ps(_mm256_loadu_si256(src as *const __m256i))
                } else {
                    _mm512_setzero_ps()
                };
                _mm512_storeu_ps(dst.add(c), x);
            }
        }
        let mask: __mmask16 = if m == BLOCK { !0 } else { (1 << m) - 1 };
        for h in 0..g {
            let q = qs.as_ptr().add(h * d);
            let mut acc = [_mm512_setzero_ps(); BLOCK];
            for c in (0..d).step_by(16) {
                let qv = _mm512_loadu_ps(q.add(c));
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(_mm512_loadu_ps(rows.add(r * d + c)), qv, *a);
                }
            }
            // SAFETY: h * n + j0 + m <= h * n + n <= scores.len(); masked to m lanes.
            _mm512_mask_storeu_ps(scores.as_mut_ptr().add(h * n + j0), mask, reduce16(acc));
        }
        j0 += m;
    }
}

/// The 16 lane sums of `v`, in order: lane `r` of the result is the sum of
/// `v[r]`'s lanes. Four levels of shuffles and adds, each halving the
/// lanes per row while doubling the rows per register; the last leaves row
/// `4t + q` in lane `4q + t`, which one permutation puts back.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn reduce16(v: [__m512; 16]) -> __m512 {
    // x[i] = [v[2i] (8 lanes) | v[2i + 1] (8 lanes)].
    let x: [__m512; 8] = std::array::from_fn(|i| {
        let (a, b) = (v[2 * i], v[2 * i + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0xEE>(a, b),
        )
    });
    // y[m]: 128-bit quarter t holds row 4m + t (4 lanes).
    let y: [__m512; 4] = std::array::from_fn(|m| {
        let (a, b) = (x[2 * m], x[2 * m + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(a, b),
            _mm512_shuffle_f32x4::<0xDD>(a, b),
        )
    });
    // z[p]: quarter t holds rows 8p + t and 8p + 4 + t (2 lanes each).
    let z: [__m512; 2] = std::array::from_fn(|p| {
        let (a, b) = (y[2 * p], y[2 * p + 1]);
        _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(a, b),
            _mm512_shuffle_ps::<0xEE>(a, b),
        )
    });
    // Quarter t: rows t, 4 + t, 8 + t, 12 + t.
    let w = _mm512_add_ps(
        _mm512_shuffle_ps::<0x88>(z[0], z[1]),
        _mm512_shuffle_ps::<0xDD>(z[0], z[1]),
    );
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_ps(order, w)
}

/// `out[h] += sum_j w[h * n + j] * row j` for the `g` (at most [`SUM_HEADS`]) heads; the
/// caller splits larger groups (`gqa.rs`'s `head_groups`).
///
/// # Safety
/// As [`scores`], with `out` (`g * d`) for `qs` and `w` (`g * n`) for `scores`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn weighted_sum(
    v: &[f16],
    stride: usize,
    d: usize,
    w: &[f32],
    out: &mut [f32],
    g: usize,
    n: usize,
) {
    assert!(fits(d) && (1..=SUM_HEADS).contains(&g));
    assert!(out.len() >= g * d && w.len() >= g * n);
    if d.is_multiple_of(64) {
        weighted_sum_heads::<4>(v, stride, d, w, out, g, n);
    } else {
        weighted_sum_heads::<1>(v, stride, d, w, out, g, n);
    }
}

/// [`weighted_sum_g`] for `g <= SUM_HEADS` heads, `C` registers per head.
///
/// # Safety
/// As [`weighted_sum_g`], with `1 <= g <= SUM_HEADS`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn weighted_sum_heads<const C: usize>(
    v: &[f16],
    stride: usize,
    d: usize,
    w: &[f32],
    out: &mut [f32],
    g: usize,
    n: usize,
) {
    match g {
        1 => weighted_sum_g::<1, C>(v, stride, d, w, out, n),
        2 => weighted_sum_g::<2, C>(v, stride, d, w, out, n),
        3 => weighted_sum_g::<3, C>(v, stride, d, w, out, n),
        4 => weighted_sum_g::<4, C>(v, stride, d, w, out, n),
        5 => weighted_sum_g::<5, C>(v, stride, d, w, out, n),
        _ => weighted_sum_g::<6, C>(v, stride, d, w, out, n),
    }
}

/// [`weighted_sum`] for `G` heads, `C` registers (16 columns each) per head held across
/// all rows: one pass over the rows per `16 C` columns.
///
/// # Safety
/// As [`weighted_sum`], with `g == G` and `d` a multiple of `16 C`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn weighted_sum_g<const G: usize, const C: usize>(
    v: &[f16],
    stride: usize,
    d: usize,
    w: &[f32],
    out: &mut [f32],
    n: usize,
) {
    for c0 in (0..d).step_by(16 * C) {
        let mut acc = [[_mm512_setzero_ps(); C]; G];
        for j in 0..n {
            let src = v.as_ptr().add(j * stride + c0);
            // SAFETY: row j lies in v (caller's contract); c0 + 16 C <= d.
            let x: [__m512; C] = std::array::from_fn(|c| {
                _mm512_cvtph_ps(_mm256_loadu_si256(src.add(16 * c) as *const __m256i))
            });
            for (h, ah) in acc.iter_mut().enumerate() {
                let wj = _mm512_set1_ps(w[h * n + j]);
                for (a, xc) in ah.iter_mut().zip(x) {
                    *a = _mm512_fmadd_ps(wj, xc, *a);
                }
            }
        }
        for (h, ah) in acc.iter().enumerate() {
            for (c, a) in ah.iter().enumerate() {
                let p = out[h * d + c0 + 16 * c..h * d + c0 + 16 * c + 16].as_mut_ptr();
                // SAFETY: `p` points at 16 in-bounds floats of `out`.
                _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), *a));
            }
        }
    }
}
