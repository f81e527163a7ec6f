//! Constrained decoding on tiny random-weight models, whose unconstrained output is noise:
//! whatever a request's grammar lets through is all the grammar's doing. The tiny
//! vocabulary is `<unk> <s> </s> w3 .. w99`; the grammar `(w1[0-9]){3,5}` allows exactly
//! the tokens `w10`..`w19` (ids 10-19), three to five of them, and EOS (`</s>`, id 2)
//! only after the third. Checked: greedy and sampled outputs keep to it and end with
//! `stop`; a grammar with one output ends without EOS when it is complete; constrained
//! and free requests share steps without disturbing each other; `n` samples each follow
//! their own matcher (each the same as a request of its own); a preempted and recomputed
//! sequence keeps its grammar's place, and so does one whose KV cache R-KV compresses;
//! log-probabilities are the model's, before the mask.

mod tiny;

use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_engine::{
    Admission, Engine, FinishReason, GenerationOutput, GenerationRequest, Grammar, GrammarError,
    GrammarSpec, KvDtype, LogprobsRequest, SamplingParams,
};
use tiny::{random_prompt, TinyModel, BLOCK_SIZE, EOS, SPECS};

const TENS: &str = "(w1[0-9]){3,5}";

fn grammar(e: &Engine, regex: &str) -> Grammar {
    e.grammars()
        .compile(&GrammarSpec::Regex(regex.into()))
        .unwrap_or_else(|err| panic!("compile {regex}: {err}"))
}

fn request(prompt: &[u32], seed: u64, g: Option<Grammar>) -> GenerationRequest {
    GenerationRequest {
        prompt: prompt.to_vec(),
        sampling: SamplingParams {
            temperature: if seed == 0 { 0.0 } else { 1.0 },
            top_k: 0,
            top_p: 1.0,
            seed,
        },
        max_tokens: 40,
        ignore_eos: false,
        stop: Vec::new(),
        logprobs: LogprobsRequest::default(),
        grammar: g,
    }
}

/// The output follows `(w1[0-9]){3,5}` and then ends: three to five of ids 10-19, then EOS
/// or nothing (five make it complete).
fn assert_tens(out: &GenerationOutput, tag: &str) {
    let ids = &out.token_ids;
    let body: &[u32] = match ids.last() {
        Some(&EOS) => &ids[..ids.len() - 1],
        _ => ids,
    };
    assert!(
        (3..=5).contains(&body.len()) && body.iter().all(|t| (10..=19).contains(t)),
        "{tag}: {ids:?}"
    );
    assert!(
        body.len() == 5 || ids.last() == Some(&EOS),
        "{tag}: {ids:?}"
    );
    assert_eq!(out.finish_reason, FinishReason::Stop, "{tag}: {ids:?}");
}

/// Runs requests together to the end; returns their outputs in order.
fn together(e: &mut Engine, reqs: Vec<(GenerationRequest, usize)>) -> Vec<GenerationOutput> {
    let ids: Vec<_> = reqs
        .into_iter()
        .flat_map(|(r, n)| e.add_request_n(r, None, n).expect("add"))
        .collect();
    let mut steps = 0;
    while e.has_work() {
        e.step();
        let failed = e.take_failures();
        assert!(failed.is_empty(), "step {steps}: {failed:?}");
        steps += 1;
        assert!(steps < 10_000, "runaway");
    }
    assert_eq!(e.counters().kv_blocks_used, 0, "blocks not returned");
    ids.iter()
        .map(|&id| e.take_output(id).expect("output"))
        .collect()
}

#[test]
fn outputs_keep_to_the_grammar_greedy_and_sampled() {
    for (si, spec) in SPECS.iter().enumerate() {
        let m = TinyModel::new(*spec, 1300 + si as u64);
        let mut e = m.engine(64);
        let g = grammar(&e, TENS);
        let prompt = random_prompt(1310 + si as u64, 12);
        // Without the grammar the random model strays from ids 10-19 (so the check
        // below can fail).
        let free = e.generate(request(&prompt, 0, None), None, |_| {}).unwrap();
        assert!(
            free.token_ids.iter().any(|t| !(10..=19).contains(t)),
            "{}: {:?}",
            spec.name,
            free.token_ids
        );
        let (mut with_eos, mut five) = (0, 0);
        for seed in 0..24 {
            let tag = format!("{} seed {seed}", spec.name);
            let out = e
                .generate(request(&prompt, seed, Some(g.clone())), None, |_| {})
                .unwrap_or_else(|err| panic!("{tag}: {err}"));
            assert_tens(&out, &tag);
            assert!(out.stats.grammar_seconds > 0.0, "{tag}");
            match out.token_ids.last() {
                Some(&EOS) => with_eos += 1,
                _ => five += 1,
            }
        }
        // Some draws end with EOS where it may come, others run to the fifth token.
        assert!(with_eos > 0 && five > 0, "{}: {with_eos} {five}", spec.name);
    }
}

#[test]
fn a_complete_grammar_ends_the_sequence_without_eos() {
    let m = TinyModel::new(SPECS[0], 1400);
    let mut e = m.engine(64);
    let g = grammar(&e, "w5w6");
    let prompt = random_prompt(1401, 9);
    for seed in [0, 3] {
        let out = e
            .generate(request(&prompt, seed, Some(g.clone())), None, |_| {})
            .unwrap();
        assert_eq!(out.token_ids, vec![5, 6], "seed {seed}");
        assert_eq!(out.finish_reason, FinishReason::Stop);
    }
    // max_tokens still cuts a grammar short.
    let mut short = request(&prompt, 0, Some(grammar(&e, TENS)));
    short.max_tokens = 2;
    let out = e.generate(short, None, |_| {}).unwrap();
    assert_eq!(out.token_ids.len(), 2);
    assert_eq!(out.finish_reason, FinishReason::Length);
}

#[test]
fn log_probabilities_are_the_models_before_the_mask() {
    let m = TinyModel::new(SPECS[1], 1500);
    let mut e = m.engine(64);
    let prompt = random_prompt(1501, 9);
    let mut r = request(&prompt, 0, Some(grammar(&e, "w5w6")));
    r.logprobs = LogprobsRequest {
        generated: Some(2),
        prompt: None,
    };
    let out = e.generate(r, None, |_| {}).unwrap();
    let lps = out.logprobs.expect("logprobs");
    assert_eq!(lps.len(), 2);
    for lp in &lps {
        // Over the mask alone a forced token would have probability 1 (logprob 0).
        assert!(lp.logprob < -1e-3, "{lp:?}");
        assert_eq!(lp.top.len(), 2);
    }
}

#[test]
fn constrained_and_free_requests_share_steps_and_samples_fork_their_matchers() {
    for (si, spec) in SPECS.iter().enumerate().take(2) {
        let m = TinyModel::new(*spec, 1600 + si as u64);
        let mut e = m.engine(64);
        let g = grammar(&e, TENS);
        let prompts: Vec<Vec<u32>> = (0..4)
            .map(|i| random_prompt(1610 + 10 * si as u64 + i, 20))
            .collect();
        // Alone: one free and one constrained request per prompt, and 3 constrained
        // samples of the first prompt as separate requests seeded 7, 8, 9.
        let solo = |e: &mut Engine, r: GenerationRequest| e.generate(r, None, |_| {}).unwrap();
        let mut alone = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            alone.push(solo(&mut e, request(p, 0, None)));
            alone.push(solo(&mut e, request(p, 1 + i as u64, Some(g.clone()))));
        }
        for s in 7..10 {
            alone.push(solo(&mut e, request(&prompts[0], s, Some(g.clone()))));
        }
        // Together in one engine: the same requests, the samples as one request of n = 3.
        let mut reqs = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            reqs.push((request(p, 0, None), 1));
            reqs.push((request(p, 1 + i as u64, Some(g.clone())), 1));
        }
        reqs.push((request(&prompts[0], 7, Some(g.clone())), 3));
        let outs = together(&mut e, reqs);
        assert_eq!(outs.len(), alone.len());
        for (i, (a, b)) in outs.iter().zip(&alone).enumerate() {
            assert_eq!(a.token_ids, b.token_ids, "{} output {i}", spec.name);
            if i % 2 == 1 || i >= 8 {
                assert_tens(a, &format!("{} output {i}", spec.name));
            }
        }
        let samples: Vec<_> = outs[8..].iter().map(|o| &o.token_ids).collect();
        assert!(
            samples[0] != samples[1] || samples[1] != samples[2],
            "{}: the samples are all the same: {samples:?}",
            spec.name
        );
    }
}

#[test]
fn a_preempted_sequence_keeps_its_place_in_the_grammar() {
    let m = TinyModel::new(SPECS[0], 1700);
    // Long outputs: any number of w3..w99 tokens, then `w5w6`, so sequences grow until
    // the small pool preempts some.
    let regex = "(w[3-9]|w[1-9][0-9])*w5w6";
    let prompts: Vec<Vec<u32>> = (0..6).map(|i| random_prompt(1710 + i, 30)).collect();
    let run = |kv_blocks: usize| {
        let mut e = m.engine_admission(64, KvDtype::F32, BLOCK_SIZE, kv_blocks, Admission::Grow);
        let g = grammar(&e, regex);
        let reqs = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut r = request(p, 20 + i as u64, Some(g.clone()));
                r.max_tokens = 120;
                (r, 1)
            })
            .collect();
        let outs = together(&mut e, reqs);
        (outs, e.counters().preemptions_total)
    };
    let (big, none) = run(256);
    assert_eq!(none, 0, "the big pool should not preempt");
    let (small, preempted) = run(16);
    assert!(preempted > 0, "the small pool never preempted");
    for (i, (a, b)) in small.iter().zip(&big).enumerate() {
        assert_eq!(a.token_ids, b.token_ids, "request {i}");
        // Ids 3-99 only, and EOS only right after `w5w6`.
        let ids = &a.token_ids;
        let body = match a.finish_reason {
            FinishReason::Stop => {
                assert!(ids.ends_with(&[5, 6, EOS]), "request {i}: {ids:?}");
                &ids[..ids.len() - 1]
            }
            _ => &ids[..],
        };
        assert!(body.iter().all(|&t| t >= 3), "request {i}: {ids:?}");
    }
}

#[test]
fn a_compressed_cache_does_not_disturb_the_grammar() {
    let m = TinyModel::new(SPECS[1], 1750);
    let mut e = m.engine(64);
    // At least 38 pairs `w1x w2y` (76 tokens: past budget + buffer), then EOS where it
    // may come: the grammar holds the order whatever the cache keeps. (Not `w3[0-9]`:
    // the token `w3` is a prefix of it that no token here can finish, a dead end that
    // a byte-level vocabulary, which has every single byte, never has.)
    let g = grammar(&e, "(w1[0-9]w2[0-9]){38,}");
    let rkv = CompressionConfig {
        policy: PolicyKind::RKv,
        budget: 32,
        buffer: 16,
        window: 8,
        ..CompressionConfig::default()
    };
    for seed in 1..4 {
        let mut r = request(&random_prompt(1760 + seed, 20), seed, Some(g.clone()));
        r.max_tokens = 120;
        let out = e.generate(r, Some(rkv), |_| {}).unwrap();
        assert!(out.stats.compressions > 0, "seed {seed}: never compressed");
        let body: Vec<u32> = out
            .token_ids
            .iter()
            .copied()
            .filter(|&t| t != EOS)
            .collect();
        assert!(body.len() >= 76, "seed {seed}: {:?}", out.token_ids);
        for (i, t) in body.iter().enumerate() {
            let lo = 10 * (i as u32 % 2 + 1);
            assert!(
                (lo..lo + 10).contains(t),
                "seed {seed} token {i}: {:?}",
                out.token_ids
            );
        }
    }
}

#[test]
fn grammars_that_cannot_be_enforced_are_refused_at_compile() {
    let m = TinyModel::new(SPECS[0], 1800);
    let e = m.engine(64);
    let compile = |s: GrammarSpec| e.grammars().compile(&s);
    for bad in [
        GrammarSpec::Regex("(w1".into()),
        GrammarSpec::Lark("start: nothing_defined".into()),
        GrammarSpec::JsonSchema(serde_json::json!({"type": "no-such-type"})),
        GrammarSpec::JsonSchema(serde_json::json!([1, 2])),
        // Nothing in this vocabulary spells `{`.
        GrammarSpec::JsonObject,
    ] {
        let err = compile(bad.clone()).expect_err(&format!("{bad:?}"));
        assert!(matches!(err, GrammarError::Invalid(_)), "{bad:?}: {err}");
    }
}
