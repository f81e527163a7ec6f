//! Bounded memory on the default model: a 2048-token generation under R-KV at budget 256
//! never holds more than budget + buffer = 384 slots per layer and head, and its KV memory
//! peak is at most 0.2x FullKV's for the same run. Every other policy is bounded too.
//! A 7,000-token prompt compressed between chunks holds at most budget + buffer + chunk.

mod common;

use common::engine;
use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_core::PromptMode;
use rkv_engine::{GenerationRequest, KvDtype, SamplingParams};
use rkv_model::chat_template::ChatMessage;
use rkv_model::WeightMode;

#[test]
fn compressed_generation_stays_within_budget_plus_buffer() {
    let mut e = engine(WeightMode::Native, KvDtype::F16, CompressionConfig::full());
    let text = e
        .tokenizer()
        .apply_chat_template(
            &[ChatMessage::user(
                "Solve step by step: what is 17 times 23? Check your work.",
            )],
            true,
        )
        .expect("template");
    let prompt = e.tokenizer().encode(&text).expect("encode");
    let mut run = |policy: PolicyKind, max_tokens: usize| {
        let req = GenerationRequest {
            logprobs: Default::default(),
            prompt: prompt.clone(),
            sampling: SamplingParams::default(),
            max_tokens,
            ignore_eos: true,
            stop: Vec::new(),
            grammar: None,
        };
        let comp = CompressionConfig {
            policy,
            budget: 256,
            buffer: 128,
            ..CompressionConfig::default()
        };
        e.generate(req, Some(comp), |_| {}).expect("generate").stats
    };
    let full = run(PolicyKind::Full, 2048);
    let rkv = run(PolicyKind::RKv, 2048);
    assert_eq!(rkv.generated_tokens, 2048);
    assert!(rkv.kv_slots_peak <= 384, "{rkv:?}");
    assert!(rkv.compressions >= 14, "{rkv:?}");
    // Compression time is measured, and charged to the steps it delayed.
    assert!(rkv.compress_seconds > 0.0, "{rkv:?}");
    assert!(rkv.compact_seconds > 0.0, "{rkv:?}");
    assert!(rkv.compact_seconds < rkv.compress_seconds, "{rkv:?}");
    assert!(
        rkv.prefill_seconds + rkv.decode_seconds >= rkv.compress_seconds,
        "{rkv:?}"
    );
    assert_eq!(full.compress_seconds, 0.0, "{full:?}");
    assert_eq!(full.compact_seconds, 0.0, "{full:?}");
    let ratio = rkv.kv_bytes_peak as f64 / full.kv_bytes_peak as f64;
    eprintln!(
        "kv_bytes_peak: rkv {} / full {} = {ratio:.3}",
        rkv.kv_bytes_peak, full.kv_bytes_peak
    );
    assert!(ratio <= 0.2, "R-KV peak is {ratio:.3} of FullKV's");
    for policy in [
        PolicyKind::SnapKv,
        PolicyKind::H2o,
        PolicyKind::StreamingLlm,
    ] {
        let s = run(policy, 600);
        assert!(
            s.kv_slots_peak <= 384 && s.compressions >= 3,
            "{policy}: {s:?}"
        );
    }
}

/// A 7,000-token prompt (the default model's context is 8,192) under R-KV at budget 1024:
/// compressed between chunks of 512 it never holds more than budget + buffer + chunk =
/// 1664 slots (kept whole it would hold the prompt: `prompt_compression_tiny.rs`).
#[test]
fn a_long_prompt_compressed_in_chunks_stays_within_budget_buffer_chunk() {
    let mut e = engine(WeightMode::Native, KvDtype::F16, CompressionConfig::full());
    let sentence = "The grass is green. The sky is blue. The sun is yellow. Here we go. ";
    let mut prompt = e
        .tokenizer()
        .encode(&sentence.repeat(7000 / 16))
        .expect("encode");
    assert!(prompt.len() >= 7000, "{}", prompt.len());
    prompt.truncate(7000);
    let run = |e: &mut rkv_engine::Engine, mode: PromptMode| {
        let req = GenerationRequest {
            logprobs: Default::default(),
            prompt: prompt.clone(),
            sampling: SamplingParams::default(),
            max_tokens: 4,
            ignore_eos: true,
            stop: Vec::new(),
            grammar: None,
        };
        let comp = CompressionConfig {
            policy: PolicyKind::RKv,
            budget: 1024,
            prompt: mode,
            ..CompressionConfig::default()
        };
        assert_eq!((comp.buffer, comp.prompt_chunk), (128, 512));
        e.generate(req, Some(comp), |_| {}).expect("generate").stats
    };
    let compressed = run(&mut e, PromptMode::Compress);
    assert!(compressed.kv_slots_peak <= 1664, "{compressed:?}");
    assert!(compressed.kv_slots_peak > 1152, "{compressed:?}");
    // One compression per chunk from the third on (512 x 3 > B + b = 1152).
    assert!(compressed.compressions >= 11, "{compressed:?}");
}
