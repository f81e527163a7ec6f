//! Q6_K weights eight rows to a block ([`BlockQ6_Kx8`]) and the per-output numerics
//! of their product with Q8_K activations (the output head and, in some layers,
//! `attn_v` and `ffn_down` of a Q4_K_M file).
//!
//! Layout: the eight rows' `d`, their sixteen signed scales (`[sub-block 16][rows
//! 8]`), and the quants as one stream of 96-byte chunks, each four values of each row
//! for all four parts: two 32-byte pieces of `ql` (the low nibbles of two parts each)
//! and one of `qh` (the high bits of all four), so that a kernel reads the block front
//! to back (ggml's `block_q6_K` split, no bytes added).
//!
//! Numerics (scalar and SIMD paths, bit for bit), for weight row `r` and activation
//! row `t`, per super-block: `isum = sum_v sc_(v/16) * q_v * y_v` and
//! `osum = sum_j sc_j * bsum_j`, exact integers, and
//! `acc = fma(d_r * d_t, isum - 32 osum, acc)` (the quants' offset of 32 applied
//! through the activation's block sums, as ggml does). Outputs depend only on their
//! row and token.
//!
//! Must not know: threads, models.

use half::f16;

use crate::blocks_k::{BlockQ6K, BlockQ8K, QK_K};
use crate::error::KernelError;
use crate::interleaved::{Interleaved, Packed, ROWS_X8};
use crate::wide::{i16_pair, Wide, WideBlock};

/// Block `b` of eight rows of Q6_K (1680 bytes, as eight `block_q6_K`).
///
/// `q[96 (8 n + c) + 32 h + 4 i + k]` is `ql[64 n + 32 h + 4 c + k]` of row `i`, and
/// `q[96 (8 n + c) + 64 + 4 i + k]` is `qh[32 n + 4 c + k]` of row `i` (`n`, `h` in
/// 0..2, `c` in 0..8, `k` in 0..4).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ6_Kx8 {
    pub d: [f16; ROWS_X8],      // [rows]
    pub sc: [i8; 16 * ROWS_X8], // [sub-block 16, rows 8]
    pub q: [u8; Q_BYTES],       // [half 2, chunk 8, piece 3 (ql, ql, qh), rows 8, bytes 4]
}

/// Bytes of quants in a [`BlockQ6_Kx8`]: eight rows' `ql` and `qh`.
pub const Q_BYTES: usize = ROWS_X8 * (QK_K / 2 + QK_K / 4);

/// Where the 96-byte chunk `c` of half `n` starts in [`BlockQ6_Kx8::q`].
pub(crate) const fn chunk_at(n: usize, c: usize) -> usize {
    96 * (8 * n + c)
}

const _: () = assert!(std::mem::size_of::<BlockQ6_Kx8>() == 1680);

impl Default for BlockQ6_Kx8 {
    fn default() -> Self {
        Self {
            d: [f16::ZERO; ROWS_X8],
            sc: [0; 16 * ROWS_X8],
            q: [0; Q_BYTES],
        }
    }
}

/// A Q6_K weight `[rows, nb * 256]`, packed eight rows to a block.
pub type PackedQ6K = Packed<BlockQ6_Kx8>;

/// Where byte `p` of a row's `ql` (0..128) goes for lane `i`.
fn ql_at(p: usize, i: usize) -> usize {
    let (n, h, l) = (p / 64, (p % 64) / 32, p % 32);
    chunk_at(n, l / 4) + 32 * h + 4 * i + l % 4
}

/// Where byte `p` of a row's `qh` (0..64) goes for lane `i`.
fn qh_at(p: usize, i: usize) -> usize {
    let (n, l) = (p / 32, p % 32);
    chunk_at(n, l / 4) + 64 + 4 * i + l % 4
}

impl BlockQ6_Kx8 {
    /// The row block of lane `i` (cheap enough for the scalar oracle).
    fn lane(&self, i: usize) -> BlockQ6K {
        BlockQ6K {
            ql: std::array::from_fn(|p| self.q[ql_at(p, i)]),
            qh: std::array::from_fn(|p| self.q[qh_at(p, i)]),
            scales: std::array::from_fn(|j| self.sc[8 * j + i]),
            d: self.d[i],
        }
    }
}

impl Interleaved for BlockQ6_Kx8 {
    type Row = BlockQ6K;
    type Act = BlockQ8K;
    const NAME: &'static str = "packed q6_k";
    const VALUES: usize = QK_K;

    fn put(&mut self, i: usize, src: &BlockQ6K) {
        self.d[i] = src.d;
        for (j, &s) in src.scales.iter().enumerate() {
            self.sc[8 * j + i] = s;
        }
        for (p, &b) in src.ql.iter().enumerate() {
            self.q[ql_at(p, i)] = b;
        }
        for (p, &b) in src.qh.iter().enumerate() {
            self.q[qh_at(p, i)] = b;
        }
    }

    fn get(&self, i: usize) -> BlockQ6K {
        self.lane(i)
    }

    fn dequantize(row: &[BlockQ6K], out: &mut [f32]) -> Result<(), KernelError> {
        crate::blocks_k::dequantize_row_q6_k(row, out)
    }

    fn dot_lane_ref(w: &[Self], i: usize, y: &[BlockQ8K]) -> f32 {
        let mut acc = 0.0f32;
        for (wb, yb) in w.iter().zip(y) {
            let b = wb.lane(i);
            let isum: i32 = (0..QK_K)
                .map(|v| b.scales[v / 16] as i32 * b.quant(v) as i32 * yb.qs[v] as i32)
                .sum();
            let osum: i32 = (0..16)
                .map(|j| b.scales[j] as i32 * yb.bsums[j] as i32)
                .sum();
            acc = (wb.d[i].to_f32() * yb.d).mul_add((isum - 32 * osum) as f32, acc);
        }
        acc
    }

    fn token_tile() -> usize {
        if crate::simd::avx512() {
            crate::gemm::MAX_TOKEN_TILE
        } else {
            crate::gemm::TOKEN_TILE
        }
    }

    fn tile<const T: usize>(w: &[Self], ys: &[&[BlockQ8K]; T], out: &mut [[f32; ROWS_X8]; T]) {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx512() && (T > 1 || crate::simd::avx512_for_one_token()) {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx512_k::q6_kx8_tile::<T>(w, ys, out) };
        }
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx2() {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx2_k::q6_kx8_tile::<T>(w, ys, out) };
        }
        crate::interleaved::tile_ref(w, ys, out)
    }

    fn product_many(w: &Packed<Self>, x: &[BlockQ8K], n: usize, out: &mut [f32]) -> bool {
        crate::wide::product(w, x, n, out)
    }
}

impl Wide for BlockQ6_Kx8 {
    const SUB: usize = 16;
    const MINS: bool = false;
    /// The eight-token tile beat this path at 8 tokens (24.0 against 26.7 ms), about
    /// matched it at 16 (39.9 against 38.5): criterion `kquant_t2`, 151936 x 1536, Xeon.
    const MIN_TOKENS: usize = 16;

    fn unpack(&self, out: &mut WideBlock) {
        // Chunk `c` of half `n` holds values `128 n + 32 p + 4 c .. + 4` of part `p`.
        for n in 0..2 {
            for c in 0..8 {
                let at = chunk_at(n, c);
                let piece = |o: usize| -> &[u8; 32] {
                    self.q[at + o..at + o + 32]
                        .try_into()
                        .expect("32-byte pieces")
                };
                let (l0, l1, h) = (piece(0), piece(32), piece(64));
                let six = |low: &[u8; 32], shift: u32, p: u32| {
                    let mut line = [0u8; 32];
                    for i in 0..32 {
                        line[i] = (low[i] >> shift) & 0xF | ((h[i] >> (2 * p)) & 3) << 4;
                    }
                    line
                };
                out.q[32 * n + c] = six(l0, 0, 0);
                out.q[32 * n + 8 + c] = six(l1, 0, 1);
                out.q[32 * n + 16 + c] = six(l0, 4, 2);
                out.q[32 * n + 24 + c] = six(l1, 4, 3);
            }
        }
        for j in 0..16 {
            for r in 0..ROWS_X8 {
                out.sc[j][r] = self.sc[8 * j + r] as i32;
            }
        }
        for p in 0..8 {
            for r in 0..ROWS_X8 {
                let (lo, hi) = (self.sc[8 * 2 * p + r], self.sc[8 * (2 * p + 1) + r]);
                out.pairs[p][r] = i16_pair(lo as i16, hi as i16);
            }
        }
        out.d = self.d.map(f16::to_f32);
        out.dmin = [0.0; ROWS_X8];
    }
}
