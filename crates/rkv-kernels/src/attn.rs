//! Vector helpers for attention over an f16 (or f32) KV cache: query·key dots,
//! `y += a * v` accumulation, the GQA multi-query dot, and f16 <-> f32 slice
//! conversion.
//!
//! All conversions are exact (f16 -> f32) or round to nearest even (f32 -> f16),
//! as ggml's `GGML_FP32_TO_FP16` with F16C (`ggml/src/ggml-impl.h`). Dot
//! products sum in a different order from the scalar references, so SIMD and
//! scalar results agree to f32 rounding, not bit for bit.
//!
//! The AVX-512 code (`attn_avx512.rs`) or, without it, the AVX2 code
//! (`attn_avx2.rs`) is chosen at run time from the CPU's features; other CPUs run the
//! scalar references.

use half::f16;

/// Calls the AVX-512 version of `$f` when the CPU has AVX-512 (F, BW, VL), else the AVX2
/// one when it has AVX2, FMA and F16C, else the scalar one (asked at run time).
macro_rules! dispatch {
    ($f:ident($($arg:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if crate::simd::avx512() {
                // SAFETY: the CPU has the features the AVX-512 functions need (checked
                // above).
                return unsafe { crate::attn_avx512::$f($($arg),*) };
            }
            if crate::simd::avx2() {
                // SAFETY: as above, for AVX2, FMA and F16C.
                return unsafe { crate::attn_avx2::$f($($arg),*) };
            }
        }
        scalar::$f($($arg),*)
    }};
}

/// `$f::<G>($args)` with `G` the number of heads left, `$left`, up to 4 (the SIMD modules'
/// multi-head kernels take the group size as a constant and handle the first `G` heads of
/// longer slices); evaluates to `G`.
#[cfg(target_arch = "x86_64")]
macro_rules! with_group_size {
    ($left:expr, $f:ident($($arg:expr),*)) => {
        match $left {
            1 => {
                $f::<1>($($arg),*);
                1
            }
            2 => {
                $f::<2>($($arg),*);
                2
            }
            3 => {
                $f::<3>($($arg),*);
                3
            }
            _ => {
                $f::<4>($($arg),*);
                4
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use with_group_size;

/// Scalar references (test oracles and the implementation without AVX2).
pub mod scalar {
    use half::f16;

    /// `sum_i k[i] * q[i]`. Lengths are checked by the public wrappers.
    pub fn dot_f16(k: &[f16], q: &[f32]) -> f32 {
        k.iter().zip(q).map(|(a, b)| a.to_f32() * b).sum()
    }
    /// `sum_i k[i] * q[i]`.
    pub fn dot_f32(k: &[f32], q: &[f32]) -> f32 {
        k.iter().zip(q).map(|(a, b)| a * b).sum()
    }
    /// `sum_i k[i] * q[i]`.
    pub fn dot_bf16(k: &[half::bf16], q: &[f32]) -> f32 {
        k.iter().zip(q).map(|(a, b)| a.to_f32() * b).sum()
    }
    /// `y[i] += a * x[i]`.
    pub fn axpy_f16(y: &mut [f32], a: f32, x: &[f16]) {
        for (o, v) in y.iter_mut().zip(x) {
            *o = a.mul_add(v.to_f32(), *o);
        }
    }
    /// `y[i] += a * x[i]`.
    pub fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
        for (o, v) in y.iter_mut().zip(x) {
            *o = a.mul_add(*v, *o);
        }
    }
    /// `out[h] = dot(k, qs[h*d..(h+1)*d])`, `d = k.len()` (0 for every head when `d = 0`).
    pub fn dot_f16_multi(k: &[f16], qs: &[f32], out: &mut [f32]) {
        if k.is_empty() {
            out.fill(0.0);
            return;
        }
        for (o, q) in out.iter_mut().zip(qs.chunks_exact(k.len())) {
            *o = dot_f16(k, q);
        }
    }
    /// `ys[h*d..(h+1)*d] += a[h] * x`, `d = x.len()`.
    pub fn axpy_f16_multi(ys: &mut [f32], a: &[f32], x: &[f16]) {
        for (y, &ah) in ys.chunks_exact_mut(x.len().max(1)).zip(a) {
            axpy_f16(y, ah, x);
        }
    }
    /// `dst[i] = f16(src[i])`, round to nearest even.
    pub fn f32_to_f16_slice(src: &[f32], dst: &mut [f16]) {
        for (o, v) in dst.iter_mut().zip(src) {
            *o = f16::from_f32(*v);
        }
    }
    /// `x[i] = f32(f16(x[i]))`: each value rounded to the nearest f16 (ties to even).
    pub fn round_through_f16(x: &mut [f32]) {
        for v in x {
            *v = f16::from_f32(*v).to_f32();
        }
    }
    /// `dst[i] = f32(src[i])`, exact.
    pub fn f16_to_f32_slice(src: &[f16], dst: &mut [f32]) {
        for (o, v) in dst.iter_mut().zip(src) {
            *o = v.to_f32();
        }
    }
}

/// Dot product of an f16 key row with an f32 query.
///
/// # Panics
/// If `k.len() != q.len()`.
#[inline]
pub fn dot_f16(k: &[f16], q: &[f32]) -> f32 {
    assert_eq!(k.len(), q.len(), "dot_f16: lengths differ");
    dispatch!(dot_f16(k, q))
}

/// Dot product of two f32 vectors.
///
/// # Panics
/// If `k.len() != q.len()`.
#[inline]
pub fn dot_f32(k: &[f32], q: &[f32]) -> f32 {
    assert_eq!(k.len(), q.len(), "dot_f32: lengths differ");
    dispatch!(dot_f32(k, q))
}

/// Dot product of a bf16 row (a dense weight row held as stored) with an f32 vector.
///
/// # Panics
/// If `k.len() != q.len()`.
#[inline]
pub fn dot_bf16(k: &[half::bf16], q: &[f32]) -> f32 {
    assert_eq!(k.len(), q.len(), "dot_bf16: lengths differ");
    dispatch!(dot_bf16(k, q))
}

/// `y += a * x` for an f16 value row `x`.
///
/// # Panics
/// If `y.len() != x.len()`.
#[inline]
pub fn axpy_f16(y: &mut [f32], a: f32, x: &[f16]) {
    assert_eq!(y.len(), x.len(), "axpy_f16: lengths differ");
    dispatch!(axpy_f16(y, a, x))
}

/// `y += a * x` for an f32 value row `x`.
///
/// # Panics
/// If `y.len() != x.len()`.
#[inline]
pub fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    assert_eq!(y.len(), x.len(), "axpy_f32: lengths differ");
    dispatch!(axpy_f32(y, a, x))
}

/// GQA dot: one key row `k` (length `d`) against the `g = out.len()` query
/// heads of its group, `qs` laid out `[g, d]`; `out[h] = dot(k, qs[h])`.
/// The key row is read (and converted) once for all `g` heads.
///
/// # Panics
/// If `qs.len() != out.len() * k.len()`.
#[inline]
pub fn dot_f16_multi(k: &[f16], qs: &[f32], out: &mut [f32]) {
    assert!(
        out.len().checked_mul(k.len()) == Some(qs.len()),
        "dot_f16_multi: qs is not [g, d]"
    );
    dispatch!(dot_f16_multi(k, qs, out))
}

/// GQA accumulation: one value row `x` (length `d`) added into the
/// `g = a.len()` head outputs `ys` (`[g, d]`): `ys[h] += a[h] * x`. The value
/// row is read (and converted) once for all `g` heads.
///
/// # Panics
/// If `ys.len() != a.len() * x.len()`.
#[inline]
pub fn axpy_f16_multi(ys: &mut [f32], a: &[f32], x: &[f16]) {
    assert!(
        a.len().checked_mul(x.len()) == Some(ys.len()),
        "axpy_f16_multi: ys is not [g, d]"
    );
    dispatch!(axpy_f16_multi(ys, a, x))
}

/// Converts f32 to f16 (round to nearest even).
///
/// # Panics
/// If `src.len() != dst.len()`.
#[inline]
pub fn f32_to_f16_slice(src: &[f32], dst: &mut [f16]) {
    assert_eq!(src.len(), dst.len(), "f32_to_f16_slice: lengths differ");
    dispatch!(f32_to_f16_slice(src, dst))
}

/// Converts f16 to f32 (exact).
///
/// # Panics
/// If `src.len() != dst.len()`.
#[inline]
pub fn f16_to_f32_slice(src: &[f16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "f16_to_f32_slice: lengths differ");
    dispatch!(f16_to_f32_slice(src, dst))
}

/// Rounds every value to the nearest f16 (ties to even) and back, in place: the operands
/// of ggml's f16 products. (F16C's conversion, 8 at a time, on CPUs with AVX2, FMA and
/// F16C; the same bits as the scalar one.)
#[inline]
pub fn round_through_f16(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
        return unsafe { crate::attn_avx2::round_through_f16(x) };
    }
    scalar::round_through_f16(x)
}
