//! The q8_0 GQA kernels of `gqa_q8.rs` on AVX2 (with FMA and F16C: x86-64-v3), for CPUs
//! without AVX-512 (AMD Zen 2 and 3): head sizes that are a multiple of 32 up to 256, any
//! number of query heads for the scores, up to four at once for the weighted sum. Called
//! from `gqa_q8.rs` only when the CPU has those features (asked at run time), with the
//! shapes `gqa_q8::shape` checked.
//!
//! Owns: scores in blocks of 8 cached rows (each row dequantised once into a stack buffer,
//! each head's 8 products reduced together by `gqa_avx2`'s tree of horizontal adds; a
//! last partial block zero-padded) and the weighted sum in column chunks held in
//! registers across all rows.
//! Must not know: the scalar reference's summation order (agreement is to f32 rounding).

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use crate::blocks::{BlockQ8_0, QK};
use crate::gqa_avx2::reduce8;

/// Rows scored together.
const BLOCK: usize = 8;

/// Widest head the score kernel's stack buffer takes.
const MAX_D: usize = 256;

/// Heads whose weighted sums share one pass over the rows.
pub(crate) const SUM_HEADS: usize = 4;

/// Whether these kernels take head size `d`.
pub(crate) fn fits(d: usize) -> bool {
    d > 0 && d <= MAX_D && d.is_multiple_of(QK)
}

/// Eight values `at..at + 8` (`at` a multiple of 8 below 32) of `blk`, dequantised
/// (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8(blk: &BlockQ8_0, at: usize) -> __m256 {
    debug_assert!(at + 8 <= QK);
    let s = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(blk.d.to_bits()))));
    // SAFETY: 8 bytes at `at` lie in the block's 32 quants.
    let q = _mm_loadl_epi64(blk.qs.as_ptr().add(at) as *const __m128i);
    _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)),
        _mm256_set1_ps(s),
    )
}

/// `scores[h * n + j] = dot(row j, qs[h])` for the `g` heads and `n` rows.
///
/// # Safety
/// The target must have AVX2, FMA and F16C; [`fits`]`(d)`; `qs.len() >= g * d`,
/// `scores.len() >= g * n`, `k.len() >= n * d / 32`.
#[target_feature(enable = "avx2,fma,f16c")]
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
    // [BLOCK, d] the block's rows, dequantised; rows past the last are zeros.
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
                    for at in (0..QK).step_by(8) {
                        // SAFETY: b * 32 + at + 8 <= d <= MAX_D.
                        _mm256_storeu_ps(dst.add(b * QK + at), load8(blk, at));
                    }
                }
            } else {
                for c in (0..d).step_by(8) {
                    _mm256_storeu_ps(dst.add(c), _mm256_setzero_ps());
                }
            }
        }
        for h in 0..g {
            let q = qs.as_ptr().add(h * d);
            let mut acc = [_mm256_setzero_ps(); BLOCK];
            for c in (0..d).step_by(8) {
                let qv = _mm256_loadu_ps(q.add(c));
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(_mm256_loadu_ps(rows.add(r * d + c)), qv, *a);
                }
            }
            let sums = reduce8(acc);
            if m == BLOCK {
                // SAFETY: h * n + j0 + 8 <= h * n + n <= scores.len().
                _mm256_storeu_ps(scores.as_mut_ptr().add(h * n + j0), sums);
            } else {
                let mut lanes = [0.0f32; BLOCK];
                _mm256_storeu_ps(lanes.as_mut_ptr(), sums);
                scores[h * n + j0..h * n + j0 + m].copy_from_slice(&lanes[..m]);
            }
        }
        j0 += m;
    }
}

/// `out[h] += sum_j w[h * n + j] * row j` for the `g` (1 to [`SUM_HEADS`]) heads.
///
/// # Safety
/// As [`scores`], with `out` (`g * d`) for `qs` and `w` (`g * n`) for `scores`.
#[target_feature(enable = "avx2,fma,f16c")]
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
    match g {
        1 => weighted_sum_g::<1, 4>(v, d, w, out, n),
        2 => weighted_sum_g::<2, 4>(v, d, w, out, n),
        3 => weighted_sum_g::<3, 4>(v, d, w, out, n),
        _ => weighted_sum_g::<4, 2>(v, d, w, out, n),
    }
}

/// [`weighted_sum`] for `G` heads, `C` registers (8 columns each) per head held across
/// all rows: one pass over the rows per `8 C` columns (`8 C` divides 32).
///
/// # Safety
/// As [`weighted_sum`], with `g == G`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn weighted_sum_g<const G: usize, const C: usize>(
    v: &[BlockQ8_0],
    d: usize,
    w: &[f32],
    out: &mut [f32],
    n: usize,
) {
    let nb = d / QK;
    for c0 in (0..d).step_by(8 * C) {
        let mut acc = [[_mm256_setzero_ps(); C]; G];
        let (b, at) = (c0 / QK, c0 % QK);
        for j in 0..n {
            let blk = &v[j * nb + b];
            let x: [__m256; C] = std::array::from_fn(|c| load8(blk, at + 8 * c));
            for (h, ah) in acc.iter_mut().enumerate() {
                let wj = _mm256_broadcast_ss(&w[h * n + j]);
                for (a, xc) in ah.iter_mut().zip(x) {
                    *a = _mm256_fmadd_ps(wj, xc, *a);
                }
            }
        }
        for (h, ah) in acc.iter().enumerate() {
            for (c, a) in ah.iter().enumerate() {
                let p = out[h * d + c0 + 8 * c..h * d + c0 + 8 * c + 8].as_mut_ptr();
                // SAFETY: `p` points at 8 in-bounds floats of `out`.
                _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), *a));
            }
        }
    }
}
