//! Q8_0 weights eight rows to a block ([`BlockQ8_0x8`]) and the per-output numerics
//! of their product with Q8_0 activations (the output head of models whose token
//! embedding is Q8_0, and every layer of a Q8_0 file).
//!
//! Numerics (scalar and SIMD paths, bit for bit), for weight row `r` and activation
//! row `t`: `acc = 0; for each block b: acc = fma(d_r * d_t, isum_b, acc)` where
//! `isum_b` is the exact integer dot product of the block's quants and `d_r * d_t`
//! is rounded to f32 first. Outputs depend only on their row and token. (ggml's
//! `vec_dot_q8_0_q8_0` keeps eight partial sums per row instead; the difference is
//! rounding.) Activation quants must lie in `-127..=127`, as `quantize_row_q8_0`
//! makes them: the SIMD path moves the weight's sign onto the activation, and
//! `-(-128)` does not fit in an i8 (ggml's kernel has the same bound).
//!
//! Must not know: threads, models.

use half::f16;

use crate::blocks::{BlockQ8_0, QK};
use crate::error::KernelError;
use crate::interleaved::{Interleaved, Packed, ROWS_X8};

/// Block `b` of eight rows of Q8_0 (272 bytes, as eight `block_q8_0`).
///
/// `qs[32 c + 4 i + k]` is value `4 c + k` of row `i` (`c` in 0..8, `k` in 0..4).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8_0x8 {
    pub d: [f16; ROWS_X8],      // [rows]
    pub qs: [i8; ROWS_X8 * QK], // [chunk 8, rows 8, values 4]
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0x8>() == 272);

impl Default for BlockQ8_0x8 {
    fn default() -> Self {
        Self {
            d: [f16::ZERO; ROWS_X8],
            qs: [0; ROWS_X8 * QK],
        }
    }
}

/// A Q8_0 weight `[rows, nb * 32]`, packed eight rows to a block.
pub type PackedQ8_0 = Packed<BlockQ8_0x8>;

impl Interleaved for BlockQ8_0x8 {
    type Row = BlockQ8_0;
    type Act = BlockQ8_0;
    const NAME: &'static str = "packed q8_0";

    fn put(&mut self, i: usize, src: &BlockQ8_0) {
        self.d[i] = src.d;
        for c in 0..QK / 4 {
            let at = 32 * c + 4 * i;
            self.qs[at..at + 4].copy_from_slice(&src.qs[4 * c..4 * c + 4]);
        }
    }

    fn get(&self, i: usize) -> BlockQ8_0 {
        let mut qs = [0i8; QK];
        for c in 0..QK / 4 {
            let at = 32 * c + 4 * i;
            qs[4 * c..4 * c + 4].copy_from_slice(&self.qs[at..at + 4]);
        }
        BlockQ8_0 { d: self.d[i], qs }
    }

    fn dequantize(row: &[BlockQ8_0], out: &mut [f32]) -> Result<(), KernelError> {
        crate::blocks::dequantize_row_q8_0(row, out)
    }

    fn dot_lane_ref(w: &[Self], i: usize, y: &[BlockQ8_0]) -> f32 {
        let mut acc = 0.0f32;
        for (wb, yb) in w.iter().zip(y) {
            let mut s = 0i32;
            for c in 0..QK / 4 {
                for k in 0..4 {
                    s += wb.qs[32 * c + 4 * i + k] as i32 * yb.qs[4 * c + k] as i32;
                }
            }
            let dd = wb.d[i].to_f32() * yb.d.to_f32();
            acc = dd.mul_add(s as f32, acc);
        }
        acc
    }

    fn tile<const T: usize>(w: &[Self], ys: &[&[BlockQ8_0]; T], out: &mut [[f32; ROWS_X8]; T]) {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx512_vnni() {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx2::q8_0x8_tile_vnni::<T>(w, ys, out) };
        }
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx2() {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx2::q8_0x8_tile::<T>(w, ys, out) };
        }
        crate::interleaved::tile_ref(w, ys, out)
    }
}
