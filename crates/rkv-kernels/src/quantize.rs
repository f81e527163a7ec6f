//! Activation quantisation to Q8_0 / Q8_1 (the `vec_dot_type`s of Q4_0/Q8_0
//! and Q4_1 weights).
//!
//! Numerics mirror ggml's x86 `quantize_row_q8_0` / `quantize_row_q8_1`
//! (`ggml/src/ggml-cpu/arch/x86/quants.c`, the AVX2 path that llama.cpp runs on
//! this class of CPU), which differ from the portable `quantize_row_q8_*_ref`
//! of `ggml/src/ggml-quants.c` in two details:
//! * the inverse scale is `127 / amax` (not `1 / d`), and
//! * rounding is to nearest with ties to even (`_mm256_round_ps`), not
//!   `roundf`'s ties away from zero.
//!
//! `d = amax / 127` is stored as f16; for Q8_1, `s = f16(d * sum(qs))` with the
//! unrounded f32 `d`. The SIMD path gives bit-identical blocks to the scalar one for
//! finite blocks whose `127 / amax` is finite (all-zero blocks included). Blocks holding
//! NaN or inf, or with `0 < amax < 127 / f32::MAX`, quantise differently on the two paths:
//! the SIMD conversion turns NaN, inf and overflowed products into -128, as ggml's does,
//! where the scalar one gives 0 or the clamped value, and a NaN may or may not reach the
//! SIMD maximum depending on its lane (the scalar maximum ignores it).

use half::f16;

use crate::blocks::{BlockQ8_0, BlockQ8_1, QK};
use crate::error::{check_len, check_multiple, KernelError};

/// Scale `d`, inverse scale and quants of one 32-value block (scalar).
fn quantize_block(x: &[f32], qs: &mut [i8; QK]) -> f32 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round_ties_even().clamp(-128.0, 127.0) as i8;
    }
    d
}

fn check_shapes(x: &[f32], blocks: usize) -> Result<(), KernelError> {
    check_multiple("quantize input", x.len(), QK)?;
    check_len("quantize output blocks", x.len() / QK, blocks)
}

/// Scalar Q8_0 quantisation (the oracle for the SIMD path).
///
/// # Errors
/// When `x.len() % 32 != 0` or `y.len() != x.len() / 32`.
pub fn quantize_row_q8_0_ref(x: &[f32], y: &mut [BlockQ8_0]) -> Result<(), KernelError> {
    check_shapes(x, y.len())?;
    for (b, xb) in y.iter_mut().zip(x.chunks_exact(QK)) {
        let d = quantize_block(xb, &mut b.qs);
        b.d = f16::from_f32(d);
    }
    Ok(())
}

/// Scalar Q8_1 quantisation (the oracle for the SIMD path).
///
/// # Errors
/// When `x.len() % 32 != 0` or `y.len() != x.len() / 32`.
pub fn quantize_row_q8_1_ref(x: &[f32], y: &mut [BlockQ8_1]) -> Result<(), KernelError> {
    check_shapes(x, y.len())?;
    for (b, xb) in y.iter_mut().zip(x.chunks_exact(QK)) {
        let d = quantize_block(xb, &mut b.qs);
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        b.d = f16::from_f32(d);
        b.s = f16::from_f32(d * sum as f32);
    }
    Ok(())
}

/// Quantises `x` (length a multiple of 32) into Q8_0 blocks `y`.
///
/// # Errors
/// When `x.len() % 32 != 0` or `y.len() != x.len() / 32`.
pub fn quantize_row_q8_0(x: &[f32], y: &mut [BlockQ8_0]) -> Result<(), KernelError> {
    check_shapes(x, y.len())?;
    let Some(block) = simd_block() else {
        return quantize_row_q8_0_ref(x, y);
    };
    for (b, xb) in y.iter_mut().zip(x.chunks_exact(QK)) {
        let (d, _) = block(xb, &mut b.qs);
        b.d = f16::from_f32(d);
    }
    Ok(())
}

/// Quantises `x` (length a multiple of 32) into Q8_1 blocks `y`.
///
/// # Errors
/// When `x.len() % 32 != 0` or `y.len() != x.len() / 32`.
pub fn quantize_row_q8_1(x: &[f32], y: &mut [BlockQ8_1]) -> Result<(), KernelError> {
    check_shapes(x, y.len())?;
    let Some(block) = simd_block() else {
        return quantize_row_q8_1_ref(x, y);
    };
    for (b, xb) in y.iter_mut().zip(x.chunks_exact(QK)) {
        let (d, sum) = block(xb, &mut b.qs);
        b.d = f16::from_f32(d);
        b.s = f16::from_f32(d * sum as f32);
    }
    Ok(())
}

/// One block's SIMD quantiser, `(x, qs) -> (d, sum(qs))`, for the running CPU: AVX-512F,
/// else AVX2 with FMA, else none (the scalar path).
#[allow(clippy::type_complexity)]
fn simd_block() -> Option<fn(&[f32], &mut [i8; QK]) -> (f32, i32)> {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::simd::avx512f() {
            // SAFETY (of the call inside): the CPU has AVX-512F (checked above).
            return Some(|x, qs| unsafe { avx512::quantize_block(x, qs) });
        }
        if crate::simd::avx2() {
            // SAFETY (of the call inside): the CPU has AVX2 and FMA (checked above).
            return Some(|x, qs| unsafe { avx2::quantize_block(x, qs) });
        }
    }
    None
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::QK;
    use std::arch::x86_64::*;

    /// One block: returns `(d, sum(qs))`. Reads `x[0..32]`.
    ///
    /// # Panics
    /// If `x.len() != 32`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn quantize_block(x: &[f32], qs: &mut [i8; QK]) -> (f32, i32) {
        assert_eq!(x.len(), QK);
        // SAFETY: x[0..32] is in bounds (asserted above).
        let (v0, v1) = unsafe {
            (
                _mm512_loadu_ps(x.as_ptr()),
                _mm512_loadu_ps(x.as_ptr().add(16)),
            )
        };
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let m = _mm512_set1_ps(id);
        const RN: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        let i0 = _mm512_cvtps_epi32(_mm512_roundscale_ps::<RN>(_mm512_mul_ps(v0, m)));
        let i1 = _mm512_cvtps_epi32(_mm512_roundscale_ps::<RN>(_mm512_mul_ps(v1, m)));
        let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
        let p = qs.as_mut_ptr() as *mut __m128i;
        // SAFETY: two 16-byte stores cover exactly the 32-byte array `qs`.
        unsafe {
            _mm_storeu_si128(p, _mm512_cvtsepi32_epi8(i0));
            _mm_storeu_si128(p.add(1), _mm512_cvtsepi32_epi8(i1));
        }
        (d, sum)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::QK;
    use std::arch::x86_64::*;

    /// One block, as ggml's AVX2 `quantize_row_q8_1`: returns `(d, sum(qs))`.
    ///
    /// # Panics
    /// If `x.len() != 32`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn quantize_block(x: &[f32], qs: &mut [i8; QK]) -> (f32, i32) {
        assert_eq!(x.len(), QK);
        // SAFETY: x[0..32] is in bounds (asserted above); unaligned loads.
        let v: [__m256; 4] =
            std::array::from_fn(|i| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) });
        let sign = _mm256_set1_ps(-0.0);
        let abs = |a: __m256| _mm256_andnot_ps(sign, a);
        let m8 = _mm256_max_ps(
            _mm256_max_ps(abs(v[0]), abs(v[1])),
            _mm256_max_ps(abs(v[2]), abs(v[3])),
        );
        let m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(m8), _mm256_castps256_ps128(m8));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        const RN: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        let q: [__m256i; 4] = std::array::from_fn(|i| {
            _mm256_cvtps_epi32(_mm256_round_ps::<RN>(_mm256_mul_ps(v[i], id)))
        });
        let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s4 = _mm_add_epi32(_mm256_extracti128_si256::<1>(s), _mm256_castsi256_si128(s));
        let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        let sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2)));
        // Saturating packs interleave the 128-bit halves; the permute restores order.
        let p16a = _mm256_packs_epi32(q[0], q[1]);
        let p16b = _mm256_packs_epi32(q[2], q[3]);
        let p8 = _mm256_packs_epi16(p16a, p16b);
        let ordered = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: one 32-byte store covers exactly the array `qs`; unaligned store.
        unsafe { _mm256_storeu_si256(qs.as_mut_ptr() as *mut __m256i, ordered) };
        (d, sum)
    }
}
