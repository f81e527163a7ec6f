//! Describing appended slots one at a time, as they arrive (DESIGN.md §2 "Cost": `r(i)`
//! kept per slot and updated against each new key), so that a compression event finds
//! every row's latest similar slot already resolved and only reads the keys once more
//! for the column sums.
//!
//! Owns: [`HeadState::describe_appended`] (the state grows by one slot: its inverse norm,
//! the key sum, every older row whose entry with the new slot exceeds the threshold
//! takes it as `r(i)`, since no slot is newer, and the new row's own `r` is the latest
//! older row it matches) and [`appended_dots`] (the dot products it needs, in
//! [`super::dot`]'s fixed order, so that every threshold decision is the one the
//! compression-time scan and the oracle make, bit for bit).
//!
//! Must not know: where the keys live (the caller computes the dots while it reads them,
//! the engine inside its attention), importance, selection, the schedule.

use super::dot::{add_scaled_rows, dot, dots, inv_norm};
use super::keys::KeyElem;
#[cfg(x86_64_v3)]
use super::keys::Rows;
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
    let rows = &rows[..out.len() * d];
    // Whole groups through one reduction per group of rows (the tile modules'), the rest
    // four rows at a time.
    #[cfg(x86_64_v3)]
    let done = {
        // SAFETY: the target has AVX2, FMA and F16C (x86-64-v3, which the AVX-512 build
        // implies); `rows` holds exactly `out.len()` rows of `d == key.len()`.
        unsafe { super::tile::dots_tiled(key, &Rows::flat(rows, d), out) }
    };
    #[cfg(not(x86_64_v3))]
    let done = 0;
    let (rows, out) = (&rows[done * d..], &mut out[done..]);
    let mut quads = out.chunks_exact_mut(ROWS);
    let mut blocks = rows.chunks_exact(ROWS * d);
    for (o, block) in (&mut quads).zip(&mut blocks) {
        let rs: [&[E]; ROWS] = std::array::from_fn(|k| &block[k * d..(k + 1) * d]);
        o.copy_from_slice(&dots(key, rs));
    }
    for (o, row) in quads
        .into_remainder()
        .iter_mut()
        .zip(blocks.remainder().chunks_exact(d))
    {
        *o = dot(key, row);
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
    /// when the shapes do not match.
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
        if n > 0 && key.len() != self.key_sum.len() {
            return Err(PolicyError::StateDim {
                state: self.key_sum.len(),
                head_dim: key.len(),
            });
        }
        if n + 1 > MAX_LEN {
            return Err(PolicyError::TooLong { len: n + 1 });
        }
        if n == 0 {
            self.key_sum = vec![0.0; key.len()];
        }
        let inv = inv_norm(key);
        // Older rows: a match with the new slot is their latest (no slot is newer); the
        // entries are `CosineRows::entry_from_dot`'s, and `S[i][n] == S[n][i]` (a
        // symmetric dot times a commuted product). One branch-free pass that vectorises.
        let entry = |d: f32, inv_i: f32| d * (inv_i * inv);
        // In place through buffers on the stack, as `importance::max_into` does: a select
        // written back where it was read compiles to masked stores, slow on AMD CPUs.
        // The same pass finds the last older row that matches, one past its index in
        // `last` (0: none), since the new row's match with row `i` is row `i`'s with it.
        let (mut tl, mut te) = ([0u32; 64], [0.0f32; 64]);
        let mut last = 0u32;
        let rows = self
            .latest
            .chunks_mut(64)
            .zip(self.latest_entry.chunks_mut(64))
            .zip(self.inv_norm.chunks(64))
            .zip(dots.chunks(64));
        for (c, (((l, e), inv_c), d_c)) in rows.enumerate() {
            let m = l.len();
            let first = (64 * c) as u32 + 1;
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
                *ol = (n as u32 & hit) | (r & !hit);
                *oe = f32::from_bits((v.to_bits() & hit) | (old.to_bits() & !hit));
                chunk_last = chunk_last.max((first + k as u32) & hit);
            }
            last = last.max(chunk_last);
            l.copy_from_slice(&tl[..m]);
            e.copy_from_slice(&te[..m]);
        }
        // The new row's own: the diagonal (0) under a negative threshold, as in the oracle
        // (the new slot is the latest of all), else the last older row it matches, with
        // the entry the pass just stored there (`S[n][i] == S[i][n]`).
        let own = if 0.0 > threshold {
            (n as u32, 0.0)
        } else {
            match last.checked_sub(1) {
                Some(i) => (i, self.latest_entry[i as usize]),
                None => (NO_MATCH, 0.0),
            }
        };
        add_scaled_rows(&mut self.key_sum, [(key, inv)]);
        self.latest.push(own.0);
        self.latest_entry.push(own.1);
        self.inv_norm.push(inv);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::keys::KeyRows;
    use super::super::redundancy::redundancy_oracle;
    use super::super::redundancy_fast::redundancy_incremental;
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
