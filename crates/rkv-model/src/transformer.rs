//! The decoder of Llama, Qwen2 and Qwen3, written once over [`Linear`] and [`Attention`].
//!
//! Pre-norm blocks: RMSNorm, q/k/v projections (Qwen2: with biases; Qwen3: RMSNorm per
//! head on q and k), RoPE, attention through the engine's [`Attention`] implementation,
//! output projection, RMSNorm, SwiGLU MLP. References: Llama (arXiv 2302.13971),
//! Qwen2 (arXiv 2407.10671), Qwen3 (arXiv 2505.09388); candle-transformers' `llama`,
//! `qwen2` and `qwen3` models are the parity oracles in tests.
//! Must not know: how attention stores keys, policies, batching.

use crate::attention::{Attention, AttentionShape};
use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::linear::Linear;
use crate::norm::{rms_norm, rms_norm_inplace, silu_mul};
use crate::rope::RopeTable;
use crate::weights::{TensorName, TensorSource};

struct Layer {
    attn_norm: Vec<f32>,      // [hidden]
    q: Linear,                // [n_heads * head_dim, hidden]
    k: Linear,                // [n_kv_heads * head_dim, hidden]
    v: Linear,                // [n_kv_heads * head_dim, hidden]
    o: Linear,                // [hidden, n_heads * head_dim]
    q_norm: Option<Vec<f32>>, // [head_dim]
    k_norm: Option<Vec<f32>>, // [head_dim]
    ffn_norm: Vec<f32>,       // [hidden]
    gate: Linear,             // [intermediate, hidden]
    up: Linear,               // [intermediate, hidden]
    down: Linear,             // [hidden, intermediate]
}

/// A loaded decoder-only transformer.
pub struct Transformer {
    cfg: ModelConfig,
    embedding: Linear, // [vocab, hidden]
    layers: Vec<Layer>,
    final_norm: Vec<f32>,    // [hidden]
    lm_head: Option<Linear>, // [vocab, hidden]; None = tied to `embedding`
}

impl Transformer {
    /// Loads every tensor the configuration calls for from `src`.
    pub fn load(cfg: ModelConfig, src: &mut dyn TensorSource) -> Result<Self> {
        cfg.validate()?;
        let (h, q, kv, ff) = (
            cfg.hidden_size,
            cfg.q_dim(),
            cfg.kv_dim(),
            cfg.intermediate_size,
        );
        let bias = cfg.arch.has_qkv_bias();
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let (q_norm, k_norm) = if cfg.arch.has_qk_norm() {
                (
                    Some(src.vector(TensorName::QNorm(i), cfg.head_dim)?),
                    Some(src.vector(TensorName::KNorm(i), cfg.head_dim)?),
                )
            } else {
                (None, None)
            };
            layers.push(Layer {
                attn_norm: src.vector(TensorName::AttnNorm(i), h)?,
                q: src.linear(TensorName::Q(i), q, h, bias)?,
                k: src.linear(TensorName::K(i), kv, h, bias)?,
                v: src.linear(TensorName::V(i), kv, h, bias)?,
                o: src.linear(TensorName::O(i), h, q, false)?,
                q_norm,
                k_norm,
                ffn_norm: src.vector(TensorName::FfnNorm(i), h)?,
                gate: src.linear(TensorName::Gate(i), ff, h, false)?,
                up: src.linear(TensorName::Up(i), ff, h, false)?,
                down: src.linear(TensorName::Down(i), h, ff, false)?,
            });
        }
        let embedding = src.linear(TensorName::Embedding, cfg.vocab_size, h, false)?;
        let lm_head = if cfg.tie_embeddings && !src.has(TensorName::LmHead, false) {
            None
        } else {
            Some(src.linear(TensorName::LmHead, cfg.vocab_size, h, false)?)
        };
        Ok(Self {
            final_norm: src.vector(TensorName::OutputNorm, h)?,
            cfg,
            embedding,
            layers,
            lm_head,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    pub fn attention_shape(&self) -> AttentionShape {
        AttentionShape {
            n_layers: self.cfg.n_layers,
            n_heads: self.cfg.n_heads,
            n_kv_heads: self.cfg.n_kv_heads,
            head_dim: self.cfg.head_dim,
        }
    }

    /// Runs `tokens` (at absolute `positions`) through the model, with attention delegated
    /// to `attn`, and returns the logits of the rows listed in `logit_rows`:
    /// `[logit_rows.len(), vocab]`.
    pub fn forward(
        &self,
        tokens: &[u32],
        positions: &[usize],
        attn: &mut dyn Attention,
        logit_rows: &[usize],
    ) -> Result<Vec<f32>> {
        let n = tokens.len();
        let cfg = &self.cfg;
        if n == 0 || positions.len() != n {
            return Err(ModelError::BadInput(format!(
                "{n} tokens with {} positions",
                positions.len()
            )));
        }
        if let Some(&r) = logit_rows.iter().find(|&&r| r >= n) {
            return Err(ModelError::BadInput(format!("logit row {r} of {n} tokens")));
        }
        let (h, qd, kvd, ff) = (
            cfg.hidden_size,
            cfg.q_dim(),
            cfg.kv_dim(),
            cfg.intermediate_size,
        );
        let mut x = vec![0f32; n * h]; // [n, hidden]
        for (t, &id) in tokens.iter().enumerate() {
            if id as usize >= cfg.vocab_size {
                return Err(ModelError::BadToken {
                    id,
                    vocab: cfg.vocab_size,
                });
            }
            self.embedding
                .row(id as usize, &mut x[t * h..(t + 1) * h])?;
        }
        let rope = RopeTable::new(&cfg.rope, cfg.head_dim, positions);
        let mut xn = vec![0f32; n * h]; // [n, hidden]
        let mut q = vec![0f32; n * qd]; // [n, n_heads, head_dim]
        let mut k = vec![0f32; n * kvd]; // [n, n_kv_heads, head_dim]
        let mut v = vec![0f32; n * kvd]; // [n, n_kv_heads, head_dim]
        let mut att = vec![0f32; n * qd]; // [n, n_heads, head_dim]
        let mut proj = vec![0f32; n * h]; // [n, hidden]
        let mut gate = vec![0f32; n * ff]; // [n, intermediate]
        let mut up = vec![0f32; n * ff]; // [n, intermediate]
        for (li, l) in self.layers.iter().enumerate() {
            rms_norm(&x, &l.attn_norm, cfg.rms_norm_eps, &mut xn);
            // Products of the same input run side by side: one wake-up of the pool's
            // other workers instead of one per product (most of a small model's decode
            // step is such short products).
            let (rq, (rk, rv)) = rayon::join(
                || l.q.forward(&xn, n, &mut q),
                || {
                    rayon::join(
                        || l.k.forward(&xn, n, &mut k),
                        || l.v.forward(&xn, n, &mut v),
                    )
                },
            );
            rq?;
            rk?;
            rv?;
            if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
                rms_norm_inplace(&mut q, qn, cfg.rms_norm_eps);
                rms_norm_inplace(&mut k, kn, cfg.rms_norm_eps);
            }
            rope.apply(&mut q, cfg.n_heads);
            rope.apply(&mut k, cfg.n_kv_heads);
            attn.attend(li, &q, &k, &v, &mut att)
                .map_err(ModelError::Attention)?;
            l.o.forward(&att, n, &mut proj)?;
            add_assign(&mut x, &proj);
            rms_norm(&x, &l.ffn_norm, cfg.rms_norm_eps, &mut xn);
            let (rg, ru) = rayon::join(
                || l.gate.forward(&xn, n, &mut gate),
                || l.up.forward(&xn, n, &mut up),
            );
            rg?;
            ru?;
            silu_mul(&mut gate, &up);
            l.down.forward(&gate, n, &mut proj)?;
            add_assign(&mut x, &proj);
        }
        let m = logit_rows.len();
        let mut sel = vec![0f32; m * h]; // [m, hidden]
        for (i, &r) in logit_rows.iter().enumerate() {
            rms_norm(
                &x[r * h..(r + 1) * h],
                &self.final_norm,
                cfg.rms_norm_eps,
                &mut sel[i * h..(i + 1) * h],
            );
        }
        let mut logits = vec![0f32; m * cfg.vocab_size]; // [m, vocab]
        if m > 0 {
            let head = self.lm_head.as_ref().unwrap_or(&self.embedding);
            head.forward(&sel, m, &mut logits)?;
        }
        Ok(logits)
    }
}

fn add_assign(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
