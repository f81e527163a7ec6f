//! Quantised weights repacked eight rows at a time ([`Packed`]) for the blocked
//! matrix product of `gemm.rs`: the container, its packing and row access, and the
//! scalar reference of the product (the test oracle of the SIMD kernels).
//!
//! A packed block ([`Interleaved`]) holds block `b` of eight consecutive rows:
//! their scales, and their quants interleaved four bytes at a time, so that one
//! 32-byte load holds four values of each of the eight rows and one broadcast
//! activation word meets all eight rows at once (the layout of ggml's repacked
//! `block_q4_0x8`). Unpacking is shared by the eight rows and by every token of a
//! tile, which is what makes batched decode and prompt chunks cheaper per token
//! than one row dot product after another. The block formats live in
//! `packed_q4_1.rs` and `packed_q8_0.rs`, each with its per-output numerics.
//!
//! Must not know: models, threads (the driver in `gemm.rs` owns parallelism).

use crate::blocks::{Block, QK};
use crate::error::{check_len, check_multiple, KernelError};

/// Rows interleaved in one packed block.
pub const ROWS_X8: usize = 8;

/// Block `b` of eight rows of one ggml block format, and the product's arithmetic
/// for it.
pub trait Interleaved: Copy + Default + Send + Sync {
    /// The ggml block of one row.
    type Row: Copy;
    /// The activation block the product takes (`vec_dot_type` in ggml).
    type Act: Sync;
    /// For error messages.
    const NAME: &'static str;
    /// Values per row block (32, or 256 for K-quants).
    const VALUES: usize = QK;

    /// Stores `row` as lane `lane` (0..8).
    fn put(&mut self, lane: usize, row: &Self::Row);
    /// Lane `lane` as it was before packing.
    fn get(&self, lane: usize) -> Self::Row;
    /// ggml's row dequantiser of the format.
    ///
    /// # Errors
    /// When `out.len() != row.len() * Self::VALUES`.
    fn dequantize(row: &[Self::Row], out: &mut [f32]) -> Result<(), KernelError>;
    /// One output: lane `lane` of the group's blocks `w` against activation row `y`
    /// (as many blocks), in the format's numerics (the scalar oracle).
    fn dot_lane_ref(w: &[Self], lane: usize, y: &[Self::Act]) -> f32;
    /// `out[t][i] = dot(lane i of w, ys[t])`, bit for bit [`Self::dot_lane_ref`]; the
    /// SIMD micro-kernel where the format has one and the CPU its features, else
    /// [`tile_ref`].
    fn tile<const T: usize>(w: &[Self], ys: &[&[Self::Act]; T], out: &mut [[f32; ROWS_X8]; T]) {
        tile_ref(w, ys, out)
    }
    /// Tokens one [`Self::tile`] call should take on this CPU: [`crate::gemm::TOKEN_TILE`],
    /// or up to [`crate::gemm::MAX_TOKEN_TILE`] where the format's kernel has the
    /// registers for more.
    fn token_tile() -> usize {
        crate::gemm::TOKEN_TILE
    }
    /// The whole product of `n` tokens (`x` `[n, nb]`, `out` `[n, rows]`, shapes checked)
    /// by another route where the format and the CPU have one (`wide.rs`), the same
    /// outputs bit for bit: `true` when it wrote `out`, `false` to take the tiles.
    fn product_many(_w: &Packed<Self>, _x: &[Self::Act], _n: usize, _out: &mut [f32]) -> bool {
        false
    }
}

/// [`Interleaved::tile`] by [`Interleaved::dot_lane_ref`], output by output.
pub fn tile_ref<P: Interleaved, const T: usize>(
    w: &[P],
    ys: &[&[P::Act]; T],
    out: &mut [[f32; ROWS_X8]; T],
) {
    for t in 0..T {
        for (i, o) in out[t].iter_mut().enumerate() {
            *o = P::dot_lane_ref(w, i, ys[t]);
        }
    }
}

/// A quantised weight `[rows, nb * P::VALUES]`, eight rows to a group; the last group is
/// padded with zero rows that the products never write out.
#[derive(Clone, Debug, PartialEq)]
pub struct Packed<P> {
    rows: usize,
    nb: usize,      // blocks per row
    blocks: Vec<P>, // [rows.div_ceil(8), nb]
}

impl<P: Interleaved> Packed<P> {
    /// Repacks row-major blocks `[rows, nb]`.
    ///
    /// # Errors
    /// When `w.len()` is not a multiple of `rows` (or `w` is not empty when `rows == 0`).
    pub fn pack(w: &[P::Row], rows: usize) -> Result<Self, KernelError> {
        Self::pack_with(w.len(), rows, |i| w[i])
    }

    /// Repacks row-major blocks `[rows, nb]` straight from a GGUF tensor's bytes, each
    /// block decoded once on its way in (no vector of decoded blocks beside the packed
    /// one: loading a model touches each byte of memory once).
    ///
    /// # Errors
    /// When `bytes` is not a whole number of blocks, or their count not a multiple of
    /// `rows`.
    pub fn pack_bytes(bytes: &[u8], rows: usize) -> Result<Self, KernelError>
    where
        P::Row: Block,
    {
        check_multiple("block bytes", bytes.len(), P::Row::BYTES)?;
        let at = |i: usize| P::Row::decode(&bytes[i * P::Row::BYTES..(i + 1) * P::Row::BYTES]);
        Self::pack_with(bytes.len() / P::Row::BYTES, rows, at)
    }

    /// [`Self::pack`] over `count` row-major blocks, block `i` given by `block(i)`.
    fn pack_with(
        count: usize,
        rows: usize,
        block: impl Fn(usize) -> P::Row,
    ) -> Result<Self, KernelError> {
        if rows == 0 {
            check_len(P::NAME, 0, count)?;
            return Ok(Self {
                rows,
                nb: 0,
                blocks: Vec::new(),
            });
        }
        check_multiple(P::NAME, count, rows)?;
        let nb = count / rows;
        let groups = rows.div_ceil(ROWS_X8);
        let mut blocks = vec![P::default(); groups * nb];
        for r in 0..rows {
            let (g, i) = (r / ROWS_X8, r % ROWS_X8);
            for b in 0..nb {
                blocks[g * nb + b].put(i, &block(r * nb + b));
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

    /// Blocks (of `P::VALUES` values) per row.
    pub fn blocks_per_row(&self) -> usize {
        self.nb
    }

    /// The packed blocks, `[groups, nb]`.
    pub fn blocks(&self) -> &[P] {
        &self.blocks
    }

    /// Block `b` of row `r` as it was before packing.
    ///
    /// # Panics
    /// If `r >= self.rows()` or `b >= self.blocks_per_row()`.
    pub fn row_block(&self, r: usize, b: usize) -> P::Row {
        assert!(
            r < self.rows && b < self.nb,
            "row {r} block {b} out of range"
        );
        self.blocks[(r / ROWS_X8) * self.nb + b].get(r % ROWS_X8)
    }

    /// ggml's dequantisation of row `r` into `y` (`nb * P::VALUES` values).
    ///
    /// # Errors
    /// When `r >= rows` or `y.len() != nb * P::VALUES`.
    pub fn dequantize_row(&self, r: usize, y: &mut [f32]) -> Result<(), KernelError> {
        check_len("packed dequantize output", self.nb * P::VALUES, y.len())?;
        if r >= self.rows {
            return Err(KernelError::Length {
                what: "packed row index bound",
                expected: self.rows,
                got: r,
            });
        }
        for (b, out) in y.chunks_exact_mut(P::VALUES).enumerate() {
            P::dequantize(std::slice::from_ref(&self.row_block(r, b)), out)?;
        }
        Ok(())
    }
}

/// Scalar reference of [`crate::matmul_packed`]: `out[t, r] = dot(w row r, x row t)`.
///
/// # Errors
/// When `x.len() != n * nb` or `out.len() != n * rows`.
pub fn matmul_packed_ref<P: Interleaved>(
    w: &Packed<P>,
    x: &[P::Act],
    n: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    w.check_product(x.len(), n, out.len())?;
    for t in 0..n {
        let y = &x[t * w.nb..(t + 1) * w.nb];
        for r in 0..w.rows {
            let g = &w.blocks[(r / ROWS_X8) * w.nb..(r / ROWS_X8 + 1) * w.nb];
            out[t * w.rows + r] = P::dot_lane_ref(g, r % ROWS_X8, y);
        }
    }
    Ok(())
}
