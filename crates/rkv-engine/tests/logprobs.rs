//! Log-probabilities reported with tokens: for the default model with f32 weights and f32
//! KV, the first generated token's equal (within 1e-3) the log-softmax of transformers'
//! float32 logits, and every prompt and generated token's equal the log-softmax of one
//! plain forward over the same tokens. On tiny models: prompt log-probabilities come out
//! the same whether the prompt is fed whole or in pieces, after a preemption, and with the
//! prompt cached (a request that asks for them takes nothing from the prefix cache).

mod common;
mod tiny;

use common::{engine, prompt_ids, reference_lines, transformers_first_logits};
use rkv_core::config::CompressionConfig;
use rkv_engine::{
    Engine, GenerationOutput, GenerationRequest, KvDtype, LogprobsRequest, SamplingParams,
    TokenLogprob,
};
use rkv_model::WeightMode;
use tiny::{random_prompt, TinyModel, SPECS};

/// log-softmax in f64, by the definition.
fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let z: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
    row.iter().map(|&l| l as f64 - max - z.ln()).collect()
}

fn request(prompt: &[u32], max_tokens: usize, k: usize) -> GenerationRequest {
    GenerationRequest {
        prompt: prompt.to_vec(),
        sampling: SamplingParams::default(),
        max_tokens,
        ignore_eos: true,
        stop: Vec::new(),
        logprobs: LogprobsRequest {
            generated: Some(k),
            prompt: Some(k),
        },
        grammar: None,
    }
}

/// The largest difference of `got` (token `t` at each position, its alternatives) from
/// the log-softmax of `rows` (one per position); checks the alternatives are the top ids.
fn max_diff(got: &[TokenLogprob], rows: &[Vec<f64>], tokens: &[u32]) -> f64 {
    assert_eq!(got.len(), rows.len());
    let mut worst = 0f64;
    for ((g, want), &t) in got.iter().zip(rows).zip(tokens) {
        assert_eq!(g.token, t);
        worst = worst.max((g.logprob as f64 - want[t as usize]).abs());
        let mut order: Vec<usize> = (0..want.len()).collect();
        order.sort_by(|&a, &b| want[b].total_cmp(&want[a]).then(a.cmp(&b)));
        for (i, &(id, lp)) in g.top.iter().enumerate() {
            // A near-tie may swap neighbours; the value must still be the id's own.
            worst = worst.max((lp as f64 - want[id as usize]).abs());
            assert!(
                (want[order[i]] - want[id as usize]).abs() < 1e-3,
                "alternative {i}: id {id}, expected about {}",
                order[i]
            );
        }
    }
    worst
}

/// Checks `out`'s prompt and generated log-probabilities against one plain forward over
/// the prompt and what was generated; returns the largest difference.
fn check_against_forward(e: &mut Engine, prompt: &[u32], out: &GenerationOutput, k: usize) -> f64 {
    let mut all = prompt.to_vec();
    all.extend(&out.token_ids);
    let logits = e.prompt_logits(&all).expect("logits");
    let vocab = logits.len() / all.len();
    let rows: Vec<Vec<f64>> = logits.chunks_exact(vocab).map(log_softmax).collect();
    let pl = out.prompt_logprobs.as_ref().expect("prompt logprobs");
    let gl = out.logprobs.as_ref().expect("logprobs");
    assert_eq!(pl.len(), prompt.len() - 1);
    assert_eq!(gl.len(), out.token_ids.len());
    assert!(pl.iter().chain(gl).all(|t| t.top.len() == k));
    let n = prompt.len();
    let d_prompt = max_diff(pl, &rows[..n - 1], &prompt[1..]);
    let d_gen = max_diff(gl, &rows[n - 1..all.len() - 1], &out.token_ids);
    d_prompt.max(d_gen)
}

#[test]
fn default_model_f32_logprobs_equal_transformers_and_a_plain_forward() {
    let mut e = engine(WeightMode::F32, KvDtype::F32, CompressionConfig::full());
    let (vocab, want) = transformers_first_logits();
    let mut report = Vec::new();
    for (i, r) in reference_lines("transformers_f32_greedy.jsonl")
        .iter()
        .enumerate()
    {
        let prompt = prompt_ids(&e, r);
        let out = e
            .generate(request(&prompt, 6, 20), None, |_| {})
            .expect("generate");
        // The first token against transformers' own logits.
        let reference = log_softmax(&want[i * vocab..(i + 1) * vocab]);
        let first = &out.logprobs.as_ref().expect("logprobs")[..1];
        let d_hf = max_diff(first, &[reference], &out.token_ids[..1]);
        assert!(d_hf <= 1e-3, "prompt {i}: {d_hf} from transformers");
        let d_fwd = check_against_forward(&mut e, &prompt, &out, 20);
        assert!(d_fwd <= 1e-3, "prompt {i}: {d_fwd} from a plain forward");
        report.push((d_hf, d_fwd));
    }
    eprintln!(
        "max |logprob diff| per prompt (transformers first token, plain forward): {report:?}"
    );
}

#[test]
fn prompt_logprobs_hold_through_chunks_preemption_and_the_prefix_cache() {
    for (si, spec) in SPECS.iter().enumerate() {
        let m = TinyModel::new(*spec, 300 + si as u64);
        let prompt = random_prompt(310 + si as u64, 90);
        // Whole, and in pieces of 7 tokens.
        for batch in [512, 7] {
            let mut e = m.engine(batch);
            let a = e.generate(request(&prompt, 5, 3), None, |_| {}).unwrap();
            // The same prompt again: cached now, but logprobs need every position.
            let b = e.generate(request(&prompt, 5, 3), None, |_| {}).unwrap();
            assert_eq!(b.stats.cached_tokens, 0, "{}", spec.name);
            assert_eq!(
                a,
                GenerationOutput {
                    stats: a.stats.clone(),
                    ..b.clone()
                }
            );
            let d = check_against_forward(&mut e, &prompt, &a, 3);
            assert!(d <= 1e-4, "{} batch {batch}: {d}", spec.name);
        }
        // Three requests growing to 7 blocks each in a pool of 12: they preempt each
        // other and recompute their prompts.
        let short = &prompt[..40];
        let mut e = m.engine_pool(512, KvDtype::F32, tiny::BLOCK_SIZE, 12);
        let solo = e.generate(request(short, 60, 2), None, |_| {}).unwrap();
        let ids: Vec<_> = (0..3)
            .map(|_| e.add_request(request(short, 60, 2), None).unwrap())
            .collect();
        while e.has_work() {
            e.step();
        }
        assert!(
            e.counters().preemptions_total > 0,
            "{}: no preemption",
            spec.name
        );
        for id in ids {
            let out = e.take_output(id).expect("output");
            assert_eq!(out.prompt_logprobs, solo.prompt_logprobs, "{}", spec.name);
            assert_eq!(out.logprobs, solo.logprobs, "{}", spec.name);
        }
    }
}

#[test]
fn without_a_request_there_are_no_logprobs() {
    let m = TinyModel::new(SPECS[0], 7);
    let mut e = m.engine(64);
    let mut req = request(&random_prompt(8, 20), 4, 0);
    req.logprobs = LogprobsRequest::default();
    let mut seen = 0;
    let out = e
        .generate(req, None, |ev| {
            assert!(ev.logprob.is_none());
            seen += 1;
        })
        .unwrap();
    assert_eq!(seen, 4);
    assert!(out.logprobs.is_none() && out.prompt_logprobs.is_none());
    // Asked for with no alternatives: the token's own only.
    let out = e
        .generate(request(&random_prompt(8, 20), 4, 0), None, |ev| {
            assert!(ev.logprob.as_ref().is_some_and(|l| l.top.is_empty()));
        })
        .unwrap();
    assert_eq!(out.logprobs.map(|l| l.len()), Some(4));
}
