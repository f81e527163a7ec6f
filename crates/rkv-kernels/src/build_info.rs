//! Which SIMD paths the kernels take on the running CPU, and what the build itself
//! assumes of its CPU, for `rkv --version`. The paths are chosen at run time (`simd.rs`):
//! a portable build (`-C target-cpu=x86-64`) takes the same AVX2 or AVX-512 kernels as a
//! native one on the same CPU, and gives the same results.
//! Must not know: anything but features.

/// The kernels' SIMD path on this CPU: `avx512+vnni`, `avx512` (F, BW, VL), `avx2`
/// (AVX2, FMA, F16C) or `scalar`.
pub fn simd() -> &'static str {
    if crate::simd::avx512() {
        if crate::simd::avx512_vnni() {
            "avx512+vnni"
        } else {
            "avx512"
        }
    } else if crate::simd::avx2() {
        "avx2"
    } else {
        "scalar"
    }
}

/// The path of the K-quant tiles for one token (decode), where it differs from
/// [`simd`]'s: `avx2` on an AMD CPU with AVX-512 (`simd::avx512_for_one_token`), else
/// [`simd`]'s level.
pub fn one_token_tiles() -> &'static str {
    if crate::simd::avx512() && !crate::simd::avx512_for_one_token() {
        "avx2"
    } else {
        simd()
    }
}

/// The instruction-set level the build assumes (its `-C target-cpu`): `x86-64-v4`,
/// `x86-64-v3`, `x86-64` (portable) or the target architecture's name.
pub const BUILD_BASELINE: &str = if cfg!(all(
    target_arch = "x86_64",
    target_feature = "avx512f",
    target_feature = "avx512bw",
    target_feature = "avx512vl"
)) {
    "x86-64-v4"
} else if cfg!(all(
    target_arch = "x86_64",
    target_feature = "avx2",
    target_feature = "fma",
    target_feature = "f16c"
)) {
    "x86-64-v3"
} else if cfg!(target_arch = "x86_64") {
    "x86-64"
} else {
    std::env::consts::ARCH
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
    fn the_path_is_one_the_cpu_runs() {
        let cpu = cpu_features();
        match simd() {
            "avx2" => assert!(cpu.contains("avx2") && cpu.contains("fma"), "{cpu}"),
            "avx512" | "avx512+vnni" => assert!(cpu.contains("avx512f"), "{cpu}"),
            other => {
                assert_eq!(other, "scalar");
                let has = |f: &str| cpu.split(' ').any(|x| x == f);
                assert!(!(has("avx2") && has("fma") && has("f16c")), "{cpu}");
            }
        }
    }

    #[test]
    fn the_one_token_path_is_at_most_the_cpus() {
        match (simd(), one_token_tiles()) {
            (level, tiles) if level == tiles => {}
            ("avx512" | "avx512+vnni", "avx2") => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_build_baseline_is_one_the_cpu_runs() {
        // A test binary that got this far runs on a CPU with the build's features.
        let cpu = cpu_features();
        match BUILD_BASELINE {
            "x86-64-v4" => assert!(cpu.contains("avx512f"), "{cpu}"),
            "x86-64-v3" => assert!(cpu.contains("avx2"), "{cpu}"),
            _ => {}
        }
    }
}
