//! The model's hyper-parameters, read from GGUF metadata or a Hugging Face `config.json`.
//!
//! Owns: `ModelConfig` and the per-architecture switches (biases, q/k norms, RoPE layout).
//! Must not know: tensors, caches.

use crate::error::{ModelError, Result};
use crate::rope::{RopeConfig, RopeStyle};

/// Most layers a model may declare (llama.cpp's `LLAMA_MAX_LAYERS`): a file's layer count
/// sizes allocations before its tensors are read.
pub const MAX_LAYERS: usize = 512;

/// Widest attention head a model may declare (released models use at most 256): the
/// head dim sizes RoPE tables before the tensors are read.
pub const MAX_HEAD_DIM: usize = 4096;

/// The architectures rkv runs; all are pre-norm decoders with SwiGLU MLPs and GQA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3, SmolLM2, DeepSeek-R1-Distill-Llama.
    Llama,
    /// Qwen2 / Qwen2.5, DeepSeek-R1-Distill-Qwen: biases on q, k and v.
    Qwen2,
    /// Qwen3: RMSNorm on each head of q and k, explicit head_dim.
    Qwen3,
}

impl Arch {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            "qwen3" => Ok(Arch::Qwen3),
            other => Err(ModelError::UnsupportedArch(other.to_string())),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }

    pub fn has_qkv_bias(&self) -> bool {
        matches!(self, Arch::Qwen2)
    }

    pub fn has_qk_norm(&self) -> bool {
        matches!(self, Arch::Qwen3)
    }

    /// RoPE pairing of a GGUF file of this architecture: llama.cpp's converter permutes
    /// Llama q/k weights to adjacent pairs; Qwen files keep the NEOX (half-split) layout.
    pub fn gguf_rope_style(&self) -> RopeStyle {
        match self {
            Arch::Llama => RopeStyle::Interleaved,
            Arch::Qwen2 | Arch::Qwen3 => RopeStyle::Half,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope: RopeConfig,
    /// The longest sequence the model was trained for.
    pub max_context: usize,
    pub tie_embeddings: bool,
}

impl ModelConfig {
    /// Checks the relations the forward pass relies on.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ModelError::BadConfig(m));
        if self.n_layers == 0 || self.n_heads == 0 || self.n_kv_heads == 0 || self.head_dim == 0 {
            return bad(format!(
                "layers {}, heads {}, kv heads {} and head dim {} must all be positive",
                self.n_layers, self.n_heads, self.n_kv_heads, self.head_dim
            ));
        }
        if self.n_layers > MAX_LAYERS || self.head_dim > MAX_HEAD_DIM {
            return bad(format!(
                "{} layers of head dim {}: at most {MAX_LAYERS} layers and head dim {MAX_HEAD_DIM}",
                self.n_layers, self.head_dim
            ));
        }
        if self.n_heads.checked_mul(self.head_dim).is_none() {
            return bad(format!(
                "{} heads of head dim {} overflow",
                self.n_heads, self.head_dim
            ));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "{} query heads do not divide into {} KV heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!("head dim {} must be even for RoPE", self.head_dim));
        }
        if self.vocab_size == 0 || self.hidden_size == 0 || self.intermediate_size == 0 {
            return bad("vocab, hidden and intermediate sizes must be positive".into());
        }
        if let Some(f) = &self.rope.freq_factors {
            if f.len() != self.head_dim / 2 {
                return bad(format!(
                    "rope frequency factors have {} entries, expected {}",
                    f.len(),
                    self.head_dim / 2
                ));
            }
        }
        Ok(())
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}
