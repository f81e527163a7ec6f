//! AVX2 (with FMA and F16C) tile of the dense product of `dense.rs`: `R` weight rows
//! against `T` activation rows at once, each weight chunk of 8 widened once for all `T`
//! tokens and each activation chunk loaded once for all `R` rows, `R * T` accumulators
//! in registers.
//!
//! Per output the arithmetic is [`crate::dense::dot_ref`]'s, bit for bit, whatever `R`
//! and `T` (and `attn_avx2.rs`'s `dot`'s): two 8-lane accumulators, the even chunks of 8
//! into one and the odd ones into the other, added and their lanes summed as [`hsum`]
//! does, then the `k % 8` tail by scalar FMA. So decode (`T = 1`) and prompt chunks give
//! each token the same outputs.
//! Must not know: threads, models.

use std::arch::x86_64::*;

use crate::attn_avx2::{hsum, Lanes};

/// `out[t][r] = dot(w row r, x row t)` for `R` rows of `w` (each `k` long, `w.len() >= R
/// * k`) and `T` rows of `x` (`x.len() >= T * k`): two accumulators per output (even and
/// odd chunks of 8), as `attn_avx2.rs`'s `dot` keeps them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn tile<W: Lanes, const R: usize, const T: usize>(
    w: &[W],
    x: &[f32],
    k: usize,
    out: &mut [[f32; R]; T],
) {
    assert!(
        w.len() >= R * k && x.len() >= T * k,
        "dense tile: short rows"
    );
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    let mut even = [[_mm256_setzero_ps(); R]; T];
    let mut odd = [[_mm256_setzero_ps(); R]; T];
    // One chunk of 8 at `i` into `acc`.
    // SAFETY (both uses): rows r < R and tokens t < T start at r * k and t * k, within
    // the asserted lengths, and i + 8 <= k.
    let chunk = |acc: &mut [[__m256; R]; T], i: usize| unsafe {
        let ws: [__m256; R] = std::array::from_fn(|r| W::load(wp.add(r * k + i)));
        for (t, a) in acc.iter_mut().enumerate() {
            let xv = _mm256_loadu_ps(xp.add(t * k + i));
            for (ar, wr) in a.iter_mut().zip(&ws) {
                *ar = _mm256_fmadd_ps(*wr, xv, *ar);
            }
        }
    };
    let mut i = 0;
    while i + 16 <= k {
        chunk(&mut even, i);
        chunk(&mut odd, i + 8);
        i += 16;
    }
    if i + 8 <= k {
        chunk(&mut even, i);
        i += 8;
    }
    for t in 0..T {
        for r in 0..R {
            let mut s = hsum(_mm256_add_ps(even[t][r], odd[t][r]));
            for j in i..k {
                s = w[r * k + j].widen().mul_add(x[t * k + j], s);
            }
            out[t][r] = s;
        }
    }
}
