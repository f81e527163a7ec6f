//! Row-batched GQA kernels against per-row scalar loops, for the d = 64 fast
//! path (AVX-512), the multiples of 32 (AVX2) and other shapes, with a strided
//! cache.

mod common;

use common::*;
use rkv_kernels::attn::scalar;
use rkv_kernels::*;

fn to_f16(x: &[f32]) -> Vec<f16> {
    x.iter().map(|&v| f16::from_f32(v)).collect()
}

#[test]
fn scores_and_weighted_sum_match_scalar() {
    let mut r = rng(31);
    for (g, d, stride, n) in [
        (3usize, 64usize, 192usize, 37usize),
        (1, 64, 64, 5),
        (4, 64, 128, 16),
        (2, 64, 64, 50),
        (5, 64, 64, 9),
        (3, 48, 100, 11),
        (2, 64, 64, 0),
        // Other widths the AVX2 kernels take (multiples of 32), blocks and tails.
        (3, 128, 384, 21),
        (4, 96, 96, 8),
        (2, 32, 32, 13),
        // Groups past 4 heads, in parts (R1-Distill-Qwen-1.5B: 6 heads of 128; -7B: 7).
        (6, 128, 256, 29),
        (7, 128, 512, 17),
        (9, 64, 64, 12),
        // Whole blocks of 16 rows and partial ones, past six heads (AVX-512: one pass).
        (6, 128, 256, 32),
        (8, 128, 128, 47),
        (12, 128, 128, 3),
        (5, 80, 80, 33),
    ] {
        let cache = to_f16(&floats(&mut r, n.max(1) * stride, 1.0));
        let qs = floats(&mut r, g * d, 1.0);
        let mut scores = vec![f32::NAN; g * n];
        gqa_scores_f16(&cache, stride, d, &qs, &mut scores);
        for h in 0..g {
            for j in 0..n {
                let want =
                    scalar::dot_f16(&cache[j * stride..j * stride + d], &qs[h * d..(h + 1) * d]);
                assert!(
                    (scores[h * n + j] - want).abs() < 1e-4,
                    "g={g} d={d} h={h} j={j}"
                );
            }
        }
        let out0 = floats(&mut r, g * d, 1.0);
        let mut out = out0.clone();
        gqa_weighted_sum_f16(&cache, stride, d, &scores, &mut out);
        for h in 0..g {
            for c in 0..d {
                let want: f32 = out0[h * d + c]
                    + (0..n)
                        .map(|j| scores[h * n + j] * cache[j * stride + c].to_f32())
                        .sum::<f32>();
                assert!(
                    (out[h * d + c] - want).abs() < 1e-3,
                    "g={g} d={d} h={h} c={c}"
                );
            }
        }
    }
}

#[test]
#[should_panic(expected = "cache too short")]
fn short_cache_panics() {
    let cache = vec![f16::ZERO; 64 * 3];
    gqa_scores_f16(&cache, 128, 64, &[0.0; 64], &mut [0.0; 3]);
}

/// A stride whose `(n - 1) * stride + d` wraps to a small number is still refused (the
/// AVX-512 path would otherwise read rows outside the slice).
#[test]
#[should_panic(expected = "cache too short")]
fn wrapping_stride_panics() {
    let cache = vec![f16::ZERO; 64];
    gqa_scores_f16(&cache, usize::MAX - 63, 64, &[1.0; 64], &mut [0.0; 2]);
}

#[test]
#[should_panic(expected = "cache too short")]
fn wrapping_stride_panics_in_weighted_sum() {
    let cache = vec![f16::ZERO; 64];
    gqa_weighted_sum_f16(&cache, usize::MAX - 63, 64, &[1.0; 2], &mut [0.0; 64]);
}
