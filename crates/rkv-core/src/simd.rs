//! Which of rkv-core's SIMD paths the running CPU takes, decided at run time: one binary
//! built for the portable x86-64 target runs the AVX2 and AVX-512 code on CPUs that have
//! them, and plain Rust on those that do not.
//!
//! Owns: the checks ([`v3`], [`avx512`], [`fma`]) and [`V3`], a token that proves [`v3`]
//! held, for generic bodies compiled once per path (`crate::policy::dot::Dots`). A check
//! is `std::is_x86_feature_detected!`: a cached load after the first call, and a constant
//! `true` where the build's target already has the feature (a `-C target-cpu=native`
//! build on such a CPU pays nothing). Each SIMD path's entry points carry
//! `#[target_feature(enable = ...)]` with exactly the features of the check that guards
//! them, so that the `#[inline(always)]` helpers and intrinsics they call are compiled
//! into them with those features:
//! - behind [`v3`]: `"avx2,fma,f16c,popcnt"`;
//! - behind [`avx512`]: `"avx512f,avx2,fma,f16c,popcnt"` (every AVX-512 intrinsic used
//!   needs AVX-512F only).
//!
//! Must not know: what the paths compute. No state of its own and no environment
//! variables: the CPU alone decides.

/// Whether the CPU has AVX2, FMA and F16C (x86-64-v3's vector features, the 256-bit
/// paths), and POPCNT (the paths count the bits of lane masks; every AVX2 CPU has it).
/// `false` off x86-64.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Asked on x86-64 only.
#[inline]
pub(crate) fn v3() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
            && std::is_x86_feature_detected!("popcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU has [`v3`] and AVX-512F (the 512-bit paths). `false` off x86-64.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Asked on x86-64 only.
#[inline]
pub(crate) fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f") && v3()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU fuses multiply-adds (FMA): `super::policy::dot`'s scalar
/// multiply-add is fused exactly where it is, so that every path on a CPU (the vector
/// ones always fuse) rounds alike. `false` off x86-64 (as the compile-time choice it
/// replaces was there).
#[inline]
pub(crate) fn fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Proof that [`v3`] held: only [`V3::detect`] makes one, so code handed a `V3` may run
/// the 256-bit path's intrinsics. (It does not make them fast: they are inlined only into
/// a function with `#[target_feature]`, see the module's header.)
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Asked on x86-64 only.
#[derive(Debug, Clone, Copy)]
pub(crate) struct V3 {
    _proof: (),
}

impl V3 {
    /// A token where the CPU has [`v3`]'s features, else `None`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Asked on x86-64 only.
    #[inline]
    pub(crate) fn detect() -> Option<Self> {
        v3().then_some(Self { _proof: () })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks are consistent with each other and with the build's own target (a
    /// feature the build assumes is one the CPU has).
    #[test]
    fn checks_agree() {
        assert!(!avx512() || v3());
        assert!(!v3() || fma());
        assert_eq!(V3::detect().is_some(), v3());
        if cfg!(all(
            target_arch = "x86_64",
            target_feature = "avx2",
            target_feature = "fma",
            target_feature = "f16c",
            target_feature = "popcnt"
        )) {
            assert!(v3());
        }
        if cfg!(all(target_arch = "x86_64", target_feature = "avx512f")) {
            assert!(avx512());
        }
    }
}
