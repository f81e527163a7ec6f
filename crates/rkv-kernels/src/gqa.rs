//! Row-batched GQA attention kernels over a strided f16 KV cache: all the
//! scores of a group of `g` query heads against `n` cached keys, and the
//! score-weighted sum of `n` cached values, in one call each.
//!
//! Cache rows are `d` values at `k[j * stride..]` (so `[pos, kv_head, d]`
//! layouts work with `stride = kv_heads * d` and the slice starting at the
//! head's offset). Numerics: exact f16 -> f32 widening, f32 FMA accumulation;
//! the summation order differs from the scalar loops (agreement to f32
//! rounding). The SIMD path is chosen at run time from the CPU's features.
//! With AVX-512 and `d == 64`, `g <= 4` the query (or output) heads stay in
//! registers; with AVX-512 and other `d` a multiple of 16, `gqa_avx512.rs` takes the
//! whole group at once. Otherwise groups of more than 4 query heads go through 4 at a
//! time (each part re-reads the rows from cache): with AVX2 and `d` a multiple of 32,
//! `gqa_avx2.rs`'s blocked kernels run; other shapes loop over [`dot_f16_multi`] /
//! [`axpy_f16_multi`].

use half::f16;

use crate::attn::{axpy_f16_multi, dot_f16_multi};

/// Query heads one call of a SIMD kernel takes; larger groups (6 in R1-Distill-Qwen-1.5B,
/// 7 in -7B) go through in parts of this many.
const HEADS: usize = 4;

/// Checks the shared contract and returns `(g, n)`.
fn shape(cache: usize, stride: usize, d: usize, heads_len: usize, gn: usize) -> (usize, usize) {
    assert!(d > 0 && d <= stride, "gqa: need 0 < d <= stride");
    assert!(
        heads_len.is_multiple_of(d),
        "gqa: heads buffer is not [g, d]"
    );
    let g = heads_len / d;
    assert!(
        g > 0 && gn.is_multiple_of(g),
        "gqa: scores/weights are not [g, n]"
    );
    let n = gn / g;
    // Checked: a wrapped product would pass and let the fast path read outside `cache`.
    let end = match n {
        0 => Some(0),
        _ => (n - 1).checked_mul(stride).and_then(|x| x.checked_add(d)),
    };
    assert!(end.is_some_and(|e| e <= cache), "gqa: cache too short");
    (g, n)
}

/// `scores[h * n + j] = dot(k row j, qs[h])` for the `g = qs.len() / d`
/// heads and `n = scores.len() / g` rows (row `j` is `k[j*stride..j*stride+d]`).
///
/// # Panics
/// If `d == 0`, `d > stride`, `qs.len() % d != 0`, `scores.len() % g != 0` or
/// `k` is shorter than `(n - 1) * stride + d`.
pub fn gqa_scores_f16(k: &[f16], stride: usize, d: usize, qs: &[f32], scores: &mut [f32]) {
    let (g, n) = shape(k.len(), stride, d, qs.len(), scores.len());
    #[cfg(target_arch = "x86_64")]
    if wide_heads(d, g) {
        // SAFETY: the CPU has AVX-512F (checked by `wide_heads`); the shapes were checked
        // by `shape` and `fits`.
        unsafe { crate::gqa_avx512::scores(k, stride, d, qs, scores, g, n) };
        return;
    }
    head_groups(g, HEADS, |h0, gs| {
        let (q, s) = (
            &qs[h0 * d..(h0 + gs) * d],
            &mut scores[h0 * n..(h0 + gs) * n],
        );
        scores_group(k, stride, d, q, s, gs, n);
    });
}

/// Whether `gqa_avx512.rs` takes the whole group: AVX-512F and a head size it fits,
/// except the 64-wide groups of up to four heads that `avx512` below keeps in registers.
#[cfg(target_arch = "x86_64")]
fn wide_heads(d: usize, g: usize) -> bool {
    !(d == avx512::D && g <= HEADS) && crate::gqa_avx512::fits(d) && crate::simd::avx512f()
}

/// Calls `f(h0, gs)` for consecutive groups `h0..h0 + gs` of the `g` heads, each of at most
/// `most` (what a SIMD kernel holds in registers: [`HEADS`] here): rows `h0..h0 + gs` of
/// the `[g, _]` buffers.
fn head_groups(g: usize, most: usize, mut f: impl FnMut(usize, usize)) {
    let mut h0 = 0;
    while h0 < g {
        let gs = (g - h0).min(most);
        f(h0, gs);
        h0 += gs;
    }
}

/// [`gqa_scores_f16`] for `g <= HEADS` heads.
fn scores_group(
    k: &[f16],
    stride: usize,
    d: usize,
    qs: &[f32],
    scores: &mut [f32],
    g: usize,
    n: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if d == avx512::D && g <= 4 && crate::simd::avx512f() {
        // SAFETY: the CPU has AVX-512F (checked above); the shapes were checked by
        // `shape`.
        unsafe { avx512::scores(k, stride, qs, scores, g, n) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    let done = if crate::gqa_avx2::fits(d, g) && crate::simd::avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above); the shapes were
        // checked by `shape` and `fits`.
        unsafe { crate::gqa_avx2::scores(k, stride, d, qs, scores, g, n) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    let mut row = [0.0f32; 16];
    for j in done..n {
        let kj = &k[j * stride..j * stride + d];
        for h0 in (0..g).step_by(16) {
            let hn = (g - h0).min(16);
            dot_f16_multi(kj, &qs[h0 * d..(h0 + hn) * d], &mut row[..hn]);
            for (h, s) in row[..hn].iter().enumerate() {
                scores[(h0 + h) * n + j] = *s;
            }
        }
    }
}

/// `out[h] += sum_j w[h * n + j] * v row j` for the `g = out.len() / d`
/// heads and `n = w.len() / g` rows (row `j` is `v[j*stride..j*stride+d]`).
///
/// # Panics
/// As [`gqa_scores_f16`], with `out` for `qs` and `w` for `scores`.
pub fn gqa_weighted_sum_f16(v: &[f16], stride: usize, d: usize, w: &[f32], out: &mut [f32]) {
    let (g, n) = shape(v.len(), stride, d, out.len(), w.len());
    #[cfg(target_arch = "x86_64")]
    if wide_heads(d, g) {
        head_groups(g, crate::gqa_avx512::SUM_HEADS, |h0, gs| {
            let (o, wg) = (&mut out[h0 * d..(h0 + gs) * d], &w[h0 * n..(h0 + gs) * n]);
            // SAFETY: the CPU has AVX-512F (checked by `wide_heads`); the shapes were
            // checked by `shape` and `fits`, and gs <= SUM_HEADS.
            unsafe { crate::gqa_avx512::weighted_sum(v, stride, d, wg, o, gs, n) };
        });
        return;
    }
    head_groups(g, HEADS, |h0, gs| {
        let (o, wg) = (&mut out[h0 * d..(h0 + gs) * d], &w[h0 * n..(h0 + gs) * n]);
        weighted_sum_group(v, stride, d, wg, o, gs, n);
    });
}

/// [`gqa_weighted_sum_f16`] for `g <= HEADS` heads.
fn weighted_sum_group(
    v: &[f16],
    stride: usize,
    d: usize,
    w: &[f32],
    out: &mut [f32],
    g: usize,
    n: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if d == avx512::D && g <= 4 && crate::simd::avx512f() {
        // SAFETY: the CPU has AVX-512F (checked above); the shapes were checked by
        // `shape`.
        unsafe { avx512::weighted_sum(v, stride, w, out, g, n) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::gqa_avx2::fits(d, g) && crate::simd::avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above); the shapes were
        // checked by `shape` and `fits`.
        unsafe { crate::gqa_avx2::weighted_sum(v, stride, d, w, out, g, n) };
        return;
    }
    let mut a = [0.0f32; 16];
    for j in 0..n {
        let vj = &v[j * stride..j * stride + d];
        for h0 in (0..g).step_by(16) {
            let hn = (g - h0).min(16);
            for (h, ah) in a[..hn].iter_mut().enumerate() {
                *ah = w[(h0 + h) * n + j];
            }
            axpy_f16_multi(&mut out[h0 * d..(h0 + hn) * d], &a[..hn], vj);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use half::f16;
    use std::arch::x86_64::*;

    use crate::gqa_avx512::reduce16;

    /// The head size with a register-resident fast path (4 x 16 lanes).
    pub(super) const D: usize = 64;

    /// Loads row `p[0..64]` of f16 as four f32 vectors.
    ///
    /// # Safety
    /// `p` must be valid for reading 64 f16.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load_row_h(p: *const f16) -> [__m512; 4] {
        let p = p as *const __m256i;
        // SAFETY: 4 x 32 bytes = 64 f16, readable by the caller's contract.
        unsafe {
            [
                _mm512_cvtph_ps(_mm256_loadu_si256(p)),
                _mm512_cvtph_ps(_mm256_loadu_si256(p.add(1))),
                _mm512_cvtph_ps(_mm256_loadu_si256(p.add(2))),
                _mm512_cvtph_ps(_mm256_loadu_si256(p.add(3))),
            ]
        }
    }

    /// Rows scored together: one register of results per head.
    const BLOCK: usize = 16;

    /// # Safety
    /// Requires avx512f. Shapes as checked by `super::shape` with `d == 64`:
    /// `qs.len() == g * 64`, `scores.len() == g * n`, rows in bounds of `k`.
    ///
    /// Blocks of 16 rows: each row is widened once into a buffer, each head's
    /// 16 products are left as 16-lane partial sums and reduced together
    /// ([`reduce16`]: 15 adds for 16 rows, where reducing each row alone takes
    /// 4); the last `n % 16` rows one at a time.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn scores(
        k: &[f16],
        stride: usize,
        qs: &[f32],
        scores: &mut [f32],
        g: usize,
        n: usize,
    ) {
        assert!(g <= 4 && qs.len() >= g * D && scores.len() >= g * n);
        let mut q = [[_mm512_setzero_ps(); 4]; 4];
        for (h, qh) in q.iter_mut().enumerate().take(g) {
            for (c, qc) in qh.iter_mut().enumerate() {
                // SAFETY: h * 64 + c * 16 + 16 <= g * 64 <= qs.len().
                *qc = unsafe { _mm512_loadu_ps(qs.as_ptr().add(h * D + c * 16)) };
            }
        }
        let partial = |kv: &[__m512; 4], qh: &[__m512; 4]| {
            let a = _mm512_fmadd_ps(kv[1], qh[1], _mm512_mul_ps(kv[0], qh[0]));
            _mm512_fmadd_ps(kv[3], qh[3], _mm512_fmadd_ps(kv[2], qh[2], a))
        };
        // [BLOCK, 4] the block's rows, widened.
        let mut rows = [[_mm512_setzero_ps(); 4]; BLOCK];
        let blocks = n / BLOCK;
        for b in 0..blocks {
            let j0 = b * BLOCK;
            for (r, row) in rows.iter_mut().enumerate() {
                // SAFETY: row j0 + r < n lies in k (caller's contract).
                *row = unsafe { load_row_h(k.as_ptr().add((j0 + r) * stride)) };
            }
            for (h, qh) in q.iter().enumerate().take(g) {
                let sums = reduce16(std::array::from_fn(|r| partial(&rows[r], qh)));
                // SAFETY: h * n + j0 + 16 <= h * n + n <= scores.len().
                unsafe { _mm512_storeu_ps(scores.as_mut_ptr().add(h * n + j0), sums) };
            }
        }
        for j in blocks * BLOCK..n {
            // SAFETY: row j lies in k (caller's contract).
            let kv = unsafe { load_row_h(k.as_ptr().add(j * stride)) };
            for (h, qh) in q.iter().enumerate().take(g) {
                scores[h * n + j] = _mm512_reduce_add_ps(partial(&kv, qh));
            }
        }
    }

    /// # Safety
    /// Requires avx512f. Shapes as checked by `super::shape` with `d == 64`:
    /// `out.len() == g * 64`, `w.len() == g * n`, rows in bounds of `v`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn weighted_sum(
        v: &[f16],
        stride: usize,
        w: &[f32],
        out: &mut [f32],
        g: usize,
        n: usize,
    ) {
        assert!(g <= 4 && out.len() >= g * D && w.len() >= g * n);
        let mut acc = [[_mm512_setzero_ps(); 4]; 4];
        for j in 0..n {
            // SAFETY: row j lies in v (caller's contract).
            let vv = unsafe { load_row_h(v.as_ptr().add(j * stride)) };
            for (h, ah) in acc.iter_mut().enumerate().take(g) {
                let wj = _mm512_set1_ps(w[h * n + j]);
                for (a, x) in ah.iter_mut().zip(vv) {
                    *a = _mm512_fmadd_ps(wj, x, *a);
                }
            }
        }
        for (h, ah) in acc.iter().enumerate().take(g) {
            for (c, a) in ah.iter().enumerate() {
                let p = out[h * D + c * 16..h * D + c * 16 + 16].as_mut_ptr();
                // SAFETY: `p` points at 16 in-bounds floats of `out`.
                unsafe { _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), *a)) };
            }
        }
    }
}
