//! `rkv bench grammar`: what constrained decoding costs. One chat prompt, decoded greedily
//! under a JSON Schema (`--schema`) and without one, side by side: two engines on the same
//! model, one forward of each in turn (each run's time is its own steps', so both share
//! the machine's conditions step by step), the engines swapping runs every repeat. The
//! decode tokens/s of each, their ratio per repeat, and the grammar's time per generated
//! token (its mask, applying it to the logits, consuming the token), as medians with min
//! and max over the repeats. The free run decodes as many tokens as the constrained one
//! did (greedy decoding makes that the same every repeat), so both see the same context
//! lengths.
//!
//! Must not know: llguidance (the engine's grammar module owns it), the model's internals.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use rkv_core::config::CompressionConfig;
use rkv_engine::{Engine, GenerationRequest, GrammarSpec, SamplingParams, SeqStats};
use rkv_model::chat_template::ChatMessage;
use serde_json::{json, Value};

use crate::args::{engine_config, ModelArgs};
use crate::bench::{alternating, interleaved, ratio_stats, stats, summary_json};
use crate::exit::usage;
use crate::out::outln;

#[derive(Args, Debug)]
pub struct GrammarArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The JSON Schema the constrained run's output must satisfy (a file)
    #[arg(long)]
    pub schema: PathBuf,
    /// The user message of the chat prompt
    #[arg(
        long,
        default_value = "List eight people as JSON: each with a name, an age and a city."
    )]
    pub prompt: String,
    /// Most tokens the constrained run may generate (it stops when the JSON is complete)
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// One JSON object instead of text
    #[arg(long)]
    pub json: bool,
}

/// Per repeat: decode tokens/s of each run, the grammar's ms per token.
#[derive(Debug, Default)]
struct Measured {
    free_tps: Vec<f64>,
    constrained_tps: Vec<f64>,
    mask_ms: Vec<f64>,
    /// The grammar's share of the constrained run's decode time.
    mask_share: Vec<f64>,
}

pub fn run(a: GrammarArgs) -> Result<()> {
    if a.repeat == 0 || a.max_tokens < 2 {
        return Err(usage!(
            "--repeat must be positive and --max-tokens at least 2"
        ));
    }
    let text = std::fs::read_to_string(&a.schema)
        .with_context(|| format!("cannot read {}", a.schema.display()))?;
    let schema: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", a.schema.display()))?;
    let model = a.model.load()?;
    let model_name = a
        .model
        .path()?
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let n_vocab = model.transformer.config().vocab_size;
    let rendered = model
        .tokenizer
        .apply_chat_template(&[ChatMessage::user(a.prompt.clone())], true)?;
    let prompt = model.tokenizer.encode(&rendered)?;
    let cfg = engine_config(
        rkv_engine::KvDtype::F16,
        CompressionConfig::full(),
        prompt.len() + a.max_tokens,
    );
    let mut engine = Engine::new(model, cfg.clone())?;
    let mut other = Engine::new(a.model.load()?, cfg)?;
    // The first compile also builds the vocabulary's token environment.
    let t = Instant::now();
    let spec = GrammarSpec::JsonSchema(schema.clone());
    let grammar = engine.grammars().compile(&spec)?;
    let first_compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    engine.grammars().compile(&spec)?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let request = |max_tokens: usize, constrained: bool| GenerationRequest {
        prompt: prompt.clone(),
        sampling: SamplingParams::default(),
        max_tokens,
        ignore_eos: !constrained,
        stop: Vec::new(),
        logprobs: Default::default(),
        grammar: constrained.then(|| grammar.clone()),
    };
    // Untimed: how many tokens the constrained output takes, and whether it is valid.
    let warm = engine.generate(request(a.max_tokens, true), None, |_| {})?;
    let n_tokens = warm.token_ids.len();
    let parsed: Option<Value> = serde_json::from_str(&warm.text).ok();
    if n_tokens < 2 {
        bail!("the constrained output has {n_tokens} token(s): nothing to time");
    }
    let mut m = Measured::default();
    for rep in 0..a.repeat {
        // Which engine runs the constrained request, and which one steps first, changes
        // every repeat.
        let c = alternating(rep, 0, 2);
        let mut reqs = [request(n_tokens, false), request(n_tokens, false)];
        reqs[c] = request(n_tokens, true);
        let [s0, s1] = interleaved([&mut engine, &mut other], reqs.map(|r| (r, None)))?;
        let (s, f) = if c == 0 { (s0, s1) } else { (s1, s0) };
        m.constrained_tps.push(s.decode_tokens_per_s());
        m.mask_ms
            .push(s.grammar_seconds * 1e3 / s.generated_tokens.max(1) as f64);
        m.mask_share.push(grammar_share(&s));
        m.free_tps.push(f.decode_tokens_per_s());
    }
    let row = json!({
        "bench": "grammar",
        "model": model_name,
        "n_vocab": n_vocab,
        "threads": rayon::current_num_threads(),
        "schema": a.schema.file_name().map(|n| n.to_string_lossy().into_owned()),
        "prompt_tokens": prompt.len(),
        "tokens": n_tokens,
        "finish_reason": warm.finish_reason.as_str(),
        "output_is_json": parsed.is_some(),
        "repeat": a.repeat,
        "first_compile_ms": first_compile_ms,
        "compile_ms": compile_ms,
        "free_decode_tokens_per_s": summary_json(stats(&m.free_tps)),
        "constrained_decode_tokens_per_s": summary_json(stats(&m.constrained_tps)),
        "constrained_over_free": summary_json(ratio_stats(&m.constrained_tps, &m.free_tps)),
        "grammar_ms_per_token": summary_json(stats(&m.mask_ms)),
        "grammar_share_of_decode": summary_json(stats(&m.mask_share)),
    });
    if a.json {
        outln!("{row}")?;
        return Ok(());
    }
    let (r, rlo, rhi) = ratio_stats(&m.constrained_tps, &m.free_tps);
    let (ms, mlo, mhi) = stats(&m.mask_ms);
    outln!(
        "{model_name}: {n_tokens} tokens under {} ({}), {} repeats",
        a.schema.display(),
        warm.finish_reason.as_str(),
        a.repeat
    )?;
    outln!(
        "token environment + first compile {first_compile_ms:.0} ms, compile {compile_ms:.1} ms"
    )?;
    outln!("grammar per token: {ms:.3} ms (min {mlo:.3}, max {mhi:.3})")?;
    outln!("constrained / free decode tok/s: {r:.3} (min {rlo:.3}, max {rhi:.3})")?;
    Ok(())
}

/// The grammar's time over the decode time (the first token's mask ran in the prefill
/// step: leave it out by counting the decode steps' share of the tokens).
fn grammar_share(s: &SeqStats) -> f64 {
    let per_token = s.grammar_seconds / s.generated_tokens.max(1) as f64;
    let decoded = s.generated_tokens.saturating_sub(1) as f64;
    if s.decode_seconds > 0.0 {
        per_token * decoded / s.decode_seconds
    } else {
        0.0
    }
}
