//! Parity with llama.cpp on the default model requantised by `rkv quantize` to Q4_K_M,
//! Q5_K_M, Q6_K and Q8_0, which run rkv's own Q5_0, Q5_1, Q8_0, Q4_K and Q6_K products
//! (llama.cpp's type choice puts the 576-wide rows in Q5_0, Q5_1 or Q8_0 and the
//! 1536-wide `ffn_down` in K-quants). Greedy tokens must equal llama.cpp's at every step
//! where llama.cpp's relative top-2 margin is at least 3%; at a step below that, the two
//! may choose differently and part.
//!
//! Why 3% and not less: with 8-bit activations the forward pass is chaotic, so two engines
//! whose sums differ only in float order part wherever a step is close. llama.cpp does not
//! meet 0.5% against itself: its AVX2 and AVX-512 builds (same source, same files) part on
//! 18 of these 24 runs at own margins up to 2.3% (`llamacpp_requant.avx512.jsonl` beside
//! the reference; `scripts/llamacpp/compare_references.py`; docs/testing.md). Steps where
//! llama.cpp's margin is 0.5-3% do part here too: 0.53% (Q5_K_M), 0.56% (Q8_0) and 2.7%
//! (Q6_K). The test still fails on a broken kernel: most prompts' first steps have
//! margins of 3-15%, and 23 of the 24 runs agree for 3 to 48 steps before parting.
//!
//! The reference, `tests/data/llamacpp_requant.jsonl`, was made by
//! `scripts/llamacpp/requant_reference.sh`: the same `rkv quantize` files (each file's
//! SHA-256 is recorded and checked here, so llama.cpp ran exactly what rkv runs), greedy
//! through llama.cpp's library (`scripts/llamacpp/greedy.cpp`: 2 threads, f16 KV, flash
//! attention off) on the six public reference prompts.

mod common;

use std::path::Path;

use common::{greedy, ids, model_path};
use rkv_engine::{Engine, EngineConfig, KvDtype};
use rkv_model::weights::quant_layout::FileType;
use rkv_model::weights::requantize::requantize;
use rkv_model::WeightMode;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// llama.cpp's top-2 margin below which the two engines may choose differently.
const NEAR_TIE: f64 = 0.03;

fn reference(file_type: &str) -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/llamacpp_requant.jsonl"
    );
    let text = std::fs::read_to_string(path).expect("read the committed reference");
    let rows: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("reference line is JSON"))
        .filter(|r: &Value| r["file_type"] == file_type)
        .collect();
    assert!(!rows.is_empty(), "no {file_type} rows in {path}");
    rows
}

fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("read the requantised file");
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn matches_llamacpp(file_type: &str) {
    let refs = reference(file_type);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join(format!("{file_type}.gguf"));
    let ft = FileType::by_name(file_type).expect("file type");
    requantize(&model_path(), &file, ft).expect("requantise the default model");
    assert_eq!(
        sha256(&file),
        refs[0]["file_sha256"].as_str().expect("file_sha256"),
        "`rkv quantize --type {file_type}` wrote another file than the one llama.cpp ran: \
         rerun scripts/llamacpp/requant_reference.sh"
    );
    let model = rkv_model::load(&file, WeightMode::Native).expect("load the requantised model");
    let mut e = Engine::new(
        model,
        EngineConfig {
            kv_dtype: KvDtype::F16,
            kv_blocks: 300,
            ..EngineConfig::default()
        },
    )
    .expect("engine");
    let mut report = Vec::new();
    for (i, r) in refs.iter().enumerate() {
        let want = ids(&r["token_ids"]);
        let margins: Vec<f64> = r["top2_rel_margin"]
            .as_array()
            .expect("margins")
            .iter()
            .map(|m| m.as_f64().expect("margin"))
            .collect();
        let got = greedy(&mut e, &ids(&r["prompt_token_ids"]), want.len());
        let same = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        if same < want.len() {
            assert!(
                margins[same] < NEAR_TIE,
                "{file_type} prompt {i}: step {same}: rkv chose {:?}, llama.cpp {} with a top-2 \
                 margin of {} (at least {NEAR_TIE}); rkv {got:?}, llama.cpp {want:?}",
                got.get(same),
                want[same],
                margins[same]
            );
        }
        report.push((same, want.len()));
    }
    eprintln!("{file_type}: matching steps per prompt (matching, of): {report:?}");
}

#[test]
fn q4_k_m_matches_llamacpp() {
    matches_llamacpp("q4_k_m");
}

#[test]
fn q5_k_m_matches_llamacpp() {
    matches_llamacpp("q5_k_m");
}

#[test]
fn q6_k_matches_llamacpp() {
    matches_llamacpp("q6_k");
}

#[test]
fn q8_0_matches_llamacpp() {
    matches_llamacpp("q8_0");
}
