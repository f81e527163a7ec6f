//! Q4_1 weights eight rows to a block ([`BlockQ4_1x8`]) and the per-output numerics
//! of their product with Q8_1 activations.
//!
//! Numerics (scalar and SIMD paths, bit for bit), for weight row `r` and activation
//! row `t`: `acc = 0; for each block b: acc = fma(d_r * d_t, isum_b, acc);
//! acc = fma(m_r, s_t, acc)` where `isum_b` is the exact integer dot product of the
//! block's quants and `d_r * d_t` is rounded to f32 first. Each output depends only
//! on its own row and token, never on the tile, the batch or the thread count, so a
//! sequence decodes the same tokens alone and among others. (This order differs from
//! ggml's `vec_dot_q4_1_q8_1`, which keeps eight partial sums per row; the difference
//! is rounding, a few ulps of the output.)
//!
//! Must not know: threads, models.

use half::f16;

use crate::blocks::{BlockQ4_1, BlockQ8_1, QK};
use crate::error::KernelError;
use crate::interleaved::{Interleaved, Packed, ROWS_X8};

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

/// A Q4_1 weight `[rows, nb * 32]`, packed eight rows to a block.
pub type PackedQ4_1 = Packed<BlockQ4_1x8>;

/// Exact integer dot product of packed lane `i` with activation block `y`.
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

impl Interleaved for BlockQ4_1x8 {
    type Row = BlockQ4_1;
    type Act = BlockQ8_1;
    const NAME: &'static str = "packed q4_1";

    fn put(&mut self, i: usize, src: &BlockQ4_1) {
        self.d[i] = src.d;
        self.m[i] = src.m;
        for c in 0..4 {
            let at = 32 * c + 4 * i;
            self.qs[at..at + 4].copy_from_slice(&src.qs[4 * c..4 * c + 4]);
        }
    }

    fn get(&self, i: usize) -> BlockQ4_1 {
        let mut qs = [0u8; QK / 2];
        for c in 0..4 {
            let at = 32 * c + 4 * i;
            qs[4 * c..4 * c + 4].copy_from_slice(&self.qs[at..at + 4]);
        }
        BlockQ4_1 {
            d: self.d[i],
            m: self.m[i],
            qs,
        }
    }

    fn dequantize(row: &[BlockQ4_1], out: &mut [f32]) -> Result<(), KernelError> {
        crate::blocks::dequantize_row_q4_1(row, out)
    }

    fn dot_lane_ref(w: &[Self], i: usize, y: &[BlockQ8_1]) -> f32 {
        let mut acc = 0.0f32;
        for (wb, yb) in w.iter().zip(y) {
            let dd = wb.d[i].to_f32() * yb.d.to_f32();
            acc = dd.mul_add(isum(wb, i, yb) as f32, acc);
            acc = wb.m[i].to_f32().mul_add(yb.s.to_f32(), acc);
        }
        acc
    }

    fn tile<const T: usize>(w: &[Self], ys: &[&[BlockQ8_1]; T], out: &mut [[f32; ROWS_X8]; T]) {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx512_vnni() {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx2::q4_1x8_tile_vnni::<T>(w, ys, out) };
        }
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx2() {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx2::q4_1x8_tile::<T>(w, ys, out) };
        }
        crate::interleaved::tile_ref(w, ys, out)
    }
}
