//! Quantised dot products: Q4_0·Q8_0, Q4_1·Q8_1 and Q8_0·Q8_0, as scalar
//! references (kept public: they are the test oracles) and SIMD versions.
//!
//! The scalar references reproduce, operation for operation, the float
//! arithmetic of ggml's x86 AVX2 kernels `ggml_vec_dot_q4_0_q8_0`,
//! `ggml_vec_dot_q4_1_q8_1` and `ggml_vec_dot_q8_0_q8_0`
//! (`ggml/src/ggml-cpu/arch/x86/quants.c`; formulas as in
//! `ggml/src/ggml-quants.c`):
//! * per block, the integer products are summed in 8 lanes of 4 consecutive
//!   values (lane `l` covers values `4l..4l+4`), exactly;
//! * lane `l` accumulates `acc[l] = fma(dx * dy, lane_sum, acc[l])` block by
//!   block, `dx * dy` rounded to f32 first;
//! * the 8 lanes are reduced as `hsum_float_8` does:
//!   `((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))`;
//! * Q4_1 adds `summs`, accumulated block by block as `fma(m, s, summs)`
//!   (the C compiler contracts `summs += m * s` under `-march=native`).
//!
//! The SIMD versions (`dot_avx2.rs`) are bit-identical to these references for every
//! activation block; the one exception is a Q8_0 weight quant of -128 (which ggml's
//! quantiser never writes) against a negative activation quant.
//! Which one runs is asked of the CPU at run time (`simd.rs`); a CPU without
//! AVX2/FMA/F16C runs the scalar code.

use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, QK};

/// ggml's `hsum_float_8` reduction order.
#[inline]
pub(crate) fn hsum8(a: &[f32; 8]) -> f32 {
    let r = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (r[0] + r[2]) + (r[1] + r[3])
}

/// Value `j` (0..32) of a 4-bit block, in `0..16`.
#[inline]
fn nibble(qs: &[u8; QK / 2], j: usize) -> i32 {
    if j < QK / 2 {
        (qs[j] & 0x0F) as i32
    } else {
        (qs[j - QK / 2] >> 4) as i32
    }
}

/// Accumulates one block into the 8 lanes: `acc[l] = fma(d, sum_l, acc[l])`, lane `l`
/// summing `prod` over values `4 l .. 4 l + 4`.
#[inline]
pub(crate) fn lanes(acc: &mut [f32; 8], d: f32, prod: impl Fn(usize) -> i32) {
    fma_lanes(
        acc,
        d,
        std::array::from_fn(|l| (4 * l..4 * l + 4).map(&prod).sum()),
    );
}

/// One block's exact lane sums into the 8 float lanes: `acc[l] = fma(d, sums[l], acc[l])`
/// (ggml's `_mm256_fmadd_ps(d, cvtepi32_ps(sums), acc)`).
#[inline]
pub(crate) fn fma_lanes(acc: &mut [f32; 8], d: f32, sums: [i32; 8]) {
    for (a, s) in acc.iter_mut().zip(sums) {
        *a = d.mul_add(s as f32, *a);
    }
}

/// Scalar reference of [`vec_dot_q4_0_q8_0`].
///
/// # Panics
/// If `x.len() != y.len()`.
pub fn vec_dot_q4_0_q8_0_ref(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_q4_0_q8_0: block counts differ");
    let mut acc = [0.0f32; 8];
    for (xb, yb) in x.iter().zip(y) {
        let d = xb.d.to_f32() * yb.d.to_f32();
        lanes(&mut acc, d, |j| (nibble(&xb.qs, j) - 8) * yb.qs[j] as i32);
    }
    hsum8(&acc)
}

/// Scalar reference of [`vec_dot_q4_1_q8_1`].
///
/// # Panics
/// If `x.len() != y.len()`.
pub fn vec_dot_q4_1_q8_1_ref(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_q4_1_q8_1: block counts differ");
    let mut acc = [0.0f32; 8];
    let mut summs = 0.0f32;
    for (xb, yb) in x.iter().zip(y) {
        summs = xb.m.to_f32().mul_add(yb.s.to_f32(), summs);
        let d = xb.d.to_f32() * yb.d.to_f32();
        lanes(&mut acc, d, |j| nibble(&xb.qs, j) * yb.qs[j] as i32);
    }
    hsum8(&acc) + summs
}

/// Scalar reference of [`vec_dot_q8_0_q8_0`].
///
/// # Panics
/// If `x.len() != y.len()`.
pub fn vec_dot_q8_0_q8_0_ref(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_q8_0_q8_0: block counts differ");
    let mut acc = [0.0f32; 8];
    for (xb, yb) in x.iter().zip(y) {
        let d = xb.d.to_f32() * yb.d.to_f32();
        lanes(&mut acc, d, |j| xb.qs[j] as i32 * yb.qs[j] as i32);
    }
    hsum8(&acc)
}

/// Dot product of a Q4_0 row with a Q8_0 activation row (ggml numerics).
///
/// # Panics
/// If `x.len() != y.len()` (a programmer error: both are `cols / 32`).
#[inline]
pub fn vec_dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_q4_0_q8_0: block counts differ");
    let mut out = [0.0f32; 1];
    q4_0_rows::<1>(x, y, &mut out);
    out[0]
}

/// Dot product of a Q4_1 row with a Q8_1 activation row (ggml numerics).
///
/// # Panics
/// If `x.len() != y.len()` (a programmer error: both are `cols / 32`).
#[inline]
pub fn vec_dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_q4_1_q8_1: block counts differ");
    let mut out = [0.0f32; 1];
    q4_1_rows::<1>(x, y, &mut out);
    out[0]
}

/// Dot product of a Q8_0 row with a Q8_0 activation row (ggml numerics).
///
/// # Panics
/// If `x.len() != y.len()` (a programmer error: both are `cols / 32`).
#[inline]
pub fn vec_dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_q8_0_q8_0: block counts differ");
    let mut out = [0.0f32; 1];
    q8_0_rows::<1>(x, y, &mut out);
    out[0]
}

/// Calls the AVX2 function `$simd` (its twin `$vnni` where the CPU also has AVX-512 VNNI)
/// when the CPU has AVX2, FMA and F16C (asked at run time), else `fallback::$fb`.
macro_rules! dispatch {
    ($simd:ident / $vnni:ident, $fb:ident($($arg:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx512_vnni() {
            // SAFETY: the CPU has the target features this function needs (checked
            // above).
            return unsafe { crate::dot_avx2::$vnni($($arg),*) };
        }
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx2() {
            // SAFETY: the CPU has the target features this function needs (checked
            // above).
            return unsafe { crate::dot_avx2::$simd($($arg),*) };
        }
        fallback::$fb($($arg),*)
    }};
}

// `out[r] = dot(w[r*nb..(r+1)*nb], y)` with `nb = y.len()`, SIMD when the CPU has
// AVX2/FMA/F16C, else scalar. Each panics if `w.len() != R * y.len()`.

#[inline]
pub(crate) fn q4_0_rows<const R: usize>(w: &[BlockQ4_0], y: &[BlockQ8_0], out: &mut [f32; R]) {
    dispatch!(signed_rows / signed_rows_vnni, q4_0_rows(w, y, out))
}

#[inline]
pub(crate) fn q4_1_rows<const R: usize>(w: &[BlockQ4_1], y: &[BlockQ8_1], out: &mut [f32; R]) {
    dispatch!(q4_1_rows / q4_1_rows_vnni, q4_1_rows(w, y, out))
}

#[inline]
pub(crate) fn q8_0_rows<const R: usize>(w: &[BlockQ8_0], y: &[BlockQ8_0], out: &mut [f32; R]) {
    dispatch!(signed_rows / signed_rows_vnni, q8_0_rows(w, y, out))
}

/// Multi-row kernels for CPUs without the SIMD path: `out[r]` is the dot
/// of rows `w[r*nb..(r+1)*nb]` with `y` (`nb = y.len()`).
pub(crate) mod fallback {
    use super::*;

    pub(crate) fn q4_0_rows<const R: usize>(w: &[BlockQ4_0], y: &[BlockQ8_0], out: &mut [f32; R]) {
        assert_eq!(w.len(), R * y.len());
        for (o, row) in out.iter_mut().zip(w.chunks_exact(y.len().max(1))) {
            *o = vec_dot_q4_0_q8_0_ref(row, y);
        }
    }

    pub(crate) fn q4_1_rows<const R: usize>(w: &[BlockQ4_1], y: &[BlockQ8_1], out: &mut [f32; R]) {
        assert_eq!(w.len(), R * y.len());
        for (o, row) in out.iter_mut().zip(w.chunks_exact(y.len().max(1))) {
            *o = vec_dot_q4_1_q8_1_ref(row, y);
        }
    }

    pub(crate) fn q8_0_rows<const R: usize>(w: &[BlockQ8_0], y: &[BlockQ8_0], out: &mut [f32; R]) {
        assert_eq!(w.len(), R * y.len());
        for (o, row) in out.iter_mut().zip(w.chunks_exact(y.len().max(1))) {
            *o = vec_dot_q8_0_q8_0_ref(row, y);
        }
    }
}
