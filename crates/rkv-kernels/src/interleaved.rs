//! Q4_1 weights repacked eight rows at a time ([`PackedQ4_1`]) for the blocked
//! matrix product of `gemm.rs`, their row dequantiser, and the scalar reference
//! of that product (the test oracle of the SIMD kernel).
//!
//! One [`BlockQ4_1x8`] holds block `b` of eight consecutive rows: their eight `d`,
//! their eight `m`, and their quants interleaved four bytes at a time, so that one
//! 32-byte load holds four values of each of the eight rows and one broadcast
//! activation word meets all eight rows at once (the layout of ggml's repacked
//! `block_q4_0x8`, applied to Q4_1). Unpacking is shared by the eight rows and by
//! every token of a tile, which is what makes batched decode and prompt chunks
//! cheaper per token than one row dot product after another.
//!
//! Numerics (both paths, bit for bit), for weight row `r` and activation row `t`:
//! `acc = 0; for each block b: acc = fma(d_r * d_t, isum_b, acc); acc = fma(m_r, s_t, acc)`
//! where `isum_b` is the exact integer dot product of the block's quants and
//! `d_r * d_t` is rounded to f32 first. Each output depends only on its own row and
//! token, never on the tile, the batch or the thread count, so a sequence decodes
//! the same tokens alone and among others. (This order differs from ggml's
//! `vec_dot_q4_1_q8_1`, which keeps eight partial sums per row; the difference is
//! rounding, a few ulps of the output.)
//!
//! Must not know: models, threads (the driver in `gemm.rs` owns parallelism).

use half::f16;

use crate::blocks::{BlockQ4_1, BlockQ8_1, QK};
use crate::error::{check_len, check_multiple, KernelError};

/// Rows interleaved in one packed block.
pub const ROWS_X8: usize = 8;

/// Block `b` of eight rows of Q4_1 (160 bytes, as eight `block_q4_1`).
///
/// `qs[32 c + 4 i + k]` is byte `4 c + k` of row `i`'s `qs` (`c` in 0..4, `k` in
/// 0..4): its low nibble is value `4 c + k`, its high nibble value `16 + 4 c + k`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4_1x8 {
    pub d: [f16; ROWS_X8],          // [rows]
    pub m: [f16; ROWS_X8],          // [rows]
    pub qs: [u8; ROWS_X8 * QK / 2], // [chunk 4, rows 8, bytes 4]
}

const _: () = assert!(std::mem::size_of::<BlockQ4_1x8>() == 160);

impl Default for BlockQ4_1x8 {
    fn default() -> Self {
        Self {
            d: [f16::ZERO; ROWS_X8],
            m: [f16::ZERO; ROWS_X8],
            qs: [0; ROWS_X8 * QK / 2],
        }
    }
}

/// A Q4_1 weight `[rows, nb * 32]`, eight rows to a group; the last group is
/// padded with zero rows (`d = m = 0`) that the products never write out.
#[derive(Clone, Debug, PartialEq)]
pub struct PackedQ4_1 {
    rows: usize,
    nb: usize,                // blocks per row
    blocks: Vec<BlockQ4_1x8>, // [rows.div_ceil(8), nb]
}

impl PackedQ4_1 {
    /// Repacks row-major Q4_1 blocks `[rows, nb]`.
    ///
    /// # Errors
    /// When `w.len()` is not a multiple of `rows` (or `w` is not empty when `rows == 0`).
    pub fn pack(w: &[BlockQ4_1], rows: usize) -> Result<Self, KernelError> {
        if rows == 0 {
            check_len("packed q4_1 (rows = 0)", 0, w.len())?;
            return Ok(Self {
                rows,
                nb: 0,
                blocks: Vec::new(),
            });
        }
        check_multiple("packed q4_1", w.len(), rows)?;
        let nb = w.len() / rows;
        let groups = rows.div_ceil(ROWS_X8);
        let mut blocks = vec![BlockQ4_1x8::default(); groups * nb];
        for (r, row) in w.chunks_exact(nb.max(1)).enumerate().take(rows) {
            let (g, i) = (r / ROWS_X8, r % ROWS_X8);
            for (b, src) in row.iter().enumerate() {
                let dst = &mut blocks[g * nb + b];
                dst.d[i] = src.d;
                dst.m[i] = src.m;
                for c in 0..4 {
                    let at = 32 * c + 4 * i;
                    dst.qs[at..at + 4].copy_from_slice(&src.qs[4 * c..4 * c + 4]);
                }
            }
        }
        Ok(Self { rows, nb, blocks })
    }

    /// Shapes of a product with `n` activation rows: `x_len == n * nb`,
    /// `out_len == n * rows` (products checked for overflow).
    pub(crate) fn check_product(
        &self,
        x_len: usize,
        n: usize,
        out_len: usize,
    ) -> Result<(), KernelError> {
        let product =
            |what, a: usize, b: usize| a.checked_mul(b).ok_or(KernelError::Overflow { what });
        check_len(
            "packed matmul x",
            product("packed matmul x", n, self.nb)?,
            x_len,
        )?;
        check_len(
            "packed matmul out",
            product("packed matmul out", n, self.rows)?,
            out_len,
        )
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Blocks of 32 values per row.
    pub fn blocks_per_row(&self) -> usize {
        self.nb
    }

    /// The packed blocks, `[groups, nb]`.
    pub fn blocks(&self) -> &[BlockQ4_1x8] {
        &self.blocks
    }

    /// Row `r` as it was before packing.
    ///
    /// # Panics
    /// If `r >= self.rows()`.
    pub fn row_block(&self, r: usize, b: usize) -> BlockQ4_1 {
        assert!(
            r < self.rows && b < self.nb,
            "row {r} block {b} out of range"
        );
        let (g, i) = (r / ROWS_X8, r % ROWS_X8);
        let src = &self.blocks[g * self.nb + b];
        let mut qs = [0u8; QK / 2];
        for c in 0..4 {
            let at = 32 * c + 4 * i;
            qs[4 * c..4 * c + 4].copy_from_slice(&src.qs[at..at + 4]);
        }
        BlockQ4_1 {
            d: src.d[i],
            m: src.m[i],
            qs,
        }
    }

    /// ggml `dequantize_row_q4_1` of row `r` into `y` (`nb * 32` values).
    ///
    /// # Errors
    /// When `r >= rows` or `y.len() != nb * 32`.
    pub fn dequantize_row(&self, r: usize, y: &mut [f32]) -> Result<(), KernelError> {
        check_len("packed q4_1 dequantize output", self.nb * QK, y.len())?;
        if r >= self.rows {
            return Err(KernelError::Length {
                what: "packed q4_1 row index bound",
                expected: self.rows,
                got: r,
            });
        }
        for (b, out) in y.chunks_exact_mut(QK).enumerate() {
            let blk = self.row_block(r, b);
            crate::blocks::dequantize_row_q4_1(std::slice::from_ref(&blk), out)?;
        }
        Ok(())
    }
}

/// Exact integer dot product of block `b` of packed lane `i` with activation block `y`.
fn isum(w: &BlockQ4_1x8, i: usize, y: &BlockQ8_1) -> i32 {
    let mut s = 0i32;
    for c in 0..4 {
        for k in 0..4 {
            let q = w.qs[32 * c + 4 * i + k];
            s += (q & 0x0F) as i32 * y.qs[4 * c + k] as i32;
            s += (q >> 4) as i32 * y.qs[16 + 4 * c + k] as i32;
        }
    }
    s
}

/// One output of the packed product: row lane `i` of group blocks `w` (`nb` blocks)
/// against activation row `y` (`nb` blocks), in the module's numerics.
pub(crate) fn dot_lane_ref(w: &[BlockQ4_1x8], i: usize, y: &[BlockQ8_1]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, yb) in w.iter().zip(y) {
        let dd = wb.d[i].to_f32() * yb.d.to_f32();
        acc = dd.mul_add(isum(wb, i, yb) as f32, acc);
        acc = wb.m[i].to_f32().mul_add(yb.s.to_f32(), acc);
    }
    acc
}

/// Scalar reference of [`crate::matmul_q4_1_packed`]: `out[t, r] = dot(w row r, x row t)`.
///
/// # Errors
/// When `x.len() != n * nb` or `out.len() != n * rows`.
pub fn matmul_q4_1_packed_ref(
    w: &PackedQ4_1,
    x: &[BlockQ8_1],
    n: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    w.check_product(x.len(), n, out.len())?;
    for t in 0..n {
        let y = &x[t * w.nb..(t + 1) * w.nb];
        for r in 0..w.rows {
            let g = &w.blocks[(r / ROWS_X8) * w.nb..(r / ROWS_X8 + 1) * w.nb];
            out[t * w.rows + r] = dot_lane_ref(g, r % ROWS_X8, y);
        }
    }
    Ok(())
}
