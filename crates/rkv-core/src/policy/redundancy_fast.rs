//! Redundancy without the O(L^2 d) cost (DESIGN.md §2 "Cost"; the definition is R-KV's,
//! arXiv 2505.24133, `cal_similarity` of Zefan-Cai/R-KV, and [`super::redundancy`]'s
//! oracle is the reference this file must reproduce exactly).
//!
//! Owns: [`HeadState`] (per sequence, layer and KV head: each resident slot's latest
//! similar slot `r(i)`, resolved over the resident slots) and the incremental update:
//! - column sums of the zero-diagonal cosine matrix as `k̂_j . (sum_i k̂_i) - ||k̂_j||^2`
//!   in O(L d), minus the one zeroed entry `S[i][r(i)]` of every row;
//! - `r(i)` for the slots appended since the last compression by a descending scan over
//!   all slots (stopping at the first match), and for older rows a descending scan over
//!   the new slots only (new slots have larger indices, so a match there wins);
//! - after a compression, `r(i)` remapped to the kept slots, with a re-search (below the
//!   evicted `r(i)`) only for rows whose `r(i)` was evicted.
//!
//! Threshold decisions use [`super::cosine`], the same entry function as the oracle, so
//! every `r(i)` equals the oracle's bit for bit; only the column sums' summation order
//! differs (f64 here).
//!
//! Must not know: importance, selection rules, tensors. It relies on the engine's contract:
//! at the next compression, slot `i` of the cache is `kept[i]` of this one for every
//! `i < kept.len()`, with bit-identical keys, and newer slots follow.

use super::cosine::{normalize_keys, CosineRows};
use super::redundancy::{redundancy_from_column_sums, zeroed_column};
use super::PolicyError;

/// Marks "no similar slot" in [`HeadState`].
const NO_MATCH: u32 = u32::MAX;

/// Redundancy bookkeeping kept between compressions for one (sequence, layer, KV head).
/// Start each new sequence with [`HeadState::new`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeadState {
    /// `[n_described]` latest similar slot of each of the first `n_described` slots,
    /// resolved over those slots only; `NO_MATCH` when there is none.
    latest: Vec<u32>,
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
        self.latest.clear();
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

#[inline]
fn to_u32(r: Option<usize>) -> u32 {
    // Lengths are checked to fit below NO_MATCH before any state is built.
    r.map_or(NO_MATCH, |j| j as u32)
}

/// One incremental redundancy computation, ready to be committed once the kept set is
/// known.
#[derive(Debug, Clone)]
pub struct FastRedundancy {
    /// `[L - w]` redundancy of the candidates.
    pub redundancy: Vec<f64>,
    /// `[L]` latest similar slot of every row over all `L` slots.
    pub latest: Vec<Option<usize>>,
    /// `[L, d]` normalised keys.
    normed: Vec<f32>,
    dim: usize,
    threshold: f32,
}

/// Compute redundancy for the `L = keys.len() / dim` slots, reusing `state`'s `r(i)` for
/// the first `state.described()` slots. `keys`: `[L, d]`.
pub fn redundancy_incremental(
    keys: &[f32],
    dim: usize,
    threshold: f32,
    window: usize,
    state: &HeadState,
) -> Result<FastRedundancy, PolicyError> {
    let normed = normalize_keys(keys, dim);
    let s = CosineRows {
        normed: &normed,
        dim,
    };
    let len = s.len();
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
    let mut latest = Vec::with_capacity(len);
    // Old rows: a match among the new slots (descending) beats the stored one.
    for (i, &stored) in state.latest.iter().enumerate() {
        let r = s
            .latest_match(i, threshold, (old..len).rev())
            .or(from_u32(stored));
        latest.push(r);
    }
    // New rows: search everything, newest first.
    for i in old..len {
        latest.push(s.latest_match(i, threshold, (0..len).rev()));
    }
    let column_sums = column_sums_fast(&s, &latest);
    let redundancy = redundancy_from_column_sums(&column_sums, window);
    Ok(FastRedundancy {
        redundancy,
        latest,
        normed,
        dim,
        threshold,
    })
}

/// Column sums of `S` (zero diagonal) after each row zeroes `S[i][r(i)]`, in O(L d).
fn column_sums_fast(s: &CosineRows<'_>, latest: &[Option<usize>]) -> Vec<f64> {
    let dim = s.dim;
    let mut total = vec![0.0f64; dim];
    for i in 0..s.len() {
        for (t, &x) in total.iter_mut().zip(s.row(i)) {
            *t += f64::from(x);
        }
    }
    let mut sums: Vec<f64> = (0..s.len())
        .map(|j| {
            let row = s.row(j);
            let with_self: f64 = row.iter().zip(&total).map(|(&x, t)| f64::from(x) * t).sum();
            let self_dot: f64 = row.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
            with_self - self_dot
        })
        .collect();
    for (i, &r) in latest.iter().enumerate() {
        let j = zeroed_column(r);
        if let Some(c) = sums.get_mut(j) {
            *c -= f64::from(s.entry(i, j));
        }
    }
    sums
}

impl FastRedundancy {
    /// Record the kept slots (ascending indices into this cache) in `state`: each kept
    /// row's `r(i)` remapped to the new indices, re-searched among the kept slots below
    /// it when `r(i)` itself was evicted.
    pub fn commit(&self, kept: &[usize], state: &mut HeadState) -> Result<(), PolicyError> {
        let s = CosineRows {
            normed: &self.normed,
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
        let mut next = Vec::with_capacity(kept.len());
        for &i in kept {
            let r = match self.latest[i] {
                None => NO_MATCH,
                Some(j) if new_index[j] != NO_MATCH => new_index[j],
                Some(j) => {
                    // Kept slots below the evicted r(i), newest first.
                    let below = kept.partition_point(|&x| x < j);
                    let hit =
                        s.latest_match(i, self.threshold, kept[..below].iter().rev().copied());
                    to_u32(hit.map(|h| new_index[h] as usize))
                }
            };
            next.push(r);
        }
        state.latest = next;
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
        state.reset();
        assert_eq!(state.described(), 0);
    }
}
