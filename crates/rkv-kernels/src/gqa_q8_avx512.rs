//! The q8_0 GQA kernels of `gqa_q8.rs` on AVX-512F, for head sizes that are a multiple
//! of 32 up to 256, any number of query heads. Called from `gqa_q8.rs` only when the CPU
//! has AVX-512F (asked at run time), with the shapes `gqa_q8::shape` checked.
//!
//! Owns: scores in blocks of 16 cached rows (each row dequantised once into a stack
//! buffer for all the heads, 34 bytes read per 32 values instead of 64 for f16; each
//! head's 16 products reduced together by `reduce16`; a last partial block zero-padded
//! and stored under a mask) and the weighted sum in column chunks of up to 64 held in
//! registers for up to six heads across all rows, each value dequantised once for them.
//! Must not know: the scalar reference's summation order (agreement is to f32 rounding).

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use crate::blocks::{BlockQ8_0, QK};
use crate::gqa_avx512::reduce16;

/// Rows scored together: one register of results per head.
const BLOCK: usize = 16;

/// Widest head the score kernel's stack buffer takes.
const MAX_D: usize = 256;

/// Heads whose weighted sums share one pass over the rows (6 x 4 accumulators).
pub(crate) const SUM_HEADS: usize = 6;

/// Whether these kernels take head size `d`.
pub(crate) fn fits(d: usize) -> bool {
    d > 0 && d <= MAX_D && d.is_multiple_of(QK)
}

/// Sixteen values `at..at + 16` (`at` 0 or 16) of `blk`, dequantised (exact).
#[inline]
#[target_feature(enable = "avx512f,f16c")]
unsafe fn load16(blk: &BlockQ8_0, at: usize) -> __m512 {
    debug_assert!(at + 16 <= QK);
    let s = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(blk.d.to_bits()))));
    // SAFETY: 16 bytes at `at` lie in the block's 32 quants.
    let q = _mm_loadu_si128(blk.qs.as_ptr().add(at) as *const __m128i);
    _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)),
        _mm512_set1_ps(s),
    )
}

/// `scores[h * n + j] = dot(row j, qs[h])` for the `g` heads and `n` rows.
///
/// # Safety
/// The target must have AVX-512F (and F16C, which every AVX-512 CPU has; `simd::avx512f`
/// asks for both); [`fits`]`(d)`; `qs.len() >= g * d`, `scores.len() >= g * n`,
/// `k.len() >= n * d / 32`.
#[target_feature(enable = "avx512f,f16c")]
pub(crate) unsafe fn scores(
    k: &[BlockQ8_0],
    d: usize,
    qs: &[f32],
    scores: &mut [f32],
    g: usize,
    n: usize,
) {
    let nb = d / QK;
    assert!(fits(d) && qs.len() >= g * d && scores.len() >= g * n && k.len() >= n * nb);
    // [BLOCK, d] the block's rows, dequantised; rows past the last are zeros. Only the
    // `BLOCK * d` values written below are read.
    let mut buf = [MaybeUninit::<f32>::uninit(); BLOCK * MAX_D];
    let rows = buf.as_mut_ptr() as *mut f32;
    let mut j0 = 0;
    while j0 < n {
        let m = BLOCK.min(n - j0);
        for r in 0..BLOCK {
            let dst = rows.add(r * d);
            if r < m {
                let row = &k[(j0 + r) * nb..(j0 + r + 1) * nb];
                for (b, blk) in row.iter().enumerate() {
                    // SAFETY: b * 32 + 32 <= d <= MAX_D.
                    _mm512_storeu_ps(dst.add(b * QK), load16(blk, 0));
                    _mm512_storeu_ps(dst.add(b * QK + 16), load16(blk, 16));
                }
            } else {
                for c in (0..d).step_by(16) {
                    _mm512_storeu_ps(dst.add(c), _mm512_setzero_ps());
                }
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

/// `out[h] += sum_j w[h * n + j] * row j` for the `g` (1 to [`SUM_HEADS`]) heads.
///
/// # Safety
/// As [`scores`], with `out` (`g * d`) for `qs` and `w` (`g * n`) for `scores`.
#[target_feature(enable = "avx512f,f16c")]
pub(crate) unsafe fn weighted_sum(
    v: &[BlockQ8_0],
    d: usize,
    w: &[f32],
    out: &mut [f32],
    g: usize,
    n: usize,
) {
    assert!(fits(d) && (1..=SUM_HEADS).contains(&g));
    assert!(out.len() >= g * d && w.len() >= g * n && v.len() >= n * (d / QK));
    if d.is_multiple_of(64) {
        weighted_sum_heads::<4>(v, d, w, out, g, n);
    } else {
        weighted_sum_heads::<2>(v, d, w, out, g, n);
    }
}

/// [`weighted_sum_g`] for `g <= SUM_HEADS` heads, `C` registers per head.
///
/// # Safety
/// As [`weighted_sum`], with `d` a multiple of `16 C`.
#[inline]
#[target_feature(enable = "avx512f,f16c")]
unsafe fn weighted_sum_heads<const C: usize>(
    v: &[BlockQ8_0],
    d: usize,
    w: &[f32],
    out: &mut [f32],
    g: usize,
    n: usize,
) {
    match g {
        1 => weighted_sum_g::<1, C>(v, d, w, out, n),
        2 => weighted_sum_g::<2, C>(v, d, w, out, n),
        3 => weighted_sum_g::<3, C>(v, d, w, out, n),
        4 => weighted_sum_g::<4, C>(v, d, w, out, n),
        5 => weighted_sum_g::<5, C>(v, d, w, out, n),
        _ => weighted_sum_g::<6, C>(v, d, w, out, n),
    }
}

/// [`weighted_sum`] for `G` heads, `C` registers (16 columns each, `C` even: whole
/// blocks) per head held across all rows: one pass over the rows per `16 C` columns.
///
/// # Safety
/// As [`weighted_sum`], with `g == G` and `d` a multiple of `16 C`.
#[inline]
#[target_feature(enable = "avx512f,f16c")]
unsafe fn weighted_sum_g<const G: usize, const C: usize>(
    v: &[BlockQ8_0],
    d: usize,
    w: &[f32],
    out: &mut [f32],
    n: usize,
) {
    let nb = d / QK;
    for c0 in (0..d).step_by(16 * C) {
        let mut acc = [[_mm512_setzero_ps(); C]; G];
        let b0 = c0 / QK;
        for j in 0..n {
            let row = &v[j * nb + b0..j * nb + b0 + C / 2];
            let x: [__m512; C] = std::array::from_fn(|c| load16(&row[c / 2], 16 * (c % 2)));
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
