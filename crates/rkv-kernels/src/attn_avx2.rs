//! AVX2 (with FMA and F16C: x86-64-v3) implementations of the attention vector helpers
//! of `attn.rs`, for builds without AVX-512: 8 lanes per step, the tail (`n % 8`
//! elements) in scalar code, f16 via `_mm256_cvtph_ps` / `_mm256_cvtps_ph`.
//!
//! Compiled on every x86-64 target; the functions are `#[target_feature]` functions,
//! called from `attn.rs` only when the CPU has those features (asked at run time). Each
//! re-derives its loop bounds from the shortest slice, so it never reads or writes out
//! of bounds whatever the lengths.
//! Must not know: caches, heads' layout beyond `[g, d]`, the scalar references' order.

use std::arch::x86_64::*;

use half::{bf16, f16};

use crate::attn::with_group_size;

/// An element type loadable as 8 f32 lanes.
pub(crate) trait Lanes: Copy {
    /// Eight elements at `p` as f32.
    ///
    /// # Safety
    /// `p` must point to 8 readable elements.
    unsafe fn load(p: *const Self) -> __m256;

    /// The element as f32 (exact).
    fn widen(self) -> f32;
}

impl Lanes for f32 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: the caller guarantees 8 readable elements.
        unsafe { _mm256_loadu_ps(p) }
    }

    #[inline]
    fn widen(self) -> f32 {
        self
    }
}

impl Lanes for f16 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load(p: *const f16) -> __m256 {
        // SAFETY: as above; f16 is a 2-byte plain value.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p as *const __m128i) })
    }

    #[inline]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

impl Lanes for bf16 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load(p: *const bf16) -> __m256 {
        // SAFETY: as above; bf16 is a 2-byte plain value, the top half of an f32: each
        // is widened to 32 bits and shifted up (exact).
        let h = unsafe { _mm_loadu_si128(p as *const __m128i) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    #[inline]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum(v: __m256) -> f32 {
    let x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot<K: Lanes>(k: &[K], q: &[f32]) -> f32 {
    let n = k.len().min(q.len());
    let (kp, qp) = (k.as_ptr(), q.as_ptr());
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i..i+16 < n are in bounds of both slices.
        unsafe {
            a0 = _mm256_fmadd_ps(K::load(kp.add(i)), f32::load(qp.add(i)), a0);
            a1 = _mm256_fmadd_ps(K::load(kp.add(i + 8)), f32::load(qp.add(i + 8)), a1);
        }
        i += 16;
    }
    if i + 8 <= n {
        // SAFETY: elements i..i+8 < n are in bounds of both slices.
        unsafe { a0 = _mm256_fmadd_ps(K::load(kp.add(i)), f32::load(qp.add(i)), a0) };
        i += 8;
    }
    let mut s = hsum(_mm256_add_ps(a0, a1));
    for (x, y) in k[i..n].iter().zip(&q[i..n]) {
        s = x.widen().mul_add(*y, s);
    }
    s
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn axpy<X: Lanes>(y: &mut [f32], a: f32, x: &[X]) {
    let n = y.len().min(x.len());
    let (yp, xp) = (y.as_mut_ptr(), x.as_ptr());
    let av = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i+8 < n of both slices; `y` is borrowed mutably, so the
        // store aliases nothing else.
        unsafe {
            let v = _mm256_fmadd_ps(av, X::load(xp.add(i)), f32::load(yp.add(i)));
            _mm256_storeu_ps(yp.add(i), v);
        }
        i += 8;
    }
    for (o, v) in y[i..n].iter_mut().zip(&x[i..n]) {
        *o = a.mul_add(v.widen(), *o);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_f16(k: &[f16], q: &[f32]) -> f32 {
    dot(k, q)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_f32(k: &[f32], q: &[f32]) -> f32 {
    dot(k, q)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_bf16(k: &[bf16], q: &[f32]) -> f32 {
    dot(k, q)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn axpy_f16(y: &mut [f32], a: f32, x: &[f16]) {
    axpy(y, a, x)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    axpy(y, a, x)
}

/// `out[h] = dot(k, qs[h*d..])` for `G` heads at once (`d = k.len()`); the key is
/// loaded and converted once per 8 lanes for all `G` heads.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
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
    let mut acc = [_mm256_setzero_ps(); G];
    let full = d - d % 8;
    let mut i = 0;
    while i < full {
        // SAFETY: elements i..i+8 <= d of k, and of each head h < G <= qs.len() / d,
        // whose elements end at or before (h+1)*d.
        unsafe {
            let kv = f16::load(k.as_ptr().add(i));
            for (h, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(kv, f32::load(qs.as_ptr().add(h * d + i)), *a);
            }
        }
        i += 8;
    }
    for (h, (o, a)) in out.iter_mut().zip(acc).enumerate() {
        let mut s = hsum(a);
        for (x, y) in k[full..].iter().zip(&qs[h * d + full..(h + 1) * d]) {
            s = x.to_f32().mul_add(*y, s);
        }
        *o = s;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
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
#[target_feature(enable = "avx2,fma,f16c")]
fn axpy_heads<const G: usize>(ys: &mut [f32], a: &[f32], x: &[f16]) {
    let d = x.len();
    if a.len() < G || ys.len() < G * d {
        // Only reachable by misuse: fall back to one head at a time.
        for (y, &ah) in ys.chunks_exact_mut(d.max(1)).zip(a) {
            axpy(y, ah, x);
        }
        return;
    }
    let av: [__m256; G] = std::array::from_fn(|h| _mm256_set1_ps(a[h]));
    let yp = ys.as_mut_ptr();
    let full = d - d % 8;
    let mut i = 0;
    while i < full {
        // SAFETY: elements i..i+8 <= d of x and of each head row h < G of ys
        // (G * d <= ys.len(), checked above).
        unsafe {
            let xv = f16::load(x.as_ptr().add(i));
            for (h, ah) in av.iter().enumerate() {
                let p = yp.add(h * d + i);
                _mm256_storeu_ps(p, _mm256_fmadd_ps(*ah, xv, f32::load(p)));
            }
        }
        i += 8;
    }
    for (h, &ah) in a[..G].iter().enumerate() {
        for (o, v) in ys[h * d + full..(h + 1) * d].iter_mut().zip(&x[full..]) {
            *o = ah.mul_add(v.to_f32(), *o);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn axpy_f16_multi(ys: &mut [f32], a: &[f32], x: &[f16]) {
    let d = x.len().max(1);
    let mut h = 0;
    while h < a.len() {
        let start = (h * d).min(ys.len());
        let (y, ah) = (&mut ys[start..], &a[h..]);
        h += with_group_size!(ah.len(), axpy_heads(y, ah, x));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn f32_to_f16_slice(src: &[f32], dst: &mut [f16]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i+8 < n of both slices.
        unsafe {
            let v = f32::load(src.as_ptr().add(i));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
        }
        i += 8;
    }
    for (o, v) in dst[i..n].iter_mut().zip(&src[i..n]) {
        *o = f16::from_f32(*v);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn f16_to_f32_slice(src: &[f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i+8 < n of both slices.
        unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(i), f16::load(src.as_ptr().add(i))) };
        i += 8;
    }
    for (o, v) in dst[i..n].iter_mut().zip(&src[i..n]) {
        *o = v.to_f32();
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn round_through_f16(x: &mut [f32]) {
    let mut chunks = x.chunks_exact_mut(8);
    for c in &mut chunks {
        // SAFETY: `c` is 8 readable and writable f32.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(c.as_ptr()));
            _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    for v in chunks.into_remainder() {
        *v = f16::from_f32(*v).to_f32();
    }
}
