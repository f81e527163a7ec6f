//! Where the tokenizer tests find their data: the cached models (`$RKV_MODEL_PATH`, else
//! `$RKV_HOME/models/`, default `~/.cache/rkv/models/`) and the reference generations
//! (`$RKV_REFERENCE_DIR`, default `shared/reference` beside the workspace, else the copies
//! committed in `tests/data/`, saying so).

#![allow(dead_code)]

use std::path::PathBuf;

use candle_core::quantized::gguf_file;
use rkv_model::tokenizer::Tokenizer;
use serde_json::Value;

/// The default model's file (SmolLM2-135M-Instruct Q4_1).
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The 1.5B model's file (`rkv fetch qwen2.5-coder-1.5b`).
pub const QWEN_FILE: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";

/// `$RKV_HOME/models` (default `~/.cache/rkv/models`).
pub fn models_dir() -> PathBuf {
    let home = std::env::var("RKV_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| ".".into())).join(".cache/rkv")
        });
    home.join("models")
}

/// The default model: `$RKV_MODEL_PATH`, else its file in [`models_dir`].
pub fn model_path() -> PathBuf {
    if let Ok(p) = std::env::var("RKV_MODEL_PATH") {
        return PathBuf::from(p);
    }
    models_dir().join(MODEL_FILE)
}

/// The tokenizer of the GGUF file at `path`.
pub fn gguf_tokenizer(path: &std::path::Path) -> Tokenizer {
    let mut file = std::fs::File::open(path).expect("open model file");
    let content = gguf_file::Content::read(&mut file).expect("read GGUF metadata");
    Tokenizer::from_gguf(&content).expect("build tokenizer from GGUF")
}

/// The default model's tokenizer; fails, saying how to get the model, when it is absent.
pub fn load_tokenizer() -> Tokenizer {
    let path = model_path();
    assert!(
        path.exists(),
        "model file {} is missing: download it with `rkv fetch` (or point RKV_MODEL_PATH / \
         RKV_HOME at a copy of {MODEL_FILE})",
        path.display()
    );
    gguf_tokenizer(&path)
}

fn reference_dir() -> PathBuf {
    std::env::var("RKV_REFERENCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/reference"
            ))
        })
}

/// `name` in the reference folder, else its committed copy; says which.
pub fn reference_file(name: &str) -> PathBuf {
    let shared = reference_dir().join(name);
    if shared.exists() {
        println!("reference: {}", shared.display());
        return shared;
    }
    let local = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data")).join(name);
    // Straight to the stream, so that a normal (captured) test run shows it too.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "fallback: {}: {} is missing; using the committed copy {}\n",
            env!("CARGO_CRATE_NAME"),
            shared.display(),
            local.display()
        )
        .as_bytes(),
    );
    local
}

/// The rows of a reference JSONL file.
pub fn load_reference(name: &str) -> Vec<Value> {
    let path = reference_file(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reference file {name} is in neither the reference folder nor tests/data ({e}): \
             set RKV_REFERENCE_DIR to the directory holding it (shared/reference)"
        )
    });
    let rows: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("reference line is JSON"))
        .collect();
    assert!(!rows.is_empty(), "{} has no rows", path.display());
    rows
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}
