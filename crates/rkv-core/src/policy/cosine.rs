//! The one definition of the redundancy's cosine entries `S[i][j]` (R-KV, arXiv
//! 2505.24133, `cal_similarity` of Zefan-Cai/R-KV `rkv/utils.py`).
//!
//! Owns: the entry `S[i][j] = (k_i . k_j) * (inv_i * inv_j)` (the cosine of the
//! normalised keys, computed without materialising them, inverse norms
//! `1 / (||k|| + 1e-8)`), with the fixed summation order of [`super::dot`], over keys
//! stored in f32 or f16, flat or in runs ([`Rows`]), and the scans for the latest similar
//! slot. The oracle and the incremental path both call these, so every threshold decision
//! `S[i][j] > threshold` is bit-identical between them (and between f16 keys and their f32
//! widening) and `S[i][j] == S[j][i]` exactly. The scans choose their path once, at their
//! entry (`crate::simd`; `super::dot::Dots`): the tiles where they apply, and for the
//! rest a copy of the scan compiled for the 256-bit path or one for the portable one.
//!
//! Must not know: thresholds, column sums, selection, the schedule.

use std::ops::Range;

use super::dot::{dot, Dots, Portable};
use super::keys::{KeyElem, Rows};
#[cfg(target_arch = "x86_64")]
use crate::simd::{self, V3};

/// How many of the newest candidates [`CosineRows::latest_matches`] takes one at a time.
const SINGLE: usize = 2;

/// Candidates whose entries [`CosineRows::latest_match`] computes together.
const BLOCK: usize = 4;

/// The narrower blocks [`CosineRows::latest_matches`] starts with (`BLOCK` divisible by it).
const FIRST_BLOCK: usize = 2;

/// The keys of one head with their inverse norms: the entry function `S[i][j]`.
pub struct CosineRows<'a, E = f32> {
    /// `[len, dim]` raw keys.
    pub keys: Rows<'a, E>,
    /// `[len]` inverse norms ([`super::dot::inv_norms`]).
    pub inv_norm: &'a [f32],
}

impl<'a, E: KeyElem> CosineRows<'a, E> {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.inv_norm.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.inv_norm.is_empty()
    }

    /// Row `i` of the raw keys.
    #[inline(always)]
    pub fn row(&self, i: usize) -> &'a [E] {
        self.keys.row(i)
    }

    /// `S[i][j]`: the cosine of slots `i` and `j`, 0 on the diagonal.
    #[inline(always)]
    pub fn entry(&self, i: usize, j: usize) -> f32 {
        self.entry_from_dot(i, j, dot(self.row(i), self.row(j)))
    }

    /// [`Self::entry`] on the path `l`.
    #[inline(always)]
    fn entry_on(&self, l: impl Dots, i: usize, j: usize) -> f32 {
        self.entry_from_dot(i, j, l.dot(self.row(i), self.row(j)))
    }

    /// `S[i][j]` from `dot(row i, row j)`.
    #[inline(always)]
    pub fn entry_from_dot(&self, i: usize, j: usize, dot: f32) -> f32 {
        if i == j {
            0.0
        } else {
            dot * (self.inv_norm[i] * self.inv_norm[j])
        }
    }

    /// Row `i` of `S`: `out[j] = S[i][j]` for `j < out.len()` (bit-identical to
    /// [`Self::entry`], computed `BLOCK` entries at a time).
    pub fn entries(&self, i: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if let Some(v3) = V3::detect() {
            // SAFETY: `v3` proves the CPU has the features `entries_v3` enables.
            return unsafe { self.entries_v3(v3, i, out) };
        }
        self.entries_on(Portable::detect(), i, out)
    }

    /// [`Self::entries`] on the 256-bit path, compiled with its features.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c,popcnt")]
    fn entries_v3(&self, v3: V3, i: usize, out: &mut [f32]) {
        self.entries_on(v3, i, out)
    }

    /// [`Self::entries`] on the path `l`.
    #[inline(always)]
    fn entries_on(&self, l: impl Dots, i: usize, out: &mut [f32]) {
        let a = self.row(i);
        let mut blocks = out.chunks_exact_mut(BLOCK);
        let mut j0 = 0;
        for block in &mut blocks {
            let rows: [&[E]; BLOCK] = self.keys.rows_at(|k| j0 + k);
            for (k, (o, d)) in block.iter_mut().zip(l.dots(a, rows)).enumerate() {
                *o = self.entry_from_dot(i, j0 + k, d);
            }
            j0 += BLOCK;
        }
        for (k, o) in blocks.into_remainder().iter_mut().enumerate() {
            *o = self.entry_on(l, i, j0 + k);
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
        let pending: Vec<usize> = (rows.start..end).collect();
        self.latest_matches_of(pending, threshold, candidates, latest, entry);
    }

    /// [`Self::latest_matches`] for the rows listed in `pending` (each `< latest.len()` and
    /// `< entry.len()`).
    pub fn latest_matches_of(
        &self,
        pending: Vec<usize>,
        threshold: f32,
        candidates: Range<usize>,
        latest: &mut [u32],
        entry: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if let Some(v3) = V3::detect() {
            // SAFETY: `v3` proves the CPU has the features `latest_matches_v3` enables.
            return unsafe {
                self.latest_matches_v3(v3, pending, threshold, candidates, latest, entry)
            };
        }
        let l = Portable::detect();
        self.latest_matches_on(l, pending, threshold, candidates, latest, entry)
    }

    /// [`Self::latest_matches_of`] on the 256-bit path, compiled with its features.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c,popcnt")]
    fn latest_matches_v3(
        &self,
        v3: V3,
        pending: Vec<usize>,
        threshold: f32,
        candidates: Range<usize>,
        latest: &mut [u32],
        entry: &mut [f32],
    ) {
        self.latest_matches_on(v3, pending, threshold, candidates, latest, entry)
    }

    /// [`Self::latest_matches_of`] on the path `l` (after the tiles, which choose their
    /// own).
    #[inline(always)]
    fn latest_matches_on(
        &self,
        l: impl Dots,
        mut pending: Vec<usize>,
        threshold: f32,
        candidates: Range<usize>,
        latest: &mut [u32],
        entry: &mut [f32],
    ) {
        let mut out = Resolved {
            latest,
            entry,
            threshold,
        };
        // Candidates from the top down: the k-th is `top - 1 - k`; the tiled scan may
        // have taken the first ones.
        let scanned = self.tiled(&mut pending, &candidates, &mut out);
        let mut buf = vec![[0.0f32; BLOCK]; pending.len()];
        let (top, count) = (candidates.end - scanned, candidates.len() - scanned);
        // Most rows match one of the first few candidates: the newest one at a time
        // against every pending row (four rows share each load of the candidate and one
        // reduction), then narrow blocks, so that little is computed past the hits.
        let mut at = 0;
        while at < SINGLE && at < count && !pending.is_empty() {
            self.match_one(l, top - 1 - at, &mut pending, &mut out);
            at += 1;
        }
        while !pending.is_empty() {
            let rest = count - at;
            if at < SINGLE + 2 * FIRST_BLOCK && rest >= FIRST_BLOCK {
                let js: [usize; FIRST_BLOCK] = std::array::from_fn(|k| top - 1 - at - k);
                self.match_block(l, js, &mut pending, &mut buf, &mut out);
                at += FIRST_BLOCK;
            } else if rest >= BLOCK {
                let js: [usize; BLOCK] = std::array::from_fn(|k| top - 1 - at - k);
                self.match_block(l, js, &mut pending, &mut buf, &mut out);
                at += BLOCK;
            } else {
                for &i in &pending {
                    let rest = (candidates.start..top - at).rev();
                    if let Some((j, v)) = self.latest_match_on(l, i, threshold, rest) {
                        out.set(i, j, v);
                    }
                }
                return;
            }
        }
    }

    /// The share of [`Self::latest_matches_of`] that tiles take (8 rows x 2 candidates
    /// where the CPU has AVX-512F, `super::tile_avx512`; 4 x 2 where it has x86-64-v3
    /// only, `super::tile_avx2`; checked here): many rows against a short run of
    /// candidates above all of them (the old rows against the new slots). Returns how
    /// many candidates it scanned from the top (0 where it does not apply).
    #[inline]
    fn tiled(
        &self,
        pending: &mut Vec<usize>,
        candidates: &Range<usize>,
        out: &mut Resolved<'_>,
    ) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            let applies =
                |min: usize| pending.len() >= min && pending.iter().all(|&i| i < candidates.start);
            if simd::avx512() {
                if applies(super::tile_avx512::MIN_ROWS) {
                    // SAFETY: the run-time check above: the CPU has the features the
                    // tiles enable.
                    return unsafe {
                        super::tile_avx512::latest_matches_tiled(
                            self,
                            pending,
                            out.threshold,
                            candidates.end,
                            candidates.len(),
                            out.latest,
                            out.entry,
                        )
                    };
                }
            } else if simd::v3() && applies(super::tile_avx2::MIN_ROWS) {
                // SAFETY: the run-time check above: the CPU has the features the tiles
                // enable.
                return unsafe {
                    super::tile_avx2::latest_matches_tiled(
                        self,
                        pending,
                        out.threshold,
                        candidates.end,
                        candidates.len(),
                        out.latest,
                        out.entry,
                    )
                };
            }
        }
        let _ = (pending, candidates, out);
        0
    }

    /// The first steps of [`Self::latest_matches`]: the entry of every pending row with
    /// candidate `j`, four rows per [`Dots::dots`] call; rows with a match are resolved
    /// and leave `pending` (`dot(c, row) == dot(row, c)` bit for bit, so the entries are
    /// [`Self::entry`]'s).
    #[inline(always)]
    fn match_one(&self, l: impl Dots, j: usize, pending: &mut Vec<usize>, out: &mut Resolved<'_>) {
        // Widened once (exact), instead of at every one of its dot products.
        let c: Vec<f32> = self.row(j).iter().map(|x| x.widen()).collect();
        let c = &c[..];
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
            let is = [pending[p], pending[p + 1], pending[p + 2], pending[p + 3]];
            let rows: [&[E]; 4] = self.keys.rows_at(|k| is[k]);
            let d = l.dots(c, rows);
            for (&i, d) in is.iter().zip(d) {
                keep(i, d, pending);
            }
        }
        for p in quads..n {
            let i = pending[p];
            keep(i, l.dot(c, self.row(i)), pending);
        }
        pending.truncate(still);
    }

    /// One step of [`Self::latest_matches`]: the entries of every pending row against the
    /// candidates `js` (descending), two rows at a time; rows with a match are resolved
    /// and leave `pending`.
    #[inline(always)]
    fn match_block<const N: usize>(
        &self,
        l: impl Dots,
        js: [usize; N],
        pending: &mut Vec<usize>,
        buf: &mut [[f32; BLOCK]],
        out: &mut Resolved<'_>,
    ) {
        let cand: [&[E]; N] = self.keys.rows_at(|k| js[k]);
        let mut pairs = buf.chunks_exact_mut(2).zip(pending.chunks_exact(2));
        for (vals, r) in &mut pairs {
            let (i0, i1) = (r[0], r[1]);
            let d = l.dots2(self.row(i0), self.row(i1), cand);
            for (k, &j) in js.iter().enumerate() {
                vals[0][k] = self.entry_from_dot(i0, j, d[0][k]);
                vals[1][k] = self.entry_from_dot(i1, j, d[1][k]);
            }
        }
        if pending.len() % 2 == 1 {
            let p = pending.len() - 1;
            let i = pending[p];
            let d = l.dots(self.row(i), cand);
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
        candidates: impl Iterator<Item = usize>,
    ) -> Option<(usize, f32)> {
        #[cfg(target_arch = "x86_64")]
        if let Some(v3) = V3::detect() {
            // SAFETY: `v3` proves the CPU has the features `latest_match_v3` enables.
            return unsafe { self.latest_match_v3(v3, i, threshold, candidates) };
        }
        self.latest_match_on(Portable::detect(), i, threshold, candidates)
    }

    /// [`Self::latest_match`] on the 256-bit path, compiled with its features.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c,popcnt")]
    fn latest_match_v3(
        &self,
        v3: V3,
        i: usize,
        threshold: f32,
        candidates: impl Iterator<Item = usize>,
    ) -> Option<(usize, f32)> {
        self.latest_match_on(v3, i, threshold, candidates)
    }

    /// [`Self::latest_match`] on the path `l`.
    #[inline(always)]
    fn latest_match_on(
        &self,
        l: impl Dots,
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
                // A plain loop: a closure (`find`'s) would be a function of its own,
                // without the target features of the path's copy of this body.
                for &j in &js[..m] {
                    let v = self.entry_on(l, i, j);
                    if v > threshold {
                        return Some((j, v));
                    }
                }
                return None;
            }
            let rows: [&[E]; BLOCK] = self.keys.rows_at(|k| js[k]);
            let d = l.dots(a, rows);
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
    use super::super::dot::inv_norms;
    use super::*;

    #[test]
    fn zero_key_has_cosine_zero() {
        let k = [3.0, 4.0, 0.0, 0.0];
        let inv = inv_norms(&k, 2);
        let s = CosineRows {
            keys: Rows::flat(&k, 2),
            inv_norm: &inv,
        };
        assert_eq!(s.entry(0, 1), 0.0);
    }

    #[test]
    fn entry_diagonal_zero_and_latest_match() {
        let keys = [1.0, 0.0, 1.0, 0.1, 0.0, 1.0, 1.0, 0.05];
        let inv = inv_norms(&keys, 2);
        let s = CosineRows {
            keys: Rows::flat(&keys, 2),
            inv_norm: &inv,
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
