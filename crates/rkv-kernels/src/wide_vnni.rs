//! The AVX-512 VNNI micro-kernels of `wide.rs`: eight unpacked weight rows
//! ([`WideBlock`]) against the tokens of a [`WideAct`], one token per i32 lane: all
//! sixteen in 512-bit registers ([`tile16`]), or the first eight in 256-bit ones
//! ([`tile8`], for a tile of at most eight tokens: batched decode, a prompt's last
//! tile). On Intel cores a 256-bit `vpdpbusd` issues on two ports where a 512-bit one
//! has one, so the narrow kernel loses no multiplies per cycle.
//!
//! Per group of four values, one activation line (four values of each token) meets
//! each row's broadcast four bytes in one `vpdpbusd` (unsigned weights, signed
//! activations, exact i32 sums); each sub-block's sums meet the row's scale
//! (`vpmulld`), the block sums meet the rows' i16 pair weights (`vpmaddwd`), and the
//! float steps are `wide::tile_ref`'s in the same order, so each kernel is bit for bit
//! that reference (and each format's `dot_lane_ref`). Must not know: threads, models,
//! the block formats.

// Indexing by row `r`, sub-block `j` and pair `p` keeps the chains explicit.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::blocks_k::QK_K;
use crate::interleaved::ROWS_X8;
use crate::wide::{WideAct, WideBlock, TOKENS_X16};

/// One register of token lanes, integer (`I`) or float (`F`). The methods wrap single
/// intrinsics; they are `#[inline(always)]` without target features of their own and
/// are called only from the kernels below, whose features they compile with.
trait Lanes {
    type I: Copy;
    type F: Copy;
    fn zero_i() -> Self::I;
    fn zero_f() -> Self::F;
    /// The lanes' worth of 64-byte-aligned data at `p`.
    ///
    /// # Safety
    /// `p` must be 64-byte aligned with a whole register's bytes readable.
    unsafe fn load_i(p: *const u8) -> Self::I;
    /// # Safety
    /// As [`Lanes::load_i`].
    unsafe fn load_f(p: *const f32) -> Self::F;
    /// # Safety
    /// `p` must have a whole register's f32 writable.
    unsafe fn store_f(p: *mut f32, v: Self::F);
    fn set1_i(v: i32) -> Self::I;
    fn set1_f(v: f32) -> Self::F;
    fn dpbusd(acc: Self::I, u: Self::I, s: Self::I) -> Self::I;
    fn mullo(a: Self::I, b: Self::I) -> Self::I;
    fn madd(a: Self::I, b: Self::I) -> Self::I;
    fn add(a: Self::I, b: Self::I) -> Self::I;
    /// `a - 32 b`.
    fn sub32(a: Self::I, b: Self::I) -> Self::I;
    fn cvt(a: Self::I) -> Self::F;
    fn mul(a: Self::F, b: Self::F) -> Self::F;
    /// `a b + c`, one rounding.
    fn fmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// `-(a b) + c`, one rounding.
    fn fnmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
}

/// Sixteen tokens in 512-bit registers.
struct Z;
/// The first eight tokens in 256-bit registers.
struct Y;

// SAFETY (every `unsafe` block below): the intrinsics need AVX-512 F, BW, VL and VNNI,
// which the kernels that inline these methods enable; loads and stores are the
// callers' contracts.
impl Lanes for Z {
    type I = __m512i;
    type F = __m512;
    #[inline(always)]
    fn zero_i() -> __m512i {
        unsafe { _mm512_setzero_si512() }
    }
    #[inline(always)]
    fn zero_f() -> __m512 {
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn load_i(p: *const u8) -> __m512i {
        unsafe { _mm512_load_si512(p as *const __m512i) }
    }
    #[inline(always)]
    unsafe fn load_f(p: *const f32) -> __m512 {
        unsafe { _mm512_load_ps(p) }
    }
    #[inline(always)]
    unsafe fn store_f(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    fn set1_i(v: i32) -> __m512i {
        unsafe { _mm512_set1_epi32(v) }
    }
    #[inline(always)]
    fn set1_f(v: f32) -> __m512 {
        unsafe { _mm512_set1_ps(v) }
    }
    #[inline(always)]
    fn dpbusd(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
        unsafe { _mm512_dpbusd_epi32(acc, u, s) }
    }
    #[inline(always)]
    fn mullo(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_mullo_epi32(a, b) }
    }
    #[inline(always)]
    fn madd(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_madd_epi16(a, b) }
    }
    #[inline(always)]
    fn add(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_add_epi32(a, b) }
    }
    #[inline(always)]
    fn sub32(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_sub_epi32(a, _mm512_slli_epi32::<5>(b)) }
    }
    #[inline(always)]
    fn cvt(a: __m512i) -> __m512 {
        unsafe { _mm512_cvtepi32_ps(a) }
    }
    #[inline(always)]
    fn mul(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn fnmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fnmadd_ps(a, b, c) }
    }
}

impl Lanes for Y {
    type I = __m256i;
    type F = __m256;
    #[inline(always)]
    fn zero_i() -> __m256i {
        unsafe { _mm256_setzero_si256() }
    }
    #[inline(always)]
    fn zero_f() -> __m256 {
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn load_i(p: *const u8) -> __m256i {
        unsafe { _mm256_load_si256(p as *const __m256i) }
    }
    #[inline(always)]
    unsafe fn load_f(p: *const f32) -> __m256 {
        unsafe { _mm256_load_ps(p) }
    }
    #[inline(always)]
    unsafe fn store_f(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    fn set1_i(v: i32) -> __m256i {
        unsafe { _mm256_set1_epi32(v) }
    }
    #[inline(always)]
    fn set1_f(v: f32) -> __m256 {
        unsafe { _mm256_set1_ps(v) }
    }
    #[inline(always)]
    fn dpbusd(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        unsafe { _mm256_dpbusd_epi32(acc, u, s) }
    }
    #[inline(always)]
    fn mullo(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_mullo_epi32(a, b) }
    }
    #[inline(always)]
    fn madd(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_madd_epi16(a, b) }
    }
    #[inline(always)]
    fn add(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(a, b) }
    }
    #[inline(always)]
    fn sub32(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_sub_epi32(a, _mm256_slli_epi32::<5>(b)) }
    }
    #[inline(always)]
    fn cvt(a: __m256i) -> __m256 {
        unsafe { _mm256_cvtepi32_ps(a) }
    }
    #[inline(always)]
    fn mul(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn fnmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fnmadd_ps(a, b, c) }
    }
}

/// `out[r][t] = dot(row r of w, token t of a)` for the tokens `V` holds, `SUB` values
/// per scale, with the mins step where `MINS` (see `wide::Wide`).
#[inline(always)]
fn tile<V: Lanes, const SUB: usize, const MINS: bool>(
    w: &[WideBlock],
    a: &[WideAct],
    out: &mut [[f32; TOKENS_X16]; ROWS_X8],
) {
    assert_eq!(w.len(), a.len(), "wide tile: block counts differ");
    let mut acc = [V::zero_f(); ROWS_X8];
    for (wb, ab) in w.iter().zip(a) {
        let mut isum = [V::zero_i(); ROWS_X8];
        for j in 0..QK_K / SUB {
            let mut s = [V::zero_i(); ROWS_X8];
            for kg in j * SUB / 4..(j + 1) * SUB / 4 {
                // SAFETY: a 64-byte line of an align(64) struct.
                let codes = unsafe { V::load_i(ab.q[kg].as_ptr() as *const u8) };
                let quad = wb.q[kg].as_ptr();
                for r in 0..ROWS_X8 {
                    // SAFETY: 4 r + 4 <= 32 bytes of the line; unaligned 4-byte read.
                    let word = unsafe { (quad.add(4 * r) as *const i32).read_unaligned() };
                    s[r] = V::dpbusd(s[r], V::set1_i(word), codes);
                }
            }
            for r in 0..ROWS_X8 {
                isum[r] = V::add(isum[r], V::mullo(s[r], V::set1_i(wb.sc[j][r])));
            }
        }
        let mut osum = [V::zero_i(); ROWS_X8];
        for p in 0..8 {
            // SAFETY: a 64-byte line of an align(64) struct.
            let bs = unsafe { V::load_i(ab.bs[p].as_ptr() as *const u8) };
            for r in 0..ROWS_X8 {
                osum[r] = V::add(osum[r], V::madd(bs, V::set1_i(wb.pairs[p][r])));
            }
        }
        // SAFETY: 16 f32 of an align(64) struct.
        let dy = unsafe { V::load_f(ab.d.as_ptr()) };
        for r in 0..ROWS_X8 {
            let dd = V::mul(V::set1_f(wb.d[r]), dy);
            if MINS {
                acc[r] = V::fmadd(dd, V::cvt(isum[r]), acc[r]);
                let dm = V::mul(V::set1_f(wb.dmin[r]), dy);
                acc[r] = V::fnmadd(dm, V::cvt(osum[r]), acc[r]);
            } else {
                acc[r] = V::fmadd(dd, V::cvt(V::sub32(isum[r], osum[r])), acc[r]);
            }
        }
    }
    for r in 0..ROWS_X8 {
        // SAFETY: `out[r]` is 16 writable f32.
        unsafe { V::store_f(out[r].as_mut_ptr(), acc[r]) };
    }
}

/// All sixteen tokens of `a`.
///
/// # Panics
/// If `w.len() != a.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn tile16<const SUB: usize, const MINS: bool>(
    w: &[WideBlock],
    a: &[WideAct],
    out: &mut [[f32; TOKENS_X16]; ROWS_X8],
) {
    tile::<Z, SUB, MINS>(w, a, out)
}

/// The first eight tokens of `a` (`out[r][8..]` is left as it was).
///
/// # Panics
/// If `w.len() != a.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn tile8<const SUB: usize, const MINS: bool>(
    w: &[WideBlock],
    a: &[WideAct],
    out: &mut [[f32; TOKENS_X16]; ROWS_X8],
) {
    tile::<Y, SUB, MINS>(w, a, out)
}
