//! rkv's own Q4_K, Q5_K and Q6_K products (packed, activations quantised to Q8_K), and
//! Q5_0 and Q5_1 (to Q8_0 and Q8_1), against candle's
//! quantised matmul (its port of ggml's k-quants) on the same tensor: one token and a
//! batch, and the row lookup against candle's dequantisation.

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rkv_model::linear::{Linear, Weight};

fn random_q(dtype: GgmlDType, rows: usize, cols: usize, seed: u64) -> QTensor {
    use rand::{Rng, SeedableRng};
    let mut r = rand::rngs::StdRng::seed_from_u64(seed);
    let w: Vec<f32> = (0..rows * cols)
        .map(|_| r.gen_range(-0.1f32..0.1))
        .collect();
    let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu).expect("tensor");
    QTensor::quantize(&t, dtype).expect("quantize")
}

#[test]
fn q4_k_linear_matches_candle() {
    matches_candle(GgmlDType::Q4K, |w| matches!(w, Weight::Q4K(_)));
}

#[test]
fn q5_k_linear_matches_candle() {
    matches_candle(GgmlDType::Q5K, |w| matches!(w, Weight::Q5K(_)));
}

#[test]
fn q5_0_linear_matches_candle() {
    matches_candle(GgmlDType::Q5_0, |w| matches!(w, Weight::Q5_0(_)));
}

/// Q5_1's activations are Q8_1, whose block sum `s` candle rounds twice (the sum to f16,
/// then its product with the f16 scale: `f16(sum) * d`) where ggml and rkv round once
/// (`f16(sum * d)`); past 2048 the sum itself loses a unit. The `m * s` terms then differ
/// by a few 1e-4 of the output scale; rkv's products equal ggml's row dot up to rounding
/// (`rkv-kernels/tests/packed.rs`).
#[test]
fn q5_1_linear_matches_candle() {
    matches_candle_within(GgmlDType::Q5_1, |w| matches!(w, Weight::Q5_1(_)), 3e-3);
}

#[test]
fn q6_k_linear_matches_candle() {
    matches_candle(GgmlDType::Q6K, |w| matches!(w, Weight::Q6K(_)));
}

fn matches_candle(dtype: GgmlDType, ours_kind: fn(&Weight) -> bool) {
    matches_candle_within(dtype, ours_kind, 1e-4)
}

/// Outputs within `rel` of the output scale of candle's, rows equal.
fn matches_candle_within(dtype: GgmlDType, ours_kind: fn(&Weight) -> bool, rel: f32) {
    let (rows, cols) = (72, 512);
    let q = random_q(dtype, rows, cols, 5);
    let packed = Weight::from_qtensor(random_q(dtype, rows, cols, 5)).expect("pack");
    let ours = Linear::new(rows, cols, packed, None).expect("linear");
    assert!(ours_kind(ours.weight()), "{dtype:?} takes rkv's kernel");
    let candle = Linear::new(rows, cols, Weight::Quant(Arc::new(q)), None).expect("linear");
    use rand::{Rng, SeedableRng};
    let mut r = rand::rngs::StdRng::seed_from_u64(6);
    for n in [1usize, 5] {
        let x: Vec<f32> = (0..n * cols).map(|_| r.gen_range(-2.0f32..2.0)).collect();
        let (mut a, mut b) = (vec![0.0; n * rows], vec![0.0; n * rows]);
        ours.forward(&x, n, &mut a).expect("ours");
        candle.forward(&x, n, &mut b).expect("candle");
        let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (i, (p, q)) in a.iter().zip(&b).enumerate() {
            assert!((p - q).abs() <= rel * scale, "n {n} output {i}: {p} vs {q}");
        }
    }
    for row in [0, 37, 71] {
        let (mut a, mut b) = (vec![0.0; cols], vec![0.0; cols]);
        ours.row(row, &mut a).expect("ours");
        candle.row(row, &mut b).expect("candle");
        assert_eq!(a, b, "row {row}");
    }
}
