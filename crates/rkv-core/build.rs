//! Names the CPU level the SIMD paths of rkv-core and rkv-kernels gate on (this file is
//! both crates' build script), so that the gate is written once:
//! `x86_64_v3` where the target has AVX2, FMA and F16C (x86-64-v3; AVX-512F implies it).
//! Reads only the target's features that cargo hands every build script.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(x86_64_v3)");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    let has = |f: &str| features.split(',').any(|x| x == f);
    if arch == "x86_64" && has("avx2") && has("fma") && has("f16c") {
        println!("cargo::rustc-cfg=x86_64_v3");
    }
}
