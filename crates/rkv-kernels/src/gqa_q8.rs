//! Row-batched GQA attention kernels over a KV cache of ggml `q8_0` blocks (32 signed
//! 8-bit values and one f16 scale `d`, value = `d * q`): all the scores of a group of `g`
//! query heads against `n` cached keys, and the score-weighted sum of `n` cached values,
//! read from the 8-bit rows as they lie (no widened copy of the cache).
//!
//! Rows are contiguous: row `j` is blocks `j * d / 32 .. (j + 1) * d / 32` (`d` a
//! multiple of 32). Numerics: queries and weights stay f32 (ggml quantises the query to
//! q8_0 for its product; we do not, see docs/kv-dtype.md); each cached value is
//! dequantised exactly (an f16 scale times an integer of at most 8 bits has at most 19
//! significant bits, so `d * q` is exact in f32), then f32 FMA accumulation. The scalar
//! reference sums in row order; the SIMD paths (`gqa_q8_avx512.rs`, `gqa_q8_avx2.rs`,
//! chosen at run time from the CPU's features) in lanes, so they agree to f32 rounding.
//! Must not know: the engine's block tables, policies.

use crate::blocks::{BlockQ8_0, QK};

/// Checks the shared contract and returns `(g, n)`.
fn shape(cache_blocks: usize, d: usize, heads_len: usize, gn: usize) -> (usize, usize) {
    assert!(
        d > 0 && d.is_multiple_of(QK),
        "gqa q8_0: head size must be a positive multiple of 32"
    );
    assert!(
        heads_len.is_multiple_of(d),
        "gqa q8_0: heads buffer is not [g, d]"
    );
    let g = heads_len / d;
    assert!(
        g > 0 && gn.is_multiple_of(g),
        "gqa q8_0: scores/weights are not [g, n]"
    );
    let n = gn / g;
    // Checked: a wrapped product would pass and let the fast path read outside the cache.
    let need = n.checked_mul(d / QK);
    assert!(
        need.is_some_and(|b| b <= cache_blocks),
        "gqa q8_0: cache too short"
    );
    (g, n)
}

/// The SIMD path a call takes on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// The fastest path this CPU has for head size `d`.
fn path(d: usize) -> Path {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::gqa_q8_avx512::fits(d) && crate::simd::avx512f() {
            return Path::Avx512;
        }
        if crate::gqa_q8_avx2::fits(d) && crate::simd::avx2() {
            return Path::Avx2;
        }
    }
    let _ = d;
    Path::Scalar
}

/// `scores[h * n + j] = dot(qs[h], row j dequantised)` for the `g = qs.len() / d` heads
/// and `n = scores.len() / g` rows of `k` (`[n, d / 32]` blocks).
///
/// # Panics
/// If `d` is not a positive multiple of 32, `qs.len() % d != 0`,
/// `scores.len() % g != 0` or `k` holds fewer than `n * d / 32` blocks.
pub fn gqa_scores_q8_0(k: &[BlockQ8_0], d: usize, qs: &[f32], scores: &mut [f32]) {
    scores_on(path(d), k, d, qs, scores);
}

/// [`gqa_scores_q8_0`] on a given path (tests force each one the CPU has).
pub(crate) fn scores_on(p: Path, k: &[BlockQ8_0], d: usize, qs: &[f32], scores: &mut [f32]) {
    let (g, n) = shape(k.len(), d, qs.len(), scores.len());
    match p {
        Path::Scalar => scores_ref(k, d, qs, scores, g, n),
        // SAFETY: `path` (or the test that forces it) checked the CPU's features and
        // `fits(d)`; `shape` checked the lengths.
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe { crate::gqa_q8_avx2::scores(k, d, qs, scores, g, n) },
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => unsafe { crate::gqa_q8_avx512::scores(k, d, qs, scores, g, n) },
    }
}

/// `out[h] += sum_j w[h * n + j] * (row j dequantised)` for the `g = out.len() / d` heads
/// and `n = w.len() / g` rows of `v` (`[n, d / 32]` blocks).
///
/// # Panics
/// As [`gqa_scores_q8_0`], with `out` for `qs` and `w` for `scores`.
pub fn gqa_weighted_sum_q8_0(v: &[BlockQ8_0], d: usize, w: &[f32], out: &mut [f32]) {
    weighted_sum_on(path(d), v, d, w, out);
}

/// [`gqa_weighted_sum_q8_0`] on a given path.
pub(crate) fn weighted_sum_on(p: Path, v: &[BlockQ8_0], d: usize, w: &[f32], out: &mut [f32]) {
    let (g, n) = shape(v.len(), d, out.len(), w.len());
    // Heads whose sums share one pass over the rows on each path.
    let most = match p {
        Path::Scalar => g,
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => crate::gqa_q8_avx2::SUM_HEADS,
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => crate::gqa_q8_avx512::SUM_HEADS,
    };
    let mut h0 = 0;
    while h0 < g {
        let gs = (g - h0).min(most);
        let (o, wg) = (&mut out[h0 * d..(h0 + gs) * d], &w[h0 * n..(h0 + gs) * n]);
        match p {
            Path::Scalar => weighted_sum_ref(v, d, wg, o, gs, n),
            // SAFETY: as in `scores_on`; gs <= the path's SUM_HEADS.
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => unsafe { crate::gqa_q8_avx2::weighted_sum(v, d, wg, o, gs, n) },
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => unsafe { crate::gqa_q8_avx512::weighted_sum(v, d, wg, o, gs, n) },
        }
        h0 += gs;
    }
}

/// The scalar reference of [`gqa_scores_q8_0`] (also the path of CPUs without AVX2):
/// each row's values dequantised, summed in order.
fn scores_ref(k: &[BlockQ8_0], d: usize, qs: &[f32], scores: &mut [f32], g: usize, n: usize) {
    let nb = d / QK;
    for j in 0..n {
        let row = &k[j * nb..(j + 1) * nb];
        for h in 0..g {
            let q = &qs[h * d..(h + 1) * d];
            let mut acc = 0.0f32;
            for (blk, qb) in row.iter().zip(q.chunks_exact(QK)) {
                let s = blk.d.to_f32();
                for (&x, &y) in blk.qs.iter().zip(qb) {
                    acc += s * f32::from(x) * y;
                }
            }
            scores[h * n + j] = acc;
        }
    }
}

/// The scalar reference of [`gqa_weighted_sum_q8_0`].
fn weighted_sum_ref(v: &[BlockQ8_0], d: usize, w: &[f32], out: &mut [f32], g: usize, n: usize) {
    let nb = d / QK;
    for j in 0..n {
        let row = &v[j * nb..(j + 1) * nb];
        for h in 0..g {
            let wj = w[h * n + j];
            let o = &mut out[h * d..(h + 1) * d];
            for (blk, ob) in row.iter().zip(o.chunks_exact_mut(QK)) {
                let s = blk.d.to_f32();
                for (&x, y) in blk.qs.iter().zip(ob) {
                    *y += wj * (s * f32::from(x));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantize::quantize_row_q8_0;
    use half::f16;

    /// Deterministic values in `[-scale, scale)`.
    fn floats(seed: &mut u64, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    fn quantised(x: &[f32]) -> Vec<BlockQ8_0> {
        let mut b = vec![BlockQ8_0::default(); x.len() / QK];
        quantize_row_q8_0(x, &mut b).expect("whole blocks");
        b
    }

    fn dequantised(b: &[BlockQ8_0]) -> Vec<f32> {
        let mut y = vec![0.0; b.len() * QK];
        crate::blocks::dequantize_row_q8_0(b, &mut y).expect("whole blocks");
        y
    }

    /// Every path this CPU has.
    fn paths() -> Vec<Path> {
        let mut ps = vec![Path::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            if crate::simd::avx2() {
                ps.push(Path::Avx2);
            }
            if crate::simd::avx512f() {
                ps.push(Path::Avx512);
            }
        }
        ps
    }

    /// Shapes: head sizes 32..256, groups of 1 to 12 heads (past each path's one-pass
    /// count), whole row blocks and tails, no rows.
    const SHAPES: [(usize, usize, usize); 12] = [
        (3, 64, 37),
        (1, 64, 5),
        (4, 64, 16),
        (9, 64, 12),
        (2, 64, 0),
        (6, 128, 29),
        (7, 128, 17),
        (12, 128, 3),
        (2, 32, 13),
        (3, 96, 8),
        (5, 160, 33),
        (2, 256, 21),
    ];

    /// Every SIMD path agrees with the scalar reference to f32 rounding, on scores and
    /// weighted sums, for every shape; and the reference equals the dot products of the
    /// exactly dequantised rows computed in f64 to f32 rounding.
    #[test]
    fn paths_agree_with_the_scalar_reference() {
        let mut seed = 7u64;
        for (g, d, n) in SHAPES {
            let k = quantised(&floats(&mut seed, n.max(1) * d, 3.0));
            let v = quantised(&floats(&mut seed, n.max(1) * d, 2.0));
            let (kf, vf) = (dequantised(&k), dequantised(&v));
            let qs = floats(&mut seed, g * d, 1.0);
            let mut want = vec![0.0f32; g * n];
            scores_on(Path::Scalar, &k, d, &qs, &mut want);
            for h in 0..g {
                for j in 0..n {
                    let (q, r) = (&qs[h * d..(h + 1) * d], &kf[j * d..(j + 1) * d]);
                    let exact: f64 = q.iter().zip(r).map(|(&a, &b)| a as f64 * b as f64).sum();
                    let mag: f64 = q.iter().zip(r).map(|(&a, &b)| (a * b).abs() as f64).sum();
                    let got = want[h * n + j] as f64;
                    assert!((got - exact).abs() <= 1e-6 * mag + 1e-9, "g={g} d={d}");
                }
            }
            let w = floats(&mut seed, g * n, 1.0);
            let out0 = floats(&mut seed, g * d, 1.0);
            let mut sum_want = out0.clone();
            weighted_sum_on(Path::Scalar, &v, d, &w, &mut sum_want);
            for p in paths() {
                let mut got = vec![f32::NAN; g * n];
                scores_on(p, &k, d, &qs, &mut got);
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    let (h, j) = (i / n.max(1), i % n.max(1));
                    let q = &qs[h * d..(h + 1) * d];
                    let mag: f32 = q.iter().zip(&kf[j * d..]).map(|(a, b)| (a * b).abs()).sum();
                    assert!((a - b).abs() <= 1e-6 * mag, "{p:?} g={g} d={d} score {i}");
                }
                let mut out = out0.clone();
                weighted_sum_on(p, &v, d, &w, &mut out);
                for (c, (a, b)) in out.iter().zip(&sum_want).enumerate() {
                    let (h, col) = (c / d, c % d);
                    let mag: f32 = out0[c].abs()
                        + (0..n)
                            .map(|j| (w[h * n + j] * vf[j * d + col]).abs())
                            .sum::<f32>();
                    assert!((a - b).abs() <= 1e-6 * mag, "{p:?} g={g} d={d} out {c}");
                }
            }
        }
    }

    /// Reading 8-bit rows in place gives what dequantising them to f16 and running the
    /// f16 kernels gives, up to the f16 rounding of the dequantised values (2^-11
    /// relative) and f32 summation.
    #[test]
    fn agrees_with_dequantise_then_f16_kernels() {
        let mut seed = 11u64;
        for (g, d, n) in SHAPES {
            let k = quantised(&floats(&mut seed, n.max(1) * d, 3.0));
            let v = quantised(&floats(&mut seed, n.max(1) * d, 2.0));
            let to_f16 = |b: &[BlockQ8_0]| -> Vec<f16> {
                dequantised(b).iter().map(|&x| f16::from_f32(x)).collect()
            };
            let (kh, vh) = (to_f16(&k), to_f16(&v));
            let qs = floats(&mut seed, g * d, 1.0);
            let (mut a, mut b) = (vec![0.0; g * n], vec![0.0; g * n]);
            gqa_scores_q8_0(&k, d, &qs, &mut a);
            crate::gqa::gqa_scores_f16(&kh, d, d, &qs, &mut b);
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                let (h, j) = (i / n.max(1), i % n.max(1));
                let q = &qs[h * d..(h + 1) * d];
                let mag: f32 = q
                    .iter()
                    .zip(&kh[j * d..])
                    .map(|(a, b)| (a * b.to_f32()).abs())
                    .sum();
                assert!((x - y).abs() <= 1e-3 * mag, "g={g} d={d} score {i}");
            }
            let w = floats(&mut seed, g * n, 1.0);
            let (mut oa, mut ob) = (vec![0.0; g * d], vec![0.0; g * d]);
            gqa_weighted_sum_q8_0(&v, d, &w, &mut oa);
            crate::gqa::gqa_weighted_sum_f16(&vh, d, d, &w, &mut ob);
            for (c, (x, y)) in oa.iter().zip(&ob).enumerate() {
                let (h, col) = (c / d, c % d);
                let mag: f32 = (0..n)
                    .map(|j| (w[h * n + j] * vh[j * d + col].to_f32()).abs())
                    .sum();
                assert!((x - y).abs() <= 1e-3 * mag + 1e-6, "g={g} d={d} out {c}");
            }
        }
    }

    /// Rows past the `n` asked for are never read: a cache of exactly `n` rows works on
    /// every path, and a shorter one is refused before any path runs.
    #[test]
    #[should_panic(expected = "cache too short")]
    fn short_cache_panics() {
        let k = vec![BlockQ8_0::default(); 2 * 3 - 1];
        gqa_scores_q8_0(&k, 64, &[0.0; 64], &mut [0.0; 3]);
    }

    #[test]
    #[should_panic(expected = "multiple of 32")]
    fn head_size_not_a_multiple_of_32_panics() {
        let v = vec![BlockQ8_0::default(); 8];
        gqa_weighted_sum_q8_0(&v, 48, &[1.0; 2], &mut [0.0; 48]);
    }
}
