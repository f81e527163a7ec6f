//! Attention vector helpers: SIMD vs scalar references on random data.

mod common;

use common::*;
use rkv_kernels::attn::scalar;
use rkv_kernels::*;

fn to_f16(x: &[f32]) -> Vec<f16> {
    x.iter().map(|&v| f16::from_f32(v)).collect()
}

fn rel_close(a: f32, b: f32, scale: f32) -> bool {
    (a - b).abs() <= 1e-5 * scale.max(1.0)
}

#[test]
fn dots_match_scalar() {
    let mut r = rng(11);
    for d in [0usize, 1, 15, 16, 17, 31, 64, 100, 128] {
        let k = floats(&mut r, d, 1.0);
        let q = floats(&mut r, d, 1.0);
        let kh = to_f16(&k);
        let scale: f32 = k.iter().zip(&q).map(|(a, b)| (a * b).abs()).sum();
        assert!(
            rel_close(dot_f16(&kh, &q), scalar::dot_f16(&kh, &q), scale),
            "d={d}"
        );
        assert!(
            rel_close(dot_f32(&k, &q), scalar::dot_f32(&k, &q), scale),
            "d={d}"
        );
    }
}

#[test]
fn axpy_matches_scalar() {
    let mut r = rng(12);
    for d in [0usize, 3, 16, 47, 64] {
        let x = floats(&mut r, d, 1.0);
        let xh = to_f16(&x);
        let y0 = floats(&mut r, d, 1.0);
        let (mut a, mut b) = (y0.clone(), y0.clone());
        axpy_f16(&mut a, 0.7, &xh);
        scalar::axpy_f16(&mut b, 0.7, &xh);
        assert_eq!(a, b, "fma per element is exact-equal");
        let (mut a, mut b) = (y0.clone(), y0);
        axpy_f32(&mut a, -1.3, &x);
        scalar::axpy_f32(&mut b, -1.3, &x);
        assert_eq!(a, b);
    }
}

#[test]
fn multi_query_dot_matches_single() {
    let mut r = rng(13);
    for (g, d) in [
        (2usize, 0usize),
        (1, 64),
        (3, 64),
        (8, 32),
        (9, 17),
        (12, 128),
    ] {
        let k = to_f16(&floats(&mut r, d, 1.0));
        let qs = floats(&mut r, g * d, 1.0);
        // NaN first: every head must be written, d = 0 included.
        let mut out = vec![f32::NAN; g];
        let mut portable = vec![f32::NAN; g];
        dot_f16_multi(&k, &qs, &mut out);
        scalar::dot_f16_multi(&k, &qs, &mut portable);
        for h in 0..g {
            let want = scalar::dot_f16(&k, &qs[h * d..(h + 1) * d]);
            assert!(rel_close(out[h], want, d as f32), "g={g} d={d} h={h}");
            assert!(rel_close(portable[h], want, d as f32), "g={g} d={d} h={h}");
        }
    }
}

#[test]
fn slice_conversions_match_half() {
    let mut r = rng(14);
    let x: Vec<f32> = floats(&mut r, 77, 70000.0)
        .into_iter()
        .chain([1e-8, -0.0, 65520.0, f32::INFINITY, 2.0f32.powi(-24) * 1.5])
        .collect();
    let mut h = vec![f16::ZERO; x.len()];
    f32_to_f16_slice(&x, &mut h);
    for (a, b) in x.iter().zip(&h) {
        assert_eq!(f16::from_f32(*a).to_bits(), b.to_bits(), "{a}");
    }
    let mut back = vec![0.0f32; x.len()];
    f16_to_f32_slice(&h, &mut back);
    for (a, b) in h.iter().zip(&back) {
        assert_eq!(a.to_f32().to_bits(), b.to_bits());
    }
}

#[test]
fn rounding_through_f16_matches_half() {
    let mut r = rng(16);
    let x: Vec<f32> = floats(&mut r, 83, 70000.0)
        .into_iter()
        .chain([
            1e-8,
            -0.0,
            65520.0,
            f32::INFINITY,
            2.0f32.powi(-24) * 1.5,
            1.0 + 2e-4,
        ])
        .collect();
    let mut got = x.clone();
    rkv_kernels::attn::round_through_f16(&mut got);
    for (a, b) in x.iter().zip(&got) {
        assert_eq!(f16::from_f32(*a).to_f32().to_bits(), b.to_bits(), "{a}");
    }
}

#[test]
fn multi_axpy_matches_single() {
    let mut r = rng(15);
    for (g, d) in [(1usize, 64usize), (3, 64), (5, 17), (9, 128)] {
        let x = to_f16(&floats(&mut r, d, 1.0));
        let a = floats(&mut r, g, 1.0);
        let y0 = floats(&mut r, g * d, 1.0);
        let (mut ys, mut want) = (y0.clone(), y0);
        axpy_f16_multi(&mut ys, &a, &x);
        scalar::axpy_f16_multi(&mut want, &a, &x);
        assert_eq!(ys, want, "g={g} d={d}");
    }
}
