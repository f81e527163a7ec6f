//! AVX2 (+FMA, F16C; AVX512-VNNI when enabled) micro-kernels of the packed 5-bit
//! products: eight weight rows of Q5_0 ([`BlockQ5_0x8`]) or Q5_1 ([`BlockQ5_1x8`])
//! against `T` activation rows.
//!
//! As the Q4_1 kernel (`gemm_avx2.rs`), plus the fifth bits: one 32-byte load of a
//! block's regrouped `qh` per block; per chunk a byte shuffle gives every byte its row's
//! chunk byte, and a compare against one bit per byte position turns it into a mask
//! that sets the value's bit 4. Q5_0's values `q - 16` are signed: as ggml does, a
//! clear fifth bit sets the high nibble (`0xF0 | nibble` is `nibble - 16`), and the
//! weight's sign moves onto the activation (`sign`), so `maddubs` meets `|w| <= 16`
//! with `±y`; sixteen products of at most `16 * 127` stay in i16. Q5_1's values reach
//! 31, so its i16 sums are widened every two chunks.
//!
//! Bit-identical to each format's `dot_lane_ref`. Must not know: threads, models.

// Indexing by block `b`, chunk `c` and token `t` keeps the accumulator chains explicit.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::blocks::{BlockQ8_0, BlockQ8_1};
use crate::dot_avx2::load_f16x2;
use crate::gemm_avx2::{accumulate, lane_sums};
use crate::interleaved::ROWS_X8;
use crate::packed_q5_0::BlockQ5_0x8;
use crate::packed_q5_1::BlockQ5_1x8;

/// For chunk `c` of a block whose regrouped `qh` is `qh`: bytes of 0xFF where the
/// fifth bit of a low-nibble value is set, and the same for high-nibble values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth_bits(qh: __m256i, c: usize) -> (__m256i, __m256i) {
    // Byte `k` of row `i`'s lane takes the lane's byte `c` (shuffles stay in halves).
    #[rustfmt::skip]
    let first = _mm256_setr_epi8(
        0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
        0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
    );
    let x = _mm256_shuffle_epi8(qh, _mm256_add_epi8(first, _mm256_set1_epi8(c as i8)));
    // Byte `k` of each lane tests bit `k` (low values) or bit `4 + k` (high values).
    let lo_bit = _mm256_set1_epi32(0x0804_0201);
    let hi_bit = _mm256_set1_epi32(0x8040_2010u32 as i32);
    (
        _mm256_cmpeq_epi8(_mm256_and_si256(x, lo_bit), lo_bit),
        _mm256_cmpeq_epi8(_mm256_and_si256(x, hi_bit), hi_bit),
    )
}

/// The two broadcast activation words of chunk `c` of block `b` of `y` (values
/// `4 c..4 c + 4` and `16 + 4 c..`).
///
/// # Safety
/// `b < y.len()` and `c < 4`; `q` points at the block's 32 quants.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn words(q: *const i8, c: usize) -> (__m256i, __m256i) {
    // SAFETY: the caller's contract: 16 + 4 c + 4 <= 32 readable quants.
    unsafe {
        (
            _mm256_set1_epi32((q.add(4 * c) as *const i32).read_unaligned()),
            _mm256_set1_epi32((q.add(16 + 4 * c) as *const i32).read_unaligned()),
        )
    }
}

crate::simd::vnni_twins! {
/// `out[t][i] = dot(row i of w, ys[t])`, in the numerics of `packed_q5_0.rs`.
///
/// # Panics
/// If some `ys[t].len() != w.len()`.
#[inline]
pub(crate) fn q5_0x8_tile / q5_0x8_tile_vnni [const T: usize] (
    w: &[BlockQ5_0x8],
    ys: &[&[BlockQ8_0]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb, "q5_0x8 tile: block counts differ");
    }
    let mask = _mm256_set1_epi8(0x0F);
    let high = _mm256_set1_epi8(0xF0u8 as i8);
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY: b < nb == w.len() == ys[t].len() (asserted above).
        let wb = unsafe { w.get_unchecked(b) };
        // SAFETY: `d` is 8 f16 (16 readable bytes), `qh` 32 bytes; unaligned loads.
        let (d8, qh) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(wb.d.as_ptr() as *const __m128i)),
                _mm256_loadu_si256(wb.qh.as_ptr() as *const __m256i),
            )
        };
        let mut sums = [_mm256_setzero_si256(); T];
        for c in 0..4 {
            // SAFETY: 32 * c + 32 <= 128 == qs.len(); unaligned load.
            let raw = unsafe { _mm256_loadu_si256(wb.qs.as_ptr().add(32 * c) as *const __m256i) };
            let (lo_set, hi_set) = fifth_bits(qh, c);
            let lo = _mm256_or_si256(
                _mm256_and_si256(raw, mask),
                _mm256_andnot_si256(lo_set, high),
            );
            let hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask),
                _mm256_andnot_si256(hi_set, high),
            );
            let (alo, ahi) = (_mm256_abs_epi8(lo), _mm256_abs_epi8(hi));
            for t in 0..T {
                // SAFETY: b < ys[t].len(), c < 4.
                let (ylo, yhi) = unsafe { words(ys[t].get_unchecked(b).qs.as_ptr(), c) };
                let (slo, shi) = (_mm256_sign_epi8(ylo, lo), _mm256_sign_epi8(yhi, hi));
                // SAFETY: the function has VNNI's features where `VNNI` (`vnni_twins`).
                sums[t] = unsafe { accumulate::<VNNI>(sums[t], alo, slo, ahi, shi) };
            }
        }
        for t in 0..T {
            // SAFETY: b < ys[t].len().
            let dt = _mm256_set1_ps(unsafe { ys[t].get_unchecked(b) }.d.to_f32());
            // SAFETY: the function has VNNI's features where `VNNI` (`vnni_twins`).
            let q = _mm256_cvtepi32_ps(unsafe { lane_sums::<VNNI>(sums[t]) });
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, dt), q, acc[t]);
        }
    }
    for t in 0..T {
        // SAFETY: `out[t]` is 8 writable f32; unaligned store.
        unsafe { _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]) };
    }
}
}

crate::simd::vnni_twins! {
/// `out[t][i] = dot(row i of w, ys[t])`, in the numerics of `packed_q5_1.rs`.
///
/// # Panics
/// If some `ys[t].len() != w.len()`.
#[inline]
pub(crate) fn q5_1x8_tile / q5_1x8_tile_vnni [const T: usize] (
    w: &[BlockQ5_1x8],
    ys: &[&[BlockQ8_1]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb, "q5_1x8 tile: block counts differ");
    }
    let mask = _mm256_set1_epi8(0x0F);
    let fifth = _mm256_set1_epi8(0x10);
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY: b < nb == w.len() == ys[t].len() (asserted above).
        let wb = unsafe { w.get_unchecked(b) };
        // SAFETY: `d` and `m` are 8 f16 each (16 readable bytes), `qh` 32 bytes.
        let (d8, m8, qh) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(wb.d.as_ptr() as *const __m128i)),
                _mm256_cvtph_ps(_mm_loadu_si128(wb.m.as_ptr() as *const __m128i)),
                _mm256_loadu_si256(wb.qh.as_ptr() as *const __m256i),
            )
        };
        let mut sums = [_mm256_setzero_si256(); T]; // i32 lanes
        let mut part = [_mm256_setzero_si256(); T]; // two chunks' i16 pairs
        for c in 0..4 {
            // SAFETY: 32 * c + 32 <= 128 == qs.len(); unaligned load.
            let raw = unsafe { _mm256_loadu_si256(wb.qs.as_ptr().add(32 * c) as *const __m256i) };
            let (lo_set, hi_set) = fifth_bits(qh, c);
            let lo = _mm256_or_si256(_mm256_and_si256(raw, mask), _mm256_and_si256(lo_set, fifth));
            let hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask),
                _mm256_and_si256(hi_set, fifth),
            );
            for t in 0..T {
                // SAFETY: b < ys[t].len(), c < 4.
                let (ylo, yhi) = unsafe { words(ys[t].get_unchecked(b).qs.as_ptr(), c) };
                // SAFETY: the function has VNNI's features where `VNNI` (`vnni_twins`).
                part[t] = unsafe { accumulate::<VNNI>(part[t], lo, ylo, hi, yhi) };
            }
            if c % 2 == 1 {
                for t in 0..T {
                    // SAFETY: the function has VNNI's features where `VNNI` (`vnni_twins`).
                    let part_sums = unsafe { lane_sums::<VNNI>(part[t]) };
                    sums[t] = _mm256_add_epi32(sums[t], part_sums);
                    part[t] = _mm256_setzero_si256();
                }
            }
        }
        for t in 0..T {
            // SAFETY: b < ys[t].len(); the block starts with its f16 `d` and `s`.
            let ds = unsafe { load_f16x2(ys[t].get_unchecked(b) as *const BlockQ8_1 as *const u8) };
            let dt = _mm256_broadcastss_ps(ds);
            let st = _mm256_broadcastss_ps(_mm_movehdup_ps(ds));
            let q = _mm256_cvtepi32_ps(sums[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, dt), q, acc[t]);
            acc[t] = _mm256_fmadd_ps(m8, st, acc[t]);
        }
    }
    for t in 0..T {
        // SAFETY: `out[t]` is 8 writable f32; unaligned store.
        unsafe { _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]) };
    }
}
}
