//! Q5_K weights eight rows to a block ([`BlockQ5_Kx8`]) and the per-output numerics
//! of their product with Q8_K activations (most layers of a Q5_K_M file).
//!
//! Layout: as a packed Q4_K block ([`crate::BlockQ4_Kx8`]: scales, mins and the low
//! nibbles) with `qh` interleaved the same way, four bytes per row, holding the fifth
//! bits (bit `j` for sub-block `j`); the fifth bits' chunks sit between the first
//! sub-block pair's, so that a kernel reads the block front to back.
//!
//! Numerics (scalar and SIMD paths, bit for bit), for weight row `r` and activation
//! row `t`, per super-block: `isum = sum_j sc_j * (q_j . y_j)` and `msum = sum_j m_j *
//! (bsum_2j + bsum_2j+1)`, both exact integers; then `acc = fma(d_r * d_t, isum, acc);
//! acc = fma(-(dmin_r * d_t), msum, acc)`. Outputs depend only on their row and token.
//! (ggml's AVX2 `vec_dot_q5_K_q8_K` sums in another order; the difference is rounding.)
//!
//! Must not know: threads, models.

use half::f16;

use crate::blocks_k::{BlockQ5K, BlockQ8K, QK_K};
use crate::error::KernelError;
use crate::interleaved::{Interleaved, Packed, ROWS_X8};
use crate::packed_q4_k::{
    add_lane_term, get_scales_mins, lane_sums, put_scales_mins, unpack_scales_mins,
};
use crate::wide::{Wide, WideBlock};

/// Block `b` of eight rows of Q5_K (1440 bytes, against 1408 for eight `block_q5_K`).
///
/// For sub-block pair `k` and chunk `c` (in 0..8), byte `n` (in 0..4) of row `i` sits
/// at `q[qs_at(k, c) + 4 i + n]` for `qs[32 k + 4 c + n]` and at `q[qh_at(c) + 4 i +
/// n]` for `qh[4 c + n]`: the first pair's chunks alternate with the fifth bits'
/// chunks (a kernel reads them together, then re-reads `qh` from cache for the other
/// pairs), the other pairs follow as in [`crate::BlockQ4_Kx8`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_Kx8 {
    pub d: [f16; ROWS_X8],     // [rows]
    pub dmin: [f16; ROWS_X8],  // [rows]
    pub sc: [u8; 8 * ROWS_X8], // [sub-block 8, rows 8]
    pub mn: [u8; 8 * ROWS_X8], // [sub-block 8, rows 8]
    pub q: [u8; Q_BYTES],      // [chunk 8, (qs of pair 0, qh)] then [pair 3, chunk 8] of qs
}

/// Bytes of quants in a [`BlockQ5_Kx8`]: eight rows' `qs` and `qh`.
pub const Q_BYTES: usize = ROWS_X8 * (QK_K / 2 + QK_K / 8);

const _: () = assert!(std::mem::size_of::<BlockQ5_Kx8>() == 1440);

/// Where the 32 bytes of `qs` for sub-block pair `k`, chunk `c` start in
/// [`BlockQ5_Kx8::q`].
pub(crate) const fn qs_at(k: usize, c: usize) -> usize {
    if k == 0 {
        64 * c
    } else {
        512 + 256 * (k - 1) + 32 * c
    }
}

/// Where the 32 bytes of `qh` for chunk `c` start in [`BlockQ5_Kx8::q`].
pub(crate) const fn qh_at(c: usize) -> usize {
    64 * c + 32
}

impl Default for BlockQ5_Kx8 {
    fn default() -> Self {
        Self {
            d: [f16::ZERO; ROWS_X8],
            dmin: [f16::ZERO; ROWS_X8],
            sc: [0; 8 * ROWS_X8],
            mn: [0; 8 * ROWS_X8],
            q: [0; Q_BYTES],
        }
    }
}

/// A Q5_K weight `[rows, nb * 256]`, packed eight rows to a block.
pub type PackedQ5K = Packed<BlockQ5_Kx8>;

impl BlockQ5_Kx8 {
    /// Value `e` (0..32) of sub-block `j` of lane `i`: nibble and fifth bit.
    fn quant(&self, i: usize, j: usize, e: usize) -> u8 {
        let (c, n) = (e / 4, e % 4);
        let byte = self.q[qs_at(j / 2, c) + 4 * i + n];
        let low = if j % 2 == 1 { byte >> 4 } else { byte & 0xF };
        low | (((self.q[qh_at(c) + 4 * i + n] >> j) & 1) << 4)
    }
}

impl Interleaved for BlockQ5_Kx8 {
    type Row = BlockQ5K;
    type Act = BlockQ8K;
    const NAME: &'static str = "packed q5_k";
    const VALUES: usize = QK_K;

    fn put(&mut self, i: usize, src: &BlockQ5K) {
        self.d[i] = src.d;
        self.dmin[i] = src.dmin;
        put_scales_mins(&mut self.sc, &mut self.mn, i, &src.scales);
        for c in 0..8 {
            for k in 0..4 {
                let at = qs_at(k, c) + 4 * i;
                self.q[at..at + 4].copy_from_slice(&src.qs[32 * k + 4 * c..32 * k + 4 * c + 4]);
            }
            let at = qh_at(c) + 4 * i;
            self.q[at..at + 4].copy_from_slice(&src.qh[4 * c..4 * c + 4]);
        }
    }

    fn get(&self, i: usize) -> BlockQ5K {
        let (mut qs, mut qh) = ([0u8; QK_K / 2], [0u8; QK_K / 8]);
        for c in 0..8 {
            for k in 0..4 {
                let at = qs_at(k, c) + 4 * i;
                qs[32 * k + 4 * c..32 * k + 4 * c + 4].copy_from_slice(&self.q[at..at + 4]);
            }
            let at = qh_at(c) + 4 * i;
            qh[4 * c..4 * c + 4].copy_from_slice(&self.q[at..at + 4]);
        }
        BlockQ5K {
            d: self.d[i],
            dmin: self.dmin[i],
            scales: get_scales_mins(&self.sc, &self.mn, i),
            qh,
            qs,
        }
    }

    fn dequantize(row: &[BlockQ5K], out: &mut [f32]) -> Result<(), KernelError> {
        crate::blocks_k::dequantize_row_q5_k(row, out)
    }

    fn dot_lane_ref(w: &[Self], i: usize, y: &[BlockQ8K]) -> f32 {
        w.iter().zip(y).fold(0.0, |acc, (wb, yb)| {
            let sums = lane_sums(&wb.sc, &wb.mn, i, yb, |j, e| wb.quant(i, j, e));
            add_lane_term(acc, wb.d[i], wb.dmin[i], sums, yb)
        })
    }

    fn tile<const T: usize>(w: &[Self], ys: &[&[BlockQ8K]; T], out: &mut [[f32; ROWS_X8]; T]) {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx2() {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx2_k::q5_kx8_tile::<T>(w, ys, out) };
        }
        crate::interleaved::tile_ref(w, ys, out)
    }

    fn product_many(w: &Packed<Self>, x: &[BlockQ8K], n: usize, out: &mut [f32]) -> bool {
        crate::wide::product(w, x, n, out)
    }
}

impl Wide for BlockQ5_Kx8 {
    const SUB: usize = 32;
    const MINS: bool = true;

    fn unpack(&self, out: &mut WideBlock) {
        for j in 0..8 {
            for c in 0..8 {
                let piece = |at: usize| -> &[u8; 32] {
                    self.q[at..at + 32].try_into().expect("32-byte pieces")
                };
                let (qs, qh) = (piece(qs_at(j / 2, c)), piece(qh_at(c)));
                let shift = 4 * (j as u32 % 2);
                let line = &mut out.q[8 * j + c];
                for i in 0..32 {
                    line[i] = (qs[i] >> shift) & 0xF | ((qh[i] >> j) & 1) << 4;
                }
            }
        }
        unpack_scales_mins(&self.sc, &self.mn, &self.d, &self.dmin, out);
    }
}
