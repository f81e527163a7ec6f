//! The dense product `out[t, r] = dot(w row r, x row t)` for weights held as stored (f32,
//! f16, bf16) and f32 activations: `w` is `[rows, k]`, `x` is `[n, k]`, `out` is `[n,
//! rows]`. Parallel over chunks of rows with rayon; within a chunk, tiles of
//! [`TILE_ROWS`] rows stay in cache while the tokens go past them three at a time, and
//! each SIMD tile (`dense_avx2.rs`; `dense_avx512.rs`, two chunks per register, where the
//! CPU has AVX-512) widens a weight chunk once for three tokens and loads
//! an activation chunk once for two rows: a prompt chunk or a batch of sequences costs
//! far less per token than one row dot product after another.
//!
//! Numerics, per output ([`dot_ref`]): weights widened to f32 exactly, two accumulators
//! of 8 lanes, the even chunks of 8 by FMA into one and the odd ones into the other
//! (lane `l` of chunk `c` takes element `8c + l`), added lane by lane, the lanes summed
//! pairwise as `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`, then the `k % 8` tail
//! by FMA. The SIMD tile and the scalar fallback both compute exactly
//! that, so outputs do not depend on `n`, the tiling, the thread count or the CPU's
//! features. Must not know: models, quantised blocks.

use rayon::prelude::*;

use crate::error::KernelError;
use crate::matmul::check_shapes;

/// Weight rows kept hot while the tokens stream past them.
pub const TILE_ROWS: usize = 16;
/// Tokens and rows one tile takes when many tokens come (12 accumulators, two per
/// output): each widened weight chunk serves three tokens, each activation chunk two
/// rows. The fastest shape on AVX2 of those tried (2 x 2 and 1 x 4 took 10-25% longer on
/// a 512-token prompt of the default model in f16).
const TOKENS: usize = 3;
const ROWS_MANY: usize = 2;
/// Rows and tokens of a many-token tile on AVX-512: 24 accumulators of its 32
/// registers, so the FMAs' latency is hidden and each widened weight register serves six
/// tokens.
const ROWS_WIDE: usize = 4;
const TOKENS_WIDE: usize = 6;
/// Rows one tile takes with one token: one, a single weight stream (four rows at once
/// decoded 20-30% slower, their four streams apart in memory).
const ROWS_ONE: usize = 1;

/// A dense weight element: f32, f16 or bf16.
pub trait DenseElem: Copy + Send + Sync + 'static {
    /// The element as f32 (exact).
    fn widen(self) -> f32;
    /// `out[t][r] = dot_ref(w row r, x row t)` for `R` rows and `T` tokens, each `k`
    /// long: the SIMD tile where the CPU has the features.
    fn tile<const R: usize, const T: usize>(
        w: &[Self],
        x: &[f32],
        k: usize,
        out: &mut [[f32; R]; T],
    );
}

macro_rules! dense_elem {
    ($t:ty, $widen:expr) => {
        impl DenseElem for $t {
            #[inline]
            fn widen(self) -> f32 {
                $widen(self)
            }
            #[inline]
            fn tile<const R: usize, const T: usize>(
                w: &[Self],
                x: &[f32],
                k: usize,
                out: &mut [[f32; R]; T],
            ) {
                #[cfg(target_arch = "x86_64")]
                if crate::simd::avx512() {
                    // SAFETY: the CPU has AVX-512 F, BW and VL (checked above).
                    return unsafe { crate::dense_avx512::tile::<$t, R, T>(w, x, k, out) };
                }
                #[cfg(target_arch = "x86_64")]
                if crate::simd::avx2() {
                    // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
                    return unsafe { crate::dense_avx2::tile::<$t, R, T>(w, x, k, out) };
                }
                tile_ref(w, x, k, out)
            }
        }
    };
}

dense_elem!(f32, |v: f32| v);
dense_elem!(half::f16, half::f16::to_f32);
dense_elem!(half::bf16, half::bf16::to_f32);

/// One output in the product's numerics (the module header's order).
///
/// # Panics
/// If `w.len() != x.len()`.
pub fn dot_ref<W: DenseElem>(w: &[W], x: &[f32]) -> f32 {
    assert_eq!(w.len(), x.len(), "dense dot: lengths differ");
    let k = w.len();
    let full = k - k % 8;
    // Lanes of the even chunks of 8, and of the odd ones.
    let mut acc = [[0.0f32; 8]; 2];
    for (c, (wc, xc)) in w[..full]
        .chunks_exact(8)
        .zip(x[..full].chunks_exact(8))
        .enumerate()
    {
        let a = &mut acc[c % 2];
        for l in 0..8 {
            a[l] = wc[l].widen().mul_add(xc[l], a[l]);
        }
    }
    let lanes: [f32; 8] = std::array::from_fn(|l| acc[0][l] + acc[1][l]);
    // `hsum` of `attn_avx2.rs`: halves, then pairs, then the last two.
    let h: [f32; 4] = std::array::from_fn(|l| lanes[l] + lanes[l + 4]);
    let mut s = (h[0] + h[2]) + (h[1] + h[3]);
    for j in full..k {
        s = w[j].widen().mul_add(x[j], s);
    }
    s
}

/// [`DenseElem::tile`] by [`dot_ref`], output by output.
fn tile_ref<W: DenseElem, const R: usize, const T: usize>(
    w: &[W],
    x: &[f32],
    k: usize,
    out: &mut [[f32; R]; T],
) {
    for (t, o) in out.iter_mut().enumerate() {
        for (r, v) in o.iter_mut().enumerate() {
            *v = dot_ref(&w[r * k..(r + 1) * k], &x[t * k..(t + 1) * k]);
        }
    }
}

/// Rows `w` (`rows` of them, `k` each) against tokens `x` (`T` of them), written by
/// `put(token, row, value)`, in tiles of `R` rows (then single rows).
#[inline]
fn rows_tokens<W: DenseElem, const R: usize, const T: usize>(
    w: &[W],
    rows: usize,
    x: &[f32],
    k: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    let mut r = 0;
    while r < rows {
        if rows - r >= R {
            let mut o = [[0.0f32; R]; T];
            W::tile::<R, T>(&w[r * k..(r + R) * k], x, k, &mut o);
            for (t, ot) in o.iter().enumerate() {
                for (i, v) in ot.iter().enumerate() {
                    put(t, r + i, *v);
                }
            }
            r += R;
        } else {
            let mut o = [[0.0f32; 1]; T];
            W::tile::<1, T>(&w[r * k..(r + 1) * k], x, k, &mut o);
            for (t, ot) in o.iter().enumerate() {
                put(t, r, ot[0]);
            }
            r += 1;
        }
    }
}

/// `rows` rows of `w` against all `n` tokens of `x`: [`TILE_ROWS`] rows at a time, the
/// tokens `TM` at a time within each, in tiles of `RM` rows (a last few tokens in
/// smaller tiles).
fn rows_all_tokens<W: DenseElem, const RM: usize, const TM: usize>(
    w: &[W],
    rows: usize,
    x: &[f32],
    n: usize,
    k: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    for r0 in (0..rows).step_by(TILE_ROWS) {
        let tr = TILE_ROWS.min(rows - r0);
        let wt = &w[r0 * k..(r0 + tr) * k];
        let mut t0 = 0;
        while t0 < n {
            let xt = &x[t0 * k..];
            let mut at = |t: usize, r: usize, v: f32| put(t0 + t, r0 + r, v);
            let step = match n - t0 {
                1 => {
                    rows_tokens::<W, ROWS_ONE, 1>(wt, tr, xt, k, &mut at);
                    1
                }
                2 => {
                    rows_tokens::<W, RM, 2>(wt, tr, xt, k, &mut at);
                    2
                }
                3 if TM > 3 => {
                    rows_tokens::<W, RM, 3>(wt, tr, xt, k, &mut at);
                    3
                }
                4 if TM > 4 => {
                    rows_tokens::<W, RM, 4>(wt, tr, xt, k, &mut at);
                    4
                }
                5 if TM > 5 => {
                    rows_tokens::<W, RM, 5>(wt, tr, xt, k, &mut at);
                    5
                }
                _ => {
                    rows_tokens::<W, RM, TM>(wt, tr, xt, k, &mut at);
                    TM
                }
            };
            t0 += step;
        }
    }
}

/// Rows per parallel task: about 4 tasks per thread, at least [`TILE_ROWS`].
fn chunk_rows(rows: usize) -> usize {
    let tasks = 4 * rayon::current_num_threads().max(1);
    rows.div_ceil(tasks).max(TILE_ROWS)
}

/// Dense weights `[rows, k]` times f32 activations `[n, k]` into `out[n, rows]`.
fn matmul_dense<W: DenseElem>(
    w: &[W],
    rows: usize,
    x: &[f32],
    n: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let k = check_shapes(w.len(), rows, x.len(), n, out.len())?;
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let chunk = chunk_rows(rows);
    if n == 1 {
        out.par_chunks_mut(chunk).enumerate().for_each(|(c, o)| {
            let r0 = c * chunk;
            let wc = &w[r0 * k..(r0 + o.len()) * k];
            rows_tokens::<W, ROWS_ONE, 1>(wc, o.len(), x, k, &mut |_, r, v| o[r] = v);
        });
        return Ok(());
    }
    // Many tokens: each task fills `[n, its rows]`, then the parts are scattered.
    // AVX-512's tiles have 32 registers: [`ROWS_WIDE`] x [`TOKENS_WIDE`].
    let wide = crate::simd::avx512();
    let parts: Vec<(usize, usize, Vec<f32>)> = (0..rows.div_ceil(chunk))
        .into_par_iter()
        .map(|c| {
            let r0 = c * chunk;
            let width = chunk.min(rows - r0);
            let mut tmp = vec![0.0f32; n * width];
            let wc = &w[r0 * k..(r0 + width) * k];
            let mut put = |t: usize, r: usize, v: f32| tmp[t * width + r] = v;
            if wide {
                rows_all_tokens::<W, ROWS_WIDE, TOKENS_WIDE>(wc, width, x, n, k, &mut put);
            } else {
                rows_all_tokens::<W, ROWS_MANY, TOKENS>(wc, width, x, n, k, &mut put);
            }
            (r0, width, tmp)
        })
        .collect();
    crate::gemm::scatter_parts(parts, rows, out);
    Ok(())
}

macro_rules! matmul_of {
    ($name:ident, $t:ty, $what:literal) => {
        #[doc = concat!("Dense ", $what, " weights `[rows, cols]` times f32 activations `[n, cols]` into")]
        /// `out[n, rows]` (weights widened to f32 exactly, f32 accumulation).
        ///
        /// # Errors
        /// When `w.len()` is not `rows * cols`, `x.len() != n * cols` or
        /// `out.len() != n * rows`.
        pub fn $name(
            w: &[$t],
            rows: usize,
            x: &[f32],
            n: usize,
            out: &mut [f32],
        ) -> Result<(), KernelError> {
            matmul_dense(w, rows, x, n, out)
        }
    };
}

matmul_of!(matmul_f32, f32, "f32");
matmul_of!(matmul_f16, half::f16, "f16");
matmul_of!(matmul_bf16, half::bf16, "bf16");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_sums_lanes_then_the_tail() {
        // Three chunks of 8 (1..=24 times 1), then a tail of 2 x 0.5.
        let w: Vec<f32> = (1..=26).map(|v| v as f32).collect();
        let mut x = vec![1.0f32; 26];
        x[24] = 0.5;
        x[25] = 0.5;
        assert_eq!(dot_ref(&w, &x), 300.0 + 12.5 + 13.0);
        assert_eq!(dot_ref::<f32>(&[], &[]), 0.0);
    }
}
