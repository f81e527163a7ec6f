//! Parallel samples of one prompt (`Engine::add_request_n`) on tiny random-weight models:
//! the prompt is fed once and the samples share its blocks until they write into them.
//! Checked, for FullKV and every compressing policy: each sample generates exactly what a
//! request of its own seeded `seed + i` generates (copy on write before appending into the
//! prompt's shared last block and before compacting), right after the fork the samples
//! hold one prompt's blocks between them, and every block comes back.

mod tiny;

use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_engine::{GenerationRequest, SamplingParams};
use tiny::{random_prompt, TinyModel, BLOCK_SIZE, KV_BLOCKS, SPECS};

const N: usize = 3;
const PROMPT: usize = 21; // not a whole number of blocks: the last one is shared half full

fn request(prompt: &[u32], seed: u64) -> GenerationRequest {
    GenerationRequest {
        logprobs: Default::default(),
        prompt: prompt.to_vec(),
        sampling: SamplingParams {
            temperature: 0.9,
            top_k: 0,
            top_p: 0.95,
            seed,
        },
        max_tokens: 90,
        ignore_eos: true,
        stop: Vec::new(),
        grammar: None,
    }
}

#[test]
fn samples_of_one_prompt_match_separate_requests() {
    for (si, spec) in SPECS.iter().enumerate().take(2) {
        let m = TinyModel::new(*spec, 700 + si as u64);
        let prompt = random_prompt(710 + si as u64, PROMPT);
        for policy in PolicyKind::ALL {
            let tag = format!("{} {policy}", spec.name);
            let c = match policy {
                PolicyKind::Full => CompressionConfig::full(),
                p => CompressionConfig {
                    policy: p,
                    budget: 32,
                    buffer: 16,
                    window: 8,
                    ..CompressionConfig::default()
                },
            };
            let mut e = m.engine(256);
            let solo: Vec<_> = (0..N as u64)
                .map(|i| {
                    e.generate(request(&prompt, 40 + i), Some(c), |_| {})
                        .unwrap_or_else(|err| panic!("{tag} solo {i}: {err}"))
                })
                .collect();
            assert_ne!(
                solo[0].token_ids, solo[1].token_ids,
                "{tag}: seeds should differ"
            );
            let ids = e
                .add_request_n(request(&prompt, 40), Some(c), N)
                .expect("add");
            let mut first = true;
            let mut steps = 0;
            while e.has_work() {
                let events = e.step();
                let failed = e.take_failures();
                assert!(failed.is_empty(), "{tag}: {failed:?}");
                if first && !events.is_empty() {
                    first = false;
                    assert_eq!(events.len(), N, "{tag}: every sample's first token at once");
                    assert_eq!(
                        e.counters().kv_blocks_used,
                        PROMPT.div_ceil(BLOCK_SIZE),
                        "{tag}: the samples share the prompt's blocks"
                    );
                }
                steps += 1;
                assert!(steps < 1000, "{tag}: runaway");
            }
            assert_eq!(e.store().pool().n_free(), KV_BLOCKS, "{tag}: blocks back");
            assert_eq!(
                e.counters().prompt_tokens_total as usize,
                PROMPT * (N + 1),
                "{tag}"
            );
            for (i, id) in ids.iter().enumerate() {
                let out = e
                    .take_output(*id)
                    .unwrap_or_else(|| panic!("{tag}: no output {i}"));
                assert_eq!(out.token_ids, solo[i].token_ids, "{tag}: sample {i}");
                assert_eq!(
                    out.stats.compressions, solo[i].stats.compressions,
                    "{tag}: {i}"
                );
                assert_eq!(
                    out.stats.evicted_tokens, solo[i].stats.evicted_tokens,
                    "{tag}"
                );
            }
        }
    }
}

/// Samples of a prompt longer than `B + b` in a pool that holds the prompt once plus each
/// sample's `B + b`, far less than a prompt per sample: admitted (the prompt is compressed
/// before the fork), the same tokens as separate requests, within the pool at every step.
#[test]
fn samples_of_a_long_prompt_fit_where_a_prompt_each_would_not() {
    const LONG: usize = 200; // 13 blocks of 16
    const SAMPLES: usize = 8;
    let m = TinyModel::new(SPECS[0], 720);
    let prompt = random_prompt(721, LONG);
    for policy in PolicyKind::ALL {
        if policy == PolicyKind::Full {
            continue;
        }
        let c = CompressionConfig {
            policy,
            budget: 32,
            buffer: 16,
            window: 8,
            ..CompressionConfig::default()
        };
        // 8 samples of 3 blocks (B + b = 48 slots) after the fork; the prompt's 13 before.
        let pool = SAMPLES * (32 + 16) / BLOCK_SIZE;
        assert!(pool < SAMPLES * LONG.div_ceil(BLOCK_SIZE));
        let mut e = m.engine_pool(256, rkv_engine::KvDtype::F32, BLOCK_SIZE, pool);
        let solo: Vec<_> = (0..SAMPLES as u64)
            .map(|i| {
                e.generate(request(&prompt, 40 + i), Some(c), |_| {})
                    .unwrap_or_else(|err| panic!("{policy} solo {i}: {err}"))
            })
            .collect();
        let ids = e
            .add_request_n(request(&prompt, 40), Some(c), SAMPLES)
            .unwrap_or_else(|err| panic!("{policy}: refused: {err}"));
        let mut steps = 0;
        while e.has_work() {
            e.step();
            let failed = e.take_failures();
            assert!(failed.is_empty(), "{policy}: {failed:?}");
            steps += 1;
            assert!(steps < 1000, "{policy}: runaway");
        }
        assert_eq!(e.store().pool().n_free(), pool, "{policy}: blocks back");
        assert_eq!(
            e.counters().preemptions_total,
            0,
            "{policy}: nobody preempted"
        );
        for (i, id) in ids.iter().enumerate() {
            let out = e.take_output(*id).expect("output");
            assert_eq!(out.token_ids, solo[i].token_ids, "{policy}: sample {i}");
        }
    }
}
