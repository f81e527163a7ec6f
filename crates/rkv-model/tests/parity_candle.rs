//! Architecture parity of rkv-model against candle-transformers 0.11.1.
//!
//! Tiny random f32 checkpoints (vocab 97, hidden 32, 2-3 layers, GQA and plain multi-head,
//! tied and untied embeddings) are written as Hugging Face `config.json` +
//! `model.safetensors` and loaded both by rkv (`HfSource` + `Transformer`, attention through
//! a naive contiguous KV cache, tests/common) and by candle-transformers' own `llama`,
//! `qwen2` (q/k/v biases) and `qwen3` (q/k norms, head_dim != hidden / heads) models.
//! Checked within 1e-4 max abs on the logits: every prompt position (candle's models only
//! return the last position, so each prefix is run through candle afresh), five
//! single-token decode steps, and a multi-token chunk after them.
//!
//! Also checks the GGUF side: a GGUF written from the same llama weights, with q/k rows
//! permuted the way llama.cpp's `convert_hf_to_gguf.py` does for adjacent-pair RoPE, must
//! give the Hugging Face model's logits and candle's `quantized_llama` logits on that file
//! (1e-4), while reading it with the half-split pairing must not (control). A Q8_0 GGUF
//! run natively quantised must stay close to its dequantised f32 run, and match candle's
//! `quantized_llama` on the same file (same Q8_0 activation quantisation).

mod common;

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{llama, quantized_llama, qwen2, qwen3};
use common::*;
use rkv_model::linear::Weight;
use rkv_model::rope::RopeStyle;
use rkv_model::weights::gguf::GgufSource;
use rkv_model::weights::{TensorName, TensorSource, WeightMode};
use rkv_model::{Arch, Transformer};

const TOL: f32 = 1e-4;
const PROMPT: usize = 7;
const DECODE: usize = 5;
const CHUNK: usize = 3;

struct CandleLlama {
    model: llama::Llama,
    cfg: llama::Config,
    cache: llama::Cache,
}

enum CandleModel {
    Llama(Box<CandleLlama>),
    Qwen2(qwen2::ModelForCausalLM),
    Qwen3(qwen3::ModelForCausalLM),
}

impl CandleModel {
    fn load(spec: &Spec, dir: &Path) -> Self {
        let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
        let tensors =
            candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap();
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        match spec.arch {
            "llama" => {
                let c: llama::LlamaConfig = serde_json::from_str(&text).unwrap();
                let cfg = c.into_config(false);
                let model = llama::Llama::load(vb, &cfg).unwrap();
                let cache = llama::Cache::new(true, DType::F32, &cfg, &Device::Cpu).unwrap();
                CandleModel::Llama(Box::new(CandleLlama { model, cfg, cache }))
            }
            "qwen2" => {
                let cfg: qwen2::Config = serde_json::from_str(&text).unwrap();
                CandleModel::Qwen2(qwen2::ModelForCausalLM::new(&cfg, vb).unwrap())
            }
            "qwen3" => {
                let cfg: qwen3::Config = serde_json::from_str(&text).unwrap();
                CandleModel::Qwen3(qwen3::ModelForCausalLM::new(&cfg, vb).unwrap())
            }
            other => panic!("no candle model for {other}"),
        }
    }

    /// Logits of the last of `tokens`, fed at absolute position `offset` onwards.
    fn forward(&mut self, tokens: &[u32], offset: usize) -> Vec<f32> {
        let input = Tensor::new(tokens, &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let logits = match self {
            CandleModel::Llama(l) => l.model.forward(&input, offset, &mut l.cache),
            CandleModel::Qwen2(m) => m.forward(&input, offset),
            CandleModel::Qwen3(m) => m.forward(&input, offset),
        };
        logits.unwrap().flatten_all().unwrap().to_vec1().unwrap()
    }

    fn reset(&mut self) {
        match self {
            CandleModel::Llama(l) => {
                l.cache = llama::Cache::new(true, DType::F32, &l.cfg, &Device::Cpu).unwrap()
            }
            CandleModel::Qwen2(m) => m.clear_kv_cache(),
            CandleModel::Qwen3(m) => m.clear_kv_cache(),
        }
    }
}

/// Runs `spec` through rkv and candle and returns the largest logit difference seen.
fn check_against_candle(spec: Spec, seed: u64) -> f32 {
    let dir = tempfile::tempdir().unwrap();
    let weights = spec.random_weights(seed);
    spec.write_hf(dir.path(), &weights);
    let rkv = load_rkv_hf(dir.path());
    let c = rkv.config();
    assert_eq!(c.arch, Arch::parse(spec.arch).unwrap());
    assert_eq!(
        (c.n_heads, c.n_kv_heads, c.head_dim, c.n_layers),
        (
            spec.n_heads,
            spec.n_kv_heads,
            spec.head_dim(),
            spec.n_layers
        )
    );
    assert_eq!(c.tie_embeddings, spec.tie);
    let mut cand = CandleModel::load(&spec, dir.path());

    let tokens = random_tokens(seed + 1, PROMPT + DECODE + CHUNK);
    let (prompt, rest) = tokens.split_at(PROMPT);
    let (decode, chunk) = rest.split_at(DECODE);
    let mut worst = 0f32;
    let mut check = |what: String, ours: &[f32], theirs: &[f32]| {
        let d = max_abs_diff(ours, theirs);
        assert!(
            d <= TOL,
            "{spec:?} {what}: max abs diff {d:e} (logit scale {})",
            max_abs(theirs)
        );
        // Guard against a vacuous comparison (e.g. all-zero logits).
        assert!(max_abs(theirs) > 0.5, "{spec:?} {what}: logits too small");
        worst = worst.max(d);
    };

    // (a) Prefill: every position. candle returns only the last one, so run each prefix.
    let mut ours = RkvRunner::new(&rkv);
    let prefill = ours.feed(prompt);
    for i in 0..PROMPT {
        cand.reset();
        let theirs = cand.forward(&prompt[..=i], 0);
        check(format!("prefill position {i}"), &prefill[i], &theirs);
    }
    // The full prompt in one call leaves candle's cache where rkv's is.
    cand.reset();
    let theirs = cand.forward(prompt, 0);
    check("prefill last".into(), &prefill[PROMPT - 1], &theirs);

    // (b) Single-token decode steps.
    for (j, &t) in decode.iter().enumerate() {
        let ours_l = ours.feed(&[t]);
        let theirs = cand.forward(&[t], PROMPT + j);
        check(format!("decode step {j}"), &ours_l[0], &theirs);
    }

    // (c) A multi-token chunk on top of a non-empty cache (chunked prefill shape).
    let ours_l = ours.feed(chunk);
    let theirs = cand.forward(chunk, PROMPT + DECODE);
    check("chunk after decode".into(), &ours_l[CHUNK - 1], &theirs);
    assert_eq!(ours.kv.len(0), PROMPT + DECODE + CHUNK);
    eprintln!("{spec:?}: max abs logit diff vs candle {worst:e}");
    worst
}

fn spec(arch: &'static str, n_layers: usize, n_kv_heads: usize, tie: bool) -> Spec {
    Spec {
        arch,
        n_layers,
        n_heads: 4,
        n_kv_heads,
        head_dim: (arch == "qwen3").then_some(16),
        tie,
    }
}

#[test]
fn llama_gqa_untied_matches_candle() {
    check_against_candle(spec("llama", 3, 2, false), 11);
}

#[test]
fn llama_mha_tied_matches_candle() {
    check_against_candle(spec("llama", 2, 4, true), 12);
}

#[test]
fn qwen2_gqa_tied_matches_candle() {
    check_against_candle(spec("qwen2", 3, 2, true), 21);
}

#[test]
fn qwen2_mha_untied_matches_candle() {
    check_against_candle(spec("qwen2", 2, 4, false), 22);
}

#[test]
fn qwen3_gqa_untied_matches_candle() {
    check_against_candle(spec("qwen3", 3, 2, false), 31);
}

#[test]
fn qwen3_mha_tied_matches_candle() {
    check_against_candle(spec("qwen3", 2, 4, true), 32);
}

// ---------------------------------------------------------------------------------------
// GGUF

/// llama.cpp `convert_hf_to_gguf.py` `LlamaModel.permute`: within each head, rows go from
/// the Hugging Face half-split RoPE order to adjacent pairs:
/// `w.reshape(n_head, 2, d / 2, cols).swapaxes(1, 2).reshape(w.shape)`.
fn llama_cpp_permute(w: &Tensor, n_head: usize) -> Tensor {
    let (rows, cols) = w.dims2().unwrap();
    w.reshape((n_head, 2, rows / n_head / 2, cols))
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .contiguous()
        .unwrap()
        .reshape((rows, cols))
        .unwrap()
}

/// Writes the Hugging Face llama `weights` of `spec` as a llama-arch GGUF with 2-D weights
/// in `dtype` (norms stay F32, as llama.cpp keeps them).
fn write_llama_gguf(path: &Path, spec: &Spec, weights: &HashMap<String, Tensor>, dtype: GgmlDType) {
    assert_eq!(spec.arch, "llama");
    let hf = |n: &str| weights[n].clone();
    let mut tensors: Vec<(String, Tensor)> = vec![
        ("token_embd.weight".into(), hf("model.embed_tokens.weight")),
        ("output_norm.weight".into(), hf("model.norm.weight")),
    ];
    if !spec.tie {
        tensors.push(("output.weight".into(), hf("lm_head.weight")));
    }
    for i in 0..spec.n_layers {
        let p = format!("model.layers.{i}");
        let b = format!("blk.{i}");
        let q = llama_cpp_permute(&hf(&format!("{p}.self_attn.q_proj.weight")), spec.n_heads);
        // The converter permutes k with the KV head count.
        let k = llama_cpp_permute(
            &hf(&format!("{p}.self_attn.k_proj.weight")),
            spec.n_kv_heads,
        );
        tensors.extend([
            (
                format!("{b}.attn_norm.weight"),
                hf(&format!("{p}.input_layernorm.weight")),
            ),
            (format!("{b}.attn_q.weight"), q),
            (format!("{b}.attn_k.weight"), k),
            (
                format!("{b}.attn_v.weight"),
                hf(&format!("{p}.self_attn.v_proj.weight")),
            ),
            (
                format!("{b}.attn_output.weight"),
                hf(&format!("{p}.self_attn.o_proj.weight")),
            ),
            (
                format!("{b}.ffn_norm.weight"),
                hf(&format!("{p}.post_attention_layernorm.weight")),
            ),
            (
                format!("{b}.ffn_gate.weight"),
                hf(&format!("{p}.mlp.gate_proj.weight")),
            ),
            (
                format!("{b}.ffn_up.weight"),
                hf(&format!("{p}.mlp.up_proj.weight")),
            ),
            (
                format!("{b}.ffn_down.weight"),
                hf(&format!("{p}.mlp.down_proj.weight")),
            ),
        ]);
    }
    let qtensors: Vec<(String, QTensor)> = tensors
        .into_iter()
        .map(|(n, t)| {
            let dt = if t.rank() == 2 { dtype } else { GgmlDType::F32 };
            (n, QTensor::quantize(&t, dt).unwrap())
        })
        .collect();
    let metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("llama".into())),
        ("llama.block_count", Value::U32(spec.n_layers as u32)),
        ("llama.embedding_length", Value::U32(HIDDEN as u32)),
        ("llama.feed_forward_length", Value::U32(INTERMEDIATE as u32)),
        (
            "llama.attention.head_count",
            Value::U32(spec.n_heads as u32),
        ),
        (
            "llama.attention.head_count_kv",
            Value::U32(spec.n_kv_heads as u32),
        ),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
        ("llama.rope.freq_base", Value::F32(10000.0)),
        (
            "llama.rope.dimension_count",
            Value::U32(spec.head_dim() as u32),
        ),
        ("llama.context_length", Value::U32(MAX_POS as u32)),
        ("llama.vocab_size", Value::U32(VOCAB as u32)),
    ];
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let ts: Vec<(&str, &QTensor)> = qtensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md, &ts).unwrap();
}

fn load_gguf(path: &Path, mode: WeightMode) -> Transformer {
    let mut src = GgufSource::open(path, mode).unwrap();
    let cfg = src.config().unwrap();
    Transformer::load(cfg, &mut src).unwrap()
}

/// All logits of a prompt then single-token decode steps, one `Vec` per token.
fn run_all(model: &Transformer, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut r = RkvRunner::new(model);
    let mut out = r.feed(&tokens[..PROMPT]);
    for &t in &tokens[PROMPT..] {
        out.extend(r.feed(&[t]));
    }
    out
}

/// The same logits as [`run_all`] from candle's `quantized_llama` (llama.cpp's reading of
/// a GGUF: adjacent-pair RoPE, `QMatMul`); prompt positions one prefix at a time.
fn candle_gguf_all(path: &Path, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut f = std::fs::File::open(path).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    let mut m = quantized_llama::ModelWeights::from_gguf(content, &mut f, &Device::Cpu).unwrap();
    let fwd = |m: &mut quantized_llama::ModelWeights, ts: &[u32], pos: usize| -> Vec<f32> {
        let x = Tensor::new(ts, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        let y = m.forward(&x, pos).unwrap();
        y.flatten_all().unwrap().to_vec1().unwrap()
    };
    let mut out = Vec::new();
    for i in 0..PROMPT {
        m.clear_kv_cache();
        out.push(fwd(&mut m, &tokens[..=i], 0));
    }
    for (j, &t) in tokens[PROMPT..].iter().enumerate() {
        out.push(fwd(&mut m, &[t], PROMPT + j));
    }
    out
}

fn worst_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| max_abs_diff(x, y))
        .fold(0f32, f32::max)
}

fn check_gguf_f32_matches_hf(spec: Spec, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let weights = spec.random_weights(seed);
    spec.write_hf(dir.path(), &weights);
    let hf = load_rkv_hf(dir.path());
    let gguf_path = dir.path().join("model-f32.gguf");
    write_llama_gguf(&gguf_path, &spec, &weights, GgmlDType::F32);

    let mut src = GgufSource::open(&gguf_path, WeightMode::F32).unwrap();
    let cfg = src.config().unwrap();
    assert_eq!(cfg.rope.style, RopeStyle::Interleaved);
    let mut hf_cfg = hf.config().clone();
    hf_cfg.rope.style = RopeStyle::Interleaved;
    assert_eq!(
        cfg, hf_cfg,
        "GGUF and config.json configs differ beyond RoPE pairing"
    );
    let gguf = Transformer::load(cfg.clone(), &mut src).unwrap();

    let tokens = random_tokens(seed + 1, PROMPT + DECODE);
    let want = run_all(&hf, &tokens);
    let got = run_all(&gguf, &tokens);
    let d = worst_diff(&got, &want);
    let dc = worst_diff(&got, &candle_gguf_all(&gguf_path, &tokens));
    eprintln!(
        "{spec:?}: GGUF(F32, permuted q/k) vs HF max abs logit diff {d:e}; \
         vs candle quantized_llama on the same GGUF {dc:e}"
    );
    assert!(d <= TOL, "GGUF vs HF: max abs diff {d:e}");
    assert!(
        dc <= TOL,
        "GGUF vs candle quantized_llama: max abs diff {dc:e}"
    );

    // Control: the permuted file read with the Hugging Face pairing must not match, so the
    // comparison above really exercises the RoPE layout.
    let mut wrong = cfg;
    wrong.rope.style = RopeStyle::Half;
    let mut src = GgufSource::open(&gguf_path, WeightMode::F32).unwrap();
    let wrong = Transformer::load(wrong, &mut src).unwrap();
    let d_wrong = worst_diff(&run_all(&wrong, &tokens), &want);
    assert!(
        d_wrong > 1e-2,
        "wrong RoPE pairing went unnoticed ({d_wrong:e})"
    );
}

#[test]
fn gguf_llama_permuted_qk_matches_hf_gqa_untied() {
    check_gguf_f32_matches_hf(spec("llama", 3, 2, false), 41);
}

#[test]
fn gguf_llama_permuted_qk_matches_hf_mha_tied() {
    check_gguf_f32_matches_hf(spec("llama", 2, 4, true), 42);
}

#[test]
fn gguf_q8_0_native_close_to_dequantised() {
    let spec = spec("llama", 3, 2, false);
    let dir = tempfile::tempdir().unwrap();
    let weights = spec.random_weights(51);
    spec.write_hf(dir.path(), &weights);
    let path = dir.path().join("model-q8_0.gguf");
    write_llama_gguf(&path, &spec, &weights, GgmlDType::Q8_0);

    // The native source really hands out quantised weights (whichever quantised variant
    // rkv picks for Q8_0), the F32 one dense ones.
    let mut src = GgufSource::open(&path, WeightMode::Native).unwrap();
    let l = src.linear(TensorName::Q(0), HIDDEN, HIDDEN, false).unwrap();
    assert!(!matches!(l.weight(), Weight::F32(_)));
    let mut src = GgufSource::open(&path, WeightMode::F32).unwrap();
    let l = src.linear(TensorName::Q(0), HIDDEN, HIDDEN, false).unwrap();
    assert!(matches!(l.weight(), Weight::F32(_)));

    let native = load_gguf(&path, WeightMode::Native);
    let dense = load_gguf(&path, WeightMode::F32);
    let hf = load_rkv_hf(dir.path());
    let tokens = random_tokens(52, PROMPT + DECODE);
    let (n, d, h) = (
        run_all(&native, &tokens),
        run_all(&dense, &tokens),
        run_all(&hf, &tokens),
    );
    let c = candle_gguf_all(&path, &tokens);
    let scale = d.iter().map(|r| max_abs(r)).fold(0f32, f32::max);
    let nd = worst_diff(&n, &d);
    let dh = worst_diff(&d, &h);
    let nc = worst_diff(&n, &c);
    eprintln!(
        "Q8_0 native vs dequantised: max abs {nd:e} (logit scale {scale}); \
         dequantised Q8_0 vs f32 HF: {dh:e}; native vs candle quantized_llama: {nc:e}"
    );
    // Native Q8_0 matmuls also quantise activations to Q8_0; a few percent of the logit
    // scale is the expected error, a broken architecture path would be O(scale).
    assert!(
        nd > 0.0,
        "native and dequantised runs are bit-identical: native path unused?"
    );
    assert!(
        nd <= 0.05 * scale,
        "native Q8_0 vs dequantised: {nd} of scale {scale}"
    );
    assert!(
        dh <= 0.05 * scale,
        "dequantised Q8_0 vs f32: {dh} of scale {scale}"
    );
}

/// Dense f16 and bf16 GGUF weights are held as stored (half the memory of f32), and give
/// the logits of the same values widened to f32 (`--dtype f32`): widening is exact and
/// both paths sum in f32, so only the order of the sums differs.
#[test]
fn gguf_f16_and_bf16_held_as_stored_match_f32() {
    let spec = spec("llama", 3, 2, false);
    let dir = tempfile::tempdir().unwrap();
    let weights = spec.random_weights(61);
    let tokens = random_tokens(62, PROMPT + DECODE);
    for dtype in [GgmlDType::F16, GgmlDType::BF16] {
        let path = dir.path().join(format!("model-{dtype:?}.gguf"));
        write_llama_gguf(&path, &spec, &weights, dtype);
        let mut src = GgufSource::open(&path, WeightMode::Native).unwrap();
        let l = src.linear(TensorName::Q(0), HIDDEN, HIDDEN, false).unwrap();
        let held = match l.weight() {
            Weight::F16(_) => GgmlDType::F16,
            Weight::BF16(_) => GgmlDType::BF16,
            _ => GgmlDType::F32,
        };
        assert_eq!(held, dtype, "a {dtype:?} weight is held as {held:?}");
        let (n, d) = (
            run_all(&load_gguf(&path, WeightMode::Native), &tokens),
            run_all(&load_gguf(&path, WeightMode::F32), &tokens),
        );
        let scale = d.iter().map(|r| max_abs(r)).fold(0f32, f32::max);
        let nd = worst_diff(&n, &d);
        eprintln!("{dtype:?} as stored vs f32: max abs {nd:e} (logit scale {scale})");
        assert!(
            nd <= TOL * scale.max(1.0),
            "{dtype:?}: {nd} of scale {scale}"
        );
    }
}

/// A Hugging Face checkpoint in bf16 (as DeepSeek-R1 distills ship) is held as bf16, and
/// its logits are those of the f32 path within the same bound.
#[test]
fn hf_bf16_held_as_stored_matches_f32() {
    let spec = spec("llama", 3, 2, true);
    let dir = tempfile::tempdir().unwrap();
    let bf16: HashMap<String, Tensor> = spec
        .random_weights(71)
        .into_iter()
        .map(|(k, t)| (k, t.to_dtype(DType::BF16).unwrap()))
        .collect();
    spec.write_hf(dir.path(), &bf16);
    let mut src = rkv_model::weights::hf::HfSource::open(dir.path(), WeightMode::Native).unwrap();
    let l = src.linear(TensorName::Q(0), HIDDEN, HIDDEN, false).unwrap();
    assert!(matches!(l.weight(), Weight::BF16(_)), "held as bf16");
    let tokens = random_tokens(72, PROMPT + DECODE);
    let n = run_all(&load_rkv_hf_as(dir.path(), WeightMode::Native), &tokens);
    let d = run_all(&load_rkv_hf_as(dir.path(), WeightMode::F32), &tokens);
    let scale = d.iter().map(|r| max_abs(r)).fold(0f32, f32::max);
    let nd = worst_diff(&n, &d);
    eprintln!("bf16 as stored vs f32: max abs {nd:e} (logit scale {scale})");
    assert!(nd <= TOL * scale.max(1.0), "{nd} of scale {scale}");
}
