//! `rkv bench decode --batch N`: N sequences decoding at once after one depth prompt, as
//! a server runs the samples of one request. The prompt is fed once; a compressing policy
//! compresses it to its budget before the samples fork, and each sample then holds at
//! most `budget + buffer` slots of its own. The engine's pool is sized to what the
//! request can hold at once (its reservation), so the run shows the memory it needs.
//! Reported: the decode throughput of all sequences together (tokens after each one's
//! first over the wall time of the steps after the prompt), and the KV memory held at
//! the peak.

use anyhow::{bail, Result};
use rkv_core::config::CompressionConfig;
use rkv_engine::{Engine, GenerationRequest, SamplingParams, SeqStats};

/// Sampling of the batched samples: R1's recommended temperature, so that the sequences
/// differ from their first token on. No nucleus: on a random-weight bench model the
/// distribution is nearly flat, and a 0.95 nucleus would sort most of the vocabulary
/// for every token, which a trained model's peaked distribution never asks.
pub fn batch_sampling() -> SamplingParams {
    SamplingParams {
        temperature: 0.6,
        top_k: 0,
        top_p: 1.0,
        seed: 0,
    }
}

/// One batched generation: [`SeqStats`] summed over the sequences, except
/// `prefill_seconds` and `decode_seconds` (the wall time of the steps until the first
/// tokens, and after them) and `kv_bytes_peak` (the engine's blocks in use at the peak,
/// a block shared by several sequences counted once).
pub struct BatchStats {
    pub stats: SeqStats,
    /// Tokens after each sequence's first, per second of decode steps.
    pub decode_tps: f64,
}

/// Runs `n` samples of `req` under `comp` on `engine` until all finish.
pub fn run(
    engine: &mut Engine,
    req: &GenerationRequest,
    n: usize,
    comp: CompressionConfig,
) -> Result<BatchStats> {
    let start = std::time::Instant::now();
    let ids = engine.add_request_n(req.clone(), Some(comp), n)?;
    let per_block = engine.store().bytes_per_block();
    let mut peak_blocks = 0;
    let mut decode_from = None;
    let mut steps = 0usize;
    while engine.has_work() {
        let events = engine.step();
        if let Some((_, e)) = engine.take_failures().into_iter().next() {
            for id in &ids {
                engine.abort(*id);
            }
            return Err(e.into());
        }
        peak_blocks = peak_blocks.max(engine.counters().kv_blocks_used);
        // The step that ends the prompt samples every sequence's first token.
        if decode_from.is_none() && !events.is_empty() {
            decode_from = Some(std::time::Instant::now());
        }
        steps += 1;
    }
    let Some(t0) = decode_from else {
        bail!("the batched generation produced no token in {steps} steps");
    };
    let decode_seconds = t0.elapsed().as_secs_f64();
    let mut total = SeqStats {
        prompt_tokens: req.prompt.len(),
        prefill_seconds: (t0 - start).as_secs_f64(),
        decode_seconds,
        kv_bytes_peak: peak_blocks * per_block,
        ..SeqStats::default()
    };
    let mut after_first = 0;
    for id in ids {
        let Some(out) = engine.take_output(id) else {
            bail!("sample {id} of the batched generation has no output");
        };
        let s = out.stats;
        after_first += s.generated_tokens.saturating_sub(1);
        total.generated_tokens += s.generated_tokens;
        total.compressions += s.compressions;
        total.compress_seconds += s.compress_seconds;
        total.compact_seconds += s.compact_seconds;
        total.evicted_tokens += s.evicted_tokens;
        total.kv_slots_peak = total.kv_slots_peak.max(s.kv_slots_peak);
    }
    let decode_tps = if decode_seconds > 0.0 {
        after_first as f64 / decode_seconds
    } else {
        0.0
    };
    Ok(BatchStats {
        stats: total,
        decode_tps,
    })
}
