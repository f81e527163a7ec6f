//! Activation quantisation: SIMD == scalar reference, ggml's x86 rounding
//! (ties to even, `id = 127 / amax`), round trips, and the block byte layout; Q8_K's
//! SIMD path == `quantize_row_q8_k_ref` (ggml's `quantize_row_q8_K_ref`).

mod common;

use common::*;
use proptest::prelude::*;
use rkv_kernels::*;

#[test]
fn q8_1_hand_block_rounds_ties_to_even() {
    let mut x = [0.0f32; QK];
    x[0] = 127.0; // amax = 127: d = 1, id = 1
    x[1] = 2.5;
    x[2] = -2.5;
    x[3] = 0.5;
    x[4] = 1.5;
    x[5] = -100.4;
    let mut y = [BlockQ8_1::default()];
    quantize_row_q8_1(&x, &mut y).unwrap();
    assert_eq!(&y[0].qs[..6], &[127, 2, -2, 0, 2, -100]);
    assert_eq!(y[0].d, f16::ONE);
    assert_eq!(y[0].s.to_f32(), 127.0 + 2.0 - 2.0 + 2.0 - 100.0);
    let mut z = [BlockQ8_1::default()];
    quantize_row_q8_1_ref(&x, &mut z).unwrap();
    assert_eq!(y, z);
}

#[test]
fn q8_k_hand_block_takes_the_first_largest_and_rounds_ties_to_even() {
    let mut x = [0.0f32; 2 * QK_K];
    // Block 0: -127 comes before +127, so max = -127 and iscale = -127 / max = 1 (had
    // +127 come first, iscale would be -1 and every sign would flip).
    x[3] = -127.0;
    x[5] = 127.0; // in the same eight lanes
    x[200] = 127.0;
    x[0] = 2.5;
    x[1] = -0.5;
    x[17] = 100.4;
    // Block 1 stays zero.
    let (mut a, mut b) = ([BlockQ8K::default(); 2], [BlockQ8K::default(); 2]);
    quantize_row_q8_k(&x, &mut a).unwrap();
    quantize_row_q8_k_ref(&x, &mut b).unwrap();
    assert_eq!(a, b);
    assert_eq!(&a[0].qs[..4], &[2, 0, 0, -127]);
    assert_eq!((a[0].qs[5], a[0].qs[17], a[0].qs[200]), (127, 100, 127));
    assert_eq!(a[0].d, 1.0);
    assert_eq!(a[0].bsums[0], 2 - 127 + 127);
    assert_eq!(a[0].bsums[1], 100);
    assert_eq!(a[1], BlockQ8K::default());
    assert!(quantize_row_q8_k(&x[1..], &mut a).is_err());
    assert!(quantize_row_q8_k(&x, &mut a[..1]).is_err());
}

#[test]
fn zero_block_quantises_to_zero() {
    let x = [0.0f32; 2 * QK];
    let mut y = [BlockQ8_0 {
        d: f16::ONE,
        qs: [5; QK],
    }; 2];
    quantize_row_q8_0(&x, &mut y).unwrap();
    assert!(y.iter().all(|b| b.d == f16::ZERO && b.qs == [0; QK]));
}

#[test]
fn shape_errors() {
    let mut y = [BlockQ8_0::default(); 1];
    assert!(quantize_row_q8_0(&[0.0; 33], &mut y).is_err());
    assert!(quantize_row_q8_0(&[0.0; 64], &mut y).is_err());
}

proptest! {
    #[test]
    fn simd_equals_reference(x in prop::collection::vec(-30.0f32..30.0, 1..8usize)
        .prop_flat_map(|v| prop::collection::vec(-30.0f32..30.0, v.len() * QK))) {
        let nb = x.len() / QK;
        let (mut a, mut b) = (vec![BlockQ8_1::default(); nb], vec![BlockQ8_1::default(); nb]);
        quantize_row_q8_1(&x, &mut a).unwrap();
        quantize_row_q8_1_ref(&x, &mut b).unwrap();
        prop_assert_eq!(&a, &b);
        let (mut c, mut e) = (vec![BlockQ8_0::default(); nb], vec![BlockQ8_0::default(); nb]);
        quantize_row_q8_0(&x, &mut c).unwrap();
        quantize_row_q8_0_ref(&x, &mut e).unwrap();
        prop_assert_eq!(&c, &e);
        for (p, q) in a.iter().zip(&c) {
            prop_assert_eq!(p.d, q.d);
            prop_assert_eq!(p.qs, q.qs);
        }
    }

    #[test]
    fn q8_k_simd_equals_reference(x in prop::collection::vec(-30.0f32..30.0, 1..5usize)
        .prop_flat_map(|v| prop::collection::vec(-30.0f32..30.0, v.len() * QK_K))) {
        let nb = x.len() / QK_K;
        let (mut a, mut b) = (vec![BlockQ8K::default(); nb], vec![BlockQ8K::default(); nb]);
        quantize_row_q8_k(&x, &mut a).unwrap();
        quantize_row_q8_k_ref(&x, &mut b).unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn round_trip_error_is_half_a_step(x in prop::collection::vec(-10.0f32..10.0, 4 * QK)) {
        let mut y = vec![BlockQ8_1::default(); 4];
        quantize_row_q8_1(&x, &mut y).unwrap();
        let mut back = vec![0.0f32; x.len()];
        dequantize_row_q8_1(&y, &mut back).unwrap();
        for (i, (a, b)) in x.iter().zip(&back).enumerate() {
            let d = y[i / QK].d.to_f32();
            // half a step, plus the f16 rounding of d times |q| <= 127.
            prop_assert!((a - b).abs() <= 0.5 * d + 127.0 * d * 1e-3 + 1e-6);
        }
    }
}

#[test]
fn blocks_from_bytes_layout() {
    // Q4_1: d (le f16), m (le f16), 16 nibble bytes.
    let mut bytes = vec![];
    bytes.extend_from_slice(&f16::from_f32(0.5).to_bits().to_le_bytes());
    bytes.extend_from_slice(&f16::from_f32(-1.0).to_bits().to_le_bytes());
    bytes.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let b: Vec<BlockQ4_1> = blocks_from_bytes(&bytes).unwrap();
    assert_eq!(b.len(), 1);
    let mut y = [0.0f32; QK];
    dequantize_row_q4_1(&b, &mut y).unwrap();
    for j in 0..16 {
        assert_eq!(y[j], j as f32 * 0.5 - 1.0);
        assert_eq!(y[j + 16], (15 - j) as f32 * 0.5 - 1.0);
    }
    // Unaligned input and a bad length.
    let mut shifted = vec![0u8];
    shifted.extend_from_slice(&bytes);
    assert_eq!(blocks_from_bytes::<BlockQ4_1>(&shifted[1..]).unwrap(), b);
    assert!(blocks_from_bytes::<BlockQ4_1>(&bytes[1..]).is_err());
}

#[test]
fn q4_1_quantise_dequantise_via_q8_dot() {
    // A quantised activation dotted with itself-as-Q8_0 approximates |x|^2.
    let mut r = rng(9);
    let x = floats(&mut r, 18 * QK, 2.0);
    let mut y = vec![BlockQ8_0::default(); 18];
    quantize_row_q8_0(&x, &mut y).unwrap();
    let exact: f32 = x.iter().map(|v| v * v).sum();
    let got = vec_dot_q8_0_q8_0(&y, &y);
    assert!((got - exact).abs() < 1e-2 * exact);
}
