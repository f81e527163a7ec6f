//! Q5_1 weights eight rows to a block ([`BlockQ5_1x8`]) and the per-output numerics
//! of their product with Q8_1 activations (most layers of a Q5_K_M file whose rows do
//! not fit K-quants, as the default model's).
//!
//! Layout: as [`crate::BlockQ5_0x8`] (`packed_q5_0.rs`) with each row's `m` beside its
//! `d`.
//!
//! Numerics (scalar and SIMD paths, bit for bit), for weight row `r` and activation
//! row `t`: `acc = 0; for each block b: acc = fma(d_r * d_t, isum_b, acc);
//! acc = fma(m_r, s_t, acc)`, `isum_b` the exact integer dot product of the block's
//! values (`0..32`) with the activation quants, `d_r * d_t` rounded to f32 first, as
//! Q4_1's. Outputs depend only on their row and token.
//!
//! Must not know: threads, models.

use half::f16;

use crate::blocks::{BlockQ8_1, QK};
use crate::blocks_q5::BlockQ5_1;
use crate::error::KernelError;
use crate::interleaved::{Interleaved, Packed, ROWS_X8};
use crate::packed_q5_0::{get5, isum5, put5};

/// Block `b` of eight rows of Q5_1 (192 bytes, as eight `block_q5_1`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_1x8 {
    pub d: [f16; ROWS_X8],          // [rows]
    pub m: [f16; ROWS_X8],          // [rows]
    pub qh: [u8; ROWS_X8 * 4],      // [rows 8, chunk 4]
    pub qs: [u8; ROWS_X8 * QK / 2], // [chunk 4, rows 8, bytes 4]
}

const _: () = assert!(std::mem::size_of::<BlockQ5_1x8>() == 192);

impl Default for BlockQ5_1x8 {
    fn default() -> Self {
        Self {
            d: [f16::ZERO; ROWS_X8],
            m: [f16::ZERO; ROWS_X8],
            qh: [0; ROWS_X8 * 4],
            qs: [0; ROWS_X8 * QK / 2],
        }
    }
}

/// A Q5_1 weight `[rows, nb * 32]`, packed eight rows to a block.
pub type PackedQ5_1 = Packed<BlockQ5_1x8>;

impl Interleaved for BlockQ5_1x8 {
    type Row = BlockQ5_1;
    type Act = BlockQ8_1;
    const NAME: &'static str = "packed q5_1";

    fn put(&mut self, i: usize, src: &BlockQ5_1) {
        self.d[i] = src.d;
        self.m[i] = src.m;
        put5(&mut self.qs, &mut self.qh, i, (&src.qs, &src.qh));
    }

    fn get(&self, i: usize) -> BlockQ5_1 {
        let (qs, qh) = get5(&self.qs, &self.qh, i);
        BlockQ5_1 {
            d: self.d[i],
            m: self.m[i],
            qh,
            qs,
        }
    }

    fn dequantize(row: &[BlockQ5_1], out: &mut [f32]) -> Result<(), KernelError> {
        crate::blocks_q5::dequantize_row_q5_1(row, out)
    }

    fn dot_lane_ref(w: &[Self], i: usize, y: &[BlockQ8_1]) -> f32 {
        let mut acc = 0.0f32;
        for (wb, yb) in w.iter().zip(y) {
            let dd = wb.d[i].to_f32() * yb.d.to_f32();
            acc = dd.mul_add(isum5(&wb.qs, &wb.qh, i, &yb.qs, 0) as f32, acc);
            acc = wb.m[i].to_f32().mul_add(yb.s.to_f32(), acc);
        }
        acc
    }

    fn tile<const T: usize>(w: &[Self], ys: &[&[BlockQ8_1]; T], out: &mut [[f32; ROWS_X8]; T]) {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx512_vnni() {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx2_q5::q5_1x8_tile_vnni::<T>(w, ys, out) };
        }
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx2() {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx2_q5::q5_1x8_tile::<T>(w, ys, out) };
        }
        crate::interleaved::tile_ref(w, ys, out)
    }
}
