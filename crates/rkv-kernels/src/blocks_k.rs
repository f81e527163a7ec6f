//! ggml's K-quant super-blocks of 256 values that rkv runs with its own kernels
//! (Q4_K, Q5_K, Q6_K, and Q8_K for the activations), their decoding from GGUF bytes, the row
//! dequantiser and the activation quantiser.
//!
//! Layouts and formulas follow ggml (`ggml-common.h` `block_q4_K` / `block_q8_K`,
//! `ggml-quants.c` `dequantize_row_q4_K` and `quantize_row_q8_K_ref`, which is also
//! what ggml's x86 build runs for Q8_K). A Q4_K super-block holds eight sub-blocks of
//! 32 values, each with a 6-bit scale and a 6-bit min packed into `scales` (12
//! bytes); value `e` of sub-block `2 k` is the low nibble of `qs[32 k + e]`, of
//! sub-block `2 k + 1` its high nibble; `w = d * sc * q - dmin * m`.
//!
//! Must not know: models, threads.

use half::f16;

use crate::blocks::{f16_at, i8s, Block};
use crate::error::{check_len, check_multiple, KernelError};

/// Values per K-quant super-block.
pub const QK_K: usize = 256;

/// ggml `block_q4_K` (144 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}

impl Default for BlockQ4K {
    fn default() -> Self {
        Self {
            d: f16::ZERO,
            dmin: f16::ZERO,
            scales: [0; 12],
            qs: [0; QK_K / 2],
        }
    }
}

/// ggml `block_q5_K` (176 bytes): Q4_K's layout plus a fifth bit per value, bit
/// `2 k` (sub-block `2 k`) or `2 k + 1` (sub-block `2 k + 1`) of `qh[e]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

impl Default for BlockQ5K {
    fn default() -> Self {
        Self {
            d: f16::ZERO,
            dmin: f16::ZERO,
            scales: [0; 12],
            qh: [0; QK_K / 8],
            qs: [0; QK_K / 2],
        }
    }
}

/// The 4-bit nibble of value `e` (0..32) of sub-block `j` (0..8) in a Q4_K or Q5_K `qs`.
fn nibble_k4(qs: &[u8; QK_K / 2], j: usize, e: usize) -> u8 {
    let byte = qs[32 * (j / 2) + e];
    if j.is_multiple_of(2) {
        byte & 0xF
    } else {
        byte >> 4
    }
}

impl BlockQ4K {
    /// The 4-bit quant (0..16) of value `e` (0..32) of sub-block `j` (0..8).
    pub fn quant(&self, j: usize, e: usize) -> u8 {
        nibble_k4(&self.qs, j, e)
    }
}

impl BlockQ5K {
    /// The 5-bit quant (0..32) of value `e` (0..32) of sub-block `j` (0..8).
    pub fn quant(&self, j: usize, e: usize) -> u8 {
        nibble_k4(&self.qs, j, e) | (((self.qh[e] >> j) & 1) << 4)
    }
}

/// ggml `block_q6_K` (210 bytes): value `v` of half `n` (0..2) at `l` (0..32) and part
/// `p` (0..4), `v = 128 n + 32 p + l`, is the low (`p` 0, 1) or high (`p` 2, 3) nibble
/// of `ql[64 n + 32 (p % 2) + l]` with bits `2 p, 2 p + 1` of `qh[32 n + l]` above it;
/// `w = d * scales[v / 16] * (q - 32)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}

impl Default for BlockQ6K {
    fn default() -> Self {
        Self {
            ql: [0; QK_K / 2],
            qh: [0; QK_K / 4],
            scales: [0; QK_K / 16],
            d: f16::ZERO,
        }
    }
}

impl BlockQ6K {
    /// The 6-bit quant (0..64) of value `v`.
    pub fn quant(&self, v: usize) -> u8 {
        let (n, p, l) = (v / 128, (v % 128) / 32, v % 32);
        let low = self.ql[64 * n + 32 * (p % 2) + l];
        let low = if p < 2 { low & 0xF } else { low >> 4 };
        let high = (self.qh[32 * n + l] >> (2 * p)) & 3;
        low | (high << 4)
    }
}

/// ggml `block_q8_K` (292 bytes): `x = d * q`, `bsums[g]` the sum of values
/// `16 g .. 16 g + 16`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

impl Default for BlockQ8K {
    fn default() -> Self {
        Self {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / 16],
        }
    }
}

impl Block for BlockQ4K {
    const BYTES: usize = 144;
    fn decode(b: &[u8]) -> Self {
        let mut scales = [0u8; 12];
        scales.copy_from_slice(&b[4..16]);
        let mut qs = [0u8; QK_K / 2];
        qs.copy_from_slice(&b[16..144]);
        Self {
            d: f16_at(b, 0),
            dmin: f16_at(b, 2),
            scales,
            qs,
        }
    }
}

impl Block for BlockQ5K {
    const BYTES: usize = 176;
    fn decode(b: &[u8]) -> Self {
        let mut scales = [0u8; 12];
        scales.copy_from_slice(&b[4..16]);
        let mut qh = [0u8; QK_K / 8];
        qh.copy_from_slice(&b[16..48]);
        let mut qs = [0u8; QK_K / 2];
        qs.copy_from_slice(&b[48..176]);
        Self {
            d: f16_at(b, 0),
            dmin: f16_at(b, 2),
            scales,
            qh,
            qs,
        }
    }
}

const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

impl Block for BlockQ6K {
    const BYTES: usize = 210;
    fn decode(b: &[u8]) -> Self {
        let mut ql = [0u8; QK_K / 2];
        ql.copy_from_slice(&b[0..128]);
        let mut qh = [0u8; QK_K / 4];
        qh.copy_from_slice(&b[128..192]);
        Self {
            ql,
            qh,
            scales: i8s(&b[192..208]),
            d: f16_at(b, 208),
        }
    }
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

impl Block for BlockQ8K {
    const BYTES: usize = 292;
    fn decode(b: &[u8]) -> Self {
        let mut bsums = [0i16; QK_K / 16];
        for (g, s) in bsums.iter_mut().enumerate() {
            *s = i16::from_le_bytes([b[260 + 2 * g], b[261 + 2 * g]]);
        }
        Self {
            d: f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            qs: i8s(&b[4..260]),
            bsums,
        }
    }
}

/// Scale and min of sub-block `j` (ggml `get_scale_min_k4`).
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 12-byte packing of eight 6-bit scales and mins (inverse of [`scale_min_k4`]).
pub fn pack_scale_min_k4(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..4 {
        q[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        q[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
        q[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
    q
}

/// ggml `dequantize_row_q4_K`.
///
/// # Errors
/// [`KernelError::Length`] unless `y.len() == x.len() * 256`.
pub fn dequantize_row_q4_k(x: &[BlockQ4K], y: &mut [f32]) -> Result<(), KernelError> {
    check_len("dequantize q4_k output", x.len() * QK_K, y.len())?;
    for (b, out) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
        for k in 0..4 {
            let (sc0, m0) = scale_min_k4(2 * k, &b.scales);
            let (sc1, m1) = scale_min_k4(2 * k + 1, &b.scales);
            let (d0, n0) = (d * sc0 as f32, dmin * m0 as f32);
            let (d1, n1) = (d * sc1 as f32, dmin * m1 as f32);
            for e in 0..32 {
                let q = b.qs[32 * k + e];
                out[64 * k + e] = d0 * (q & 0xF) as f32 - n0;
                out[64 * k + 32 + e] = d1 * (q >> 4) as f32 - n1;
            }
        }
    }
    Ok(())
}

/// ggml `dequantize_row_q5_K`.
///
/// # Errors
/// [`KernelError::Length`] unless `y.len() == x.len() * 256`.
pub fn dequantize_row_q5_k(x: &[BlockQ5K], y: &mut [f32]) -> Result<(), KernelError> {
    check_len("dequantize q5_k output", x.len() * QK_K, y.len())?;
    for (b, out) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &b.scales);
            let (dj, mj) = (d * sc as f32, dmin * m as f32);
            for e in 0..32 {
                out[32 * j + e] = dj * b.quant(j, e) as f32 - mj;
            }
        }
    }
    Ok(())
}

/// ggml `dequantize_row_q6_K`.
///
/// # Errors
/// [`KernelError::Length`] unless `y.len() == x.len() * 256`.
pub fn dequantize_row_q6_k(x: &[BlockQ6K], y: &mut [f32]) -> Result<(), KernelError> {
    check_len("dequantize q6_k output", x.len() * QK_K, y.len())?;
    for (b, out) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (v, o) in out.iter_mut().enumerate() {
            *o = d * b.scales[v / 16] as f32 * (b.quant(v) as i32 - 32) as f32;
        }
    }
    Ok(())
}

/// ggml's `nearest_int`: round to nearest, ties to even (for |v| < 2^22).
fn nearest_int(v: f32) -> i32 {
    v.round_ties_even() as i32
}

/// Whole blocks of input, one output block for each.
fn check_q8_k_shapes(x: &[f32], y: &[BlockQ8K]) -> Result<(), KernelError> {
    check_multiple("quantize q8_k input", x.len(), QK_K)?;
    check_len("quantize q8_k output blocks", x.len() / QK_K, y.len())
}

/// ggml `quantize_row_q8_K_ref`: per super-block, `iscale = -127 / max` where `max`
/// is the value of largest magnitude (the first one on ties), `q = min(127,
/// nearest_int(iscale * x))`, `d = 1 / iscale`, and the sums of each 16 quants.
///
/// # Errors
/// When `x.len() % 256 != 0` or `y.len() != x.len() / 256`.
pub fn quantize_row_q8_k_ref(x: &[f32], y: &mut [BlockQ8K]) -> Result<(), KernelError> {
    check_q8_k_shapes(x, y)?;
    for (b, xb) in y.iter_mut().zip(x.chunks_exact(QK_K)) {
        let (mut max, mut amax) = (0.0f32, 0.0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *b = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (g, s) in b.bsums.iter_mut().enumerate() {
            *s = b.qs[16 * g..16 * g + 16].iter().map(|&q| q as i16).sum();
        }
        b.d = 1.0 / iscale;
    }
    Ok(())
}

/// [`quantize_row_q8_k_ref`] on the SIMD path where the CPU has AVX2 (bit for bit the
/// same on finite input; see `quantize_k_avx2.rs`).
///
/// # Errors
/// When `x.len() % 256 != 0` or `y.len() != x.len() / 256`.
pub fn quantize_row_q8_k(x: &[f32], y: &mut [BlockQ8K]) -> Result<(), KernelError> {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::avx2() {
        check_q8_k_shapes(x, y)?;
        for (b, xb) in y.iter_mut().zip(x.chunks_exact(QK_K)) {
            let xb: &[f32; QK_K] = xb.try_into().expect("chunks of QK_K");
            // SAFETY: the CPU has the kernel's target features (checked above).
            unsafe { crate::quantize_k_avx2::quantize_block(xb, b) };
        }
        return Ok(());
    }
    quantize_row_q8_k_ref(x, y)
}
