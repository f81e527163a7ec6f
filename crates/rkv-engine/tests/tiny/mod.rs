//! Tiny random-weight Hugging Face checkpoints for engine tests: `config.json`,
//! `model.safetensors` (f32), a WordLevel `tokenizer.json` of [`VOCAB`] tokens with `<s>` and
//! `</s>`, and `tokenizer_config.json`, written to a temporary directory and loaded with
//! `rkv_model::load` as the CLI would. Weight scaling follows rkv-model's parity tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rkv_core::config::CompressionConfig;
use rkv_engine::{Admission, Engine, EngineConfig, KvDtype};
use rkv_model::WeightMode;
use serde_json::json;

pub const VOCAB: usize = 100;
pub const HIDDEN: usize = 32;
pub const INTERMEDIATE: usize = 64;
pub const LAYERS: usize = 2;
pub const MAX_POS: usize = 1024;
pub const EOS: u32 = 2;

/// A tiny model shape.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub name: &'static str,
    pub arch: &'static str,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Written as `head_dim` in `config.json` when set (Qwen3); else hidden / heads.
    pub head_dim: Option<usize>,
}

/// Llama GQA, Llama MHA, Qwen2 (q/k/v biases), Qwen3 (q/k norms, explicit head_dim).
pub const SPECS: [Spec; 4] = [
    Spec {
        name: "llama-gqa",
        arch: "llama",
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: None,
    },
    Spec {
        name: "llama-mha",
        arch: "llama",
        n_heads: 4,
        n_kv_heads: 4,
        head_dim: None,
    },
    Spec {
        name: "qwen2",
        arch: "qwen2",
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: None,
    },
    Spec {
        name: "qwen3",
        arch: "qwen3",
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: Some(16),
    },
];

impl Spec {
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(HIDDEN / self.n_heads)
    }

    fn config_json(&self) -> String {
        let mut v = json!({
            "model_type": self.arch,
            "architectures": [match self.arch {
                "llama" => "LlamaForCausalLM",
                "qwen2" => "Qwen2ForCausalLM",
                _ => "Qwen3ForCausalLM",
            }],
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": INTERMEDIATE,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "max_position_embeddings": MAX_POS,
            "rope_theta": 10000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": false,
            "hidden_act": "silu",
            "attention_bias": self.arch == "qwen2",
            "bos_token_id": 1,
            "eos_token_id": EOS,
            "torch_dtype": "float32",
        });
        if let Some(hd) = self.head_dim {
            v["head_dim"] = json!(hd);
        }
        serde_json::to_string_pretty(&v).unwrap()
    }

    /// Random f32 weights under Hugging Face names: `name -> (shape, data)`.
    fn random_weights(&self, seed: u64) -> BTreeMap<String, (Vec<usize>, Vec<f32>)> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut w = BTreeMap::new();
        let hd = self.head_dim();
        let (qd, kvd) = (self.n_heads * hd, self.n_kv_heads * hd);
        let mut put = |name: String, dims: &[usize], lo: f32, hi: f32| {
            let n: usize = dims.iter().product();
            let data: Vec<f32> = (0..n).map(|_| rng.gen_range(lo..hi)).collect();
            w.insert(name, (dims.to_vec(), data));
        };
        let lin = |fan_in: usize| (3.0 / fan_in as f32).sqrt();
        put(
            "model.embed_tokens.weight".into(),
            &[VOCAB, HIDDEN],
            -1.0,
            1.0,
        );
        for i in 0..LAYERS {
            let p = format!("model.layers.{i}");
            put(format!("{p}.input_layernorm.weight"), &[HIDDEN], 0.8, 1.2);
            put(
                format!("{p}.post_attention_layernorm.weight"),
                &[HIDDEN],
                0.8,
                1.2,
            );
            // q and k a little hotter than unit so attention is not near-uniform.
            let a = 1.5 * lin(HIDDEN);
            put(format!("{p}.self_attn.q_proj.weight"), &[qd, HIDDEN], -a, a);
            put(
                format!("{p}.self_attn.k_proj.weight"),
                &[kvd, HIDDEN],
                -a,
                a,
            );
            let a = lin(HIDDEN);
            put(
                format!("{p}.self_attn.v_proj.weight"),
                &[kvd, HIDDEN],
                -a,
                a,
            );
            let a = lin(qd);
            put(format!("{p}.self_attn.o_proj.weight"), &[HIDDEN, qd], -a, a);
            if self.arch == "qwen2" {
                put(format!("{p}.self_attn.q_proj.bias"), &[qd], -0.5, 0.5);
                put(format!("{p}.self_attn.k_proj.bias"), &[kvd], -0.5, 0.5);
                put(format!("{p}.self_attn.v_proj.bias"), &[kvd], -0.5, 0.5);
            }
            if self.arch == "qwen3" {
                put(format!("{p}.self_attn.q_norm.weight"), &[hd], 0.6, 1.6);
                put(format!("{p}.self_attn.k_norm.weight"), &[hd], 0.6, 1.6);
            }
            let a = lin(HIDDEN);
            put(
                format!("{p}.mlp.gate_proj.weight"),
                &[INTERMEDIATE, HIDDEN],
                -a,
                a,
            );
            put(
                format!("{p}.mlp.up_proj.weight"),
                &[INTERMEDIATE, HIDDEN],
                -a,
                a,
            );
            let a = lin(INTERMEDIATE);
            put(
                format!("{p}.mlp.down_proj.weight"),
                &[HIDDEN, INTERMEDIATE],
                -a,
                a,
            );
        }
        put("model.norm.weight".into(), &[HIDDEN], 0.8, 1.2);
        put("lm_head.weight".into(), &[VOCAB, HIDDEN], -1.0, 1.0);
        w
    }

    /// Writes the whole Hugging Face directory into `dir`.
    pub fn write_hf(&self, dir: &Path, seed: u64) {
        std::fs::write(dir.join("config.json"), self.config_json()).unwrap();
        let weights = self.random_weights(seed);
        let bytes: BTreeMap<&str, (Vec<usize>, Vec<u8>)> = weights
            .iter()
            .map(|(k, (s, d))| {
                let b: Vec<u8> = d.iter().flat_map(|x| x.to_le_bytes()).collect();
                (k.as_str(), (s.clone(), b))
            })
            .collect();
        let views = bytes.iter().map(|(k, (s, b))| {
            (
                *k,
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                    .unwrap(),
            )
        });
        safetensors::tensor::serialize_to_file(views, None, &dir.join("model.safetensors"))
            .unwrap();
        write_tokenizer(dir);
    }
}

/// A WordLevel tokenizer: `<unk>`, `<s>`, `</s>` then `w3 .. w99`, split on whitespace.
fn write_tokenizer(dir: &Path) {
    let mut vocab = serde_json::Map::new();
    let specials = ["<unk>", "<s>", "</s>"];
    for (i, s) in specials.iter().enumerate() {
        vocab.insert((*s).into(), json!(i));
    }
    for i in specials.len()..VOCAB {
        vocab.insert(format!("w{i}"), json!(i));
    }
    let added: Vec<_> = specials
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({"id": i, "content": s, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let tok = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    let cfg = json!({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": false});
    std::fs::write(dir.join("tokenizer_config.json"), cfg.to_string()).unwrap();
}

/// A tiny model on disk; the directory lives as long as this value.
pub struct TinyModel {
    pub spec: Spec,
    pub dir: tempfile::TempDir,
}

impl TinyModel {
    pub fn new(spec: Spec, seed: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        spec.write_hf(dir.path(), seed);
        Self { spec, dir }
    }

    /// An engine over this model: f32 KV, small blocks, FullKV by default.
    pub fn engine(&self, max_batch_tokens: usize) -> Engine {
        self.engine_with(max_batch_tokens, KvDtype::F32, BLOCK_SIZE)
    }

    /// [`Self::engine`] with the KV storage and block size given.
    pub fn engine_with(
        &self,
        max_batch_tokens: usize,
        kv_dtype: KvDtype,
        block_size: usize,
    ) -> Engine {
        self.engine_pool(max_batch_tokens, kv_dtype, block_size, KV_BLOCKS)
    }

    /// [`Self::engine_with`] with a pool of `kv_blocks` blocks.
    pub fn engine_pool(
        &self,
        max_batch_tokens: usize,
        kv_dtype: KvDtype,
        block_size: usize,
        kv_blocks: usize,
    ) -> Engine {
        self.engine_admission(
            max_batch_tokens,
            kv_dtype,
            block_size,
            kv_blocks,
            Admission::Grow,
        )
    }

    /// [`Self::engine_pool`] with FullKV sequences taking memory by `admission`.
    pub fn engine_admission(
        &self,
        max_batch_tokens: usize,
        kv_dtype: KvDtype,
        block_size: usize,
        kv_blocks: usize,
        admission: Admission,
    ) -> Engine {
        let model = rkv_model::load(self.dir.path(), WeightMode::Native)
            .unwrap_or_else(|e| panic!("{}: load: {e}", self.spec.name));
        Engine::new(
            model,
            EngineConfig {
                kv_dtype,
                block_size,
                kv_blocks,
                max_batch_tokens,
                max_num_seqs: 64,
                compression: CompressionConfig::full(),
                admission,
                prefix_cache: true,
            },
        )
        .unwrap()
    }
}

pub const BLOCK_SIZE: usize = 16;
pub const KV_BLOCKS: usize = 64;

/// Random non-special token ids.
pub fn random_prompt(seed: u64, n: usize) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(3..VOCAB as u32)).collect()
}
