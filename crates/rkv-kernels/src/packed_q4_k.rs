//! Q4_K weights eight rows to a block ([`BlockQ4_Kx8`]) and the per-output numerics
//! of their product with Q8_K activations (most layers of a Q4_K_M file).
//!
//! Layout: the eight rows' `d` and `dmin`, their scales and mins unpacked to one byte
//! each (`[sub-block 8][rows 8]`, so a kernel loads a sub-block's eight scales at
//! once), and the quants interleaved four bytes at a time per pair of sub-blocks:
//! one 32-byte load holds four values of each of the eight rows for sub-block `2 k`
//! (low nibbles) and `2 k + 1` (high nibbles).
//!
//! Numerics (scalar and SIMD paths, bit for bit), for weight row `r` and activation
//! row `t`, per super-block: `isum = sum_j sc_j * (q_j . y_j)` and `msum = sum_j m_j *
//! (bsum_2j + bsum_2j+1)`, both exact integers; then `acc = fma(d_r * d_t, isum, acc);
//! acc = fma(-(dmin_r * d_t), msum, acc)`. Outputs depend only on their row and token.
//! (ggml's AVX2 `vec_dot_q4_K_q8_K` sums in another order; the difference is rounding.)
//!
//! Must not know: threads, models.

use half::f16;

use crate::blocks_k::{pack_scale_min_k4, scale_min_k4, BlockQ4K, BlockQ8K, QK_K};
use crate::error::KernelError;
use crate::interleaved::{Interleaved, Packed, ROWS_X8};
use crate::wide::{i16_pair, Wide, WideBlock};

/// Block `b` of eight rows of Q4_K (1184 bytes, against 1152 for eight `block_q4_K`).
///
/// `qs[256 k + 32 c + 4 i + n]` is byte `32 k + 4 c + n` of row `i`'s `qs` (`k` in
/// 0..4 the sub-block pair, `c` in 0..8, `n` in 0..4).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4_Kx8 {
    pub d: [f16; ROWS_X8],            // [rows]
    pub dmin: [f16; ROWS_X8],         // [rows]
    pub sc: [u8; 8 * ROWS_X8],        // [sub-block 8, rows 8]
    pub mn: [u8; 8 * ROWS_X8],        // [sub-block 8, rows 8]
    pub qs: [u8; ROWS_X8 * QK_K / 2], // [pair 4, chunk 8, rows 8, bytes 4]
}

const _: () = assert!(std::mem::size_of::<BlockQ4_Kx8>() == 1184);

impl Default for BlockQ4_Kx8 {
    fn default() -> Self {
        Self {
            d: [f16::ZERO; ROWS_X8],
            dmin: [f16::ZERO; ROWS_X8],
            sc: [0; 8 * ROWS_X8],
            mn: [0; 8 * ROWS_X8],
            qs: [0; ROWS_X8 * QK_K / 2],
        }
    }
}

/// A Q4_K weight `[rows, nb * 256]`, packed eight rows to a block.
pub type PackedQ4K = Packed<BlockQ4_Kx8>;

/// Exact integer sums `(isum, msum)` of lane `i`'s super-block against `y`, given the
/// block's unpacked scales and mins (`sc[8 j + i]`, `mn[8 j + i]` for sub-block `j`) and
/// `quant(j, e)`, value `e` of sub-block `j` (Q4_K's nibble, or Q5_K's nibble with its
/// fifth bit).
pub(crate) fn lane_sums(
    sc: &[u8; 64],
    mn: &[u8; 64],
    i: usize,
    y: &BlockQ8K,
    quant: impl Fn(usize, usize) -> u8,
) -> (i32, i32) {
    let (mut isum, mut msum) = (0i32, 0i32);
    for j in 0..8 {
        let s: i32 = (0..32)
            .map(|e| quant(j, e) as i32 * y.qs[32 * j + e] as i32)
            .sum();
        isum += sc[8 * j + i] as i32 * s;
        let bs = y.bsums[2 * j] as i32 + y.bsums[2 * j + 1] as i32;
        msum += mn[8 * j + i] as i32 * bs;
    }
    (isum, msum)
}

/// Stores lane `i`'s eight scales and mins, unpacked from ggml's 12 bytes, at
/// `sc[8 j + i]` and `mn[8 j + i]` (Q4_K's and Q5_K's layout).
pub(crate) fn put_scales_mins(sc: &mut [u8; 64], mn: &mut [u8; 64], i: usize, scales: &[u8; 12]) {
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, scales);
        sc[8 * j + i] = s;
        mn[8 * j + i] = m;
    }
}

/// Lane `i`'s scales and mins packed back into ggml's 12 bytes (inverse of
/// [`put_scales_mins`]).
pub(crate) fn get_scales_mins(sc: &[u8; 64], mn: &[u8; 64], i: usize) -> [u8; 12] {
    let s: [u8; 8] = std::array::from_fn(|j| sc[8 * j + i]);
    let m: [u8; 8] = std::array::from_fn(|j| mn[8 * j + i]);
    pack_scale_min_k4(&s, &m)
}

/// `acc` plus one lane's super-block term, `(isum, msum)` from [`lane_sums`], in the
/// module's numerics.
pub(crate) fn add_lane_term(acc: f32, d: f16, dmin: f16, sums: (i32, i32), y: &BlockQ8K) -> f32 {
    let acc = (d.to_f32() * y.d).mul_add(sums.0 as f32, acc);
    (-(dmin.to_f32() * y.d)).mul_add(sums.1 as f32, acc)
}

impl Interleaved for BlockQ4_Kx8 {
    type Row = BlockQ4K;
    type Act = BlockQ8K;
    const NAME: &'static str = "packed q4_k";
    const VALUES: usize = QK_K;

    fn put(&mut self, i: usize, src: &BlockQ4K) {
        self.d[i] = src.d;
        self.dmin[i] = src.dmin;
        put_scales_mins(&mut self.sc, &mut self.mn, i, &src.scales);
        for k in 0..4 {
            for c in 0..8 {
                let at = 256 * k + 32 * c + 4 * i;
                self.qs[at..at + 4].copy_from_slice(&src.qs[32 * k + 4 * c..32 * k + 4 * c + 4]);
            }
        }
    }

    fn get(&self, i: usize) -> BlockQ4K {
        let mut qs = [0u8; QK_K / 2];
        for k in 0..4 {
            for c in 0..8 {
                let at = 256 * k + 32 * c + 4 * i;
                qs[32 * k + 4 * c..32 * k + 4 * c + 4].copy_from_slice(&self.qs[at..at + 4]);
            }
        }
        BlockQ4K {
            d: self.d[i],
            dmin: self.dmin[i],
            scales: get_scales_mins(&self.sc, &self.mn, i),
            qs,
        }
    }

    fn dequantize(row: &[BlockQ4K], out: &mut [f32]) -> Result<(), KernelError> {
        crate::blocks_k::dequantize_row_q4_k(row, out)
    }

    fn dot_lane_ref(w: &[Self], i: usize, y: &[BlockQ8K]) -> f32 {
        w.iter().zip(y).fold(0.0, |acc, (wb, yb)| {
            let quant = |j: usize, e: usize| {
                let byte = wb.qs[256 * (j / 2) + 32 * (e / 4) + 4 * i + e % 4];
                if j % 2 == 1 {
                    byte >> 4
                } else {
                    byte & 0xF
                }
            };
            let sums = lane_sums(&wb.sc, &wb.mn, i, yb, quant);
            add_lane_term(acc, wb.d[i], wb.dmin[i], sums, yb)
        })
    }

    fn token_tile() -> usize {
        if crate::simd::avx512_vnni_bw() {
            crate::gemm::MAX_TOKEN_TILE
        } else {
            crate::gemm::TOKEN_TILE
        }
    }

    fn tile<const T: usize>(w: &[Self], ys: &[&[BlockQ8K]; T], out: &mut [[f32; ROWS_X8]; T]) {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx512_vnni_bw() && (T > 1 || crate::simd::avx512_for_one_token()) {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx512_k::q4_kx8_tile_vnni::<T>(w, ys, out) };
        }
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx512() && (T > 1 || crate::simd::avx512_for_one_token()) {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx512_k::q4_kx8_tile::<T>(w, ys, out) };
        }
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx2() {
            // SAFETY: the CPU has the kernel's target features (checked above).
            return unsafe { crate::gemm_avx2_k::q4_kx8_tile::<T>(w, ys, out) };
        }
        crate::interleaved::tile_ref(w, ys, out)
    }

    fn product_many(w: &Packed<Self>, x: &[BlockQ8K], n: usize, out: &mut [f32]) -> bool {
        crate::wide::product(w, x, n, out)
    }
}

/// Scales and mins (shared with Q5_K) and `d`, `dmin` of a block into `out`; the
/// values are the format's.
pub(crate) fn unpack_scales_mins(
    sc: &[u8; 64],
    mn: &[u8; 64],
    d: &[f16; ROWS_X8],
    dmin: &[f16; ROWS_X8],
    out: &mut WideBlock,
) {
    for j in 0..8 {
        for r in 0..ROWS_X8 {
            out.sc[j][r] = sc[8 * j + r] as i32;
            let m = mn[8 * j + r] as i16;
            out.pairs[j][r] = i16_pair(m, m);
        }
    }
    out.d = d.map(f16::to_f32);
    out.dmin = dmin.map(f16::to_f32);
}

impl Wide for BlockQ4_Kx8 {
    const SUB: usize = 32;
    const MINS: bool = true;
    /// The VNNI tile of eight tokens beat this path at 16 tokens (30.7 against 33.3 ms),
    /// lost at 32 (66.6 against 50.3): criterion `kquant_t2`, 151936 x 1536, Xeon.
    const MIN_TOKENS: usize = 24;

    fn unpack(&self, out: &mut WideBlock) {
        // Sub-block 2 k's values are chunk `c`'s low nibbles, 2 k + 1's its high ones.
        for (k, pair) in self.qs.chunks_exact(256).enumerate() {
            for (c, chunk) in pair.chunks_exact(32).enumerate() {
                let (lo, hi) = out.q.split_at_mut(16 * k + 8);
                let (lo, hi) = (&mut lo[16 * k + c], &mut hi[c]);
                for i in 0..32 {
                    lo[i] = chunk[i] & 0xF;
                    hi[i] = chunk[i] >> 4;
                }
            }
        }
        unpack_scales_mins(&self.sc, &self.mn, &self.d, &self.dmin, out);
    }
}
