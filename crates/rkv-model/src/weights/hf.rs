//! Loading from a Hugging Face model directory: `config.json` and `*.safetensors`.
//!
//! Owns Hugging Face naming (`model.layers.N.self_attn.q_proj.weight`, ...) and the
//! `config.json` side of config parsing. Reading safetensors is candle's.
//! Must not know: the maths of the layers.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use super::{TensorName, TensorSource};
use crate::config::{Arch, ModelConfig};
use crate::error::{candle_message, ModelError, Result};
use crate::linear::{Linear, Weight};
use crate::rope::{llama3_freq_factors, RopeConfig, RopeStyle};

#[derive(Debug, Deserialize)]
struct RopeScaling {
    #[serde(alias = "type")]
    rope_type: Option<String>,
    factor: Option<f32>,
    low_freq_factor: Option<f32>,
    high_freq_factor: Option<f32>,
    original_max_position_embeddings: Option<f32>,
}

#[derive(Debug, Deserialize)]
struct HfConfig {
    model_type: String,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f32>,
    rope_theta: Option<f32>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    rope_scaling: Option<RopeScaling>,
}

/// Parses a `config.json` text.
pub fn parse_config(text: &str) -> Result<ModelConfig> {
    let c: HfConfig = serde_json::from_str(text)
        .map_err(|e| ModelError::BadConfig(format!("config.json: {e}")))?;
    let arch = Arch::parse(&c.model_type)?;
    let head_dim = c
        .head_dim
        .unwrap_or(c.hidden_size / c.num_attention_heads.max(1));
    let theta = c.rope_theta.unwrap_or(10000.0);
    if let Some(s) = &c.rope_scaling {
        if s.rope_type.as_deref() != Some("llama3") {
            return Err(ModelError::BadConfig(format!(
                "unsupported rope_scaling type {:?}",
                s.rope_type
            )));
        }
    }
    let mut cfg = ModelConfig {
        arch,
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        intermediate_size: c.intermediate_size,
        n_layers: c.num_hidden_layers,
        n_heads: c.num_attention_heads,
        n_kv_heads: c.num_key_value_heads.unwrap_or(c.num_attention_heads),
        head_dim,
        rms_norm_eps: c.rms_norm_eps.unwrap_or(1e-6),
        rope: RopeConfig {
            theta,
            style: RopeStyle::Half,
            freq_factors: None,
        },
        max_context: c.max_position_embeddings.unwrap_or(4096),
        tie_embeddings: c.tie_word_embeddings.unwrap_or(false),
    };
    // Validated first: the factors' length is the head dim's, which must be sane.
    cfg.validate()?;
    if let Some(s) = &c.rope_scaling {
        cfg.rope.freq_factors = Some(llama3_freq_factors(
            theta,
            head_dim,
            s.factor.unwrap_or(8.0),
            s.low_freq_factor.unwrap_or(1.0),
            s.high_freq_factor.unwrap_or(4.0),
            s.original_max_position_embeddings.unwrap_or(8192.0),
        ));
    }
    Ok(cfg)
}

pub struct HfSource {
    tensors: HashMap<String, Tensor>,
}

impl HfSource {
    /// Reads every `*.safetensors` file of `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        let entries = std::fs::read_dir(dir).map_err(|source| ModelError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut files: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(ModelError::NotFound(dir.join("*.safetensors")));
        }
        let mut tensors = HashMap::new();
        for f in files {
            let bytes = std::fs::read(&f).map_err(|source| ModelError::Io {
                path: f.clone(),
                source,
            })?;
            tensors.extend(Self::from_bytes(&f, &bytes)?.tensors);
        }
        Ok(Self { tensors })
    }

    /// Reads one safetensors file held whole in memory; `label` names it in errors. The
    /// header's declared length is checked against `bytes` before it is read (the
    /// safetensors crate refuses one past the buffer or over 100 MB), so nothing is sized
    /// by a field the bytes cannot back.
    pub fn from_bytes(label: &Path, bytes: &[u8]) -> Result<Self> {
        let tensors = candle_core::safetensors::load_buffer(bytes, &Device::Cpu).map_err(|e| {
            ModelError::BadSafetensors {
                path: label.to_path_buf(),
                reason: candle_message(&e),
            }
        })?;
        Ok(Self { tensors })
    }

    fn hf_name(name: TensorName, bias: bool) -> String {
        let s = if bias { "bias" } else { "weight" };
        match name {
            TensorName::Embedding => format!("model.embed_tokens.{s}"),
            TensorName::OutputNorm => format!("model.norm.{s}"),
            TensorName::LmHead => format!("lm_head.{s}"),
            TensorName::AttnNorm(i) => format!("model.layers.{i}.input_layernorm.{s}"),
            TensorName::Q(i) => format!("model.layers.{i}.self_attn.q_proj.{s}"),
            TensorName::K(i) => format!("model.layers.{i}.self_attn.k_proj.{s}"),
            TensorName::V(i) => format!("model.layers.{i}.self_attn.v_proj.{s}"),
            TensorName::O(i) => format!("model.layers.{i}.self_attn.o_proj.{s}"),
            TensorName::QNorm(i) => format!("model.layers.{i}.self_attn.q_norm.{s}"),
            TensorName::KNorm(i) => format!("model.layers.{i}.self_attn.k_norm.{s}"),
            TensorName::FfnNorm(i) => format!("model.layers.{i}.post_attention_layernorm.{s}"),
            TensorName::Gate(i) => format!("model.layers.{i}.mlp.gate_proj.{s}"),
            TensorName::Up(i) => format!("model.layers.{i}.mlp.up_proj.{s}"),
            TensorName::Down(i) => format!("model.layers.{i}.mlp.down_proj.{s}"),
        }
    }

    fn f32_values(&self, name: &str, want: &[usize]) -> Result<Vec<f32>> {
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        if t.dims() != want {
            return Err(ModelError::BadShape {
                name: name.to_string(),
                got: t.dims().to_vec(),
                want: want.to_vec(),
            });
        }
        match t.dtype() {
            DType::F32 | DType::F16 | DType::BF16 => {}
            other => {
                return Err(ModelError::UnsupportedDtype {
                    tensor: name.to_string(),
                    dtype: format!("{other:?}"),
                })
            }
        }
        Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
    }
}

impl TensorSource for HfSource {
    fn has(&self, name: TensorName, bias: bool) -> bool {
        self.tensors.contains_key(&Self::hf_name(name, bias))
    }

    fn linear(
        &mut self,
        name: TensorName,
        rows: usize,
        cols: usize,
        with_bias: bool,
    ) -> Result<Linear> {
        let w = self.f32_values(&Self::hf_name(name, false), &[rows, cols])?;
        let bias = if with_bias {
            Some(self.f32_values(&Self::hf_name(name, true), &[rows])?)
        } else {
            None
        };
        Linear::new(rows, cols, Weight::F32(w), bias)
    }

    fn vector(&mut self, name: TensorName, len: usize) -> Result<Vec<f32>> {
        self.f32_values(&Self::hf_name(name, false), &[len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(layers: &str, extra: &str) -> String {
        format!(
            r#"{{"model_type": "llama", "vocab_size": 32, "hidden_size": 16,
                "intermediate_size": 32, "num_hidden_layers": {layers},
                "num_attention_heads": 2, "num_key_value_heads": 1{extra}}}"#
        )
    }

    /// Sizes that would make loading allocate without bound (or wrap) are refused by the
    /// config check, before anything is sized by them.
    #[test]
    fn absurd_sizes_are_config_errors() {
        let llama3 = r#", "rope_scaling": {"rope_type": "llama3"}"#;
        assert!(parse_config(&config("2", "")).is_ok());
        assert!(parse_config(&config("2", llama3)).is_ok());
        for text in [
            config("1000000000000", ""),
            config("2", &format!(r#", "head_dim": 17179869184{llama3}"#)),
            config("2", r#", "head_dim": 9223372036854776096"#),
        ] {
            match parse_config(&text) {
                Err(ModelError::BadConfig(m)) => assert!(m.contains("at most"), "{m}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        // 2^60 heads of 64 wrap a usize: refused, not wrapped into a plausible width.
        let text = config("2", "")
            .replace(
                r#""num_attention_heads": 2"#,
                r#""num_attention_heads": 1152921504606846976"#,
            )
            .replace(
                r#""num_key_value_heads": 1"#,
                r#""num_key_value_heads": 1, "head_dim": 64"#,
            );
        match parse_config(&text) {
            Err(ModelError::BadConfig(m)) => assert!(m.contains("overflow"), "{m}"),
            other => panic!("{text}: {other:?}"),
        }
    }

    /// A safetensors file: the header's length, the JSON header, then `data`.
    fn safetensors(len: u64, header: &str, data: &[u8]) -> Vec<u8> {
        let mut b = len.to_le_bytes().to_vec();
        b.extend(header.as_bytes());
        b.extend(data);
        b
    }

    fn refusal(bytes: &[u8]) -> String {
        match HfSource::from_bytes(Path::new("<test>"), bytes) {
            Err(ModelError::BadSafetensors { reason, .. }) => reason,
            Err(e) => panic!("not a bad-safetensors error: {e}"),
            Ok(_) => panic!("a hostile header was accepted"),
        }
    }

    /// A header length past the bytes, and tensors whose shapes claim more than their
    /// data offsets give (or wrap), are refused before anything is sized by them.
    #[test]
    fn safetensors_sizes_past_the_bytes_are_refused() {
        let ok = r#"{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        assert!(HfSource::from_bytes(
            Path::new("<test>"),
            &safetensors(ok.len() as u64, ok, &[0; 8])
        )
        .is_ok());
        for len in [u64::MAX, 1 << 62, 1 << 26, ok.len() as u64 + 9] {
            let r = refusal(&safetensors(len, ok, &[0; 8]));
            assert!(r.contains("header"), "{len}: {r}");
        }
        for shape in [
            "[1099511627776,1099511627776]",
            "[18446744073709551615,2]",
            "[1,1,1,1,1,1,1,1,1,4611686018427387904]",
        ] {
            let h = format!(r#"{{"t":{{"dtype":"F32","shape":{shape},"data_offsets":[0,8]}}}}"#);
            let r = refusal(&safetensors(h.len() as u64, &h, &[0; 8]));
            assert!(!r.is_empty(), "{shape}");
        }
        let h = r#"{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}}"#;
        refusal(&safetensors(h.len() as u64, h, &[0; 8]));
    }

    /// A corrupt weights file is named as such, not as a bad config.
    #[test]
    fn corrupt_safetensors_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let f = dir.path().join("model.safetensors");
        std::fs::write(&f, b"\xff\xff\xff\xff\xff\xff\xff\x7f not safetensors").expect("write");
        match HfSource::open(dir.path()) {
            Err(ModelError::BadSafetensors { path, .. }) => assert_eq!(path, f),
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("a corrupt file loaded"),
        }
    }
}
