//! The per-row bookkeeping of the incremental redundancy carried through a compression
//! in one pass over the rows (DESIGN.md §2 "Cost"): the kept rows' latest similar slot
//! remapped to their new indices, their zeroed entries and inverse norms, the rows whose
//! latest similar slot was evicted, and the evicted rows themselves.
//!
//! Owns: that pass, in plain Rust without branches on which rows are kept and, chosen at
//! run time (`crate::simd`), where the CPU has AVX-512F 16 rows at a time (the kept lanes
//! packed by compress, the remap a gather), where it has x86-64-v3 (AVX2) only, 8 at a
//! time (packed by a permutation looked up by the mask); all give the same output as the
//! definition (a branch per row, in the tests).
//!
//! Must not know: what the entries mean, the key sum, selection rules.

/// Marks "no similar slot" / "not kept" (the caller's `NO_MATCH`).
const NONE: u32 = u32::MAX;

/// What one compression leaves of the bookkeeping.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Carried {
    /// `[kept]` each kept row's latest similar slot as a new index (`NONE`: none, or evicted).
    pub latest: Vec<u32>,
    /// `[kept]` the kept rows' entries.
    pub entry: Vec<f32>,
    /// `[kept]` the kept rows' inverse norms.
    pub inv: Vec<f32>,
    /// New indices of the kept rows whose latest similar slot was evicted, ascending.
    pub lost: Vec<u32>,
    /// The evicted rows (old indices), ascending.
    pub evicted: Vec<u32>,
}

/// Carry the bookkeeping of rows `0..len` through a compression. `new_index`: `[len + 1]`,
/// each row's index among the kept rows or `NONE`, with `new_index[len] == NONE` (what a
/// row without a match remaps to); `latest`, `entry`, `inv`: `[len]` (`latest` values
/// `< len` or `NONE`). Shorter inputs are read up to the shortest.
pub(super) fn carry(new_index: &[u32], latest: &[u32], entry: &[f32], inv: &[f32]) -> Carried {
    let len = new_index
        .len()
        .saturating_sub(1)
        .min(latest.len())
        .min(entry.len())
        .min(inv.len());
    let mut out = Carried::default();
    #[cfg(target_arch = "x86_64")]
    let done = if len > i32::MAX as usize {
        0
    } else if crate::simd::avx512() {
        // SAFETY: the run-time check above: the CPU has the features `avx512::carry`
        // enables; the slices are at least `len` (`new_index` `len + 1`) long; every
        // index fits the gather's signed 32 bits.
        unsafe { avx512::carry(&new_index[..=len], latest, entry, inv, &mut out) }
    } else if crate::simd::v3() {
        // SAFETY: the run-time check above: the CPU has the features `avx2::carry`
        // enables; the slices are at least `len` (`new_index` `len + 1`) long; every
        // index fits the gather's signed 32 bits.
        unsafe { avx2::carry(&new_index[..=len], latest, entry, inv, &mut out) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    carry_rows(done..len, &new_index[..=len], latest, entry, inv, &mut out);
    out
}

/// [`carry`] of `rows` in plain Rust, appended to `out`, without branching on which rows
/// are kept (about one in nine is evicted, at places the branch predictor cannot learn):
/// each row is written at the next kept place and at the next evicted place, and only
/// one of the two counts advances. `new_index`: `[len + 1]`; the others at least `len`
/// long.
fn carry_rows(
    rows: std::ops::Range<usize>,
    new_index: &[u32],
    latest: &[u32],
    entry: &[f32],
    inv: &[f32],
    out: &mut Carried,
) {
    let len = new_index.len() - 1;
    let (k0, e0) = (out.latest.len(), out.evicted.len());
    // One place of slack each: a row is written before its count decides whether it stays.
    let room = rows.len() + 1;
    out.latest.resize(k0 + room, 0);
    out.entry.resize(k0 + room, 0.0);
    out.inv.resize(k0 + room, 0.0);
    out.evicted.resize(e0 + room, 0);
    let (mut kept, mut evicted) = (k0, e0);
    for i in rows {
        let keep = new_index[i] != NONE;
        let r = latest[i];
        let m = new_index[(r as usize).min(len)];
        out.latest[kept] = m;
        out.entry[kept] = entry[i];
        out.inv[kept] = inv[i];
        out.evicted[evicted] = i as u32;
        // Rare: a kept row whose latest similar slot was evicted.
        if keep & (m == NONE) & (r != NONE) {
            out.lost.push(kept as u32);
        }
        kept += usize::from(keep);
        evicted += usize::from(!keep);
    }
    out.latest.truncate(kept);
    out.entry.truncate(kept);
    out.inv.truncate(kept);
    out.evicted.truncate(evicted);
}

/// The output buffers of a vectorised pass (`avx512`, `avx2`), written a group of rows at
/// a time at the counts so far (so with a group's width of slack), then cut to them.
#[cfg(target_arch = "x86_64")]
struct Groups {
    latest: Vec<u32>,
    entry: Vec<f32>,
    inv: Vec<f32>,
    evicted: Vec<u32>,
    /// Kept rows so far.
    kept: usize,
    /// Evicted rows so far.
    gone: usize,
}

#[cfg(target_arch = "x86_64")]
impl Groups {
    /// Buffers for `len` rows, in groups of `lanes`.
    fn new(len: usize, lanes: usize) -> Self {
        Self {
            latest: vec![0; len + lanes],
            entry: vec![0.0; len + lanes],
            inv: vec![0.0; len + lanes],
            evicted: vec![0; len + lanes],
            kept: 0,
            gone: 0,
        }
    }

    /// After a group of `lanes` rows whose kept lanes are the bits of `keep`: the new
    /// indices of its `lost` lanes (kept rows whose latest similar slot was evicted:
    /// rare) go to `out`, and the counts advance.
    #[inline(always)]
    fn advance(&mut self, out: &mut Carried, keep: u32, lost: u32, lanes: usize) {
        let mut bits = lost;
        while bits != 0 {
            let b = bits.trailing_zeros();
            let below = keep & ((1u32 << b) - 1);
            out.lost
                .push((self.kept + below.count_ones() as usize) as u32);
            bits &= bits - 1;
        }
        self.kept += keep.count_ones() as usize;
        self.gone += lanes - keep.count_ones() as usize;
    }

    /// The buffers, cut to their counts, into `out`.
    fn finish(mut self, out: &mut Carried) {
        self.latest.truncate(self.kept);
        self.entry.truncate(self.kept);
        self.inv.truncate(self.kept);
        self.evicted.truncate(self.gone);
        out.latest = self.latest;
        out.entry = self.entry;
        out.inv = self.inv;
        out.evicted = self.evicted;
    }
}

/// The pass 16 rows at a time, for CPUs with AVX-512F (checked at run time).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::super::tile_avx512::{pack_epi32, pack_ps};
    use super::{Carried, Groups, NONE};
    use std::arch::x86_64::*;

    /// Rows per step.
    const LANES: usize = 16;

    /// The whole groups of 16 rows of [`super::carry`] (`new_index`: `[len + 1]`);
    /// returns how many rows it did. No branch on which rows are kept.
    ///
    /// # Safety
    /// The CPU must have the features this enables; `latest`, `entry` and `inv` at least
    /// `len` long; `len <= i32::MAX` (the gather's indices are signed).
    #[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
    pub(super) unsafe fn carry(
        new_index: &[u32],
        latest: &[u32],
        entry: &[f32],
        inv: &[f32],
        out: &mut Carried,
    ) -> usize {
        let len = new_index.len() - 1;
        let done = len / LANES * LANES;
        let mut to = Groups::new(len, LANES);
        let none = _mm512_set1_epi32(NONE as i32);
        let last = _mm512_set1_epi32(len as i32);
        let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let base = new_index.as_ptr().cast::<i32>();
        for i0 in (0..done).step_by(LANES) {
            let idx = _mm512_loadu_si512(new_index.as_ptr().add(i0).cast());
            let keep = _mm512_cmpneq_epu32_mask(idx, none);
            let r = _mm512_loadu_si512(latest.as_ptr().add(i0).cast());
            // `new_index[min(r, len)]` for the kept lanes (`NONE` clamps to `len`).
            let m = _mm512_mask_i32gather_epi32::<4>(none, keep, _mm512_min_epu32(r, last), base);
            let lost = keep & _mm512_cmpeq_epu32_mask(m, none) & _mm512_cmpneq_epu32_mask(r, none);
            let e = _mm512_loadu_ps(entry.as_ptr().add(i0));
            let v = _mm512_loadu_ps(inv.as_ptr().add(i0));
            pack_epi32(to.latest.as_mut_ptr().add(to.kept), keep, m);
            pack_ps(to.entry.as_mut_ptr().add(to.kept), keep, e);
            pack_ps(to.inv.as_mut_ptr().add(to.kept), keep, v);
            let rows = _mm512_add_epi32(_mm512_set1_epi32(i0 as i32), lane);
            pack_epi32(to.evicted.as_mut_ptr().add(to.gone), !keep, rows);
            to.advance(out, u32::from(keep), u32::from(lost), LANES);
        }
        to.finish(out);
        done
    }
}

/// The pass 8 rows at a time on x86-64-v3 CPUs without AVX-512 (AMD Zen 1-3; checked at
/// run time): the remap a gather, the kept lanes packed by a permutation looked up by
/// their 8-bit mask.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Carried, Groups, NONE};
    use std::arch::x86_64::*;

    /// Rows per step.
    const LANES: usize = 8;

    /// For each 8-bit mask of lanes, the permutation that packs the masked lanes first,
    /// in order.
    const PACK: [[i32; LANES]; 256] = {
        let mut t = [[0i32; LANES]; 256];
        let mut m = 0;
        while m < 256 {
            let (mut k, mut lane) = (0usize, 0i32);
            while lane < LANES as i32 {
                if (m >> lane) & 1 == 1 {
                    t[m][k] = lane;
                    k += 1;
                }
                lane += 1;
            }
            m += 1;
        }
        t
    };

    /// The whole groups of 8 rows of [`super::carry`] (`new_index`: `[len + 1]`); returns
    /// how many rows it did. No branch on which rows are kept.
    ///
    /// # Safety
    /// The CPU must have the features this enables; `latest`, `entry` and `inv` at least
    /// `len` long; `len <= i32::MAX` (the gather's indices are signed).
    #[target_feature(enable = "avx2,fma,f16c,popcnt")]
    pub(super) unsafe fn carry(
        new_index: &[u32],
        latest: &[u32],
        entry: &[f32],
        inv: &[f32],
        out: &mut Carried,
    ) -> usize {
        let len = new_index.len() - 1;
        let done = len / LANES * LANES;
        let mut to = Groups::new(len, LANES);
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let none = _mm256_set1_epi32(NONE as i32);
        let last = _mm256_set1_epi32(len as i32);
        let base = new_index.as_ptr().cast::<i32>();
        for i0 in (0..done).step_by(LANES) {
            let idx = _mm256_loadu_si256(new_index.as_ptr().add(i0).cast());
            let evicted = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(idx, none)));
            let keep = !evicted as u32 & 0xFF;
            let r = _mm256_loadu_si256(latest.as_ptr().add(i0).cast());
            // `new_index[min(r, len)]` (`NONE` clamps to `len`); evicted lanes are
            // gathered too and packed away.
            let m = _mm256_i32gather_epi32::<4>(base, _mm256_min_epu32(r, last));
            let no_m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(m, none)));
            let no_r = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(r, none)));
            let lost = keep & no_m as u32 & !no_r as u32;
            let perm = _mm256_loadu_si256(PACK[keep as usize].as_ptr().cast());
            let e = _mm256_loadu_ps(entry.as_ptr().add(i0));
            let v = _mm256_loadu_ps(inv.as_ptr().add(i0));
            _mm256_storeu_si256(
                to.latest.as_mut_ptr().add(to.kept).cast(),
                _mm256_permutevar8x32_epi32(m, perm),
            );
            _mm256_storeu_ps(
                to.entry.as_mut_ptr().add(to.kept),
                _mm256_permutevar8x32_ps(e, perm),
            );
            _mm256_storeu_ps(
                to.inv.as_mut_ptr().add(to.kept),
                _mm256_permutevar8x32_ps(v, perm),
            );
            let rows = _mm256_add_epi32(_mm256_set1_epi32(i0 as i32), lane);
            let to_evicted = _mm256_loadu_si256(PACK[evicted as usize & 0xFF].as_ptr().cast());
            _mm256_storeu_si256(
                to.evicted.as_mut_ptr().add(to.gone).cast(),
                _mm256_permutevar8x32_epi32(rows, to_evicted),
            );
            to.advance(out, keep, lost, LANES);
        }
        to.finish(out);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random bookkeeping: about one row in eight evicted, some rows without a match.
    fn case(len: usize, seed: u64) -> (Vec<u32>, Vec<u32>, Vec<f32>, Vec<f32>) {
        let mut x = seed;
        let mut next = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as usize
        };
        let mut new_index = vec![NONE; len + 1];
        let mut a = 0;
        for slot in new_index.iter_mut().take(len) {
            if next() % 8 != 0 {
                *slot = a;
                a += 1;
            }
        }
        let latest = (0..len)
            .map(|_| {
                if next() % 5 == 0 {
                    NONE
                } else {
                    (next() % len) as u32
                }
            })
            .collect();
        let entry = (0..len).map(|i| i as f32 * 0.5 - 3.0).collect();
        let inv = (0..len).map(|i| 1.0 / (i as f32 + 1.0)).collect();
        (new_index, latest, entry, inv)
    }

    /// [`carry`] with a branch per row, as the pass is defined.
    fn carry_by_definition(
        new_index: &[u32],
        latest: &[u32],
        entry: &[f32],
        inv: &[f32],
    ) -> Carried {
        let len = new_index.len() - 1;
        let mut out = Carried::default();
        for i in 0..len {
            let a = new_index[i];
            if a == NONE {
                out.evicted.push(i as u32);
                continue;
            }
            let r = latest[i];
            let m = new_index[(r as usize).min(len)];
            if m == NONE && r != NONE {
                out.lost.push(out.latest.len() as u32);
            }
            out.latest.push(m);
            out.entry.push(entry[i]);
            out.inv.push(inv[i]);
        }
        out
    }

    /// The pass (vectorised where it is) and the plain one agree with the definition, for
    /// lengths with and without a partial last group; the output is what its definition
    /// says.
    #[test]
    fn carry_matches_plain_rows() {
        for (len, seed) in [
            (0usize, 1u64),
            (7, 2),
            (16, 3),
            (37, 4),
            (1152, 5),
            (1153, 6),
        ] {
            let (new_index, latest, entry, inv) = case(len, seed);
            let got = carry(&new_index, &latest, &entry, &inv);
            let want = carry_by_definition(&new_index, &latest, &entry, &inv);
            assert_eq!(got, want, "len {len}");
            let mut plain = Carried::default();
            carry_rows(0..len, &new_index, &latest, &entry, &inv, &mut plain);
            assert_eq!(plain, want, "len {len}");
            let kept: Vec<usize> = (0..len).filter(|&i| new_index[i] != NONE).collect();
            assert_eq!(want.latest.len(), kept.len());
            assert_eq!(want.evicted.len(), len - kept.len());
            for (a, &i) in kept.iter().enumerate() {
                let r = latest[i];
                let m = if r == NONE {
                    NONE
                } else {
                    new_index[r as usize]
                };
                assert_eq!(want.latest[a], m);
                assert_eq!(want.entry[a], entry[i]);
                assert_eq!(want.lost.contains(&(a as u32)), r != NONE && m == NONE);
            }
        }
    }
}
