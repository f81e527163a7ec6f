//! AVX2 (+FMA, F16C) micro-kernels of the packed K-quant products: eight weight rows
//! ([`BlockQ4_Kx8`], [`BlockQ5_Kx8`], [`BlockQ6_Kx8`]) against `T` Q8_K activation
//! rows.
//!
//! Per sub-block pair, each 32-byte load of packed quants unpacks to the low and high
//! nibbles (four values of each row for sub-blocks `2 k` and `2 k + 1`); a broadcast
//! activation word meets them with `maddubs`, and eight chunks of pairs add up in i16
//! (each pair is at most `2 * 15 * 128`, eight of them stay under 2^15). One `madd`
//! with the rows' scales, each repeated over its row's two i16 lanes, leaves
//! `sc * (q . y)` in each row's i32 lane. The mins term pairs two sub-blocks' mins
//! per row with two sums of the activation's `bsums` in one `madd`.
//!
//! Q6_K: each chunk's six-bit quants are assembled from a `ql` nibble and two `qh`
//! bits (per byte, so shifts never carry between values), the block read front to
//! back; `maddubs` pairs reach `2 * 63 * 128`, so two chunks add up in i16 before they
//! meet their signed scales (`madd`), widened once per four chunks. The `- 32` offset
//! goes through the activation's `bsums`, as in ggml.
//!
//! Bit-identical to each format's `dot_lane_ref` (same exact integer sums, same `fma`
//! order per lane). Must not know: threads, models.

// Indexing by block `b`, pair `k`, chunk `c` and token `t` keeps the chains explicit.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::blocks_k::BlockQ8K;
use crate::interleaved::ROWS_X8;
use crate::packed_q4_k::BlockQ4_Kx8;
use crate::packed_q5_k::{qh_at, qs_at, BlockQ5_Kx8};
use crate::packed_q6_k::{chunk_at, BlockQ6_Kx8};
use crate::wide::i16_pair;

/// The first eight bytes of `bytes` (one per row) in the low half of a register.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load8<B: Copy>(bytes: &[B]) -> __m128i {
    assert!(bytes.len() >= 8 && std::mem::size_of::<B>() == 1);
    // SAFETY: 8 readable bytes (asserted); unaligned 64-bit load.
    unsafe { _mm_loadl_epi64(bytes.as_ptr() as *const __m128i) }
}

/// Eight i16 (one per row), each repeated twice: `[s0 s0 s1 s1 ..]`, so that one `madd`
/// meets each row's two i16 pair sums with the row's value.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn repeat_pairs(v: __m128i) -> __m256i {
    _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v))
}

/// Eight unsigned bytes (one per row) widened and each repeated twice.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn per_row_pairs(bytes: &[u8]) -> __m256i {
    repeat_pairs(_mm_cvtepu8_epi16(load8(bytes)))
}

/// Eight signed bytes (one per row) widened and each repeated twice.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn per_row_pairs_i8(bytes: &[i8]) -> __m256i {
    repeat_pairs(_mm_cvtepi8_epi16(load8(bytes)))
}

/// Two sub-blocks' eight unsigned bytes interleaved per row and widened: `[a0 b0 a1 b1 ..]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn row_pairs_of_two(a: &[u8], b: &[u8]) -> __m256i {
    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(load8(a), load8(b)))
}

/// Two sub-blocks' eight signed bytes interleaved per row and widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn row_pairs_of_two_i8(a: &[i8], b: &[i8]) -> __m256i {
    _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(load8(a), load8(b)))
}

/// One super-block's contribution to a Q4_K or Q5_K output:
/// `acc = fma(d * d_y, isum, acc); acc = fma(-(dmin * d_y), msum, acc)`, where `msum`
/// pairs each row's mins (`mins[p]`: sub-blocks `2 p`, `2 p + 1`) with the sums of the
/// activation's `bsums` over those sub-blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn add_scaled_with_mins(
    acc: __m256,
    d8: __m256,
    m8: __m256,
    mins: &[__m256i; 4],
    isum: __m256i,
    yb: &BlockQ8K,
) -> __m256 {
    let mut msum = _mm256_setzero_si256();
    for p in 0..4 {
        let s0 = yb.bsums[4 * p] as i32 + yb.bsums[4 * p + 1] as i32;
        let s1 = yb.bsums[4 * p + 2] as i32 + yb.bsums[4 * p + 3] as i32;
        let pair = _mm256_set1_epi32((s0 & 0xFFFF) | (s1 << 16));
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins[p], pair));
    }
    let dy = _mm256_set1_ps(yb.d);
    let acc = _mm256_fmadd_ps(_mm256_mul_ps(d8, dy), _mm256_cvtepi32_ps(isum), acc);
    let nm = _mm256_xor_ps(_mm256_mul_ps(m8, dy), _mm256_set1_ps(-0.0));
    _mm256_fmadd_ps(nm, _mm256_cvtepi32_ps(msum), acc)
}

/// One Q6_K super-block's contribution to the eight rows' outputs:
/// `acc = fma(d * d_y, isum - 32 * osum, acc)`, where `osum` pairs each row's scales
/// (`scales[p]`: sub-blocks `2 p`, `2 p + 1`) with the activation's `bsums` (the `- 32`
/// offset of the six-bit quants).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn add_q6_block(
    acc: __m256,
    d8: __m256,
    scales: &[__m256i; 8],
    isum: __m256i,
    yb: &BlockQ8K,
) -> __m256 {
    let mut osum = _mm256_setzero_si256();
    for p in 0..8 {
        let pair = _mm256_set1_epi32(i16_pair(yb.bsums[2 * p], yb.bsums[2 * p + 1]));
        osum = _mm256_add_epi32(osum, _mm256_madd_epi16(scales[p], pair));
    }
    let total = _mm256_sub_epi32(isum, _mm256_slli_epi32(osum, 5));
    let dy = _mm256_set1_ps(yb.d);
    _mm256_fmadd_ps(_mm256_mul_ps(d8, dy), _mm256_cvtepi32_ps(total), acc)
}

/// The eight rows' `d` and `dmin` as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn scales_f32(
    d: &[half::f16; ROWS_X8],
    dmin: &[half::f16; ROWS_X8],
) -> (__m256, __m256) {
    // SAFETY: 8 f16 each (16 readable bytes); unaligned loads.
    unsafe {
        (
            _mm256_cvtph_ps(_mm_loadu_si128(d.as_ptr() as *const __m128i)),
            _mm256_cvtph_ps(_mm_loadu_si128(dmin.as_ptr() as *const __m128i)),
        )
    }
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
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        let wb = &w[b];
        let (d8, m8) = scales_f32(&wb.d, &wb.dmin);
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
            acc[t] = add_scaled_with_mins(acc[t], d8, m8, &mins, isum[t], yb);
        }
    }
    for t in 0..T {
        // SAFETY: `out[t]` is 8 writable f32; unaligned store.
        unsafe { _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]) };
    }
}

/// `out[t][i] = dot(row i of w, ys[t])`, in the numerics of `packed_q6_k.rs`.
///
/// # Panics
/// If some `ys[t].len() != w.len()`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn q6_kx8_tile<const T: usize>(
    w: &[BlockQ6_Kx8],
    ys: &[&[BlockQ8K]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb, "q6_kx8 tile: block counts differ");
    }
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(0x03);
    // The six-bit quants of one 96-byte chunk at `at`, part by part.
    let six_bits = |wb: &BlockQ6_Kx8, at: usize| -> [__m256i; 4] {
        // SAFETY: at + 96 <= Q_BYTES == q.len() (at is a chunk start); unaligned loads.
        let (l0, l1, h) = unsafe {
            let p = wb.q.as_ptr().add(at);
            (
                _mm256_loadu_si256(p as *const __m256i),
                _mm256_loadu_si256(p.add(32) as *const __m256i),
                _mm256_loadu_si256(p.add(64) as *const __m256i),
            )
        };
        let high = |bits: __m256i| _mm256_slli_epi16(_mm256_and_si256(bits, m2), 4);
        [
            _mm256_or_si256(_mm256_and_si256(l0, m4), high(h)),
            _mm256_or_si256(_mm256_and_si256(l1, m4), high(_mm256_srli_epi16(h, 2))),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                high(_mm256_srli_epi16(h, 4)),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                high(_mm256_srli_epi16(h, 6)),
            ),
        ]
    };
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        let wb = &w[b];
        // SAFETY: `d` is 8 f16 (16 readable bytes); unaligned load.
        let d8 = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(wb.d.as_ptr() as *const __m128i)) };
        let mut isum = [_mm256_setzero_si256(); T];
        for n in 0..2 {
            for g in 0..2 {
                // Chunks 4 g .. 4 g + 4 of part p lie in sub-block 8 n + 2 p + g.
                let sc: [__m256i; 4] =
                    std::array::from_fn(|p| per_row_pairs_i8(&wb.sc[8 * (8 * n + 2 * p + g)..]));
                for c in (4 * g..4 * g + 4).step_by(2) {
                    // Two chunks' pairs (each at most 2 * 63 * 128) add up in i16.
                    let q0 = six_bits(wb, chunk_at(n, c));
                    let q1 = six_bits(wb, chunk_at(n, c + 1));
                    for t in 0..T {
                        for p in 0..4 {
                            // SAFETY: b < ys[t].len() (asserted); 128 n + 32 p + 4 c + 8
                            // <= 256.
                            let (y0, y1) = unsafe {
                                let at = ys[t]
                                    .get_unchecked(b)
                                    .qs
                                    .as_ptr()
                                    .add(128 * n + 32 * p + 4 * c);
                                (
                                    _mm256_set1_epi32((at as *const i32).read_unaligned()),
                                    _mm256_set1_epi32((at.add(4) as *const i32).read_unaligned()),
                                )
                            };
                            let pairs = _mm256_add_epi16(
                                _mm256_maddubs_epi16(q0[p], y0),
                                _mm256_maddubs_epi16(q1[p], y1),
                            );
                            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(pairs, sc[p]));
                        }
                    }
                }
            }
        }
        let scales: [__m256i; 8] =
            std::array::from_fn(|p| row_pairs_of_two_i8(&wb.sc[16 * p..], &wb.sc[16 * p + 8..]));
        for t in 0..T {
            // SAFETY: b < ys[t].len() (asserted above).
            let yb = unsafe { ys[t].get_unchecked(b) };
            acc[t] = add_q6_block(acc[t], d8, &scales, isum[t], yb);
        }
    }
    for t in 0..T {
        // SAFETY: `out[t]` is 8 writable f32; unaligned store.
        unsafe { _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]) };
    }
}

/// `out[t][i] = dot(row i of w, ys[t])`, in the numerics of `packed_q5_k.rs`: the
/// Q4_K kernel with a fifth bit per value from `qh`; pairs reach `2 * 31 * 128`, so
/// four chunks add up in i16 before they meet the scales.
///
/// # Panics
/// If some `ys[t].len() != w.len()`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn q5_kx8_tile<const T: usize>(
    w: &[BlockQ5_Kx8],
    ys: &[&[BlockQ8K]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb, "q5_kx8 tile: block counts differ");
    }
    let mask = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(0x01);
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        let wb = &w[b];
        let (d8, m8) = scales_f32(&wb.d, &wb.dmin);
        let mins: [__m256i; 4] =
            std::array::from_fn(|p| row_pairs_of_two(&wb.mn[16 * p..], &wb.mn[16 * p + 8..]));
        let mut isum = [_mm256_setzero_si256(); T];
        for k in 0..4 {
            let sc_lo = per_row_pairs(&wb.sc[16 * k..]);
            let sc_hi = per_row_pairs(&wb.sc[16 * k + 8..]);
            let (shift_lo, shift_hi) = (
                _mm_cvtsi32_si128(2 * k as i32),
                _mm_cvtsi32_si128(2 * k as i32 + 1),
            );
            let mut plo = [_mm256_setzero_si256(); T];
            let mut phi = [_mm256_setzero_si256(); T];
            for c in 0..8 {
                // SAFETY: qs_at(k, c) + 32 and qh_at(c) + 32 are at most Q_BYTES ==
                // q.len(); unaligned loads.
                let (raw, h) = unsafe {
                    (
                        _mm256_loadu_si256(wb.q.as_ptr().add(qs_at(k, c)) as *const __m256i),
                        _mm256_loadu_si256(wb.q.as_ptr().add(qh_at(c)) as *const __m256i),
                    )
                };
                let bit = |s| _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h, s), one), 4);
                let lo = _mm256_or_si256(_mm256_and_si256(raw, mask), bit(shift_lo));
                let hi = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask),
                    bit(shift_hi),
                );
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
                if c % 4 == 3 {
                    for t in 0..T {
                        let s = _mm256_add_epi32(
                            _mm256_madd_epi16(plo[t], sc_lo),
                            _mm256_madd_epi16(phi[t], sc_hi),
                        );
                        isum[t] = _mm256_add_epi32(isum[t], s);
                        plo[t] = _mm256_setzero_si256();
                        phi[t] = _mm256_setzero_si256();
                    }
                }
            }
        }
        for t in 0..T {
            // SAFETY: b < ys[t].len() (asserted above).
            let yb = unsafe { ys[t].get_unchecked(b) };
            acc[t] = add_scaled_with_mins(acc[t], d8, m8, &mins, isum[t], yb);
        }
    }
    for t in 0..T {
        // SAFETY: `out[t]` is 8 writable f32; unaligned store.
        unsafe { _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]) };
    }
}
