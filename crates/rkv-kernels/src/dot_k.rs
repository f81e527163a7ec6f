//! ggml's K-quant dot products `ggml_vec_dot_q4_K_q8_K`, `ggml_vec_dot_q5_K_q8_K` and
//! `ggml_vec_dot_q6_K_q8_K` as ggml's x86 build computes them, operation for
//! operation, in scalar code (the test oracles of the packed products).
//!
//! ggml's x86 build runs its AVX2 kernel for these whether the CPU has AVX2 or AVX-512
//! (`ggml/src/ggml-cpu/arch/x86/quants.c`). Its float arithmetic, reproduced here:
//! * the integer products of a super-block are summed, exactly, in 8 lanes: lane `l`
//!   holds values `4 l .. 4 l + 4` of every 32-value chunk, each times its sub-block's
//!   scale (`maddubs` then `madd` with the scale);
//! * lane `l` accumulates `acc[l] = fma(d_y * d, lane_sum, acc[l])` super-block by
//!   super-block, reduced at the end in `hsum_float_8`'s order;
//! * Q4_K's mins go to 4 lanes, lane `k` holding sub-blocks `2 k, 2 k + 1`
//!   (`acc_m[k] = fma(-(d_y * dmin), m . bsums, acc_m[k])`), reduced as
//!   `(a0 + a2) + (a1 + a3)`; Q5_K sums its mins to one integer per super-block and
//!   accumulates `summs = fma(-(d_y * dmin), msum, summs)` (the C compiler contracts
//!   `summs += dmin * msum`);
//! * Q6_K sums its unsigned 6-bit quants and takes `32 * scales . bsums` off each lane
//!   (lane `l`: 16-value groups `2 l, 2 l + 1`) before the float step.
//!
//! `crates/rkv-kernels/tests/ggml_dots.rs` checks the bits against ggml's own results.
//! rkv's packed products sum each super-block to one integer first and agree with these
//! up to rounding (`tests/packed.rs`).
//!
//! Must not know: packing, threads, models.

use crate::blocks_k::{scale_min_k4, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};
use crate::dot::{fma_lanes, hsum8};

/// Per-lane integer sums of a Q4_K or Q5_K super-block: `quant(j, e)` is value `e` of
/// sub-block `j`; lane `e / 4` of each sub-block, times its scale.
fn k4_lanes(scales: &[u8; 12], y: &BlockQ8K, quant: impl Fn(usize, usize) -> i32) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for j in 0..8 {
        let sc = scale_min_k4(j, scales).0 as i32;
        for (l, lane) in lanes.iter_mut().enumerate() {
            let s: i32 = (4 * l..4 * l + 4)
                .map(|e| quant(j, e) * y.qs[32 * j + e] as i32)
                .sum();
            *lane += sc * s;
        }
    }
    lanes
}

/// Q4_K/Q5_K mins against the activation sums, in 4 lanes (sub-blocks `2 k, 2 k + 1`).
fn k4_min_lanes(scales: &[u8; 12], y: &BlockQ8K) -> [i32; 4] {
    let sub = |j: usize| {
        let m = scale_min_k4(j, scales).1 as i32;
        m * (y.bsums[2 * j] as i32 + y.bsums[2 * j + 1] as i32)
    };
    std::array::from_fn(|k| sub(2 * k) + sub(2 * k + 1))
}

/// ggml's x86 `ggml_vec_dot_q4_K_q8_K`, bit for bit.
///
/// # Panics
/// If `x.len() != y.len()`.
pub fn vec_dot_q4_k_q8_k_ref(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_q4_k_q8_k: block counts differ");
    let (mut acc, mut acc_m) = ([0.0f32; 8], [0.0f32; 4]);
    for (b, yb) in x.iter().zip(y) {
        let d = yb.d * b.d.to_f32();
        let dmin = -yb.d * b.dmin.to_f32();
        for (a, m) in acc_m.iter_mut().zip(k4_min_lanes(&b.scales, yb)) {
            *a = dmin.mul_add(m as f32, *a);
        }
        fma_lanes(
            &mut acc,
            d,
            k4_lanes(&b.scales, yb, |j, e| b.quant(j, e) as i32),
        );
    }
    hsum8(&acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]))
}

/// ggml's x86 `ggml_vec_dot_q5_K_q8_K`, bit for bit.
///
/// # Panics
/// If `x.len() != y.len()`.
pub fn vec_dot_q5_k_q8_k_ref(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_q5_k_q8_k: block counts differ");
    let (mut acc, mut summs) = ([0.0f32; 8], 0.0f32);
    for (b, yb) in x.iter().zip(y) {
        let d = yb.d * b.d.to_f32();
        let dmin = -yb.d * b.dmin.to_f32();
        let msum: i32 = k4_min_lanes(&b.scales, yb).iter().sum();
        summs = dmin.mul_add(msum as f32, summs);
        fma_lanes(
            &mut acc,
            d,
            k4_lanes(&b.scales, yb, |j, e| b.quant(j, e) as i32),
        );
    }
    hsum8(&acc) + summs
}

/// ggml's x86 `ggml_vec_dot_q6_K_q8_K`, bit for bit.
///
/// # Panics
/// If `x.len() != y.len()`.
pub fn vec_dot_q6_k_q8_k_ref(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_q6_k_q8_k: block counts differ");
    let mut acc = [0.0f32; 8];
    for (b, yb) in x.iter().zip(y) {
        let d = yb.d * b.d.to_f32();
        let sc = |g: usize| b.scales[g] as i32;
        let mut lanes: [i32; 8] = std::array::from_fn(|l| {
            -32 * (yb.bsums[2 * l] as i32 * sc(2 * l) + yb.bsums[2 * l + 1] as i32 * sc(2 * l + 1))
        });
        for v in 0..256 {
            lanes[(v % 32) / 4] += sc(v / 16) * b.quant(v) as i32 * yb.qs[v] as i32;
        }
        fma_lanes(&mut acc, d, lanes);
    }
    hsum8(&acc)
}
