//! Redundancy without the O(L^2 d) cost (DESIGN.md §2 "Cost"; the definition is R-KV's,
//! arXiv 2505.24133, `cal_similarity` of Zefan-Cai/R-KV, and [`super::redundancy`]'s
//! oracle is the reference this file must reproduce exactly).
//!
//! Owns: [`HeadState`] (per sequence, layer and KV head: each resident slot's latest
//! similar slot `r(i)` resolved over the resident slots, the entry `S[i][r(i)]`, the
//! inverse key norms, the f64 sum of the normalised keys, and the rows whose `r(i)` was
//! evicted and not yet re-searched) and the incremental update:
//! - one first sweep over every row that reads it once for two dot products: with the
//!   newest slot (most rows match it, and then it is their `r(i)`: no slot is newer) and
//!   with the key sum, for the column sums of the zero-diagonal cosine matrix,
//!   `k̂_j . (sum_i k̂_i) - ||k̂_j||^2` in O(L d), minus the one zeroed entry `S[i][r(i)]`
//!   of every row. The sweep is the compression's first read of most keys, straight from
//!   the cache ([`KeyRows`]: f16 or f32, in the cache's runs), so it prefetches ahead (and
//!   the policy has asked for the keys during the importance already); where the CPU has
//!   the SIMD paths (checked at run time, `crate::simd`) it runs in tiles
//!   (`super::tile_avx512`: 8 rows on AVX-512, resolving 16 rows at a time without
//!   branches; `super::tile_avx2`: 4 rows on AVX2);
//! - `r(i)` for the other slots appended since the last compression by a descending scan
//!   over all slots (stopping at the first match), and for other older rows a descending
//!   scan over the new slots only (new slots have larger indices, so a match there wins;
//!   tiles of 8 rows x 2 candidates on AVX-512, of 4 rows x 2 on AVX2);
//! - none of those scans for slots already described as they were appended
//!   (`super::describe`, the engine's path: its attention computes the new key's dot
//!   products while it reads the keys), which leaves the rows' products with the key
//!   sum, the column sums and the deferred re-searches to a compression; and not even
//!   those products when the attention of the step that leads to the compression took
//!   them as it read the keys ([`HeadState::set_sum_dots`]): such a compression reads no
//!   key but those of the re-searches and of rows without a match;
//! - after a compression (one pass over the rows, `super::kept`), `r(i)` remapped to the
//!   kept slots. A row whose `r(i)` was evicted is re-searched lazily: no kept slot above
//!   the evicted one matched, so its new `r(i)` is a new slot if one matches at the next
//!   compression, else the latest match among the kept slots below the evicted one
//!   (searched only then: most rows match a new slot, so most of these searches never
//!   run); the key sum loses the evicted slots.
//!
//! Threshold decisions use [`super::cosine`], the same entry function as the oracle, so
//! every `r(i)` equals the oracle's bit for bit; only the column sums' summation order
//! differs (f64 here).
//!
//! Must not know: importance, selection rules, tensors. It relies on the engine's contract:
//! at the next compression, slot `i` of the cache is `kept[i]` of this one for every
//! `i < kept.len()`, with bit-identical keys, and newer slots follow; a slot described as
//! appended (`super::describe`) holds exactly the key it was described with, as stored.

use super::cosine::CosineRows;
use super::describe::rows_dots;
use super::dot::{add_scaled_rows, dot, dots2, inv_norm};
use super::kept::carry;
use super::keys::{each_rows, KeyElem, KeyRows, Rows};
use super::redundancy::{redundancy_from_column_sums, sum_parts, zeroed_column};
use super::PolicyError;
use std::ops::Range;

/// Rows below a pending re-search's evicted match that a compression asks the memory for
/// ahead of the scan ([`HeadState::rows_read`]).
pub(super) const SCAN_AHEAD: usize = 32;

/// Marks "no similar slot" (or "evicted, re-search pending") in [`HeadState`].
pub(super) const NO_MATCH: u32 = u32::MAX;

/// Longest cache the bookkeeping takes: slots are `u32` below [`NO_MATCH`], and the
/// vectorised remapping after a compression (`super::kept`) gathers with signed 32-bit
/// indices.
pub(super) const MAX_LEN: usize = i32::MAX as usize;

/// Redundancy bookkeeping kept between compressions for one (sequence, layer, KV head).
/// Start each new sequence with [`HeadState::new`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeadState {
    /// `[n_described]` latest similar slot of each of the first `n_described` slots,
    /// resolved over those slots only; `NO_MATCH` when there is none or when the row is
    /// in `lost`.
    pub(super) latest: Vec<u32>,
    /// `[n_described]` the entry `S[i][r(i)]` (unused where `latest` is `NO_MATCH`).
    pub(super) latest_entry: Vec<f32>,
    /// `[n_described]` inverse key norms.
    pub(super) inv_norm: Vec<f32>,
    /// `[d]` sum of the normalised keys of the described slots (empty when none).
    pub(super) key_sum: Vec<f64>,
    /// `(row, below)`, ascending rows: rows whose `r(i)` was evicted; their `r(i)` over the
    /// described slots is the latest match among slots `0..below`.
    pub(super) lost: Vec<(u32, u32)>,
    /// `[d]` the key sum rounded to f32 that `sum_dots` were taken with
    /// (`super::describe`, [`HeadState::set_sum_dots`]; empty when none were).
    pub(super) sum_key: Vec<f32>,
    /// `[n_described]` every described row's dot product with `sum_key`, given by the
    /// engine's attention in the step that leads to a compression (it reads every key
    /// then anyway), so that the compression need not read them; used only while
    /// `sum_key` is the key sum rounded and they cover every row.
    pub(super) sum_dots: Vec<f32>,
    /// Scores a policy carries per kept slot from one compression to the next
    /// (`super::seam`; G-KV's global scores), for the cache's leading slots.
    pub(super) carried: Vec<f32>,
}

impl HeadState {
    /// Fresh state: no slot described yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many leading slots of the cache this state describes.
    pub fn described(&self) -> usize {
        self.latest.len()
    }

    /// Room for `additional` more described slots without reallocating (as `Vec::reserve`).
    pub fn reserve(&mut self, additional: usize) {
        self.latest.reserve(additional);
        self.latest_entry.reserve(additional);
        self.inv_norm.reserve(additional);
    }

    /// The rows a compression of a cache of `len` slots reads, for the importance to ask
    /// the memory for, in order: every row, the undescribed ones first, unless the state
    /// describes them all and holds every row's product with the key sum; then only the
    /// rows of the re-searches still pending (no new slot matched the row): the row and
    /// the [`SCAN_AHEAD`] rows below its evicted match, where its scan down starts (on
    /// the teacher-forced reasoning trace, 20-40 such rows per head late in the trace).
    /// A scan that goes on past those reads with the hardware's prefetching alone: asking
    /// for each block's successors as it went cost more than it saved in the paired
    /// bench, where the keys are cached.
    pub(super) fn rows_read(&self, len: usize) -> Vec<Range<usize>> {
        let described = self.described();
        if described != len || !self.sums_ready(len) {
            return vec![described..len, 0..described.min(len)];
        }
        let mut rows = Vec::new();
        for &(row, below) in &self.lost {
            let (i, below) = (row as usize, below as usize);
            if self.latest.get(i) == Some(&NO_MATCH) {
                rows.push(i..i + 1);
                rows.push(below.saturating_sub(SCAN_AHEAD)..below);
            }
        }
        rows
    }

    /// Whether `sum_dots` hold every row's product with the key sum as it is
    /// (a compression of a cache of `len` slots then reads no key for the column sums).
    fn sums_ready(&self, len: usize) -> bool {
        self.sum_dots.len() == len
            && self.sum_key.len() == self.key_sum.len()
            && self
                .sum_key
                .iter()
                .zip(&self.key_sum)
                .all(|(&a, &b)| a.to_bits() == (b as f32).to_bits())
    }

    /// Forget everything (the next compression computes from scratch).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// The `r(i)` of the described slots (`None`: no similar slot), completing the
    /// pending re-searches against `keys` (`[n_described, d]`, the cache's leading slots).
    /// For tests; the engine never needs it.
    pub fn latest_resolved(&self, keys: &[f32], dim: usize, threshold: f32) -> Vec<Option<usize>> {
        let s = CosineRows {
            keys: Rows::flat(keys, dim),
            inv_norm: &self.inv_norm,
        };
        let mut latest = self.latest.clone();
        let mut entry = self.latest_entry.clone();
        research_lost(&s, threshold, &self.lost, &mut latest, &mut entry);
        latest.iter().map(|&r| from_u32(r)).collect()
    }
}

#[inline]
fn from_u32(r: u32) -> Option<usize> {
    (r != NO_MATCH).then_some(r as usize)
}

/// The deferred re-search: each `(row, below)` of `lost` still without a match (no new
/// slot matched it) takes the latest match among slots `0..below`. Rows whose evicted
/// match was the same slot share `below`, and scan together (each candidate read once for
/// all of them, `CosineRows::latest_matches_of`): on the teacher-forced reasoning trace
/// the re-searches are the largest part of an R-KV event beyond SnapKV's in a profile of
/// `rkv bench events`.
fn research_lost<E: KeyElem>(
    s: &CosineRows<'_, E>,
    threshold: f32,
    lost: &[(u32, u32)],
    latest: &mut [u32],
    entry: &mut [f32],
) {
    let mut pending: Vec<(u32, u32)> = lost
        .iter()
        .filter(|&&(row, _)| latest.get(row as usize) == Some(&NO_MATCH))
        .map(|&(row, below)| (below, row))
        .collect();
    pending.sort_unstable();
    for group in pending.chunk_by(|a, b| a.0 == b.0) {
        let below = group[0].0 as usize;
        if let [(_, row)] = group {
            let i = *row as usize;
            if let Some((j, v)) = s.latest_match(i, threshold, (0..below).rev()) {
                latest[i] = j as u32;
                entry[i] = v;
            }
        } else {
            let rows = group.iter().map(|&(_, row)| row as usize).collect();
            s.latest_matches_of(rows, threshold, 0..below, latest, entry);
        }
    }
}

/// One incremental redundancy computation, ready to be committed once the kept set is
/// known.
#[derive(Debug, Clone)]
pub struct FastRedundancy<'a> {
    /// `[L - w]` redundancy of the candidates.
    pub redundancy: Vec<f64>,
    /// `[L]` latest similar slot of every row over all `L` slots, `NO_MATCH` for none.
    latest: Vec<u32>,
    /// `[L]` the entry `S[i][r(i)]` (`S[i][0]` for a row without a match).
    zeroed_entry: Vec<f32>,
    /// `[L]` inverse key norms.
    inv_norm: Vec<f32>,
    /// `[d]` sum of all `L` normalised keys.
    key_sum: Vec<f64>,
    /// `[L, d]` the keys.
    keys: KeyRows<'a>,
    /// `latest`, `zeroed_entry` and `inv_norm` were lent by the state
    /// ([`redundancy_incremental_lent`]).
    lent: bool,
}

/// Compute redundancy for the `L = keys.len()` slots, reusing `state` for the first
/// `state.described()` slots. `keys`: `[L, d]`, f32 or f16, flat or in runs (the same
/// result either way, bit for bit, for the same widened values).
pub fn redundancy_incremental<'a>(
    keys: KeyRows<'a>,
    threshold: f32,
    window: usize,
    state: &HeadState,
) -> Result<FastRedundancy<'a>, PolicyError> {
    each_rows!(keys, rows => incremental(rows, keys, threshold, window, state))
}

/// [`redundancy_incremental`] for a caller that commits the pass to `state` right after
/// ([`super::select_keep`]): a state that describes every slot lends the pass its rows'
/// bookkeeping (latest similar slots, their entries, inverse norms) instead of a copy,
/// since the commit replaces it. Until then `state` holds none of it; a caller whose
/// commit fails puts it back with [`FastRedundancy::give_back`].
pub(super) fn redundancy_incremental_lent<'a>(
    keys: KeyRows<'a>,
    threshold: f32,
    window: usize,
    state: &mut HeadState,
) -> Result<FastRedundancy<'a>, PolicyError> {
    if describes_all(state, keys.len(), keys.dim())? {
        let book = Book {
            latest: std::mem::take(&mut state.latest),
            entry: std::mem::take(&mut state.latest_entry),
            inv: std::mem::take(&mut state.inv_norm),
            lent: true,
        };
        return Ok(each_rows!(keys, rows => described(rows, keys, threshold, window, state, book)));
    }
    redundancy_incremental(keys, threshold, window, state)
}

/// A described state's rows' bookkeeping, as [`described`] starts from it: `[L]` each.
struct Book {
    latest: Vec<u32>,
    entry: Vec<f32>,
    inv: Vec<f32>,
    /// Lent by the state (else a copy).
    lent: bool,
}

impl Book {
    /// A copy of `state`'s.
    fn of(state: &HeadState) -> Self {
        Self {
            latest: state.latest.clone(),
            entry: state.latest_entry.clone(),
            inv: state.inv_norm.clone(),
            lent: false,
        }
    }
}

/// Whether `state` describes every row of a cache of `len` rows of `dim` (the described
/// path); an error when it cannot describe that cache at all.
fn describes_all(state: &HeadState, len: usize, dim: usize) -> Result<bool, PolicyError> {
    if len > MAX_LEN {
        return Err(PolicyError::TooLong { len });
    }
    let old = state.described();
    if old > len {
        return Err(PolicyError::StateAhead {
            described: old,
            len,
        });
    }
    if old > 0 && state.key_sum.len() != dim {
        return Err(PolicyError::StateDim {
            state: state.key_sum.len(),
            head_dim: dim,
        });
    }
    Ok(old == len && old > 0)
}

/// [`redundancy_incremental`] for one element type: `rows` are `keys`' rows.
fn incremental<'a, E: KeyElem>(
    rows: Rows<'a, E>,
    keys: KeyRows<'a>,
    threshold: f32,
    window: usize,
    state: &HeadState,
) -> Result<FastRedundancy<'a>, PolicyError> {
    let (len, dim) = (rows.len(), rows.dim());
    if describes_all(state, len, dim)? {
        return Ok(described(
            rows,
            keys,
            threshold,
            window,
            state,
            Book::of(state),
        ));
    }
    let old = state.described();
    let mut key_sum = if old == 0 {
        vec![0.0; dim]
    } else {
        state.key_sum.clone()
    };
    let mut inv = Vec::with_capacity(len);
    inv.extend_from_slice(&state.inv_norm);
    // Whole groups of rows through the tiles where the CPU has them.
    #[cfg(target_arch = "x86_64")]
    let done = if crate::simd::avx512() {
        use super::tile_avx512::{inv_norms_tiled, NORM_ROWS};
        // SAFETY: the run-time check above: the CPU has the features the tiles enable.
        unsafe {
            inv_norms_tiled(&rows, old, len, &mut inv, |i| {
                rows.prefetch(i + AHEAD / 4, NORM_ROWS)
            })
        }
    } else if crate::simd::v3() {
        use super::tile_avx2::{inv_norms_tiled, NORM_ROWS};
        // SAFETY: as above.
        unsafe {
            inv_norms_tiled(&rows, old, len, &mut inv, |i| {
                rows.prefetch(i + AHEAD / 4, NORM_ROWS)
            })
        }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for i in old + done..len {
        rows.prefetch(i + AHEAD / 4, 1);
        inv.push(inv_norm(rows.row(i)));
    }
    add_scaled_rows(&mut key_sum, (old..len).map(|i| (rows.row(i), inv[i])));
    let s = CosineRows {
        keys: rows,
        inv_norm: &inv,
    };
    let mut latest = Vec::with_capacity(len);
    latest.extend_from_slice(&state.latest);
    latest.resize(len, NO_MATCH);
    let mut zeroed_entry = Vec::with_capacity(len);
    zeroed_entry.extend_from_slice(&state.latest_entry);
    zeroed_entry.resize(len, 0.0);
    let first = newest_and_sums(&s, &key_sum, threshold, old, &mut latest, &mut zeroed_entry);
    let newer = len.saturating_sub(1);
    // Old rows: a match among the new slots (descending) beats the stored one. (None
    // when the state describes every slot, `super::describe`: nothing is left to scan.)
    if old < newer {
        s.latest_matches_of(
            first.old,
            threshold,
            old..newer,
            &mut latest,
            &mut zeroed_entry,
        );
    }
    research_lost(&s, threshold, &state.lost, &mut latest, &mut zeroed_entry);
    // New rows: search everything, newest first.
    s.latest_matches_of(
        first.new,
        threshold,
        0..newer,
        &mut latest,
        &mut zeroed_entry,
    );
    zero_matchless(&s, &latest, &mut zeroed_entry);
    let column_sums = column_sums_fast(&inv, &first.sum_dots, &latest, &zeroed_entry);
    let redundancy = redundancy_from_column_sums(&column_sums, window);
    Ok(FastRedundancy {
        redundancy,
        latest,
        zeroed_entry,
        inv_norm: inv,
        key_sum,
        keys,
        lent: false,
    })
}

/// [`incremental`] for a state that describes every slot (`super::describe`, the
/// engine's path): every `r(i)` but the pending re-searches is resolved, so the rows are
/// read once for their products with the key sum only, and not at all when the state
/// holds them ([`HeadState::set_sum_dots`]); otherwise only the rows of the re-searches
/// and the rows without a match (for `S[i][0]`) are read. `book`: the state's rows'
/// bookkeeping (a copy, or lent; not read from `state`).
fn described<'a, E: KeyElem>(
    rows: Rows<'a, E>,
    keys: KeyRows<'a>,
    threshold: f32,
    window: usize,
    state: &HeadState,
    book: Book,
) -> FastRedundancy<'a> {
    let len = rows.len();
    let Book {
        mut latest,
        entry: mut zeroed_entry,
        inv,
        lent,
    } = book;
    let s = CosineRows {
        keys: rows,
        inv_norm: &inv,
    };
    research_lost(&s, threshold, &state.lost, &mut latest, &mut zeroed_entry);
    zero_matchless(&s, &latest, &mut zeroed_entry);
    let column_sums = if state.sums_ready(len) {
        column_sums_fast(&inv, &state.sum_dots, &latest, &zeroed_entry)
    } else {
        let sum = state.sum_key_after([]);
        let mut sum_dots = vec![0.0f32; len];
        rows_dots(&sum, &rows, &mut sum_dots);
        column_sums_fast(&inv, &sum_dots, &latest, &zeroed_entry)
    };
    FastRedundancy {
        redundancy: redundancy_from_column_sums(&column_sums, window),
        latest,
        zeroed_entry,
        inv_norm: inv,
        key_sum: state.key_sum.clone(),
        keys,
        lent,
    }
}

/// Rows without a match zero `S[i][0]` (the reference's quirk). They are few: sixteen
/// rows are checked at once (a check that vectorises), and only where one is found are
/// they visited.
fn zero_matchless<E: KeyElem>(s: &CosineRows<'_, E>, latest: &[u32], zeroed_entry: &mut [f32]) {
    for (c, chunk) in latest.chunks(16).enumerate() {
        if chunk.iter().fold(false, |any, &r| any | (r == NO_MATCH)) {
            for (k, &r) in chunk.iter().enumerate() {
                let i = 16 * c + k;
                if r == NO_MATCH {
                    zeroed_entry[i] = s.entry(i, 0);
                }
            }
        }
    }
}

/// What the first sweep over the rows leaves: the rows still without a match, and every
/// row's dot product with the key sum.
struct FirstSweep {
    /// Rows `< old` not matching the newest slot, ascending.
    old: Vec<usize>,
    /// Rows `>= old` not matching the newest slot, ascending.
    new: Vec<usize>,
    /// `[L]` `k_j . sum` (f32, against the key sum rounded to f32).
    sum_dots: Vec<f32>,
}

/// Rows ahead of the one being read that [`newest_and_sums`] asks the memory for, when the
/// keys are read in place from a paged cache (the sweep is then the first read of most
/// rows in a compression, and the hardware prefetcher stops at each 4 KB run).
const AHEAD: usize = 48;

/// The first sweep: every row against the newest slot `L - 1` and the key sum (rounded
/// to f32) at once, so that each row is read once for both. A row matching the newest
/// slot has found its `r(i)` (no slot is newer; the entries are [`CosineRows::entry`]'s
/// bit for bit).
fn newest_and_sums<E: KeyElem>(
    s: &CosineRows<'_, E>,
    key_sum: &[f64],
    threshold: f32,
    old: usize,
    latest: &mut [u32],
    entry: &mut [f32],
) -> FirstSweep {
    let len = s.len();
    let mut sweep = FirstSweep {
        old: Vec::new(),
        new: Vec::new(),
        sum_dots: vec![0.0; len],
    };
    let Some(j) = len.checked_sub(1) else {
        return sweep;
    };
    // The newest key widened once (exact) and the key sum in f32, both zero-padded to
    // whole registers for the tiles.
    let dim = s.keys.dim();
    let padded = dim.div_ceil(16) * 16;
    let mut c = vec![0.0f32; padded];
    E::widen_into(s.row(j), &mut c);
    let mut sum = vec![0.0f32; padded];
    for (t, &x) in sum.iter_mut().zip(key_sum) {
        *t = x as f32;
    }
    // Rows without a match, ascending; every row is written and kept by advancing `n`,
    // and the hits are selected, not branched on (the decision is data-dependent).
    let mut pending = vec![0usize; len + 16];
    let mut n = 0;
    // Tiles where the CPU has them.
    #[cfg(target_arch = "x86_64")]
    let done = if crate::simd::avx512() {
        use super::tile_avx512::{newest_and_sums_tiled, SWEEP_ROWS};
        // SAFETY: the run-time check above: the CPU has the features the tiles enable;
        // `pending` has 16 entries of slack.
        unsafe {
            newest_and_sums_tiled(
                s,
                &c,
                &sum,
                threshold,
                latest,
                entry,
                &mut sweep.sum_dots,
                &mut pending,
                &mut n,
                |i| s.keys.prefetch(i + AHEAD, SWEEP_ROWS),
            )
        }
    } else if crate::simd::v3() {
        use super::tile_avx2::{newest_and_sums_tiled, SWEEP_ROWS};
        // SAFETY: the run-time check above: the CPU has the features the tiles enable.
        unsafe {
            newest_and_sums_tiled(
                s,
                &c,
                &sum,
                threshold,
                latest,
                entry,
                &mut sweep.sum_dots,
                &mut pending,
                &mut n,
                |i| s.keys.prefetch(i + AHEAD, SWEEP_ROWS),
            )
        }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    let (c, sum32) = (&c[..dim], &sum[..dim]);
    let mut resolve = |i: usize, d: f32| {
        let v = s.entry_from_dot(i, j, d);
        let hit = v > threshold;
        latest[i] = if hit { j as u32 } else { latest[i] };
        entry[i] = if hit { v } else { entry[i] };
        pending[n] = i;
        n += usize::from(!hit);
    };
    let quads = done + (len - done) / 4 * 4;
    for i0 in (done..quads).step_by(4) {
        s.keys.prefetch(i0 + AHEAD, 4);
        let rows: [&[E]; 4] = s.keys.rows_at(|k| i0 + k);
        let [dc, ds] = dots2(c, sum32, rows);
        sweep.sum_dots[i0..i0 + 4].copy_from_slice(&ds);
        for (k, d) in dc.into_iter().enumerate() {
            resolve(i0 + k, d);
        }
    }
    for i in quads..len {
        sweep.sum_dots[i] = dot(sum32, s.row(i));
        resolve(i, dot(c, s.row(i)));
    }
    pending.truncate(n);
    let split = pending.partition_point(|&i| i < old);
    sweep.new = pending.split_off(split);
    sweep.old = pending;
    sweep
}

/// Column sums of `S` (zero diagonal) after each row zeroes `S[i][r(i)]`, in O(L d):
/// `c_j = k̂_j . sum - ||k̂_j||^2 - (entries of the rows zeroing column j)`, from
/// `sum_dots[j] = k_j . sum`.
///
/// The dot products run in f32 against the key sum rounded to f32: their error (a few
/// ulp of `|sum| <= L`) is of the order of the oracle's own, which adds `L` entries each
/// rounded to f32, and shrinks by `1 / L` in the column means the softmax sees.
fn column_sums_fast(
    inv_norm: &[f32],
    sum_dots: &[f32],
    latest: &[u32],
    zeroed: &[f32],
) -> Vec<f64> {
    // ||k̂_j||^2 from the inverse norm: (||k|| / (||k|| + 1e-8))^2, where
    // ||k|| * inv = (1 / inv - 1e-8) * inv = 1 - 1e-8 * inv (no division).
    let len = sum_dots.len();
    // Eight spare columns after the `len` real ones: most rows zero the newest column,
    // and their entries are summed there apart (eight partial sums, not one chain of
    // dependent subtractions), then added to it.
    let mut sums = vec![0.0f64; len + 8];
    for ((c, &inv), &dot) in sums.iter_mut().zip(inv_norm).zip(sum_dots) {
        let inv = f64::from(inv);
        let self_sq = (1.0 - 1e-8 * inv).max(0.0);
        *c = inv * f64::from(dot) - self_sq * self_sq;
    }
    let newest = len.wrapping_sub(1);
    for (i, (&r, &v)) in latest.iter().zip(zeroed).enumerate().take(len) {
        // On the diagonal (`r(i) = i`, or row 0 without a match) the entry is already
        // zero (`CosineRows::entry_from_dot`), so it is subtracted like any other.
        let j = zeroed_column(from_u32(r)).min(len - 1);
        // Which column takes the entry is data: selected, not branched on (`j < len`
        // always; the clamp only spares the index a check).
        let at = std::hint::select_unpredictable(j == newest, len + i % 8, j);
        sums[at] -= f64::from(v);
    }
    // `x - a - b ...` from 0 is `-(a + b ...)` exactly (rounding is symmetric).
    let part: [f64; 8] = std::array::from_fn(|k| sums[len + k]);
    sums.truncate(len);
    if let Some(c) = sums.get_mut(newest) {
        *c += sum_parts(part);
    }
    sums
}

/// `kept` must be strictly ascending slots below `len`; the error names the first slot
/// that is not. (Checked in one pass that vectorises; the slot is looked for only on
/// failure.)
fn check_kept(kept: &[usize], len: usize) -> Result<(), PolicyError> {
    let ascending = kept.windows(2).fold(true, |ok, w| ok & (w[0] < w[1]));
    if ascending && kept.last().is_none_or(|&i| i < len) {
        return Ok(());
    }
    let mut prev = None;
    for &i in kept {
        if i >= len {
            return Err(PolicyError::KeptOutOfRange { slot: i, len });
        }
        if prev.is_some_and(|p| p >= i) {
            return Err(PolicyError::KeptNotAscending { slot: i });
        }
        prev = Some(i);
    }
    Ok(())
}

impl FastRedundancy<'_> {
    /// Puts back what [`redundancy_incremental_lent`] lent, into the state it came from
    /// (with the pass's re-searches resolved and the entries of rows without a match
    /// taken, which leave the state's meaning unchanged); for a pass that copied, nothing.
    pub(super) fn give_back(self, state: &mut HeadState) {
        if self.lent {
            state.latest = self.latest;
            state.latest_entry = self.zeroed_entry;
            state.inv_norm = self.inv_norm;
        }
    }

    /// `r(i)` of every row over all `L` slots (`None`: no similar slot).
    pub fn latest(&self) -> Vec<Option<usize>> {
        self.latest.iter().map(|&r| from_u32(r)).collect()
    }

    /// Record the kept slots (strictly ascending indices into this cache) in `state`:
    /// each kept row's `r(i)` remapped to the new indices; a row whose `r(i)` was evicted
    /// is marked for a re-search below it (see the module notes); the key sum loses the
    /// evicted slots.
    pub fn commit(&self, kept: &[usize], state: &mut HeadState) -> Result<(), PolicyError> {
        let len = self.latest.len();
        check_kept(kept, len)?;
        // `new_index[len]` answers for `NO_MATCH` (clamped to `len`): still no match.
        let mut new_index = vec![NO_MATCH; len + 1];
        for (a, &i) in kept.iter().enumerate() {
            new_index[i] = a as u32;
        }
        // One pass over the rows: the kept rows' bookkeeping, `r(i)` remapped, the rows
        // whose `r(i)` was evicted (re-searched below it later), the evicted rows.
        let carried = carry(&new_index, &self.latest, &self.zeroed_entry, &self.inv_norm);
        let lost = carried
            .lost
            .iter()
            .map(|&a| {
                let r = self.latest[kept[a as usize]] as usize;
                (a, kept.partition_point(|&x| x < r) as u32)
            })
            .collect();
        let mut key_sum = self.key_sum.clone();
        each_rows!(self.keys, rows => add_scaled_rows(
            &mut key_sum,
            carried.evicted.iter().map(|&i| (rows.row(i as usize), -self.inv_norm[i as usize])),
        ));
        if key_sum.iter().any(|x| !x.is_finite()) {
            // A non-finite key (an overflowed f16, say) adds NaN, which its eviction does
            // not take back out: the sum is rebuilt from the kept rows, so that it recovers
            // once that key is gone, as the from-scratch computation does.
            key_sum.fill(0.0);
            each_rows!(self.keys, rows => add_scaled_rows(
                &mut key_sum,
                kept.iter().map(|&i| (rows.row(i), self.inv_norm[i])),
            ));
        }
        state.inv_norm = carried.inv;
        state.latest = carried.latest;
        state.latest_entry = carried.entry;
        state.key_sum = key_sum;
        state.lost = lost;
        state.sum_key = Vec::new();
        state.sum_dots = Vec::new();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::redundancy::redundancy_oracle;
    use super::*;

    fn keys_with_copies() -> Vec<f32> {
        // d = 2: a, b, a', c, b', a''
        vec![
            1.0, 0.0, 0.0, 1.0, 1.0, 0.05, -1.0, 0.2, 0.05, 1.0, 1.0, -0.05,
        ]
    }

    #[test]
    fn fresh_state_matches_oracle() {
        let keys = keys_with_copies();
        let fast =
            redundancy_incremental(KeyRows::flat_f32(&keys, 2), 0.5, 1, &HeadState::new()).unwrap();
        let oracle = redundancy_oracle(&keys, 2, 0.5, 1);
        assert_eq!(fast.latest(), oracle.latest);
        for (a, e) in fast.redundancy.iter().zip(&oracle.redundancy) {
            assert!((a - e).abs() < 1e-7);
        }
    }

    #[test]
    fn evicted_latest_is_re_searched() {
        let keys = keys_with_copies();
        let fast =
            redundancy_incremental(KeyRows::flat_f32(&keys, 2), 0.5, 1, &HeadState::new()).unwrap();
        assert_eq!(fast.latest()[0], Some(5));
        let mut state = HeadState::new();
        // Evict slot 5 (a''): slot 0's latest becomes a' (old 2 -> new 1).
        let kept = [0, 2, 3, 4];
        fast.commit(&kept, &mut state).unwrap();
        let kept_keys: Vec<f32> = kept
            .iter()
            .flat_map(|&i| keys[2 * i..2 * i + 2].to_vec())
            .collect();
        let oracle = redundancy_oracle(&kept_keys, 2, 0.5, 1);
        assert_eq!(state.latest_resolved(&kept_keys, 2, 0.5), oracle.latest);
        assert_eq!(state.latest_resolved(&kept_keys, 2, 0.5)[0], Some(1));
        // The re-search is lazy: the next pass over the same cache completes it.
        let again =
            redundancy_incremental(KeyRows::flat_f32(&kept_keys, 2), 0.5, 1, &state).unwrap();
        assert_eq!(again.latest(), oracle.latest);
    }

    #[test]
    fn new_slots_become_latest() {
        let keys = keys_with_copies();
        let mut state = HeadState::new();
        let first =
            redundancy_incremental(KeyRows::flat_f32(&keys[..8], 2), 0.5, 1, &state).unwrap();
        first.commit(&[0, 1, 2, 3], &mut state).unwrap();
        // Append b' and a'': rows 0, 1, 2 now match the new slots.
        let second = redundancy_incremental(KeyRows::flat_f32(&keys, 2), 0.5, 1, &state).unwrap();
        let oracle = redundancy_oracle(&keys, 2, 0.5, 1);
        assert_eq!(second.latest(), oracle.latest);
        assert_eq!(second.latest()[..3], [Some(5), Some(4), Some(5)]);
    }

    /// A non-finite key makes every redundancy NaN while it is resident (as in the
    /// oracle), and once it is evicted the next compression agrees with the oracle again.
    #[test]
    fn non_finite_key_recovers_after_eviction() {
        let mut keys = keys_with_copies();
        keys[6] = f32::INFINITY; // row 3
        let mut state = HeadState::new();
        let first = redundancy_incremental(KeyRows::flat_f32(&keys, 2), 0.5, 1, &state).unwrap();
        let oracle = redundancy_oracle(&keys, 2, 0.5, 1);
        assert!(first.redundancy.iter().all(|r| r.is_nan()));
        assert!(oracle.redundancy.iter().all(|r| r.is_nan()));
        let kept = [0, 1, 2, 4, 5];
        first.commit(&kept, &mut state).unwrap();
        let mut next: Vec<f32> = kept
            .iter()
            .flat_map(|&i| keys[2 * i..2 * i + 2].to_vec())
            .collect();
        next.extend([0.9, 0.1, -0.2, 1.0]);
        let again = redundancy_incremental(KeyRows::flat_f32(&next, 2), 0.5, 1, &state).unwrap();
        let oracle = redundancy_oracle(&next, 2, 0.5, 1);
        assert_eq!(again.latest(), oracle.latest);
        for (a, e) in again.redundancy.iter().zip(&oracle.redundancy) {
            assert!((a - e).abs() < 1e-7, "{a} vs {e}");
        }
    }

    #[test]
    fn bad_state_and_kept_are_errors() {
        let keys = keys_with_copies();
        let mut state = HeadState::new();
        let pass = redundancy_incremental(KeyRows::flat_f32(&keys, 2), 0.5, 1, &state).unwrap();
        assert!(matches!(
            pass.commit(&[0, 9], &mut state),
            Err(PolicyError::KeptOutOfRange { .. })
        ));
        assert!(matches!(
            pass.commit(&[0, 2, 2], &mut state),
            Err(PolicyError::KeptNotAscending { slot: 2 })
        ));
        pass.commit(&[0, 1, 2, 3, 4, 5], &mut state).unwrap();
        let err =
            redundancy_incremental(KeyRows::flat_f32(&keys[..4], 2), 0.5, 1, &state).unwrap_err();
        assert!(matches!(
            err,
            PolicyError::StateAhead {
                described: 6,
                len: 2
            }
        ));
        let wide = [0.5f32; 24];
        let err = redundancy_incremental(KeyRows::flat_f32(&wide, 4), 0.5, 1, &state).unwrap_err();
        assert!(matches!(
            err,
            PolicyError::StateDim {
                state: 2,
                head_dim: 4
            }
        ));
        state.reset();
        assert_eq!(state.described(), 0);
        assert!(redundancy_incremental(KeyRows::flat_f32(&wide, 4), 0.5, 1, &state).is_ok());
    }
}
