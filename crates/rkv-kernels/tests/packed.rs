//! The packed (eight-row interleaved) products, Q4_1 and Q5_1 x Q8_1, Q8_0 and Q5_0
//! x Q8_0, and Q4_K, Q5_K and Q6_K x Q8_K:
//! repacking is lossless, the SIMD product equals its scalar reference bit for bit
//! whatever the token count, tiling and thread count, a token's outputs do not
//! depend on the others in its batch, and the result agrees with ggml's row dot
//! product up to rounding. The K-quants' wide path (`wide.rs`: unpacked weights, 16
//! tokens a register), scalar and SIMD, equals the reference bit for bit too.

mod common;

use common::*;
use rand::rngs::StdRng;
use rand::Rng;
use rkv_kernels::*;

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// (rows, blocks per row): rows below, at and past multiples of 8.
const SHAPES: [(usize, usize); 6] = [(1, 1), (5, 3), (8, 2), (18, 37), (64, 18), (131, 2)];
const TOKENS: [usize; 8] = [1, 2, 3, 4, 5, 7, 8, 17];

/// One packed format under test: random weights and activations, and ggml's row
/// dot product and dequantiser for comparison.
trait Format: Interleaved<Row: PartialEq + std::fmt::Debug> {
    fn weights(r: &mut StdRng, n: usize) -> Vec<Self::Row>;
    fn acts(r: &mut StdRng, n: usize) -> Vec<Self::Act>;
    fn ggml_dot(w: &[Self::Row], x: &[Self::Act]) -> f32;
    fn ggml_dequantize(w: &[Self::Row], out: &mut [f32]);
}

impl Format for BlockQ4_1x8 {
    fn weights(r: &mut StdRng, n: usize) -> Vec<BlockQ4_1> {
        q4_1(r, n)
    }
    fn acts(r: &mut StdRng, n: usize) -> Vec<BlockQ8_1> {
        q8_1(r, n)
    }
    fn ggml_dot(w: &[BlockQ4_1], x: &[BlockQ8_1]) -> f32 {
        vec_dot_q4_1_q8_1_ref(w, x)
    }
    fn ggml_dequantize(w: &[BlockQ4_1], out: &mut [f32]) {
        dequantize_row_q4_1(w, out).unwrap()
    }
}

impl Format for BlockQ8_0x8 {
    /// Weights use the whole i8 range (a file may hold -128).
    fn weights(r: &mut StdRng, n: usize) -> Vec<BlockQ8_0> {
        (0..n)
            .map(|_| BlockQ8_0 {
                d: scale(r),
                qs: std::array::from_fn(|_| r.gen()),
            })
            .collect()
    }
    fn acts(r: &mut StdRng, n: usize) -> Vec<BlockQ8_0> {
        q8_0(r, n)
    }
    fn ggml_dot(w: &[BlockQ8_0], x: &[BlockQ8_0]) -> f32 {
        vec_dot_q8_0_q8_0_ref(w, x)
    }
    fn ggml_dequantize(w: &[BlockQ8_0], out: &mut [f32]) {
        dequantize_row_q8_0(w, out).unwrap()
    }
}

impl Format for BlockQ5_0x8 {
    fn weights(r: &mut StdRng, n: usize) -> Vec<BlockQ5_0> {
        (0..n)
            .map(|_| BlockQ5_0 {
                d: scale(r),
                qh: r.gen(),
                qs: std::array::from_fn(|_| r.gen()),
            })
            .collect()
    }
    fn acts(r: &mut StdRng, n: usize) -> Vec<BlockQ8_0> {
        q8_0(r, n)
    }
    fn ggml_dot(w: &[BlockQ5_0], x: &[BlockQ8_0]) -> f32 {
        vec_dot_q5_0_q8_0_ref(w, x)
    }
    fn ggml_dequantize(w: &[BlockQ5_0], out: &mut [f32]) {
        dequantize_row_q5_0(w, out).unwrap()
    }
}

impl Format for BlockQ5_1x8 {
    fn weights(r: &mut StdRng, n: usize) -> Vec<BlockQ5_1> {
        (0..n)
            .map(|_| BlockQ5_1 {
                d: scale(r),
                m: scale(r),
                qh: r.gen(),
                qs: std::array::from_fn(|_| r.gen()),
            })
            .collect()
    }
    fn acts(r: &mut StdRng, n: usize) -> Vec<BlockQ8_1> {
        q8_1(r, n)
    }
    fn ggml_dot(w: &[BlockQ5_1], x: &[BlockQ8_1]) -> f32 {
        vec_dot_q5_1_q8_1_ref(w, x)
    }
    fn ggml_dequantize(w: &[BlockQ5_1], out: &mut [f32]) {
        dequantize_row_q5_1(w, out).unwrap()
    }
}

impl Format for BlockQ4_Kx8 {
    /// Any 12 scale bytes are a valid packing of eight 6-bit scales and mins.
    fn weights(r: &mut StdRng, n: usize) -> Vec<BlockQ4K> {
        (0..n)
            .map(|_| BlockQ4K {
                d: f16::from_f32(r.gen_range(-0.01f32..0.01)),
                dmin: f16::from_f32(r.gen_range(-0.01f32..0.01)),
                scales: std::array::from_fn(|_| r.gen()),
                qs: std::array::from_fn(|_| r.gen()),
            })
            .collect()
    }
    fn acts(r: &mut StdRng, n: usize) -> Vec<BlockQ8K> {
        let x: Vec<f32> = (0..n * QK_K).map(|_| r.gen_range(-3.0f32..3.0)).collect();
        let mut y = vec![BlockQ8K::default(); n];
        quantize_row_q8_k(&x, &mut y).unwrap();
        y
    }
    fn ggml_dot(w: &[BlockQ4K], x: &[BlockQ8K]) -> f32 {
        vec_dot_q4_k_q8_k_ref(w, x)
    }
    fn ggml_dequantize(w: &[BlockQ4K], out: &mut [f32]) {
        dequantize_row_q4_k(w, out).unwrap()
    }
}

impl Format for BlockQ5_Kx8 {
    fn weights(r: &mut StdRng, n: usize) -> Vec<BlockQ5K> {
        (0..n)
            .map(|_| BlockQ5K {
                d: f16::from_f32(r.gen_range(-0.01f32..0.01)),
                dmin: f16::from_f32(r.gen_range(-0.01f32..0.01)),
                scales: std::array::from_fn(|_| r.gen()),
                qh: std::array::from_fn(|_| r.gen()),
                qs: std::array::from_fn(|_| r.gen()),
            })
            .collect()
    }
    fn acts(r: &mut StdRng, n: usize) -> Vec<BlockQ8K> {
        BlockQ4_Kx8::acts(r, n)
    }
    fn ggml_dot(w: &[BlockQ5K], x: &[BlockQ8K]) -> f32 {
        vec_dot_q5_k_q8_k_ref(w, x)
    }
    fn ggml_dequantize(w: &[BlockQ5K], out: &mut [f32]) {
        dequantize_row_q5_k(w, out).unwrap()
    }
}

impl Format for BlockQ6_Kx8 {
    /// Scales use the whole i8 range (a file may hold -128).
    fn weights(r: &mut StdRng, n: usize) -> Vec<BlockQ6K> {
        (0..n)
            .map(|_| BlockQ6K {
                ql: std::array::from_fn(|_| r.gen()),
                qh: std::array::from_fn(|_| r.gen()),
                scales: std::array::from_fn(|_| r.gen()),
                d: f16::from_f32(r.gen_range(-0.001f32..0.001)),
            })
            .collect()
    }
    fn acts(r: &mut StdRng, n: usize) -> Vec<BlockQ8K> {
        BlockQ4_Kx8::acts(r, n)
    }
    fn ggml_dot(w: &[BlockQ6K], x: &[BlockQ8K]) -> f32 {
        vec_dot_q6_k_q8_k_ref(w, x)
    }
    fn ggml_dequantize(w: &[BlockQ6K], out: &mut [f32]) {
        dequantize_row_q6_k(w, out).unwrap()
    }
}

fn product<P: Interleaved>(w: &Packed<P>, x: &[P::Act], n: usize, threads: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n * w.rows()];
    pool(threads)
        .install(|| matmul_packed(w, x, n, &mut out))
        .unwrap();
    out
}

/// The blocks as their GGUF bytes (the block types are `repr(C)` with the file's layout).
fn as_bytes<B: Block>(w: &[B]) -> &[u8] {
    assert_eq!(std::mem::size_of::<B>(), B::BYTES);
    // SAFETY: `w` is `w.len()` initialised `repr(C)` blocks of `B::BYTES` bytes without
    // padding (asserted above), read as bytes for the borrow's lifetime.
    unsafe { std::slice::from_raw_parts(w.as_ptr() as *const u8, std::mem::size_of_val(w)) }
}

fn packing_keeps_every_block<P>(seed: u64)
where
    P: Format + PartialEq,
    P::Row: Block + PartialEq + std::fmt::Debug,
{
    let mut r = rng(seed);
    for (rows, nb) in SHAPES {
        let w = P::weights(&mut r, rows * nb);
        let p = Packed::<P>::pack(&w, rows).unwrap();
        let bytes = as_bytes(&w);
        assert_eq!(blocks_from_bytes::<P::Row>(bytes).unwrap(), w);
        assert!(
            Packed::<P>::pack_bytes(bytes, rows).unwrap() == p,
            "pack_bytes differs"
        );
        assert!(Packed::<P>::pack_bytes(&bytes[1..], rows).is_err());
        assert_eq!((p.rows(), p.blocks_per_row()), (rows, nb));
        assert_eq!(p.blocks().len(), rows.div_ceil(8) * nb);
        for i in 0..rows {
            for b in 0..nb {
                assert_eq!(p.row_block(i, b), w[i * nb + b], "row {i} block {b}");
            }
            let (mut got, mut want) = (vec![0.0; nb * P::VALUES], vec![0.0; nb * P::VALUES]);
            p.dequantize_row(i, &mut got).unwrap();
            P::ggml_dequantize(&w[i * nb..(i + 1) * nb], &mut want);
            assert_eq!(got, want);
        }
        assert!(p
            .dequantize_row(rows, &mut vec![0.0; nb * P::VALUES])
            .is_err());
    }
}

fn simd_matches_reference_bit_for_bit<P: Format>(seed: u64) {
    let mut r = rng(seed);
    for (rows, nb) in SHAPES {
        let p = Packed::<P>::pack(&P::weights(&mut r, rows * nb), rows).unwrap();
        for n in TOKENS {
            let x = P::acts(&mut r, n * nb);
            let mut want = vec![f32::NAN; n * rows];
            matmul_packed_ref(&p, &x, n, &mut want).unwrap();
            for threads in [1, 2, 3] {
                let got = product(&p, &x, n, threads);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{rows}x{nb}, n {n}, output {i}");
                }
            }
            // The tiles alone, where many tokens would take another route.
            let mut got = vec![f32::NAN; n * rows];
            pool(2)
                .install(|| matmul_packed_tiles(&p, &x, n, &mut got))
                .unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "tiles {rows}x{nb}, n {n}, output {i}"
                );
            }
        }
    }
}

fn a_token_gets_the_same_outputs_alone_and_in_a_batch<P: Format>(seed: u64) {
    let mut r = rng(seed);
    let (rows, nb) = (40, 18);
    let p = Packed::<P>::pack(&P::weights(&mut r, rows * nb), rows).unwrap();
    let n = 11;
    let x = P::acts(&mut r, n * nb);
    let batch = product(&p, &x, n, 2);
    for t in 0..n {
        let alone = product(&p, &x[t * nb..(t + 1) * nb], 1, 1);
        assert_eq!(alone, batch[t * rows..(t + 1) * rows], "token {t}");
    }
}

fn agrees_with_ggml_row_dot_up_to_rounding<P: Format>(seed: u64) {
    let mut r = rng(seed);
    let (rows, nb) = (24, 48);
    let w = P::weights(&mut r, rows * nb);
    let p = Packed::<P>::pack(&w, rows).unwrap();
    let n = 6;
    let x = P::acts(&mut r, n * nb);
    let got = product(&p, &x, n, 2);
    for t in 0..n {
        for i in 0..rows {
            let (wr, xr) = (&w[i * nb..(i + 1) * nb], &x[t * nb..(t + 1) * nb]);
            let want = P::ggml_dot(wr, xr);
            let g = got[t * rows + i];
            // Both round each block's term and the running sum: the gap scales with
            // the terms' magnitudes, not with their (possibly cancelling) sum.
            let magnitude: f32 = (0..nb)
                .map(|b| P::ggml_dot(&wr[b..b + 1], &xr[b..b + 1]).abs())
                .sum();
            let tol = 1e-5 * magnitude.max(1.0);
            assert!((g - want).abs() <= tol, "row {i} token {t}: {g} vs {want}");
        }
    }
}

fn shapes_are_checked<P: Format>(seed: u64) {
    let mut r = rng(seed);
    let p = Packed::<P>::pack(&P::weights(&mut r, 16 * 2), 16).unwrap();
    let x = P::acts(&mut r, 2 * 2);
    assert!(matmul_packed(&p, &x, 3, &mut [0.0; 48]).is_err());
    assert!(matmul_packed(&p, &x, 2, &mut [0.0; 31]).is_err());
    assert!(Packed::<P>::pack(&P::weights(&mut r, 7), 2).is_err());
}

macro_rules! format_tests {
    ($m:ident, $p:ty, $seed:expr) => {
        mod $m {
            use super::*;
            #[test]
            fn packing_keeps_every_block() {
                super::packing_keeps_every_block::<$p>($seed);
            }
            #[test]
            fn simd_matches_reference_bit_for_bit() {
                super::simd_matches_reference_bit_for_bit::<$p>($seed + 1);
            }
            #[test]
            fn a_token_gets_the_same_outputs_alone_and_in_a_batch() {
                super::a_token_gets_the_same_outputs_alone_and_in_a_batch::<$p>($seed + 2);
            }
            #[test]
            fn agrees_with_ggml_row_dot_up_to_rounding() {
                super::agrees_with_ggml_row_dot_up_to_rounding::<$p>($seed + 3);
            }
            #[test]
            fn shapes_are_checked() {
                super::shapes_are_checked::<$p>($seed + 4);
            }
        }
    };
}

/// Token counts for the wide path: one token, a narrow (at most 8) tile, a whole
/// tile, one past it, several.
const WIDE_TOKENS: [usize; 7] = [1, 8, 9, 15, 16, 17, 50];

fn wide_path_matches_reference_bit_for_bit<P: Format + wide::Wide>(seed: u64) {
    let mut r = rng(seed);
    for (rows, nb) in SHAPES {
        let p = Packed::<P>::pack(&P::weights(&mut r, rows * nb), rows).unwrap();
        for n in WIDE_TOKENS {
            let x = P::acts(&mut r, n * nb);
            let mut want = vec![f32::NAN; n * rows];
            matmul_packed_ref(&p, &x, n, &mut want).unwrap();
            for (simd, threads) in [(false, 1), (true, 1), (true, 3)] {
                let mut got = vec![f32::NAN; n * rows];
                pool(threads)
                    .install(|| wide::matmul_wide(&p, &x, n, simd, &mut got))
                    .unwrap();
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        w.to_bits(),
                        "{rows}x{nb}, n {n}, simd {simd}, output {i}"
                    );
                }
            }
        }
    }
    let x = P::acts(&mut r, 2 * 2);
    let p = Packed::<P>::pack(&P::weights(&mut r, 16 * 2), 16).unwrap();
    assert!(wide::matmul_wide(&p, &x, 3, true, &mut [0.0; 48]).is_err());
    assert!(wide::matmul_wide(&p, &x, 2, true, &mut [0.0; 31]).is_err());
}

#[test]
fn q4_k_wide_path_matches_reference_bit_for_bit() {
    wide_path_matches_reference_bit_for_bit::<BlockQ4_Kx8>(57);
}

#[test]
fn q5_k_wide_path_matches_reference_bit_for_bit() {
    wide_path_matches_reference_bit_for_bit::<BlockQ5_Kx8>(77);
}

#[test]
fn q6_k_wide_path_matches_reference_bit_for_bit() {
    wide_path_matches_reference_bit_for_bit::<BlockQ6_Kx8>(67);
}

format_tests!(q4_1x8, BlockQ4_1x8, 31);
format_tests!(q8_0x8, BlockQ8_0x8, 41);
format_tests!(q5_0x8, BlockQ5_0x8, 81);
format_tests!(q5_1x8, BlockQ5_1x8, 91);
format_tests!(q4_kx8, BlockQ4_Kx8, 51);
format_tests!(q5_kx8, BlockQ5_Kx8, 71);
format_tests!(q6_kx8, BlockQ6_Kx8, 61);

#[test]
fn q4_1_extreme_quants_do_not_overflow() {
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
fn q8_0_extreme_quants_do_not_overflow() {
    // Weights of -128 and 127 against activations of -127 and 127: the u8 x i8
    // pairs are at their bound (2 * 128 * 127 < 2^15) and widened to i32 per chunk.
    let (rows, nb) = (8, 4);
    for wq in [-128i8, 127] {
        let w: Vec<BlockQ8_0> = (0..rows * nb)
            .map(|_| BlockQ8_0 {
                d: f16::from_f32(1.0),
                qs: [wq; QK],
            })
            .collect();
        let p = PackedQ8_0::pack(&w, rows).unwrap();
        for q in [-127i8, 127] {
            let x: Vec<BlockQ8_0> = (0..nb)
                .map(|_| BlockQ8_0 {
                    d: f16::from_f32(1.0),
                    qs: [q; QK],
                })
                .collect();
            let got = product(&p, &x, 1, 1);
            let want = (nb * QK) as f32 * wq as f32 * q as f32;
            assert!(got.iter().all(|&g| g == want), "{got:?} != {want}");
        }
    }
}

#[test]
fn q4_k_extreme_quants_do_not_overflow() {
    // Every nibble 15 and every scale 63 against activations of -128 and 127: the i16
    // pair sums of a sub-block pair are at their bound before the scale `madd`.
    let (rows, nb) = (8, 4);
    let w: Vec<BlockQ4K> = (0..rows * nb)
        .map(|_| BlockQ4K {
            d: f16::from_f32(1.0),
            dmin: f16::from_f32(0.0),
            scales: [0xFF; 12],
            qs: [0xFF; QK_K / 2],
        })
        .collect();
    let p = PackedQ4K::pack(&w, rows).unwrap();
    for q in [-128i8, 127] {
        let x: Vec<BlockQ8K> = (0..nb)
            .map(|_| BlockQ8K {
                d: 1.0,
                qs: [q; QK_K],
                bsums: [16 * q as i16; QK_K / 16],
            })
            .collect();
        // One token, a full tile of eight, and enough for the wide path (`Wide::MIN_TOKENS`).
        for n in [1, 8, 24] {
            let x: Vec<BlockQ8K> = x.iter().cycle().take(n * nb).cloned().collect();
            let got = product(&p, &x, n, 1);
            let want = (nb * QK_K) as f32 * 15.0 * 63.0 * q as f32;
            assert!(got.iter().all(|&g| g == want), "{got:?} != {want}");
        }
    }
}

#[test]
fn q6_k_extreme_quants_do_not_overflow() {
    // Every quant 63 (offset 31) and every scale -128 against activations of -128 and
    // 127: the u8 x i8 pairs are at their bound, two chunks add up in i16 before they
    // meet the scales.
    let (rows, nb) = (8, 4);
    let w: Vec<BlockQ6K> = (0..rows * nb)
        .map(|_| BlockQ6K {
            ql: [0xFF; QK_K / 2],
            qh: [0xFF; QK_K / 4],
            scales: [-128; QK_K / 16],
            d: f16::from_f32(1.0),
        })
        .collect();
    let p = PackedQ6K::pack(&w, rows).unwrap();
    for q in [-128i8, 127] {
        let x: Vec<BlockQ8K> = (0..nb)
            .map(|_| BlockQ8K {
                d: 1.0,
                qs: [q; QK_K],
                bsums: [16 * q as i16; QK_K / 16],
            })
            .collect();
        // One token, a full tile of eight, and enough for the wide path (`Wide::MIN_TOKENS`).
        for n in [1, 8, 24] {
            let x: Vec<BlockQ8K> = x.iter().cycle().take(n * nb).cloned().collect();
            let got = product(&p, &x, n, 1);
            let want = (nb * QK_K) as f32 * -128.0 * 31.0 * q as f32;
            assert!(got.iter().all(|&g| g == want), "{got:?} != {want}");
        }
    }
}

#[test]
fn q5_k_extreme_quants_do_not_overflow() {
    // Every quant 31 and every scale 63 against activations of -128 and 127: four
    // chunks of pairs at their bound stay in i16 before the scales.
    let (rows, nb) = (8, 4);
    let w: Vec<BlockQ5K> = (0..rows * nb)
        .map(|_| BlockQ5K {
            d: f16::from_f32(1.0),
            dmin: f16::from_f32(0.0),
            scales: [0xFF; 12],
            qh: [0xFF; QK_K / 8],
            qs: [0xFF; QK_K / 2],
        })
        .collect();
    let p = PackedQ5K::pack(&w, rows).unwrap();
    for q in [-128i8, 127] {
        let x: Vec<BlockQ8K> = (0..nb)
            .map(|_| BlockQ8K {
                d: 1.0,
                qs: [q; QK_K],
                bsums: [16 * q as i16; QK_K / 16],
            })
            .collect();
        // One token, a full tile of eight, and enough for the wide path (`Wide::MIN_TOKENS`).
        for n in [1, 8, 24] {
            let x: Vec<BlockQ8K> = x.iter().cycle().take(n * nb).cloned().collect();
            let got = product(&p, &x, n, 1);
            let want = (nb * QK_K) as f32 * 31.0 * 63.0 * q as f32;
            assert!(got.iter().all(|&g| g == want), "{got:?} != {want}");
        }
    }
}

#[test]
fn q5_extreme_quants_do_not_overflow() {
    // Q5_0: every value -16 (or 15) against activations of -127 and 127: sixteen
    // products of 16 * 127 stay in i16. Q5_1: every value 31 against -128 and 127: two
    // chunks of pairs at their bound before widening.
    let (rows, nb) = (8, 4);
    for (qh, qs, v) in [
        ([0u8; 4], [0u8; QK / 2], -16.0f32),
        ([0xFF; 4], [0xFF; QK / 2], 15.0),
    ] {
        let w = vec![
            BlockQ5_0 {
                d: f16::from_f32(1.0),
                qh,
                qs
            };
            rows * nb
        ];
        let p = PackedQ5_0::pack(&w, rows).unwrap();
        for q in [-127i8, 127] {
            let x = vec![
                BlockQ8_0 {
                    d: f16::from_f32(1.0),
                    qs: [q; QK]
                };
                nb
            ];
            let got = product(&p, &x, 1, 1);
            let want = (nb * QK) as f32 * v * q as f32;
            assert!(
                got.iter().all(|&g| g == want),
                "q5_0 {v}: {got:?} != {want}"
            );
        }
    }
    let w = vec![
        BlockQ5_1 {
            d: f16::from_f32(1.0),
            m: f16::from_f32(0.0),
            qh: [0xFF; 4],
            qs: [0xFF; QK / 2],
        };
        rows * nb
    ];
    let p = PackedQ5_1::pack(&w, rows).unwrap();
    for q in [-128i8, 127] {
        let x = vec![
            BlockQ8_1 {
                d: f16::from_f32(1.0),
                s: f16::from_f32(0.0),
                qs: [q; QK],
            };
            nb
        ];
        let got = product(&p, &x, 1, 1);
        let want = (nb * QK) as f32 * 31.0 * q as f32;
        assert!(got.iter().all(|&g| g == want), "q5_1: {got:?} != {want}");
    }
}
