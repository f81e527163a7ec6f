//! rkv-kernels: the CPU hot paths of rkv: ggml-compatible quantised blocks and
//! dot products (numerics mirror ggml's `ggml-quants.c` and its x86 kernels),
//! activation quantisation, quantised and dense matmuls, and the f16/f32 vector
//! helpers of attention.
//!
//! SIMD code paths are chosen at run time from the CPU's features (`simd.rs`), so a
//! binary built for the portable target takes them where the CPU has them; every one
//! has a scalar fallback and a scalar reference used as the test oracle.

pub mod attn;
#[cfg(target_arch = "x86_64")]
mod attn_avx2;
#[cfg(target_arch = "x86_64")]
mod attn_avx512;
pub mod blocks;
pub mod blocks_k;
pub mod blocks_q5;
pub mod build_info;
pub mod dense;
#[cfg(target_arch = "x86_64")]
mod dense_avx2;
#[cfg(target_arch = "x86_64")]
mod dense_avx512;
pub mod dot;
#[cfg(target_arch = "x86_64")]
mod dot_avx2;
pub mod dot_k;
pub mod error;
pub mod gemm;
#[cfg(target_arch = "x86_64")]
mod gemm_avx2;
#[cfg(target_arch = "x86_64")]
mod gemm_avx2_k;
#[cfg(target_arch = "x86_64")]
mod gemm_avx2_q5;
#[cfg(target_arch = "x86_64")]
mod gemm_avx512_k;
pub mod gqa;
#[cfg(target_arch = "x86_64")]
mod gqa_avx2;
#[cfg(target_arch = "x86_64")]
mod gqa_avx512;
pub mod gqa_q8;
#[cfg(target_arch = "x86_64")]
mod gqa_q8_avx2;
#[cfg(target_arch = "x86_64")]
mod gqa_q8_avx512;
pub mod interleaved;
pub mod matmul;
pub mod packed_q4_1;
pub mod packed_q4_k;
pub mod packed_q5_0;
pub mod packed_q5_1;
pub mod packed_q5_k;
pub mod packed_q6_k;
pub mod packed_q8_0;
pub mod quantize;
#[cfg(target_arch = "x86_64")]
mod quantize_k_avx2;
mod simd;
pub mod wide;
#[cfg(target_arch = "x86_64")]
mod wide_vnni;

pub use attn::{
    axpy_f16, axpy_f16_multi, axpy_f32, dot_bf16, dot_f16, dot_f16_multi, dot_f32,
    f16_to_f32_slice, f32_to_f16_slice,
};
pub use blocks::{
    blocks_from_bytes, dequantize_row_q4_0, dequantize_row_q4_1, dequantize_row_q8_0,
    dequantize_row_q8_1, Block, BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, QK,
};
pub use blocks_k::{
    dequantize_row_q4_k, dequantize_row_q5_k, dequantize_row_q6_k, quantize_row_q8_k,
    quantize_row_q8_k_ref, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K,
};
pub use blocks_q5::{
    dequantize_row_q5_0, dequantize_row_q5_1, vec_dot_q5_0_q8_0_ref, vec_dot_q5_1_q8_1_ref,
    BlockQ5_0, BlockQ5_1,
};
pub use dense::{matmul_bf16, matmul_f16, matmul_f32};
pub use dot::{
    vec_dot_q4_0_q8_0, vec_dot_q4_0_q8_0_ref, vec_dot_q4_1_q8_1, vec_dot_q4_1_q8_1_ref,
    vec_dot_q8_0_q8_0, vec_dot_q8_0_q8_0_ref,
};
pub use dot_k::{vec_dot_q4_k_q8_k_ref, vec_dot_q5_k_q8_k_ref, vec_dot_q6_k_q8_k_ref};
pub use error::KernelError;
pub use gemm::{matmul_packed, matmul_packed_tiles};
pub use gqa::{gqa_scores_f16, gqa_weighted_sum_f16};
pub use gqa_q8::{gqa_scores_q8_0, gqa_weighted_sum_q8_0};
pub use half::{bf16, f16};
pub use interleaved::{matmul_packed_ref, Interleaved, Packed};
pub use matmul::{matmul_q4_0, matmul_q4_1, matmul_q8_0};
pub use packed_q4_1::{BlockQ4_1x8, PackedQ4_1};
pub use packed_q4_k::{BlockQ4_Kx8, PackedQ4K};
pub use packed_q5_0::{BlockQ5_0x8, PackedQ5_0};
pub use packed_q5_1::{BlockQ5_1x8, PackedQ5_1};
pub use packed_q5_k::{BlockQ5_Kx8, PackedQ5K};
pub use packed_q6_k::{BlockQ6_Kx8, PackedQ6K};
pub use packed_q8_0::{BlockQ8_0x8, PackedQ8_0};
pub use quantize::{
    quantize_row_q8_0, quantize_row_q8_0_ref, quantize_row_q8_1, quantize_row_q8_1_ref,
};
