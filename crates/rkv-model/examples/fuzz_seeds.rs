//! Writes the seed corpus of the fuzz targets into `fuzz/corpus/<target>/`: tiny GGUF
//! models (F32, F16, Q8_0, Q4_0, Q4_1; Llama, Qwen2, Qwen3) with byte-level and
//! SentencePiece vocabularies, truncations of them, a tiny safetensors file in three
//! dtypes, `config.json`s, `tokenizer.json`s and chat templates. Given the default model
//! (`SmolLM2-135M-Instruct.Q4_1.gguf`), also its first 64 KiB as they are, its metadata
//! (vocabulary cut to its first tokens, shapes shrunk, tensors of its names and types
//! re-made to fit) and its chat template.
//!
//! `cargo run --release -p rkv-model --example fuzz_seeds -- FUZZ_DIR [DEFAULT_MODEL]`
//! Every file stays under 64 KiB; the output is the same on every run.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use serde_json::json;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::AddedToken;

const MAX_SEED: usize = 64 * 1024;

type AnyResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Deterministic values in [-1, 1): a 64-bit LCG.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn values(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

struct Seeds {
    root: PathBuf,
}

impl Seeds {
    fn put(&self, target: &str, name: &str, bytes: &[u8]) -> AnyResult<()> {
        let bytes = &bytes[..bytes.len().min(MAX_SEED - 1)];
        let dir = self.root.join("corpus").join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), bytes)?;
        Ok(())
    }
}

/// Shapes of a tiny GGUF model.
struct Shape {
    arch: &'static str,
    hidden: usize,
    ffn: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

fn strs<S: AsRef<str>>(v: &[S]) -> Value {
    Value::Array(
        v.iter()
            .map(|s| Value::String(s.as_ref().to_owned()))
            .collect(),
    )
}

/// The 256 byte-level symbols, then `he`, `hel`, two chat markers and a user token.
fn byte_level_vocab() -> Vec<(&'static str, Value)> {
    let mut tokens: Vec<String> = ByteLevel::alphabet()
        .into_iter()
        .map(String::from)
        .collect();
    tokens.sort();
    let mut types = vec![1i32; tokens.len()];
    for (t, ty) in [
        ("he", 1),
        ("hel", 1),
        ("<|im_start|>", 3),
        ("<|im_end|>", 3),
        ("<tool>", 4),
    ] {
        tokens.push(t.to_owned());
        types.push(ty);
    }
    let eos = (tokens.len() - 2) as u32;
    vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("smollm".into())),
        ("tokenizer.ggml.tokens", strs(&tokens)),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.merges", strs(&["h e", "he l", "x y"])),
        ("tokenizer.ggml.eos_token_id", Value::U32(eos)),
        ("tokenizer.ggml.bos_token_id", Value::U32(eos - 1)),
        ("tokenizer.chat_template", Value::String(CHATML.into())),
    ]
}

/// `<unk>`, `<s>`, `</s>`, the 256 byte tokens, then a few scored words.
fn sentencepiece_vocab() -> Vec<(&'static str, Value)> {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2i32, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let mut scores = vec![0.0f32; tokens.len()];
    for (i, w) in [
        "\u{2581}",
        "h",
        "e",
        "l",
        "o",
        "he",
        "ll",
        "hell",
        "hello",
        "\u{2581}hello",
    ]
    .iter()
    .enumerate()
    {
        tokens.push((*w).to_owned());
        types.push(1);
        scores.push(-(i as f32));
    }
    vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strs(&tokens)),
        (
            "tokenizer.ggml.scores",
            Value::Array(scores.into_iter().map(Value::F32).collect()),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.unknown_token_id", Value::U32(0)),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(true)),
    ]
}

fn vocab_len(vocab: &[(&str, Value)]) -> usize {
    vocab
        .iter()
        .find_map(|(k, v)| match (k, v) {
            (&"tokenizer.ggml.tokens", Value::Array(a)) => Some(a.len()),
            _ => None,
        })
        .unwrap_or(0)
}

/// A tensor of `dims` (row-major, `[rows, cols]` as rkv names them) in `dtype`.
fn tensor(rng: &mut Lcg, dims: &[usize], dtype: GgmlDType) -> AnyResult<QTensor> {
    let n = dims.iter().product();
    let t = Tensor::from_vec(rng.values(n, 0.5), dims, &Device::Cpu)?;
    Ok(QTensor::quantize(&t, dtype)?)
}

/// The tensors of a one-layer model of `shape` with `vocab` tokens: matrices in `dtype`
/// (or `dtypes[name]`), norms and biases in F32; `output.weight` unless `tied`.
fn tensors(
    shape: &Shape,
    vocab: usize,
    dtype: GgmlDType,
    dtypes: &HashMap<String, GgmlDType>,
    tied: bool,
) -> AnyResult<Vec<(String, QTensor)>> {
    let mut rng = Lcg(vocab as u64 * 31 + shape.hidden as u64);
    let (h, q, kv, ff) = (
        shape.hidden,
        shape.heads * shape.head_dim,
        shape.kv_heads * shape.head_dim,
        shape.ffn,
    );
    let mut specs: Vec<(String, Vec<usize>, bool)> = vec![
        ("token_embd.weight".into(), vec![vocab, h], true),
        ("output_norm.weight".into(), vec![h], false),
        ("blk.0.attn_norm.weight".into(), vec![h], false),
        ("blk.0.attn_q.weight".into(), vec![q, h], true),
        ("blk.0.attn_k.weight".into(), vec![kv, h], true),
        ("blk.0.attn_v.weight".into(), vec![kv, h], true),
        ("blk.0.attn_output.weight".into(), vec![h, q], true),
        ("blk.0.ffn_norm.weight".into(), vec![h], false),
        ("blk.0.ffn_gate.weight".into(), vec![ff, h], true),
        ("blk.0.ffn_up.weight".into(), vec![ff, h], true),
        ("blk.0.ffn_down.weight".into(), vec![h, ff], true),
    ];
    if !tied {
        specs.push(("output.weight".into(), vec![vocab, h], true));
    }
    if shape.arch == "qwen2" {
        for (n, d) in [("q", q), ("k", kv), ("v", kv)] {
            specs.push((format!("blk.0.attn_{n}.bias"), vec![d], false));
        }
    }
    if shape.arch == "qwen3" {
        for n in ["q", "k"] {
            specs.push((
                format!("blk.0.attn_{n}_norm.weight"),
                vec![shape.head_dim],
                false,
            ));
        }
    }
    specs
        .into_iter()
        .map(|(name, dims, matrix)| {
            let dt = match dtypes.get(&name) {
                Some(&dt) => dt,
                None if matrix => dtype,
                None => GgmlDType::F32,
            };
            // GGUF lists dims innermost first; candle's writer reverses `[rows, cols]`.
            let t = tensor(&mut rng, &dims, dt)?;
            Ok((name, t))
        })
        .collect()
}

fn arch_metadata(shape: &Shape, context: u32) -> Vec<(String, Value)> {
    let p = shape.arch;
    vec![
        ("general.architecture".into(), Value::String(p.into())),
        (
            format!("{p}.embedding_length"),
            Value::U32(shape.hidden as u32),
        ),
        (
            format!("{p}.feed_forward_length"),
            Value::U32(shape.ffn as u32),
        ),
        (format!("{p}.block_count"), Value::U32(1)),
        (
            format!("{p}.attention.head_count"),
            Value::U32(shape.heads as u32),
        ),
        (
            format!("{p}.attention.head_count_kv"),
            Value::U32(shape.kv_heads as u32),
        ),
        (
            format!("{p}.attention.key_length"),
            Value::U32(shape.head_dim as u32),
        ),
        (format!("{p}.context_length"), Value::U32(context)),
        (
            format!("{p}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-5),
        ),
        (format!("{p}.rope.freq_base"), Value::F32(10000.0)),
    ]
}

fn write_gguf(metadata: &[(String, Value)], tensors: &[(String, QTensor)]) -> AnyResult<Vec<u8>> {
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let mut out = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut out, &md, &ts)?;
    Ok(out.into_inner())
}

fn tiny_ggufs(seeds: &Seeds) -> AnyResult<()> {
    let models: [(&str, Shape, GgmlDType, bool, bool); 5] = [
        (
            "llama_f32_bytelevel",
            shape("llama", 2, 1),
            GgmlDType::F32,
            true,
            false,
        ),
        (
            "llama_q8_0_spm",
            shape("llama", 2, 2),
            GgmlDType::Q8_0,
            false,
            true,
        ),
        (
            "qwen2_q4_0_bytelevel",
            shape("qwen2", 2, 1),
            GgmlDType::Q4_0,
            true,
            false,
        ),
        (
            "qwen3_f16_bytelevel",
            shape("qwen3", 2, 1),
            GgmlDType::F16,
            false,
            false,
        ),
        (
            "llama_q4_1_spm",
            shape("llama", 4, 2),
            GgmlDType::Q4_1,
            true,
            true,
        ),
    ];
    for (name, shape, dtype, tied, spm) in models {
        let vocab = if spm {
            sentencepiece_vocab()
        } else {
            byte_level_vocab()
        };
        let n = vocab_len(&vocab);
        let mut md = arch_metadata(&shape, 64);
        md.extend(vocab.into_iter().map(|(k, v)| (k.to_owned(), v)));
        let ts = tensors(&shape, n, dtype, &HashMap::new(), tied)?;
        let bytes = write_gguf(&md, &ts)?;
        assert!(bytes.len() < MAX_SEED, "{name}: {} bytes", bytes.len());
        seeds.put("gguf_model", &format!("{name}.gguf"), &bytes)?;
        for cut in [8usize, 24, bytes.len() / 3, bytes.len() - 1] {
            seeds.put(
                "gguf_model",
                &format!("{name}_cut{cut}.gguf"),
                &bytes[..cut],
            )?;
        }
        // The vocabulary alone, as a GGUF with no tensors.
        let vocab_only = write_gguf(&md, &[])?;
        seeds.put("gguf_vocab", &format!("{name}_vocab.gguf"), &vocab_only)?;
    }
    Ok(())
}

fn shape(arch: &'static str, heads: usize, kv_heads: usize) -> Shape {
    Shape {
        arch,
        hidden: 32,
        ffn: 32,
        heads,
        kv_heads,
        head_dim: 32 / heads,
    }
}

/// Seeds from the default model: its first 64 KiB, its metadata over a tiny shape with
/// its tensors' names and types, and its chat template.
fn default_model_seeds(seeds: &Seeds, path: &Path) -> AnyResult<()> {
    let mut head = vec![0u8; MAX_SEED - 1];
    let mut f = File::open(path)?;
    std::io::Read::read_exact(&mut f, &mut head)?;
    seeds.put("gguf_model", "smollm2_first64k.gguf", &head)?;
    seeds.put("gguf_vocab", "smollm2_first64k.gguf", &head)?;

    let mut f = File::open(path)?;
    let content = Content::read(&mut f)?;
    let arch = match content.metadata.get("general.architecture") {
        Some(Value::String(s)) if s == "llama" => "llama",
        other => return Err(format!("default model architecture {other:?}").into()),
    };
    let keep = 320usize;
    let tokens: Vec<String> = match content.metadata.get("tokenizer.ggml.tokens") {
        Some(Value::Array(a)) => a
            .iter()
            .take(keep)
            .filter_map(|v| v.to_string().ok().cloned())
            .collect(),
        _ => return Err("default model has no token list".into()),
    };
    let known: std::collections::HashSet<&str> = tokens.iter().map(String::as_str).collect();
    let mut md: Vec<(String, Value)> = Vec::new();
    let tiny = Shape {
        arch,
        hidden: 32,
        ffn: 32,
        heads: 2,
        kv_heads: 1,
        head_dim: 16,
    };
    let shrunk: HashMap<String, Value> = arch_metadata(&tiny, 64).into_iter().collect();
    let mut keys: Vec<&String> = content.metadata.keys().collect();
    keys.sort();
    for key in keys {
        let value = &content.metadata[key];
        let value = match (key.as_str(), value) {
            (k, _) if shrunk.contains_key(k) => shrunk[k].clone(),
            ("tokenizer.ggml.tokens", _) => strs(&tokens),
            ("tokenizer.ggml.merges", Value::Array(a)) => Value::Array(
                a.iter()
                    .filter(|m| {
                        m.to_string()
                            .ok()
                            .and_then(|m| m.split_once(' '))
                            .is_some_and(|(l, r)| {
                                known.contains(l)
                                    && known.contains(r)
                                    && known.contains([l, r].concat().as_str())
                            })
                    })
                    .cloned()
                    .collect(),
            ),
            (_, Value::Array(a)) if a.len() > keep => {
                Value::Array(a.iter().take(keep).cloned().collect())
            }
            (_, v) => v.clone(),
        };
        md.push((key.clone(), value));
    }
    for (k, v) in shrunk {
        if !content.metadata.contains_key(&k) {
            md.push((k, v));
        }
    }
    md.sort_by(|a, b| a.0.cmp(&b.0));
    let dtypes: HashMap<String, GgmlDType> = content
        .tensor_infos
        .iter()
        .map(|(k, info)| (k.clone(), info.ggml_dtype))
        .collect();
    let tied = !content.tensor_infos.contains_key("output.weight");
    let ts = tensors(&tiny, tokens.len(), GgmlDType::Q4_1, &dtypes, tied)?;
    let bytes = write_gguf(&md, &ts)?;
    seeds.put("gguf_model", "smollm2_shrunk.gguf", &bytes)?;
    seeds.put(
        "gguf_vocab",
        "smollm2_shrunk_vocab.gguf",
        &write_gguf(&md, &[])?,
    )?;
    if let Some(Value::String(t)) = content.metadata.get("tokenizer.chat_template") {
        seeds.put("chat_template", "smollm2.jinja", t.as_bytes())?;
    }
    Ok(())
}

/// The shapes of `rkv_model::untrusted::tiny_config` in Hugging Face names.
fn safetensors_seeds(seeds: &Seeds) -> AnyResult<()> {
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;
    let cfg = rkv_model::untrusted::tiny_config();
    let (h, ff, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let (q, kv) = (cfg.q_dim(), cfg.kv_dim());
    let specs: Vec<(&str, Vec<usize>)> = vec![
        ("model.embed_tokens.weight", vec![v, h]),
        ("model.norm.weight", vec![h]),
        ("lm_head.weight", vec![v, h]),
        ("model.layers.0.input_layernorm.weight", vec![h]),
        ("model.layers.0.post_attention_layernorm.weight", vec![h]),
        ("model.layers.0.self_attn.q_proj.weight", vec![q, h]),
        ("model.layers.0.self_attn.k_proj.weight", vec![kv, h]),
        ("model.layers.0.self_attn.v_proj.weight", vec![kv, h]),
        ("model.layers.0.self_attn.o_proj.weight", vec![h, q]),
        ("model.layers.0.mlp.gate_proj.weight", vec![ff, h]),
        ("model.layers.0.mlp.up_proj.weight", vec![ff, h]),
        ("model.layers.0.mlp.down_proj.weight", vec![h, ff]),
    ];
    let mut rng = Lcg(7);
    let values: Vec<Vec<f32>> = specs
        .iter()
        .map(|(_, d)| rng.values(d.iter().product(), 0.5))
        .collect();
    for (label, dtype) in [
        ("f32", Dtype::F32),
        ("f16", Dtype::F16),
        ("bf16", Dtype::BF16),
    ] {
        let bytes: Vec<Vec<u8>> = values
            .iter()
            .map(|vals| match dtype {
                Dtype::F16 => vals
                    .iter()
                    .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                    .collect(),
                Dtype::BF16 => vals
                    .iter()
                    .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
                    .collect(),
                _ => vals.iter().flat_map(|x| x.to_le_bytes()).collect(),
            })
            .collect();
        let views: Vec<(&str, TensorView)> = specs
            .iter()
            .zip(&bytes)
            .map(|((name, dims), b)| Ok((*name, TensorView::new(dtype, dims.clone(), b)?)))
            .collect::<AnyResult<_>>()?;
        let file = safetensors::tensor::serialize(views, None)?;
        seeds.put("safetensors", &format!("tiny_{label}.safetensors"), &file)?;
        if dtype == Dtype::F32 {
            for cut in [8usize, 100, file.len() / 2, file.len() - 1] {
                seeds.put(
                    "safetensors",
                    &format!("tiny_{label}_cut{cut}.safetensors"),
                    &file[..cut],
                )?;
            }
        }
    }
    Ok(())
}

fn config_seeds(seeds: &Seeds) -> AnyResult<()> {
    let base = json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152,
        "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": true,
        "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"
    });
    let mut qwen2 = base.clone();
    qwen2["model_type"] = json!("qwen2");
    qwen2["num_attention_heads"] = json!(12);
    qwen2["num_key_value_heads"] = json!(2);
    qwen2["hidden_size"] = json!(1536);
    let mut qwen3 = qwen2.clone();
    qwen3["model_type"] = json!("qwen3");
    qwen3["head_dim"] = json!(128);
    let mut llama3 = base.clone();
    llama3["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192});
    llama3["head_dim"] = json!(64);
    for (name, v) in [
        ("llama", base),
        ("qwen2", qwen2),
        ("qwen3", qwen3),
        ("llama3", llama3),
    ] {
        seeds.put(
            "config_json",
            &format!("{name}.json"),
            serde_json::to_string_pretty(&v)?.as_bytes(),
        )?;
    }
    Ok(())
}

fn tokenizer_seeds(seeds: &Seeds) -> AnyResult<()> {
    // Byte-level BPE with a merge and three specials (as rkv-model's tokenizer tests).
    let mut vocab: Vec<String> = ByteLevel::alphabet()
        .into_iter()
        .map(String::from)
        .collect();
    vocab.sort();
    vocab.push("he".into());
    let map: tokenizers::models::bpe::Vocab = vocab
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(map, vec![("h".into(), "e".into())])
        .build()?;
    let mut hf = tokenizers::Tokenizer::new(bpe);
    hf.with_pre_tokenizer(Some(ByteLevel::new(false, false, true)));
    hf.with_decoder(Some(ByteLevel::default()));
    hf.add_special_tokens(&[
        AddedToken::from("<s>", true),
        AddedToken::from("</s>", true),
        AddedToken::from("<|im_end|>", true),
    ]);
    seeds.put(
        "tokenizer_json",
        "bytelevel_bpe.json",
        hf.to_string(false)?.as_bytes(),
    )?;

    // WordLevel over whitespace (as rkv-engine's tiny models).
    let mut words = serde_json::Map::new();
    for (i, s) in ["<unk>", "<s>", "</s>"].iter().enumerate() {
        words.insert((*s).into(), json!(i));
    }
    for i in 3..40 {
        words.insert(format!("w{i}"), json!(i));
    }
    let added: Vec<_> = ["<unk>", "<s>", "</s>"]
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({"id": i, "content": s, "single_word": false, "lstrip": false,
                              "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let wordlevel = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "<unk>"},
    });
    seeds.put(
        "tokenizer_json",
        "wordlevel.json",
        wordlevel.to_string().as_bytes(),
    )?;

    // SentencePiece-style BPE with byte fallback, a normalizer and a decoder sequence.
    let mut spm_vocab = serde_json::Map::new();
    let mut id = 0;
    for t in ["<unk>", "<s>", "</s>"] {
        spm_vocab.insert(t.into(), json!(id));
        id += 1;
    }
    for b in 0..=255u8 {
        spm_vocab.insert(format!("<0x{b:02X}>"), json!(id));
        id += 1;
    }
    for t in [
        "\u{2581}",
        "h",
        "e",
        "l",
        "o",
        "he",
        "ll",
        "hell",
        "hello",
        "\u{2581}hello",
    ] {
        spm_vocab.insert(t.into(), json!(id));
        id += 1;
    }
    let spm = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u{2581}"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}]},
        "pre_tokenizer": null, "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": spm_vocab,
            "merges": [["h", "e"], ["l", "l"], ["he", "ll"], ["hell", "o"], ["\u{2581}", "hello"]]},
    });
    seeds.put(
        "tokenizer_json",
        "sentencepiece_bpe.json",
        spm.to_string().as_bytes(),
    )?;
    Ok(())
}

const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Templates in the styles of Llama 3, Qwen2.5 (with tools and a namespace), a
/// DeepSeek-R1 distill (think-stripping), and Python-method use.
const TEMPLATES: [(&str, &str); 5] = [
    ("chatml.jinja", CHATML),
    (
        "llama3.jinja",
        "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}",
    ),
    (
        "qwen_tools.jinja",
        "{%- if tools %}{{- '<|im_start|>system\n' }}{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- endif %}{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}{{- '<|im_end|>\n' }}{%- else %}{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{%- endif %}{%- endif %}{%- set ns = namespace(last_user=0) %}{%- for message in messages %}{%- if message.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- elif message.role == 'assistant' %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}",
    ),
    (
        "r1_distill.jinja",
        "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, system_prompt='') %}{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}{%- endif %}{%- if message['role'] == 'assistant' %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{ '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}{%- endif %}{%- endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜><think>\\n' }}{% endif %}",
    ),
    (
        "python_methods.jinja",
        "{% for m in messages %}{{ m.role.upper() }}: {{ m.content.strip().replace('\\n', ' ')[:40] }}{{ m | tojson(indent=2) }}{% if loop.last %}{{ raise_exception('stop') if m.content.startswith('!') }}{% endif %}\n{% endfor %}{{ strftime_now('%Y-%m-%d') }}{{ '%s-%d'|format('a', 3) }}{{ [1,2,3]|join(',') }}{{ 'x' * 3 }}",
    ),
];

/// A template running every operator, filter and method the bounds wrap, and templates
/// growing values the bounds stop (so the fuzzer starts next to the checks).
const GROWING: [(&str, &str); 3] = [
    (
        "operators.jinja",
        include_str!("../tests/data/templates/operators.jinja"),
    ),
    (
        "doubling.jinja",
        "{% set ns = namespace(s='x', l=[1]) %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s + ns.s %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.s | length }}{{ ns.l | join(',') | length }}{{ ns.s * 2 }}",
    ),
    (
        "nesting.jinja",
        "{% set ns = namespace(l=[], m={}) %}{% for i in range(300) %}{% set ns.l = [ns.l, i] %}{% set ns.m = {'k': ns.m} %}{% endfor %}{{ ns.l | tojson(indent=2) | length }}{{ ns.m | string | length }}{{ 'a\\nb' | indent(4) }}{{ ns.l | batch(2) | list | length }}",
    ),
];

fn main() -> AnyResult<()> {
    let mut args = std::env::args_os().skip(1);
    let root = PathBuf::from(
        args.next()
            .ok_or("usage: fuzz_seeds FUZZ_DIR [DEFAULT_MODEL]")?,
    );
    let seeds = Seeds { root };
    tiny_ggufs(&seeds)?;
    match args.next() {
        Some(model) => default_model_seeds(&seeds, Path::new(&model))?,
        None => eprintln!("no default model given: its seeds are not written"),
    }
    safetensors_seeds(&seeds)?;
    config_seeds(&seeds)?;
    tokenizer_seeds(&seeds)?;
    for (name, text) in TEMPLATES.into_iter().chain(GROWING) {
        seeds.put("chat_template", name, text.as_bytes())?;
    }
    Ok(())
}
