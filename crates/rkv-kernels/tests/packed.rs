//! The packed (eight-row interleaved) Q4_1 product: repacking is lossless, the
//! SIMD product equals its scalar reference bit for bit whatever the token count,
//! tiling and thread count, a token's outputs do not depend on the others in its
//! batch, and the result agrees with ggml's row dot product up to rounding.

mod common;

use common::*;
use rkv_kernels::*;

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// (rows, blocks per row): rows below, at and past multiples of 8.
const SHAPES: [(usize, usize); 6] = [(1, 1), (5, 3), (8, 2), (18, 37), (64, 18), (131, 2)];
const TOKENS: [usize; 6] = [1, 2, 3, 4, 5, 17];

fn product(w: &PackedQ4_1, x: &[BlockQ8_1], n: usize, threads: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n * w.rows()];
    pool(threads)
        .install(|| matmul_q4_1_packed(w, x, n, &mut out))
        .unwrap();
    out
}

#[test]
fn packing_keeps_every_block() {
    let mut r = rng(31);
    for (rows, nb) in SHAPES {
        let w = q4_1(&mut r, rows * nb);
        let p = PackedQ4_1::pack(&w, rows).unwrap();
        assert_eq!((p.rows(), p.blocks_per_row()), (rows, nb));
        assert_eq!(p.blocks().len(), rows.div_ceil(8) * nb);
        for i in 0..rows {
            for b in 0..nb {
                assert_eq!(p.row_block(i, b), w[i * nb + b], "row {i} block {b}");
            }
            let (mut got, mut want) = (vec![0.0; nb * QK], vec![0.0; nb * QK]);
            p.dequantize_row(i, &mut got).unwrap();
            dequantize_row_q4_1(&w[i * nb..(i + 1) * nb], &mut want).unwrap();
            assert_eq!(got, want);
        }
        assert!(p.dequantize_row(rows, &mut vec![0.0; nb * QK]).is_err());
    }
}

#[test]
fn simd_matches_reference_bit_for_bit() {
    let mut r = rng(32);
    for (rows, nb) in SHAPES {
        let p = PackedQ4_1::pack(&q4_1(&mut r, rows * nb), rows).unwrap();
        for n in TOKENS {
            let x = q8_1(&mut r, n * nb);
            let mut want = vec![f32::NAN; n * rows];
            matmul_q4_1_packed_ref(&p, &x, n, &mut want).unwrap();
            for threads in [1, 2, 3] {
                let got = product(&p, &x, n, threads);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{rows}x{nb}, n {n}, output {i}");
                }
            }
        }
    }
}

#[test]
fn a_token_gets_the_same_outputs_alone_and_in_a_batch() {
    let mut r = rng(33);
    let (rows, nb) = (40, 18);
    let p = PackedQ4_1::pack(&q4_1(&mut r, rows * nb), rows).unwrap();
    let n = 11;
    let x = q8_1(&mut r, n * nb);
    let batch = product(&p, &x, n, 2);
    for t in 0..n {
        let alone = product(&p, &x[t * nb..(t + 1) * nb], 1, 1);
        assert_eq!(alone, batch[t * rows..(t + 1) * rows], "token {t}");
    }
}

#[test]
fn extreme_quants_do_not_overflow() {
    // Every nibble 15 against activations of -128 and 127: the i16 partial sums
    // are at their bound.
    let (rows, nb) = (8, 4);
    let w: Vec<BlockQ4_1> = (0..rows * nb)
        .map(|_| BlockQ4_1 {
            d: f16::from_f32(1.0),
            m: f16::from_f32(0.0),
            qs: [0xFF; QK / 2],
        })
        .collect();
    let p = PackedQ4_1::pack(&w, rows).unwrap();
    for q in [-128i8, 127] {
        let x: Vec<BlockQ8_1> = (0..nb)
            .map(|_| BlockQ8_1 {
                d: f16::from_f32(1.0),
                s: f16::from_f32(0.0),
                qs: [q; QK],
            })
            .collect();
        let got = product(&p, &x, 1, 1);
        let want = (nb * QK) as f32 * 15.0 * q as f32;
        assert!(got.iter().all(|&g| g == want), "{got:?} != {want}");
    }
}

#[test]
fn agrees_with_ggml_row_dot_up_to_rounding() {
    let mut r = rng(34);
    let (rows, nb) = (24, 48);
    let w = q4_1(&mut r, rows * nb);
    let p = PackedQ4_1::pack(&w, rows).unwrap();
    let n = 6;
    let x = q8_1(&mut r, n * nb);
    let got = product(&p, &x, n, 2);
    for t in 0..n {
        for i in 0..rows {
            let want = vec_dot_q4_1_q8_1_ref(&w[i * nb..(i + 1) * nb], &x[t * nb..(t + 1) * nb]);
            let g = got[t * rows + i];
            let tol = 1e-5 * want.abs().max(1.0);
            assert!((g - want).abs() <= tol, "row {i} token {t}: {g} vs {want}");
        }
    }
}

#[test]
fn shapes_are_checked() {
    let mut r = rng(35);
    let p = PackedQ4_1::pack(&q4_1(&mut r, 16 * 2), 16).unwrap();
    let x = q8_1(&mut r, 2 * 2);
    assert!(matmul_q4_1_packed(&p, &x, 3, &mut [0.0; 48]).is_err());
    assert!(matmul_q4_1_packed(&p, &x, 2, &mut [0.0; 31]).is_err());
    assert!(PackedQ4_1::pack(&q4_1(&mut r, 7), 2).is_err());
}
