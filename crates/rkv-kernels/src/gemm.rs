//! The blocked product of packed quantised weights ([`Packed`]: Q4_1 with Q8_1
//! activations, Q8_0 with Q8_0) `out[t, r] = dot(w row r, x row t)`, parallel over
//! groups of eight rows with rayon; within a group, tokens go through in tiles of
//! [`TOKEN_TILE`] (up to [`MAX_TOKEN_TILE`] where the format's kernel says so), so each
//! unpacked weight register serves the whole tile.
//!
//! Decode of one sequence (`n = 1`) and of many at once (batched decode, prompt
//! chunks) run the same per-output arithmetic (`packed_*.rs`), so the results
//! do not depend on `n`, the tiling or the thread count. Runs on whatever rayon
//! pool the caller has installed. Must not know: models, sequences.

use rayon::prelude::*;

use crate::error::KernelError;
use crate::interleaved::{Interleaved, Packed, ROWS_X8};

/// Tokens that share one unpacking of a weight block, for most formats and CPUs.
pub const TOKEN_TILE: usize = 4;

/// The most tokens a tile takes: the AVX-512 K-quant tiles, with 32 registers, keep a
/// sub-block's unpacked weights and eight tokens' sums in them.
pub const MAX_TOKEN_TILE: usize = 8;

/// Outputs of group `w` (its first `lanes` rows) for tokens `t0..t0 + T` of `x`
/// (`nb` blocks a token), written by `put(token, lane, value)`.
#[inline]
fn run_tile<P: Interleaved, const T: usize>(
    w: &[P],
    x: &[P::Act],
    t0: usize,
    lanes: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    let nb = w.len();
    let ys: [&[P::Act]; T] = std::array::from_fn(|j| &x[(t0 + j) * nb..(t0 + j + 1) * nb]);
    let mut out = [[0.0f32; ROWS_X8]; T];
    P::tile::<T>(w, &ys, &mut out);
    for (j, o) in out.iter().enumerate() {
        for (i, v) in o.iter().take(lanes).enumerate() {
            put(t0 + j, i, *v);
        }
    }
}

/// All `n` tokens of `x` against one group, tile by tile (`tile` tokens at a time, at
/// most [`MAX_TOKEN_TILE`]).
fn group_all_tokens<P: Interleaved>(
    w: &[P],
    x: &[P::Act],
    n: usize,
    tile: usize,
    lanes: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    let mut t = 0;
    while t < n {
        let m = tile.min(n - t);
        match m {
            1 => run_tile::<P, 1>(w, x, t, lanes, put),
            2 => run_tile::<P, 2>(w, x, t, lanes, put),
            3 => run_tile::<P, 3>(w, x, t, lanes, put),
            4 => run_tile::<P, 4>(w, x, t, lanes, put),
            5 => run_tile::<P, 5>(w, x, t, lanes, put),
            6 => run_tile::<P, 6>(w, x, t, lanes, put),
            7 => run_tile::<P, 7>(w, x, t, lanes, put),
            _ => run_tile::<P, MAX_TOKEN_TILE>(w, x, t, lanes, put),
        }
        t += m;
    }
}

/// Groups per parallel task: about 4 tasks per thread.
pub(crate) fn groups_per_task(groups: usize) -> usize {
    let tasks = 4 * rayon::current_num_threads().max(1);
    groups.div_ceil(tasks).max(1)
}

/// Packed weights `[rows, k]` times activations `[n, k]` (quantised to the format's
/// activation blocks) into `out[n, rows]`: the tiles, or the format's route for many
/// tokens where it has one (`Interleaved::product_many`).
///
/// # Errors
/// When `x.len() != n * k / 32` or `out.len() != n * rows`.
pub fn matmul_packed<P: Interleaved>(
    w: &Packed<P>,
    x: &[P::Act],
    n: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    product(w, x, n, out, true)
}

/// [`matmul_packed`] on the tiles whatever the token count (never the wide path of
/// `wide.rs`): for benchmarks and tests that compare the two routes.
///
/// # Errors
/// When `x.len() != n * k / 32` or `out.len() != n * rows`.
pub fn matmul_packed_tiles<P: Interleaved>(
    w: &Packed<P>,
    x: &[P::Act],
    n: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    product(w, x, n, out, false)
}

fn product<P: Interleaved>(
    w: &Packed<P>,
    x: &[P::Act],
    n: usize,
    out: &mut [f32],
    many: bool,
) -> Result<(), KernelError> {
    if !has_arithmetic(w, x.len(), n, out)? {
        return Ok(());
    }
    if many && n > 1 && P::product_many(w, x, n, out) {
        return Ok(());
    }
    tiles(w, x, n, out);
    Ok(())
}

/// Checks a product's shapes and settles the cases without arithmetic (no rows or
/// tokens: nothing to write; no blocks: zeros); `true` when the product remains to do.
pub(crate) fn has_arithmetic<P: Interleaved>(
    w: &Packed<P>,
    x_len: usize,
    n: usize,
    out: &mut [f32],
) -> Result<bool, KernelError> {
    w.check_product(x_len, n, out.len())?;
    if w.rows() == 0 || n == 0 {
        return Ok(false);
    }
    if w.blocks_per_row() == 0 {
        out.fill(0.0);
        return Ok(false);
    }
    Ok(true)
}

/// The tiles' product on checked shapes, with rows, tokens and blocks.
fn tiles<P: Interleaved>(w: &Packed<P>, x: &[P::Act], n: usize, out: &mut [f32]) {
    let (rows, nb) = (w.rows(), w.blocks_per_row());
    let blocks = w.blocks();
    let groups = rows.div_ceil(ROWS_X8);
    let per_task = groups_per_task(groups);
    let group = |g: usize| &blocks[g * nb..(g + 1) * nb];
    let lanes = |g: usize| ROWS_X8.min(rows - g * ROWS_X8);
    if n == 1 {
        out.par_chunks_mut(per_task * ROWS_X8)
            .enumerate()
            .for_each(|(c, o)| {
                let g0 = c * per_task;
                for (gi, o8) in o.chunks_mut(ROWS_X8).enumerate() {
                    let g = g0 + gi;
                    group_all_tokens(group(g), x, 1, 1, lanes(g), &mut |_, i, v| o8[i] = v);
                }
            });
        return;
    }
    // Many tokens: each task fills `[n, its rows]`, then the parts are scattered. The
    // format's tile width is asked once per product, not per group.
    let tile = P::token_tile().clamp(1, MAX_TOKEN_TILE);
    let tasks = groups.div_ceil(per_task);
    let parts: Vec<(usize, usize, Vec<f32>)> = (0..tasks)
        .into_par_iter()
        .map(|c| {
            let g0 = c * per_task;
            let g1 = groups.min(g0 + per_task);
            let (r0, r1) = (g0 * ROWS_X8, rows.min(g1 * ROWS_X8));
            let width = r1 - r0;
            let mut tmp = vec![0.0f32; n * width];
            for g in g0..g1 {
                let base = g * ROWS_X8 - r0;
                group_all_tokens(group(g), x, n, tile, lanes(g), &mut |t, i, v| {
                    tmp[t * width + base + i] = v
                });
            }
            (r0, width, tmp)
        })
        .collect();
    scatter_parts(parts, rows, out);
}

/// Copies the parts of a many-token product into `out[n, rows]`: each `(r0, width,
/// tmp)` holds `[n, width]` outputs of rows `r0..r0 + width`.
pub(crate) fn scatter_parts(parts: Vec<(usize, usize, Vec<f32>)>, rows: usize, out: &mut [f32]) {
    for (r0, width, tmp) in parts {
        for (t, part) in tmp.chunks_exact(width).enumerate() {
            out[t * rows + r0..t * rows + r0 + width].copy_from_slice(part);
        }
    }
}
