//! AVX2 (+FMA, F16C; AVX512-VNNI when enabled) micro-kernels of the packed
//! products: eight weight rows ([`BlockQ4_1x8`], [`BlockQ8_0x8`]) against `T`
//! activation rows.
//!
//! Per block, each 32-byte load of packed quants unpacks to two registers of four
//! values of each of the eight rows; a broadcast activation word meets them with
//! `maddubs` (u8 x i8 pairs into i16; `|pair| <= 2 * 15 * 128`, and eight of them
//! summed stay under 2^15, so the i16 sums are exact) or `dpbusd` (VNNI), and one
//! `madd` leaves each row's exact block sum in its own i32 lane. Unpacking is
//! shared by the `T` tokens, loads of activation words by the eight rows.
//!
//! Q8_0 weights are signed: as in ggml, the weight's sign moves onto the activation
//! (`sign`), so `maddubs` meets `|w|` (u8) with `±y` (i8); pairs stay under 2^15, but
//! their sums do not, so each chunk's pairs are widened to i32 at once (`madd`).
//!
//! Bit-identical to each format's `dot_lane_ref` (same exact integer sums, same
//! `fma` order per lane). Must not know: threads, models.

// Indexing by block `b`, chunk `c` and token `t` keeps the accumulator chains explicit.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::blocks::{BlockQ8_0, BlockQ8_1, QK};
use crate::dot_avx2::load_f16x2;
use crate::interleaved::ROWS_X8;
use crate::packed_q4_1::BlockQ4_1x8;
use crate::packed_q8_0::BlockQ8_0x8;

crate::simd::vnni_twins! {
/// `out[t][i] = dot(row i of w, ys[t])`, in the numerics of `packed_q4_1.rs`.
///
/// # Panics
/// If some `ys[t].len() != w.len()`.
#[inline]
pub(crate) fn q4_1x8_tile / q4_1x8_tile_vnni [const T: usize] (
    w: &[BlockQ4_1x8],
    ys: &[&[BlockQ8_1]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb, "q4_1x8 tile: block counts differ");
    }
    let mask = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY: b < nb == w.len() == ys[t].len() (asserted above).
        let wb = unsafe { w.get_unchecked(b) };
        // SAFETY: `d` and `m` are 8 f16 each (16 readable bytes); unaligned loads.
        let (d8, m8) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(wb.d.as_ptr() as *const __m128i)),
                _mm256_cvtph_ps(_mm_loadu_si128(wb.m.as_ptr() as *const __m128i)),
            )
        };
        let mut sums = [_mm256_setzero_si256(); T];
        for c in 0..4 {
            // SAFETY: 32 * c + 32 <= 128 == qs.len(); unaligned load.
            let raw = unsafe { _mm256_loadu_si256(wb.qs.as_ptr().add(32 * c) as *const __m256i) };
            let lo = _mm256_and_si256(raw, mask);
            let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
            for t in 0..T {
                // SAFETY: b < ys[t].len(); the block's 32 quants are readable, and
                // 16 + 4 * c + 4 <= 32.
                let (ylo, yhi) = unsafe {
                    let q = ys[t].get_unchecked(b).qs.as_ptr();
                    (
                        _mm256_set1_epi32((q.add(4 * c) as *const i32).read_unaligned()),
                        _mm256_set1_epi32((q.add(16 + 4 * c) as *const i32).read_unaligned()),
                    )
                };
                // SAFETY: the function has VNNI's features where `VNNI` (`vnni_twins`).
                sums[t] = unsafe { accumulate::<VNNI>(sums[t], lo, ylo, hi, yhi) };
            }
        }
        for t in 0..T {
            // SAFETY: b < ys[t].len(); the block starts with its f16 `d` and `s`.
            let ds = unsafe { load_f16x2(ys[t].get_unchecked(b) as *const BlockQ8_1 as *const u8) };
            let dt = _mm256_broadcastss_ps(ds);
            let st = _mm256_broadcastss_ps(_mm_movehdup_ps(ds));
            // SAFETY: the function has VNNI's features where `VNNI` (`vnni_twins`).
            let q = _mm256_cvtepi32_ps(unsafe { lane_sums::<VNNI>(sums[t]) });
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

crate::simd::vnni_twins! {
/// `out[t][i] = dot(row i of w, ys[t])`, in the numerics of `packed_q8_0.rs`.
///
/// # Panics
/// If some `ys[t].len() != w.len()`.
#[inline]
pub(crate) fn q8_0x8_tile / q8_0x8_tile_vnni [const T: usize] (
    w: &[BlockQ8_0x8],
    ys: &[&[BlockQ8_0]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb, "q8_0x8 tile: block counts differ");
    }
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY: b < nb == w.len() == ys[t].len() (asserted above).
        let wb = unsafe { w.get_unchecked(b) };
        // SAFETY: `d` is 8 f16 (16 readable bytes); unaligned load.
        let d8 = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(wb.d.as_ptr() as *const __m128i)) };
        let mut sums = [_mm256_setzero_si256(); T];
        for c in 0..QK / 4 {
            // SAFETY: 32 * c + 32 <= 256 == qs.len(); unaligned load.
            let raw = unsafe { _mm256_loadu_si256(wb.qs.as_ptr().add(32 * c) as *const __m256i) };
            let abs = _mm256_abs_epi8(raw);
            for t in 0..T {
                // SAFETY: b < ys[t].len(); 4 * c + 4 <= 32 quants of the block.
                let y = unsafe {
                    let q = ys[t].get_unchecked(b).qs.as_ptr();
                    _mm256_set1_epi32((q.add(4 * c) as *const i32).read_unaligned())
                };
                let sy = _mm256_sign_epi8(y, raw);
                // SAFETY: the function has VNNI's features where `VNNI` (`vnni_twins`).
                sums[t] = unsafe { accumulate_signed::<VNNI>(sums[t], abs, sy) };
            }
        }
        for t in 0..T {
            // SAFETY: b < ys[t].len().
            let dt = _mm256_set1_ps(unsafe { ys[t].get_unchecked(b) }.d.to_f32());
            let q = _mm256_cvtepi32_ps(sums[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, dt), q, acc[t]);
        }
    }
    for t in 0..T {
        // SAFETY: `out[t]` is 8 writable f32; unaligned store.
        unsafe { _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]) };
    }
}
}

/// Adds the four-value products of `abs` (u8) with `sy` (i8) into each i32 lane.
///
/// # Safety
/// The CPU must have AVX2, and AVX-512 VNNI and VL where `VNNI`; call it from a function
/// compiled with those features (it is inlined there).
#[inline(always)]
unsafe fn accumulate_signed<const VNNI: bool>(sum: __m256i, abs: __m256i, sy: __m256i) -> __m256i {
    // SAFETY: the caller's CPU has the features (above).
    unsafe {
        if VNNI {
            _mm256_dpbusd_epi32(sum, abs, sy)
        } else {
            let pairs = _mm256_maddubs_epi16(abs, sy);
            _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
        }
    }
}

/// Adds the products of `lo` with `ylo` and `hi` with `yhi` into the running sums
/// (i16 pairs with AVX2, i32 lanes with VNNI).
///
/// # Safety
/// As [`accumulate_signed`].
#[inline(always)]
pub(crate) unsafe fn accumulate<const VNNI: bool>(
    sum: __m256i,
    lo: __m256i,
    ylo: __m256i,
    hi: __m256i,
    yhi: __m256i,
) -> __m256i {
    // SAFETY: the caller's CPU has the features (above).
    unsafe {
        if VNNI {
            _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(sum, lo, ylo), hi, yhi)
        } else {
            let p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, ylo), _mm256_maddubs_epi16(hi, yhi));
            _mm256_add_epi16(sum, p)
        }
    }
}

/// Each row's exact block sum in its own i32 lane.
///
/// # Safety
/// As [`accumulate_signed`].
#[inline(always)]
pub(crate) unsafe fn lane_sums<const VNNI: bool>(sum: __m256i) -> __m256i {
    if VNNI {
        sum
    } else {
        // SAFETY: the caller's CPU has AVX2 (above).
        unsafe { _mm256_madd_epi16(sum, _mm256_set1_epi16(1)) }
    }
}
