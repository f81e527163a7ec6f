//! `rkv bench model` writes a GGUF that rkv loads with the published shape's config
//! (R1-Distill-Qwen-1.5B: 28 layers, 12/2 heads of 128, vocabulary 151936) and runs;
//! an unknown shape is a usage error that names the known ones.
//! Needs the default model (`rkv fetch`) as the tokenizer donor; writes 1.1 GB to a
//! temporary directory.

mod common;

use common::{default_model, rkv};
use serde_json::Value;

#[test]
fn writes_a_loadable_r1_distill_qwen_shape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("qwen.gguf");
    let out_s = out.to_str().expect("utf-8 path");
    let donor = default_model();
    let (code, stdout, stderr) = rkv(&[
        "bench",
        "model",
        "--out",
        out_s,
        "--donor",
        donor.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("r1-distill-qwen-1.5b"), "{stdout}");
    let model = rkv_model::load(&out, rkv_model::WeightMode::Native).expect("load the bench model");
    let c = model.transformer.config();
    assert_eq!(
        (
            c.n_layers,
            c.hidden_size,
            c.n_heads,
            c.n_kv_heads,
            c.head_dim
        ),
        (28, 1536, 12, 2, 128)
    );
    assert_eq!((c.intermediate_size, c.vocab_size), (8960, 151936));
    assert_eq!(c.arch, rkv_model::Arch::Qwen2);
    drop(model);
    let (code, stdout, stderr) = rkv(&[
        "generate",
        "--model",
        out_s,
        "--prompt",
        "Hello",
        "--max-tokens",
        "2",
        "--ignore-eos",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(v["stats"]["generated_tokens"], 2, "{v}");
}

#[test]
fn unknown_shape_is_a_usage_error() {
    let (code, _, stderr) = rkv(&[
        "bench",
        "model",
        "--shape",
        "gpt-5",
        "--out",
        "/nonexistent/x",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("r1-distill-llama-8b"), "{stderr}");
}
