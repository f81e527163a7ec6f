//! `exp` for f32 in a form the compiler vectorises, for the softmaxes: the importance's
//! takes one exponential per window query and candidate (8 x 1144 per KV head at budget
//! 1024), where the C library's `expf`, called one value at a time, was most of a SnapKV
//! event; the redundancy's, one per slot at every R-KV compression; the engine's
//! attention, one per query head and resident slot every step.
//!
//! Owns: [`exp`] (Cody-Waite range reduction to `[-ln 2 / 2, ln 2 / 2]`, Cephes' degree-5
//! polynomial, the power of two built from its bits in two halves so that no step
//! overflows before the true result does); [`exp_slice`], which applies it to a slice and
//! returns the sum in eight fixed lanes; and [`max_lanes`], the row max a softmax subtracts
//! first. Only IEEE additions, subtractions, multiplications and comparisons, none fused,
//! in one fixed order: the same bits from a scalar loop, SSE, AVX2 or AVX-512, whatever the
//! build's target. The slice loops are also compiled for AVX2 and taken at run time where
//! the CPU has it (`crate::simd`), so a portable build runs them 8 lanes wide; the
//! exponentials of a slice run 16 wide in AVX-512 intrinsics where the CPU has AVX-512F
//! (the compiler keeps generic loops to 256 bits there).
//!
//! Must not know: softmax, scores, policies.

/// `log2(e)`.
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` in two parts (Cody-Waite): `HI` has few significant bits, so `n * HI` is exact
/// for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Cephes `expf`'s polynomial for `(e^r - 1 - r) / r^2` on the reduced range.
const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_2e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];
/// Above this `e^x` overflows f32 (`ln(f32::MAX)`, rounded up).
const OVERFLOW: f32 = 88.722_84;
/// Below this `e^x` rounds to 0 (`ln(2^-150)`).
const UNDERFLOW: f32 = -103.972_08;
/// `1.5 * 2^23`: adding and subtracting it rounds an f32 of magnitude below `2^22` to the
/// nearest integer (ties to even), in plain additions that vectorise on every x86-64.
const ROUND: f32 = 12_582_912.0;

/// `e^x` in f32: relative error below 2.5e-7 (about 2 ulp) over the normal range; NaN in,
/// NaN out; `-inf` gives 0 and `+inf` gives `+inf`; results below `f32::MIN_POSITIVE`
/// are subnormal as in the C library, to about 1 ulp of the smallest subnormal.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // Clamped so that every intermediate stays finite; the two ends (and NaN, which the
    // clamp keeps but the bit arithmetic below does not) are put back at the end.
    let c = x.clamp(UNDERFLOW - 1.0, OVERFLOW + 1.0);
    // round(c / ln 2) in [-151, 130]: `t`'s low mantissa bits hold it, offset by ROUND's.
    let t = c * LOG2E + ROUND;
    let n = t - ROUND;
    let r = (c - n * LN2_HI) - n * LN2_LO;
    let mut p = P[0];
    for &k in &P[1..] {
        p = p * r + k;
    }
    let e = (p * (r * r) + r) + 1.0;
    // 2^n as 2^h * 2^(n - h): each half is a normal f32 for every n above. Integer
    // arithmetic on the bits only (no float-to-int conversion, which would not vectorise
    // without its saturation checks).
    let n = t.to_bits() as i32 - ROUND.to_bits() as i32;
    let h = n >> 1;
    let two_h = f32::from_bits(((h + 127) as u32) << 23);
    let two_rest = f32::from_bits(((n - h + 127) as u32) << 23);
    let v = e * two_h * two_rest;
    let v = if x > OVERFLOW { f32::INFINITY } else { v };
    let v = if x < UNDERFLOW { 0.0 } else { v };
    if x.is_nan() {
        x
    } else {
        v
    }
}

/// `x[i] = e^(x[i] - shift)` for every element; returns their sum, added in eight lanes
/// (element `i` into lane `i % 8`) and the lanes then in order, so that the sum too is the
/// same on every target.
#[inline]
pub fn exp_slice(x: &mut [f32], shift: f32) -> f32 {
    let mut lanes = [0.0f32; 8];
    exp_into_lanes(x, shift, &mut lanes);
    lanes.iter().sum()
}

/// [`exp_slice`]'s step for a part of a longer slice that starts at a multiple of 8:
/// element `i` of `x` adds into `lanes[i % 8]`. Compiled for 256-bit vectors too, and
/// that path taken where the CPU has them (the same bits either way: see the header).
#[inline]
pub fn exp_into_lanes(x: &mut [f32], shift: f32, lanes: &mut [f32; 8]) {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::avx512() {
        // SAFETY: the CPU has the features `avx512` names (checked above).
        return unsafe { v4::exp_into_lanes(x, shift, lanes) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::simd::v3() {
        // SAFETY: the CPU has the features `v3` names (checked above).
        return unsafe { v3::exp_into_lanes(x, shift, lanes) };
    }
    exp_into_lanes_body(x, shift, lanes)
}

#[inline(always)]
fn exp_into_lanes_body(x: &mut [f32], shift: f32, lanes: &mut [f32; 8]) {
    let mut chunks = x.chunks_exact_mut(8);
    for chunk in &mut chunks {
        for (v, lane) in chunk.iter_mut().zip(lanes.iter_mut()) {
            *v = exp(*v - shift);
            *lane += *v;
        }
    }
    for (v, lane) in chunks.into_remainder().iter_mut().zip(lanes.iter_mut()) {
        *v = exp(*v - shift);
        *lane += *v;
    }
}

/// The largest entry, ignoring NaN like `f32::max` (`-inf` for none), in eight lanes
/// (a fold of `f32::max` over the slice does not vectorise).
#[inline]
pub fn max_lanes(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::v3() {
        // SAFETY: the CPU has the features `v3` names (checked above).
        return unsafe { v3::max_lanes(x) };
    }
    max_lanes_body(x)
}

#[inline(always)]
fn max_lanes_body(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = x.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = lane.max(v);
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(chunks.remainder()) {
        *lane = lane.max(v);
    }
    lanes.into_iter().fold(f32::NEG_INFINITY, f32::max)
}

/// The loops above compiled with x86-64-v3's features, for a portable build on a CPU that
/// has them (a native build inlines them into the callers anyway). The arithmetic is the
/// same IEEE operations in the same order (Rust never fuses them), so the same bits.
#[cfg(target_arch = "x86_64")]
mod v3 {
    #[target_feature(enable = "avx2,fma,f16c,popcnt")]
    pub(super) fn exp_into_lanes(x: &mut [f32], shift: f32, lanes: &mut [f32; 8]) {
        super::exp_into_lanes_body(x, shift, lanes)
    }

    #[target_feature(enable = "avx2,fma,f16c,popcnt")]
    pub(super) fn max_lanes(x: &[f32]) -> f32 {
        super::max_lanes_body(x)
    }
}

/// [`exp_into_lanes`] sixteen values to a 512-bit register, for CPUs with AVX-512F
/// (the compiler keeps the loops above to 256 bits on them): [`exp`]'s steps as the same
/// IEEE operations in the same order (intrinsics are never fused), so the same bits.
/// Each register's two halves add into the eight lanes in order, as two chunks of the
/// loop above would.
#[cfg(target_arch = "x86_64")]
mod v4 {
    use std::arch::x86_64::*;

    use super::{LN2_HI, LN2_LO, LOG2E, OVERFLOW, P, ROUND, UNDERFLOW};

    /// [`super::exp`] of sixteen values.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
    fn exp16(x: __m512) -> __m512 {
        let set = _mm512_set1_ps;
        // Not NaN (fixed at the end): `f32::clamp` is this max then min.
        let c = _mm512_min_ps(_mm512_max_ps(x, set(UNDERFLOW - 1.0)), set(OVERFLOW + 1.0));
        let t = _mm512_add_ps(_mm512_mul_ps(c, set(LOG2E)), set(ROUND));
        let n = _mm512_sub_ps(t, set(ROUND));
        let r = _mm512_sub_ps(
            _mm512_sub_ps(c, _mm512_mul_ps(n, set(LN2_HI))),
            _mm512_mul_ps(n, set(LN2_LO)),
        );
        let mut p = set(P[0]);
        for &k in &P[1..] {
            p = _mm512_add_ps(_mm512_mul_ps(p, r), set(k));
        }
        let e = _mm512_add_ps(
            _mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r),
            set(1.0),
        );
        let n = _mm512_sub_epi32(
            _mm512_castps_si512(t),
            _mm512_set1_epi32(ROUND.to_bits() as i32),
        );
        let h = _mm512_srai_epi32::<1>(n);
        let bias = _mm512_set1_epi32(127);
        let two_h = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(h, bias)));
        let rest = _mm512_add_epi32(_mm512_sub_epi32(n, h), bias);
        let two_rest = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(rest));
        let v = _mm512_mul_ps(_mm512_mul_ps(e, two_h), two_rest);
        let over = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, set(OVERFLOW));
        let v = _mm512_mask_mov_ps(v, over, set(f32::INFINITY));
        let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, set(UNDERFLOW));
        let v = _mm512_mask_mov_ps(v, under, _mm512_setzero_ps());
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        _mm512_mask_mov_ps(v, nan, x)
    }

    #[target_feature(enable = "avx512f,avx2,fma,f16c,popcnt")]
    pub(super) fn exp_into_lanes(x: &mut [f32], shift: f32, lanes: &mut [f32; 8]) {
        let mut chunks = x.chunks_exact_mut(16);
        let shift16 = _mm512_set1_ps(shift);
        // SAFETY: `lanes` is 8 floats; unaligned load.
        let mut acc = unsafe { _mm256_loadu_ps(lanes.as_ptr()) };
        for chunk in &mut chunks {
            // SAFETY: `chunk` is 16 floats; unaligned load and store.
            let v = unsafe {
                let v = exp16(_mm512_sub_ps(_mm512_loadu_ps(chunk.as_ptr()), shift16));
                _mm512_storeu_ps(chunk.as_mut_ptr(), v);
                v
            };
            acc = _mm256_add_ps(acc, _mm512_castps512_ps256(v));
            let high = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v));
            acc = _mm256_add_ps(acc, _mm256_castpd_ps(high));
        }
        // SAFETY: as the load above.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
        // The rest starts at a multiple of 16, so its element `i` still adds into lane
        // `i % 8`.
        super::exp_into_lanes_body(chunks.into_remainder(), shift, lanes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Relative error against f64's `exp`, over a dense sweep of the normal range.
    #[test]
    fn close_to_f64_exp_over_the_normal_range() {
        let mut worst = 0.0f64;
        let steps = 2_000_000;
        let (lo, hi) = (-87.3f32, 88.7f32);
        for k in 0..=steps {
            let x = lo + (hi - lo) * (k as f32 / steps as f32);
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 2.5e-7, "worst relative error {worst:e}");
    }

    /// Every f32 in `[-1, 0]` (the softmax's common case): within 2 ulp of the correctly
    /// rounded result.
    #[test]
    fn within_two_ulp_on_minus_one_to_zero() {
        let mut bits = 0x8000_0000u32; // -0.0
        while f32::from_bits(bits) >= -1.0 {
            let x = f32::from_bits(bits);
            let want = f64::from(x).exp() as f32;
            let got = exp(x);
            let ulp = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulp <= 2, "exp({x:e}) = {got:e}, want {want:e} ({ulp} ulp)");
            bits += 97; // about 10 million points
        }
    }

    #[test]
    fn ends_and_special_values() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(-104.0), 0.0);
        assert_eq!(exp(88.73), f32::INFINITY);
        assert!(exp(88.72).is_finite() && exp(88.72) > 3.3e38);
        // Subnormal results: e^-100 = 3.72e-44, a few units of the smallest subnormal.
        let sub = exp(-100.0);
        assert!(sub > 0.0 && sub < f32::MIN_POSITIVE);
        assert!(
            (f64::from(sub) - (-100f64).exp()).abs() <= 1.5e-45,
            "{sub:e}"
        );
        // The smallest normal result.
        let x = f32::MIN_POSITIVE.ln();
        let rel = (f64::from(exp(x)) - f64::from(x).exp()).abs() / f64::from(x).exp();
        assert!(rel < 2.5e-7, "{rel:e}");
    }

    #[test]
    fn max_lanes_is_the_max_ignoring_nan() {
        assert_eq!(max_lanes(&[]), f32::NEG_INFINITY);
        let x: Vec<f32> = (0..21).map(|i| ((i * 7) % 11) as f32 - 3.0).collect();
        assert_eq!(max_lanes(&x), 7.0);
        let mut y = x.clone();
        y[4] = f32::NAN;
        y[17] = 9.5;
        assert_eq!(max_lanes(&y), 9.5);
        assert_eq!(max_lanes(&[f32::NAN, f32::NEG_INFINITY]), f32::NEG_INFINITY);
    }

    #[test]
    fn slice_matches_scalar_and_sums_in_lanes() {
        let mut x: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 9.0).collect();
        let orig = x.clone();
        let sum = exp_slice(&mut x, 2.5);
        let mut lanes = [0.0f32; 8];
        for (i, (&o, &v)) in orig.iter().zip(&x).enumerate() {
            assert_eq!(v.to_bits(), exp(o - 2.5).to_bits());
            lanes[i % 8] += v;
        }
        assert_eq!(sum.to_bits(), lanes.iter().sum::<f32>().to_bits());
        let mut empty: [f32; 0] = [];
        assert_eq!(exp_slice(&mut empty, 0.0), 0.0);
    }

    /// Every length up to 70 (whole 16-value registers, a chunk of 8, a remainder) and
    /// the special values, against the scalar [`exp`] bit for bit: the 512-bit, 256-bit
    /// and scalar paths must all be it.
    #[test]
    fn every_path_is_the_scalar_exp() {
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            88.72,
            88.73,
            -100.0,
            -104.0,
            -0.0,
            1e-30,
        ];
        for len in 0..70 {
            let orig: Vec<f32> = (0..len)
                .map(|i| match i % 11 {
                    3 | 9 => specials[(i / 11) % specials.len()],
                    _ => (i as f32 * 0.61).cos() * 20.0,
                })
                .collect();
            let mut x = orig.clone();
            let mut lanes = [0.5f32; 8];
            exp_into_lanes(&mut x, -1.5, &mut lanes);
            let mut want = [0.5f32; 8];
            for (i, (&o, &v)) in orig.iter().zip(&x).enumerate() {
                let e = exp(o + 1.5);
                assert!(
                    v.to_bits() == e.to_bits() || (v.is_nan() && e.is_nan()),
                    "{o}"
                );
                want[i % 8] += e;
            }
            for (g, w) in lanes.iter().zip(&want) {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "len {len}"
                );
            }
        }
    }
}
