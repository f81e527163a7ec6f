//! Matrix products `out[t, r] = dot(w[r], x[t])` for quantised weights run one row
//! dot product at a time (Q4_0, Q4_1, Q8_0 rows as stored), parallel over row chunks
//! with rayon; dense weights have their own blocked product (`dense.rs`).
//!
//! Every output element is one call-equivalent of the row dot product in
//! `dot.rs` (ggml numerics of `ggml_vec_dot_*` in
//! `ggml/src/ggml-cpu/arch/x86/quants.c`), so results do not depend on tiling or
//! thread count.
//!
//! Layouts: `w` is `[rows, k]` (blocks or elements per row `k`), `x` is
//! `[n, k]`, `out` is `[n, rows]`. Work is split into chunks of rows (a
//! multiple of [`ROW_GROUP`]); within a chunk, tiles of [`TILE_ROWS`] weight
//! rows stay in L1 while all `n` tokens stream past them. Runs on whatever
//! rayon pool the caller has installed.

use rayon::prelude::*;

use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1};
use crate::dot::{q4_0_rows, q4_1_rows, q8_0_rows};
use crate::error::{check_len, check_multiple, KernelError};

/// Rows computed together by the multi-row kernels.
pub const ROW_GROUP: usize = 4;
/// Weight rows kept hot while iterating over tokens (prefill).
pub const TILE_ROWS: usize = 16;

/// A row-dot kernel: weight row type `W`, activation row type `X`.
trait Kernel {
    type W: Sync;
    type X: Sync;
    /// `out[r] = dot(w[r*k..(r+1)*k], x)` with `k = x.len()`;
    /// `w.len() == R * x.len()` is the caller's contract.
    fn rows<const R: usize>(w: &[Self::W], x: &[Self::X], out: &mut [f32; R]);
}

struct Q4_0K;
struct Q4_1K;
struct Q8_0K;

impl Kernel for Q4_0K {
    type W = BlockQ4_0;
    type X = BlockQ8_0;
    #[inline]
    fn rows<const R: usize>(w: &[BlockQ4_0], x: &[BlockQ8_0], out: &mut [f32; R]) {
        q4_0_rows(w, x, out)
    }
}

impl Kernel for Q4_1K {
    type W = BlockQ4_1;
    type X = BlockQ8_1;
    #[inline]
    fn rows<const R: usize>(w: &[BlockQ4_1], x: &[BlockQ8_1], out: &mut [f32; R]) {
        q4_1_rows(w, x, out)
    }
}

impl Kernel for Q8_0K {
    type W = BlockQ8_0;
    type X = BlockQ8_0;
    #[inline]
    fn rows<const R: usize>(w: &[BlockQ8_0], x: &[BlockQ8_0], out: &mut [f32; R]) {
        q8_0_rows(w, x, out)
    }
}

/// Rows per parallel task: about 4 tasks per thread, a multiple of
/// [`ROW_GROUP`], at least [`TILE_ROWS`].
fn chunk_rows(rows: usize) -> usize {
    let tasks = 4 * rayon::current_num_threads().max(1);
    rows.div_ceil(tasks)
        .next_multiple_of(ROW_GROUP)
        .max(TILE_ROWS)
}

/// `out[r] = dot(w row r, x)` for the `out.len()` rows of `w` (`k = x.len()`).
#[inline]
fn rows_dot<K: Kernel>(w: &[K::W], x: &[K::X], out: &mut [f32]) {
    let k = x.len();
    let mut groups = out.chunks_exact_mut(ROW_GROUP);
    let mut r = 0;
    for o in &mut groups {
        let o: &mut [f32; ROW_GROUP] = o.try_into().expect("chunk of ROW_GROUP");
        K::rows(&w[r * k..(r + ROW_GROUP) * k], x, o);
        r += ROW_GROUP;
    }
    for o in groups.into_remainder() {
        let mut one = [0.0f32; 1];
        K::rows(&w[r * k..(r + 1) * k], x, &mut one);
        *o = one[0];
        r += 1;
    }
}

/// Shape checks shared by all matmuls (and `dense.rs`'s); returns `k` (blocks/elements
/// per row).
pub(crate) fn check_shapes(
    w: usize,
    rows: usize,
    x: usize,
    n: usize,
    out: usize,
) -> Result<usize, KernelError> {
    // Checked: a wrapped product would accept shapes that do not match.
    let product = |what, a: usize, b: usize| a.checked_mul(b).ok_or(KernelError::Overflow { what });
    check_len("matmul out", product("matmul out", n, rows)?, out)?;
    if rows == 0 {
        check_len("matmul w (rows = 0)", 0, w)?;
        return Ok(0);
    }
    check_multiple("matmul w", w, rows)?;
    let k = w / rows;
    check_len("matmul x", product("matmul x", n, k)?, x)?;
    Ok(k)
}

fn matmul<K: Kernel>(
    w: &[K::W],
    rows: usize,
    x: &[K::X],
    n: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let k = check_shapes(w.len(), rows, x.len(), n, out.len())?;
    if rows == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // Empty rows: every dot product is 0 (the row kernels would write nothing).
        out.fill(0.0);
        return Ok(());
    }
    let chunk = chunk_rows(rows);
    if n == 1 {
        out.par_chunks_mut(chunk).enumerate().for_each(|(c, o)| {
            let r0 = c * chunk;
            rows_dot::<K>(&w[r0 * k..(r0 + o.len()) * k], x, o);
        });
        return Ok(());
    }
    // Prefill: compute [rows, n] tiles (contiguous per task), then transpose.
    let mut tmp = vec![0.0f32; rows * n];
    tmp.par_chunks_mut(chunk * n)
        .enumerate()
        .for_each(|(c, o)| {
            let r0 = c * chunk;
            let mut col = [0.0f32; TILE_ROWS];
            for (ti, tile) in o.chunks_mut(TILE_ROWS * n).enumerate() {
                let tr0 = r0 + ti * TILE_ROWS;
                let tn = tile.len() / n;
                let wt = &w[tr0 * k..(tr0 + tn) * k];
                for t in 0..n {
                    rows_dot::<K>(wt, &x[t * k..(t + 1) * k], &mut col[..tn]);
                    for (r, v) in col[..tn].iter().enumerate() {
                        tile[r * n + t] = *v;
                    }
                }
            }
        });
    for (r, row) in tmp.chunks_exact(n).enumerate() {
        for (t, v) in row.iter().enumerate() {
            out[t * rows + r] = *v;
        }
    }
    Ok(())
}

/// Q4_1 weights `[rows, k]` times Q8_1 activations `[n, k]` into `out[n, rows]`.
///
/// # Errors
/// When `w.len()` is not `rows * k`, `x.len() != n * k` or `out.len() != n * rows`.
pub fn matmul_q4_1(
    w: &[BlockQ4_1],
    rows: usize,
    x: &[BlockQ8_1],
    n: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    matmul::<Q4_1K>(w, rows, x, n, out)
}

/// Q4_0 weights `[rows, k]` times Q8_0 activations `[n, k]` into `out[n, rows]`.
///
/// # Errors
/// When `w.len()` is not `rows * k`, `x.len() != n * k` or `out.len() != n * rows`.
pub fn matmul_q4_0(
    w: &[BlockQ4_0],
    rows: usize,
    x: &[BlockQ8_0],
    n: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    matmul::<Q4_0K>(w, rows, x, n, out)
}

/// Q8_0 weights `[rows, k]` times Q8_0 activations `[n, k]` into `out[n, rows]`.
///
/// # Errors
/// When `w.len()` is not `rows * k`, `x.len() != n * k` or `out.len() != n * rows`.
pub fn matmul_q8_0(
    w: &[BlockQ8_0],
    rows: usize,
    x: &[BlockQ8_0],
    n: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    matmul::<Q8_0K>(w, rows, x, n, out)
}
