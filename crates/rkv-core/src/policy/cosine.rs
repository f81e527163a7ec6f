//! The one definition of the redundancy's cosine entries `S[i][j]` (R-KV, arXiv
//! 2505.24133, `cal_similarity` of Zefan-Cai/R-KV `rkv/utils.py`).
//!
//! Owns: the inverse norms `1 / (||k|| + 1e-8)` and the entry
//! `S[i][j] = (k_i . k_j) * (inv_i * inv_j)` (the cosine of the normalised keys, computed
//! without materialising them), with one fixed summation order. The oracle and the
//! incremental path both call these, so every threshold decision `S[i][j] > threshold`
//! is bit-identical between them and `S[i][j] == S[j][i]` exactly. The column sums
//! reuse [`dots`] against the key sum.
//!
//! Must not know: thresholds, column sums, selection, the schedule.

use std::ops::Range;

/// Lanes of the f32 dot product's partial sums (one AVX-512 register; a fixed order).
const LANES: usize = 16;

/// Lanes of the f64 dot products' partial sums.
const LANES_F64: usize = 8;

/// How many of the newest candidates [`CosineRows::latest_matches`] takes one at a time.
const SINGLE: usize = 2;

/// Candidates whose entries [`CosineRows::latest_match`] computes together.
const BLOCK: usize = 4;

/// The narrower blocks [`CosineRows::latest_matches`] starts with (`BLOCK` divisible by it).
const FIRST_BLOCK: usize = 2;

/// Inverse norms `1 / (||k||_2 + 1e-8)` of `len` keys (norm accumulated in f64).
///
/// `keys`: `[len, dim]`. Returns `[len]`.
pub fn inv_norms(keys: &[f32], dim: usize) -> Vec<f32> {
    if dim == 0 {
        return Vec::new();
    }
    keys.chunks_exact(dim).map(inv_norm).collect()
}

/// `1 / (||k||_2 + 1e-8)` of one key.
#[inline]
pub fn inv_norm(key: &[f32]) -> f32 {
    1.0 / (dot_f64(key, key).sqrt() as f32 + 1e-8)
}

/// `a * b + c`: fused (one rounding) where the target has FMA, else two roundings. Either
/// way one fixed function per build, symmetric in `a` and `b`.
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "avx512f"),
    allow(dead_code)
)]
#[inline(always)]
fn madd(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_feature = "fma")]
    {
        a.mul_add(b, c)
    }
    #[cfg(not(target_feature = "fma"))]
    {
        a * b + c
    }
}

/// The fixed reduction of the lane sums: a tree (16 -> 8 -> 4 -> 2 -> 1).
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "avx512f"),
    allow(dead_code)
)]
#[inline(always)]
fn reduce(acc: &[f32; LANES]) -> f32 {
    let mut v8 = [0.0f32; 8];
    for (l, v) in v8.iter_mut().enumerate() {
        *v = acc[l] + acc[l + 8];
    }
    let v4 = [v8[0] + v8[4], v8[1] + v8[5], v8[2] + v8[6], v8[3] + v8[7]];
    let v2 = [v4[0] + v4[2], v4[1] + v4[3]];
    v2[0] + v2[1]
}

/// The dot products of `a` with each of `bs` (each at least as long as `a`), every one
/// in exactly [`dot`]'s order: lane `l` accumulates elements `l, l + LANES, ...` with
/// [`madd`] (the tail as a partial block), then [`reduce`]. Computing several at once
/// shares the loads of `a` and overlaps independent chains; the results are bit-identical
/// to one [`dot`] each.
#[inline(always)]
pub fn dots<const N: usize>(a: &[f32], bs: [&[f32]; N]) -> [f32; N] {
    let bs = bs.map(|b| &b[..a.len()]);
    #[cfg(all(target_arch = "x86_64", target_feature = "avx512f"))]
    {
        // SAFETY: the target has AVX-512F; every `b` is exactly as long as `a`.
        unsafe { avx512::dots(a, bs) }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "avx512f")))]
    {
        dots_portable(a, bs)
    }
}

/// [`dots`] for two rows `a0`, `a1` of equal length at once (each `b` is loaded once for
/// both): `[dots(a0, bs), dots(a1, bs)]`, bit for bit.
#[inline(always)]
pub fn dots2<const N: usize>(a0: &[f32], a1: &[f32], bs: [&[f32]; N]) -> [[f32; N]; 2] {
    let n = a0.len().min(a1.len());
    let bs = bs.map(|b| &b[..n]);
    #[cfg(all(target_arch = "x86_64", target_feature = "avx512f"))]
    {
        // SAFETY: the target has AVX-512F; `a0`, `a1` and every `b` have length `n`.
        unsafe { avx512::dots2(&a0[..n], &a1[..n], bs) }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "avx512f")))]
    {
        [dots_portable(&a0[..n], bs), dots_portable(&a1[..n], bs)]
    }
}

/// [`dots`] in plain Rust (every `b` exactly as long as `a`).
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "avx512f"),
    allow(dead_code)
)]
#[inline(always)]
fn dots_portable<const N: usize>(a: &[f32], bs: [&[f32]; N]) -> [f32; N] {
    let mut acc = [[0.0f32; LANES]; N];
    let mut chunks = a.chunks_exact(LANES);
    let mut c = 0;
    for ca in &mut chunks {
        for (acc, b) in acc.iter_mut().zip(&bs) {
            for ((s, &x), &y) in acc.iter_mut().zip(ca).zip(&b[c..c + LANES]) {
                *s = madd(x, y, *s);
            }
        }
        c += LANES;
    }
    let tail = chunks.remainder();
    for (acc, b) in acc.iter_mut().zip(&bs) {
        for ((s, &x), &y) in acc.iter_mut().zip(tail).zip(&b[c..]) {
            *s = madd(x, y, *s);
        }
    }
    acc.map(|acc| reduce(&acc))
}

/// [`dots`] on AVX-512F registers: the same arithmetic as [`dots_portable`] (one lane per
/// register lane, fused multiply-add, the tail masked, the same reduction tree).
#[cfg(all(target_arch = "x86_64", target_feature = "avx512f"))]
mod avx512 {
    use super::LANES;
    use std::arch::x86_64::*;

    /// # Safety
    /// The target must have AVX-512F and every `b` must be exactly as long as `a`.
    #[inline(always)]
    pub(super) unsafe fn dots<const N: usize>(a: &[f32], bs: [&[f32]; N]) -> [f32; N] {
        let [acc] = accumulate::<N, 1>([a], bs);
        reduce_all(acc)
    }

    /// # Safety
    /// The target must have AVX-512F; `a0`, `a1` and every `b` must have equal lengths.
    #[inline(always)]
    pub(super) unsafe fn dots2<const N: usize>(
        a0: &[f32],
        a1: &[f32],
        bs: [&[f32]; N],
    ) -> [[f32; N]; 2] {
        accumulate::<N, 2>([a0, a1], bs).map(|acc| reduce_all(acc))
    }

    /// The lane sums of every `a` (`R` of them) against every `b` (`N`): lane `l`
    /// accumulates elements `l, l + LANES, ...` with a fused multiply-add, the tail masked.
    #[inline(always)]
    unsafe fn accumulate<const N: usize, const R: usize>(
        a: [&[f32]; R],
        bs: [&[f32]; N],
    ) -> [[__m512; N]; R] {
        let n = a[0].len();
        let full = n - n % LANES;
        let pa = a.map(<[f32]>::as_ptr);
        let pb = bs.map(<[f32]>::as_ptr);
        let mut acc = [[_mm512_setzero_ps(); N]; R];
        let mut c = 0;
        while c < full {
            let va = pa.map(|p| _mm512_loadu_ps(p.add(c)));
            for k in 0..N {
                let vb = _mm512_loadu_ps(pb[k].add(c));
                for r in 0..R {
                    acc[r][k] = _mm512_fmadd_ps(va[r], vb, acc[r][k]);
                }
            }
            c += LANES;
        }
        if full < n {
            let mask: __mmask16 = (1u16 << (n - full)) - 1;
            let va = pa.map(|p| _mm512_maskz_loadu_ps(mask, p.add(full)));
            for k in 0..N {
                let vb = _mm512_maskz_loadu_ps(mask, pb[k].add(full));
                for r in 0..R {
                    acc[r][k] = _mm512_mask3_fmadd_ps(va[r], vb, acc[r][k], mask);
                }
            }
        }
        acc
    }

    /// [`reduce`] of every register, four at a time where possible.
    #[inline(always)]
    unsafe fn reduce_all<const N: usize>(acc: [__m512; N]) -> [f32; N] {
        let mut out = [0.0f32; N];
        let quads = N - N % 4;
        for q in (0..quads).step_by(4) {
            out[q..q + 4].copy_from_slice(&reduce4(acc[q], acc[q + 1], acc[q + 2], acc[q + 3]));
        }
        for k in quads..N {
            out[k] = reduce(acc[k]);
        }
        out
    }

    /// [`reduce`] of four registers together, pairing the same lanes at every level of
    /// the tree (so each result is bit-identical to its own [`reduce`]; IEEE addition is
    /// commutative).
    #[inline(always)]
    unsafe fn reduce4(a: __m512, b: __m512, c: __m512, d: __m512) -> [f32; 4] {
        // Level 1 (l, l + 8): [a | b] and [c | d], 8 lanes each.
        let x = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0xEE>(a, b),
        );
        let y = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(c, d),
            _mm512_shuffle_f32x4::<0xEE>(c, d),
        );
        // Level 2 (l, l + 4): one 128-bit block each for a, b, c, d.
        let z = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(x, y),
            _mm512_shuffle_f32x4::<0xDD>(x, y),
        );
        // Levels 3 (l, l + 2) and 4 (l, l + 1) within each block.
        let w = _mm512_add_ps(z, _mm512_permute_ps::<0x4E>(z));
        let r = _mm512_add_ps(w, _mm512_permute_ps::<0xB1>(w));
        let idx = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        let v = _mm512_castps512_ps128(_mm512_permutexvar_ps(idx, r));
        let mut out = [0.0f32; 4];
        _mm_storeu_ps(out.as_mut_ptr(), v);
        out
    }

    /// The tree 16 -> 8 -> 4 -> 2 -> 1 of [`super::reduce`].
    #[inline(always)]
    unsafe fn reduce(x: __m512) -> f32 {
        let lo = _mm512_castps512_ps256(x);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
        let v8 = _mm256_add_ps(lo, hi);
        let v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
        let v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
        _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1)))
    }
}

/// Dot product of two f32 vectors (the shorter length) in a fixed order: see [`dots`].
/// Symmetric: `dot(a, b) == dot(b, a)` bit for bit.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    dots(&a[..n], [&b[..n]])[0]
}

/// Dot product of two f32 vectors accumulated in f64, in `LANES` independent partial
/// sums (so the loop is not bound by the add latency), then the tail.
#[inline]
pub fn dot_f64(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; LANES_F64];
    let chunks_a = a.chunks_exact(LANES_F64);
    let chunks_b = b.chunks_exact(LANES_F64);
    let (rest_a, rest_b) = (chunks_a.remainder(), chunks_b.remainder());
    for (ca, cb) in chunks_a.zip(chunks_b) {
        for l in 0..LANES_F64 {
            acc[l] += f64::from(ca[l]) * f64::from(cb[l]);
        }
    }
    let tail: f64 = rest_a
        .iter()
        .zip(rest_b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    acc.iter().sum::<f64>() + tail
}

/// The keys of one head with their inverse norms: the entry function `S[i][j]`.
pub struct CosineRows<'a> {
    /// `[len, dim]` raw keys.
    pub keys: &'a [f32],
    /// `[len]` inverse norms ([`inv_norms`]).
    pub inv_norm: &'a [f32],
    pub dim: usize,
}

impl CosineRows<'_> {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.inv_norm.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.inv_norm.is_empty()
    }

    /// Row `i` of the raw keys.
    #[inline]
    pub fn row(&self, i: usize) -> &[f32] {
        &self.keys[i * self.dim..(i + 1) * self.dim]
    }

    /// `S[i][j]`: the cosine of slots `i` and `j`, 0 on the diagonal.
    #[inline(always)]
    pub fn entry(&self, i: usize, j: usize) -> f32 {
        self.entry_from_dot(i, j, dot(self.row(i), self.row(j)))
    }

    /// `S[i][j]` from `dot(row i, row j)`.
    #[inline(always)]
    fn entry_from_dot(&self, i: usize, j: usize, dot: f32) -> f32 {
        if i == j {
            0.0
        } else {
            dot * (self.inv_norm[i] * self.inv_norm[j])
        }
    }

    /// Row `i` of `S`: `out[j] = S[i][j]` for `j < out.len()` (bit-identical to
    /// [`Self::entry`], computed `BLOCK` entries at a time).
    pub fn entries(&self, i: usize, out: &mut [f32]) {
        let a = self.row(i);
        let mut blocks = out.chunks_exact_mut(BLOCK);
        let mut j0 = 0;
        for block in &mut blocks {
            let rows: [&[f32]; BLOCK] = std::array::from_fn(|k| self.row(j0 + k));
            for (k, (o, d)) in block.iter_mut().zip(dots(a, rows)).enumerate() {
                *o = self.entry_from_dot(i, j0 + k, d);
            }
            j0 += BLOCK;
        }
        for (k, o) in blocks.into_remainder().iter_mut().enumerate() {
            *o = self.entry(i, j0 + k);
        }
    }

    /// [`Self::latest_match`] of many rows against one candidate range: for each row `i` of
    /// `rows`, the largest `j` of `candidates` with `S[i][j] > threshold` is written to
    /// `latest[i]`, its entry to `entry[i]`; rows without a match are left untouched.
    /// The entries of all still unresolved rows against a candidate (or a block of them)
    /// are computed in one branch-free sweep, then the rows are resolved; the decisions
    /// are those of one [`Self::entry`] at a time.
    pub fn latest_matches(
        &self,
        rows: Range<usize>,
        threshold: f32,
        candidates: Range<usize>,
        latest: &mut [u32],
        entry: &mut [f32],
    ) {
        let end = rows.end.min(latest.len()).min(entry.len());
        let mut pending: Vec<usize> = (rows.start..end).collect();
        let mut buf = vec![[0.0f32; BLOCK]; pending.len()];
        let mut out = Resolved {
            latest,
            entry,
            threshold,
        };
        // Candidates from the top down: the k-th is `top - 1 - k`.
        let (top, count) = (candidates.end, candidates.len());
        // Most rows match one of the first few candidates: the newest one at a time
        // against every pending row (four rows share each load of the candidate and one
        // reduction), then narrow blocks, so that little is computed past the hits.
        let mut at = 0;
        while at < SINGLE && at < count && !pending.is_empty() {
            self.match_one(top - 1 - at, &mut pending, &mut out);
            at += 1;
        }
        while !pending.is_empty() {
            let rest = count - at;
            if at < SINGLE + 2 * FIRST_BLOCK && rest >= FIRST_BLOCK {
                let js: [usize; FIRST_BLOCK] = std::array::from_fn(|k| top - 1 - at - k);
                self.match_block(js, &mut pending, &mut buf, &mut out);
                at += FIRST_BLOCK;
            } else if rest >= BLOCK {
                let js: [usize; BLOCK] = std::array::from_fn(|k| top - 1 - at - k);
                self.match_block(js, &mut pending, &mut buf, &mut out);
                at += BLOCK;
            } else {
                for &i in &pending {
                    let rest = (candidates.start..top - at).rev();
                    if let Some((j, v)) = self.latest_match(i, threshold, rest) {
                        out.set(i, j, v);
                    }
                }
                return;
            }
        }
    }

    /// The first steps of [`Self::latest_matches`]: the entry of every pending row with
    /// candidate `j`, four rows per [`dots`] call; rows with a match are resolved and leave
    /// `pending` (`dot(c, row) == dot(row, c)` bit for bit, so the entries are
    /// [`Self::entry`]'s).
    #[inline(always)]
    fn match_one(&self, j: usize, pending: &mut Vec<usize>, out: &mut Resolved<'_>) {
        let c = self.row(j);
        let mut still = 0;
        let n = pending.len();
        let quads = n - n % 4;
        let mut keep = |i: usize, d: f32, pending: &mut Vec<usize>| {
            let v = self.entry_from_dot(i, j, d);
            if v > out.threshold {
                out.set(i, j, v);
            } else {
                // `still` never passes the rows not yet read.
                pending[still] = i;
                still += 1;
            }
        };
        for p in (0..quads).step_by(4) {
            let is: [usize; 4] = std::array::from_fn(|k| pending[p + k]);
            let d = dots(c, is.map(|i| self.row(i)));
            for (&i, d) in is.iter().zip(d) {
                keep(i, d, pending);
            }
        }
        for p in quads..n {
            let i = pending[p];
            keep(i, dot(c, self.row(i)), pending);
        }
        pending.truncate(still);
    }

    /// One step of [`Self::latest_matches`]: the entries of every pending row against the
    /// candidates `js` (descending), two rows at a time; rows with a match are resolved
    /// and leave `pending`.
    #[inline(always)]
    fn match_block<const N: usize>(
        &self,
        js: [usize; N],
        pending: &mut Vec<usize>,
        buf: &mut [[f32; BLOCK]],
        out: &mut Resolved<'_>,
    ) {
        let cand = js.map(|j| self.row(j));
        let mut pairs = buf.chunks_exact_mut(2).zip(pending.chunks_exact(2));
        for (vals, r) in &mut pairs {
            let (i0, i1) = (r[0], r[1]);
            let d = dots2(self.row(i0), self.row(i1), cand);
            for (k, &j) in js.iter().enumerate() {
                vals[0][k] = self.entry_from_dot(i0, j, d[0][k]);
                vals[1][k] = self.entry_from_dot(i1, j, d[1][k]);
            }
        }
        if pending.len() % 2 == 1 {
            let p = pending.len() - 1;
            let i = pending[p];
            let d = dots(self.row(i), cand);
            for (k, &j) in js.iter().enumerate() {
                buf[p][k] = self.entry_from_dot(i, j, d[k]);
            }
        }
        let mut still = 0;
        for p in 0..pending.len() {
            let i = pending[p];
            match buf[p][..N].iter().position(|&v| v > out.threshold) {
                Some(k) => out.set(i, js[k], buf[p][k]),
                None => {
                    pending[still] = i;
                    still += 1;
                }
            }
        }
        pending.truncate(still);
    }

    /// The first `j` of `candidates` (which must be in descending order, so this is the
    /// largest) with `S[i][j] > threshold`, with that entry. Entries are computed `BLOCK`
    /// candidates at a time (a few past the hit are wasted; the decision is the same as
    /// one [`Self::entry`] at a time).
    #[inline]
    pub fn latest_match(
        &self,
        i: usize,
        threshold: f32,
        mut candidates: impl Iterator<Item = usize>,
    ) -> Option<(usize, f32)> {
        let a = self.row(i);
        loop {
            let mut js = [0usize; BLOCK];
            let mut m = 0;
            for (slot, j) in js.iter_mut().zip(&mut candidates) {
                *slot = j;
                m += 1;
            }
            if m < BLOCK {
                return js[..m]
                    .iter()
                    .map(|&j| (j, self.entry(i, j)))
                    .find(|&(_, v)| v > threshold);
            }
            let d = dots(a, js.map(|j| self.row(j)));
            for (&j, d) in js.iter().zip(d) {
                let v = self.entry_from_dot(i, j, d);
                if v > threshold {
                    return Some((j, v));
                }
            }
        }
    }
}

/// Where [`CosineRows::latest_matches`] writes its hits: `latest[i]`, `entry[i]` per row.
struct Resolved<'a> {
    latest: &'a mut [u32],
    entry: &'a mut [f32],
    threshold: f32,
}

impl Resolved<'_> {
    #[inline(always)]
    fn set(&mut self, i: usize, j: usize, v: f32) {
        self.latest[i] = j as u32;
        self.entry[i] = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_norms() {
        let k = [3.0, 4.0, 0.0, 0.0];
        let inv = inv_norms(&k, 2);
        assert!((inv[0] - 0.2).abs() < 1e-7);
        assert_eq!(inv[1], 1e8);
        assert!(inv_norms(&k, 0).is_empty());
        // A zero key has cosine 0 with everything.
        let s = CosineRows {
            keys: &k,
            inv_norm: &inv,
            dim: 2,
        };
        assert_eq!(s.entry(0, 1), 0.0);
    }

    #[test]
    fn dots_match_one_dot_each_and_the_portable_kernel() {
        for n in [0usize, 1, 7, 15, 16, 17, 31, 64, 100, 128] {
            let a = (0..n).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>();
            let bs: Vec<Vec<f32>> = (0..4)
                .map(|k| (0..n).map(|i| ((i + 7 * k) as f32 * 0.11).cos()).collect())
                .collect();
            let rows: [&[f32]; 4] = std::array::from_fn(|k| bs[k].as_slice());
            let got = dots(&a, rows);
            for k in 0..4 {
                assert_eq!(got[k].to_bits(), dot(&a, &bs[k]).to_bits(), "n {n}");
                assert_eq!(got[k].to_bits(), dot(&bs[k], &a).to_bits(), "n {n}");
            }
            let other: Vec<f32> = a.iter().map(|x| 1.0 - x).collect();
            let [g0, g1] = dots2(&a, &other, rows);
            assert_eq!(g0.map(f32::to_bits), got.map(f32::to_bits), "n {n}");
            assert_eq!(
                g1.map(f32::to_bits),
                dots(&other, rows).map(f32::to_bits),
                "n {n}"
            );
            let one: [f32; 1] = dots(&a, [rows[2]]);
            assert_eq!(one[0].to_bits(), got[2].to_bits(), "n {n}");
            #[cfg(target_feature = "fma")]
            assert_eq!(
                got.map(f32::to_bits),
                dots_portable(&a, rows).map(f32::to_bits),
                "n {n}"
            );
        }
    }

    #[test]
    fn dot_symmetric_and_correct() {
        let a: Vec<f32> = (0..19).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..19).map(|i| (i as f32 * 0.11).cos()).collect();
        let exact: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        assert_eq!(dot(&a, &b).to_bits(), dot(&b, &a).to_bits());
        assert!((f64::from(dot(&a, &b)) - exact).abs() < 1e-5);
        assert!((dot_f64(&a, &b) - exact).abs() < 1e-12);
    }

    #[test]
    fn entry_diagonal_zero_and_latest_match() {
        let keys = [1.0, 0.0, 1.0, 0.1, 0.0, 1.0, 1.0, 0.05];
        let inv = inv_norms(&keys, 2);
        let s = CosineRows {
            keys: &keys,
            inv_norm: &inv,
            dim: 2,
        };
        assert_eq!(s.len(), 4);
        assert_eq!(s.entry(1, 1), 0.0);
        assert!(s.entry(0, 1) > 0.9);
        assert_eq!(s.entry(0, 3).to_bits(), s.entry(3, 0).to_bits());
        let hit = |i, thr, top| s.latest_match(i, thr, (0..top).rev()).map(|(j, _)| j);
        assert_eq!(hit(0, 0.5, 4), Some(3));
        assert_eq!(
            s.latest_match(0, 0.5, (0..4).rev()).map(|(_, v)| v),
            Some(s.entry(0, 3))
        );
        assert_eq!(hit(2, 0.5, 4), None);
        // Negative threshold: the zero diagonal counts as a match.
        assert_eq!(hit(2, -0.5, 4), Some(3));
        assert_eq!(hit(2, -0.5, 3), Some(2));
    }
}
