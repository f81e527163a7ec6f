//! Random-weight GGUF files with the exact tensor shapes and quantisation layout of
//! published models, for speed measurements that need no download.
//!
//! The shapes ([`BenchShape`]) are the published configs' (DeepSeek-R1-Distill-Qwen-1.5B,
//! R1-Distill-Llama-8B). The layout is llama.cpp's Q4_K_M as its
//! `llama_tensor_get_type` chooses it (`quant_layout.rs`): Q6_K for `output.weight`, and
//! for `attn_v` and `ffn_down` in the layers its `use_more_bits` picks; Q4_K everywhere
//! else; norms and biases f32. Quants are random
//! bytes under scales that keep activations finite; the tokenizer and chat template
//! are copied from a donor GGUF (the default model) and padded with `[PAD_i]` tokens to
//! the shape's vocabulary. The weights mean nothing: correctness stays with the parity
//! tests; these files are for timing the kernels on the shapes users run.
//!
//! Must not know: how a model runs, caches, the CLI.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use candle_core::quantized::{ggml_file::qtensor_from_ggml, gguf_file, GgmlDType, QTensor};
use candle_core::Device;
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::error::{ModelError, Result};
use crate::weights::quant_layout::{target_type, FileType};

/// A published model's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchShape {
    pub name: &'static str,
    pub arch: &'static str, // GGUF general.architecture
    pub n_layers: usize,
    pub hidden: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub rope_theta: f32,
    pub context: usize,
    pub qkv_bias: bool,
}

/// The shapes `rkv bench model` writes, by name.
pub const BENCH_SHAPES: [BenchShape; 2] = [
    // huggingface.co/deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B config.json
    BenchShape {
        name: "r1-distill-qwen-1.5b",
        arch: "qwen2",
        n_layers: 28,
        hidden: 1536,
        n_heads: 12,
        n_kv_heads: 2,
        head_dim: 128,
        ffn: 8960,
        vocab: 151936,
        rope_theta: 10000.0,
        context: 131072,
        qkv_bias: true,
    },
    // huggingface.co/deepseek-ai/DeepSeek-R1-Distill-Llama-8B config.json
    BenchShape {
        name: "r1-distill-llama-8b",
        arch: "llama",
        n_layers: 32,
        hidden: 4096,
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 128,
        ffn: 14336,
        vocab: 128256,
        rope_theta: 500000.0,
        context: 131072,
        qkv_bias: false,
    },
];

impl BenchShape {
    /// The shape called `name`, or an error listing the known ones.
    pub fn by_name(name: &str) -> Result<Self> {
        BENCH_SHAPES
            .iter()
            .find(|s| s.name == name)
            .copied()
            .ok_or_else(|| {
                let known: Vec<_> = BENCH_SHAPES.iter().map(|s| s.name).collect();
                ModelError::BadConfig(format!(
                    "unknown bench shape `{name}` (known: {})",
                    known.join(", ")
                ))
            })
    }

    /// Every tensor `(name, dims [rows, cols] or [n], type)` in GGUF order.
    pub fn tensors(&self) -> Vec<(String, Vec<usize>, GgmlDType)> {
        let (h, q, kv) = (
            self.hidden,
            self.n_heads * self.head_dim,
            self.n_kv_heads * self.head_dim,
        );
        let mut t: Vec<(String, Vec<usize>)> =
            vec![("token_embd.weight".into(), vec![self.vocab, h])];
        for i in 0..self.n_layers {
            let b = |s: &str| format!("blk.{i}.{s}");
            t.push((b("attn_norm.weight"), vec![h]));
            t.push((b("attn_q.weight"), vec![q, h]));
            t.push((b("attn_k.weight"), vec![kv, h]));
            t.push((b("attn_v.weight"), vec![kv, h]));
            if self.qkv_bias {
                t.push((b("attn_q.bias"), vec![q]));
                t.push((b("attn_k.bias"), vec![kv]));
                t.push((b("attn_v.bias"), vec![kv]));
            }
            t.push((b("attn_output.weight"), vec![h, q]));
            t.push((b("ffn_norm.weight"), vec![h]));
            t.push((b("ffn_gate.weight"), vec![self.ffn, h]));
            t.push((b("ffn_up.weight"), vec![self.ffn, h]));
            t.push((b("ffn_down.weight"), vec![h, self.ffn]));
        }
        t.push(("output_norm.weight".into(), vec![h]));
        t.push(("output.weight".into(), vec![self.vocab, h]));
        t.into_iter()
            .map(|(name, dims)| {
                let ty = target_type(FileType::Q4KM, &name, &dims, self.n_layers, true)
                    .unwrap_or(GgmlDType::F32);
                (name, dims, ty)
            })
            .collect()
    }
}

/// Random blocks of `dtype` for `elems` values, scales set so that each weight is a
/// few hundredths at most.
fn random_bytes(dtype: GgmlDType, elems: usize, rng: &mut StdRng) -> Vec<u8> {
    let blocks = elems / dtype.block_size();
    let size = dtype.type_size();
    let mut data = vec![0u8; blocks * size];
    match dtype {
        GgmlDType::F32 => {
            // Norm weights of one, biases of zero: the identity a fresh model starts at.
            let one = 1.0f32.to_le_bytes();
            for v in data.chunks_exact_mut(4) {
                v.copy_from_slice(&one);
            }
        }
        _ => rng.fill_bytes(&mut data),
    }
    let mut scale = |at: &mut [u8], lo: f32, hi: f32| {
        at.copy_from_slice(&f16::from_f32(rng.gen_range(lo..hi)).to_le_bytes());
    };
    for b in data.chunks_exact_mut(size) {
        match dtype {
            // d, dmin: |w| <= d * 63 * 15 + dmin * 63.
            GgmlDType::Q4K => {
                scale(&mut b[0..2], 1e-5, 4e-5);
                scale(&mut b[2..4], 1e-5, 4e-5);
            }
            // d last: |w| <= d * 128 * 32.
            GgmlDType::Q6K => scale(&mut b[208..210], 2e-6, 8e-6),
            _ => {}
        }
    }
    data
}

/// Writes `shape` in the Q4_K_M layout to `out`, with the tokenizer of `donor` (a GGUF
/// file with `tokenizer.*` metadata) padded to the shape's vocabulary.
///
/// # Errors
/// When `donor` cannot be read or has no tokenizer, or `out` cannot be written.
pub fn write_q4_k_m(shape: &BenchShape, donor: &Path, out: &Path, seed: u64) -> Result<()> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ModelError::Io { path, source }
    };
    let mut f = File::open(donor).map_err(io(donor))?;
    let content = gguf_file::Content::read(&mut f).map_err(|e| ModelError::BadGguf {
        path: donor.to_path_buf(),
        reason: crate::error::candle_message(&e),
    })?;
    let mut meta: Vec<(String, gguf_file::Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    pad_vocab(&mut meta, shape.vocab, donor)?;
    let p = shape.arch;
    let u32v = |x: usize| gguf_file::Value::U32(x as u32);
    meta.extend([
        (
            "general.architecture".into(),
            gguf_file::Value::String(p.into()),
        ),
        (
            "general.name".into(),
            gguf_file::Value::String(format!("rkv bench {}", shape.name)),
        ),
        (format!("{p}.block_count"), u32v(shape.n_layers)),
        (format!("{p}.context_length"), u32v(shape.context)),
        (format!("{p}.embedding_length"), u32v(shape.hidden)),
        (format!("{p}.feed_forward_length"), u32v(shape.ffn)),
        (format!("{p}.attention.head_count"), u32v(shape.n_heads)),
        (
            format!("{p}.attention.head_count_kv"),
            u32v(shape.n_kv_heads),
        ),
        (format!("{p}.attention.key_length"), u32v(shape.head_dim)),
        (format!("{p}.attention.value_length"), u32v(shape.head_dim)),
        (
            format!("{p}.attention.layer_norm_rms_epsilon"),
            gguf_file::Value::F32(1e-6),
        ),
        (
            format!("{p}.rope.freq_base"),
            gguf_file::Value::F32(shape.rope_theta),
        ),
        // llama.cpp's file type code of Q4_K_M.
        ("general.file_type".into(), gguf_file::Value::U32(15)),
    ]);
    meta.sort_by(|a, b| a.0.cmp(&b.0));

    let mut rng = StdRng::seed_from_u64(seed);
    let mut tensors = Vec::new();
    for (name, dims, dtype) in shape.tensors() {
        let elems = dims.iter().product();
        let bytes = random_bytes(dtype, elems, &mut rng);
        let t: QTensor = qtensor_from_ggml(dtype, &bytes, dims, &Device::Cpu)?;
        tensors.push((name, t));
    }
    let meta_refs: Vec<(&str, &gguf_file::Value)> =
        meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let mut w = BufWriter::new(File::create(out).map_err(io(out))?);
    gguf_file::write(&mut w, &meta_refs, &tensor_refs)?;
    std::io::Write::flush(&mut w).map_err(io(out))?;
    Ok(())
}

/// Pads `tokenizer.ggml.tokens` (and `token_type`, `scores` when present) to `vocab`.
fn pad_vocab(meta: &mut [(String, gguf_file::Value)], vocab: usize, donor: &Path) -> Result<()> {
    use gguf_file::Value;
    let have = meta
        .iter()
        .find_map(|(k, v)| match (k.as_str(), v) {
            ("tokenizer.ggml.tokens", Value::Array(a)) => Some(a.len()),
            _ => None,
        })
        .ok_or_else(|| ModelError::BadGguf {
            path: donor.to_path_buf(),
            reason: "no tokenizer.ggml.tokens to copy".into(),
        })?;
    if have > vocab {
        return Err(ModelError::BadConfig(format!(
            "donor vocabulary of {have} tokens exceeds the shape's {vocab}"
        )));
    }
    for (k, v) in meta.iter_mut() {
        let Value::Array(a) = v else { continue };
        match k.as_str() {
            "tokenizer.ggml.tokens" => {
                a.extend((have..vocab).map(|i| Value::String(format!("[PAD_{i}]"))))
            }
            "tokenizer.ggml.token_type" => a.resize(vocab, Value::I32(1)),
            "tokenizer.ggml.scores" => a.resize(vocab, Value::F32(0.0)),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_k_m_layout_follows_llama_cpp() {
        let s = BenchShape::by_name("r1-distill-qwen-1.5b").expect("known shape");
        let t = s.tensors();
        let ty = |n: &str| t.iter().find(|x| x.0 == n).map(|x| x.2);
        assert_eq!(ty("output.weight"), Some(GgmlDType::Q6K));
        assert_eq!(ty("token_embd.weight"), Some(GgmlDType::Q4K));
        // 28 layers: n/8 = 3, so layers 0-2 and 25-27, then 5, 8, ..., 23.
        let more: Vec<usize> = (0..28)
            .filter(|i| ty(&format!("blk.{i}.ffn_down.weight")) == Some(GgmlDType::Q6K))
            .collect();
        assert_eq!(
            more,
            vec![0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27]
        );
        assert_eq!(ty("blk.4.attn_v.weight"), Some(GgmlDType::Q4K));
        assert_eq!(ty("blk.5.attn_v.weight"), Some(GgmlDType::Q6K));
        assert_eq!(ty("blk.0.attn_q.bias"), Some(GgmlDType::F32));
        // Parameters: 1.78B with the untied head, as published.
        let params: usize = t.iter().map(|x| x.1.iter().product::<usize>()).sum();
        assert!((1_770_000_000..1_790_000_000).contains(&params), "{params}");
    }

    #[test]
    fn unknown_shape_lists_the_known_ones() {
        let e = BenchShape::by_name("gpt-5").unwrap_err().to_string();
        assert!(
            e.contains("r1-distill-qwen-1.5b") && e.contains("r1-distill-llama-8b"),
            "{e}"
        );
    }
}
