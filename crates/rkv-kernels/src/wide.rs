//! The many-token product of packed K-quant weights (prompt chunks, wide batches) on
//! CPUs with AVX-512 VNNI: weights unpacked to one byte per value a few groups at a
//! time, activations laid out sixteen tokens to a 64-byte line, so that one `vpdpbusd`
//! with a broadcast weight word meets sixteen tokens at once and nothing is unpacked in
//! the inner loop (the scheme of ggml's `tiled` VNNI kernels). Below
//! [`Wide::MIN_TOKENS`] tokens, or without VNNI, `gemm.rs`'s tiles run instead.
//!
//! Owns: the unpacked layouts ([`WideBlock`], [`WideAct`]), what a format must say to
//! use them ([`Wide`]), the driver (rayon over groups of rows, like `gemm.rs`) and the
//! scalar reference of the micro-kernel ([`tile_ref`]).
//!
//! Numerics: per super-block, `isum = sum_j sc_j * (q_j . y_j)` and `osum = sum_p
//! pair_p . bsum_p` are exact integers whatever the order, and the float steps are
//! each format's own (`dot_lane_ref`), so every output equals `gemm.rs`'s bit for bit.
//! Must not know: models, threads beyond the installed rayon pool.

use rayon::prelude::*;

use crate::blocks_k::{BlockQ8K, QK_K};
use crate::error::KernelError;
use crate::gemm::{groups_per_task, has_arithmetic, scatter_parts};
use crate::interleaved::{Interleaved, Packed, ROWS_X8};

/// Tokens in one line of a [`WideAct`] (sixteen i32 lanes of a 512-bit register).
pub const TOKENS_X16: usize = 16;

/// Fewest tokens that take the wide path, for a format without a larger
/// [`Wide::MIN_TOKENS`]. Each call unpacks the whole weight, a pass over memory that
/// `gemm.rs`'s tiles overlap with their arithmetic; it pays once enough tokens share it.
/// Against four-token tiles on the 1.5B shape (Xeon, 2 threads, `rkv bench decode
/// --batch N`), 8 sequences decoded 0.75-0.85x as fast on this path, 12 about as fast,
/// 16 1.3x as fast.
pub const WIDE_MIN_TOKENS: usize = 12;

/// Bytes of unpacked weights a task keeps at once (about a quarter of a core's L2).
const PANEL_BYTES: usize = 512 * 1024;

/// Block `b` of eight rows unpacked: value `v` of row `r` is `q[v / 4][4 r + v % 4]`.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WideBlock {
    pub q: [[u8; 32]; QK_K / 4],  // [value quad 64, rows 8, bytes 4]
    pub sc: [[i32; ROWS_X8]; 16], // [sub-block (256 / SUB), rows 8]
    /// Per row, two i16 weights `(lo, hi)` for the activation's `bsums[2 p]` and
    /// `bsums[2 p + 1]` (`osum = sum_p lo bsums[2 p] + hi bsums[2 p + 1]`).
    pub pairs: [[i32; ROWS_X8]; 8], // [bsum pair 8, rows 8]
    pub d: [f32; ROWS_X8],        // [rows]
    pub dmin: [f32; ROWS_X8],     // [rows]
}

impl WideBlock {
    pub const ZERO: Self = Self {
        q: [[0; 32]; QK_K / 4],
        sc: [[0; ROWS_X8]; 16],
        pairs: [[0; ROWS_X8]; 8],
        d: [0.0; ROWS_X8],
        dmin: [0.0; ROWS_X8],
    };
}

/// Block `b` of sixteen tokens' Q8_K activations: value `v` of token `t` is
/// `q[v / 4][4 t + v % 4]`. Padding tokens are zero (`d == 0`).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WideAct {
    pub q: [[i8; 4 * TOKENS_X16]; QK_K / 4], // [value quad 64, tokens 16, bytes 4]
    /// `(bsums[2 p], bsums[2 p + 1])` of each token as an i16 pair.
    pub bs: [[i32; TOKENS_X16]; 8], // [bsum pair 8, tokens 16]
    pub d: [f32; TOKENS_X16],                // [tokens]
}

impl WideAct {
    pub const ZERO: Self = Self {
        q: [[0; 4 * TOKENS_X16]; QK_K / 4],
        bs: [[0; TOKENS_X16]; 8],
        d: [0.0; TOKENS_X16],
    };
}

/// Two i16 as the dword `madd` reads as the pair `(lo, hi)`.
pub(crate) fn i16_pair(lo: i16, hi: i16) -> i32 {
    (lo as u16 as u32 | (hi as u16 as u32) << 16) as i32
}

/// A packed K-quant format the wide path takes.
pub trait Wide: Interleaved<Act = BlockQ8K> {
    /// Values per scale: 32 (scales and mins) or 16 (Q6_K).
    const SUB: usize;
    /// Whether the float step subtracts `dmin * d_t * osum` (Q4_K, Q5_K) rather than
    /// folding `- 32 osum` into the integer sum (Q6_K).
    const MINS: bool;
    /// Fewest tokens that take the wide path for this format: larger where its tiles
    /// take eight tokens at once (`Interleaved::token_tile`).
    const MIN_TOKENS: usize = WIDE_MIN_TOKENS;
    /// This block's values, scales, pair weights and `d`, `dmin` into `out`.
    fn unpack(&self, out: &mut WideBlock);
}

/// Fills tile `tile` (blocks `[nb]`) from tokens `16 tile ..` of `x` (`[n, nb]`).
fn fill_acts(a: &mut [WideAct], x: &[BlockQ8K], tile: usize, n: usize, nb: usize) {
    for t in 0..TOKENS_X16.min(n - TOKENS_X16 * tile) {
        let row = &x[(TOKENS_X16 * tile + t) * nb..][..nb];
        for (ab, y) in a.iter_mut().zip(row) {
            for (line, quad) in ab.q.iter_mut().zip(y.qs.chunks_exact(4)) {
                line[4 * t..4 * t + 4].copy_from_slice(quad);
            }
            for (p, line) in ab.bs.iter_mut().enumerate() {
                line[t] = i16_pair(y.bsums[2 * p], y.bsums[2 * p + 1]);
            }
            ab.d[t] = y.d;
        }
    }
}

/// `out[r][t] = dot(row r of w, token t of a)` in the numerics of [`Wide`] formats,
/// exact sums first: the oracle of the SIMD micro-kernel.
pub fn tile_ref(
    w: &[WideBlock],
    a: &[WideAct],
    sub: usize,
    mins: bool,
    out: &mut [[f32; TOKENS_X16]; ROWS_X8],
) {
    assert_eq!(w.len(), a.len(), "wide tile: block counts differ");
    for (r, o) in out.iter_mut().enumerate() {
        for (t, acc) in o.iter_mut().enumerate() {
            *acc = 0.0;
            for (wb, ab) in w.iter().zip(a) {
                let (mut isum, mut osum) = (0i32, 0i32);
                for j in 0..QK_K / sub {
                    let s: i32 = (j * sub / 4..(j + 1) * sub / 4)
                        .flat_map(|kg| (0..4).map(move |k| (kg, k)))
                        .map(|(kg, k)| wb.q[kg][4 * r + k] as i32 * ab.q[kg][4 * t + k] as i32)
                        .sum();
                    isum += wb.sc[j][r] * s;
                }
                for p in 0..8 {
                    let (w2, a2) = (wb.pairs[p][r], ab.bs[p][t]);
                    osum += (w2 as i16 as i32) * (a2 as i16 as i32)
                        + ((w2 >> 16) as i16 as i32) * ((a2 >> 16) as i16 as i32);
                }
                let dd = wb.d[r] * ab.d[t];
                *acc = if mins {
                    let acc = dd.mul_add(isum as f32, *acc);
                    (-(wb.dmin[r] * ab.d[t])).mul_add(osum as f32, acc)
                } else {
                    dd.mul_add((isum - 32 * osum) as f32, *acc)
                };
            }
        }
    }
}

/// Tokens `0..tokens` of `out` from the SIMD micro-kernel where `simd` and the CPU has
/// it (the 256-bit one for at most eight tokens), else from [`tile_ref`].
fn tile<P: Wide>(
    w: &[WideBlock],
    a: &[WideAct],
    tokens: usize,
    simd: bool,
    out: &mut [[f32; TOKENS_X16]; ROWS_X8],
) {
    #[cfg(target_arch = "x86_64")]
    if simd && crate::simd::avx512_vnni_bw() {
        use crate::wide_vnni::{tile16, tile8};
        // SAFETY: the CPU has the kernels' target features (checked above).
        return unsafe {
            match (P::SUB, P::MINS, tokens <= TOKENS_X16 / 2) {
                (32, true, true) => tile8::<32, true>(w, a, out),
                (32, true, false) => tile16::<32, true>(w, a, out),
                (_, _, true) => tile8::<16, false>(w, a, out),
                (_, _, false) => tile16::<16, false>(w, a, out),
            }
        };
    }
    let _ = (tokens, simd); // Read by the SIMD branch only.
    tile_ref(w, a, P::SUB, P::MINS, out)
}

/// `out[t, r] = dot(w row r, x row t)` for `n` tokens through the unpacked layouts,
/// from [`Wide::MIN_TOKENS`] tokens on a CPU with AVX-512 VNNI (`true`; else `false` and
/// `out` untouched). Shapes are the caller's to check (`gemm.rs`): `x` is `[n, nb]`,
/// `out` `[n, rows]`, none of them empty.
pub(crate) fn product<P: Wide>(w: &Packed<P>, x: &[BlockQ8K], n: usize, out: &mut [f32]) -> bool {
    if n < P::MIN_TOKENS || !crate::simd::avx512_vnni_bw() {
        return false;
    }
    run::<P>(w, x, n, true, out);
    true
}

/// The wide product for any `n`, with the SIMD micro-kernel where `simd` and the CPU
/// has it, else the scalar one ([`crate::matmul_packed`] takes it by itself where it
/// pays; tests take both kernels).
///
/// # Errors
/// When `x.len() != n * nb` or `out.len() != n * rows`.
pub fn matmul_wide<P: Wide>(
    w: &Packed<P>,
    x: &[BlockQ8K],
    n: usize,
    simd: bool,
    out: &mut [f32],
) -> Result<(), KernelError> {
    if has_arithmetic(w, x.len(), n, out)? {
        run::<P>(w, x, n, simd, out);
    }
    Ok(())
}

/// [`matmul_wide`] on checked shapes, `n`, the rows and the blocks not zero.
fn run<P: Wide>(w: &Packed<P>, x: &[BlockQ8K], n: usize, simd: bool, out: &mut [f32]) {
    let (rows, nb) = (w.rows(), w.blocks_per_row());
    let tiles = n.div_ceil(TOKENS_X16);
    let mut acts = vec![WideAct::ZERO; tiles * nb];
    acts.par_chunks_mut(nb)
        .enumerate()
        .for_each(|(tile, a)| fill_acts(a, x, tile, n, nb));
    let blocks = w.blocks();
    let groups = rows.div_ceil(ROWS_X8);
    let per_task = groups_per_task(groups);
    let per_panel = (PANEL_BYTES / (nb * std::mem::size_of::<WideBlock>())).max(1);
    let tasks = groups.div_ceil(per_task);
    let parts: Vec<(usize, usize, Vec<f32>)> = (0..tasks)
        .into_par_iter()
        .map(|c| {
            let (g0, g1) = (c * per_task, groups.min((c + 1) * per_task));
            let (r0, r1) = (g0 * ROWS_X8, rows.min(g1 * ROWS_X8));
            let width = r1 - r0;
            let mut tmp = vec![0.0f32; n * width];
            let mut panel = vec![WideBlock::ZERO; per_panel.min(g1 - g0) * nb];
            let mut o = [[0.0f32; TOKENS_X16]; ROWS_X8];
            for p0 in (g0..g1).step_by(per_panel) {
                let p1 = g1.min(p0 + per_panel);
                for (dst, src) in panel.iter_mut().zip(&blocks[p0 * nb..p1 * nb]) {
                    src.unpack(dst);
                }
                for t0 in 0..tiles {
                    let a = &acts[t0 * nb..(t0 + 1) * nb];
                    let tokens = TOKENS_X16.min(n - TOKENS_X16 * t0);
                    for g in p0..p1 {
                        tile::<P>(
                            &panel[(g - p0) * nb..(g - p0 + 1) * nb],
                            a,
                            tokens,
                            simd,
                            &mut o,
                        );
                        let (base, lanes) = (g * ROWS_X8 - r0, ROWS_X8.min(rows - g * ROWS_X8));
                        for (i, row) in o.iter().take(lanes).enumerate() {
                            for (t, &v) in row.iter().take(tokens).enumerate() {
                                tmp[(TOKENS_X16 * t0 + t) * width + base + i] = v;
                            }
                        }
                    }
                }
            }
            (r0, width, tmp)
        })
        .collect();
    scatter_parts(parts, rows, out);
}
