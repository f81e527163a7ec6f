//! AVX2 (+FMA, F16C) micro-kernel of the packed Q4_K product: eight weight rows
//! ([`BlockQ4_Kx8`]) against `T` Q8_K activation rows.
//!
//! Per sub-block pair, each 32-byte load of packed quants unpacks to the low and high
//! nibbles (four values of each row for sub-blocks `2 k` and `2 k + 1`); a broadcast
//! activation word meets them with `maddubs`, and eight chunks of pairs add up in i16
//! (each pair is at most `2 * 15 * 128`, eight of them stay under 2^15). One `madd`
//! with the rows' scales, each repeated over its row's two i16 lanes, leaves
//! `sc * (q . y)` in each row's i32 lane. The mins term pairs two sub-blocks' mins
//! per row with two sums of the activation's `bsums` in one `madd`.
//!
//! Bit-identical to `BlockQ4_Kx8::dot_lane_ref` (same exact integer sums, same `fma`
//! order per lane). Must not know: threads, models.

// Indexing by block `b`, pair `k`, chunk `c` and token `t` keeps the chains explicit.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::blocks_k::BlockQ8K;
use crate::interleaved::ROWS_X8;
use crate::packed_q4_k::BlockQ4_Kx8;

/// Eight bytes (one per row) widened to i16 and each repeated twice: `[s0 s0 s1 s1 ..]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn per_row_pairs(bytes: &[u8]) -> __m256i {
    assert!(bytes.len() >= 8);
    // SAFETY: 8 readable bytes (asserted); unaligned 64-bit load.
    let v = _mm_cvtepu8_epi16(unsafe { _mm_loadl_epi64(bytes.as_ptr() as *const __m128i) });
    _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v))
}

/// Two sub-blocks' eight bytes interleaved per row and widened: `[a0 b0 a1 b1 ..]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_pairs_of_two(a: &[u8], b: &[u8]) -> __m256i {
    assert!(a.len() >= 8 && b.len() >= 8);
    // SAFETY: 8 readable bytes each (asserted); unaligned 64-bit loads.
    let (va, vb) = unsafe {
        (
            _mm_loadl_epi64(a.as_ptr() as *const __m128i),
            _mm_loadl_epi64(b.as_ptr() as *const __m128i),
        )
    };
    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(va, vb))
}

/// `out[t][i] = dot(row i of w, ys[t])`, in the numerics of `packed_q4_k.rs`.
///
/// # Panics
/// If some `ys[t].len() != w.len()`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn q4_kx8_tile<const T: usize>(
    w: &[BlockQ4_Kx8],
    ys: &[&[BlockQ8K]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb, "q4_kx8 tile: block counts differ");
    }
    let mask = _mm256_set1_epi8(0x0F);
    let sign = _mm256_set1_ps(-0.0);
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        let wb = &w[b];
        // SAFETY: `d` and `dmin` are 8 f16 each (16 readable bytes); unaligned loads.
        let (d8, m8) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(wb.d.as_ptr() as *const __m128i)),
                _mm256_cvtph_ps(_mm_loadu_si128(wb.dmin.as_ptr() as *const __m128i)),
            )
        };
        let mins: [__m256i; 4] =
            std::array::from_fn(|p| row_pairs_of_two(&wb.mn[16 * p..], &wb.mn[16 * p + 8..]));
        let mut isum = [_mm256_setzero_si256(); T];
        for k in 0..4 {
            let sc_lo = per_row_pairs(&wb.sc[16 * k..]);
            let sc_hi = per_row_pairs(&wb.sc[16 * k + 8..]);
            let mut plo = [_mm256_setzero_si256(); T];
            let mut phi = [_mm256_setzero_si256(); T];
            for c in 0..8 {
                // SAFETY: 256 k + 32 c + 32 <= 1024 == qs.len(); unaligned load.
                let raw = unsafe {
                    _mm256_loadu_si256(wb.qs.as_ptr().add(256 * k + 32 * c) as *const __m256i)
                };
                let lo = _mm256_and_si256(raw, mask);
                let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
                for t in 0..T {
                    // SAFETY: b < ys[t].len() (asserted); 64 k + 32 + 4 c + 4 <= 256.
                    let (ylo, yhi) = unsafe {
                        let q = ys[t].get_unchecked(b).qs.as_ptr();
                        (
                            _mm256_set1_epi32(
                                (q.add(64 * k + 4 * c) as *const i32).read_unaligned(),
                            ),
                            _mm256_set1_epi32(
                                (q.add(64 * k + 32 + 4 * c) as *const i32).read_unaligned(),
                            ),
                        )
                    };
                    plo[t] = _mm256_add_epi16(plo[t], _mm256_maddubs_epi16(lo, ylo));
                    phi[t] = _mm256_add_epi16(phi[t], _mm256_maddubs_epi16(hi, yhi));
                }
            }
            for t in 0..T {
                let s = _mm256_add_epi32(
                    _mm256_madd_epi16(plo[t], sc_lo),
                    _mm256_madd_epi16(phi[t], sc_hi),
                );
                isum[t] = _mm256_add_epi32(isum[t], s);
            }
        }
        for t in 0..T {
            // SAFETY: b < ys[t].len() (asserted above).
            let yb = unsafe { ys[t].get_unchecked(b) };
            let mut msum = _mm256_setzero_si256();
            for p in 0..4 {
                let s0 = yb.bsums[4 * p] as i32 + yb.bsums[4 * p + 1] as i32;
                let s1 = yb.bsums[4 * p + 2] as i32 + yb.bsums[4 * p + 3] as i32;
                let pair = _mm256_set1_epi32((s0 & 0xFFFF) | (s1 << 16));
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins[p], pair));
            }
            let dy = _mm256_set1_ps(yb.d);
            let q = _mm256_cvtepi32_ps(isum[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, dy), q, acc[t]);
            let nm = _mm256_xor_ps(_mm256_mul_ps(m8, dy), sign);
            acc[t] = _mm256_fmadd_ps(nm, _mm256_cvtepi32_ps(msum), acc[t]);
        }
    }
    for t in 0..T {
        // SAFETY: `out[t]` is 8 writable f32; unaligned store.
        unsafe { _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]) };
    }
}
