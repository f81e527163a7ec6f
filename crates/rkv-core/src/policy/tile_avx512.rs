//! Tiles of 8 rows x 2 vectors of dot products on AVX-512, and the two passes of the
//! incremental redundancy built on them (DESIGN.md §2 "Cost"): the first sweep (every row
//! against the newest slot and the key sum) and the old rows' latest-match scan against a
//! short run of candidates (the new slots); also the new rows' inverse norms, 16 rows at
//! a time through the same reduction.
//!
//! Owns: the tile's 16 dot products in [`super::dot`]'s order (lane `l` of a 256-bit
//! register accumulates elements `l, l + 8, ...` by fused multiply-add, the tail as a
//! partial block; the tree 8 -> 4 -> 2 -> 1 run on all 16 registers at once, pairing the
//! same lanes at every level, so each product is bit-identical to its own
//! [`super::dot::dot`]; see there for why 256 bits), the entries
//! `S[i][j] = dot * (inv_i * inv_j)` of [`CosineRows::entry_from_dot`], and the
//! resolution of two tiles (16 rows, one lane each) at once without branching on the
//! data: hits are selected by mask, the rows still pending are packed down, the hits
//! listed.
//!
//! Must not know: what the rows mean beyond the entry function, column sums, selection.
//! Taken where the CPU has AVX-512F (and x86-64-v3's features, which every such CPU has),
//! chosen at run time by the callers (`crate::simd`), which keep their portable loops.
//! The entry points carry `#[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]`
//! (every AVX-512 intrinsic here needs AVX-512F only): the `#[inline(always)]` helpers
//! here and in `super::dot` and `super::keys` are compiled into them.

use std::arch::x86_64::*;

use super::cosine::CosineRows;
use super::dot::{fmadd_tail, tail_lanes};
use super::keys::{KeyElem, Rows};

/// Rows per tile.
const ROWS: usize = 8;

/// Rows resolved together: two tiles.
const STEP: usize = 2 * ROWS;

/// f32 lanes of a 512-bit register: rows resolved (or normalised) at once.
const LANES: usize = 16;

/// The fixed order's lane count: f32 lanes of the 256-bit accumulators.
const W: usize = 8;

/// Fewest pending rows [`latest_matches_tiled`] is worth calling for (one tile).
pub(super) const MIN_ROWS: usize = ROWS;

/// Rows [`newest_and_sums_tiled`] reads per call of its `prefetch`.
pub(super) const SWEEP_ROWS: usize = STEP;

/// Rows [`inv_norms_tiled`] reads per call of its `prefetch`.
pub(super) const NORM_ROWS: usize = LANES;

/// For each row `i` of `pending` (each below the candidates), the largest candidate `j`
/// of `top - count..top` with `S[i][j] > threshold` goes to `latest[i]`, its entry to
/// `entry[i]`; `pending` keeps the rows without a match, in order. Candidates are taken
/// two at a time from the top (each widened once); the scan stops when no row is
/// pending, and an odd last candidate is left to the caller. Returns how many candidates
/// were scanned, from the top.
///
/// # Safety
/// The CPU must have the features this enables (the caller's run-time check).
#[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
pub(super) unsafe fn latest_matches_tiled<E: KeyElem>(
    s: &CosineRows<'_, E>,
    pending: &mut Vec<usize>,
    threshold: f32,
    top: usize,
    count: usize,
    latest: &mut [u32],
    entry: &mut [f32],
) -> usize {
    let d = s.keys.dim();
    let dp = d.div_ceil(W) * W;
    let pairs = count / 2;
    if pairs == 0 || pending.is_empty() || dp == 0 {
        return 0;
    }
    // The pending rows (index, inverse norm), `n` of them; a step reads 16 entries and
    // writes up to 16 at or below its start (the slack).
    let mut n = pending.len();
    let mut live: Vec<u32> = pending.iter().map(|&i| i as u32).collect();
    let mut inv: Vec<f32> = pending.iter().map(|&i| s.inv_norm[i]).collect();
    live.resize(n + STEP, 0);
    inv.resize(n + STEP, 0.0);
    // The rows' hits, applied at the end: row, candidate, entry.
    let (mut hit_row, mut hit_j, mut hit_v) = (
        vec![0u32; n + STEP],
        vec![0u32; n + STEP],
        vec![0.0f32; n + STEP],
    );
    let mut hits = 0;
    let thr = _mm512_set1_ps(threshold);
    // Row r's entries with candidates 0 and 1 in lane r (rows 8.. from the second tile).
    let (with_c0, with_c1) = pair_lanes16();
    // The pair of candidates being scanned, widened as the scan reaches it (most rows
    // match within the first few pairs), each zero-padded to whole registers.
    let mut cand = vec![0.0f32; 2 * dp];
    let mut scanned = 0;
    for k in 0..pairs {
        if n == 0 {
            break;
        }
        let (j0, j1) = (top - 1 - 2 * k, top - 2 - 2 * k);
        let (w0, w1) = cand.split_at_mut(dp);
        E::widen_into(s.row(j0), &mut w0[..d]);
        E::widen_into(s.row(j1), &mut w1[..d]);
        let c0 = cand.as_ptr();
        let c1 = c0.add(dp);
        let (inv0, inv1) = (
            _mm512_set1_ps(s.inv_norm[j0]),
            _mm512_set1_ps(s.inv_norm[j1]),
        );
        let (jv0, jv1) = (_mm512_set1_epi32(j0 as i32), _mm512_set1_epi32(j1 as i32));
        let mut still = 0;
        let mut g = 0;
        while g < n {
            let m = (n - g).min(STEP);
            let valid: __mmask16 = ((1u32 << m) - 1) as u16;
            // A short step repeats its last row (its lanes are masked off); a step of at
            // most 8 rows leaves the second tile out.
            let last = g + m - 1;
            let ra: [*const E; ROWS] = s.keys.ptrs_at(|r| live[(g + r).min(last)] as usize);
            let a = tile(ra, c0, c1, d);
            let b = if m > ROWS {
                let rb: [*const E; ROWS] =
                    s.keys.ptrs_at(|r| live[(g + ROWS + r).min(last)] as usize);
                tile(rb, c0, c1, d)
            } else {
                a
            };
            let (d0, d1) = (
                _mm512_permutex2var_ps(a, with_c0, b),
                _mm512_permutex2var_ps(a, with_c1, b),
            );
            let inv_r = _mm512_loadu_ps(inv.as_ptr().add(g));
            // S[i][j] = dot * (inv_i * inv_j), as `CosineRows::entry_from_dot`.
            let e0 = _mm512_mul_ps(d0, _mm512_mul_ps(inv_r, inv0));
            let e1 = _mm512_mul_ps(d1, _mm512_mul_ps(inv_r, inv1));
            let h0 = _mm512_mask_cmp_ps_mask::<_CMP_GT_OQ>(valid, e0, thr);
            let h1 = _mm512_mask_cmp_ps_mask::<_CMP_GT_OQ>(valid, e1, thr);
            let hit = h0 | h1;
            let keep = valid & !hit;
            // Rows without a hit stay, packed down; rows with one go to the hit list
            // (candidate 0, the later slot, wins). No branch on the data.
            let row_v = _mm512_loadu_si512(live.as_ptr().add(g).cast());
            pack_epi32(live.as_mut_ptr().add(still), keep, row_v);
            pack_ps(inv.as_mut_ptr().add(still), keep, inv_r);
            let j = _mm512_mask_blend_epi32(h0, jv1, jv0);
            let v = _mm512_mask_blend_ps(h0, e1, e0);
            pack_epi32(hit_row.as_mut_ptr().add(hits), hit, row_v);
            pack_epi32(hit_j.as_mut_ptr().add(hits), hit, j);
            pack_ps(hit_v.as_mut_ptr().add(hits), hit, v);
            still += keep.count_ones() as usize;
            hits += hit.count_ones() as usize;
            g += STEP;
        }
        n = still;
        scanned += 2;
    }
    for h in 0..hits {
        let i = hit_row[h] as usize;
        latest[i] = hit_j[h];
        entry[i] = hit_v[h];
    }
    pending.clear();
    pending.extend(live[..n].iter().map(|&i| i as usize));
    scanned
}

/// The first sweep's tiles: rows against the newest slot `j` (widened in `c`) and the
/// key sum (`sum`, both zero-padded to a multiple of 16), 16 rows (two tiles) per step,
/// for the first `len / 16` steps. Each row's sum product goes to `sum_dots`; a row whose
/// entry with `j` is above the threshold takes `j` as its latest match (`latest`,
/// `entry`), the others are appended to `pending` from `*n` on (`pending` has 16 entries
/// of slack). Returns the rows swept (a multiple of 16); the rest is the caller's.
/// `prefetch(i)` is called as rows `i..i + 16` are read (to ask the memory for rows
/// ahead of them).
///
/// # Safety
/// The CPU must have the features this enables (the caller's run-time check).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
pub(super) unsafe fn newest_and_sums_tiled<E: KeyElem>(
    s: &CosineRows<'_, E>,
    c: &[f32],
    sum: &[f32],
    threshold: f32,
    latest: &mut [u32],
    entry: &mut [f32],
    sum_dots: &mut [f32],
    pending: &mut [usize],
    n: &mut usize,
    prefetch: impl Fn(usize),
) -> usize {
    let len = s.len();
    let d = s.keys.dim();
    let steps = len / STEP;
    if steps == 0 || len > u32::MAX as usize {
        return 0;
    }
    let j = len - 1;
    let thr = _mm512_set1_ps(threshold);
    let inv_j = _mm512_set1_ps(s.inv_norm[j]);
    let jv = _mm512_set1_epi32(j as i32);
    let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let (with_c0, with_c1) = pair_lanes16();
    let mut kept = *n;
    for g in 0..steps {
        let i0 = g * STEP;
        prefetch(i0);
        let ra: [*const E; ROWS] = s.keys.ptrs_at(|r| i0 + r);
        let a = tile(ra, c.as_ptr(), sum.as_ptr(), d);
        let rb: [*const E; ROWS] = s.keys.ptrs_at(|r| i0 + ROWS + r);
        let b = tile(rb, c.as_ptr(), sum.as_ptr(), d);
        let (dc, ds) = (
            _mm512_permutex2var_ps(a, with_c0, b),
            _mm512_permutex2var_ps(a, with_c1, b),
        );
        _mm512_storeu_ps(sum_dots.as_mut_ptr().add(i0), ds);
        let inv = _mm512_loadu_ps(s.inv_norm.as_ptr().add(i0));
        // `CosineRows::entry_from_dot`: 0 on the diagonal, else dot * (inv_i * inv_j).
        let rows = _mm512_add_epi32(_mm512_set1_epi32(i0 as i32), lane);
        let diagonal = _mm512_cmpeq_epi32_mask(rows, jv);
        let e = _mm512_maskz_mul_ps(!diagonal, dc, _mm512_mul_ps(inv, inv_j));
        let hit = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(e, thr);
        _mm512_mask_storeu_epi32(latest.as_mut_ptr().add(i0).cast(), hit, jv);
        _mm512_mask_storeu_ps(entry.as_mut_ptr().add(i0), hit, e);
        let keep = !hit;
        let idx = _mm512_maskz_compress_epi32(keep, rows);
        let p = pending.as_mut_ptr().add(kept);
        _mm512_storeu_si512(p.cast(), _mm512_cvtepu32_epi64(_mm512_castsi512_si256(idx)));
        _mm512_storeu_si512(
            p.add(ROWS).cast(),
            _mm512_cvtepu32_epi64(_mm256_castpd_si256(_mm512_extractf64x4_pd(
                _mm512_castsi512_pd(idx),
                1,
            ))),
        );
        kept += keep.count_ones() as usize;
    }
    *n = kept;
    steps * STEP
}

/// Stores the lanes of `v` that `mask` selects, packed to the front, at `dst` (16
/// writable `u32`s: the lanes after the selected ones are written as zeros).
///
/// # Safety
/// The CPU must have AVX-512F; `dst` must have 16 writable elements.
#[inline(always)]
pub(super) unsafe fn pack_epi32(dst: *mut u32, mask: __mmask16, v: __m512i) {
    _mm512_storeu_si512(dst.cast(), _mm512_maskz_compress_epi32(mask, v));
}

/// [`pack_epi32`] for f32 lanes.
///
/// # Safety
/// The CPU must have AVX-512F; `dst` must have 16 writable elements.
#[inline(always)]
pub(super) unsafe fn pack_ps(dst: *mut f32, mask: __mmask16, v: __m512) {
    _mm512_storeu_ps(dst, _mm512_maskz_compress_ps(mask, v));
}

/// The permutations taking two tiles' lanes to row order: row `r`'s products with the
/// first and the second vector in lane `r` (rows 8.. from the second tile, index bit 4).
/// In a tile, row `r`'s product with vector `c` is in lane `8 (r / 4) + 4 c + r % 4`
/// ([`reduce8`]).
#[inline(always)]
unsafe fn pair_lanes16() -> (__m512i, __m512i) {
    (
        _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27),
        _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31),
    )
}

/// Where [`reduce8`] leaves register `q`'s sum, back to order `q`: lane `q` of the
/// permuted result.
#[inline(always)]
unsafe fn reduced_order() -> __m512i {
    _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15)
}

/// Inverse norms `1 / (||k|| + 1e-8)` of rows `start..end`, 16 rows at a time (each
/// squared norm in [`super::dot`]'s order, so every value is bit-identical to
/// [`super::dot::inv_norm`]'s), appended to `out`. Returns how many rows it did (a
/// multiple of 16); the rest is the caller's. `prefetch(i)` is called as rows
/// `i..i + 16` are read.
///
/// # Safety
/// The CPU must have the features this enables (the caller's run-time check).
#[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
pub(super) unsafe fn inv_norms_tiled<E: KeyElem>(
    rows: &Rows<'_, E>,
    start: usize,
    end: usize,
    out: &mut Vec<f32>,
    prefetch: impl Fn(usize),
) -> usize {
    let d = rows.dim();
    let groups = end.saturating_sub(start) / LANES;
    let (one, eps) = (_mm512_set1_ps(1.0), _mm512_set1_ps(1e-8));
    let mut lanes = [0.0f32; LANES];
    for g in 0..groups {
        let i0 = start + g * LANES;
        prefetch(i0);
        let sq = group_dots(rows.ptrs_at(|k| i0 + k), None, d);
        let inv = _mm512_div_ps(one, _mm512_add_ps(_mm512_sqrt_ps(sq), eps));
        _mm512_storeu_ps(lanes.as_mut_ptr(), inv);
        out.extend_from_slice(&lanes);
    }
    groups * LANES
}

/// `out[i] = dot(key, row i)` for the rows of `rows` in groups of 16 (each product in
/// [`super::dot`]'s order with the key widened as given, so bit-identical to
/// [`super::dot::dot`]; [`super::describe::appended_dots`]'s fast path: one reduction for
/// 16 rows instead of one per row). Returns how many rows it did (a multiple of 16, at
/// most `out.len()`); the rest is the caller's.
///
/// # Safety
/// The CPU must have the features this enables (the caller's run-time check).
/// `key.len() == rows.dim()` and `rows` holds at least `out.len()` rows, else this
/// panics.
#[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
pub(super) unsafe fn dots_tiled<E: KeyElem>(
    key: &[f32],
    rows: &Rows<'_, E>,
    out: &mut [f32],
) -> usize {
    let d = rows.dim();
    assert!(key.len() == d && rows.len() >= out.len());
    let groups = out.len() / LANES;
    for g in 0..groups {
        let i0 = g * LANES;
        let dots = group_dots(rows.ptrs_at(|q| i0 + q), Some(key.as_ptr()), d);
        _mm512_storeu_ps(out.as_mut_ptr().add(i0), dots);
    }
    groups * LANES
}

/// The dot products of 16 rows `r` (`d` elements each) with `key` (`d` values), or with
/// themselves when `key` is `None` (squared norms), each in a 256-bit accumulator in
/// [`super::dot`]'s order (the tail as a partial block); row `q`'s product in lane `q`.
/// One reduction for the 16 rows: [`inv_norms_tiled`] and [`dots_tiled`].
// Matches, not `Option::map`: no intrinsic in a closure (see `super::dot`'s `accumulate`).
#[allow(clippy::manual_map)]
#[inline(always)]
unsafe fn group_dots<E: KeyElem>(
    r: [*const E; LANES],
    key: Option<*const f32>,
    d: usize,
) -> __m512 {
    let full = d - d % W;
    let mut acc = [_mm256_setzero_ps(); LANES];
    let mut c = 0;
    while c < full {
        let kv = match key {
            Some(k) => Some(_mm256_loadu_ps(k.add(c))),
            None => None,
        };
        for (a, p) in acc.iter_mut().zip(r) {
            let x = E::load8(p.add(c));
            *a = _mm256_fmadd_ps(x, kv.unwrap_or(x), *a);
        }
        c += W;
    }
    if full < d {
        let live = tail_lanes(d - full);
        let kv = match key {
            Some(k) => Some(f32::load8_first(k.add(c), d - full)),
            None => None,
        };
        for (a, p) in acc.iter_mut().zip(r) {
            let x = E::load8_first(p.add(c), d - full);
            *a = fmadd_tail(x, kv.unwrap_or(x), *a, live);
        }
    }
    _mm512_permutexvar_ps(reduced_order(), reduce8(acc))
}

/// The 16 dot products of rows `r` (8, `d` elements each) with `c0` and `c1` (f32, at
/// least `d` rounded up to a multiple of 8 long, zero-padded): row `r`'s product with
/// `c0` is register `q = 2r`, with `c1` register `2r + 1`, and ends in [`reduce8`]'s lane
/// for `q`. The tail is the order's partial block.
#[inline(always)]
unsafe fn tile<E: KeyElem>(
    r: [*const E; ROWS],
    c0: *const f32,
    c1: *const f32,
    d: usize,
) -> __m512 {
    let mut acc = [_mm256_setzero_ps(); 2 * ROWS];
    let full = d - d % W;
    let mut c = 0;
    while c < full {
        let (v0, v1) = (_mm256_loadu_ps(c0.add(c)), _mm256_loadu_ps(c1.add(c)));
        for (k, p) in r.iter().enumerate() {
            let x = E::load8(p.add(c));
            acc[2 * k] = _mm256_fmadd_ps(x, v0, acc[2 * k]);
            acc[2 * k + 1] = _mm256_fmadd_ps(x, v1, acc[2 * k + 1]);
        }
        c += W;
    }
    if full < d {
        let live = tail_lanes(d - full);
        let (v0, v1) = (_mm256_loadu_ps(c0.add(c)), _mm256_loadu_ps(c1.add(c)));
        for (k, p) in r.iter().enumerate() {
            let x = E::load8_first(p.add(c), d - full);
            acc[2 * k] = fmadd_tail(x, v0, acc[2 * k], live);
            acc[2 * k + 1] = fmadd_tail(x, v1, acc[2 * k + 1], live);
        }
    }
    reduce8(acc)
}

/// The tree of [`super::dot`] on 16 registers at once: level 1 pairs lanes `(l, l + 4)`,
/// level 2 `(l, l + 2)`, level 3 `(l, l + 1)`, as each register's own reduction does.
/// Register `q` ends in lane `8 (q / 8) + 4 (q % 2) + (q % 8) / 2` (so lanes 0-3 hold
/// registers 0, 2, 4, 6 and lanes 4-7 registers 1, 3, 5, 7; lanes 8-15 the same for
/// 8-15).
#[inline(always)]
unsafe fn reduce8(a: [__m256; 16]) -> __m512 {
    // Level 1: x[m] = [a[2m] (4 lanes) | a[2m + 1] (4 lanes)].
    let mut x = [_mm256_setzero_ps(); 8];
    for m in 0..8 {
        let (p, q) = (a[2 * m], a[2 * m + 1]);
        x[m] = _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(p, q),
            _mm256_permute2f128_ps::<0x31>(p, q),
        );
    }
    // Level 2: per 128-bit block, two lanes from x[2n] and two from x[2n + 1]: block 0
    // registers 4n, 4n + 2, block 1 registers 4n + 1, 4n + 3.
    let mut z = [_mm256_setzero_ps(); 4];
    for n in 0..4 {
        let (p, q) = (x[2 * n], x[2 * n + 1]);
        z[n] = _mm256_add_ps(
            _mm256_shuffle_ps::<0x44>(p, q),
            _mm256_shuffle_ps::<0xEE>(p, q),
        );
    }
    // Level 3: per block, one lane each from z[2h] (two registers) and z[2h + 1] (two).
    let mut w = [_mm256_setzero_ps(); 2];
    for h in 0..2 {
        let (p, q) = (z[2 * h], z[2 * h + 1]);
        w[h] = _mm256_add_ps(
            _mm256_shuffle_ps::<0x88>(p, q),
            _mm256_shuffle_ps::<0xDD>(p, q),
        );
    }
    // Joined through f64 lanes: the f32x8 insert needs AVX-512DQ, this one only F.
    _mm512_castpd_ps(_mm512_insertf64x4::<1>(
        _mm512_castpd256_pd512(_mm256_castps_pd(w[0])),
        _mm256_castps_pd(w[1]),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::dot::{dot, inv_norm, inv_norms, Dots, Portable};
    use super::super::keys::Rows;
    use super::*;
    use half::f16;

    /// Whether the CPU runs this module (else its tests have nothing to check).
    fn runs() -> bool {
        crate::simd::avx512()
    }

    /// [`tile`] with the entry points' features, its lanes stored in register order
    /// ([`reduced_order`]).
    ///
    /// # Safety
    /// As [`tile`]'s, and the CPU must have the features this enables.
    #[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
    unsafe fn tile_lanes<E: KeyElem>(
        r: [*const E; ROWS],
        c0: *const f32,
        c1: *const f32,
        d: usize,
    ) -> [f32; LANES] {
        let mut out = [0.0f32; LANES];
        let v = tile(r, c0, c1, d);
        _mm512_storeu_ps(out.as_mut_ptr(), _mm512_permutexvar_ps(reduced_order(), v));
        out
    }

    /// Every dot of a tile equals its own [`dot`], and the portable loop's, bit for bit,
    /// for f32 and f16 rows of every width (full registers and a partial tail).
    #[test]
    fn tile_dots_match_dot() {
        if !runs() {
            return;
        }
        for d in [1usize, 5, 16, 17, 40, 64, 128] {
            let dp = d.div_ceil(W) * W;
            let val = |s: usize, k: usize| ((s * 131 + k * 7) as f32 * 0.173).sin() * 1.7;
            // Rows back to back (a row's tail is followed by the next row, not zeros).
            let rows: Vec<f32> = (0..ROWS * d).map(|k| val(k / d, k % d)).collect();
            let half: Vec<f16> = rows.iter().map(|&x| f16::from_f32(x)).collect();
            let wide: Vec<f32> = half.iter().map(|x| x.to_f32()).collect();
            let pad = |s: usize| -> Vec<f32> {
                (0..dp)
                    .map(|k| if k < d { val(s, k) } else { 0.0 })
                    .collect()
            };
            let (c0, c1) = (pad(50), pad(51));
            let ptrs32: [*const f32; ROWS] = std::array::from_fn(|r| rows[r * d..].as_ptr());
            let ptrs16: [*const f16; ROWS] = std::array::from_fn(|r| half[r * d..].as_ptr());
            // SAFETY: `runs()` above: the CPU has the features `tile_lanes` enables; every
            // row has `d` elements, the vectors whole registers.
            let got32 = unsafe { tile_lanes(ptrs32, c0.as_ptr(), c1.as_ptr(), d) };
            // SAFETY: as above.
            let got16 = unsafe { tile_lanes(ptrs16, c0.as_ptr(), c1.as_ptr(), d) };
            for q in 0..LANES {
                let (r, c) = (q / 2, [&c0, &c1][q % 2]);
                let want = dot(&rows[r * d..(r + 1) * d], &c[..d]);
                // The portable loop too (with the CPU's fused multiply-add), bit for bit.
                let portable = Portable::detect().dot(&rows[r * d..(r + 1) * d], &c[..d]);
                assert_eq!(portable.to_bits(), want.to_bits(), "portable d {d}");
                assert_eq!(got32[q].to_bits(), want.to_bits(), "f32 d {d} q {q}");
                let want = dot(&wide[r * d..(r + 1) * d], &c[..d]);
                assert_eq!(got16[q].to_bits(), want.to_bits(), "f16 d {d} q {q}");
            }
        }
    }

    /// Every tiled inverse norm equals [`inv_norm`]'s (and the portable loop's), bit for
    /// bit, for f32 and f16 rows of every width, from any start row.
    #[test]
    fn tiled_inv_norms_match() {
        if !runs() {
            return;
        }
        for d in [1usize, 5, 16, 17, 40, 64, 128] {
            let len = 53;
            let vals: Vec<f32> = (0..len * d)
                .map(|k| ((k * 37 % 101) as f32 * 0.21).cos() * 3.0 + 0.1)
                .collect();
            let half: Vec<f16> = vals.iter().map(|&x| f16::from_f32(x)).collect();
            for start in [0usize, 3, 16] {
                let mut got = Vec::new();
                // SAFETY: `runs()` above: the CPU has the features the tiles enable.
                let done =
                    unsafe { inv_norms_tiled(&Rows::flat(&vals, d), start, len, &mut got, |_| {}) };
                assert_eq!(done, (len - start) / LANES * LANES);
                let mut got16 = Vec::new();
                // SAFETY: `runs()` above: the CPU has the features the tiles enable.
                let done16 = unsafe {
                    inv_norms_tiled(&Rows::flat(&half, d), start, len, &mut got16, |_| {})
                };
                assert_eq!(done16, done);
                for k in 0..done {
                    let i = start + k;
                    let want = inv_norm(&vals[i * d..(i + 1) * d]);
                    assert_eq!(got[k].to_bits(), want.to_bits(), "f32 d {d} row {i}");
                    let want = inv_norm(&half[i * d..(i + 1) * d]);
                    let row = &half[i * d..(i + 1) * d];
                    let portable = 1.0 / (Portable::detect().dot(row, row).sqrt() + 1e-8);
                    assert_eq!(portable.to_bits(), want.to_bits(), "portable d {d} row {i}");
                    assert_eq!(got16[k].to_bits(), want.to_bits(), "f16 d {d} row {i}");
                }
            }
        }
    }

    /// Keys with near-copies, so that entries fall on both sides of the thresholds.
    fn keys(len: usize, d: usize) -> Vec<f16> {
        (0..len * d)
            .map(|k| f16::from_f32(((k * 37 % 101) as f32 * 0.21).cos() + 0.3))
            .collect()
    }

    /// The tiled first sweep gives every row what one entry and one dot product at a
    /// time give: the newest slot as its match or a place among the pending rows, and
    /// its product with the sum; with a negative threshold the newest slot's own zero
    /// entry matches, as in the oracle.
    #[test]
    fn tiled_sweep_matches_entries() {
        if !runs() {
            return;
        }
        for (len, d) in [(8usize, 16usize), (37, 24), (90, 64), (7, 8)] {
            let keys = keys(len, d);
            let inv = inv_norms(&keys, d);
            let runs: Vec<&[f16]> = keys.chunks(8 * d).collect();
            let s = CosineRows {
                keys: Rows::runs(&runs, 8, len, d).unwrap(),
                inv_norm: &inv,
            };
            let dp = d.div_ceil(W) * W;
            let j = len - 1;
            let mut c = vec![0.0f32; dp];
            f16::widen_into(s.row(j), &mut c);
            let mut sum = vec![0.0f32; dp];
            for (k, x) in sum.iter_mut().take(d).enumerate() {
                *x = (k as f32 * 0.3).sin() * 5.0;
            }
            for threshold in [0.5f32, 0.9, -0.2] {
                let (mut latest, mut entry) = (vec![u32::MAX; len], vec![0.0f32; len]);
                let mut sum_dots = vec![0.0f32; len];
                let mut pending = vec![0usize; len + STEP];
                let mut n = 0;
                // SAFETY: `runs()` above: the CPU has the features the tiles enable.
                let done = unsafe {
                    newest_and_sums_tiled(
                        &s,
                        &c,
                        &sum,
                        threshold,
                        &mut latest,
                        &mut entry,
                        &mut sum_dots,
                        &mut pending,
                        &mut n,
                        |_| {},
                    )
                };
                assert_eq!(done, len / STEP * STEP);
                let mut want_pending = Vec::new();
                for i in 0..done {
                    assert_eq!(sum_dots[i].to_bits(), dot(&sum[..d], s.row(i)).to_bits());
                    let v = s.entry_from_dot(i, j, dot(&c[..d], s.row(i)));
                    if v > threshold {
                        assert_eq!((latest[i], entry[i].to_bits()), (j as u32, v.to_bits()));
                    } else {
                        assert_eq!(latest[i], u32::MAX, "row {i}");
                        want_pending.push(i);
                    }
                }
                assert_eq!(
                    pending[..n],
                    want_pending[..],
                    "len {len} d {d} thr {threshold}"
                );
            }
        }
    }

    /// The tiled scan resolves every row as one entry at a time would, on f16 rows, with
    /// full and partial tiles.
    #[test]
    fn tiled_scan_matches_entries() {
        if !runs() {
            return;
        }
        let d = 24;
        let len = 90;
        let keys = keys(len, d);
        let inv = inv_norms(&keys, d);
        let s = CosineRows {
            keys: Rows::flat(&keys, d),
            inv_norm: &inv,
        };
        for (threshold, start, top) in [
            (0.5f32, 60, 90),
            (0.8, 41, 90),
            (0.95, 70, 89),
            (0.9, 5, 30),
        ] {
            let mut pending: Vec<usize> = (0..start).collect();
            let (mut latest, mut entry) = (vec![u32::MAX; len], vec![0.0f32; len]);
            let count = top - start;
            // SAFETY: `runs()` above: the CPU has the features the tiles enable.
            let scanned = unsafe {
                latest_matches_tiled(
                    &s,
                    &mut pending,
                    threshold,
                    top,
                    count,
                    &mut latest,
                    &mut entry,
                )
            };
            assert!(scanned <= count && scanned % 2 == 0);
            if !pending.is_empty() {
                assert_eq!(scanned, count - count % 2);
            }
            for i in 0..start {
                let want = (top - scanned..top)
                    .rev()
                    .map(|j| (j, s.entry(i, j)))
                    .find(|&(_, v)| v > threshold);
                match want {
                    Some((j, v)) => {
                        assert_eq!(latest[i], j as u32, "row {i}");
                        assert_eq!(entry[i].to_bits(), v.to_bits(), "row {i}");
                        assert!(!pending.contains(&i));
                    }
                    None => {
                        assert_eq!(latest[i], u32::MAX, "row {i}");
                        assert!(pending.contains(&i), "row {i}");
                    }
                }
            }
            assert!(pending.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
