//! Every KV policy through the whole engine (`Engine::generate` / `add_request` + `step`)
//! on tiny random-weight models of each architecture (Llama GQA, Llama MHA, Qwen2 with
//! biases, Qwen3 with q/k norms), loaded from Hugging Face directories written to a
//! tempdir. Checked:
//! - compressing policies bound the resident slots by `budget + buffer`, compress exactly
//!   as often as the schedule says, evict `buffer` slots per decode-time compression, hold
//!   fewer KV bytes than FullKV, and generate FullKV's tokens up to the first compression;
//! - a budget above prompt + max_tokens gives exactly FullKV's tokens;
//! - a prompt longer than `budget + buffer` is compressed right after prefill;
//! - chunked prefill (small `max_batch_tokens`) gives one-shot prefill's tokens;
//! - requests run concurrently give the same tokens and statistics as each alone;
//! - a bad compression config is refused by `add_request`, naming the field;
//! - a pool too small for the load preempts and recomputes, and every request still gets
//!   its solo tokens and statistics, for every policy;
//! - R-KV reads the keys in place from the blocks (block sizes that are powers of two) or
//!   gathers them (other sizes) with the same tokens and statistics, for f16 and f32 KV;
//! - every request returns its KV blocks to the pool.

mod tiny;

use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_engine::{Admission, Engine, GenerationOutput, GenerationRequest, KvDtype, SamplingParams};
use tiny::{random_prompt, TinyModel, KV_BLOCKS, SPECS};

const BUDGET: usize = 32;
const BUFFER: usize = 16;
const WINDOW: usize = 8;
const PROMPT: usize = 20;
const MAX_TOKENS: usize = 150;

fn comp(policy: PolicyKind, budget: usize) -> CompressionConfig {
    CompressionConfig {
        policy,
        budget,
        buffer: BUFFER,
        window: WINDOW,
        ..CompressionConfig::default()
    }
}

fn request(prompt: &[u32], max_tokens: usize) -> GenerationRequest {
    GenerationRequest {
        logprobs: Default::default(),
        prompt: prompt.to_vec(),
        sampling: SamplingParams::default(),
        max_tokens,
        ignore_eos: true,
        stop: Vec::new(),
        grammar: None,
    }
}

/// Generates and checks that every block went back to the pool.
fn generate(
    e: &mut Engine,
    prompt: &[u32],
    max_tokens: usize,
    c: CompressionConfig,
    tag: &str,
) -> GenerationOutput {
    let out = e
        .generate(request(prompt, max_tokens), Some(c), |_| {})
        .unwrap_or_else(|err| panic!("{tag}: generate: {err}"));
    assert_eq!(
        e.store().pool().n_free(),
        KV_BLOCKS,
        "{tag}: KV blocks not returned to the pool"
    );
    assert!(!e.has_work(), "{tag}: engine still has work");
    assert_eq!(out.token_ids.len(), max_tokens, "{tag}: token count");
    out
}

/// Compressions the schedule makes when `fed` tokens go in (the prompt at once).
fn expected_compressions(prompt: usize, fed: usize, b: usize, buf: usize) -> usize {
    let mut len = prompt;
    let mut n = 0;
    if len >= b + buf {
        len = b;
        n += 1;
    }
    for _ in prompt..fed {
        len += 1;
        if len >= b + buf {
            len = b;
            n += 1;
        }
    }
    n
}

#[test]
fn policies_bound_memory_and_follow_the_schedule() {
    // Every registered policy that compresses, the new ones included.
    let compressing: Vec<PolicyKind> = PolicyKind::ALL
        .into_iter()
        .filter(|p| p.compresses())
        .collect();
    for (si, spec) in SPECS.iter().enumerate() {
        let m = TinyModel::new(*spec, 100 + si as u64);
        let mut e = m.engine(256);
        let prompt = random_prompt(7 + si as u64, PROMPT);
        let full = generate(
            &mut e,
            &prompt,
            MAX_TOKENS,
            CompressionConfig::full(),
            spec.name,
        );
        // The last token is sampled, never fed.
        let fed = PROMPT + MAX_TOKENS - 1;
        assert_eq!(full.stats.compressions, 0, "{}: full", spec.name);
        assert_eq!(full.stats.evicted_tokens, 0, "{}: full", spec.name);
        assert_eq!(full.stats.kv_slots_peak, fed, "{}: full", spec.name);
        let n_comp = expected_compressions(PROMPT, fed, BUDGET, BUFFER);
        // Tokens sampled at or before the step that first reaches B + b saw the whole cache.
        let same_prefix = BUDGET + BUFFER - PROMPT + 1;
        let mut outputs = Vec::new();
        for &policy in &compressing {
            let tag = format!("{} {policy}", spec.name);
            let out = generate(&mut e, &prompt, MAX_TOKENS, comp(policy, BUDGET), &tag);
            let st = &out.stats;
            assert_eq!(st.kv_slots_peak, BUDGET + BUFFER, "{tag}: kv_slots_peak");
            assert_eq!(st.compressions, n_comp, "{tag}: compressions");
            assert!(st.compressions > 0, "{tag}: no compression");
            assert_eq!(
                st.evicted_tokens,
                st.compressions * BUFFER,
                "{tag}: evicted tokens"
            );
            assert!(
                st.kv_bytes_peak < full.stats.kv_bytes_peak,
                "{tag}: kv_bytes_peak {} not below FullKV's {}",
                st.kv_bytes_peak,
                full.stats.kv_bytes_peak
            );
            assert_eq!(
                st.kv_bytes_peak,
                (BUDGET + BUFFER).div_ceil(tiny::BLOCK_SIZE) * e.store().bytes_per_block(),
                "{tag}: kv_bytes_peak"
            );
            assert_eq!(
                out.token_ids[..same_prefix],
                full.token_ids[..same_prefix],
                "{tag}: tokens before the first compression differ from FullKV's"
            );
            // A budget that is never reached changes nothing.
            let big = generate(
                &mut e,
                &prompt,
                MAX_TOKENS,
                comp(policy, PROMPT + MAX_TOKENS + 1),
                &tag,
            );
            assert_eq!(big.stats.compressions, 0, "{tag}: big budget compressed");
            assert_eq!(
                big.token_ids, full.token_ids,
                "{tag}: a budget above prompt + max_tokens must give FullKV's tokens"
            );
            assert_eq!(big.stats.kv_bytes_peak, full.stats.kv_bytes_peak, "{tag}");
            outputs.push((policy, out.token_ids));
        }
        // The scored policies really did something different from each other or FullKV
        // somewhere (a smoke check that compression reaches the model's attention).
        let differs = outputs.iter().filter(|(_, t)| *t != full.token_ids).count();
        eprintln!(
            "{}: {differs} of {} compressing policies diverge from FullKV",
            spec.name,
            outputs.len()
        );
    }
}

#[test]
fn long_prompt_is_compressed_right_after_prefill() {
    let prompt_len = BUDGET + BUFFER + 12;
    for (si, spec) in SPECS.iter().enumerate() {
        let m = TinyModel::new(*spec, 200 + si as u64);
        let mut e = m.engine(256);
        let prompt = random_prompt(30 + si as u64, prompt_len);
        let full = generate(&mut e, &prompt, 1, CompressionConfig::full(), spec.name);
        for policy in [
            PolicyKind::RKv,
            PolicyKind::SnapKv,
            PolicyKind::H2o,
            PolicyKind::StreamingLlm,
        ] {
            let tag = format!("{} {policy}", spec.name);
            let out = generate(&mut e, &prompt, 1, comp(policy, BUDGET), &tag);
            assert_eq!(out.stats.compressions, 1, "{tag}: compressions");
            assert_eq!(
                out.stats.evicted_tokens,
                prompt_len - BUDGET,
                "{tag}: evicted"
            );
            assert_eq!(out.stats.kv_slots_peak, prompt_len, "{tag}: peak");
            // The prefill's own attention saw the whole prompt.
            assert_eq!(out.token_ids, full.token_ids, "{tag}: first token");
            // And decoding goes on from the compressed cache.
            let longer = generate(&mut e, &prompt, 40, comp(policy, BUDGET), &tag);
            assert_eq!(
                longer.stats.compressions,
                expected_compressions(prompt_len, prompt_len + 39, BUDGET, BUFFER),
                "{tag}: compressions over 40 tokens"
            );
            assert!(longer.stats.kv_slots_peak <= prompt_len, "{tag}");
        }
    }
}

/// One-shot vs chunked prefill of `prompt`, per policy.
fn chunked_vs_one_shot(prompt_len: usize, chunk: usize, policies: &[PolicyKind]) {
    for (si, spec) in SPECS.iter().enumerate() {
        let m = TinyModel::new(*spec, 300 + si as u64);
        let mut one = m.engine(256);
        let mut chunked = m.engine(chunk);
        let prompt = random_prompt(40 + si as u64, prompt_len);
        for &policy in policies {
            let tag = format!(
                "{} {policy} prompt {prompt_len} chunks of {chunk}",
                spec.name
            );
            let c = if policy == PolicyKind::Full {
                CompressionConfig::full()
            } else {
                comp(policy, BUDGET)
            };
            let a = generate(&mut one, &prompt, 60, c, &tag);
            let b = generate(&mut chunked, &prompt, 60, c, &tag);
            assert_eq!(a.token_ids, b.token_ids, "{tag}: tokens");
            assert_eq!(a.stats.compressions, b.stats.compressions, "{tag}");
            assert_eq!(a.stats.evicted_tokens, b.stats.evicted_tokens, "{tag}");
        }
    }
}

#[test]
fn keys_read_in_place_match_keys_gathered() {
    // 16 rows per block: R-KV reads the keys where they lie; 12: it gathers them first.
    // Both see the same values, so every kept set, and so every token, must agree.
    for (si, spec) in SPECS.iter().enumerate() {
        let m = TinyModel::new(*spec, 500 + si as u64);
        let prompt = random_prompt(70 + si as u64, PROMPT);
        for dtype in [KvDtype::F16, KvDtype::F32] {
            let tag = format!("{} {dtype:?}", spec.name);
            let mut in_place = m.engine_with(256, dtype, 16);
            let mut gathered = m.engine_with(256, dtype, 12);
            let c = comp(PolicyKind::RKv, BUDGET);
            let run = |e: &mut Engine, bs: usize| {
                let out = e
                    .generate(request(&prompt, MAX_TOKENS), Some(c), |_| {})
                    .unwrap_or_else(|err| panic!("{tag} block size {bs}: {err}"));
                assert_eq!(e.store().pool().n_free(), KV_BLOCKS, "{tag}: blocks back");
                out
            };
            let a = run(&mut in_place, 16);
            let b = run(&mut gathered, 12);
            assert!(a.stats.compressions > 1, "{tag}: compressions");
            assert_eq!(a.token_ids, b.token_ids, "{tag}: tokens");
            assert_eq!(a.stats.compressions, b.stats.compressions, "{tag}");
            assert_eq!(a.stats.evicted_tokens, b.stats.evicted_tokens, "{tag}");
            assert_eq!(a.stats.kv_slots_peak, b.stats.kv_slots_peak, "{tag}");
        }
    }
}

#[test]
fn chunked_prefill_matches_one_shot() {
    chunked_vs_one_shot(
        PROMPT,
        7,
        &[PolicyKind::Full, PolicyKind::RKv, PolicyKind::H2o],
    );
    // The window of the first compression starts inside the prompt.
    chunked_vs_one_shot(
        BUDGET + BUFFER - 3,
        7,
        &[PolicyKind::Full, PolicyKind::RKv, PolicyKind::SnapKv],
    );
}

#[test]
fn chunked_long_prompt_matches_one_shot() {
    chunked_vs_one_shot(
        BUDGET + BUFFER + 12,
        16,
        &[
            PolicyKind::Full,
            PolicyKind::RKv,
            PolicyKind::SnapKv,
            PolicyKind::StreamingLlm,
            PolicyKind::H2o,
        ],
    );
}

#[test]
fn concurrent_requests_match_each_alone() {
    for (si, spec) in SPECS.iter().enumerate() {
        let m = TinyModel::new(*spec, 400 + si as u64);
        let jobs: Vec<(Vec<u32>, usize, CompressionConfig)> = vec![
            (
                random_prompt(50 + si as u64, 20),
                120,
                comp(PolicyKind::RKv, BUDGET),
            ),
            (
                random_prompt(60 + si as u64, 33),
                90,
                comp(PolicyKind::H2o, BUDGET),
            ),
            (
                random_prompt(70 + si as u64, 9),
                100,
                CompressionConfig::full(),
            ),
            (
                random_prompt(80 + si as u64, 25),
                110,
                comp(PolicyKind::SnapKv, 40),
            ),
        ];
        let mut solo_engine = m.engine(256);
        let solo: Vec<GenerationOutput> = jobs
            .iter()
            .enumerate()
            .map(|(i, (p, n, c))| {
                generate(
                    &mut solo_engine,
                    p,
                    *n,
                    *c,
                    &format!("{} solo {i}", spec.name),
                )
            })
            .collect();
        // Together: the last request joins a few steps late, and a small token budget per
        // step makes prompt chunks share forwards with other sequences' decode tokens.
        for max_batch in [256, 12] {
            let mut e = m.engine(max_batch);
            let mut ids = Vec::new();
            for (p, n, c) in &jobs[..3] {
                ids.push(e.add_request(request(p, *n), Some(*c)).unwrap());
            }
            let mut steps = 0;
            while e.has_work() || ids.len() < jobs.len() {
                if steps == 5 {
                    let (p, n, c) = &jobs[3];
                    ids.push(e.add_request(request(p, *n), Some(*c)).unwrap());
                }
                e.step();
                let failed = e.take_failures();
                assert!(failed.is_empty(), "{}: step {steps}: {failed:?}", spec.name);
                steps += 1;
                assert!(steps < 2000, "{}: runaway", spec.name);
            }
            assert_eq!(e.store().pool().n_free(), KV_BLOCKS, "{}", spec.name);
            for (i, id) in ids.iter().enumerate() {
                let tag = format!(
                    "{} request {i} batched (max_batch_tokens {max_batch})",
                    spec.name
                );
                let out = e
                    .take_output(*id)
                    .unwrap_or_else(|| panic!("{tag}: no output"));
                assert_eq!(out.token_ids, solo[i].token_ids, "{tag}: tokens");
                assert_eq!(out.stats.compressions, solo[i].stats.compressions, "{tag}");
                assert_eq!(
                    out.stats.evicted_tokens, solo[i].stats.evicted_tokens,
                    "{tag}"
                );
                assert_eq!(
                    out.stats.kv_slots_peak, solo[i].stats.kv_slots_peak,
                    "{tag}"
                );
            }
        }
    }
}

#[test]
fn bad_compression_config_is_refused_naming_the_field() {
    let m = TinyModel::new(SPECS[0], 500);
    let mut e = m.engine(256);
    let prompt = random_prompt(90, 10);
    let cases = [
        (comp(PolicyKind::RKv, WINDOW), "budget"),
        (comp(PolicyKind::SnapKv, WINDOW - 1), "window"),
        (
            CompressionConfig {
                buffer: WINDOW - 1,
                ..comp(PolicyKind::RKv, BUDGET)
            },
            "buffer",
        ),
        (
            CompressionConfig {
                buffer: 0,
                ..comp(PolicyKind::StreamingLlm, BUDGET)
            },
            "buffer",
        ),
        (
            CompressionConfig {
                kernel: 4,
                ..comp(PolicyKind::RKv, BUDGET)
            },
            "kernel",
        ),
        (
            CompressionConfig {
                lambda: 1.5,
                ..comp(PolicyKind::RKv, BUDGET)
            },
            "lambda",
        ),
        (
            CompressionConfig {
                sinks: BUDGET,
                ..comp(PolicyKind::StreamingLlm, BUDGET)
            },
            "sinks",
        ),
    ];
    for (c, field) in cases {
        let err = e
            .add_request(request(&prompt, 5), Some(c))
            .expect_err(&format!("{c:?} accepted"));
        let msg = err.to_string();
        assert!(
            msg.contains(field),
            "{c:?}: error {msg:?} does not name {field}"
        );
        assert!(!e.has_work(), "a refused request was admitted");
        assert_eq!(e.store().pool().n_free(), KV_BLOCKS);
    }
    // The engine still works afterwards.
    generate(
        &mut e,
        &prompt,
        5,
        comp(PolicyKind::RKv, BUDGET),
        "after refusals",
    );
}

/// A pool too small for the load: a FullKV sequence that cannot grow preempts the newest
/// running sequence, whose blocks are freed and whose tokens are recomputed when it
/// resumes (compressing ones replaying their compressions at the same points). Every
/// request still gets exactly the tokens and statistics it gets alone, for every policy,
/// and every block comes back.
#[test]
fn preempted_sequences_recompute_their_solo_output() {
    crowded_pool_gives_solo_output(Admission::Grow);
}

/// The same load with FullKV sequences reserving their whole length on admission: nothing
/// is preempted (a FullKV request waits until its length is free), and every request
/// still gets its solo tokens and statistics.
#[test]
fn reserving_full_kv_sequences_are_never_preempted() {
    crowded_pool_gives_solo_output(Admission::Reserve);
}

fn crowded_pool_gives_solo_output(admission: Admission) {
    for (si, spec) in SPECS.iter().enumerate() {
        let m = TinyModel::new(*spec, 600 + si as u64);
        let jobs: Vec<(Vec<u32>, usize, CompressionConfig)> = vec![
            (
                random_prompt(610 + si as u64, 20),
                120,
                CompressionConfig::full(),
            ),
            (
                random_prompt(620 + si as u64, 30),
                110,
                comp(PolicyKind::RKv, BUDGET),
            ),
            (
                random_prompt(630 + si as u64, 12),
                130,
                CompressionConfig::full(),
            ),
            (
                random_prompt(640 + si as u64, 25),
                100,
                comp(PolicyKind::SnapKv, BUDGET),
            ),
            (
                random_prompt(650 + si as u64, 18),
                90,
                comp(PolicyKind::H2o, BUDGET),
            ),
            (
                random_prompt(660 + si as u64, 22),
                95,
                comp(PolicyKind::StreamingLlm, BUDGET),
            ),
        ];
        let mut solo_engine = m.engine(256);
        let solo: Vec<GenerationOutput> = jobs
            .iter()
            .enumerate()
            .map(|(i, (p, n, c))| {
                generate(
                    &mut solo_engine,
                    p,
                    *n,
                    *c,
                    &format!("{} solo {i}", spec.name),
                )
            })
            .collect();
        // 20 blocks of 16 slots: the two FullKV requests need 9 each, the compressing
        // ones reserve 3 each.
        let pool = 20;
        let mut e = m.engine_admission(256, KvDtype::F32, 16, pool, admission);
        let ids: Vec<_> = jobs
            .iter()
            .map(|(p, n, c)| e.add_request(request(p, *n), Some(*c)).unwrap())
            .collect();
        let mut steps = 0;
        while e.has_work() {
            e.step();
            let failed = e.take_failures();
            assert!(failed.is_empty(), "{}: step {steps}: {failed:?}", spec.name);
            let c = e.counters();
            assert!(c.kv_blocks_used <= pool, "{}", spec.name);
            steps += 1;
            assert!(steps < 5000, "{}: runaway", spec.name);
        }
        let c = e.counters();
        match admission {
            Admission::Grow => assert!(
                c.preemptions_total > 0,
                "{}: nothing was preempted",
                spec.name
            ),
            Admission::Reserve => assert_eq!(
                c.preemptions_total, 0,
                "{}: a reserving sequence was preempted",
                spec.name
            ),
        }
        assert_eq!(c.kv_blocks_used, 0, "{}: blocks not returned", spec.name);
        for (i, id) in ids.iter().enumerate() {
            let tag = format!("{} request {i} ({:?})", spec.name, jobs[i].2.policy);
            let out = e
                .take_output(*id)
                .unwrap_or_else(|| panic!("{tag}: no output"));
            assert_eq!(out.token_ids, solo[i].token_ids, "{tag}: tokens");
            assert_eq!(out.stats.compressions, solo[i].stats.compressions, "{tag}");
            assert_eq!(
                out.stats.evicted_tokens, solo[i].stats.evicted_tokens,
                "{tag}"
            );
            assert_eq!(
                out.stats.kv_slots_peak, solo[i].stats.kv_slots_peak,
                "{tag}"
            );
        }
    }
}
