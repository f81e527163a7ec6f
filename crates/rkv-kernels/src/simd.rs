//! Which SIMD paths the running CPU takes, asked at run time, so that one binary built
//! for the portable target (`-C target-cpu=x86-64`) runs everywhere and still takes the
//! AVX2 or AVX-512 kernels where the CPU has them. Every question is
//! `std::is_x86_feature_detected!` (a cached load; a constant `true` when the build
//! already enables the feature), so a native build pays nothing for asking.
//!
//! Owns: the feature sets each kernel family needs, and [`vnni_twins`], which compiles a
//! kernel once for AVX2 and once with AVX-512 VNNI. Must not know: the kernels.
//! AMX is never asked for (it traps on the machines rkv runs on).

/// AVX2 with FMA and F16C (x86-64-v3): what every `*_avx2.rs` kernel needs.
#[inline]
pub(crate) fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`avx2`] and AVX-512F: the AVX-512 GQA and quantisation kernels.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Asked on x86-64 only.
#[inline]
pub(crate) fn avx512f() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx2() && std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`avx512f`] with BW and VL: the AVX-512 attention kernels (`attn_avx512.rs`).
#[inline]
pub(crate) fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512f()
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`avx2`] with AVX-512 VNNI and VL: the `*_vnni` twins of the integer products
/// (`vpdpbusd` on 256-bit registers).
#[inline]
pub(crate) fn avx512_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx2()
            && std::is_x86_feature_detected!("avx512vnni")
            && std::is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`avx512`] with VNNI: the 512-bit `vpdpbusd` micro-kernel of `wide.rs`.
#[inline]
pub(crate) fn avx512_vnni_bw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512() && std::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether one-token products (decode) of the K-quant tiles take their 512-bit form where
/// [`avx512`] holds: yes on Intel, whose AVX-512 tiles with software prefetch stream the
/// weights fastest; no on AMD (Zen 4), whose 512-bit operations run as two 256-bit
/// halves and whose hardware prefetcher already runs ahead of the stream, so the AVX2
/// tile, without software prefetch, decodes the 1.5B shape about 25% faster there
/// (docs/performance.md, "On an AMD EPYC with AVX-512"). Tiles of several tokens keep
/// the 512-bit form on both. The results are the same either way (the tiles agree bit
/// for bit).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Asked on x86-64 only.
#[inline]
pub(crate) fn avx512_for_one_token() -> bool {
    avx512() && !amd()
}

/// An AMD CPU, told by SSE4a: an AMD extension that every AMD x86-64 CPU since 2007 has
/// and no Intel CPU does. Asked through std's cached feature detection; a CPUID vendor
/// query would be a VM exit per call on these virtual machines.
#[inline]
fn amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("sse4a")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Emits a kernel twice: `$name` with AVX2, FMA and F16C, and `$vnni` with AVX-512 VNNI
/// and VL besides, each with a constant `VNNI` (false, true) in scope of its body for the
/// `#[inline(always)]` helpers that take `<VNNI>` (`vpdpbusd` where true, AVX2's `maddubs`
/// and `madd` where false: the same exact integer sums). Those helpers carry no target
/// features of their own; inlined into a twin they compile with the twin's. The caller
/// picks a twin at run time ([`avx512_vnni`], [`avx2`]).
#[cfg(target_arch = "x86_64")]
macro_rules! vnni_twins {
    ($(#[$attr:meta])* $vis:vis fn $name:ident / $vnni:ident [$($gen:tt)*] $params:tt $body:block) => {
        $(#[$attr])*
        #[target_feature(enable = "avx2,fma,f16c")]
        $vis fn $name<$($gen)*> $params {
            const VNNI: bool = false;
            $body
        }
        $(#[$attr])*
        #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
        $vis fn $vnni<$($gen)*> $params {
            const VNNI: bool = true;
            $body
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use vnni_twins;
