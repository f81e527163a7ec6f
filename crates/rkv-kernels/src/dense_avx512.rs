//! AVX-512 (F, BW, VL) tile of the dense product of `dense.rs`: `dense_avx2.rs`'s tile
//! with each output's two 8-lane accumulators side by side in one 512-bit register, the
//! even chunk of 8 in the low half and the odd one in the high half, so one load and one
//! FMA take two chunks. The halves are split once at the end, a last even chunk and the
//! `k % 8` tail go as in the AVX2 tile, so each output is [`crate::dense::dot_ref`]'s
//! bit for bit (and the AVX2 tile's): a token's outputs are the same on both paths.
//! With one token (decode) the tile asks for its weights [`PREFETCH_BYTES`] ahead.
//! Must not know: threads, models.

use std::arch::x86_64::*;

use half::{bf16, f16};

use crate::attn_avx2::{hsum, Lanes};

/// Weight elements loaded sixteen at a time as f32.
pub(crate) trait Lanes16: Lanes {
    /// Sixteen elements at `p` as f32.
    ///
    /// # Safety
    /// `p` must point to 16 readable elements.
    unsafe fn load16(p: *const Self) -> __m512;
}

impl Lanes16 for f32 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn load16(p: *const f32) -> __m512 {
        // SAFETY: the caller guarantees 16 readable elements.
        unsafe { _mm512_loadu_ps(p) }
    }
}

impl Lanes16 for f16 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn load16(p: *const f16) -> __m512 {
        // SAFETY: as above; f16 is a 2-byte plain value.
        _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p as *const __m256i) })
    }
}

impl Lanes16 for bf16 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn load16(p: *const bf16) -> __m512 {
        // SAFETY: as above; each bf16 widened to 32 bits and shifted up (exact).
        let h = unsafe { _mm256_loadu_si256(p as *const __m256i) };
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }
}

/// How far ahead of the chunk being read a one-token tile asks for its weights, in
/// bytes: decode streams each weight once from memory, and the hardware prefetcher alone
/// left the product waiting on its loads (the default model in f16 decoded at about
/// 45 tok/s without, 50-55 with, on a 2-core Xeon).
const PREFETCH_BYTES: usize = 1024;

/// `out[t][r] = dot(w row r, x row t)` for `R` rows of `w` (each `k` long, `w.len() >= R
/// * k`) and `T` rows of `x` (`x.len() >= T * k`), in [`crate::dense::dot_ref`]'s order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(crate) fn tile<W: Lanes16, const R: usize, const T: usize>(
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
    // [even chunk's 8 lanes | odd chunk's 8 lanes] per output.
    let mut acc = [[_mm512_setzero_ps(); R]; T];
    let mut i = 0;
    while i + 16 <= k {
        // SAFETY: rows r < R and tokens t < T start at r * k and t * k, within the
        // asserted lengths, and i + 16 <= k.
        unsafe {
            if T == 1 {
                // A prefetch never faults, whatever the address.
                let ahead = PREFETCH_BYTES / std::mem::size_of::<W>();
                for r in 0..R {
                    _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(r * k + i + ahead) as *const i8);
                }
            }
            let ws: [__m512; R] = std::array::from_fn(|r| W::load16(wp.add(r * k + i)));
            for (t, a) in acc.iter_mut().enumerate() {
                let xv = _mm512_loadu_ps(xp.add(t * k + i));
                for (ar, wr) in a.iter_mut().zip(&ws) {
                    *ar = _mm512_fmadd_ps(*wr, xv, *ar);
                }
            }
        }
        i += 16;
    }
    let last_even = i + 8 <= k;
    for t in 0..T {
        for r in 0..R {
            let both = acc[t][r];
            let mut even = _mm512_castps512_ps256(both);
            let odd = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(both)));
            if last_even {
                // SAFETY: as above, with i + 8 <= k.
                unsafe {
                    let wv = W::load(wp.add(r * k + i));
                    even = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xp.add(t * k + i)), even);
                }
            }
            let mut s = hsum(_mm256_add_ps(even, odd));
            let tail = if last_even { i + 8 } else { i };
            for j in tail..k {
                s = w[r * k + j].widen().mul_add(x[t * k + j], s);
            }
            out[t][r] = s;
        }
    }
}
