//! Matmuls against a naive loop of single-row dots, for several token counts,
//! row counts that are not multiples of the tile, and 1 or 2 rayon threads.

mod common;

use common::*;
use rkv_kernels::*;

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

const SHAPES: [(usize, usize); 5] = [(1, 1), (5, 3), (18, 37), (64, 18), (131, 2)];
const TOKENS: [usize; 3] = [1, 3, 17];

#[test]
fn q4_1_matches_naive() {
    let mut r = rng(21);
    for (rows, nb) in SHAPES {
        for n in TOKENS {
            let w = q4_1(&mut r, rows * nb);
            let x = q8_1(&mut r, n * nb);
            for threads in [1, 2] {
                let mut out = vec![f32::NAN; n * rows];
                pool(threads)
                    .install(|| matmul_q4_1(&w, rows, &x, n, &mut out))
                    .unwrap();
                for t in 0..n {
                    for i in 0..rows {
                        let want = vec_dot_q4_1_q8_1_ref(
                            &w[i * nb..(i + 1) * nb],
                            &x[t * nb..(t + 1) * nb],
                        );
                        assert_eq!(out[t * rows + i].to_bits(), want.to_bits());
                    }
                }
            }
        }
    }
}

#[test]
fn q4_0_and_q8_0_match_naive() {
    let mut r = rng(22);
    for (rows, nb) in SHAPES {
        for n in TOKENS {
            let w4 = q4_0(&mut r, rows * nb);
            let w8 = q8_0(&mut r, rows * nb);
            let x = q8_0(&mut r, n * nb);
            let (mut o4, mut o8) = (vec![f32::NAN; n * rows], vec![f32::NAN; n * rows]);
            pool(2).install(|| {
                matmul_q4_0(&w4, rows, &x, n, &mut o4).unwrap();
                matmul_q8_0(&w8, rows, &x, n, &mut o8).unwrap();
            });
            for t in 0..n {
                let xt = &x[t * nb..(t + 1) * nb];
                for i in 0..rows {
                    let a = vec_dot_q4_0_q8_0_ref(&w4[i * nb..(i + 1) * nb], xt);
                    let b = vec_dot_q8_0_q8_0_ref(&w8[i * nb..(i + 1) * nb], xt);
                    assert_eq!(o4[t * rows + i].to_bits(), a.to_bits());
                    assert_eq!(o8[t * rows + i].to_bits(), b.to_bits());
                }
            }
        }
    }
}

#[test]
fn dense_match_naive() {
    let mut r = rng(23);
    for (rows, cols) in [(1usize, 1usize), (7, 33), (40, 64), (133, 100)] {
        for n in TOKENS {
            let w = floats(&mut r, rows * cols, 1.0);
            let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
            let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
            let x = floats(&mut r, n * cols, 1.0);
            let (mut o32, mut o16) = (vec![f32::NAN; n * rows], vec![f32::NAN; n * rows]);
            let mut ob = vec![f32::NAN; n * rows];
            pool(2).install(|| {
                matmul_f32(&w, rows, &x, n, &mut o32).unwrap();
                matmul_f16(&wh, rows, &x, n, &mut o16).unwrap();
                matmul_bf16(&wb, rows, &x, n, &mut ob).unwrap();
            });
            for t in 0..n {
                let xt = &x[t * cols..(t + 1) * cols];
                for i in 0..rows {
                    let a: f64 = (0..cols)
                        .map(|j| w[i * cols + j] as f64 * xt[j] as f64)
                        .sum();
                    let b: f64 = (0..cols)
                        .map(|j| wh[i * cols + j].to_f64() * xt[j] as f64)
                        .sum();
                    let c: f64 = (0..cols)
                        .map(|j| wb[i * cols + j].to_f64() * xt[j] as f64)
                        .sum();
                    let tol = 1e-5 * cols as f64;
                    assert!((o32[t * rows + i] as f64 - a).abs() < tol);
                    assert!((o16[t * rows + i] as f64 - b).abs() < tol);
                    assert!((ob[t * rows + i] as f64 - c).abs() < tol);
                }
            }
        }
    }
}

#[test]
fn shape_errors() {
    let mut r = rng(24);
    let w = q4_1(&mut r, 6);
    let x = q8_1(&mut r, 3);
    let mut out = vec![0.0; 2];
    assert!(matmul_q4_1(&w, 2, &x, 1, &mut out).is_ok());
    assert!(matmul_q4_1(&w, 4, &x, 1, &mut out).is_err()); // 6 % 4 != 0
    assert!(matmul_q4_1(&w, 2, &x[..2], 1, &mut out).is_err());
    assert!(matmul_q4_1(&w, 2, &x, 1, &mut out[..1]).is_err());
    assert!(matmul_q4_1(&[], 0, &[], 3, &mut []).is_ok());
    // n x rows wraps to 0 without the checked product.
    assert!(matmul_f32(&[], 16, &[], 1 << 60, &mut []).is_err());
}

/// Rows of width 0: every output is 0, whatever the caller's buffer held, on every
/// kernel and token count.
#[test]
fn empty_rows_give_zeros() {
    for n in [1usize, 2] {
        let mut out = vec![f32::NAN; 4 * n];
        matmul_f32(&[], 4, &[], n, &mut out).unwrap();
        assert_eq!(out, vec![0.0; 4 * n]);
        out.fill(f32::NAN);
        matmul_f16(&[], 4, &[], n, &mut out).unwrap();
        assert_eq!(out, vec![0.0; 4 * n]);
        out.fill(f32::NAN);
        matmul_bf16(&[], 4, &[], n, &mut out).unwrap();
        assert_eq!(out, vec![0.0; 4 * n]);
        out.fill(f32::NAN);
        matmul_q8_0(&[], 4, &[], n, &mut out).unwrap();
        assert_eq!(out, vec![0.0; 4 * n]);
    }
}

/// The dense blocked product equals its per-output reference (`dense::dot_ref`) bit for
/// bit, on the SIMD path where the CPU has one: every token count from 1 to 13 (tiles of
/// 6 down to 1 tokens on AVX-512, 3 down to 1 on AVX2), row counts off the tiles,
/// lengths off multiples of 8, and 1 or 2 threads; so a token gets the same outputs alone
/// and in a batch.
#[test]
fn dense_blocked_product_is_its_reference_bit_for_bit() {
    let mut r = rng(25);
    for (rows, cols) in [(1usize, 8usize), (3, 13), (17, 64), (37, 100), (40, 576)] {
        let w = floats(&mut r, rows * cols, 1.0);
        let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
        for n in 1..=13 {
            let x = floats(&mut r, n * cols, 1.0);
            for threads in [1, 2] {
                let mut outs = [
                    vec![f32::NAN; n * rows],
                    vec![f32::NAN; n * rows],
                    vec![f32::NAN; n * rows],
                ];
                pool(threads).install(|| {
                    matmul_f32(&w, rows, &x, n, &mut outs[0]).unwrap();
                    matmul_f16(&wh, rows, &x, n, &mut outs[1]).unwrap();
                    matmul_bf16(&wb, rows, &x, n, &mut outs[2]).unwrap();
                });
                for t in 0..n {
                    let xt = &x[t * cols..(t + 1) * cols];
                    for i in 0..rows {
                        let row = i * cols..(i + 1) * cols;
                        let want = [
                            dense::dot_ref(&w[row.clone()], xt),
                            dense::dot_ref(&wh[row.clone()], xt),
                            dense::dot_ref(&wb[row], xt),
                        ];
                        for (o, want) in outs.iter().zip(want) {
                            let got = o[t * rows + i];
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{rows}x{cols}, n {n}, token {t}, row {i}: {got} != {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}
