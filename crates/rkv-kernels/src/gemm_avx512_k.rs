//! AVX-512 (F, BW, VL) micro-kernels of the packed Q4_K and Q6_K products: the AVX2
//! tiles of `gemm_avx2_k.rs` with two 32-byte chunks in each 512-bit register, so each
//! unpacking, `maddubs` and add does the work of two.
//!
//! A register holds chunks `c` and `c + 1` interleaved by row: dword lane `2 r` is row
//! `r`'s four quants of chunk `c`, lane `2 r + 1` its four of chunk `c + 1` (one `vpermd`
//! per weight register, shared by all `T` tokens). The activation words of the two
//! chunks are adjacent, so one 64-bit broadcast load meets every row: no shuffle per
//! token. Scales are repeated over both of a row's lanes, and each row's two lanes are
//! added once per block (`fold_rows`).
//!
//! Q4_K: each lane sums four chunks' pairs in i16 (the AVX2 tile's eight-chunk bound
//! holds with room); with VNNI (`q4_kx8_tile_vnni`) one `vpdpbusd` per chunk pair and
//! token replaces `maddubs` and its add. Q6_K: two chunks' pairs add in i16, then meet
//! the scales (`madd`) in i32. Both unpack a sub-block pair's weights into registers
//! once and run every token of the tile against them, so eight tokens fit in the 32
//! registers (`gemm::MAX_TOKEN_TILE`). Integer sums are exact and the float steps are the
//! AVX2 tiles' own helpers in the same order, so each tile is bit for bit its format's
//! `dot_lane_ref` (and the AVX2 tile). Must not know: threads, models.

// Indexing by block `b`, pair `k`, chunk `c` and token `t` keeps the chains explicit.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::blocks_k::BlockQ8K;
use crate::gemm_avx2_k::{
    add_q6_block, add_scaled_with_mins, load8, row_pairs_of_two, row_pairs_of_two_i8, scales_f32,
};
use crate::interleaved::ROWS_X8;
use crate::packed_q4_k::BlockQ4_Kx8;
use crate::packed_q6_k::{chunk_at, BlockQ6_Kx8};

/// `vpermd` indices: row `r`'s dword of the first chunk (lanes 0-7) then of the second
/// (lanes 8-15), for chunks side by side in one register.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn by_row_in_one() -> __m512i {
    _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0)
}

/// `vpermt2d` indices: row `r`'s dword of the first source's chunk (its lanes 0-7), then
/// of the second source's (its lanes 0-7).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn by_row_of_two() -> __m512i {
    _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0)
}

/// The 8 bytes at `p` (the activation words of chunks `c` and `c + 1`) in every 64-bit
/// lane: `[y_c y_c1]` against each row's interleaved pair of chunks.
///
/// # Safety
/// `p` must point to 8 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn word_pair(p: *const i8) -> __m512i {
    // SAFETY: 8 readable bytes (the caller's contract); unaligned load.
    _mm512_set1_epi64(unsafe { (p as *const i64).read_unaligned() })
}

/// Blocks ahead of the one being read that [`prefetch`] asks for.
const PREFETCH_BLOCKS: usize = 4;

/// Asks for block `b` of `w` (or whatever follows the slice in its allocation, where
/// `b` is past the end: the next group's blocks) to be brought into L1, a cache line
/// at a time. With one token, the tiles stream the weights from memory faster than
/// the hardware prefetcher fetches them ahead.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn prefetch<B>(w: &[B], b: usize) {
    let p = w.as_ptr().wrapping_add(b) as *const i8;
    for line in (0..std::mem::size_of::<B>()).step_by(64) {
        // A prefetch never faults, whatever the address.
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line));
    }
}

/// Eight per-row values (widened to i32) as i16 pairs `(s, s)`, each row's pair in both
/// of the row's dword lanes: the `madd` operand of interleaved chunks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn rows_x4(x: __m256i) -> __m512i {
    let pair = _mm256_or_si256(
        _mm256_and_si256(x, _mm256_set1_epi32(0xFFFF)),
        _mm256_slli_epi32::<16>(x),
    );
    rows_x2(pair)
}

/// Each row's two dword lanes added (exact i32), the eight rows in order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn fold_rows(x: __m512i) -> __m256i {
    _mm512_cvtepi64_epi32(_mm512_add_epi32(x, _mm512_srli_epi64::<32>(x)))
}

/// `out[t][i] = dot(row i of w, ys[t])`, in the numerics of `packed_q4_k.rs`.
///
/// # Panics
/// If some `ys[t].len() != w.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(crate) fn q4_kx8_tile<const T: usize>(
    w: &[BlockQ4_Kx8],
    ys: &[&[BlockQ8K]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    // SAFETY: this function's features are the body's (`VNNI` false).
    unsafe { q4_kx8_body::<T, false>(w, ys, out) }
}

/// Eight per-row values (i32, below 2^15) in both of the row's dword lanes: against a
/// lane whose i32 sum fits in i16, `madd` takes the sum's low half times the value
/// (its high half, the sign, meets zero).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn rows_x2(x: __m256i) -> __m512i {
    let idx = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    _mm512_permutexvar_epi32(idx, _mm512_castsi256_si512(x))
}

/// [`q4_kx8_tile`] with `vpdpbusd` (AVX-512 VNNI): one instruction per chunk pair and
/// token in place of `maddubs` and its add. A dword lane sums 16 products of at most
/// 15 * 128, so its sum fits in i16 and [`rows_x2`]'s scales take it in one `madd`: the
/// integer sums, and so the outputs, are [`q4_kx8_tile`]'s bit for bit.
///
/// # Panics
/// If some `ys[t].len() != w.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q4_kx8_tile_vnni<const T: usize>(
    w: &[BlockQ4_Kx8],
    ys: &[&[BlockQ8K]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    // SAFETY: this function's features are the body's (`VNNI` true).
    unsafe { q4_kx8_body::<T, true>(w, ys, out) }
}

/// The Q4_K tiles' body: a sub-block pair's weights unpacked once into eight registers,
/// then each token's chunks against them, in i16 pairs (`maddubs`, adds) or, with
/// `VNNI`, in i32 lanes (`vpdpbusd`).
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VL, AVX2, FMA and F16C, and with `VNNI` AVX-512
/// VNNI; inlined only into functions with those features.
#[inline(always)]
unsafe fn q4_kx8_body<const T: usize, const VNNI: bool>(
    w: &[BlockQ4_Kx8],
    ys: &[&[BlockQ8K]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb, "q4_kx8 tile: block counts differ");
    }
    // SAFETY: the CPU has the features (the caller's contract); the pointer arithmetic
    // is bounded as each step says.
    unsafe {
        let mask = _mm512_set1_epi8(0x0F);
        let by_row = by_row_in_one();
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..nb {
            prefetch(w, b + PREFETCH_BLOCKS);
            let wb = &w[b];
            let (d8, m8) = scales_f32(&wb.d, &wb.dmin);
            let mins: [__m256i; 4] =
                std::array::from_fn(|p| row_pairs_of_two(&wb.mn[16 * p..], &wb.mn[16 * p + 8..]));
            let mut isum = [_mm512_setzero_si512(); T];
            for k in 0..4 {
                let (lo8, hi8) = (
                    _mm256_cvtepu8_epi32(load8(&wb.sc[16 * k..])),
                    _mm256_cvtepu8_epi32(load8(&wb.sc[16 * k + 8..])),
                );
                // Scales as `(s, 0)` against i32 sums that fit in i16, `(s, s)` against
                // i16 pairs.
                let (sc_lo, sc_hi) = if VNNI {
                    (rows_x2(lo8), rows_x2(hi8))
                } else {
                    (rows_x4(lo8), rows_x4(hi8))
                };
                let mut lo = [_mm512_setzero_si512(); 4];
                let mut hi = [_mm512_setzero_si512(); 4];
                for j in 0..4 {
                    // 256 k + 64 j + 64 <= 1024 == qs.len(); unaligned load.
                    let p = wb.qs.as_ptr().add(256 * k + 64 * j);
                    let raw = _mm512_permutexvar_epi32(by_row, _mm512_loadu_si512(p as *const _));
                    lo[j] = _mm512_and_si512(raw, mask);
                    hi[j] = _mm512_and_si512(_mm512_srli_epi16::<4>(raw), mask);
                }
                for t in 0..T {
                    // b < ys[t].len() (asserted).
                    let q = ys[t].get_unchecked(b).qs.as_ptr().add(64 * k);
                    let mut slo = _mm512_setzero_si512();
                    let mut shi = _mm512_setzero_si512();
                    for j in 0..4 {
                        // 64 k + 32 + 8 j + 8 <= 256 (chunk pair c = 2 j).
                        let (ylo, yhi) = (word_pair(q.add(8 * j)), word_pair(q.add(32 + 8 * j)));
                        if VNNI {
                            slo = _mm512_dpbusd_epi32(slo, lo[j], ylo);
                            shi = _mm512_dpbusd_epi32(shi, hi[j], yhi);
                        } else {
                            slo = _mm512_add_epi16(slo, _mm512_maddubs_epi16(lo[j], ylo));
                            shi = _mm512_add_epi16(shi, _mm512_maddubs_epi16(hi[j], yhi));
                        }
                    }
                    let s = _mm512_add_epi32(
                        _mm512_madd_epi16(slo, sc_lo),
                        _mm512_madd_epi16(shi, sc_hi),
                    );
                    isum[t] = _mm512_add_epi32(isum[t], s);
                }
            }
            for t in 0..T {
                // b < ys[t].len() (asserted above).
                let yb = ys[t].get_unchecked(b);
                acc[t] = add_scaled_with_mins(acc[t], d8, m8, &mins, fold_rows(isum[t]), yb);
            }
        }
        for t in 0..T {
            // `out[t]` is 8 writable f32; unaligned store.
            _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]);
        }
    }
}

/// `out[t][i] = dot(row i of w, ys[t])`, in the numerics of `packed_q6_k.rs`.
///
/// # Panics
/// If some `ys[t].len() != w.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(crate) fn q6_kx8_tile<const T: usize>(
    w: &[BlockQ6_Kx8],
    ys: &[&[BlockQ8K]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb, "q6_kx8 tile: block counts differ");
    }
    let m4 = _mm512_set1_epi8(0x0F);
    let m2 = _mm512_set1_epi8(0x03);
    let by_row = by_row_of_two();
    // The six-bit quants of the two adjacent 96-byte chunks at `at`, interleaved by row,
    // part by part.
    let six_bits = |wb: &BlockQ6_Kx8, at: usize| -> [__m512i; 4] {
        // SAFETY: at + 192 <= Q_BYTES == q.len() (at is an even chunk's start); unaligned
        // loads.
        let (l0, l1, h) = unsafe {
            let p = wb.q.as_ptr().add(at);
            let two = |o: usize| {
                _mm512_permutex2var_epi32(
                    _mm512_castsi256_si512(_mm256_loadu_si256(p.add(o) as *const __m256i)),
                    by_row,
                    _mm512_castsi256_si512(_mm256_loadu_si256(p.add(96 + o) as *const __m256i)),
                )
            };
            (two(0), two(32), two(64))
        };
        let high = |bits: __m512i| _mm512_slli_epi16::<4>(_mm512_and_si512(bits, m2));
        [
            _mm512_or_si512(_mm512_and_si512(l0, m4), high(h)),
            _mm512_or_si512(_mm512_and_si512(l1, m4), high(_mm512_srli_epi16::<2>(h))),
            _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16::<4>(l0), m4),
                high(_mm512_srli_epi16::<4>(h)),
            ),
            _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16::<4>(l1), m4),
                high(_mm512_srli_epi16::<6>(h)),
            ),
        ]
    };
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        prefetch(w, b + PREFETCH_BLOCKS);
        let wb = &w[b];
        // SAFETY: `d` is 8 f16 (16 readable bytes); unaligned load.
        let d8 = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(wb.d.as_ptr() as *const __m128i)) };
        let mut isum = [_mm512_setzero_si512(); T];
        for n in 0..2 {
            for g in 0..2 {
                // Chunks 4 g .. 4 g + 4 of part p lie in sub-block 8 n + 2 p + g.
                let sc: [__m512i; 4] = std::array::from_fn(|p| {
                    rows_x4(_mm256_cvtepi8_epi32(load8(
                        &wb.sc[8 * (8 * n + 2 * p + g)..],
                    )))
                });
                // Both chunk pairs of the sub-blocks, unpacked once for every token.
                let (c0, c1) = (4 * g, 4 * g + 2);
                let q0 = six_bits(wb, chunk_at(n, c0));
                let q1 = six_bits(wb, chunk_at(n, c1));
                for t in 0..T {
                    // SAFETY: b < ys[t].len() (asserted).
                    let y = unsafe { ys[t].get_unchecked(b).qs.as_ptr().add(128 * n) };
                    for p in 0..4 {
                        // SAFETY: 128 n + 32 p + 4 c1 + 8 <= 256.
                        let (y0, y1) = unsafe {
                            (
                                word_pair(y.add(32 * p + 4 * c0)),
                                word_pair(y.add(32 * p + 4 * c1)),
                            )
                        };
                        // Each i16 of one `maddubs` is at most 2 * 63 * 128 in size, so
                        // two of them add exactly.
                        let pairs = _mm512_add_epi16(
                            _mm512_maddubs_epi16(q0[p], y0),
                            _mm512_maddubs_epi16(q1[p], y1),
                        );
                        isum[t] = _mm512_add_epi32(isum[t], _mm512_madd_epi16(pairs, sc[p]));
                    }
                }
            }
        }
        let scales: [__m256i; 8] =
            std::array::from_fn(|p| row_pairs_of_two_i8(&wb.sc[16 * p..], &wb.sc[16 * p + 8..]));
        for t in 0..T {
            // SAFETY: b < ys[t].len() (asserted above).
            let yb = unsafe { ys[t].get_unchecked(b) };
            acc[t] = add_q6_block(acc[t], d8, &scales, fold_rows(isum[t]), yb);
        }
    }
    for t in 0..T {
        // SAFETY: `out[t]` is 8 writable f32; unaligned store.
        unsafe { _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]) };
    }
}

#[cfg(test)]
mod tests {
    use half::f16;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    use super::*;
    use crate::blocks_k::{quantize_row_q8_k, BlockQ4K, QK_K};
    use crate::interleaved::{tile_ref, Packed};

    fn acts(r: &mut StdRng, n: usize) -> Vec<BlockQ8K> {
        let x: Vec<f32> = (0..n * QK_K).map(|_| r.gen_range(-3.0f32..3.0)).collect();
        let mut y = vec![BlockQ8K::default(); n];
        quantize_row_q8_k(&x, &mut y).unwrap();
        y
    }

    fn tile_is_ref<const T: usize>(
        w: &[BlockQ4_Kx8],
        x: &[BlockQ8K],
        tile: impl Fn(&[BlockQ4_Kx8], &[&[BlockQ8K]; T], &mut [[f32; ROWS_X8]; T]),
    ) {
        let nb = w.len();
        let ys: [&[BlockQ8K]; T] = std::array::from_fn(|t| &x[t * nb..(t + 1) * nb]);
        let (mut got, mut want) = ([[0.0; ROWS_X8]; T], [[0.0; ROWS_X8]; T]);
        tile(w, &ys, &mut got);
        tile_ref(w, &ys, &mut want);
        for t in 0..T {
            for i in 0..ROWS_X8 {
                assert_eq!(
                    got[t][i].to_bits(),
                    want[t][i].to_bits(),
                    "token {t} row {i}"
                );
            }
        }
    }

    /// Both AVX-512 Q4_K tiles, whichever the dispatch picks on this CPU, against the
    /// scalar oracle (the `packed` tests reach only the one the CPU's features choose).
    #[test]
    fn both_q4_k_tiles_are_the_reference() {
        if !crate::simd::avx512() {
            eprintln!("skipped: this CPU has no AVX-512 (F, BW, VL)");
            return;
        }
        let mut r = StdRng::seed_from_u64(7);
        let nb = 5;
        let w: Vec<BlockQ4K> = (0..8 * nb)
            .map(|_| BlockQ4K {
                d: f16::from_f32(r.gen_range(-0.01f32..0.01)),
                dmin: f16::from_f32(r.gen_range(-0.01f32..0.01)),
                scales: std::array::from_fn(|_| r.gen()),
                qs: std::array::from_fn(|_| r.gen()),
            })
            .collect();
        let p = Packed::<BlockQ4_Kx8>::pack(&w, 8).unwrap();
        let x = acts(&mut r, 8 * nb);
        // SAFETY (all calls): the CPU has AVX-512 F, BW and VL (checked above).
        tile_is_ref::<1>(p.blocks(), &x, |w, y, o| unsafe { q4_kx8_tile(w, y, o) });
        tile_is_ref::<4>(p.blocks(), &x, |w, y, o| unsafe { q4_kx8_tile(w, y, o) });
        tile_is_ref::<8>(p.blocks(), &x, |w, y, o| unsafe { q4_kx8_tile(w, y, o) });
        if !crate::simd::avx512_vnni_bw() {
            eprintln!("skipped the VNNI tile: this CPU has no AVX-512 VNNI");
            return;
        }
        // SAFETY (all calls): the CPU has AVX-512 VNNI besides (checked above).
        tile_is_ref::<1>(p.blocks(), &x, |w, y, o| unsafe {
            q4_kx8_tile_vnni(w, y, o)
        });
        tile_is_ref::<3>(p.blocks(), &x, |w, y, o| unsafe {
            q4_kx8_tile_vnni(w, y, o)
        });
        tile_is_ref::<8>(p.blocks(), &x, |w, y, o| unsafe {
            q4_kx8_tile_vnni(w, y, o)
        });
    }
}
