//! Tiles of 4 rows x 2 vectors of dot products on AVX2 (x86-64-v3 CPUs without
//! AVX-512: AMD Zen 1-3, Intel cores before AVX-512), and the passes of the incremental
//! redundancy built on them (DESIGN.md §2 "Cost"): the first sweep (every row against the
//! newest slot and the key sum), the old rows' latest-match scan against a short run of
//! candidates (the new slots: the scan that dominates an R-KV event on heads whose keys
//! are seldom similar), and the new rows' inverse norms, 8 at a time through the same
//! reduction.
//!
//! Owns: the tile's 8 dot products in [`super::dot`]'s order (lane `l` of a 256-bit
//! register accumulates elements `l, l + 8, ...` by fused multiply-add, the tail as a
//! partial block; the tree 8 -> 4 -> 2 -> 1 run on all 8 registers at once, pairing the
//! same lanes at every level, so each product is bit-identical to its own
//! [`super::dot::dot`]), the entries `S[i][j] = dot * (inv_i * inv_j)` of
//! [`CosineRows::entry_from_dot`] 8 at a time, and the resolution of a tile's rows from
//! one compare mask without branching on the data.
//!
//! Must not know: what the rows mean beyond the entry function, column sums, selection.
//! Taken where the CPU has AVX2, FMA and F16C but not AVX-512F (which has its own tiles,
//! `tile_avx512.rs`, in twice the registers, with the same functions and constants),
//! chosen at run time by the callers (`crate::simd`), which keep their portable loops.
//! The entry points carry `#[target_feature(enable = "avx2,fma,f16c,popcnt")]`: the
//! `#[inline(always)]` helpers here and in `super::dot` and `super::keys` are compiled
//! into them.

use std::arch::x86_64::*;

use super::cosine::CosineRows;
use super::dot::{fmadd_tail, tail_lanes};
use super::keys::{KeyElem, Rows};

/// Rows per tile: 4 rows x 2 vectors are 8 accumulators, which with the two vectors and
/// a row leave AVX2's 16 registers without spilling (8 rows did not fit).
const ROWS: usize = 4;

/// The fixed order's lane count: f32 lanes of the 256-bit accumulators.
const W: usize = 8;

/// Fewest pending rows [`latest_matches_tiled`] is worth calling for (one tile).
pub(super) const MIN_ROWS: usize = ROWS;

/// Rows [`newest_and_sums_tiled`] reads per call of its `prefetch`.
pub(super) const SWEEP_ROWS: usize = ROWS;

/// Rows [`inv_norms_tiled`] reads per call of its `prefetch`.
pub(super) const NORM_ROWS: usize = W;

/// Pending rows scanned together against every candidate before the next ones: widened
/// once to f32, they stay in the L1 cache (16 KB at head dim 64) while the candidates
/// pass, instead of every pending row being read from L2 and widened again for every
/// pair of candidates. Larger blocks also leave fewer partial tiles as rows resolve (on
/// the model's layer-8 KV head 0: 7431 tiles with blocks of 16, 6777 with 32, 6449 with
/// 64).
const BLOCK: usize = 64;

/// For each row `i` of `pending` (each below the candidates), the largest candidate `j`
/// of `top - count..top` with `S[i][j] > threshold` goes to `latest[i]`, its entry to
/// `entry[i]`; `pending` keeps the rows without a match, in order. The rows are taken in
/// blocks of [`BLOCK`], each scanned against the candidates two at a time from the top
/// until none of its rows is pending (most rows match within the first few pairs); the
/// candidates are widened once, as the deepest scan reaches them. An odd last candidate
/// is left to the caller. Returns how many candidates every row still pending was
/// scanned against, from the top.
///
/// # Safety
/// The CPU must have the features this enables (the caller's run-time check).
#[target_feature(enable = "avx2,fma,f16c,popcnt")]
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
    if pairs == 0 || pending.is_empty() || dp == 0 || top > u32::MAX as usize {
        return 0;
    }
    let thr = _mm256_set1_ps(threshold);
    // Candidate `top - 1 - k` at `k * dp`, zero-padded to whole registers; the first
    // `widened` of them are filled.
    let mut cand = vec![0.0f32; 2 * pairs * dp];
    let mut widened = 0;
    // One block's rows widened (`[BLOCK, dp]`), and of its pending rows: indices, where
    // their keys are in `rows`, inverse norms. A step reads and moves 4 of each; past the
    // pending rows they hold stale values (every offset is some row's: a step that reads
    // one computes products it ignores).
    let mut rows = vec![0.0f32; BLOCK * dp];
    let mut live = [0u32; BLOCK + ROWS];
    let mut at = [0usize; BLOCK + ROWS];
    let mut inv = [0.0f32; BLOCK + ROWS];
    let mut e = [0.0f32; W];
    let mut kept = 0;
    for b in (0..pending.len()).step_by(BLOCK) {
        let block = &pending[b..(b + BLOCK).min(pending.len())];
        let mut n = block.len();
        for (r, &i) in block.iter().enumerate() {
            widen(s.row(i), &mut rows[r * dp..r * dp + d]);
            live[r] = i as u32;
            at[r] = r * dp;
            inv[r] = s.inv_norm[i];
        }
        for k in 0..pairs {
            if n == 0 {
                break;
            }
            let (j0, j1) = (top - 1 - 2 * k, top - 2 - 2 * k);
            while widened < 2 * k + 2 {
                let j = top - 1 - widened;
                widen(s.row(j), &mut cand[widened * dp..widened * dp + d]);
                widened += 1;
            }
            let c0 = cand.as_ptr().add(2 * k * dp);
            let c1 = c0.add(dp);
            // Lanes 0-3 against candidate 0, lanes 4-7 against candidate 1 (the tile's
            // order).
            let inv_c = _mm256_setr_m128(_mm_set1_ps(s.inv_norm[j0]), _mm_set1_ps(s.inv_norm[j1]));
            let mut still = 0;
            let mut g = 0;
            while g < n {
                let m = (n - g).min(ROWS);
                let ptrs: [*const f32; ROWS] =
                    std::array::from_fn(|r| rows.as_ptr().add(at[g + r]));
                let dots = tile(ptrs, c0, c1, d);
                let inv4 = _mm_loadu_ps(inv.as_ptr().add(g));
                // S[i][j] = dot * (inv_i * inv_j), as `CosineRows::entry_from_dot` (a row
                // is never a candidate: the diagonal does not arise).
                let ev = _mm256_mul_ps(dots, _mm256_mul_ps(_mm256_setr_m128(inv4, inv4), inv_c));
                // The lanes of this step's rows (a short step's others are ignored).
                let valid = ((1u32 << m) - 1) * 0x11;
                let hits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(ev, thr)) as u32 & valid;
                if hits == 0 {
                    // Most steps of a deep scan: every row stays, moved down as a whole.
                    if still != g {
                        move_down(&mut live, g, still);
                        move_down(&mut inv, g, still);
                        move_down(&mut at, g, still);
                    }
                    still += m;
                    g += ROWS;
                    continue;
                }
                _mm256_storeu_ps(e.as_mut_ptr(), ev);
                // Rows without a hit stay, packed down (written at or below where they
                // were read); a hit with candidate 0, the later slot, wins. Selected, not
                // branched on.
                for r in 0..m {
                    let (h0, h1) = ((hits >> r) & 1 == 1, (hits >> (r + 4)) & 1 == 1);
                    let hit = h0 | h1;
                    let i = live[g + r] as usize;
                    let j = if h0 { j0 } else { j1 } as u32;
                    let v = if h0 { e[r] } else { e[r + 4] };
                    latest[i] = std::hint::select_unpredictable(hit, j, latest[i]);
                    entry[i] = std::hint::select_unpredictable(hit, v, entry[i]);
                    let (inv_i, at_i) = (inv[g + r], at[g + r]);
                    live[still] = i as u32;
                    inv[still] = inv_i;
                    at[still] = at_i;
                    still += usize::from(!hit);
                }
                g += ROWS;
            }
            n = still;
        }
        // Blocks are taken in order, so the rows still pending stay ascending.
        for r in 0..n {
            pending[kept + r] = live[r] as usize;
        }
        kept += n;
    }
    pending.truncate(kept);
    2 * pairs
}

/// Inverse norms `1 / (||k|| + 1e-8)` of rows `start..end`, 8 rows at a time (each
/// squared norm in [`super::dot`]'s order, so every value is bit-identical to
/// [`super::dot::inv_norm`]'s), appended to `out`. Returns how many rows it did (a
/// multiple of 8); the rest is the caller's. `prefetch(i)` is called as rows `i..i + 8`
/// are read.
///
/// # Safety
/// The CPU must have the features this enables (the caller's run-time check).
#[target_feature(enable = "avx2,fma,f16c,popcnt")]
pub(super) unsafe fn inv_norms_tiled<E: KeyElem>(
    rows: &Rows<'_, E>,
    start: usize,
    end: usize,
    out: &mut Vec<f32>,
    prefetch: impl Fn(usize),
) -> usize {
    let d = rows.dim();
    let groups = end.saturating_sub(start) / W;
    let (one, eps) = (_mm256_set1_ps(1.0), _mm256_set1_ps(1e-8));
    let mut lanes = [0.0f32; W];
    for g in 0..groups {
        let i0 = start + g * W;
        prefetch(i0);
        let sq = group_dots(rows.ptrs_at(|q| i0 + q), None, d);
        let inv = _mm256_div_ps(one, _mm256_add_ps(_mm256_sqrt_ps(sq), eps));
        _mm256_storeu_ps(lanes.as_mut_ptr(), inv);
        out.extend_from_slice(&lanes);
    }
    groups * W
}

/// `out[i] = dot(key, row i)` for the rows of `rows` in groups of 8 (each product in
/// [`super::dot`]'s order with the key widened as given, so bit-identical to
/// [`super::dot::dot`]; [`super::describe::appended_dots`]'s fast path: one reduction for
/// 8 rows instead of one per row). Returns how many rows it did (a multiple of 8, at
/// most `out.len()`); the rest is the caller's.
///
/// # Safety
/// The CPU must have the features this enables (the caller's run-time check).
/// `key.len() == rows.dim()` and `rows` holds at least `out.len()` rows, else this
/// panics.
#[target_feature(enable = "avx2,fma,f16c,popcnt")]
pub(super) unsafe fn dots_tiled<E: KeyElem>(
    key: &[f32],
    rows: &Rows<'_, E>,
    out: &mut [f32],
) -> usize {
    let d = rows.dim();
    assert!(key.len() == d && rows.len() >= out.len());
    let groups = out.len() / W;
    for g in 0..groups {
        let i0 = g * W;
        let dots = group_dots(rows.ptrs_at(|q| i0 + q), Some(key.as_ptr()), d);
        _mm256_storeu_ps(out.as_mut_ptr().add(i0), dots);
    }
    groups * W
}

/// The dot products of 8 rows `r` (`d` elements each) with `key` (`d` values), or with
/// themselves when `key` is `None` (squared norms), in [`super::dot`]'s order (the tail
/// as a partial block); row `q`'s product in lane `q`. One reduction for the 8 rows:
/// [`inv_norms_tiled`] and [`dots_tiled`].
// Matches, not `Option::map`: no intrinsic in a closure (see `super::dot`'s `accumulate`).
#[allow(clippy::manual_map)]
#[inline(always)]
unsafe fn group_dots<E: KeyElem>(r: [*const E; W], key: Option<*const f32>, d: usize) -> __m256 {
    let full = d - d % W;
    // Register `q` of [`reduce8`] ends in lane `4 (q % 2) + q / 2`: row `q` is read into
    // register `2 (q % 4) + q / 4`, so that it ends in lane `q`.
    let reg = |q: usize| 2 * (q % 4) + q / 4;
    let mut acc = [_mm256_setzero_ps(); W];
    let mut c = 0;
    while c < full {
        let kv = match key {
            Some(k) => Some(_mm256_loadu_ps(k.add(c))),
            None => None,
        };
        for (q, p) in r.iter().enumerate() {
            let x = E::load8(p.add(c));
            acc[reg(q)] = _mm256_fmadd_ps(x, kv.unwrap_or(x), acc[reg(q)]);
        }
        c += W;
    }
    if full < d {
        let live = tail_lanes(d - full);
        let kv = match key {
            Some(k) => Some(f32::load8_first(k.add(c), d - full)),
            None => None,
        };
        for (q, p) in r.iter().enumerate() {
            let x = E::load8_first(p.add(c), d - full);
            acc[reg(q)] = fmadd_tail(x, kv.unwrap_or(x), acc[reg(q)], live);
        }
    }
    reduce8(acc)
}

/// The first sweep's tiles: rows against the newest slot `j = len - 1` (widened in `c`)
/// and the key sum (`sum`), both zero-padded to a multiple of 8, 4 rows per tile, for
/// the rows below `4 * ((len - 1) / 4)` (the newest row, whose entry with itself is the
/// diagonal's zero, is always left to the caller). Each row's sum product goes to
/// `sum_dots`; a row whose entry with `j` is above the threshold takes `j` as its latest
/// match (`latest`, `entry`), the others are appended to `pending` from `*n` on. Returns
/// the rows swept; the rest is the caller's. `prefetch(i)` is called as rows `i..i + 4`
/// are read (to ask the memory for rows ahead of them).
///
/// # Safety
/// The CPU must have the features this enables (the caller's run-time check).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,popcnt")]
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
    let dp = d.div_ceil(W) * W;
    if len == 0 || len > u32::MAX as usize || c.len() < dp || sum.len() < dp {
        return 0;
    }
    let j = len - 1;
    let steps = j / ROWS;
    let thr = _mm_set1_ps(threshold);
    let inv_j = _mm_set1_ps(s.inv_norm[j]);
    let jv = _mm_set1_epi32(j as i32);
    let mut kept = *n;
    for g in 0..steps {
        let i0 = g * ROWS;
        prefetch(i0);
        let rows: [*const E; ROWS] = s.keys.ptrs_at(|r| i0 + r);
        let v = tile(rows, c.as_ptr(), sum.as_ptr(), d);
        let (dc, ds) = (_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        _mm_storeu_ps(sum_dots[i0..i0 + ROWS].as_mut_ptr(), ds);
        // `CosineRows::entry_from_dot`: dot * (inv_i * inv_j) (these rows are below `j`).
        let inv = _mm_loadu_ps(s.inv_norm[i0..i0 + ROWS].as_ptr());
        let ev = _mm_mul_ps(dc, _mm_mul_ps(inv, inv_j));
        let hit = _mm_cmp_ps::<_CMP_GT_OQ>(ev, thr);
        // The hits take `j` and their entries, the four rows at once; the others are
        // packed into `pending` (one lookup of the permutation by the mask, no branch).
        let to_latest = latest[i0..i0 + ROWS].as_mut_ptr().cast::<__m128i>();
        _mm_storeu_si128(
            to_latest,
            _mm_blendv_epi8(_mm_loadu_si128(to_latest), jv, _mm_castps_si128(hit)),
        );
        let to_entry = entry[i0..i0 + ROWS].as_mut_ptr();
        _mm_storeu_ps(to_entry, _mm_blendv_ps(_mm_loadu_ps(to_entry), ev, hit));
        let stay = !_mm_movemask_ps(hit) as usize & 0xF;
        let rows = _mm256_add_epi64(
            _mm256_set1_epi64x(i0 as i64),
            _mm256_setr_epi64x(0, 1, 2, 3),
        );
        let packed =
            _mm256_permutevar8x32_epi32(rows, _mm256_loadu_si256(PACK[stay].as_ptr().cast()));
        _mm256_storeu_si256(pending[kept..kept + ROWS].as_mut_ptr().cast(), packed);
        kept += stay.count_ones() as usize;
    }
    *n = kept;
    steps * ROWS
}

/// For each 4-bit mask of rows, the permutation of a register of four 64-bit row indices
/// (as eight 32-bit lanes) that packs the masked rows first, in order.
const PACK: [[i32; 8]; 16] = {
    let mut t = [[0i32; 8]; 16];
    let mut m = 0;
    while m < 16 {
        let (mut k, mut r) = (0usize, 0i32);
        while r < 4 {
            if (m >> r) & 1 == 1 {
                t[m][2 * k] = 2 * r;
                t[m][2 * k + 1] = 2 * r + 1;
                k += 1;
            }
            r += 1;
        }
        m += 1;
    }
    t
};

/// `x[from..from + ROWS]` moved to `x[to..]` (`to < from`; the ranges may overlap): read
/// whole, then written, in two register moves rather than a call.
#[inline(always)]
fn move_down<T: Copy + Default>(x: &mut [T], from: usize, to: usize) {
    let mut v = [T::default(); ROWS];
    v.copy_from_slice(&x[from..from + ROWS]);
    x[to..to + ROWS].copy_from_slice(&v);
}

/// `src` widened into `dst` (as long as `src`): whole registers as [`KeyElem::load8`]
/// reads them (the same exact values as [`KeyElem::widen_into`], without its call per
/// row), the rest one at a time.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[inline(always)]
unsafe fn widen<E: KeyElem>(src: &[E], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let full = n - n % W;
    let mut c = 0;
    while c < full {
        _mm256_storeu_ps(dst.as_mut_ptr().add(c), E::load8(src.as_ptr().add(c)));
        c += W;
    }
    for k in full..n {
        dst[k] = src[k].widen();
    }
}

/// The 8 dot products of rows `r` (4, `d` elements each) with `c0` and `c1` (f32, at
/// least `d` rounded up to a multiple of 8 long, zero-padded): row `r`'s product with
/// `c0` ends in lane `r`, with `c1` in lane `4 + r` ([`reduce8`] of registers `2r` and
/// `2r + 1`). The tail is the order's partial block.
#[inline(always)]
unsafe fn tile<E: KeyElem>(
    r: [*const E; ROWS],
    c0: *const f32,
    c1: *const f32,
    d: usize,
) -> __m256 {
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

/// The tree of [`super::dot`] on 8 registers at once: level 1 pairs lanes `(l, l + 4)`,
/// level 2 `(l, l + 2)`, level 3 `(l, l + 1)`, as each register's own reduction does.
/// Register `q` ends in lane `4 (q % 2) + q / 2` (lanes 0-3 hold registers 0, 2, 4, 6 and
/// lanes 4-7 registers 1, 3, 5, 7).
#[inline(always)]
unsafe fn reduce8(a: [__m256; 8]) -> __m256 {
    // Level 1: x[m] = [a[2m] (4 lanes) | a[2m + 1] (4 lanes)].
    let mut x = [_mm256_setzero_ps(); 4];
    for m in 0..4 {
        let (p, q) = (a[2 * m], a[2 * m + 1]);
        x[m] = _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(p, q),
            _mm256_permute2f128_ps::<0x31>(p, q),
        );
    }
    // Level 2: per 128-bit block, two lanes from x[2n] and two from x[2n + 1]: block 0
    // registers 4n, 4n + 2, block 1 registers 4n + 1, 4n + 3.
    let mut z = [_mm256_setzero_ps(); 2];
    for n in 0..2 {
        let (p, q) = (x[2 * n], x[2 * n + 1]);
        z[n] = _mm256_add_ps(
            _mm256_shuffle_ps::<0x44>(p, q),
            _mm256_shuffle_ps::<0xEE>(p, q),
        );
    }
    // Level 3: per block, one lane each from z[0] (two registers) and z[1] (two).
    _mm256_add_ps(
        _mm256_shuffle_ps::<0x88>(z[0], z[1]),
        _mm256_shuffle_ps::<0xDD>(z[0], z[1]),
    )
}

#[cfg(test)]
mod tests {
    use super::super::dot::{dot, inv_norm, inv_norms, Dots, Portable};
    use super::super::keys::Rows;
    use super::*;
    use half::f16;

    /// Whether the CPU runs this module (else its tests have nothing to check).
    fn runs() -> bool {
        crate::simd::v3()
    }

    /// [`tile`] with the entry points' features, its lanes stored.
    ///
    /// # Safety
    /// As [`tile`]'s, and the CPU must have the features this enables.
    #[target_feature(enable = "avx2,fma,f16c,popcnt")]
    unsafe fn tile_lanes<E: KeyElem>(
        r: [*const E; ROWS],
        c0: *const f32,
        c1: *const f32,
        d: usize,
    ) -> [f32; W] {
        let mut out = [0.0f32; W];
        _mm256_storeu_ps(out.as_mut_ptr(), tile(r, c0, c1, d));
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
            for lane in 0..W {
                let (r, c) = (lane % ROWS, [&c0, &c1][lane / ROWS]);
                let want = dot(&rows[r * d..(r + 1) * d], &c[..d]);
                // The portable loop too (with the CPU's fused multiply-add), bit for bit.
                let portable = Portable::detect().dot(&rows[r * d..(r + 1) * d], &c[..d]);
                assert_eq!(portable.to_bits(), want.to_bits(), "portable d {d}");
                assert_eq!(
                    got32[lane].to_bits(),
                    want.to_bits(),
                    "f32 d {d} lane {lane}"
                );
                let want = dot(&wide[r * d..(r + 1) * d], &c[..d]);
                assert_eq!(
                    got16[lane].to_bits(),
                    want.to_bits(),
                    "f16 d {d} lane {lane}"
                );
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
                assert_eq!(done, (len - start) / W * W);
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
    /// its product with the sum; the newest row is left to the caller.
    #[test]
    fn tiled_sweep_matches_entries() {
        if !runs() {
            return;
        }
        for (len, d) in [
            (8usize, 16usize),
            (37, 24),
            (90, 64),
            (7, 8),
            (5, 8),
            (1, 8),
            (64, 5),
        ] {
            let keys = keys(len, d);
            let inv = inv_norms(&keys, d);
            let runs: Vec<&[f16]> = keys.chunks(8 * d).collect();
            let s = CosineRows {
                keys: Rows::runs(&runs, 8, len, d).unwrap(),
                inv_norm: &inv,
            };
            let dp = d.div_ceil(16) * 16;
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
                let mut pending = vec![0usize; len];
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
                assert_eq!(done, (len - 1) / ROWS * ROWS, "len {len}");
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
                assert!(latest[done..].iter().all(|&r| r == u32::MAX));
            }
        }
    }

    /// The tiled scan resolves every row as one entry at a time would, on f16 rows, with
    /// full and partial tiles, and leaves rows resolved before it alone.
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
            (0.9, 3, 30),
        ] {
            // Every other row pending; the others hold a match found before.
            let mut pending: Vec<usize> = (0..start).filter(|i| i % 3 != 1).collect();
            let (mut latest, mut entry) = (vec![u32::MAX; len], vec![0.0f32; len]);
            for i in (0..start).filter(|i| i % 3 == 1) {
                (latest[i], entry[i]) = (7, 0.25);
            }
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
                if i % 3 == 1 {
                    assert_eq!((latest[i], entry[i]), (7, 0.25), "row {i}");
                    assert!(!pending.contains(&i));
                    continue;
                }
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
