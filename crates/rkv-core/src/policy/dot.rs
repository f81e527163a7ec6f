//! Dot products in one fixed order, over f32 or f16 rows (DESIGN.md §2: the redundancy's
//! cosine entries must be bit-identical however they are computed).
//!
//! Owns: the order (lane `l` of 8 accumulates elements `l, l + 8, ...` by multiply-add,
//! the tail as a partial block, then the tree 8 -> 4 -> 2 -> 1), its x86-64-v3 (AVX2,
//! FMA, F16C: 256-bit registers) and portable implementations, chosen at run time
//! (`crate::simd`): [`dot`], [`dots`] and [`dots2`] check at every call, and `Dots`
//! names the path a generic body is compiled for, so that a hot scan checks once at its
//! entry instead; also batched forms that share loads ([`dots`], [`dots2`]), the norms and
//! f64 sums of scaled rows. The multiply-add is fused wherever the x86-64 CPU has FMA
//! (`madd`; the vector path always fuses), so every path gives the same bits on a given
//! CPU, and a portable build the same as a native one (off x86-64 it is not fused).
//! Elements widen to f32 first ([`KeyElem`]; exact for f16), so a result never depends
//! on whether a row was stored in f16 or widened before.
//!
//! Must not know: keys' meaning, thresholds, layouts of the cache.

use super::keys::KeyElem;
#[cfg(target_arch = "x86_64")]
use crate::simd;
use crate::simd::V3;

/// Lanes of the f32 dot product's partial sums (a fixed order). Eight, one 256-bit
/// register: on this project's machine (AMD Zen 4) a tile of `super::tile_avx512` over f16
/// rows (the engine's keys) takes about a quarter less time with 256-bit accumulators
/// than with 512-bit ones (measured one-off: 80 -> 61 TSC cycles at head dim 64, 138 ->
/// 105 at 128; over f32 rows no change).
const LANES: usize = 8;

/// Inverse norms `1 / (||k||_2 + 1e-8)` of `len` keys ([`inv_norm`]).
///
/// `keys`: `[len, dim]`. Returns `[len]`.
pub fn inv_norms<E: KeyElem>(keys: &[E], dim: usize) -> Vec<f32> {
    if dim == 0 {
        return Vec::new();
    }
    keys.chunks_exact(dim).map(inv_norm).collect()
}

/// `1 / (||k||_2 + 1e-8)` of one key, the squared norm from [`dot`] (f32 in the fixed
/// order, as the reference computes it in f32).
#[inline]
pub fn inv_norm<E: KeyElem>(key: &[E]) -> f32 {
    1.0 / (dot(key, key).sqrt() + 1e-8)
}

/// Adds `sum_r scale_r * row_r` over `rows` to `sum`: the scaled rows are accumulated in
/// f32 (per element, in row order, [`madd`]) in blocks of [`SUM_BLOCK`] rows, and each
/// block's total is widened and added to the f64 `sum` (the running sum a caller keeps
/// across many updates stays in f64). The same bits for f16 rows as for their f32
/// widening, however it is vectorised. Each row must be at least `sum.len()` long.
pub fn add_scaled_rows<'r, E: KeyElem>(
    sum: &mut [f64],
    rows: impl IntoIterator<Item = (&'r [E], f32)>,
) {
    let dim = sum.len();
    let mut block: Vec<(&[E], f32)> = Vec::with_capacity(SUM_BLOCK);
    for (row, scale) in rows {
        block.push((&row[..dim], scale));
        if block.len() == SUM_BLOCK {
            add_block(sum, &block);
            block.clear();
        }
    }
    if !block.is_empty() {
        add_block(sum, &block);
    }
}

/// Rows per f32 block of [`add_scaled_rows`].
const SUM_BLOCK: usize = 16;

/// One block of [`add_scaled_rows`]: per element, the rows' scaled values accumulated in
/// f32 from zero in row order, then widened and added to `sum` (each row at least
/// `sum.len()` long). Element by element, so that the accumulator stays in a register
/// across the block's rows: whole registers on the CPU's widest path, the rest here.
#[inline]
fn add_block<E: KeyElem>(sum: &mut [f64], block: &[(&[E], f32)]) {
    #[cfg(target_arch = "x86_64")]
    let done = if simd::avx512() {
        // SAFETY: the run-time check above: the CPU has the features `avx512::add_block`
        // enables; every row is at least `sum.len()` long.
        unsafe { avx512::add_block(sum, block) }
    } else if simd::v3() {
        // SAFETY: the run-time check above: the CPU has the features `v3::add_block`
        // enables; every row is at least `sum.len()` long.
        unsafe { v3::add_block(sum, block) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    let fused = Portable::detect().fused;
    for (k, s) in sum.iter_mut().enumerate().skip(done) {
        let mut t = 0.0f32;
        for &(row, scale) in block {
            t = madd(fused, row[k].widen(), scale, t);
        }
        *s += f64::from(t);
    }
}

/// `a * b + c`: fused (one rounding) when `fused`, which is whether the CPU has FMA
/// ([`Portable::detect`]), else two roundings: on any one CPU one fixed function, the one
/// the vector path computes (always fused, and only taken where the CPU has FMA), so the
/// paths agree bit for bit. Symmetric in `a` and `b`. The fused form is
/// [`f32::mul_add`], exact everywhere: an instruction where the build's target has FMA,
/// else a call to `fmaf` (exact too; slower, but on CPUs with AVX2 only what the vector
/// paths leave takes it: the last `dim % 8` elements of [`add_block`], `dim % 16` on
/// AVX-512).
#[inline(always)]
fn madd(fused: bool, a: f32, b: f32, c: f32) -> f32 {
    if fused {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// The fixed reduction of the lane sums: a tree (8 -> 4 -> 2 -> 1), pairing lanes
/// `(l, l + 4)`, then `(l, l + 2)`, then `(l, l + 1)`.
#[inline(always)]
fn reduce(acc: &[f32; LANES]) -> f32 {
    let v4 = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    let v2 = [v4[0] + v4[2], v4[1] + v4[3]];
    v2[0] + v2[1]
}

/// The dot products of `a` with each of `bs` (each at least as long as `a`), every one
/// in exactly [`dot`]'s order: lane `l` accumulates elements `l, l + LANES, ...` with
/// [`madd`] (the tail as a partial block), then [`reduce`]. Computing several at once
/// shares the loads of `a` and overlaps independent chains; the results are bit-identical
/// to one [`dot`] each. The path is chosen at every call (`Dots` chooses once for a
/// whole scan).
#[inline(always)]
pub fn dots<A: KeyElem, B: KeyElem, const N: usize>(a: &[A], bs: [&[B]; N]) -> [f32; N] {
    #[cfg(target_arch = "x86_64")]
    if let Some(v3) = V3::detect() {
        return v3::dots_entry(v3, a, bs);
    }
    Portable::detect().dots(a, bs)
}

/// [`dots`] for two rows `a0`, `a1` of equal length at once (each `b` is loaded once for
/// both): `[dots(a0, bs), dots(a1, bs)]`, bit for bit.
#[inline(always)]
pub fn dots2<A: KeyElem, B: KeyElem, const N: usize>(
    a0: &[A],
    a1: &[A],
    bs: [&[B]; N],
) -> [[f32; N]; 2] {
    #[cfg(target_arch = "x86_64")]
    if let Some(v3) = V3::detect() {
        return v3::dots2_entry(v3, a0, a1, bs);
    }
    Portable::detect().dots2(a0, a1, bs)
}

/// A path of [`dots`], for generic bodies that run many of them: such a body takes an
/// `impl Dots`, is `#[inline(always)]` down to the products, and is entered once per
/// path, [`Portable`] or [`V3`], after one check ([`V3::detect`]). Its `V3` copy must be
/// inlined into a function with `#[target_feature(enable = "avx2,fma,f16c,popcnt")]`
/// (else it is correct but the intrinsics stay calls). Every path gives [`dots`]'s bits.
pub(crate) trait Dots: Copy {
    /// [`dots`] on this path.
    fn dots<A: KeyElem, B: KeyElem, const N: usize>(self, a: &[A], bs: [&[B]; N]) -> [f32; N];

    /// [`dots2`] on this path.
    fn dots2<A: KeyElem, B: KeyElem, const N: usize>(
        self,
        a0: &[A],
        a1: &[A],
        bs: [&[B]; N],
    ) -> [[f32; N]; 2];

    /// [`dot`] on this path.
    #[inline(always)]
    fn dot<A: KeyElem, B: KeyElem>(self, a: &[A], b: &[B]) -> f32 {
        let n = a.len().min(b.len());
        self.dots(&a[..n], [&b[..n]])[0]
    }
}

/// The portable path of [`dots`]: plain Rust, its multiply-add fused where the CPU has
/// FMA ([`madd`]; decided once, here).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Portable {
    fused: bool,
}

impl Portable {
    /// The path, with the CPU's multiply-add.
    #[inline]
    pub(crate) fn detect() -> Self {
        Self {
            fused: crate::simd::fma(),
        }
    }
}

impl Dots for Portable {
    #[inline(always)]
    fn dots<A: KeyElem, B: KeyElem, const N: usize>(self, a: &[A], bs: [&[B]; N]) -> [f32; N] {
        dots_portable(self.fused, a, bs.map(|b| &b[..a.len()]))
    }

    #[inline(always)]
    fn dots2<A: KeyElem, B: KeyElem, const N: usize>(
        self,
        a0: &[A],
        a1: &[A],
        bs: [&[B]; N],
    ) -> [[f32; N]; 2] {
        let n = a0.len().min(a1.len());
        let bs = bs.map(|b| &b[..n]);
        [
            dots_portable(self.fused, &a0[..n], bs),
            dots_portable(self.fused, &a1[..n], bs),
        ]
    }
}

/// The 256-bit path of [`dots`] (only reached where the token proves the CPU has it; off
/// x86-64, where no token is ever made, the portable one).
impl Dots for V3 {
    #[inline(always)]
    fn dots<A: KeyElem, B: KeyElem, const N: usize>(self, a: &[A], bs: [&[B]; N]) -> [f32; N] {
        let bs = bs.map(|b| &b[..a.len()]);
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `self` proves the CPU has AVX2, FMA and F16C; every `b` is exactly
            // as long as `a`.
            unsafe { v3::dots(a, bs) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            dots_portable(crate::simd::fma(), a, bs)
        }
    }

    #[inline(always)]
    fn dots2<A: KeyElem, B: KeyElem, const N: usize>(
        self,
        a0: &[A],
        a1: &[A],
        bs: [&[B]; N],
    ) -> [[f32; N]; 2] {
        let n = a0.len().min(a1.len());
        let bs = bs.map(|b| &b[..n]);
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `self` proves the CPU has AVX2, FMA and F16C; `a0`, `a1` and every
            // `b` have length `n`.
            unsafe { v3::dots2(&a0[..n], &a1[..n], bs) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Portable::detect().dots2(a0, a1, bs)
        }
    }
}

/// [`dots`] in plain Rust (every `b` exactly as long as `a`), multiply-adds fused when
/// `fused` ([`madd`]).
#[inline(always)]
fn dots_portable<A: KeyElem, B: KeyElem, const N: usize>(
    fused: bool,
    a: &[A],
    bs: [&[B]; N],
) -> [f32; N] {
    let mut acc = [[0.0f32; LANES]; N];
    let mut chunks = a.chunks_exact(LANES);
    let mut c = 0;
    for ca in &mut chunks {
        for (acc, b) in acc.iter_mut().zip(&bs) {
            for ((s, &x), &y) in acc.iter_mut().zip(ca).zip(&b[c..c + LANES]) {
                *s = madd(fused, x.widen(), y.widen(), *s);
            }
        }
        c += LANES;
    }
    let tail = chunks.remainder();
    for (acc, b) in acc.iter_mut().zip(&bs) {
        for ((s, &x), &y) in acc.iter_mut().zip(tail).zip(&b[c..]) {
            *s = madd(fused, x.widen(), y.widen(), *s);
        }
    }
    acc.map(|acc| reduce(&acc))
}

#[cfg(target_arch = "x86_64")]
pub(super) use v3::{fmadd_tail, tail_lanes};

/// [`dots`] on 256-bit registers, for CPUs with AVX2, FMA and F16C (x86-64-v3, which
/// AVX-512F implies; checked at run time): the same arithmetic as [`dots_portable`] with
/// its multiply-add fused (one lane per register lane, fused multiply-add, the tail's
/// missing lanes left alone, the same reduction tree). Its helpers are
/// `#[inline(always)]` without target features: they take the features of the
/// `#[target_feature]` function they are inlined into.
#[cfg(target_arch = "x86_64")]
mod v3 {
    use super::{Dots, KeyElem, LANES, V3};
    use std::arch::x86_64::*;

    /// [`Dots::dots`] of `v3` for a caller without the path's target features: the body
    /// behind one call that has them (where the build's target has them too, a native
    /// build, that call is an ordinary one to inline).
    #[inline(always)]
    pub(super) fn dots_entry<A: KeyElem, B: KeyElem, const N: usize>(
        v3: V3,
        a: &[A],
        bs: [&[B]; N],
    ) -> [f32; N] {
        // SAFETY: `v3` proves the CPU has the features `dots_features` enables.
        unsafe { dots_features(v3, a, bs) }
    }

    #[target_feature(enable = "avx2,fma,f16c,popcnt")]
    #[inline]
    fn dots_features<A: KeyElem, B: KeyElem, const N: usize>(
        v3: V3,
        a: &[A],
        bs: [&[B]; N],
    ) -> [f32; N] {
        v3.dots(a, bs)
    }

    /// [`Dots::dots2`] of `v3`, as [`dots_entry`].
    #[inline(always)]
    pub(super) fn dots2_entry<A: KeyElem, B: KeyElem, const N: usize>(
        v3: V3,
        a0: &[A],
        a1: &[A],
        bs: [&[B]; N],
    ) -> [[f32; N]; 2] {
        // SAFETY: `v3` proves the CPU has the features `dots2_features` enables.
        unsafe { dots2_features(v3, a0, a1, bs) }
    }

    #[target_feature(enable = "avx2,fma,f16c,popcnt")]
    #[inline]
    fn dots2_features<A: KeyElem, B: KeyElem, const N: usize>(
        v3: V3,
        a0: &[A],
        a1: &[A],
        bs: [&[B]; N],
    ) -> [[f32; N]; 2] {
        v3.dots2(a0, a1, bs)
    }

    /// # Safety
    /// The CPU must have AVX2, FMA and F16C, and every `b` must be exactly as long as
    /// `a`.
    #[inline(always)]
    pub(super) unsafe fn dots<A: KeyElem, B: KeyElem, const N: usize>(
        a: &[A],
        bs: [&[B]; N],
    ) -> [f32; N] {
        let [acc] = accumulate::<A, B, N, 1>([a], bs);
        reduce_all(acc)
    }

    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `a0`, `a1` and every `b` must have equal
    /// lengths.
    #[inline(always)]
    pub(super) unsafe fn dots2<A: KeyElem, B: KeyElem, const N: usize>(
        a0: &[A],
        a1: &[A],
        bs: [&[B]; N],
    ) -> [[f32; N]; 2] {
        let [acc0, acc1] = accumulate::<A, B, N, 2>([a0, a1], bs);
        [reduce_all(acc0), reduce_all(acc1)]
    }

    /// The lane sums of every `a` (`R` of them) against every `b` (`N`): lane `l`
    /// accumulates elements `l, l + LANES, ...` with a fused multiply-add, the tail's
    /// missing lanes untouched. (Here and in the tiles, intrinsics are called in plain
    /// loops, not in closures such as `array::map`'s: a closure is a function of its own,
    /// without the target features of the function this is inlined into, and a build for
    /// the portable target left its intrinsics as calls.)
    #[inline(always)]
    unsafe fn accumulate<A: KeyElem, B: KeyElem, const N: usize, const R: usize>(
        a: [&[A]; R],
        bs: [&[B]; N],
    ) -> [[__m256; N]; R] {
        let n = a[0].len();
        let full = n - n % LANES;
        let pa = a.map(<[A]>::as_ptr);
        let pb = bs.map(<[B]>::as_ptr);
        let mut acc = [[_mm256_setzero_ps(); N]; R];
        let mut c = 0;
        let mut va = [_mm256_setzero_ps(); R];
        while c < full {
            for r in 0..R {
                va[r] = A::load8(pa[r].add(c));
            }
            for k in 0..N {
                let vb = B::load8(pb[k].add(c));
                for r in 0..R {
                    acc[r][k] = _mm256_fmadd_ps(va[r], vb, acc[r][k]);
                }
            }
            c += LANES;
        }
        if full < n {
            let live = tail_lanes(n - full);
            for r in 0..R {
                va[r] = A::load8_first(pa[r].add(full), n - full);
            }
            for k in 0..N {
                let vb = B::load8_first(pb[k].add(full), n - full);
                for r in 0..R {
                    acc[r][k] = fmadd_tail(va[r], vb, acc[r][k], live);
                }
            }
        }
        acc
    }

    /// The lanes `0..n` of a partial block (sign bits set), for `_mm256_blendv_ps`: the
    /// other lanes keep their sums as they are (adding a zero product could turn a `-0.0`
    /// sum into `+0.0`).
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[inline(always)]
    pub(in crate::policy) unsafe fn tail_lanes(n: usize) -> __m256 {
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), lanes))
    }

    /// `a * b + acc` in the lanes of a partial block that `live` ([`tail_lanes`]) selects,
    /// `acc` as it is in the others.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[inline(always)]
    pub(in crate::policy) unsafe fn fmadd_tail(
        a: __m256,
        b: __m256,
        acc: __m256,
        live: __m256,
    ) -> __m256 {
        _mm256_blendv_ps(acc, _mm256_fmadd_ps(a, b, acc), live)
    }

    /// The whole registers of [`super::add_block`]: elements `0..n - n % 8` of `sum`
    /// (`n = sum.len()`), 8 at a time (the same fused multiply-adds per element, in row
    /// order); returns how many it did.
    ///
    /// # Safety
    /// The CPU must have the features this enables; every row must be at least
    /// `sum.len()` long.
    #[target_feature(enable = "avx2,fma,f16c,popcnt")]
    pub(super) unsafe fn add_block<E: KeyElem>(sum: &mut [f64], block: &[(&[E], f32)]) -> usize {
        let n = sum.len();
        let full = n - n % LANES;
        let ps = sum.as_mut_ptr();
        let mut c = 0;
        // Four registers' elements at a time: four independent chains of fused
        // multiply-adds through the block's rows instead of one (each element's own chain,
        // in row order, is unchanged).
        let wide = n - n % (4 * LANES);
        while c < wide {
            let mut t = [_mm256_setzero_ps(); 4];
            for &(row, scale) in block {
                let (p, s) = (row.as_ptr().add(c), _mm256_set1_ps(scale));
                for (k, tk) in t.iter_mut().enumerate() {
                    *tk = _mm256_fmadd_ps(E::load8(p.add(k * LANES)), s, *tk);
                }
            }
            for (k, &tk) in t.iter().enumerate() {
                add_widened(ps.add(c + k * LANES), tk);
            }
            c += 4 * LANES;
        }
        while c < full {
            let mut t = _mm256_setzero_ps();
            for &(row, scale) in block {
                t = _mm256_fmadd_ps(E::load8(row.as_ptr().add(c)), _mm256_set1_ps(scale), t);
            }
            add_widened(ps.add(c), t);
            c += LANES;
        }
        full
    }

    /// `at[0..8] += t`, each f32 lane widened to f64.
    ///
    /// # Safety
    /// The CPU must have AVX2; `at` must point to 8 writable f64.
    #[inline(always)]
    unsafe fn add_widened(at: *mut f64, t: __m256) {
        let lo = _mm256_cvtps_pd(_mm256_castps256_ps128(t));
        let hi = _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1));
        _mm256_storeu_pd(at, _mm256_add_pd(_mm256_loadu_pd(at), lo));
        _mm256_storeu_pd(at.add(4), _mm256_add_pd(_mm256_loadu_pd(at.add(4)), hi));
    }

    /// [`reduce`] of every register, four at a time where possible.
    #[inline(always)]
    unsafe fn reduce_all<const N: usize>(acc: [__m256; N]) -> [f32; N] {
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
    unsafe fn reduce4(a: __m256, b: __m256, c: __m256, d: __m256) -> [f32; 4] {
        // Level 1 (l, l + 4): [a | b] and [c | d], 4 lanes each.
        let x = _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(a, b),
            _mm256_permute2f128_ps::<0x31>(a, b),
        );
        let y = _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(c, d),
            _mm256_permute2f128_ps::<0x31>(c, d),
        );
        // Level 2 (l, l + 2): per 128-bit block, [a, a, c, c] and [b, b, d, d].
        let z = _mm256_add_ps(
            _mm256_shuffle_ps::<0x44>(x, y),
            _mm256_shuffle_ps::<0xEE>(x, y),
        );
        // Level 3 (l, l + 1): a, c, b, d in lanes 0, 2, 4, 6.
        let w = _mm256_add_ps(z, _mm256_permute_ps::<0xB1>(z));
        let mut all = [0.0f32; 8];
        _mm256_storeu_ps(all.as_mut_ptr(), w);
        [all[0], all[4], all[2], all[6]]
    }

    /// The tree 8 -> 4 -> 2 -> 1 of [`super::reduce`].
    #[inline(always)]
    unsafe fn reduce(v8: __m256) -> f32 {
        let v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
        let v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
        _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1)))
    }
}

/// [`super::add_block`]'s whole registers on 512-bit registers, for CPUs with AVX-512F
/// (checked at run time).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::KeyElem;
    use std::arch::x86_64::*;

    /// The whole registers of [`super::add_block`]: elements `0..n - n % 16` of `sum`
    /// (`n = sum.len()`), 16 at a time; returns how many it did.
    ///
    /// # Safety
    /// The CPU must have the features this enables; every row must be at least
    /// `sum.len()` long.
    #[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
    pub(super) unsafe fn add_block<E: KeyElem>(sum: &mut [f64], block: &[(&[E], f32)]) -> usize {
        let n = sum.len();
        let full = n - n % 16;
        let ps = sum.as_mut_ptr();
        let mut c = 0;
        while c < full {
            let mut t = _mm512_setzero_ps();
            for &(row, scale) in block {
                t = _mm512_fmadd_ps(E::load16(row.as_ptr().add(c)), _mm512_set1_ps(scale), t);
            }
            let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(t));
            let hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                _mm512_castps_pd(t),
                1,
            )));
            _mm512_storeu_pd(ps.add(c), _mm512_add_pd(_mm512_loadu_pd(ps.add(c)), lo));
            _mm512_storeu_pd(
                ps.add(c + 8),
                _mm512_add_pd(_mm512_loadu_pd(ps.add(c + 8)), hi),
            );
            c += 16;
        }
        full
    }
}

/// Dot product of two rows (the shorter length) in a fixed order: see [`dots`].
/// Symmetric: `dot(a, b) == dot(b, a)` bit for bit.
#[inline(always)]
pub fn dot<A: KeyElem, B: KeyElem>(a: &[A], b: &[B]) -> f32 {
    let n = a.len().min(b.len());
    dots(&a[..n], [&b[..n]])[0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn inverse_norms() {
        let k = [3.0, 4.0, 0.0, 0.0];
        let inv = inv_norms(&k, 2);
        assert!((inv[0] - 0.2).abs() < 1e-7);
        assert_eq!(inv[1], 1e8);
        assert!(inv_norms(&k, 0).is_empty());
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
            // The path the CPU takes and the portable one (with the CPU's multiply-add)
            // agree bit for bit.
            let fused = Portable::detect().fused;
            assert_eq!(
                got.map(f32::to_bits),
                dots_portable(fused, &a, rows).map(f32::to_bits),
                "n {n}"
            );
            let portable = Portable::detect();
            assert_eq!(
                portable
                    .dots2(&a, &other, rows)
                    .map(|g| g.map(f32::to_bits)),
                [got, g1].map(|g| g.map(f32::to_bits)),
                "n {n}"
            );
            // f16 rows give what their exact f32 widening gives.
            let ha: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
            let hb: Vec<Vec<f16>> = bs
                .iter()
                .map(|b| b.iter().map(|&x| f16::from_f32(x)).collect())
                .collect();
            let wa: Vec<f32> = ha.iter().map(|x| x.to_f32()).collect();
            let wb: Vec<Vec<f32>> = hb
                .iter()
                .map(|b| b.iter().map(|x| x.to_f32()).collect())
                .collect();
            let hrows: [&[f16]; 4] = std::array::from_fn(|k| hb[k].as_slice());
            let wrows: [&[f32]; 4] = std::array::from_fn(|k| wb[k].as_slice());
            let want = dots(&wa, wrows).map(f32::to_bits);
            assert_eq!(dots(&ha, hrows).map(f32::to_bits), want, "n {n}");
            assert_eq!(dots(&wa, hrows).map(f32::to_bits), want, "n {n}");
            assert_eq!(dots_portable(fused, &ha, hrows).map(f32::to_bits), want);
            let [h0, _] = dots2(&ha, &ha, hrows);
            assert_eq!(h0.map(f32::to_bits), want, "n {n}");
            assert_eq!(inv_norm(&ha).to_bits(), inv_norm(&wa).to_bits());
        }
    }

    /// Many rows: blocks of [`SUM_BLOCK`] rows, each accumulated in f32 from zero in row
    /// order and added to the f64 sum; the same bits for f16 rows and their widening.
    #[test]
    fn add_scaled_rows_in_blocks() {
        let fused = Portable::detect().fused;
        for d in [5usize, 16, 37, 48, 64, 128] {
            let n = 2 * SUM_BLOCK + 7;
            let vals: Vec<f32> = (0..n * d).map(|k| (k as f32 * 0.77).sin() * 2.5).collect();
            let half: Vec<f16> = vals.iter().map(|&x| f16::from_f32(x)).collect();
            let wide: Vec<f32> = half.iter().map(|x| x.to_f32()).collect();
            let scale = |r: usize| 0.3 - r as f32 * 0.05;
            let mut want = vec![0.25f64; d];
            for block in (0..n).collect::<Vec<_>>().chunks(SUM_BLOCK) {
                for (k, w) in want.iter_mut().enumerate() {
                    let t = block
                        .iter()
                        .fold(0.0f32, |t, &r| madd(fused, vals[r * d + k], scale(r), t));
                    *w += f64::from(t);
                }
            }
            let mut got = vec![0.25f64; d];
            add_scaled_rows(
                &mut got,
                (0..n).map(|r| (&vals[r * d..(r + 1) * d], scale(r))),
            );
            let mut got16 = vec![0.25f64; d];
            add_scaled_rows(
                &mut got16,
                (0..n).map(|r| (&half[r * d..(r + 1) * d], scale(r))),
            );
            let mut got_wide = vec![0.25f64; d];
            add_scaled_rows(
                &mut got_wide,
                (0..n).map(|r| (&wide[r * d..(r + 1) * d], scale(r))),
            );
            for k in 0..d {
                assert_eq!(got[k].to_bits(), want[k].to_bits(), "d {d} element {k}");
                assert_eq!(
                    got16[k].to_bits(),
                    got_wide[k].to_bits(),
                    "d {d} element {k}"
                );
            }
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
        let mut sum = vec![1.0f64; 19];
        add_scaled_rows(&mut sum, [(&a[..], 0.5), (&b[..], -2.0)]);
        let fused = Portable::detect().fused;
        let block: Vec<f32> = (0..19)
            .map(|k| madd(fused, b[k], -2.0, madd(fused, a[k], 0.5, 0.0)))
            .collect();
        for (k, (s, w)) in sum.iter().zip(&block).enumerate() {
            assert_eq!(s.to_bits(), (1.0 + f64::from(*w)).to_bits(), "{k}");
            let exact = 1.0 + 0.5 * f64::from(a[k]) - 2.0 * f64::from(b[k]);
            assert!((s - exact).abs() < 1e-6, "{k}");
        }
    }
}
