//! AVX2 (+FMA, F16C; AVX512-VNNI when enabled) multi-row quantised dot
//! kernels: `out[r] = dot(w row r, y)` for `R` weight rows sharing one
//! activation row, so the activation block is loaded once per `R` rows and the
//! `R` accumulator chains run in parallel.
//!
//! Bit-identical to the scalar references in `dot.rs`, which mirror ggml's x86
//! kernels (`ggml/src/ggml-cpu/arch/x86/quants.c`): per block, 8 int32 lanes of
//! 4 products (`_mm256_dpbusd_epi32` or `maddubs` + `madd`, same sums), converted
//! to f32 and accumulated with `fma(dx*dy, lanes, acc)`, then `hsum_float_8`.
//!
//! Compiled on every x86-64 target; `dot.rs` calls in only when the CPU has AVX2,
//! FMA and F16C (asked at run time), so every intrinsic below is available then.

// Indexing by block `i` and row `r` keeps the R accumulator chains explicit.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1};

/// Loads the two f16 at the start of a block (`d` and `m`/`s`/`qs[0..2]`) as
/// lanes 0 and 1 of an f32 vector.
///
/// # Safety
/// `p` must be valid for reading 4 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn load_f16x2(p: *const u8) -> __m128 {
    // SAFETY: the caller guarantees 4 readable bytes; unaligned read.
    let bits = unsafe { (p as *const i32).read_unaligned() };
    _mm_cvtph_ps(_mm_cvtsi32_si128(bits))
}

/// Unpacks 16 bytes of nibbles to 32 bytes in `0..16`: low nibbles first
/// (values 0..16), then high nibbles (values 16..32), as ggml's
/// `bytes_from_nibbles_32`.
///
/// # Safety
/// `qs` must be valid for reading 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(qs: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes; unaligned load.
    let t = unsafe { _mm_loadu_si128(qs as *const __m128i) };
    let b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    _mm256_and_si256(b, _mm256_set1_epi8(0x0F))
}

/// Per 32-bit lane, the sum of 4 products of unsigned `ax` and signed `sy`.
///
/// # Safety
/// The CPU must have AVX2, and AVX-512 VNNI and VL where `VNNI`; call it from a function
/// compiled with those features (it is inlined there).
#[inline(always)]
unsafe fn dot_u8_i8<const VNNI: bool>(ax: __m256i, sy: __m256i) -> __m256i {
    // SAFETY: the caller's CPU has the features (above).
    unsafe {
        if VNNI {
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy)
        } else {
            _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1))
        }
    }
}

/// Per 32-bit lane, the sum of 4 products of signed `x` (weights) and `y` (activations),
/// as `|y| * (x * sign(y))`: exact for every activation, including -128 (`|y|` is taken
/// as unsigned); only a weight of -128 against a negative activation wraps (`-(-128)`),
/// which Q4_0's nibbles cannot be and ggml's Q8_0 quantiser never writes. (ggml puts
/// the sign on the weights' side, which an activation of -128 breaks instead.)
///
/// # Safety
/// As [`dot_u8_i8`].
#[inline(always)]
unsafe fn dot_i8_i8<const VNNI: bool>(x: __m256i, y: __m256i) -> __m256i {
    // SAFETY: the caller's CPU has the features (above).
    unsafe { dot_u8_i8::<VNNI>(_mm256_sign_epi8(y, y), _mm256_sign_epi8(x, y)) }
}

/// ggml's `hsum_float_8`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(acc: __m256) -> f32 {
    let mut r = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// Blocks past the current position of the next row group to prefetch.
const PREFETCH_BLOCKS: usize = 8;

/// Prefetches the block `PREFETCH_BLOCKS` after the one at the same position
/// in the next group of `R` rows (`nb` blocks per row): the weight stream is
/// DRAM-bound and the hardware prefetcher alone lags behind it.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prefetch_ahead<const R: usize, B>(xb: &B, nb: usize) {
    // `wrapping_add` may point past the slice; prefetches never fault.
    let p = (xb as *const B).wrapping_add(R * nb + PREFETCH_BLOCKS);
    _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
}

crate::simd::vnni_twins! {
/// `out[r] = dot(w[r*nb..(r+1)*nb], y)` for Q4_1 x Q8_1 (`nb = y.len()`).
///
/// # Panics
/// If `w.len() != R * y.len()`.
#[inline]
pub(crate) fn q4_1_rows / q4_1_rows_vnni [const R: usize] (w: &[BlockQ4_1], y: &[BlockQ8_1], out: &mut [f32; R]) {
    let nb = y.len();
    assert_eq!(w.len(), R * nb);
    let mut acc = [_mm256_setzero_ps(); R];
    // Lane 1 accumulates fma(m, s, summs); lane 0 is unused.
    let mut summs = [_mm_setzero_ps(); R];
    for i in 0..nb {
        let yb = &y[i];
        // SAFETY: `yb` is a whole 36-byte block: 4 bytes at its start and
        // 32 bytes at `qs` are readable.
        let (yds, qy) = unsafe {
            (
                load_f16x2(yb as *const BlockQ8_1 as *const u8),
                _mm256_loadu_si256(yb.qs.as_ptr() as *const __m256i),
            )
        };
        for r in 0..R {
            // SAFETY: r * nb + i < R * nb == w.len(), checked above.
            let xb = unsafe { w.get_unchecked(r * nb + i) };
            prefetch_ahead::<R, BlockQ4_1>(xb, nb);
            // SAFETY: `xb` is a whole 20-byte block (d, m, then 16 bytes qs).
            let (xdm, qx) = unsafe {
                (
                    load_f16x2(xb as *const BlockQ4_1 as *const u8),
                    nibbles(xb.qs.as_ptr()),
                )
            };
            summs[r] = _mm_fmadd_ps(xdm, yds, summs[r]);
            let dd = _mm256_broadcastss_ps(_mm_mul_ps(xdm, yds));
            // SAFETY: the function has VNNI's features where `VNNI` (`vnni_twins`).
            let q = _mm256_cvtepi32_ps(unsafe { dot_u8_i8::<VNNI>(qx, qy) });
            acc[r] = _mm256_fmadd_ps(dd, q, acc[r]);
        }
    }
    for r in 0..R {
        out[r] = hsum(acc[r]) + _mm_cvtss_f32(_mm_movehdup_ps(summs[r]));
    }
}
}

/// A weight block of 32 signed quants under one f16 scale stored first.
pub(crate) trait SignedQuants {
    /// The 32 quants as signed bytes.
    ///
    /// # Safety
    /// The CPU must have AVX2 (this module is compiled only when it is enabled).
    unsafe fn quants(&self) -> __m256i;
}

impl SignedQuants for BlockQ4_0 {
    /// Nibbles minus 8, as ggml's `q4_0` kernel.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants(&self) -> __m256i {
        // SAFETY: `qs` is 16 readable bytes.
        let q = unsafe { nibbles(self.qs.as_ptr()) };
        _mm256_sub_epi8(q, _mm256_set1_epi8(8))
    }
}

impl SignedQuants for BlockQ8_0 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants(&self) -> __m256i {
        // SAFETY: `qs` is 32 readable bytes; unaligned load.
        unsafe { _mm256_loadu_si256(self.qs.as_ptr() as *const __m256i) }
    }
}

crate::simd::vnni_twins! {
/// `out[r] = dot(w[r*nb..(r+1)*nb], y)` for Q4_0 or Q8_0 weights x Q8_0 (`nb = y.len()`).
///
/// # Panics
/// If `w.len() != R * y.len()`.
#[inline]
pub(crate) fn signed_rows / signed_rows_vnni [const R: usize, B: SignedQuants] (
    w: &[B],
    y: &[BlockQ8_0],
    out: &mut [f32; R],
) {
    let nb = y.len();
    assert_eq!(w.len(), R * nb);
    let mut acc = [_mm256_setzero_ps(); R];
    for i in 0..nb {
        let yb = &y[i];
        // SAFETY: `yb` is a whole 34-byte block (d then 32 bytes qs).
        let (yd, qy) = unsafe {
            (
                load_f16x2(yb as *const BlockQ8_0 as *const u8),
                _mm256_loadu_si256(yb.qs.as_ptr() as *const __m256i),
            )
        };
        for r in 0..R {
            // SAFETY: r * nb + i < R * nb == w.len(), checked above.
            let xb = unsafe { w.get_unchecked(r * nb + i) };
            prefetch_ahead::<R, B>(xb, nb);
            // SAFETY: `xb` is a whole block that starts with its f16 scale (and at
            // least 2 more bytes); this build has AVX2.
            let (xd, qx) = unsafe { (load_f16x2(xb as *const B as *const u8), xb.quants()) };
            let dd = _mm256_broadcastss_ps(_mm_mul_ps(xd, yd));
            // SAFETY: the function has VNNI's features where `VNNI` (`vnni_twins`).
            let q = _mm256_cvtepi32_ps(unsafe { dot_i8_i8::<VNNI>(qx, qy) });
            acc[r] = _mm256_fmadd_ps(dd, q, acc[r]);
        }
    }
    for r in 0..R {
        out[r] = hsum(acc[r]);
    }
}
}
