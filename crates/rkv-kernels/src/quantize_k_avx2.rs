//! AVX2 quantisation of activations to Q8_K (the `vec_dot_type` of the K-quants),
//! block by block, bit for bit `blocks_k::quantize_row_q8_k_ref` on finite input: the
//! same largest magnitude (the first value on ties), the same `iscale * x` products,
//! rounded to nearest with ties to even (`cvtps2dq` under the default rounding mode,
//! as `nearest_int`), and the same exact block sums.
//!
//! Blocks holding NaN differ: the SIMD maximum may or may not see a NaN, and the
//! conversion turns it into `i32::MIN` (clamped to -128) where the scalar path gives 0.
//! Must not know: threads, weights.

use std::arch::x86_64::*;

use crate::blocks_k::{BlockQ8K, QK_K};

/// Eight floats of `x` from `8 i`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load(x: &[f32; QK_K], i: usize) -> __m256 {
    assert!(i < QK_K / 8);
    // SAFETY: 8 i + 8 <= 256 (asserted); unaligned load.
    unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) }
}

/// The largest of eight floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_movehdup_ps(m));
    _mm_cvtss_f32(m)
}

/// The sum of eight i32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01>(s));
    _mm_cvtsi128_si32(s)
}

/// One Q8_K block of 256 values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quantize_block(x: &[f32; QK_K], b: &mut BlockQ8K) {
    let sign = _mm256_set1_ps(-0.0);
    let mut m = _mm256_setzero_ps();
    for i in 0..QK_K / 8 {
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, load(x, i)));
    }
    let amax = hmax(m);
    if amax == 0.0 {
        *b = BlockQ8K::default();
        return;
    }
    // The first value of largest magnitude, with its sign.
    let am = _mm256_set1_ps(amax);
    let mut max = amax;
    for i in 0..QK_K / 8 {
        let hit = _mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_andnot_ps(sign, load(x, i)), am);
        let mask = _mm256_movemask_ps(hit);
        if mask != 0 {
            max = x[8 * i + mask.trailing_zeros() as usize];
            break;
        }
    }
    let iscale = -127.0 / max;
    let is = _mm256_set1_ps(iscale);
    let top = _mm256_set1_epi32(127);
    for g in 0..QK_K / 16 {
        let lo = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, load(x, 2 * g))), top);
        let hi = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(is, load(x, 2 * g + 1))),
            top,
        );
        b.bsums[g] = hsum(_mm256_add_epi32(lo, hi)) as i16;
        // i16 lanes [lo 0-3, hi 0-3 | lo 4-7, hi 4-7], then in order.
        let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(lo, hi));
        let q = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
        // SAFETY: 16 g + 16 <= 256 bytes of `qs`; unaligned store.
        unsafe { _mm_storeu_si128(b.qs.as_mut_ptr().add(16 * g) as *mut __m128i, q) };
    }
    b.d = 1.0 / iscale;
}
