//! Q5_0 weights eight rows to a block ([`BlockQ5_0x8`]) and the per-output numerics
//! of their product with Q8_0 activations (most layers of a Q4_K_M file whose rows do
//! not fit K-quants, as the default model's). Also the fifth-bit layout that Q5_1
//! (`packed_q5_1.rs`) shares.
//!
//! Layout: `d` per row, the low nibbles as in [`crate::BlockQ4_1x8`] (`qs[32 c + 4 i +
//! k]` is byte `4 c + k` of row `i`), and the fifth bits regrouped by chunk: byte
//! `qh[4 i + c]` of row `i` holds in bit `k` the fifth bit of value `4 c + k` and in
//! bit `4 + k` that of value `16 + 4 c + k`, the two values one byte of chunk `c`
//! unpacks to. One 32-byte load of `qh` serves the whole block.
//!
//! Numerics (scalar and SIMD paths, bit for bit), for weight row `r` and activation
//! row `t`: `acc = 0; for each block b: acc = fma(d_r * d_t, isum_b, acc)`, `isum_b`
//! the exact integer dot product of the block's values `q - 16` with the activation
//! quants, `d_r * d_t` rounded to f32 first. Outputs depend only on their row and
//! token. (ggml sums each block with one rounding more; the difference is rounding.)
//! Activation quants must lie in `-127..=127`, as `quantize_row_q8_0` makes them: the
//! SIMD path moves the weight's sign onto the activation.
//!
//! Must not know: threads, models.

use half::f16;

use crate::blocks::{BlockQ8_0, QK};
use crate::blocks_q5::BlockQ5_0;
use crate::error::KernelError;
use crate::interleaved::{Interleaved, Packed, ROWS_X8};

/// Block `b` of eight rows of Q5_0 (176 bytes, as eight `block_q5_0`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_0x8 {
    pub d: [f16; ROWS_X8],          // [rows]
    pub qh: [u8; ROWS_X8 * 4],      // [rows 8, chunk 4]
    pub qs: [u8; ROWS_X8 * QK / 2], // [chunk 4, rows 8, bytes 4]
}

const _: () = assert!(std::mem::size_of::<BlockQ5_0x8>() == 176);

impl Default for BlockQ5_0x8 {
    fn default() -> Self {
        Self {
            d: [f16::ZERO; ROWS_X8],
            qh: [0; ROWS_X8 * 4],
            qs: [0; ROWS_X8 * QK / 2],
        }
    }
}

/// A Q5_0 weight `[rows, nb * 32]`, packed eight rows to a block.
pub type PackedQ5_0 = Packed<BlockQ5_0x8>;

/// ggml's `qh` word regrouped by chunk (byte `c`: the fifth bits of values `4 c..4 c +
/// 4` in its low nibble, of values `16 + 4 c..` in its high nibble).
pub(crate) fn pack_qh(qh: &[u8; 4]) -> [u8; 4] {
    let w = u32::from_le_bytes(*qh);
    std::array::from_fn(|c| (((w >> (4 * c)) & 0xF) | (((w >> (16 + 4 * c)) & 0xF) << 4)) as u8)
}

/// The inverse of [`pack_qh`].
pub(crate) fn unpack_qh(p: &[u8; 4]) -> [u8; 4] {
    let w = (0..4).fold(0u32, |w, c| {
        w | (((p[c] & 0xF) as u32) << (4 * c)) | (((p[c] >> 4) as u32) << (16 + 4 * c))
    });
    w.to_le_bytes()
}

/// Copies row `i`'s nibbles into the interleaved `qs` and its regrouped `qh`.
pub(crate) fn put5(qs: &mut [u8; 128], qh: &mut [u8; 32], i: usize, src: (&[u8; 16], &[u8; 4])) {
    for c in 0..4 {
        let at = 32 * c + 4 * i;
        qs[at..at + 4].copy_from_slice(&src.0[4 * c..4 * c + 4]);
    }
    qh[4 * i..4 * i + 4].copy_from_slice(&pack_qh(src.1));
}

/// Row `i`'s ggml `qs` and `qh`, as before [`put5`].
pub(crate) fn get5(qs: &[u8; 128], qh: &[u8; 32], i: usize) -> ([u8; 16], [u8; 4]) {
    let mut q = [0u8; 16];
    for c in 0..4 {
        let at = 32 * c + 4 * i;
        q[4 * c..4 * c + 4].copy_from_slice(&qs[at..at + 4]);
    }
    let p: [u8; 4] = std::array::from_fn(|c| qh[4 * i + c]);
    (q, unpack_qh(&p))
}

/// Exact integer dot product of lane `i`'s values (`0..32`, minus `offset`) with the
/// activation quants `y`.
pub(crate) fn isum5(qs: &[u8; 128], qh: &[u8; 32], i: usize, y: &[i8; QK], offset: i32) -> i32 {
    let mut s = 0i32;
    for c in 0..4 {
        let h = qh[4 * i + c];
        for k in 0..4 {
            let q = qs[32 * c + 4 * i + k];
            let lo = (q & 0x0F) as i32 | (((h >> k) & 1) as i32) << 4;
            let hi = (q >> 4) as i32 | (((h >> (4 + k)) & 1) as i32) << 4;
            s += (lo - offset) * y[4 * c + k] as i32;
            s += (hi - offset) * y[16 + 4 * c + k] as i32;
        }
    }
    s
}

impl Interleaved for BlockQ5_0x8 {
    type Row = BlockQ5_0;
    type Act = BlockQ8_0;
    const NAME: &'static str = "packed q5_0";

    fn put(&mut self, i: usize, src: &BlockQ5_0) {
        self.d[i] = src.d;
        put5(&mut self.qs, &mut self.qh, i, (&src.qs, &src.qh));
    }

    fn get(&self, i: usize) -> BlockQ5_0 {
        let (qs, qh) = get5(&self.qs, &self.qh, i);
        BlockQ5_0 {
            d: self.d[i],
            qh,
            qs,
        }
    }

    fn dequantize(row: &[BlockQ5_0], out: &mut [f32]) -> Result<(), KernelError> {
        crate::blocks_q5::dequantize_row_q5_0(row, out)
    }

    fn dot_lane_ref(w: &[Self], i: usize, y: &[BlockQ8_0]) -> f32 {
        let mut acc = 0.0f32;
        for (wb, yb) in w.iter().zip(y) {
            let dd = wb.d[i].to_f32() * yb.d.to_f32();
            acc = dd.mul_add(isum5(&wb.qs, &wb.qh, i, &yb.qs, 16) as f32, acc);
        }
        acc
    }

    fn tile<const T: usize>(w: &[Self], ys: &[&[BlockQ8_0]; T], out: &mut [[f32; ROWS_X8]; T]) {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx512_vnni() {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx2_q5::q5_0x8_tile_vnni::<T>(w, ys, out) };
        }
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx2() {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx2_q5::q5_0x8_tile::<T>(w, ys, out) };
        }
        crate::interleaved::tile_ref(w, ys, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qh_regrouping_is_lossless_and_puts_each_chunks_bits_in_its_byte() {
        for w in [0u32, 1, 0x8000_0000, 0x0001_0000, 0xDEAD_BEEF, u32::MAX] {
            let qh = w.to_le_bytes();
            let p = pack_qh(&qh);
            assert_eq!(unpack_qh(&p), qh);
            for (c, byte) in p.iter().enumerate() {
                for k in 0..4 {
                    assert_eq!((byte >> k) & 1, ((w >> (4 * c + k)) & 1) as u8);
                    assert_eq!((byte >> (4 + k)) & 1, ((w >> (16 + 4 * c + k)) & 1) as u8);
                }
            }
        }
    }
}
