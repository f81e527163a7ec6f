//! Prompt compression (`PromptMode::Compress`) through the whole engine on tiny
//! random-weight models of each architecture. Checked:
//! - every compressing policy holds at most `budget + buffer + chunk` slots through a
//!   prompt of 10x the budget, where keeping the prompt holds all of it;
//! - the appends end at the same tokens whatever a step's room, so feeding them in small
//!   pieces gives the same tokens and statistics as whole;
//! - a chunk that holds the whole prompt is the kept prompt;
//! - admission reserves the bound: a pool too small for the whole prompt runs it
//!   compressed and refuses it kept;
//! - a chunk below twice the window is refused by `add_request`.

mod tiny;

use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_core::PromptMode;
use rkv_engine::{Engine, GenerationOutput, GenerationRequest, KvDtype, SamplingParams};
use tiny::{random_prompt, TinyModel, BLOCK_SIZE, SPECS};

const BUDGET: usize = 32;
const BUFFER: usize = 16;
const WINDOW: usize = 8;
const CHUNK: usize = 32;
const PROMPT: usize = 330;
const MAX_TOKENS: usize = 40;

fn comp(policy: PolicyKind, prompt: PromptMode, chunk: usize) -> CompressionConfig {
    CompressionConfig {
        policy,
        budget: BUDGET,
        buffer: BUFFER,
        window: WINDOW,
        prompt,
        prompt_chunk: chunk,
        ..CompressionConfig::default()
    }
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

fn run(e: &mut Engine, prompt: &[u32], c: CompressionConfig, tag: &str) -> GenerationOutput {
    let n_blocks = e.store().pool().n_free();
    let out = e
        .generate(request(prompt), Some(c), |_| {})
        .unwrap_or_else(|err| panic!("{tag}: {err}"));
    assert_eq!(e.store().pool().n_free(), n_blocks, "{tag}: blocks back");
    assert_eq!(out.token_ids.len(), MAX_TOKENS, "{tag}: tokens");
    out
}

fn compressing() -> impl Iterator<Item = PolicyKind> {
    PolicyKind::ALL.into_iter().filter(|p| p.compresses())
}

#[test]
fn a_compressed_prompt_never_holds_more_than_budget_buffer_chunk() {
    for (si, spec) in SPECS.iter().enumerate() {
        let m = TinyModel::new(*spec, 900 + si as u64);
        let prompt = random_prompt(90 + si as u64, PROMPT);
        let mut e = m.engine(512);
        for policy in compressing() {
            let tag = format!("{} {policy}", spec.name);
            let kept = run(&mut e, &prompt, comp(policy, PromptMode::Keep, CHUNK), &tag);
            let comp_out = run(
                &mut e,
                &prompt,
                comp(policy, PromptMode::Compress, CHUNK),
                &tag,
            );
            assert_eq!(kept.stats.kv_slots_peak, PROMPT, "{tag}: kept peak");
            let peak = comp_out.stats.kv_slots_peak;
            assert!(peak <= BUDGET + BUFFER + CHUNK, "{tag}: peak {peak}");
            assert!(peak > BUDGET + BUFFER, "{tag}: peak {peak}");
            // Appends of 32 reach B + b = 48 at 64, then every 32 (or so) prompt tokens:
            // many compressions during the prompt where keeping it makes one.
            assert!(
                comp_out.stats.compressions >= kept.stats.compressions + 8,
                "{tag}: {} vs {}",
                comp_out.stats.compressions,
                kept.stats.compressions
            );
            assert!(comp_out.stats.kv_bytes_peak < kept.stats.kv_bytes_peak / 3);
        }
    }
}

#[test]
fn appends_do_not_depend_on_the_room_of_a_step() {
    for (si, spec) in SPECS.iter().enumerate() {
        let m = TinyModel::new(*spec, 910 + si as u64);
        let prompt = random_prompt(91 + si as u64, PROMPT);
        let mut whole = m.engine(512);
        let mut pieces = m.engine(7);
        for policy in compressing() {
            let tag = format!("{} {policy}", spec.name);
            let c = comp(policy, PromptMode::Compress, CHUNK + 8);
            let a = run(&mut whole, &prompt, c, &tag);
            let b = run(&mut pieces, &prompt, c, &tag);
            assert_eq!(a.token_ids, b.token_ids, "{tag}: tokens");
            assert_eq!(a.stats.compressions, b.stats.compressions, "{tag}");
            assert_eq!(a.stats.evicted_tokens, b.stats.evicted_tokens, "{tag}");
            assert_eq!(a.stats.kv_slots_peak, b.stats.kv_slots_peak, "{tag}");
        }
    }
}

#[test]
fn a_chunk_holding_the_whole_prompt_is_the_kept_prompt() {
    let spec = SPECS[0];
    let m = TinyModel::new(spec, 920);
    let prompt = random_prompt(92, 100);
    let mut e = m.engine(512);
    for policy in compressing() {
        let tag = format!("{} {policy}", spec.name);
        let a = run(&mut e, &prompt, comp(policy, PromptMode::Keep, CHUNK), &tag);
        let b = run(
            &mut e,
            &prompt,
            comp(policy, PromptMode::Compress, 100),
            &tag,
        );
        assert_eq!(a.token_ids, b.token_ids, "{tag}: tokens");
        assert_eq!(a.stats.compressions, b.stats.compressions, "{tag}");
        assert_eq!(a.stats.kv_slots_peak, b.stats.kv_slots_peak, "{tag}");
    }
}

#[test]
fn admission_reserves_the_bound_of_the_prompt_mode() {
    let spec = SPECS[1];
    let m = TinyModel::new(spec, 930);
    let prompt = random_prompt(93, PROMPT);
    // 8 blocks of 16: 128 slots, below the 330-token prompt, above B + b + chunk = 80.
    let mut e = m.engine_pool(512, KvDtype::F32, BLOCK_SIZE, 8);
    let c = comp(PolicyKind::RKv, PromptMode::Compress, CHUNK);
    let out = run(&mut e, &prompt, c, "compress");
    assert!(out.stats.kv_slots_peak <= BUDGET + BUFFER + CHUNK);
    let err = e
        .generate(
            request(&prompt),
            Some(comp(PolicyKind::RKv, PromptMode::Keep, CHUNK)),
            |_| {},
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("KV blocks"), "{err}");
    assert_eq!(e.store().pool().n_free(), 8);
}

#[test]
fn a_chunk_below_twice_the_window_is_refused() {
    let m = TinyModel::new(SPECS[0], 940);
    let mut e = m.engine(512);
    let c = comp(PolicyKind::SnapKv, PromptMode::Compress, 2 * WINDOW - 1);
    let err = e
        .add_request(request(&random_prompt(94, 50)), Some(c))
        .unwrap_err()
        .to_string();
    assert!(err.contains("prompt_chunk (15)"), "{err}");
    assert!(!e.has_work());
}
