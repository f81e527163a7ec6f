//! Describing appended slots one at a time, as they arrive (DESIGN.md §2 "Cost": `r(i)`
//! kept per slot and updated against each new key), so that a compression event finds
//! every row's latest similar slot already resolved and only reads the keys once more
//! for the column sums.
//!
//! Owns: [`HeadState::describe_appended`] (the state grows by one slot: its inverse norm,
//! the key sum, every older row whose entry with the new slot exceeds the threshold
//! takes it as `r(i)`, since no slot is newer, and the new row's own `r` is the latest
//! older row it matches), the same split into parts that workers update in parallel
//! ([`AppendedRows`]), and [`appended_dots`] (the dot products it needs, in
//! [`super::dot`]'s fixed order, so that every threshold decision is the one the
//! compression-time scan and the oracle make, bit for bit).
//!
//! Must not know: where the keys live (the caller computes the dots while it reads them,
//! the engine inside its attention), importance, selection, the schedule.

use super::dot::{add_scaled_rows, dot, dots, inv_norm};
use super::keys::{KeyElem, Rows};
use super::redundancy_fast::{HeadState, MAX_LEN, NO_MATCH};
use super::PolicyError;

/// Rows whose dot products [`appended_dots`] computes together (sharing the key's loads).
const ROWS: usize = 4;

/// `out[i] = dot(key, row i)` for the `out.len()` rows of `rows` (`[out.len(), key.len()]`,
/// contiguous), each bit-identical to [`dot`] of the key (widened as stored) with that
/// row, which is the product [`super::cosine::CosineRows::entry`] uses.
///
/// Panics if `rows` is shorter than `out.len() * key.len()` (a caller's bug, not input).
pub fn appended_dots<E: KeyElem>(key: &[f32], rows: &[E], out: &mut [f32]) {
    let d = key.len();
    if d == 0 {
        out.fill(0.0);
        return;
    }
    rows_dots(key, &Rows::flat(&rows[..out.len() * d], d), out);
}

/// [`appended_dots`] over the first `out.len()` rows of `rows` (flat or in runs).
///
/// Panics if `rows` has fewer rows or another width (a caller's bug, not input).
pub(super) fn rows_dots<E: KeyElem>(key: &[f32], rows: &Rows<'_, E>, out: &mut [f32]) {
    assert!(key.len() == rows.dim() && rows.len() >= out.len());
    // Whole groups through one reduction per group of rows (the tile modules', where the
    // CPU has them), the rest four rows at a time.
    #[cfg(target_arch = "x86_64")]
    let done = if crate::simd::avx512() {
        // SAFETY: the run-time check above: the CPU has the features the tiles enable;
        // `rows` holds at least `out.len()` rows of `key.len()`.
        unsafe { super::tile_avx512::dots_tiled(key, rows, out) }
    } else if crate::simd::v3() {
        // SAFETY: as above.
        unsafe { super::tile_avx2::dots_tiled(key, rows, out) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    let quads = done + (out.len() - done) / ROWS * ROWS;
    for i0 in (done..quads).step_by(ROWS) {
        let rs: [&[E]; ROWS] = rows.rows_at(|k| i0 + k);
        out[i0..i0 + ROWS].copy_from_slice(&dots(key, rs));
    }
    for (i, o) in out.iter_mut().enumerate().skip(quads) {
        *o = dot(key, rows.row(i));
    }
}

/// One part of describing an appended slot: rows `first..first + len` of a head's state,
/// which one worker updates from their dot products with the new key while others update
/// the other parts ([`HeadState::appended_parts`]; the engine's attention tasks each take
/// the rows they read); [`HeadState::finish_appended`] then adds the new row.
#[derive(Debug)]
pub struct AppendedRows<'a> {
    first: usize,
    slot: u32,
    inv: f32,
    threshold: f32,
    latest: &'a mut [u32],
    entry: &'a mut [f32],
    inv_norm: &'a [f32],
}

impl AppendedRows<'_> {
    /// The part's first row.
    pub fn first(&self) -> usize {
        self.first
    }

    /// Rows in the part.
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// Updates the part's rows: `dots[k] = dot(key, k_{first + k})` ([`appended_dots`]).
    /// A row whose entry with the new slot exceeds the threshold takes it as `r(i)` (no
    /// slot is newer); the entries are `CosineRows::entry_from_dot`'s, and
    /// `S[i][n] == S[n][i]` (a symmetric dot times a commuted product), so the last row
    /// that matches, returned with its entry, is the new row's own candidate.
    ///
    /// Panics if `dots.len() != self.len()` (a caller's bug, not input).
    pub fn describe(self, dots: &[f32]) -> Option<(u32, f32)> {
        assert_eq!(dots.len(), self.len(), "one dot product per row");
        let (n, inv, threshold) = (self.slot, self.inv, self.threshold);
        let entry = |d: f32, inv_i: f32| d * (inv_i * inv);
        // In place through buffers on the stack, as `importance::max_into` does: a select
        // written back where it was read compiles to masked stores, slow on AMD CPUs.
        // The same branch-free pass finds the last row that matches, one past its index
        // in `last` (0: none).
        let (mut tl, mut te) = ([0u32; 64], [0.0f32; 64]);
        let mut last = 0u32;
        let rows = self
            .latest
            .chunks_mut(64)
            .zip(self.entry.chunks_mut(64))
            .zip(self.inv_norm.chunks(64))
            .zip(dots.chunks(64));
        for (c, (((l, e), inv_c), d_c)) in rows.enumerate() {
            let m = l.len();
            let first = (self.first + 64 * c) as u32 + 1;
            let cols = tl.iter_mut().zip(te.iter_mut()).zip(l.iter().zip(e.iter()));
            let mut chunk_last = 0u32;
            for (k, (((ol, oe), (&r, &old)), (&inv_i, &d))) in
                cols.zip(inv_c.iter().zip(d_c)).enumerate()
            {
                let v = entry(d, inv_i);
                // All ones on a hit: selects by bit masks, so that both sides are always
                // loaded (an `if` here compiled to masked loads of the old values, which
                // took most of the pass's time on AMD Zen 3).
                let hit = 0u32.wrapping_sub(u32::from(v > threshold));
                *ol = (n & hit) | (r & !hit);
                *oe = f32::from_bits((v.to_bits() & hit) | (old.to_bits() & !hit));
                chunk_last = chunk_last.max((first + k as u32) & hit);
            }
            last = last.max(chunk_last);
            l.copy_from_slice(&tl[..m]);
            e.copy_from_slice(&te[..m]);
        }
        let i = last.checked_sub(1)?;
        Some((i, self.entry[i as usize - self.first]))
    }
}

impl HeadState {
    /// Describes the slot appended right after the described ones (slot
    /// `n = self.described()`): `key` is its key as the cache stores it, widened to f32
    /// (`[d]`), and `dots[i] = dot(key, k_i)` for every described slot `i < n`
    /// ([`appended_dots`]). Afterwards the state is what a compression-time pass over the
    /// `n + 1` slots would leave before selecting (every `r(i)`, entry and inverse norm
    /// bit for bit; the key sum up to its summation order, one row at a time here), so
    /// the next compression scans no candidates for these rows. An error (and no change)
    /// when the shapes do not match. The same as [`HeadState::appended_parts`] with one
    /// part, then [`HeadState::finish_appended`].
    pub fn describe_appended(
        &mut self,
        key: &[f32],
        dots: &[f32],
        threshold: f32,
    ) -> Result<(), PolicyError> {
        let n = self.described();
        if dots.len() != n {
            return Err(PolicyError::Shape {
                field: "dots",
                expected: n,
                actual: dots.len(),
                shape: "[described slots]",
            });
        }
        let last = self
            .appended_parts(key, threshold, [n])?
            .into_iter()
            .find_map(|part| part.describe(dots));
        self.finish_appended(key, threshold, last)
    }

    /// Starts describing the slot appended right after the described ones (slot
    /// `n = self.described()`, its key `key` as in [`HeadState::describe_appended`]): the
    /// described rows split into parts ending at `ends` (ascending, the last `n`; a part
    /// may be empty), to update in parallel ([`AppendedRows::describe`]). Once every part
    /// has been described, [`HeadState::finish_appended`] adds the new row; until then
    /// the state is between the two. An error (and no change) when the key's size does not
    /// match the state's, the cache would exceed the longest the state takes, or `ends`
    /// do not split `0..n`.
    pub fn appended_parts(
        &mut self,
        key: &[f32],
        threshold: f32,
        ends: impl IntoIterator<Item = usize>,
    ) -> Result<Vec<AppendedRows<'_>>, PolicyError> {
        let n = self.check_appended(key)?;
        let ends: Vec<usize> = ends.into_iter().collect();
        let ascending = ends.windows(2).all(|w| w[0] <= w[1]);
        if !ascending || ends.last() != Some(&n) {
            return Err(PolicyError::Shape {
                field: "ends",
                expected: n,
                actual: ends.last().copied().unwrap_or(0),
                shape: "ascending part ends, the last the described slots",
            });
        }
        let inv = inv_norm(key);
        let mut parts = Vec::with_capacity(ends.len());
        let (mut latest, mut entry) = (&mut self.latest[..], &mut self.latest_entry[..]);
        let mut first = 0;
        for end in ends {
            let (l, lt) = std::mem::take(&mut latest).split_at_mut(end - first);
            let (e, et) = std::mem::take(&mut entry).split_at_mut(end - first);
            parts.push(AppendedRows {
                first,
                slot: n as u32,
                inv,
                threshold,
                latest: l,
                entry: e,
                inv_norm: &self.inv_norm[first..end],
            });
            (latest, entry, first) = (lt, et, end);
        }
        Ok(parts)
    }

    /// Ends describing an appended slot whose parts ([`HeadState::appended_parts`], with
    /// the same key and threshold) have all been described: `last` is the last row any
    /// part matched (the largest index they returned) with its entry. The new row's own
    /// `r` is that row, or under a negative threshold the diagonal (0), as in the oracle
    /// (the new slot is the latest of all); its inverse norm and the key sum follow. An
    /// error (and no change) as in [`HeadState::appended_parts`].
    pub fn finish_appended(
        &mut self,
        key: &[f32],
        threshold: f32,
        last: Option<(u32, f32)>,
    ) -> Result<(), PolicyError> {
        let n = self.check_appended(key)?;
        if n == 0 {
            self.key_sum = vec![0.0; key.len()];
        }
        let own = if 0.0 > threshold {
            (n as u32, 0.0)
        } else {
            last.unwrap_or((NO_MATCH, 0.0))
        };
        let inv = inv_norm(key);
        add_scaled_rows(&mut self.key_sum, [(key, inv)]);
        self.latest.push(own.0);
        self.latest_entry.push(own.1);
        self.inv_norm.push(inv);
        Ok(())
    }

    /// The key sum rounded to f32 (`[d]`; empty before any slot is described) once the
    /// slots of `keys` (each `[d]`, as in [`HeadState::describe_appended`]) are described
    /// after the described ones: the vector whose products with every row
    /// [`HeadState::set_sum_dots`] then takes. (The engine computes it before its
    /// attention describes a forward's tokens, so that the attention of the forward's
    /// last token can take the products while it reads the keys.)
    pub fn sum_key_after<'k>(&self, keys: impl IntoIterator<Item = &'k [f32]>) -> Vec<f32> {
        let mut sum = self.key_sum.clone();
        for key in keys {
            if sum.is_empty() {
                sum = vec![0.0; key.len()];
            }
            add_scaled_rows(&mut sum, [(key, inv_norm(key))]);
        }
        sum.iter().map(|&x| x as f32).collect()
    }

    /// Keeps every described row's product with the key sum for the next compression,
    /// which then reads no key for its column sums: `dots[i] = dot(sum_key, k_i)` for
    /// every described slot `i` ([`appended_dots`]), `sum_key` from
    /// [`HeadState::sum_key_after`] (with no more keys: the key sum as it is now). They
    /// serve only while they cover every row and `sum_key` is the key sum (a slot
    /// described later voids them); else the compression takes the products itself. An
    /// error (and no change) when the lengths do not match.
    pub fn set_sum_dots(&mut self, sum_key: Vec<f32>, dots: Vec<f32>) -> Result<(), PolicyError> {
        if dots.len() != self.described() {
            return Err(PolicyError::Shape {
                field: "dots",
                expected: self.described(),
                actual: dots.len(),
                shape: "[described slots]",
            });
        }
        if sum_key.len() != self.key_sum.len() {
            return Err(PolicyError::StateDim {
                state: self.key_sum.len(),
                head_dim: sum_key.len(),
            });
        }
        self.sum_key = sum_key;
        self.sum_dots = dots;
        Ok(())
    }

    /// The slot an appended key would take, or why it cannot.
    fn check_appended(&self, key: &[f32]) -> Result<usize, PolicyError> {
        let n = self.described();
        if n > 0 && key.len() != self.key_sum.len() {
            return Err(PolicyError::StateDim {
                state: self.key_sum.len(),
                head_dim: key.len(),
            });
        }
        if n + 1 > MAX_LEN {
            return Err(PolicyError::TooLong { len: n + 1 });
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::keys::KeyRows;
    use super::super::redundancy::redundancy_oracle;
    use super::super::redundancy_fast::{redundancy_incremental, redundancy_incremental_lent};
    use super::*;
    use half::f16;

    /// Describes slots `from..len` of the flat keys one at a time.
    fn describe(state: &mut HeadState, keys: &[f32], dim: usize, from: usize, len: usize) {
        for n in from..len {
            let mut d = vec![0.0; n];
            appended_dots(&keys[n * dim..(n + 1) * dim], &keys[..n * dim], &mut d);
            state
                .describe_appended(&keys[n * dim..(n + 1) * dim], &d, 0.5)
                .unwrap();
        }
    }

    /// Every product equals its own [`dot`] bit for bit, over f32 and f16 rows, for head
    /// sizes with and without a partial register and row counts past whole tile groups
    /// (8 rows on AVX2, 16 on AVX-512) with a remainder.
    #[test]
    fn dots_equal_dot_for_f32_and_f16_rows() {
        for dim in [1usize, 13, 64, 128] {
            for n in [0usize, 3, 8, 16, 37] {
                let keys: Vec<f32> = (0..(n + 1) * dim)
                    .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
                    .collect();
                let half: Vec<f16> = keys.iter().map(|&x| f16::from_f32(x)).collect();
                let key: Vec<f32> = half[n * dim..].iter().map(|x| x.to_f32()).collect();
                let mut a = vec![f32::NAN; n];
                let mut b = vec![f32::NAN; n];
                appended_dots(&key, &half[..n * dim], &mut a);
                let wide: Vec<f32> = half.iter().map(|x| x.to_f32()).collect();
                appended_dots(&key, &wide[..n * dim], &mut b);
                for i in 0..n {
                    let want = dot(&half[i * dim..(i + 1) * dim], &half[n * dim..]);
                    assert_eq!(a[i].to_bits(), want.to_bits(), "d {dim}, row {i} of {n}");
                    assert_eq!(b[i].to_bits(), want.to_bits(), "d {dim}, row {i} of {n}");
                }
            }
        }
    }

    /// Slots described one at a time resolve every `r(i)` as the oracle does, and a
    /// compression-time pass over a fully described state agrees with the oracle.
    #[test]
    fn one_at_a_time_matches_oracle() {
        // d = 2: a, b, a', c, b', a''
        let keys = vec![
            1.0, 0.0, 0.0, 1.0, 1.0, 0.05, -1.0, 0.2, 0.05, 1.0, 1.0, -0.05,
        ];
        let mut state = HeadState::new();
        describe(&mut state, &keys, 2, 0, 6);
        let oracle = redundancy_oracle(&keys, 2, 0.5, 1);
        assert_eq!(state.latest_resolved(&keys, 2, 0.5), oracle.latest);
        let pass = redundancy_incremental(KeyRows::flat_f32(&keys, 2), 0.5, 1, &state).unwrap();
        assert_eq!(pass.latest(), oracle.latest);
        for (a, e) in pass.redundancy.iter().zip(&oracle.redundancy) {
            assert!((a - e).abs() < 1e-7, "{a} vs {e}");
        }
    }

    /// After a compression, new slots described one at a time (some matching rows whose
    /// `r(i)` was evicted) give the oracle's `r(i)` over the kept and new slots.
    #[test]
    fn after_a_compression_matches_oracle() {
        let keys = vec![
            1.0, 0.0, 0.0, 1.0, 1.0, 0.05, -1.0, 0.2, 0.05, 1.0, 1.0, -0.05,
        ];
        let first =
            redundancy_incremental(KeyRows::flat_f32(&keys, 2), 0.5, 1, &HeadState::new()).unwrap();
        let mut state = HeadState::new();
        let kept = [0, 2, 3, 4];
        first.commit(&kept, &mut state).unwrap();
        let mut next: Vec<f32> = kept
            .iter()
            .flat_map(|&i| keys[2 * i..2 * i + 2].to_vec())
            .collect();
        next.extend([-0.9, 0.3, 0.1, 1.0, 0.7, 0.7]);
        describe(&mut state, &next, 2, 4, 7);
        let oracle = redundancy_oracle(&next, 2, 0.5, 1);
        assert_eq!(state.latest_resolved(&next, 2, 0.5), oracle.latest);
        let pass = redundancy_incremental(KeyRows::flat_f32(&next, 2), 0.5, 1, &state).unwrap();
        assert_eq!(pass.latest(), oracle.latest);
    }

    /// Describing in parts, whatever the split, leaves the state describing in one does;
    /// bad splits are errors that change nothing.
    #[test]
    fn parts_equal_one_pass() {
        let dim = 3;
        let keys = spread_keys(40, dim, 13, 0, 2.0);
        for threshold in [0.5, -0.2] {
            let mut whole = HeadState::new();
            let mut split = HeadState::new();
            for n in 0..40 {
                let key = &keys[n * dim..(n + 1) * dim];
                let mut d = vec![0.0; n];
                appended_dots(key, &keys[..n * dim], &mut d);
                whole.describe_appended(key, &d, threshold).unwrap();
                // Parts of 0, 5 and 7 rows, and whatever is left.
                let ends = [0, 5.min(n), 12.min(n), n];
                let last = split
                    .appended_parts(key, threshold, ends)
                    .unwrap()
                    .into_iter()
                    .filter_map(|p| {
                        let (a, b) = (p.first(), p.first() + p.len());
                        p.describe(&d[a..b])
                    })
                    .max_by_key(|&(i, _)| i);
                split.finish_appended(key, threshold, last).unwrap();
                assert_eq!(split, whole, "slot {n}, threshold {threshold}");
            }
        }
        let before = whole_state(&keys, dim);
        let mut state = before.clone();
        let key = &keys[..dim];
        let n = state.described();
        for bad in [vec![3, 2, n], vec![0, n - 1], vec![n + 1], vec![]] {
            assert!(
                matches!(
                    state.appended_parts(key, 0.5, bad.clone()),
                    Err(PolicyError::Shape { field: "ends", .. })
                ),
                "{bad:?}"
            );
        }
        assert_eq!(state, before);
    }

    /// A described state lending its rows' bookkeeping to the pass (what `select_keep`
    /// does) gives the redundancy and, once committed, the state that a pass on a copy
    /// gives, over consecutive compressions (the later ones with rows to re-search and
    /// rows without a match); a lent pass not committed gives it all back.
    #[test]
    fn lent_bookkeeping_matches_a_copy_and_comes_back() {
        // Unrelated rows (few pairs above 0.5), every fourth a near copy of one three back.
        let dim = 8;
        let mut x = 11u64;
        let mut uniform = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let mut all: Vec<f32> = Vec::new();
        for t in 0..70 {
            let row: Vec<f32> = if t % 4 == 3 {
                all[(t - 3) * dim..(t - 2) * dim]
                    .iter()
                    .map(|v| v + 0.05 * uniform())
                    .collect()
            } else {
                (0..dim).map(|_| uniform()).collect()
            };
            all.extend(row);
        }
        let mut resident: Vec<f32> = all[..30 * dim].to_vec();
        let mut state = HeadState::new();
        describe(&mut state, &resident, dim, 0, 30);
        let mut next = 30;
        let (mut lost, mut matchless) = (0, 0);
        for round in 0..4 {
            let len = resident.len() / dim;
            let keys = KeyRows::flat_f32(&resident, dim);
            let copied = redundancy_incremental(keys, 0.5, 2, &state).unwrap();
            let mut lent_state = state.clone();
            let lent = redundancy_incremental_lent(keys, 0.5, 2, &mut lent_state).unwrap();
            assert_eq!(lent_state.described(), 0, "round {round}: lent");
            let bits = |r: &[f64]| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&lent.redundancy), bits(&copied.redundancy));
            assert_eq!(lent.latest(), copied.latest());
            lost += state.lost.len();
            matchless += copied.latest().iter().filter(|r| r.is_none()).count();
            // Given back uncommitted: the state it lent from, its pending re-searches
            // resolved.
            let mut back = lent_state.clone();
            lent.clone().give_back(&mut back);
            assert_eq!(
                back.latest_resolved(&resident, dim, 0.5),
                state.latest_resolved(&resident, dim, 0.5)
            );
            assert_eq!(back.inv_norm, state.inv_norm);
            // A third of the older rows evicted; both commits leave the same state.
            let evicted: Vec<usize> = (0..len - 12).filter(|i| i % 3 == round % 3).collect();
            let kept: Vec<usize> = (0..len).filter(|i| !evicted.contains(i)).collect();
            copied.commit(&kept, &mut state).unwrap();
            lent.commit(&kept, &mut lent_state).unwrap();
            assert_eq!(lent_state, state, "round {round}");
            resident = kept
                .iter()
                .flat_map(|&i| resident[i * dim..(i + 1) * dim].to_vec())
                .collect();
            resident.extend_from_slice(&all[next * dim..(next + 10) * dim]);
            next += 10;
            describe(&mut state, &resident, dim, kept.len(), kept.len() + 10);
        }
        assert!(
            lost > 0 && matchless > 0,
            "lost {lost}, matchless {matchless}"
        );
    }

    /// Products with the key sum given before a compression give the bits the
    /// compression's own products give; products that no longer cover every row, or
    /// were taken with another sum, are not used; bad lengths are errors that change
    /// nothing.
    #[test]
    fn given_sum_dots_equal_the_compressions_own() {
        let dim = 5;
        let keys = spread_keys(30, dim, 17, 1, 1.5);
        let mut state = HeadState::new();
        describe(&mut state, &keys, dim, 0, 20);
        let len = 20;
        let own =
            redundancy_incremental(KeyRows::flat_f32(&keys[..len * dim], dim), 0.5, 2, &state)
                .unwrap();
        // The key sum once slot 20 is described, taken before it is.
        let ahead = state.sum_key_after([&keys[len * dim..(len + 1) * dim]]);
        let sum_key = state.sum_key_after([]);
        let mut dots = vec![0.0; len];
        appended_dots(&sum_key, &keys[..len * dim], &mut dots);
        let before = state.clone();
        assert!(state
            .set_sum_dots(sum_key.clone(), dots[1..].to_vec())
            .is_err());
        assert!(state
            .set_sum_dots(sum_key[1..].to_vec(), dots.clone())
            .is_err());
        assert_eq!(state, before);
        state.set_sum_dots(sum_key.clone(), dots.clone()).unwrap();
        assert!(state.rows_read(len).iter().all(|r| r.is_empty()));
        let given =
            redundancy_incremental(KeyRows::flat_f32(&keys[..len * dim], dim), 0.5, 2, &state)
                .unwrap();
        let bits = |r: &[f64]| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&given.redundancy), bits(&own.redundancy));
        // Products taken with another vector are not used.
        let mut wrong = state.clone();
        wrong.set_sum_dots(vec![1.0; dim], vec![7.0; len]).unwrap();
        assert_eq!(wrong.rows_read(len), vec![len..len, 0..len]);
        let pass =
            redundancy_incremental(KeyRows::flat_f32(&keys[..len * dim], dim), 0.5, 2, &wrong)
                .unwrap();
        assert_eq!(bits(&pass.redundancy), bits(&own.redundancy));
        // One more slot voids them; the vector taken ahead is the new key sum.
        describe(&mut state, &keys, dim, len, len + 1);
        assert_eq!(state.sum_key_after([]), ahead);
        assert_eq!(state.rows_read(len + 1), vec![len + 1..len + 1, 0..len + 1]);
        let oracle = redundancy_oracle(&keys[..(len + 1) * dim], dim, 0.5, 2);
        let next = redundancy_incremental(
            KeyRows::flat_f32(&keys[..(len + 1) * dim], dim),
            0.5,
            2,
            &state,
        )
        .unwrap();
        assert_eq!(next.latest(), oracle.latest);
        for (a, e) in next.redundancy.iter().zip(&oracle.redundancy) {
            assert!((a - e).abs() < 1e-7 * e.abs().max(1e-3), "{a} vs {e}");
        }
    }

    /// `n` keys of `dim` values spread over `m` levels around 0 (`i * 7919 mod m`, centred
    /// on `m / 2`, in steps of `1 / (m / 4)`), component `bump_at` raised by `bump`, so
    /// that many rows are similar.
    fn spread_keys(n: usize, dim: usize, m: usize, bump_at: usize, bump: f32) -> Vec<f32> {
        (0..n * dim)
            .map(|i| {
                let level = ((i * 7919) % m) as f32 - (m / 2) as f32;
                level / (m / 4) as f32 + if i % dim == bump_at { bump } else { 0.0 }
            })
            .collect()
    }

    /// A state describing the first 10 slots of `keys`.
    fn whole_state(keys: &[f32], dim: usize) -> HeadState {
        let mut state = HeadState::new();
        describe(&mut state, keys, dim, 0, 10);
        state
    }

    #[test]
    fn bad_shapes_are_errors_and_change_nothing() {
        let keys = [1.0, 0.0, 0.0, 1.0];
        let mut state = HeadState::new();
        describe(&mut state, &keys, 2, 0, 2);
        let before = state.clone();
        assert!(matches!(
            state.describe_appended(&[1.0, 1.0], &[0.5], 0.5),
            Err(PolicyError::Shape {
                expected: 2,
                actual: 1,
                ..
            })
        ));
        assert!(matches!(
            state.describe_appended(&[1.0, 1.0, 1.0], &[0.5, 0.5], 0.5),
            Err(PolicyError::StateDim {
                state: 2,
                head_dim: 3
            })
        ));
        assert_eq!(state, before);
    }
}
