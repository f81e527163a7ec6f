//! ggml's quantised block layouts (Q4_0, Q4_1, Q8_0, Q8_1), their safe
//! decoding from GGUF bytes and the row dequantisers.
//!
//! Layouts and formulas follow ggml (`ggml/src/ggml-common.h` for the structs,
//! `ggml/src/ggml-quants.c` `dequantize_row_*` for the maths): a block covers
//! [`QK`] = 32 consecutive values; 4-bit blocks store value `j` (0..16) in the
//! low nibble of `qs[j]` and value `j + 16` in its high nibble.

use half::f16;

use crate::error::{check_len, check_multiple, KernelError};

/// Values per block, for every block type here.
pub const QK: usize = 32;

/// `d * (q - 8)`, 4-bit (ggml `block_q4_0`, 18 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}

/// `d * q + m`, 4-bit (ggml `block_q4_1`, 20 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}

/// `d * q`, 8-bit (ggml `block_q8_0`, 34 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}

/// `d * q` with `s = d * sum(q)`, 8-bit (ggml `block_q8_1`, 36 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ8_1 {
    pub d: f16,
    pub s: f16,
    pub qs: [i8; QK],
}

// SAFETY: an f16 and 32 i8, no padding (34 bytes, asserted below); all-zero bytes are
// the value 0 (scale 0). Lets a KV pool of q8_0 rows come from zeroed pages.
unsafe impl bytemuck::Zeroable for BlockQ8_0 {}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);

/// A ggml block that can be decoded from its little-endian on-disk bytes.
pub trait Block: Copy + Default {
    /// Bytes per block on disk (equal to `size_of::<Self>()`).
    const BYTES: usize;
    /// Decodes one block; `b.len() == Self::BYTES` is the caller's contract.
    fn decode(b: &[u8]) -> Self;
}

pub(crate) fn f16_at(b: &[u8], at: usize) -> f16 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]]))
}

pub(crate) fn i8s<const N: usize>(b: &[u8]) -> [i8; N] {
    std::array::from_fn(|i| b[i] as i8)
}

impl Block for BlockQ4_0 {
    const BYTES: usize = 18;
    fn decode(b: &[u8]) -> Self {
        let mut qs = [0u8; QK / 2];
        qs.copy_from_slice(&b[2..18]);
        Self {
            d: f16_at(b, 0),
            qs,
        }
    }
}

impl Block for BlockQ4_1 {
    const BYTES: usize = 20;
    fn decode(b: &[u8]) -> Self {
        let mut qs = [0u8; QK / 2];
        qs.copy_from_slice(&b[4..20]);
        Self {
            d: f16_at(b, 0),
            m: f16_at(b, 2),
            qs,
        }
    }
}

impl Block for BlockQ8_0 {
    const BYTES: usize = 34;
    fn decode(b: &[u8]) -> Self {
        Self {
            d: f16_at(b, 0),
            qs: i8s(&b[2..34]),
        }
    }
}

impl Block for BlockQ8_1 {
    const BYTES: usize = 36;
    fn decode(b: &[u8]) -> Self {
        Self {
            d: f16_at(b, 0),
            s: f16_at(b, 2),
            qs: i8s(&b[4..36]),
        }
    }
}

/// Copies GGUF tensor bytes into a vector of blocks (any alignment accepted).
///
/// # Errors
/// [`KernelError::NotMultiple`] when `bytes.len()` is not a whole number of blocks.
pub fn blocks_from_bytes<B: Block>(bytes: &[u8]) -> Result<Vec<B>, KernelError> {
    check_multiple("block bytes", bytes.len(), B::BYTES)?;
    Ok(bytes.chunks_exact(B::BYTES).map(B::decode).collect())
}

fn check_dequant(blocks: usize, y: &[f32]) -> Result<(), KernelError> {
    check_len("dequantize output", blocks * QK, y.len())
}

/// ggml `dequantize_row_q4_0`: `y = (q - 8) * d`.
///
/// # Errors
/// [`KernelError::Length`] unless `y.len() == x.len() * 32`.
pub fn dequantize_row_q4_0(x: &[BlockQ4_0], y: &mut [f32]) -> Result<(), KernelError> {
    check_dequant(x.len(), y)?;
    for (b, out) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (j, &q) in b.qs.iter().enumerate() {
            out[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
            out[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
    Ok(())
}

/// ggml `dequantize_row_q4_1`: `y = q * d + m`.
///
/// # Errors
/// [`KernelError::Length`] unless `y.len() == x.len() * 32`.
pub fn dequantize_row_q4_1(x: &[BlockQ4_1], y: &mut [f32]) -> Result<(), KernelError> {
    check_dequant(x.len(), y)?;
    for (b, out) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (j, &q) in b.qs.iter().enumerate() {
            out[j] = (q & 0x0F) as f32 * d + m;
            out[j + QK / 2] = (q >> 4) as f32 * d + m;
        }
    }
    Ok(())
}

/// ggml `dequantize_row_q8_0`: `y = q * d`.
///
/// # Errors
/// [`KernelError::Length`] unless `y.len() == x.len() * 32`.
pub fn dequantize_row_q8_0(x: &[BlockQ8_0], y: &mut [f32]) -> Result<(), KernelError> {
    check_dequant(x.len(), y)?;
    for (b, out) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (o, &q) in out.iter_mut().zip(b.qs.iter()) {
            *o = q as f32 * d;
        }
    }
    Ok(())
}

/// Dequantises Q8_1 (`y = q * d`; `s` is redundant and ignored).
///
/// # Errors
/// [`KernelError::Length`] unless `y.len() == x.len() * 32`.
pub fn dequantize_row_q8_1(x: &[BlockQ8_1], y: &mut [f32]) -> Result<(), KernelError> {
    check_dequant(x.len(), y)?;
    for (b, out) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (o, &q) in out.iter_mut().zip(b.qs.iter()) {
            *o = q as f32 * d;
        }
    }
    Ok(())
}
