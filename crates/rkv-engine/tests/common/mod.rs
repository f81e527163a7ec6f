//! Shared set-up of the engine's tests on the real default model: where the model and the
//! reference data are, and building an engine over them. Missing data fails loudly.

#![allow(dead_code)]

use std::path::PathBuf;

use rkv_core::config::CompressionConfig;
use rkv_engine::{Engine, EngineConfig, GenerationRequest, KvDtype, SamplingParams};
use rkv_model::chat_template::ChatMessage;
use rkv_model::WeightMode;
use serde_json::Value;

/// The default model: `$RKV_MODEL_PATH`, else `$RKV_HOME/models/...`, else
/// `~/.cache/rkv/models/...`. Panics with instructions when absent.
pub fn model_path() -> PathBuf {
    let p = std::env::var_os("RKV_MODEL_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("RKV_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/rkv")
                });
            home.join("models/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    assert!(
        p.exists(),
        "the default model is missing at {}: run `cargo run --release -p rkv-cli -- fetch` \
         (or set RKV_MODEL_PATH)",
        p.display()
    );
    p
}

/// A reference file: `$RKV_REFERENCE_DIR/NAME` (default `../shared/reference`), else the
/// copy committed under `tests/data/`. Says which one it used.
pub fn reference_file(name: &str) -> PathBuf {
    let shared = std::env::var_os("RKV_REFERENCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/reference"
            ))
        });
    let p = shared.join(name);
    if p.exists() {
        eprintln!("reference: {}", p.display());
        return p;
    }
    let local = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data")).join(name);
    assert!(
        local.exists(),
        "reference file {name} is in neither {} nor {}",
        shared.display(),
        local.display()
    );
    // Straight to the stream, so that a normal (captured) test run shows it too.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "fallback: reference {name}: the committed copy {}\n",
            local.display()
        )
        .as_bytes(),
    );
    local
}

pub fn engine(mode: WeightMode, kv_dtype: KvDtype, compression: CompressionConfig) -> Engine {
    let model = rkv_model::load(&model_path(), mode).expect("load the default model");
    Engine::new(
        model,
        EngineConfig {
            kv_dtype,
            kv_blocks: 300,
            compression,
            ..EngineConfig::default()
        },
    )
    .expect("engine")
}

/// Relative margin `(l1 - l2) / |l1|` of the two largest logits.
pub fn top2_margin(logits: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &x in logits {
        if x > a {
            b = a;
            a = x;
        } else if x > b {
            b = x;
        }
    }
    (a - b) / a.abs()
}

/// Token ids of a reference file's JSON array.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Greedy generation of at most `n` tokens, stopping at end-of-sequence.
pub fn greedy(e: &mut Engine, prompt: &[u32], n: usize) -> Vec<u32> {
    let req = GenerationRequest {
        logprobs: Default::default(),
        prompt: prompt.to_vec(),
        sampling: SamplingParams::default(),
        max_tokens: n,
        ignore_eos: false,
        stop: Vec::new(),
        grammar: None,
    };
    e.generate(req, None, |_| {}).expect("generate").token_ids
}

/// transformers' float32 logits at the last prompt position of each reference prompt:
/// (vocab, `[prompts, vocab]` row-major).
pub fn transformers_first_logits() -> (usize, Vec<f32>) {
    let bytes = std::fs::read(reference_file("transformers_f32_first_logits.safetensors"))
        .expect("read logits");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let t = st.tensor("logits").expect("logits tensor");
    let vocab = t.shape()[1];
    let want = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (vocab, want)
}

/// The JSON lines of a reference file.
pub fn reference_lines(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(reference_file(name)).expect("read reference");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("reference line is JSON"))
        .collect()
}

/// Renders and tokenises a reference prompt; checks it against the reference ids.
pub fn prompt_ids(e: &Engine, r: &Value) -> Vec<u32> {
    let text = r["prompt"].as_str().expect("prompt").to_string();
    let rendered = if r["chat"].as_bool().unwrap_or(false) {
        e.tokenizer()
            .apply_chat_template(&[ChatMessage::user(text)], true)
            .expect("chat template")
    } else {
        text
    };
    assert_eq!(rendered, r["rendered"].as_str().expect("rendered"));
    let p = e.tokenizer().encode(&rendered).expect("encode");
    assert_eq!(p, ids(&r["prompt_token_ids"]), "prompt token ids differ");
    p
}
