//! ggml's 5-bit block layouts (Q5_0, Q5_1): their safe decoding from GGUF bytes, the
//! row dequantisers and ggml's x86 row dot products (the test oracles of the packed
//! products). llama.cpp writes them where a K-quant does not fit a tensor's rows (a row
//! length that is not a multiple of 256, as SmolLM2's 576): the bulk of a Q4_K_M
//! (Q5_0) or Q5_K_M (Q5_1) file of such a model.
//!
//! A block covers [`QK`] = 32 values: value `j` (0..16) in the low nibble of `qs[j]`,
//! value `j + 16` in its high nibble, and the fifth bit of value `j` in bit `j` of the
//! little-endian `qh` word. Formulas follow ggml (`ggml-quants.c`
//! `dequantize_row_q5_0`, `arch/x86/quants.c` `ggml_vec_dot_q5_0_q8_0` and the Q5_1 ones).
//!
//! Must not know: packing, threads, models.

use half::f16;

use crate::blocks::{f16_at, Block, BlockQ8_0, BlockQ8_1, QK};
use crate::dot::{hsum8, lanes};
use crate::error::{check_len, KernelError};

/// `d * (q - 16)`, 5-bit (ggml `block_q5_0`, 22 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// `d * q + m`, 5-bit (ggml `block_q5_1`, 24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

impl Block for BlockQ5_0 {
    const BYTES: usize = 22;
    fn decode(b: &[u8]) -> Self {
        let mut out = Self {
            d: f16_at(b, 0),
            ..Self::default()
        };
        out.qh.copy_from_slice(&b[2..6]);
        out.qs.copy_from_slice(&b[6..22]);
        out
    }
}

impl Block for BlockQ5_1 {
    const BYTES: usize = 24;
    fn decode(b: &[u8]) -> Self {
        let mut out = Self {
            d: f16_at(b, 0),
            m: f16_at(b, 2),
            ..Self::default()
        };
        out.qh.copy_from_slice(&b[4..8]);
        out.qs.copy_from_slice(&b[8..24]);
        out
    }
}

/// Value `j` (0..32) of a 5-bit block, in `0..32`.
#[inline]
pub(crate) fn value5(qh: &[u8; 4], qs: &[u8; QK / 2], j: usize) -> i32 {
    let nib = if j < QK / 2 {
        qs[j] & 0x0F
    } else {
        qs[j - QK / 2] >> 4
    };
    let fifth = (u32::from_le_bytes(*qh) >> j) & 1;
    (nib as u32 | fifth << 4) as i32
}

fn check_dequant(blocks: usize, y: &[f32]) -> Result<(), KernelError> {
    check_len("dequantize output", blocks * QK, y.len())
}

/// ggml `dequantize_row_q5_0`: `y = (q - 16) * d`.
///
/// # Errors
/// [`KernelError::Length`] unless `y.len() == x.len() * 32`.
pub fn dequantize_row_q5_0(x: &[BlockQ5_0], y: &mut [f32]) -> Result<(), KernelError> {
    check_dequant(x.len(), y)?;
    for (b, out) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (j, o) in out.iter_mut().enumerate() {
            *o = (value5(&b.qh, &b.qs, j) - 16) as f32 * d;
        }
    }
    Ok(())
}

/// ggml `dequantize_row_q5_1`: `y = q * d + m`.
///
/// # Errors
/// [`KernelError::Length`] unless `y.len() == x.len() * 32`.
pub fn dequantize_row_q5_1(x: &[BlockQ5_1], y: &mut [f32]) -> Result<(), KernelError> {
    check_dequant(x.len(), y)?;
    for (b, out) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (j, o) in out.iter_mut().enumerate() {
            *o = value5(&b.qh, &b.qs, j) as f32 * d + m;
        }
    }
    Ok(())
}

/// ggml's x86 `ggml_vec_dot_q5_0_q8_0`, bit for bit: per block, 8 lanes of 4 values
/// accumulate `fma(dx * dy, lane_sum, acc)`, reduced in `hsum_float_8`'s order (as
/// [`crate::dot`]'s Q4_0 dot).
///
/// # Panics
/// If `x.len() != y.len()`.
pub fn vec_dot_q5_0_q8_0_ref(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_q5_0_q8_0: block counts differ");
    let mut acc = [0.0f32; 8];
    for (xb, yb) in x.iter().zip(y) {
        let d = xb.d.to_f32() * yb.d.to_f32();
        lanes(&mut acc, d, |j| {
            (value5(&xb.qh, &xb.qs, j) - 16) * yb.qs[j] as i32
        });
    }
    hsum8(&acc)
}

/// ggml's x86 `ggml_vec_dot_q5_1_q8_1`, bit for bit: the lanes as Q5_0's, plus
/// `summs = fma(m, s, summs)` block by block (the C compiler contracts `summs += m * s`).
///
/// # Panics
/// If `x.len() != y.len()`.
pub fn vec_dot_q5_1_q8_1_ref(x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_q5_1_q8_1: block counts differ");
    let mut acc = [0.0f32; 8];
    let mut summs = 0.0f32;
    for (xb, yb) in x.iter().zip(y) {
        summs = xb.m.to_f32().mul_add(yb.s.to_f32(), summs);
        let d = xb.d.to_f32() * yb.d.to_f32();
        lanes(&mut acc, d, |j| value5(&xb.qh, &xb.qs, j) * yb.qs[j] as i32);
    }
    hsum8(&acc) + summs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_take_their_fifth_bit_from_qh() {
        let mut b = BlockQ5_0 {
            d: f16::from_f32(1.0),
            qh: 0x8000_0001u32.to_le_bytes(),
            qs: [0; QK / 2],
        };
        b.qs[0] = 0x3F; // value 0: nibble 15 + 16; value 16: nibble 3
        b.qs[15] = 0xF0; // value 31: nibble 15 + 16
        let mut y = [0.0; QK];
        dequantize_row_q5_0(&[b], &mut y).unwrap();
        assert_eq!(y[0], 15.0); // 31 - 16
        assert_eq!(y[16], -13.0); // 3 - 16
        assert_eq!(y[31], 15.0);
        assert_eq!(y[1], -16.0);
    }

    #[test]
    fn decoding_reads_ggml_byte_order() {
        let bytes: Vec<u8> = (0..24u8).collect();
        let b = BlockQ5_1::decode(&bytes);
        assert_eq!(b.d.to_bits(), 0x0100);
        assert_eq!(b.m.to_bits(), 0x0302);
        assert_eq!(b.qh, [4, 5, 6, 7]);
        assert_eq!(b.qs[0], 8);
        let b = BlockQ5_0::decode(&bytes[..22]);
        assert_eq!(b.qh, [2, 3, 4, 5]);
        assert_eq!(b.qs[15], 21);
    }
}
