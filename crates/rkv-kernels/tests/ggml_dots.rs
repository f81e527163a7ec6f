//! rkv's row dot products and activation quantisers against ggml's own results, bit
//! for bit, on random blocks of every format rkv runs with its own kernels.
//!
//! `tests/data/ggml_dots.txt` was written by `scripts/llamacpp/dot_reference.sh`
//! (`dot_reference.c` linked against llama.cpp's libggml): per case, the FNV-1a of the
//! weight and quantised activation bytes and the bits of ggml's `vec_dot`. The cases'
//! inputs are drawn here from the same splitmix64 stream in the same order, so only
//! ggml's outputs are committed.

use rkv_kernels::*;

const REFERENCE: &str = include_str!("data/ggml_dots.txt");

struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float in [-2, 2) with 23 significant bits (exact, as in the C driver).
    fn float(&mut self) -> f32 {
        ((self.next() >> 40) as i32 - (1 << 23)) as f32 * (1.0 / (1u32 << 22) as f32)
    }

    /// A normal f16 of magnitude 2^-6 .. 2^2, either sign.
    fn f16_bits(&mut self) -> u16 {
        let r = self.next();
        (((r >> 63) << 15) | ((9 + ((r >> 56) & 7)) << 10) | (r & 0x3ff)) as u16
    }

    fn floats(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.float()).collect()
    }
}

fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn q8_0_bytes(y: &[BlockQ8_0]) -> Vec<u8> {
    y.iter()
        .flat_map(|b| {
            let qs = b.qs.iter().map(|&q| q as u8);
            b.d.to_le_bytes().into_iter().chain(qs)
        })
        .collect()
}

fn q8_1_bytes(y: &[BlockQ8_1]) -> Vec<u8> {
    y.iter()
        .flat_map(|b| {
            let qs = b.qs.iter().map(|&q| q as u8);
            let head = [b.d.to_le_bytes(), b.s.to_le_bytes()].concat();
            head.into_iter().chain(qs)
        })
        .collect()
}

fn q8_k_bytes(y: &[BlockQ8K]) -> Vec<u8> {
    y.iter()
        .flat_map(|b| {
            let qs = b.qs.iter().map(|&q| q as u8);
            let sums = b.bsums.iter().flat_map(|s| s.to_le_bytes());
            b.d.to_le_bytes().into_iter().chain(qs).chain(sums)
        })
        .collect()
}

/// One case of the reference file.
struct Case {
    format: String,
    blocks: usize,
    seed: u64,
    weight_fnv: u64,
    act_fnv: u64,
    dot_bits: u32,
}

fn cases() -> Vec<Case> {
    let parse_hex = |s: &str| u64::from_str_radix(s, 16).expect("hex field");
    REFERENCE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 6, "malformed line {l:?}");
            Case {
                format: f[0].to_string(),
                blocks: f[1].parse().expect("blocks"),
                seed: f[2].parse().expect("seed"),
                weight_fnv: parse_hex(f[3]),
                act_fnv: parse_hex(f[4]),
                dot_bits: parse_hex(f[5]) as u32,
            }
        })
        .collect()
}

/// Random weight bytes with sane f16 scales at `f16_offsets` of each block.
fn weight_bytes(s: &mut Stream, blocks: usize, size: usize, f16_offsets: &[usize]) -> Vec<u8> {
    let mut w: Vec<u8> = (0..blocks * size).map(|_| (s.next() >> 56) as u8).collect();
    for b in 0..blocks {
        for &o in f16_offsets {
            let h = s.f16_bits().to_le_bytes();
            w[b * size + o..b * size + o + 2].copy_from_slice(&h);
        }
    }
    w
}

/// The case's activations (one scaled by 64 in every third case).
fn activations(s: &mut Stream, seed: u64, n: usize) -> Vec<f32> {
    let mut x = s.floats(n);
    if seed % 3 == 1 {
        let i = (s.next() % n as u64) as usize;
        x[i] *= 64.0;
    }
    x
}

type Quantiser<B> = fn(&[f32], &mut [B]) -> Result<(), KernelError>;

/// The case's activations quantised by rkv into blocks of `per` values, and the FNV of
/// their bytes.
fn quantised<B: Clone + Default>(
    s: &mut Stream,
    seed: u64,
    n: usize,
    per: usize,
    quantise: Quantiser<B>,
    bytes: fn(&[B]) -> Vec<u8>,
) -> (u64, Vec<B>) {
    let x = activations(s, seed, n);
    let mut y = vec![B::default(); n / per];
    quantise(&x, &mut y).expect("activation shapes");
    (fnv1a(bytes(&y)), y)
}

/// rkv's weight FNV, activation FNV and dot products (every path rkv has for the
/// format) for one case.
fn run(c: &Case) -> (u64, u64, Vec<(&'static str, f32)>) {
    let mut s = Stream(c.seed);
    let (nb, seed) = (c.blocks, c.seed);
    let n = nb * QK;
    let nk = nb * QK_K;
    let fnv = |b: &[u8]| fnv1a(b.iter().copied());
    match c.format.as_str() {
        "q4_0" => {
            let b = weight_bytes(&mut s, nb, 18, &[0]);
            let w: Vec<BlockQ4_0> = blocks_from_bytes(&b).expect("q4_0 bytes");
            let (a, y) = quantised(&mut s, seed, n, QK, quantize_row_q8_0, q8_0_bytes);
            let dots = vec![
                ("simd", vec_dot_q4_0_q8_0(&w, &y)),
                ("ref", vec_dot_q4_0_q8_0_ref(&w, &y)),
            ];
            (fnv(&b), a, dots)
        }
        "q4_1" => {
            let b = weight_bytes(&mut s, nb, 20, &[0, 2]);
            let w: Vec<BlockQ4_1> = blocks_from_bytes(&b).expect("q4_1 bytes");
            let (a, y) = quantised(&mut s, seed, n, QK, quantize_row_q8_1, q8_1_bytes);
            let dots = vec![
                ("simd", vec_dot_q4_1_q8_1(&w, &y)),
                ("ref", vec_dot_q4_1_q8_1_ref(&w, &y)),
            ];
            (fnv(&b), a, dots)
        }
        "q5_0" => {
            let b = weight_bytes(&mut s, nb, 22, &[0]);
            let w: Vec<BlockQ5_0> = blocks_from_bytes(&b).expect("q5_0 bytes");
            let (a, y) = quantised(&mut s, seed, n, QK, quantize_row_q8_0, q8_0_bytes);
            (fnv(&b), a, vec![("ref", vec_dot_q5_0_q8_0_ref(&w, &y))])
        }
        "q5_1" => {
            let b = weight_bytes(&mut s, nb, 24, &[0, 2]);
            let w: Vec<BlockQ5_1> = blocks_from_bytes(&b).expect("q5_1 bytes");
            let (a, y) = quantised(&mut s, seed, n, QK, quantize_row_q8_1, q8_1_bytes);
            (fnv(&b), a, vec![("ref", vec_dot_q5_1_q8_1_ref(&w, &y))])
        }
        "q8_0" => {
            // ggml's quantisation of random floats (a file never holds a quant of -128).
            let xw = s.floats(n);
            let mut w = vec![BlockQ8_0::default(); nb];
            quantize_row_q8_0(&xw, &mut w).expect("q8_0 shapes");
            let (a, y) = quantised(&mut s, seed, n, QK, quantize_row_q8_0, q8_0_bytes);
            let dots = vec![
                ("simd", vec_dot_q8_0_q8_0(&w, &y)),
                ("ref", vec_dot_q8_0_q8_0_ref(&w, &y)),
            ];
            (fnv1a(q8_0_bytes(&w)), a, dots)
        }
        "q4_K" => {
            let b = weight_bytes(&mut s, nb, 144, &[0, 2]);
            let w: Vec<BlockQ4K> = blocks_from_bytes(&b).expect("q4_K bytes");
            let (a, y) = quantised(&mut s, seed, nk, QK_K, quantize_row_q8_k, q8_k_bytes);
            (fnv(&b), a, vec![("ref", vec_dot_q4_k_q8_k_ref(&w, &y))])
        }
        "q5_K" => {
            let b = weight_bytes(&mut s, nb, 176, &[0, 2]);
            let w: Vec<BlockQ5K> = blocks_from_bytes(&b).expect("q5_K bytes");
            let (a, y) = quantised(&mut s, seed, nk, QK_K, quantize_row_q8_k, q8_k_bytes);
            (fnv(&b), a, vec![("ref", vec_dot_q5_k_q8_k_ref(&w, &y))])
        }
        "q6_K" => {
            let b = weight_bytes(&mut s, nb, 210, &[208]);
            let w: Vec<BlockQ6K> = blocks_from_bytes(&b).expect("q6_K bytes");
            let (a, y) = quantised(&mut s, seed, nk, QK_K, quantize_row_q8_k, q8_k_bytes);
            (fnv(&b), a, vec![("ref", vec_dot_q6_k_q8_k_ref(&w, &y))])
        }
        other => panic!("unknown format {other:?} in the reference"),
    }
}

#[test]
fn dots_and_quantisers_equal_ggml_bit_for_bit() {
    let cases = cases();
    let formats = [
        "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K",
    ];
    for f in formats {
        assert!(
            cases.iter().filter(|c| c.format == f).count() >= 16,
            "the reference has too few {f} cases"
        );
    }
    let mut failures = Vec::new();
    for c in &cases {
        let (wfnv, afnv, dots) = run(c);
        let at = format!("{} blocks={} seed={}", c.format, c.blocks, c.seed);
        assert_eq!(wfnv, c.weight_fnv, "{at}: weights are not ggml's");
        assert_eq!(
            afnv, c.act_fnv,
            "{at}: activation quantisation differs from ggml's"
        );
        for (path, d) in dots {
            if d.to_bits() != c.dot_bits {
                let want = f32::from_bits(c.dot_bits);
                failures.push(format!(
                    "{at} {path}: {d:e} ({:08x}) vs ggml {want:e} ({:08x})",
                    d.to_bits(),
                    c.dot_bits
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from ggml:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
