//! The seam between models and KV memory: models call [`Attention::attend`] once per layer.
//!
//! Owns the contract only (llama.cpp's "memory" seam, DESIGN.md §3). The engine's KV store
//! implements it: it knows which sequences the tokens of a forward belong to, stores the
//! new keys and values, and attends over its blocks.
//! Must not know: how the cache is laid out, policies, batching.

/// Shapes of one attention layer, fixed per model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl AttentionShape {
    /// Query heads per KV head (the GQA group).
    pub fn group(&self) -> usize {
        self.n_heads / self.n_kv_heads.max(1)
    }
}

/// Causal attention over a cache the implementor owns.
pub trait Attention {
    /// One layer of attention for the `n` tokens of the current forward.
    ///
    /// `q`: [n, n_heads, head_dim], `k` and `v`: [n, n_kv_heads, head_dim], all after RoPE.
    /// The implementor appends `k`, `v` to its cache, attends each query to every cached
    /// slot of its own sequence up to and including its own token, and writes
    /// `out`: [n, n_heads, head_dim].
    fn attend(
        &mut self,
        layer: usize,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        out: &mut [f32],
    ) -> Result<(), String>;
}
