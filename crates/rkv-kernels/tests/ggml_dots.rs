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

/// How a format's activations are quantised: blocks of `per` values, rkv's quantiser and
/// the blocks' bytes as ggml lays them out.
struct Acts<A> {
    per: usize,
    quantise: Quantiser<A>,
    bytes: fn(&[A]) -> Vec<u8>,
}

const Q8_0: Acts<BlockQ8_0> = Acts {
    per: QK,
    quantise: quantize_row_q8_0,
    bytes: q8_0_bytes,
};
const Q8_1: Acts<BlockQ8_1> = Acts {
    per: QK,
    quantise: quantize_row_q8_1,
    bytes: q8_1_bytes,
};
const Q8_K: Acts<BlockQ8K> = Acts {
    per: QK_K,
    quantise: quantize_row_q8_k,
    bytes: q8_k_bytes,
};

/// What rkv gives for one case: the FNV of the weight and of the quantised activation
/// bytes, and every dot product path rkv has for the format.
type Outcome = (u64, u64, Vec<(&'static str, f32)>);

/// The case's activations quantised by rkv (one weight block's worth per block), then
/// `dots` of `w` against them.
fn against_acts<W, A: Clone + Default>(
    s: &mut Stream,
    c: &Case,
    weight_fnv: u64,
    w: &[W],
    acts: Acts<A>,
    dots: impl Fn(&[W], &[A]) -> Vec<(&'static str, f32)>,
) -> Outcome {
    let x = activations(s, c.seed, c.blocks * acts.per);
    let mut y = vec![A::default(); c.blocks];
    (acts.quantise)(&x, &mut y).expect("activation shapes");
    (weight_fnv, fnv1a((acts.bytes)(&y)), dots(w, &y))
}

/// A case whose weights are random bytes with sane f16 scales at `f16_offsets`.
fn from_bytes<W: Block, A: Clone + Default>(
    c: &Case,
    f16_offsets: &[usize],
    acts: Acts<A>,
    dots: impl Fn(&[W], &[A]) -> Vec<(&'static str, f32)>,
) -> Outcome {
    let mut s = Stream(c.seed);
    let b = weight_bytes(&mut s, c.blocks, W::BYTES, f16_offsets);
    let w: Vec<W> = blocks_from_bytes(&b).expect("weight bytes");
    against_acts(&mut s, c, fnv1a(b.iter().copied()), &w, acts, dots)
}

/// rkv's outcome for one case.
fn run(c: &Case) -> Outcome {
    match c.format.as_str() {
        "q4_0" => from_bytes(c, &[0], Q8_0, |w: &[BlockQ4_0], y| {
            vec![
                ("simd", vec_dot_q4_0_q8_0(w, y)),
                ("ref", vec_dot_q4_0_q8_0_ref(w, y)),
            ]
        }),
        "q4_1" => from_bytes(c, &[0, 2], Q8_1, |w: &[BlockQ4_1], y| {
            vec![
                ("simd", vec_dot_q4_1_q8_1(w, y)),
                ("ref", vec_dot_q4_1_q8_1_ref(w, y)),
            ]
        }),
        "q5_0" => from_bytes(c, &[0], Q8_0, |w: &[BlockQ5_0], y| {
            vec![("ref", vec_dot_q5_0_q8_0_ref(w, y))]
        }),
        "q5_1" => from_bytes(c, &[0, 2], Q8_1, |w: &[BlockQ5_1], y| {
            vec![("ref", vec_dot_q5_1_q8_1_ref(w, y))]
        }),
        "q8_0" => {
            // ggml's quantisation of random floats (a file never holds a quant of -128).
            let mut s = Stream(c.seed);
            let xw = s.floats(c.blocks * QK);
            let mut w = vec![BlockQ8_0::default(); c.blocks];
            quantize_row_q8_0(&xw, &mut w).expect("q8_0 shapes");
            let wfnv = fnv1a(q8_0_bytes(&w));
            against_acts(&mut s, c, wfnv, &w, Q8_0, |w, y| {
                vec![
                    ("simd", vec_dot_q8_0_q8_0(w, y)),
                    ("ref", vec_dot_q8_0_q8_0_ref(w, y)),
                ]
            })
        }
        "q4_K" => from_bytes(c, &[0, 2], Q8_K, |w: &[BlockQ4K], y| {
            vec![("ref", vec_dot_q4_k_q8_k_ref(w, y))]
        }),
        "q5_K" => from_bytes(c, &[0, 2], Q8_K, |w: &[BlockQ5K], y| {
            vec![("ref", vec_dot_q5_k_q8_k_ref(w, y))]
        }),
        "q6_K" => from_bytes(c, &[208], Q8_K, |w: &[BlockQ6K], y| {
            vec![("ref", vec_dot_q6_k_q8_k_ref(w, y))]
        }),
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
