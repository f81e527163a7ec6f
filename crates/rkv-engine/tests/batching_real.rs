//! Continuous batching on the real default model (SmolLM2-135M-Instruct Q4_1): a
//! sequence's greedy output is the same alone, among 15 others, and after being preempted
//! and recomputed, for FullKV and for R-KV (whose budget here is small enough to compress
//! several times), and every block comes back.

mod common;

use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_engine::{Engine, EngineConfig, GenerationRequest, KvDtype, SamplingParams};
use rkv_model::WeightMode;

const MAX_TOKENS: usize = 32;

fn rkv() -> CompressionConfig {
    CompressionConfig {
        policy: PolicyKind::RKv,
        budget: 24,
        buffer: 8,
        window: 4,
        ..CompressionConfig::default()
    }
}

/// 16 distinct prompts of 15 to 60 tokens.
fn prompts(e: &Engine) -> Vec<Vec<u32>> {
    let topics = [
        "the history of the printing press",
        "how bees find flowers",
        "why the sky is blue",
        "the rules of chess",
        "a recipe for bread",
        "the water cycle",
        "how a bicycle stays upright",
        "the planets of the solar system",
    ];
    (0..16)
        .map(|i| {
            let t = topics[i % topics.len()];
            let extra = " Explain it step by step, with examples.".repeat(1 + i / 4);
            e.tokenizer()
                .encode(&format!("Question {i}: tell me about {t}.{extra}"))
                .expect("encode")
        })
        .collect()
}

fn request(prompt: &[u32]) -> GenerationRequest {
    GenerationRequest {
        logprobs: Default::default(),
        prompt: prompt.to_vec(),
        sampling: SamplingParams::default(),
        max_tokens: MAX_TOKENS,
        ignore_eos: true,
        stop: Vec::new(),
        grammar: None,
    }
}

fn engine(kv_blocks: usize) -> Engine {
    let model = rkv_model::load(&common::model_path(), WeightMode::Native).expect("load");
    Engine::new(
        model,
        EngineConfig {
            kv_dtype: KvDtype::F16,
            block_size: 16,
            kv_blocks,
            ..EngineConfig::default()
        },
    )
    .expect("engine")
}

/// Runs every (prompt, policy) at once; returns the token ids and the preemptions.
fn together(e: &mut Engine, jobs: &[(Vec<u32>, CompressionConfig)]) -> (Vec<Vec<u32>>, u64) {
    let ids: Vec<_> = jobs
        .iter()
        .map(|(p, c)| e.add_request(request(p), Some(*c)).expect("add"))
        .collect();
    let mut steps = 0;
    let mut peak = 0;
    while e.has_work() {
        e.step();
        let failed = e.take_failures();
        assert!(failed.is_empty(), "step {steps}: {failed:?}");
        peak = peak.max(e.counters().running);
        steps += 1;
        assert!(steps < 20_000, "runaway");
    }
    assert_eq!(e.counters().kv_blocks_used, 0, "blocks not returned");
    let outs = ids
        .iter()
        .map(|&id| e.take_output(id).expect("output").token_ids)
        .collect();
    (outs, e.counters().preemptions_total)
}

#[test]
fn greedy_output_is_the_same_alone_batched_and_after_preemption() {
    let mut e = engine(1024);
    let prompts = prompts(&e);
    for (name, c) in [("full", CompressionConfig::full()), ("rkv", rkv())] {
        let solo: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| {
                let out = e.generate(request(p), Some(c), |_| {}).expect("solo");
                if c.policy == PolicyKind::RKv {
                    assert!(
                        out.stats.compressions >= 1,
                        "{name}: compress while decoding"
                    );
                }
                out.token_ids
            })
            .collect();
        let jobs: Vec<_> = prompts.iter().map(|p| (p.clone(), c)).collect();
        let (outs, preempted) = together(&mut e, &jobs);
        assert_eq!(preempted, 0, "{name}: the big pool should not preempt");
        for (i, (a, b)) in outs.iter().zip(&solo).enumerate() {
            assert_eq!(a, b, "{name}: request {i} among 15 others");
        }
        // A pool that holds about a third of the FullKV load: sequences are preempted and
        // recomputed, and still produce their solo tokens.
        let mut small = engine(if c.policy == PolicyKind::Full { 24 } else { 20 });
        let (outs, preempted) = together(&mut small, &jobs);
        if c.policy == PolicyKind::Full {
            assert!(preempted > 0, "{name}: the small pool never preempted");
        }
        for (i, (a, b)) in outs.iter().zip(&solo).enumerate() {
            assert_eq!(a, b, "{name}: request {i} in a small pool");
        }
    }
    // FullKV and R-KV requests mixed in a small pool: the compressing ones are preempted
    // too (the newest go first) and recompute their compressions.
    let solo_mixed: Vec<Vec<u32>> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let c = if i % 2 == 0 {
                CompressionConfig::full()
            } else {
                rkv()
            };
            e.generate(request(p), Some(c), |_| {})
                .expect("solo")
                .token_ids
        })
        .collect();
    let jobs: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                p.clone(),
                if i % 2 == 0 {
                    CompressionConfig::full()
                } else {
                    rkv()
                },
            )
        })
        .collect();
    let mut small = engine(22);
    let (outs, preempted) = together(&mut small, &jobs);
    assert!(preempted > 0, "mixed: the small pool never preempted");
    for (i, (a, b)) in outs.iter().zip(&solo_mixed).enumerate() {
        assert_eq!(a, b, "mixed: request {i}");
    }
}
