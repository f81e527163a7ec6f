//! Shared random generators for the kernel tests (fixed seeds).
#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rkv_kernels::{f16, BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, QK};

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

pub fn scale(r: &mut StdRng) -> f16 {
    f16::from_f32(r.gen_range(-0.05f32..0.05))
}

pub fn q4_0(r: &mut StdRng, n: usize) -> Vec<BlockQ4_0> {
    (0..n)
        .map(|_| BlockQ4_0 {
            d: scale(r),
            qs: std::array::from_fn(|_| r.gen()),
        })
        .collect()
}

pub fn q4_1(r: &mut StdRng, n: usize) -> Vec<BlockQ4_1> {
    (0..n)
        .map(|_| BlockQ4_1 {
            d: scale(r),
            m: scale(r),
            qs: std::array::from_fn(|_| r.gen()),
        })
        .collect()
}

/// Q8_0 blocks with quants in -127..=127 (what quantisation produces).
pub fn q8_0(r: &mut StdRng, n: usize) -> Vec<BlockQ8_0> {
    (0..n)
        .map(|_| BlockQ8_0 {
            d: scale(r),
            qs: std::array::from_fn(|_| r.gen_range(-127..=127)),
        })
        .collect()
}

pub fn q8_1(r: &mut StdRng, n: usize) -> Vec<BlockQ8_1> {
    (0..n)
        .map(|_| {
            let qs: [i8; QK] = std::array::from_fn(|_| r.gen_range(-127..=127));
            let d = scale(r);
            let sum: i32 = qs.iter().map(|&q| q as i32).sum();
            BlockQ8_1 {
                d,
                s: f16::from_f32(d.to_f32() * sum as f32),
                qs,
            }
        })
        .collect()
}

pub fn floats(r: &mut StdRng, n: usize, amp: f32) -> Vec<f32> {
    (0..n).map(|_| r.gen_range(-amp..amp)).collect()
}
