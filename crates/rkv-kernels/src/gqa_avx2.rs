//! The row-batched GQA kernels of `gqa.rs` on AVX2 (with FMA and F16C: x86-64-v3), for
//! builds without AVX-512: head sizes that are a multiple of 8, groups of up to 4 query
//! heads. Called from `gqa.rs` only when the CPU has those features (asked at run time),
//! with the shapes `gqa::shape` checked.
//!
//! Owns: scores in blocks of 8 cached rows (each row widened once into a buffer, each
//! head's 8 products reduced together by one tree of horizontal adds) and the weighted
//! sum in column chunks held in registers across all rows.
//! Must not know: the scalar references' summation order (agreement is to f32 rounding).

use std::arch::x86_64::*;

use half::f16;

/// Rows scored together.
const BLOCK: usize = 8;

/// Widest head the score kernel's stack buffer takes.
const MAX_D: usize = 256;

/// Whether the AVX2 kernels take `d` and `g`.
pub(crate) fn fits(d: usize, g: usize) -> bool {
    d > 0 && d <= MAX_D && d.is_multiple_of(32) && g <= 4
}

/// `scores[h * n + j] = dot(row j, qs[h])` for the rows of whole blocks of 8; returns
/// how many rows it scored (the rest is the caller's).
///
/// # Safety
/// The target must have AVX2, FMA and F16C; [`fits`]`(d, g)`; `qs.len() == g * d`,
/// `scores.len() == g * n`, row `j < n` is `k[j * stride..j * stride + d]`, in bounds.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn scores(
    k: &[f16],
    stride: usize,
    d: usize,
    qs: &[f32],
    scores: &mut [f32],
    g: usize,
    n: usize,
) -> usize {
    assert!(fits(d, g) && qs.len() >= g * d && scores.len() >= g * n);
    let blocks = n / BLOCK;
    // [BLOCK, d] the block's rows, widened (on the stack: the engine calls this once per
    // block of the cache, a few dozen rows). Not zeroed: only the `BLOCK * d` values
    // written below are read, and zeroing all `BLOCK * MAX_D` (8 KB) on every call took
    // 29% of the kernel's time with it at head dim 64.
    let mut buf = [std::mem::MaybeUninit::<f32>::uninit(); BLOCK * MAX_D];
    let rows = buf.as_mut_ptr() as *mut f32;
    for b in 0..blocks {
        let j0 = b * BLOCK;
        for r in 0..BLOCK {
            let src = k.as_ptr().add((j0 + r) * stride);
            let dst = rows.add(r * d);
            for c in (0..d).step_by(8) {
                // SAFETY: row j0 + r lies in k (caller's contract); c + 8 <= d.
                let x = _mm256_cvtph_ps(_mm_loadu_si128(src.add(c) as *const __m128i));
                _mm256_storeu_ps(dst.add(c), x);
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
            // SAFETY: h * n + j0 + 8 <= h * n + n <= scores.len().
            _mm256_storeu_ps(scores.as_mut_ptr().add(h * n + j0), reduce8(acc));
        }
    }
    blocks * BLOCK
}

/// The 8 lane sums of `a`, in order: lane `r` is the sum of `a[r]`'s lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn reduce8(a: [__m256; 8]) -> __m256 {
    // Per 128-bit half: [a0 pair sums, a1 pair sums], ...
    let t0 = _mm256_hadd_ps(a[0], a[1]);
    let t1 = _mm256_hadd_ps(a[2], a[3]);
    let t2 = _mm256_hadd_ps(a[4], a[5]);
    let t3 = _mm256_hadd_ps(a[6], a[7]);
    // Per half: the half's sums of a0..a3 (u0) and a4..a7 (u1).
    let u0 = _mm256_hadd_ps(t0, t1);
    let u1 = _mm256_hadd_ps(t2, t3);
    _mm256_add_ps(
        _mm256_permute2f128_ps::<0x20>(u0, u1),
        _mm256_permute2f128_ps::<0x31>(u0, u1),
    )
}

/// `out[h] += sum_j w[h * n + j] * row j` for the `g` heads.
///
/// # Safety
/// As [`scores`], with `out` (`g * d`) for `qs` and `w` (`g * n`) for `scores`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn weighted_sum(
    v: &[f16],
    stride: usize,
    d: usize,
    w: &[f32],
    out: &mut [f32],
    g: usize,
    n: usize,
) {
    assert!(fits(d, g) && out.len() >= g * d && w.len() >= g * n);
    match g {
        1 => weighted_sum_g::<1, 4>(v, stride, d, w, out, n),
        2 => weighted_sum_g::<2, 4>(v, stride, d, w, out, n),
        3 => weighted_sum_g::<3, 4>(v, stride, d, w, out, n),
        _ => weighted_sum_g::<4, 2>(v, stride, d, w, out, n),
    }
}

/// [`weighted_sum`] for `G` heads, `C` registers (8 columns each) per head held across
/// all rows: one pass over the rows per `8 C` columns.
///
/// # Safety
/// As [`weighted_sum`], with `g == G` and `d` a multiple of `8 C`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn weighted_sum_g<const G: usize, const C: usize>(
    v: &[f16],
    stride: usize,
    d: usize,
    w: &[f32],
    out: &mut [f32],
    n: usize,
) {
    for c0 in (0..d).step_by(8 * C) {
        let mut acc = [[_mm256_setzero_ps(); C]; G];
        for j in 0..n {
            let src = v.as_ptr().add(j * stride + c0);
            // SAFETY: row j lies in v (caller's contract); c0 + 8 C <= d.
            let x: [__m256; C] = std::array::from_fn(|c| {
                _mm256_cvtph_ps(_mm_loadu_si128(src.add(8 * c) as *const __m128i))
            });
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
