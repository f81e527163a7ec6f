//! `rkv generate`: one prompt in, streamed text out, with a stats line.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use rkv_engine::{fits_context, Engine, GenerationOutput, GenerationRequest};
use rkv_model::chat_template::ChatMessage;
use serde_json::json;

use crate::args::{engine_config, KvArgs, ModelArgs, SamplingArgs};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt text
    #[arg(long, conflicts_with = "prompt_file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// Render the prompt as a user message with the model's chat template
    #[arg(long)]
    pub chat: bool,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Generate exactly --max-tokens tokens, through end-of-sequence tokens
    #[arg(long)]
    pub ignore_eos: bool,
    /// Stop when the text contains this string (repeatable)
    #[arg(long)]
    pub stop: Vec<String>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    /// Print one JSON object instead of streaming text
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: GenerateArgs) -> Result<()> {
    let text = match (&a.prompt, &a.prompt_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("cannot read prompt file {}", f.display()))?,
        (None, None) => bail!("give a prompt with --prompt TEXT or --prompt-file FILE"),
    };
    if text.trim().is_empty() {
        bail!("the prompt is empty");
    }
    if a.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    let compression = a.kv.compression()?;
    a.sampling.params().validate()?;
    let model = a.model.load()?;
    let rendered = if a.chat {
        model
            .tokenizer
            .apply_chat_template(&[ChatMessage::user(text)], true)?
    } else {
        text
    };
    let prompt = model.tokenizer.encode(&rendered)?;
    let req = GenerationRequest {
        prompt,
        sampling: a.sampling.params(),
        max_tokens: a.max_tokens,
        ignore_eos: a.ignore_eos,
        stop: a.stop.clone(),
    };
    let max_ctx = model.transformer.config().max_context;
    if !fits_context(req.prompt.len(), req.max_tokens, max_ctx) {
        bail!(
            "prompt of {} tokens plus --max-tokens {} exceeds the model's context of {max_ctx} tokens",
            req.prompt.len(),
            req.max_tokens
        );
    }
    let cfg = engine_config(
        a.kv.kv_dtype(),
        compression,
        req.prompt.len() + req.max_tokens,
    );
    let mut engine = Engine::new(model, cfg)?;
    let json = a.json;
    let mut stdout = std::io::stdout().lock();
    let out = engine.generate(req, None, |ev| {
        if !json {
            let _ = stdout.write_all(ev.text.as_bytes());
            let _ = stdout.flush();
        }
    })?;
    drop(stdout);
    report(&out, json);
    Ok(())
}

fn report(out: &GenerationOutput, json: bool) {
    let s = &out.stats;
    if json {
        let v = json!({
            "text": out.text,
            "token_ids": out.token_ids,
            "finish_reason": out.finish_reason.as_str(),
            "stats": {
                "prompt_tokens": s.prompt_tokens,
                "generated_tokens": s.generated_tokens,
                "prefill_tokens_per_s": s.prefill_tokens_per_s(),
                "decode_tokens_per_s": s.decode_tokens_per_s(),
                "kv_bytes_peak": s.kv_bytes_peak,
                "kv_slots_peak": s.kv_slots_peak,
                "compressions": s.compressions,
                "compress_seconds": s.compress_seconds,
                "compact_seconds": s.compact_seconds,
                "evicted_tokens": s.evicted_tokens,
            }
        });
        println!("{v}");
    } else {
        println!();
        eprintln!(
            "prompt_tokens={} generated_tokens={} prefill={:.1} tok/s decode={:.1} tok/s kv_bytes_peak={} kv_slots_peak={} compressions={} evicted_tokens={} finish={}",
            s.prompt_tokens,
            s.generated_tokens,
            s.prefill_tokens_per_s(),
            s.decode_tokens_per_s(),
            s.kv_bytes_peak,
            s.kv_slots_peak,
            s.compressions,
            s.evicted_tokens,
            out.finish_reason.as_str()
        );
    }
}
