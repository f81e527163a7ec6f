//! Automatic prefix caching on tiny random-weight models: a request whose prompt starts
//! with a prompt seen before takes that prefix's blocks instead of computing it, and
//! generates exactly what it generates with the cache off (FullKV and every policy; those
//! whose state needs every prompt query, H2O's family, take nothing); and after many
//! random requests with shared prefixes, cancellations and preemptions every block is
//! free or cached, and every cached block can be taken back.

mod tiny;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_engine::{Admission, GenerationOutput, GenerationRequest, KvDtype, SamplingParams};
use tiny::{random_prompt, TinyModel, BLOCK_SIZE, SPECS};

fn request(prompt: &[u32], max_tokens: usize) -> GenerationRequest {
    GenerationRequest {
        logprobs: Default::default(),
        prompt: prompt.to_vec(),
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        max_tokens,
        ignore_eos: true,
        stop: Vec::new(),
        grammar: None,
    }
}

fn comp(policy: PolicyKind) -> CompressionConfig {
    match policy {
        PolicyKind::Full => CompressionConfig::full(),
        p => CompressionConfig {
            policy: p,
            budget: 32,
            buffer: 16,
            window: 8,
            ..CompressionConfig::default()
        },
    }
}

#[test]
fn a_cached_prefix_gives_the_same_tokens_as_computing_it() {
    for (si, spec) in SPECS.iter().enumerate().take(2) {
        let m = TinyModel::new(*spec, 900 + si as u64);
        let first = random_prompt(910 + si as u64, 70);
        // A second turn: the first prompt, then more.
        let mut second = first.clone();
        second.extend(random_prompt(920 + si as u64, 30));
        for policy in PolicyKind::ALL {
            let c = comp(policy);
            let tag = format!("{} {policy}", spec.name);
            let run = |cache: bool| -> Vec<GenerationOutput> {
                let mut e = m.engine(64);
                e.set_prefix_cache(cache);
                [&first, &first, &second]
                    .iter()
                    .map(|p| {
                        e.generate(request(p, 40), Some(c), |_| {})
                            .unwrap_or_else(|err| panic!("{tag}: {err}"))
                    })
                    .collect()
            };
            let (on, off) = (run(true), run(false));
            for (i, (a, b)) in on.iter().zip(&off).enumerate() {
                assert_eq!(a.token_ids, b.token_ids, "{tag}: request {i}");
                assert_eq!(b.stats.cached_tokens, 0, "{tag}: request {i}, cache off");
            }
            let h2o_family = policy.needs_h2o_scores();
            let computed = if policy == PolicyKind::Full { 1 } else { 8 };
            let expect = |len: usize| {
                if h2o_family {
                    0
                } else {
                    // Whole blocks of the first prompt, the computed tail left out.
                    ((len - computed) / BLOCK_SIZE).min(first.len() / BLOCK_SIZE) * BLOCK_SIZE
                }
            };
            assert_eq!(on[0].stats.cached_tokens, 0, "{tag}");
            assert_eq!(on[1].stats.cached_tokens, expect(first.len()), "{tag}");
            assert_eq!(on[2].stats.cached_tokens, expect(second.len()), "{tag}");
        }
    }
}

#[test]
fn a_compressed_prompt_takes_nothing_from_the_cache_and_keeps_its_output() {
    let m = TinyModel::new(SPECS[0], 930);
    let prompt = random_prompt(931, 120);
    let c = CompressionConfig {
        prompt: rkv_core::PromptMode::Compress,
        prompt_chunk: 32,
        ..comp(PolicyKind::RKv)
    };
    let mut e = m.engine(64);
    let a = e.generate(request(&prompt, 20), Some(c), |_| {}).unwrap();
    let b = e.generate(request(&prompt, 20), Some(c), |_| {}).unwrap();
    assert_eq!(a.token_ids, b.token_ids);
    assert_eq!(b.stats.cached_tokens, 0);
    // Whatever of its blocks the cache kept, a FullKV request of the same prompt then
    // generates what it generates on an engine that never cached anything.
    let full = e
        .generate(request(&prompt, 20), Some(comp(PolicyKind::Full)), |_| {})
        .unwrap();
    let mut fresh = m.engine(64);
    fresh.set_prefix_cache(false);
    let want = fresh
        .generate(request(&prompt, 20), Some(comp(PolicyKind::Full)), |_| {})
        .unwrap();
    assert_eq!(full.token_ids, want.token_ids);
}

#[test]
fn many_random_requests_leave_every_block_free_or_cached() {
    let m = TinyModel::new(SPECS[1], 940);
    let pool = 24;
    let mut e = m.engine_admission(48, KvDtype::F32, BLOCK_SIZE, pool, Admission::Grow);
    let stems: Vec<Vec<u32>> = (0..4).map(|i| random_prompt(950 + i, 40)).collect();
    let mut rng = StdRng::seed_from_u64(960);
    let policies = [
        PolicyKind::Full,
        PolicyKind::RKv,
        PolicyKind::SnapKv,
        PolicyKind::H2o,
    ];
    let mut live = Vec::new();
    let (mut submitted, mut cancelled, mut steps) = (0, 0, 0);
    while submitted < 1000 || e.has_work() {
        steps += 1;
        assert!(steps < 200_000, "no progress: {:?}", e.counters());
        // Up to 3 new requests a step: a shared stem (or part of one), then their own
        // tokens.
        for _ in 0..rng.gen_range(0..=3) {
            if submitted == 1000 {
                break;
            }
            let stem = &stems[rng.gen_range(0..stems.len())];
            let mut p = stem[..rng.gen_range(0..=stem.len())].to_vec();
            p.extend(random_prompt(rng.gen(), rng.gen_range(1..40)));
            let policy = policies[rng.gen_range(0..policies.len())];
            let id = e
                .add_request(request(&p, rng.gen_range(1..60)), Some(comp(policy)))
                .unwrap();
            live.push(id);
            submitted += 1;
        }
        e.step();
        assert!(e.take_failures().is_empty());
        // Now and then a request is cancelled, wherever it is.
        if !live.is_empty() && rng.gen_bool(0.1) {
            let id = live.swap_remove(rng.gen_range(0..live.len()));
            e.abort(id);
            cancelled += 1;
        }
        live.retain(|&id| e.take_output(id).is_none());
        let c = e.counters();
        assert_eq!(c.kv_blocks_total, pool);
        assert!(c.kv_blocks_used + c.kv_blocks_cached <= pool);
    }
    let c = e.counters();
    assert_eq!(c.kv_blocks_used, 0, "{c:?}");
    assert!(c.kv_blocks_cached > 0, "{c:?}");
    assert!(c.preemptions_total > 0, "{c:?}");
    assert!(cancelled > 50, "{cancelled}");
    assert!(
        c.prefix_cache_hits_total > 0 && c.prefix_cache_hits_total < c.prefix_cache_queries_total,
        "{c:?}"
    );
    // Every cached block can be taken back: one FullKV request fills the whole pool.
    let out = e
        .generate(
            request(&random_prompt(970, pool * BLOCK_SIZE - 8), 8),
            Some(comp(PolicyKind::Full)),
            |_| {},
        )
        .unwrap();
    assert_eq!(out.token_ids.len(), 8);
    assert_eq!(e.counters().kv_blocks_used, 0);
}
