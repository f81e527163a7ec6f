//! AVX-512 (F, BW, VL) implementations of the attention vector helpers of
//! `attn.rs`: 16 lanes per step, masked loads/stores for the tail, f16 via
//! `_mm512_cvtph_ps` / `_mm512_cvtps_ph`.
//!
//! Compiled on every x86-64 target; the functions are `#[target_feature]`
//! functions, called from `attn.rs` only when the CPU has those features
//! (asked at run time). Each re-derives its loop bounds from the shortest slice,
//! so it never reads or writes out of bounds whatever the lengths.

use std::arch::x86_64::*;

use half::{bf16, f16};

use crate::attn::with_group_size;

/// Lane mask selecting the first `min(n, 16)` lanes.
#[inline]
fn mask(n: usize) -> __mmask16 {
    if n >= 16 {
        0xFFFF
    } else {
        ((1u32 << n) - 1) as __mmask16
    }
}

/// An element type loadable as 16 f32 lanes.
trait Lanes: Copy {
    /// Loads the lanes of `p` selected by `m` as f32 (others are zero).
    ///
    /// # Safety
    /// The selected lanes of `p` must be readable.
    unsafe fn load(p: *const Self, m: __mmask16) -> __m512;
}

impl Lanes for f32 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load(p: *const f32, m: __mmask16) -> __m512 {
        // SAFETY: the caller guarantees the selected lanes are readable;
        // masked-off lanes are not accessed.
        unsafe { _mm512_maskz_loadu_ps(m, p) }
    }
}

impl Lanes for f16 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load(p: *const f16, m: __mmask16) -> __m512 {
        // SAFETY: as above; f16 is a 2-byte plain value.
        _mm512_cvtph_ps(unsafe { _mm256_maskz_loadu_epi16(m, p as *const i16) })
    }
}

impl Lanes for bf16 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load(p: *const bf16, m: __mmask16) -> __m512 {
        // SAFETY: as above; bf16 is the top half of an f32: widened and shifted up.
        let h = unsafe { _mm256_maskz_loadu_epi16(m, p as *const i16) };
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn dot<K: Lanes>(k: &[K], q: &[f32]) -> f32 {
    let n = k.len().min(q.len());
    let (kp, qp) = (k.as_ptr(), q.as_ptr());
    let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut i = 0;
    while i + 32 <= n {
        // SAFETY: lanes i..i+32 < n are in bounds of both slices.
        unsafe {
            a0 = _mm512_fmadd_ps(K::load(kp.add(i), 0xFFFF), f32::load(qp.add(i), 0xFFFF), a0);
            let (k1, q1) = (kp.add(i + 16), qp.add(i + 16));
            a1 = _mm512_fmadd_ps(K::load(k1, 0xFFFF), f32::load(q1, 0xFFFF), a1);
        }
        i += 32;
    }
    while i < n {
        let m = mask(n - i);
        // SAFETY: the mask selects lanes below n only.
        unsafe { a0 = _mm512_fmadd_ps(K::load(kp.add(i), m), f32::load(qp.add(i), m), a0) };
        i += 16;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn axpy<X: Lanes>(y: &mut [f32], a: f32, x: &[X]) {
    let n = y.len().min(x.len());
    let (yp, xp) = (y.as_mut_ptr(), x.as_ptr());
    let av = _mm512_set1_ps(a);
    let mut i = 0;
    while i < n {
        let m = mask(n - i);
        // SAFETY: the mask selects lanes below n of both slices; `y` is
        // borrowed mutably, so the store aliases nothing else.
        unsafe {
            let v = _mm512_fmadd_ps(av, X::load(xp.add(i), m), f32::load(yp.add(i), m));
            _mm512_mask_storeu_ps(yp.add(i), m, v);
        }
        i += 16;
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) fn dot_f16(k: &[f16], q: &[f32]) -> f32 {
    dot(k, q)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) fn dot_f32(k: &[f32], q: &[f32]) -> f32 {
    dot(k, q)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) fn dot_bf16(k: &[bf16], q: &[f32]) -> f32 {
    dot(k, q)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) fn axpy_f16(y: &mut [f32], a: f32, x: &[f16]) {
    axpy(y, a, x)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    axpy(y, a, x)
}

/// `out[h] = dot(k, qs[h*d..])` for `G` heads at once (`d = k.len()`); the
/// key is loaded and converted once per 16 lanes for all `G` heads.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn dot_heads<const G: usize>(k: &[f16], qs: &[f32], out: &mut [f32]) {
    let d = k.len();
    let n = G.min(out.len()).min(qs.len() / d.max(1));
    if n < G {
        // Only reachable by misuse: fall back to one head at a time.
        for (o, q) in out.iter_mut().zip(qs.chunks_exact(d.max(1))) {
            *o = dot(k, q);
        }
        return;
    }
    let mut acc = [_mm512_setzero_ps(); G];
    let mut i = 0;
    while i < d {
        let m = mask(d - i);
        // SAFETY: the mask selects lanes i..min(i+16, d) of k, and of each
        // head h < G <= qs.len() / d, whose lanes end at or before (h+1)*d.
        unsafe {
            let kv = f16::load(k.as_ptr().add(i), m);
            for (h, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(kv, f32::load(qs.as_ptr().add(h * d + i), m), *a);
            }
        }
        i += 16;
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = _mm512_reduce_add_ps(a);
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) fn dot_f16_multi(k: &[f16], qs: &[f32], out: &mut [f32]) {
    if k.is_empty() {
        out.iter_mut().for_each(|o| *o = 0.0);
        return;
    }
    let d = k.len();
    let mut h = 0;
    while h < out.len() {
        let (o, q) = (&mut out[h..], &qs[(h * d).min(qs.len())..]);
        h += with_group_size!(o.len(), dot_heads(k, q, o));
    }
}

/// `ys[h*d..] += a[h] * x` for `G` heads at once (`d = x.len()`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn axpy_heads<const G: usize>(ys: &mut [f32], a: &[f32], x: &[f16]) {
    let d = x.len();
    if a.len() < G || ys.len() < G * d {
        // Only reachable by misuse: fall back to one head at a time.
        for (y, &ah) in ys.chunks_exact_mut(d.max(1)).zip(a) {
            axpy(y, ah, x);
        }
        return;
    }
    let av: [__m512; G] = std::array::from_fn(|h| _mm512_set1_ps(a[h]));
    let yp = ys.as_mut_ptr();
    let mut i = 0;
    while i < d {
        let m = mask(d - i);
        // SAFETY: the mask selects lanes i..min(i+16, d) of x and of each
        // head row h < G of ys (G * d <= ys.len(), checked above).
        unsafe {
            let xv = f16::load(x.as_ptr().add(i), m);
            for (h, ah) in av.iter().enumerate() {
                let p = yp.add(h * d + i);
                _mm512_mask_storeu_ps(p, m, _mm512_fmadd_ps(*ah, xv, f32::load(p, m)));
            }
        }
        i += 16;
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) fn axpy_f16_multi(ys: &mut [f32], a: &[f32], x: &[f16]) {
    let d = x.len().max(1);
    let mut h = 0;
    while h < a.len() {
        let start = (h * d).min(ys.len());
        let (y, ah) = (&mut ys[start..], &a[h..]);
        h += with_group_size!(ah.len(), axpy_heads(y, ah, x));
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) fn f32_to_f16_slice(src: &[f32], dst: &mut [f16]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i < n {
        let m = mask(n - i);
        // SAFETY: the mask selects lanes below n of both slices.
        unsafe {
            let v = f32::load(src.as_ptr().add(i), m);
            let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
            _mm256_mask_storeu_epi16(dst.as_mut_ptr().add(i) as *mut i16, m, h);
        }
        i += 16;
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) fn f16_to_f32_slice(src: &[f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i < n {
        let m = mask(n - i);
        // SAFETY: the mask selects lanes below n of both slices.
        unsafe {
            let v = f16::load(src.as_ptr().add(i), m);
            _mm512_mask_storeu_ps(dst.as_mut_ptr().add(i), m, v);
        }
        i += 16;
    }
}
