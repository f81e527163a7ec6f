//! Shared helpers for the parity tests: a plain contiguous-cache [`Attention`], tiny
//! random Hugging Face checkpoints (`config.json` + `model.safetensors`), and a runner that
//! drives an rkv [`Transformer`] through prefill and decode.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rkv_model::weights::hf::{parse_config, HfSource};
use rkv_model::{Attention, AttentionShape, Transformer, WeightMode};

/// Causal GQA attention over one contiguous f32 KV cache per layer (one sequence).
///
/// Deliberately naive (two-pass softmax, f64 accumulation) so it can serve as a reference
/// implementation of the [`Attention`] contract.
pub struct ContiguousKv {
    shape: AttentionShape,
    k: Vec<Vec<f32>>, // per layer: [len, n_kv_heads, head_dim]
    v: Vec<Vec<f32>>, // per layer: [len, n_kv_heads, head_dim]
}

impl ContiguousKv {
    pub fn new(shape: AttentionShape) -> Self {
        Self {
            shape,
            k: vec![Vec::new(); shape.n_layers],
            v: vec![Vec::new(); shape.n_layers],
        }
    }

    /// Tokens cached in `layer`.
    pub fn len(&self, layer: usize) -> usize {
        self.k[layer].len() / (self.shape.n_kv_heads * self.shape.head_dim)
    }
}

impl Attention for ContiguousKv {
    fn attend(
        &mut self,
        layer: usize,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        out: &mut [f32],
    ) -> Result<(), String> {
        let AttentionShape {
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim: d,
        } = self.shape;
        if layer >= n_layers {
            return Err(format!("layer {layer} of {n_layers}"));
        }
        let n = q.len() / (n_heads * d);
        if q.len() != n * n_heads * d
            || k.len() != n * n_kv_heads * d
            || v.len() != k.len()
            || out.len() != q.len()
        {
            return Err(format!(
                "bad lengths q {} k {} v {} out {}",
                q.len(),
                k.len(),
                v.len(),
                out.len()
            ));
        }
        let start = self.len(layer);
        self.k[layer].extend_from_slice(k);
        self.v[layer].extend_from_slice(v);
        let (kc, vc) = (&self.k[layer], &self.v[layer]);
        let group = n_heads / n_kv_heads;
        let scale = 1.0 / (d as f64).sqrt();
        for t in 0..n {
            let visible = start + t + 1; // slots 0..=own position
            for h in 0..n_heads {
                let kvh = h / group;
                let qh = &q[(t * n_heads + h) * d..(t * n_heads + h + 1) * d];
                let scores: Vec<f64> = (0..visible)
                    .map(|s| {
                        let ks = &kc[(s * n_kv_heads + kvh) * d..(s * n_kv_heads + kvh + 1) * d];
                        qh.iter()
                            .zip(ks)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = w.iter().sum();
                let o = &mut out[(t * n_heads + h) * d..(t * n_heads + h + 1) * d];
                for (i, oi) in o.iter_mut().enumerate() {
                    let acc: f64 = (0..visible)
                        .map(|s| w[s] * vc[(s * n_kv_heads + kvh) * d + i] as f64)
                        .sum();
                    *oi = (acc / z) as f32;
                }
            }
        }
        Ok(())
    }
}

/// A tiny model shape. Everything not listed is shared by all cases.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub arch: &'static str,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Written as `head_dim` in `config.json` when set (Qwen3); else hidden / heads.
    pub head_dim: Option<usize>,
    pub tie: bool,
}

pub const VOCAB: usize = 97;
pub const HIDDEN: usize = 32;
pub const INTERMEDIATE: usize = 64;
pub const MAX_POS: usize = 64;

impl Spec {
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(HIDDEN / self.n_heads)
    }

    /// A `config.json` carrying every field any of candle's llama/qwen2/qwen3 config
    /// structs requires (each ignores the others' fields), and rkv's.
    pub fn config_json(&self) -> String {
        let mut v = serde_json::json!({
            "model_type": self.arch,
            "architectures": [match self.arch {
                "llama" => "LlamaForCausalLM",
                "qwen2" => "Qwen2ForCausalLM",
                _ => "Qwen3ForCausalLM",
            }],
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": INTERMEDIATE,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "max_position_embeddings": MAX_POS,
            "rope_theta": 10000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": self.tie,
            "hidden_act": "silu",
            "attention_bias": false,
            "sliding_window": 4096,
            "max_window_layers": self.n_layers,
            "use_sliding_window": false,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "torch_dtype": "float32",
        });
        if let Some(hd) = self.head_dim {
            v["head_dim"] = serde_json::json!(hd);
        }
        serde_json::to_string_pretty(&v).unwrap()
    }

    /// Random f32 weights under Hugging Face names, scaled so activations and logits stay
    /// O(1) (a unit-variance input gives unit-variance projections).
    pub fn random_weights(&self, seed: u64) -> HashMap<String, Tensor> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut w = HashMap::new();
        let hd = self.head_dim();
        let (qd, kvd) = (self.n_heads * hd, self.n_kv_heads * hd);
        let mut put = |name: String, dims: &[usize], lo: f32, hi: f32, rng: &mut StdRng| {
            let n: usize = dims.iter().product();
            let data: Vec<f32> = (0..n).map(|_| rng.gen_range(lo..hi)).collect();
            w.insert(name, Tensor::from_vec(data, dims, &Device::Cpu).unwrap());
        };
        let lin = |fan_in: usize| (3.0 / fan_in as f32).sqrt();
        put(
            "model.embed_tokens.weight".into(),
            &[VOCAB, HIDDEN],
            -1.0,
            1.0,
            &mut rng,
        );
        for i in 0..self.n_layers {
            let p = format!("model.layers.{i}");
            put(
                format!("{p}.input_layernorm.weight"),
                &[HIDDEN],
                0.8,
                1.2,
                &mut rng,
            );
            put(
                format!("{p}.post_attention_layernorm.weight"),
                &[HIDDEN],
                0.8,
                1.2,
                &mut rng,
            );
            // q and k a little hotter than unit so the softmax is not near-uniform.
            let a = 1.5 * lin(HIDDEN);
            put(
                format!("{p}.self_attn.q_proj.weight"),
                &[qd, HIDDEN],
                -a,
                a,
                &mut rng,
            );
            put(
                format!("{p}.self_attn.k_proj.weight"),
                &[kvd, HIDDEN],
                -a,
                a,
                &mut rng,
            );
            let a = lin(HIDDEN);
            put(
                format!("{p}.self_attn.v_proj.weight"),
                &[kvd, HIDDEN],
                -a,
                a,
                &mut rng,
            );
            let a = lin(qd);
            put(
                format!("{p}.self_attn.o_proj.weight"),
                &[HIDDEN, qd],
                -a,
                a,
                &mut rng,
            );
            if self.arch == "qwen2" {
                put(
                    format!("{p}.self_attn.q_proj.bias"),
                    &[qd],
                    -0.5,
                    0.5,
                    &mut rng,
                );
                put(
                    format!("{p}.self_attn.k_proj.bias"),
                    &[kvd],
                    -0.5,
                    0.5,
                    &mut rng,
                );
                put(
                    format!("{p}.self_attn.v_proj.bias"),
                    &[kvd],
                    -0.5,
                    0.5,
                    &mut rng,
                );
            }
            if self.arch == "qwen3" {
                put(
                    format!("{p}.self_attn.q_norm.weight"),
                    &[hd],
                    0.6,
                    1.6,
                    &mut rng,
                );
                put(
                    format!("{p}.self_attn.k_norm.weight"),
                    &[hd],
                    0.6,
                    1.6,
                    &mut rng,
                );
            }
            let a = lin(HIDDEN);
            put(
                format!("{p}.mlp.gate_proj.weight"),
                &[INTERMEDIATE, HIDDEN],
                -a,
                a,
                &mut rng,
            );
            put(
                format!("{p}.mlp.up_proj.weight"),
                &[INTERMEDIATE, HIDDEN],
                -a,
                a,
                &mut rng,
            );
            let a = lin(INTERMEDIATE);
            put(
                format!("{p}.mlp.down_proj.weight"),
                &[HIDDEN, INTERMEDIATE],
                -a,
                a,
                &mut rng,
            );
        }
        put("model.norm.weight".into(), &[HIDDEN], 0.8, 1.2, &mut rng);
        if !self.tie {
            put(
                "lm_head.weight".into(),
                &[VOCAB, HIDDEN],
                -1.0,
                1.0,
                &mut rng,
            );
        }
        w
    }

    /// Writes `config.json` and `model.safetensors` into `dir`.
    pub fn write_hf(&self, dir: &Path, weights: &HashMap<String, Tensor>) {
        std::fs::write(dir.join("config.json"), self.config_json()).unwrap();
        candle_core::safetensors::save(weights, dir.join("model.safetensors")).unwrap();
    }
}

/// Loads an rkv model from a Hugging Face directory the way the engine does.
pub fn load_rkv_hf(dir: &Path) -> Transformer {
    load_rkv_hf_as(dir, WeightMode::Native)
}

/// [`load_rkv_hf`] with dense weights held as stored (`Native`) or as f32.
pub fn load_rkv_hf_as(dir: &Path, mode: WeightMode) -> Transformer {
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let cfg = parse_config(&text).unwrap();
    let mut src = HfSource::open(dir, mode).unwrap();
    Transformer::load(cfg, &mut src).unwrap()
}

/// An rkv model with its own cache, fed token chunks at consecutive positions.
pub struct RkvRunner<'a> {
    pub model: &'a Transformer,
    pub kv: ContiguousKv,
    pub pos: usize,
}

impl<'a> RkvRunner<'a> {
    pub fn new(model: &'a Transformer) -> Self {
        Self {
            model,
            kv: ContiguousKv::new(model.attention_shape()),
            pos: 0,
        }
    }

    /// Feeds `tokens` and returns the logits of every one of them, one `Vec` per token.
    pub fn feed(&mut self, tokens: &[u32]) -> Vec<Vec<f32>> {
        let n = tokens.len();
        let positions: Vec<usize> = (self.pos..self.pos + n).collect();
        let rows: Vec<usize> = (0..n).collect();
        let logits = self
            .model
            .forward(tokens, &positions, &mut self.kv, &rows)
            .unwrap();
        self.pos += n;
        let vocab = self.model.config().vocab_size;
        assert_eq!(logits.len(), n * vocab);
        logits.chunks_exact(vocab).map(<[f32]>::to_vec).collect()
    }
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

pub fn max_abs(a: &[f32]) -> f32 {
    a.iter().map(|x| x.abs()).fold(0f32, f32::max)
}

/// Random token ids below [`VOCAB`].
pub fn random_tokens(seed: u64, n: usize) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(0..VOCAB as u32)).collect()
}
