//! Redundancy without the O(L^2 d) cost (DESIGN.md §2 "Cost"; the definition is R-KV's,
//! arXiv 2505.24133, `cal_similarity` of Zefan-Cai/R-KV, and [`super::redundancy`]'s
//! oracle is the reference this file must reproduce exactly).
//!
//! Owns: [`HeadState`] (per sequence, layer and KV head: each resident slot's latest
//! similar slot `r(i)` resolved over the resident slots, the entry `S[i][r(i)]`, the
//! inverse key norms, and the f64 sum of the normalised keys) and the incremental update:
//! - column sums of the zero-diagonal cosine matrix as `k̂_j . (sum_i k̂_i) - ||k̂_j||^2`
//!   in O(L d), minus the one zeroed entry `S[i][r(i)]` of every row;
//! - `r(i)` for the slots appended since the last compression by a descending scan over
//!   all slots (stopping at the first match), and for older rows a descending scan over
//!   the new slots only (new slots have larger indices, so a match there wins);
//! - after a compression, `r(i)` remapped to the kept slots, with a re-search (below the
//!   evicted `r(i)`) only for rows whose `r(i)` was evicted; the key sum loses the
//!   evicted slots.
//!
//! Threshold decisions use [`super::cosine`], the same entry function as the oracle, so
//! every `r(i)` equals the oracle's bit for bit; only the column sums' summation order
//! differs (f64 here).
//!
//! Must not know: importance, selection rules, tensors. It relies on the engine's contract:
//! at the next compression, slot `i` of the cache is `kept[i]` of this one for every
//! `i < kept.len()`, with bit-identical keys, and newer slots follow.

use super::cosine::{dot_mixed, dot_mixed4, inv_norm, CosineRows};
use super::redundancy::{redundancy_from_column_sums, zeroed_column};
use super::PolicyError;

/// Marks "no similar slot" in [`HeadState`].
const NO_MATCH: u32 = u32::MAX;

/// Redundancy bookkeeping kept between compressions for one (sequence, layer, KV head).
/// Start each new sequence with [`HeadState::new`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeadState {
    /// `[n_described]` latest similar slot of each of the first `n_described` slots,
    /// resolved over those slots only; `NO_MATCH` when there is none.
    latest: Vec<u32>,
    /// `[n_described]` the entry `S[i][r(i)]` (unused where `latest` is `NO_MATCH`).
    latest_entry: Vec<f32>,
    /// `[n_described]` inverse key norms.
    inv_norm: Vec<f32>,
    /// `[d]` sum of the normalised keys of the described slots (empty when none).
    key_sum: Vec<f64>,
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

    /// Forget everything (the next compression computes from scratch).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// The stored `r(i)` of the described slots (`None`: no similar slot). For tests.
    pub fn latest(&self) -> Vec<Option<usize>> {
        self.latest.iter().map(|&r| from_u32(r)).collect()
    }
}

#[inline]
fn from_u32(r: u32) -> Option<usize> {
    (r != NO_MATCH).then_some(r as usize)
}

/// One incremental redundancy computation, ready to be committed once the kept set is
/// known.
#[derive(Debug, Clone)]
pub struct FastRedundancy<'a> {
    /// `[L - w]` redundancy of the candidates.
    pub redundancy: Vec<f64>,
    /// `[L]` latest similar slot of every row over all `L` slots.
    pub latest: Vec<Option<usize>>,
    /// `[L]` the entry `S[i][r(i)]` (`S[i][0]` for a row without a match).
    zeroed_entry: Vec<f32>,
    /// `[L]` inverse key norms.
    inv_norm: Vec<f32>,
    /// `[d]` sum of all `L` normalised keys.
    key_sum: Vec<f64>,
    /// `[L, d]` the keys.
    keys: &'a [f32],
    dim: usize,
    threshold: f32,
}

/// Add `sign * inv * key` to `sum` (f64).
#[inline]
fn accumulate(sum: &mut [f64], key: &[f32], inv: f32, sign: f64) {
    let scale = sign * f64::from(inv);
    for (t, &x) in sum.iter_mut().zip(key) {
        *t += f64::from(x) * scale;
    }
}

/// Compute redundancy for the `L = keys.len() / dim` slots, reusing `state` for the first
/// `state.described()` slots. `keys`: `[L, d]`.
pub fn redundancy_incremental<'a>(
    keys: &'a [f32],
    dim: usize,
    threshold: f32,
    window: usize,
    state: &HeadState,
) -> Result<FastRedundancy<'a>, PolicyError> {
    let len = keys.len().checked_div(dim).unwrap_or(0);
    if len >= NO_MATCH as usize {
        return Err(PolicyError::TooLong { len });
    }
    let old = state.described();
    if old > len {
        return Err(PolicyError::StateAhead {
            described: old,
            len,
        });
    }
    let mut key_sum = if old == 0 {
        vec![0.0; dim]
    } else {
        state.key_sum.clone()
    };
    if key_sum.len() != dim {
        return Err(PolicyError::StateDim {
            state: key_sum.len(),
            head_dim: dim,
        });
    }
    let mut inv = Vec::with_capacity(len);
    inv.extend_from_slice(&state.inv_norm);
    for key in keys[old * dim..len * dim].chunks_exact(dim) {
        let v = inv_norm(key);
        accumulate(&mut key_sum, key, v, 1.0);
        inv.push(v);
    }
    let s = CosineRows {
        keys,
        inv_norm: &inv,
        dim,
    };
    // Old rows: a match among the new slots (descending) beats the stored one.
    // New rows: search everything, newest first.
    let mut hits = vec![None; len];
    let old_rows: Vec<usize> = (0..old).collect();
    let new_slots: Vec<usize> = (old..len).rev().collect();
    s.latest_matches(&old_rows, threshold, &new_slots, &mut hits[..old]);
    let new_rows: Vec<usize> = (old..len).collect();
    let all_slots: Vec<usize> = (0..len).rev().collect();
    s.latest_matches(&new_rows, threshold, &all_slots, &mut hits[old..]);
    let mut latest = Vec::with_capacity(len);
    let mut zeroed_entry = Vec::with_capacity(len);
    for (i, hit) in hits.into_iter().enumerate() {
        let stored = (i < old)
            .then(|| from_u32(state.latest[i]).map(|r| (r, state.latest_entry[i])))
            .flatten();
        let r = hit.or(stored);
        latest.push(r.map(|(j, _)| j));
        zeroed_entry.push(r.map_or_else(|| s.entry(i, 0), |(_, v)| v));
    }
    let column_sums = column_sums_fast(&s, &key_sum, &latest, &zeroed_entry);
    let redundancy = redundancy_from_column_sums(&column_sums, window);
    Ok(FastRedundancy {
        redundancy,
        latest,
        zeroed_entry,
        inv_norm: inv,
        key_sum,
        keys,
        dim,
        threshold,
    })
}

/// Column sums of `S` (zero diagonal) after each row zeroes `S[i][r(i)]`, in O(L d):
/// `c_j = k̂_j . sum - ||k̂_j||^2 - (entries of the rows zeroing column j)`.
fn column_sums_fast(
    s: &CosineRows<'_>,
    key_sum: &[f64],
    latest: &[Option<usize>],
    zeroed: &[f32],
) -> Vec<f64> {
    // ||k̂_j||^2 from the inverse norm: (||k|| / (||k|| + 1e-8))^2, where
    // ||k|| * inv = (1 / inv - 1e-8) * inv = 1 - 1e-8 * inv (no division).
    let column = |j: usize, dot: f64| {
        let inv = f64::from(s.inv_norm[j]);
        let self_sq = (1.0 - 1e-8 * inv).max(0.0).powi(2);
        inv * dot - self_sq
    };
    let len = s.len();
    let mut sums = Vec::with_capacity(len);
    let quads = len - len % 4;
    for j in (0..quads).step_by(4) {
        let rows: [&[f32]; 4] = std::array::from_fn(|k| s.row(j + k));
        for (k, dot) in dot_mixed4(rows, key_sum).into_iter().enumerate() {
            sums.push(column(j + k, dot));
        }
    }
    for j in quads..len {
        sums.push(column(j, dot_mixed(s.row(j), key_sum)));
    }
    for (i, (&r, &v)) in latest.iter().zip(zeroed).enumerate() {
        let j = zeroed_column(r);
        if let Some(c) = sums.get_mut(j) {
            if i != j {
                *c -= f64::from(v);
            }
        }
    }
    sums
}

impl FastRedundancy<'_> {
    /// Record the kept slots (ascending indices into this cache) in `state`: each kept
    /// row's `r(i)` remapped to the new indices, re-searched among the kept slots below
    /// it when `r(i)` itself was evicted; the key sum loses the evicted slots.
    pub fn commit(&self, kept: &[usize], state: &mut HeadState) -> Result<(), PolicyError> {
        let s = CosineRows {
            keys: self.keys,
            inv_norm: &self.inv_norm,
            dim: self.dim,
        };
        let len = self.latest.len();
        let mut new_index = vec![NO_MATCH; len];
        for (a, &i) in kept.iter().enumerate() {
            let slot = new_index
                .get_mut(i)
                .ok_or(PolicyError::KeptOutOfRange { slot: i, len })?;
            *slot = a as u32;
        }
        // Remap every kept row's r(i) without branching on whether it survived (that is
        // data-dependent); the rows whose r(i) was evicted are re-searched afterwards.
        let mut latest = Vec::with_capacity(kept.len());
        let mut latest_entry = Vec::with_capacity(kept.len());
        let mut lost = Vec::new();
        for (a, &i) in kept.iter().enumerate() {
            let (r, v) = match self.latest[i] {
                None => (NO_MATCH, 0.0),
                Some(j) => (new_index[j], self.zeroed_entry[i]),
            };
            if r == NO_MATCH && self.latest[i].is_some() {
                lost.push(a);
            }
            latest.push(r);
            latest_entry.push(v);
        }
        for a in lost {
            let i = kept[a];
            let j = self.latest[i].unwrap_or(0);
            // Kept slots below the evicted r(i), newest first.
            let below = kept.partition_point(|&x| x < j);
            let hit = s.latest_match(i, self.threshold, kept[..below].iter().rev().copied());
            (latest[a], latest_entry[a]) = hit.map_or((NO_MATCH, 0.0), |(h, v)| (new_index[h], v));
        }
        let mut key_sum = self.key_sum.clone();
        for (e, &idx) in new_index.iter().enumerate() {
            if idx == NO_MATCH {
                accumulate(&mut key_sum, s.row(e), self.inv_norm[e], -1.0);
            }
        }
        state.inv_norm = kept.iter().map(|&i| self.inv_norm[i]).collect();
        state.latest = latest;
        state.latest_entry = latest_entry;
        state.key_sum = key_sum;
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
        let fast = redundancy_incremental(&keys, 2, 0.5, 1, &HeadState::new()).unwrap();
        let oracle = redundancy_oracle(&keys, 2, 0.5, 1);
        assert_eq!(fast.latest, oracle.latest);
        for (a, e) in fast.redundancy.iter().zip(&oracle.redundancy) {
            assert!((a - e).abs() < 1e-7);
        }
    }

    #[test]
    fn evicted_latest_is_re_searched() {
        let keys = keys_with_copies();
        let fast = redundancy_incremental(&keys, 2, 0.5, 1, &HeadState::new()).unwrap();
        assert_eq!(fast.latest[0], Some(5));
        let mut state = HeadState::new();
        // Evict slot 5 (a''): slot 0's latest becomes a' (old 2 -> new 1).
        let kept = [0, 2, 3, 4];
        fast.commit(&kept, &mut state).unwrap();
        let kept_keys: Vec<f32> = kept
            .iter()
            .flat_map(|&i| keys[2 * i..2 * i + 2].to_vec())
            .collect();
        let oracle = redundancy_oracle(&kept_keys, 2, 0.5, 1);
        assert_eq!(state.latest(), oracle.latest);
        assert_eq!(state.latest()[0], Some(1));
    }

    #[test]
    fn new_slots_become_latest() {
        let keys = keys_with_copies();
        let mut state = HeadState::new();
        let first = redundancy_incremental(&keys[..8], 2, 0.5, 1, &state).unwrap();
        first.commit(&[0, 1, 2, 3], &mut state).unwrap();
        // Append b' and a'': rows 0, 1, 2 now match the new slots.
        let second = redundancy_incremental(&keys, 2, 0.5, 1, &state).unwrap();
        let oracle = redundancy_oracle(&keys, 2, 0.5, 1);
        assert_eq!(second.latest, oracle.latest);
        assert_eq!(second.latest[..3], [Some(5), Some(4), Some(5)]);
    }

    #[test]
    fn bad_state_and_kept_are_errors() {
        let keys = keys_with_copies();
        let mut state = HeadState::new();
        let pass = redundancy_incremental(&keys, 2, 0.5, 1, &state).unwrap();
        assert!(matches!(
            pass.commit(&[0, 9], &mut state),
            Err(PolicyError::KeptOutOfRange { .. })
        ));
        pass.commit(&[0, 1, 2, 3, 4, 5], &mut state).unwrap();
        let err = redundancy_incremental(&keys[..4], 2, 0.5, 1, &state).unwrap_err();
        assert!(matches!(
            err,
            PolicyError::StateAhead {
                described: 6,
                len: 2
            }
        ));
        let wide = [0.5f32; 24];
        let err = redundancy_incremental(&wide, 4, 0.5, 1, &state).unwrap_err();
        assert!(matches!(
            err,
            PolicyError::StateDim {
                state: 2,
                head_dim: 4
            }
        ));
        state.reset();
        assert_eq!(state.described(), 0);
        assert!(redundancy_incremental(&wide, 4, 0.5, 1, &state).is_ok());
    }
}
