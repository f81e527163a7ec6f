//! Where weights come from: GGUF files and Hugging Face safetensors directories.
//!
//! Owns the [`TensorSource`] seam that architectures load through by logical name, and
//! the weight mode (native quantised or dequantised to f32).
//! Must not know: layers' maths, caches.

pub mod bench_model;
pub mod gguf;
mod gguf_alignment;
pub mod hf;
pub mod quant_layout;
pub mod requantize;

use crate::error::Result;
use crate::linear::Linear;

/// The little-endian 16-bit words of `b` (f16 and bf16 weights as stored).
pub(crate) fn le_u16s(b: &[u8]) -> impl Iterator<Item = u16> + '_ {
    b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]))
}

/// How to hold weights in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightMode {
    /// Keep quantised weights quantised and run quantised matmuls.
    #[default]
    Native,
    /// Dequantise everything to f32: the accuracy reference mode.
    F32,
}

/// Logical tensor names, mapped by each source to its own naming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorName {
    Embedding,
    OutputNorm,
    LmHead,
    AttnNorm(usize),
    Q(usize),
    K(usize),
    V(usize),
    O(usize),
    QNorm(usize),
    KNorm(usize),
    FfnNorm(usize),
    Gate(usize),
    Up(usize),
    Down(usize),
}

/// A provider of named tensors.
pub trait TensorSource {
    /// Whether a tensor exists (optional tensors: biases, `output.weight`).
    fn has(&self, name: TensorName, bias: bool) -> bool;
    /// A `[rows, cols]` matrix with its bias when `with_bias`.
    fn linear(
        &mut self,
        name: TensorName,
        rows: usize,
        cols: usize,
        with_bias: bool,
    ) -> Result<Linear>;
    /// A vector of `len` values, as f32.
    fn vector(&mut self, name: TensorName, len: usize) -> Result<Vec<f32>>;
}
