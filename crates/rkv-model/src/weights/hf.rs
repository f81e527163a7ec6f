//! Loading from a Hugging Face model directory: `config.json` and `*.safetensors`.
//!
//! Owns Hugging Face naming (`model.layers.N.self_attn.q_proj.weight`, ...), the
//! `config.json` side of config parsing, and reading `*.safetensors` files (the header
//! checked up front, each tensor read when it is loaded, held as stored).
//! Must not know: the maths of the layers.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use serde::Deserialize;

use super::gguf::ReadSeek;
use super::{le_u16s, TensorName, TensorSource, WeightMode};
use crate::config::{Arch, ModelConfig};
use crate::error::{ModelError, Result};
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

/// Most bytes a safetensors header may take (the safetensors crate's bound).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Where one tensor lies: in which file, at which byte, with which type and shape.
struct Entry {
    file: usize,
    dtype: String,
    shape: Vec<usize>,
    start: u64, // from the start of the file
    len: usize, // bytes
}

/// The tensors of a Hugging Face directory's `*.safetensors` files, read one at a time
/// when a layer asks for it, straight into the type it is held as: the files' headers are
/// parsed up front; a dense weight stays f16 or bf16 as stored (f32 with
/// [`WeightMode::F32`]). So loading never holds more than the weights plus the tensor
/// being read: peak memory is about the files' size, not twice it.
pub struct HfSource {
    files: Vec<(PathBuf, Box<dyn ReadSeek>)>,
    entries: HashMap<String, Entry>,
    mode: WeightMode,
}

impl HfSource {
    /// Opens every `*.safetensors` file of `dir` and reads their headers.
    pub fn open(dir: &Path, mode: WeightMode) -> Result<Self> {
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
        let mut src = Self {
            files: Vec::new(),
            entries: HashMap::new(),
            mode,
        };
        for f in files {
            let file = File::open(&f).map_err(|source| ModelError::Io {
                path: f.clone(),
                source,
            })?;
            src.add_file(&f, Box::new(BufReader::new(file)))?;
        }
        Ok(src)
    }

    /// Reads one safetensors file held whole in memory; `label` names it in errors. The
    /// header's declared length is checked against `bytes` before it is read, and every
    /// tensor's shape against its data offsets, so nothing is sized by a field the bytes
    /// cannot back.
    pub fn from_bytes(label: &Path, bytes: &[u8]) -> Result<Self> {
        let mut src = Self {
            files: Vec::new(),
            entries: HashMap::new(),
            mode: WeightMode::Native,
        };
        src.add_file(label, Box::new(std::io::Cursor::new(bytes.to_vec())))?;
        Ok(src)
    }

    /// Parses the header of one file and records its tensors.
    fn add_file(&mut self, label: &Path, mut r: Box<dyn ReadSeek>) -> Result<()> {
        let bad = |reason: String| ModelError::BadSafetensors {
            path: label.to_path_buf(),
            reason,
        };
        let io = |source| ModelError::Io {
            path: label.to_path_buf(),
            source,
        };
        let file_len = r.seek(SeekFrom::End(0)).map_err(io)?;
        r.seek(SeekFrom::Start(0)).map_err(io)?;
        let mut n8 = [0u8; 8];
        if file_len < 8 {
            return Err(bad(format!(
                "no header length: the file has {file_len} bytes"
            )));
        }
        r.read_exact(&mut n8).map_err(io)?;
        let n = u64::from_le_bytes(n8);
        if n > MAX_HEADER_BYTES || n > file_len - 8 {
            return Err(bad(format!(
                "a header of {n} bytes does not fit a file of {file_len} bytes \
                 (or exceeds {MAX_HEADER_BYTES})"
            )));
        }
        let mut header = vec![0u8; n as usize];
        r.read_exact(&mut header).map_err(io)?;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| bad(format!("header: {e}")))?;
        let data_len = file_len - 8 - n;
        let file = self.files.len();
        for (name, v) in header {
            if name == "__metadata__" {
                continue;
            }
            let e = parse_entry(&name, &v, (file, 8 + n), data_len).map_err(bad)?;
            self.entries.insert(name, e);
        }
        self.files.push((label.to_path_buf(), r));
        Ok(())
    }

    /// The raw bytes of tensor `name`, whose shape must be `want`.
    fn read(&mut self, name: &str, want: &[usize]) -> Result<(String, Vec<u8>)> {
        let e = self
            .entries
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        if e.shape != want {
            return Err(ModelError::BadShape {
                name: name.to_string(),
                got: e.shape.clone(),
                want: want.to_vec(),
            });
        }
        let (path, r) = &mut self.files[e.file];
        let io = |source| ModelError::Io {
            path: path.clone(),
            source,
        };
        let mut buf = vec![0u8; e.len];
        r.seek(SeekFrom::Start(e.start)).map_err(io)?;
        r.read_exact(&mut buf).map_err(io)?;
        Ok((e.dtype.clone(), buf))
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

    fn f32_values(&mut self, name: &str, want: &[usize]) -> Result<Vec<f32>> {
        let (dtype, b) = self.read(name, want)?;
        match dtype.as_str() {
            "F32" => Ok(b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()),
            "F16" => Ok(le_u16s(&b).map(|h| f16::from_bits(h).to_f32()).collect()),
            "BF16" => Ok(le_u16s(&b).map(|h| bf16::from_bits(h).to_f32()).collect()),
            other => Err(ModelError::UnsupportedDtype {
                tensor: name.to_string(),
                dtype: other.to_string(),
            }),
        }
    }

    /// A weight matrix held as stored (f16, bf16, f32), or f32 in [`WeightMode::F32`].
    fn weight(&mut self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        let dtype = self.entries.get(name).map(|e| e.dtype.clone());
        match (self.mode, dtype.as_deref()) {
            (WeightMode::Native, Some("F16")) => {
                let (_, b) = self.read(name, &[rows, cols])?;
                Ok(Weight::F16(le_u16s(&b).map(f16::from_bits).collect()))
            }
            (WeightMode::Native, Some("BF16")) => {
                let (_, b) = self.read(name, &[rows, cols])?;
                Ok(Weight::BF16(le_u16s(&b).map(bf16::from_bits).collect()))
            }
            _ => Ok(Weight::F32(self.f32_values(name, &[rows, cols])?)),
        }
    }
}

/// Bytes per element of a safetensors dtype (`None`: not one rkv reads).
fn dtype_bytes(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2" => 1,
        _ => return None,
    })
}

/// One header entry of file `at.0`, checked: its data lies inside the file's `data_len`
/// bytes (which start at byte `at.1`) and holds exactly its shape's elements.
fn parse_entry(
    name: &str,
    v: &serde_json::Value,
    at: (usize, u64),
    data_len: u64,
) -> std::result::Result<Entry, String> {
    let dtype = v["dtype"]
        .as_str()
        .ok_or_else(|| format!("tensor `{name}`: no dtype"))?
        .to_string();
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .ok_or_else(|| format!("tensor `{name}`: no shape"))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("tensor `{name}`: a dimension is not a size"))?;
    let offsets: Vec<u64> = v["data_offsets"]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default();
    let [start, end] = offsets[..] else {
        return Err(format!("tensor `{name}`: data_offsets are not two offsets"));
    };
    if start > end || end > data_len {
        return Err(format!(
            "tensor `{name}`: data_offsets [{start}, {end}] outside the {data_len} bytes of data"
        ));
    }
    let len = usize::try_from(end - start).map_err(|_| format!("tensor `{name}` is too large"))?;
    if let Some(size) = dtype_bytes(&dtype) {
        let need = shape
            .iter()
            .try_fold(size, |n, &d| n.checked_mul(d))
            .ok_or_else(|| format!("tensor `{name}`: shape {shape:?} overflows"))?;
        if need != len {
            return Err(format!(
                "tensor `{name}`: shape {shape:?} of {dtype} needs {need} bytes, its data_offsets give {len}"
            ));
        }
    }
    Ok(Entry {
        file: at.0,
        dtype,
        shape,
        start: at.1 + start,
        len,
    })
}

impl TensorSource for HfSource {
    fn has(&self, name: TensorName, bias: bool) -> bool {
        self.entries.contains_key(&Self::hf_name(name, bias))
    }

    fn linear(
        &mut self,
        name: TensorName,
        rows: usize,
        cols: usize,
        with_bias: bool,
    ) -> Result<Linear> {
        let w = self.weight(&Self::hf_name(name, false), rows, cols)?;
        let bias = if with_bias {
            Some(self.f32_values(&Self::hf_name(name, true), &[rows])?)
        } else {
            None
        };
        Linear::new(rows, cols, w, bias)
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
        match HfSource::open(dir.path(), WeightMode::Native) {
            Err(ModelError::BadSafetensors { path, .. }) => assert_eq!(path, f),
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("a corrupt file loaded"),
        }
    }
}
