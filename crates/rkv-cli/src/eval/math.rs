//! `rkv eval math`: generate answers to math problems (MATH-500, AIME-style JSONL) with a
//! KV policy and budget, grade them with `rkv_eval::grade`, and report pass@1 (mean over
//! the samples of a problem, then mean over problems) with one JSON record per problem.
//!
//! The prompt is the R1 evaluation prompt: the problem, then "Please reason step by step,
//! and put your final answer within \boxed{}.", as a user message in the model's chat
//! template. Sample `j` of every problem uses seed `--seed + j`, so runs are reproducible.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rkv_core::config::PolicyKind;
use rkv_engine::{fits_context, Engine, GenerationRequest, SamplingParams};
use rkv_eval::grade::grade;
use rkv_eval::{read_math_problems, MathProblem};
use rkv_model::chat_template::ChatMessage;
use serde_json::json;

use crate::args::{engine_config, KvArgs, ModelArgs};

/// The instruction appended to every problem (the R1 evaluation prompt).
pub const R1_SUFFIX: &str =
    "\nPlease reason step by step, and put your final answer within \\boxed{}.";

#[derive(Args, Debug)]
pub struct MathArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// JSONL problems: `problem` or `question`, and `answer` or a `solution` with \boxed{}
    #[arg(long)]
    pub dataset: PathBuf,
    /// Evaluate only the first N problems
    #[arg(long)]
    pub limit: Option<usize>,
    /// Samples per problem (pass@1 is their mean)
    #[arg(long, default_value_t = 1)]
    pub samples: usize,
    /// Sampling temperature (0 = greedy)
    #[arg(long, default_value_t = 0.6)]
    pub temperature: f32,
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// 0 = off
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Sample j of every problem uses seed + j
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Most tokens generated per sample
    #[arg(long, default_value_t = 2048)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub kv: KvArgs,
    /// Write the per-problem records here instead of to stdout
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// End with a JSON summary line on stdout
    #[arg(long)]
    pub json: bool,
}

/// The rendered user prompt for one problem (before the chat template).
pub fn prompt_text(problem: &str) -> String {
    format!("{problem}{R1_SUFFIX}")
}

pub fn run(a: MathArgs) -> Result<()> {
    if a.samples == 0 {
        bail!("--samples must be at least 1");
    }
    if a.limit == Some(0) {
        bail!("--limit must be at least 1");
    }
    if a.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    let compression = a.kv.compression()?;
    // FullKV keeps everything: no budget to report.
    let budget = (compression.policy != PolicyKind::Full).then_some(a.kv.kv_budget);
    let base = SamplingParams {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        seed: a.seed,
    };
    base.validate()?;
    let f = File::open(&a.dataset)
        .with_context(|| format!("cannot open dataset {}", a.dataset.display()))?;
    let problems = read_math_problems(BufReader::new(f), a.limit)
        .with_context(|| format!("cannot read dataset {}", a.dataset.display()))?;
    if problems.is_empty() {
        bail!("dataset {} has no problems", a.dataset.display());
    }
    let mut out: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(BufWriter::new(
            File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };

    let model = a.model.load()?;
    let max_ctx = model.transformer.config().max_context;
    let mut prompts = Vec::with_capacity(problems.len());
    for p in &problems {
        let rendered = model
            .tokenizer
            .apply_chat_template(&[ChatMessage::user(prompt_text(&p.problem))], true)?;
        let toks = model.tokenizer.encode(&rendered)?;
        if !fits_context(toks.len(), a.max_tokens, max_ctx) {
            bail!(
                "problem {} (line {}): prompt of {} tokens plus --max-tokens {} exceeds the model's context of {max_ctx} tokens",
                p.index,
                p.line,
                toks.len(),
                a.max_tokens
            );
        }
        prompts.push(toks);
    }
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let cfg = engine_config(a.kv.kv_dtype(), compression, longest + a.max_tokens);
    let mut engine = Engine::new(model, cfg)?;

    let total = problems.len().saturating_mul(a.samples) as u64;
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} samples (eta {eta}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = Instant::now();
    let mut pass_sum = 0.0;
    let mut generated_tokens = 0usize;
    let mut kv_slots_peak = 0usize;
    for (p, prompt) in problems.iter().zip(&prompts) {
        let mut samples = Vec::new();
        let mut n_correct = 0usize;
        for j in 0..a.samples {
            let req = GenerationRequest {
                prompt: prompt.clone(),
                sampling: SamplingParams {
                    seed: a.seed.wrapping_add(j as u64),
                    ..base.clone()
                },
                max_tokens: a.max_tokens,
                ignore_eos: false,
                stop: Vec::new(),
            };
            let g = engine
                .generate(req, None, |_| {})
                .with_context(|| format!("problem {} sample {j}", p.index))?;
            let v = grade(&g.text, &p.gold);
            n_correct += usize::from(v.correct);
            generated_tokens += g.stats.generated_tokens;
            kv_slots_peak = kv_slots_peak.max(g.stats.kv_slots_peak);
            samples.push(json!({
                "output": g.text,
                "extracted": v.extracted,
                "correct": v.correct,
                "tokens": g.stats.generated_tokens,
                "finish_reason": g.finish_reason.as_str(),
            }));
            bar.inc(1);
        }
        let pass = n_correct as f64 / a.samples as f64;
        pass_sum += pass;
        let done = p.index + 1;
        bar.set_message(format!("pass@1 {:.3}", pass_sum / done as f64));
        let rec = record(p, samples, pass);
        bar.suspend(|| -> Result<()> {
            writeln!(out, "{rec}")?;
            out.flush()?;
            Ok(())
        })
        .context("cannot write a per-problem record")?;
    }
    bar.finish_and_clear();
    drop(out);
    let n = problems.len();
    let pass_at_1 = pass_sum / n as f64;
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "pass@1 {pass_at_1:.4} over {n} problems x {} samples (policy {}, budget {}, max_tokens {}): generated_tokens={generated_tokens} kv_slots_peak={kv_slots_peak} {secs:.1}s ({:.1} tok/s)",
        a.samples,
        a.kv.kv_policy,
        budget.map_or_else(|| "none".to_string(), |b| b.to_string()),
        a.max_tokens,
        if secs > 0.0 { generated_tokens as f64 / secs } else { 0.0 },
    );
    if a.json {
        println!(
            "{}",
            json!({"summary": {
                "pass_at_1": pass_at_1,
                "n_problems": n,
                "samples": a.samples,
                "policy": a.kv.kv_policy,
                "budget": budget,
                "max_tokens": a.max_tokens,
                "generated_tokens": generated_tokens,
                "kv_slots_peak": kv_slots_peak,
            }})
        );
    }
    Ok(())
}

fn record(p: &MathProblem, samples: Vec<serde_json::Value>, pass: f64) -> serde_json::Value {
    json!({
        "index": p.index,
        "problem": p.problem,
        "gold": p.gold,
        "samples": samples,
        "pass_at_1": pass,
    })
}
