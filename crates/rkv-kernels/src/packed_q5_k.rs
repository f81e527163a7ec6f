//! Q5_K weights eight rows to a block ([`BlockQ5_Kx8`]) and the per-output numerics
//! of their product with Q8_K activations (most layers of a Q5_K_M file).
//!
//! Layout: a packed Q4_K block ([`BlockQ4_Kx8`]: scales, mins and the low nibbles)
//! followed by `qh` interleaved the same way, four bytes per row, holding the fifth
//! bits (bit `j` for sub-block `j`).
//!
//! Numerics (scalar and SIMD paths, bit for bit), for weight row `r` and activation
//! row `t`, per super-block: `isum = sum_j sc_j * (q_j . y_j)` and `msum = sum_j m_j *
//! (bsum_2j + bsum_2j+1)`, both exact integers; then `acc = fma(d_r * d_t, isum, acc);
//! acc = fma(-(dmin_r * d_t), msum, acc)`. Outputs depend only on their row and token.
//! (ggml's AVX2 `vec_dot_q5_K_q8_K` sums in another order; the difference is rounding.)
//!
//! Must not know: threads, models.

use crate::blocks_k::{BlockQ4K, BlockQ5K, BlockQ8K, QK_K};
use crate::error::KernelError;
use crate::interleaved::{Interleaved, Packed, ROWS_X8};
use crate::packed_q4_k::BlockQ4_Kx8;

/// Block `b` of eight rows of Q5_K (1440 bytes, against 1408 for eight `block_q5_K`).
///
/// `qh[32 c + 4 i + n]` is byte `4 c + n` of row `i`'s `qh` (`c` in 0..8, `n` in 0..4).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_Kx8 {
    pub k4: BlockQ4_Kx8,              // the Q4_K part
    pub qh: [u8; ROWS_X8 * QK_K / 8], // [chunk 8, rows 8, bytes 4]
}

const _: () = assert!(std::mem::size_of::<BlockQ5_Kx8>() == 1440);

impl Default for BlockQ5_Kx8 {
    fn default() -> Self {
        Self {
            k4: BlockQ4_Kx8::default(),
            qh: [0; ROWS_X8 * QK_K / 8],
        }
    }
}

/// A Q5_K weight `[rows, nb * 256]`, packed eight rows to a block.
pub type PackedQ5K = Packed<BlockQ5_Kx8>;

impl Interleaved for BlockQ5_Kx8 {
    type Row = BlockQ5K;
    type Act = BlockQ8K;
    const NAME: &'static str = "packed q5_k";
    const VALUES: usize = QK_K;

    fn put(&mut self, i: usize, src: &BlockQ5K) {
        let k4 = BlockQ4K {
            d: src.d,
            dmin: src.dmin,
            scales: src.scales,
            qs: src.qs,
        };
        self.k4.put(i, &k4);
        for c in 0..8 {
            let at = 32 * c + 4 * i;
            self.qh[at..at + 4].copy_from_slice(&src.qh[4 * c..4 * c + 4]);
        }
    }

    fn get(&self, i: usize) -> BlockQ5K {
        let k4 = self.k4.get(i);
        BlockQ5K {
            d: k4.d,
            dmin: k4.dmin,
            scales: k4.scales,
            qh: std::array::from_fn(|p| self.qh[32 * (p / 4) + 4 * i + p % 4]),
            qs: k4.qs,
        }
    }

    fn dequantize(row: &[BlockQ5K], out: &mut [f32]) -> Result<(), KernelError> {
        crate::blocks_k::dequantize_row_q5_k(row, out)
    }

    fn dot_lane_ref(w: &[Self], i: usize, y: &[BlockQ8K]) -> f32 {
        w.iter().zip(y).fold(0.0, |acc, (wb, yb)| {
            let fifth = |j: usize, e: usize| (wb.qh[32 * (e / 4) + 4 * i + e % 4] >> j) & 1;
            wb.k4.add_lane(acc, i, yb, fifth)
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
}
