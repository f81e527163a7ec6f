//! Quantised dot products: SIMD == scalar reference (bit for bit), the
//! reference agrees with a dequantised f64 dot, and a hand-computed block.

mod common;

use common::*;
use rkv_kernels::*;

fn close(a: f32, b: f64, tol: f64) -> bool {
    ((a as f64) - b).abs() <= tol * (1.0 + b.abs())
}

fn dequant_dot(x: &[f32], y: &[f32]) -> f64 {
    x.iter().zip(y).map(|(&a, &b)| a as f64 * b as f64).sum()
}

#[test]
fn q4_1_simd_matches_reference_and_dequantised() {
    let mut r = rng(1);
    for nb in [0usize, 1, 2, 7, 18, 48] {
        for _ in 0..50 {
            let x = q4_1(&mut r, nb);
            let y = q8_1(&mut r, nb);
            let simd = vec_dot_q4_1_q8_1(&x, &y);
            let reference = vec_dot_q4_1_q8_1_ref(&x, &y);
            assert_eq!(simd.to_bits(), reference.to_bits(), "nb={nb}");
            let (mut xf, mut yf) = (vec![0.0; nb * QK], vec![0.0; nb * QK]);
            dequantize_row_q4_1(&x, &mut xf).unwrap();
            dequantize_row_q8_1(&y, &mut yf).unwrap();
            // `s` is f16-rounded, so allow for that in the m*s term.
            assert!(close(simd, dequant_dot(&xf, &yf), 2e-3), "nb={nb}");
        }
    }
}

#[test]
fn q4_0_simd_matches_reference_and_dequantised() {
    let mut r = rng(2);
    for nb in [0usize, 1, 3, 18, 48] {
        for _ in 0..50 {
            let x = q4_0(&mut r, nb);
            let y = q8_0(&mut r, nb);
            let simd = vec_dot_q4_0_q8_0(&x, &y);
            assert_eq!(simd.to_bits(), vec_dot_q4_0_q8_0_ref(&x, &y).to_bits());
            let (mut xf, mut yf) = (vec![0.0; nb * QK], vec![0.0; nb * QK]);
            dequantize_row_q4_0(&x, &mut xf).unwrap();
            dequantize_row_q8_0(&y, &mut yf).unwrap();
            assert!(close(simd, dequant_dot(&xf, &yf), 1e-5));
        }
    }
}

#[test]
fn q8_0_simd_matches_reference_and_dequantised() {
    let mut r = rng(3);
    for nb in [0usize, 1, 5, 18, 48] {
        for _ in 0..50 {
            let x = q8_0(&mut r, nb);
            let y = q8_0(&mut r, nb);
            let simd = vec_dot_q8_0_q8_0(&x, &y);
            assert_eq!(simd.to_bits(), vec_dot_q8_0_q8_0_ref(&x, &y).to_bits());
            let (mut xf, mut yf) = (vec![0.0; nb * QK], vec![0.0; nb * QK]);
            dequantize_row_q8_0(&x, &mut xf).unwrap();
            dequantize_row_q8_0(&y, &mut yf).unwrap();
            assert!(close(simd, dequant_dot(&xf, &yf), 1e-5));
        }
    }
}

/// Activation quants of -128 (a degenerate block's, or a caller's) against negative
/// weights: the sign trick must not flip them (`-(-128)` wraps in a byte).
#[test]
fn activation_minus_128_is_exact() {
    let mut y = BlockQ8_0 {
        d: f16::ONE,
        qs: [0; QK],
    };
    y.qs[0] = -128;
    y.qs[5] = -128;
    y.qs[31] = 127;
    let y = [y];
    // Q8_0 weights -127 everywhere: -127 * (-128 - 128 + 127) = 16383.
    let x8 = [BlockQ8_0 {
        d: f16::ONE,
        qs: [-127; QK],
    }];
    assert_eq!(vec_dot_q8_0_q8_0_ref(&x8, &y), 16383.0);
    assert_eq!(vec_dot_q8_0_q8_0(&x8, &y), 16383.0);
    // Q4_0 nibbles 7 (weights -1): -1 * (-129) = 129.
    let x4 = [BlockQ4_0 {
        d: f16::ONE,
        qs: [0x77; QK / 2],
    }];
    assert_eq!(vec_dot_q4_0_q8_0_ref(&x4, &y), 129.0);
    assert_eq!(vec_dot_q4_0_q8_0(&x4, &y), 129.0);
}

#[test]
fn q8_0_extreme_quants_are_exact() {
    // The largest products (127 * 127, four to a lane) stay exact on every path.
    let x = vec![
        BlockQ8_0 {
            d: f16::ONE,
            qs: [-127; QK]
        };
        3
    ];
    let y = vec![
        BlockQ8_0 {
            d: f16::ONE,
            qs: [-127; QK]
        };
        3
    ];
    assert_eq!(vec_dot_q8_0_q8_0(&x, &y), (3 * QK * 127 * 127) as f32);
}

#[test]
fn q4_1_hand_computed_block() {
    // Low nibbles 1, high nibbles 2; d = 2, m = 0.5. Activations: d = 0.25,
    // all quants 3, s = 0.25 * 96 = 24.
    let x = [BlockQ4_1 {
        d: f16::from_f32(2.0),
        m: f16::from_f32(0.5),
        qs: [0x21; 16],
    }];
    let y = [BlockQ8_1 {
        d: f16::from_f32(0.25),
        s: f16::from_f32(24.0),
        qs: [3; QK],
    }];
    // sumi = 16*1*3 + 16*2*3 = 144; 144 * 2 * 0.25 + 0.5 * 24 = 84.
    assert_eq!(vec_dot_q4_1_q8_1(&x, &y), 84.0);
    assert_eq!(vec_dot_q4_1_q8_1_ref(&x, &y), 84.0);
}

#[test]
fn q4_0_hand_computed_block() {
    // Low nibbles 9 (+1), high nibbles 6 (-2); d = 0.5; activations 4, d = 1.
    let x = [BlockQ4_0 {
        d: f16::from_f32(0.5),
        qs: [0x69; 16],
    }];
    let y = [BlockQ8_0 {
        d: f16::ONE,
        qs: [4; QK],
    }];
    // sumi = 16*1*4 + 16*(-2)*4 = -64; * 0.5 = -32.
    assert_eq!(vec_dot_q4_0_q8_0(&x, &y), -32.0);
}

#[test]
#[should_panic(expected = "block counts differ")]
fn length_mismatch_panics() {
    let mut r = rng(4);
    vec_dot_q4_1_q8_1(&q4_1(&mut r, 2), &q8_1(&mut r, 3));
}
