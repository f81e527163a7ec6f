//! Which SIMD paths this build of the kernels takes, and which the running CPU offers,
//! for `rkv --version`. The paths are chosen when the crate is compiled (the workspace
//! builds with `-C target-cpu=native`; a portable build, `-C target-cpu=x86-64`, takes
//! the scalar paths everywhere).
//! Must not know: anything but features.

/// The kernels' SIMD level in this build: `avx512+vnni`, `avx512` (F, BW, VL), `avx2`
/// (x86-64-v3: AVX2, FMA, F16C) or `scalar`.
pub const SIMD: &str = if cfg!(all(
    target_arch = "x86_64",
    target_feature = "avx512f",
    target_feature = "avx512bw",
    target_feature = "avx512vl",
    target_feature = "avx512vnni"
)) {
    "avx512+vnni"
} else if cfg!(all(
    target_arch = "x86_64",
    target_feature = "avx512f",
    target_feature = "avx512bw",
    target_feature = "avx512vl"
)) {
    "avx512"
} else if cfg!(x86_64_v3) {
    "avx2"
} else {
    "scalar"
};

/// The SIMD features of the running CPU that the kernels can use, space-separated
/// (empty off x86-64).
pub fn cpu_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let mut have = Vec::new();
        macro_rules! probe {
            ($($f:tt),*) => {$(
                if std::is_x86_feature_detected!($f) {
                    have.push($f);
                }
            )*};
        }
        probe!(
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512vl",
            "avx512vnni"
        );
        have.join(" ")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_level_is_one_the_cpu_runs() {
        // A test binary that got this far runs on a CPU with the build's features.
        let cpu = cpu_features();
        match SIMD {
            "avx2" => assert!(cpu.contains("avx2") && cpu.contains("fma"), "{cpu}"),
            "avx512" | "avx512+vnni" => assert!(cpu.contains("avx512f"), "{cpu}"),
            other => assert_eq!(other, "scalar"),
        }
    }
}
