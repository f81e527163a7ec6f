//! `rkv generate`: one prompt in, streamed text out, with a stats line.
//!
//! Owns the prompt (`--prompt`, `--prompt-file`, `-` for standard input), the stop rules,
//! the output's JSON Schema (`--json-schema`) and how a generation ends early: SIGINT stops it at the next step, reports the stats
//! so far (`finish_reason` "cancelled") and exits 130; a closed standard output stops it
//! at the next token and exits quietly (see [`crate::exit`]).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};
use clap::Args;
use rkv_engine::{
    fits_context, Engine, FinishReason, GenerationOutput, GenerationRequest, GrammarSpec,
};
use rkv_model::chat_template::ChatMessage;
use serde_json::json;

use crate::args::{engine_config, non_empty, whole, KvArgs, ModelArgs, SamplingArgs};
use crate::exit::{usage, Interrupted};
use crate::interrupt;
use crate::out::{self, outln};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt text
    #[arg(long, conflicts_with = "prompt_file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file (`-`: standard input)
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// Render the prompt as a user message with the model's chat template
    #[arg(long)]
    pub chat: bool,
    /// Most tokens to generate
    #[arg(long, default_value_t = 256, allow_negative_numbers = true, value_parser = whole::<1, usize>)]
    pub max_tokens: usize,
    /// Generate exactly --max-tokens tokens, through end-of-sequence tokens
    #[arg(long)]
    pub ignore_eos: bool,
    /// Stop when the text contains this string (repeatable; not empty)
    #[arg(long, value_parser = non_empty)]
    pub stop: Vec<String>,
    /// Constrain the output to JSON that validates against the JSON Schema in this file
    #[arg(long, value_name = "FILE")]
    pub json_schema: Option<PathBuf>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    /// Print one JSON object instead of streaming text
    #[arg(long)]
    pub json: bool,
}

/// The JSON of `--json-schema FILE`.
fn read_schema(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --json-schema {}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| usage!("--json-schema {}: {e}", path.display()))
}

/// The prompt text of `--prompt` or `--prompt-file` (`-`: standard input).
fn prompt_text(a: &GenerateArgs) -> Result<String> {
    read_prompt(a.prompt.as_ref(), a.prompt_file.as_ref())
}

/// The prompt text of `--prompt` or else `--prompt-file` (`-`: standard input); a usage
/// error when neither is given or the text is blank.
pub(crate) fn read_prompt(prompt: Option<&String>, file: Option<&PathBuf>) -> Result<String> {
    let text = match (prompt, file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) if f == Path::new("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("cannot read the prompt from standard input")?;
            s
        }
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("cannot read prompt file {}", f.display()))?,
        (None, None) => {
            return Err(usage!(
                "give a prompt with --prompt TEXT or --prompt-file FILE"
            ))
        }
    };
    if text.trim().is_empty() {
        return Err(usage!("the prompt is empty"));
    }
    Ok(text)
}

pub fn run(a: GenerateArgs) -> Result<()> {
    let text = prompt_text(&a)?;
    let schema = a.json_schema.as_deref().map(read_schema).transpose()?;
    let compression = a.kv.compression()?;
    let sampling = a.sampling.checked()?;
    let interrupted = interrupt::watch()?;
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
        logprobs: Default::default(),
        prompt,
        sampling,
        max_tokens: a.max_tokens,
        ignore_eos: a.ignore_eos,
        stop: a.stop.clone(),
        grammar: None,
    };
    let max_ctx = model.transformer.config().max_context;
    if !fits_context(req.prompt.len(), req.max_tokens, max_ctx) {
        anyhow::bail!(
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
    let mut req = req;
    if let Some(s) = schema {
        let g = engine.grammars().compile(&GrammarSpec::JsonSchema(s));
        req.grammar = Some(g.map_err(|e| usage!("--json-schema: {e}"))?);
    }
    // Set by SIGINT (the watcher) or by the first failed write (a closed stdout).
    let stop = &*interrupted;
    let mut write_error = None;
    let out = engine.generate_until(req, None, stop, |ev| {
        if a.json || write_error.is_some() {
            return;
        }
        if let Err(e) = out::text(&ev.text) {
            write_error = Some(e);
            stop.store(true, Ordering::Relaxed);
        }
    })?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    report(&out, a.json)?;
    if out.finish_reason == FinishReason::Cancelled {
        return Err(Interrupted.into());
    }
    Ok(())
}

/// The result on stdout (`--json`), or the end of the streamed line and the stats line on
/// stderr.
fn report(out: &GenerationOutput, json: bool) -> std::io::Result<()> {
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
        return outln!("{v}");
    }
    let line_end = outln!();
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
    line_end
}
