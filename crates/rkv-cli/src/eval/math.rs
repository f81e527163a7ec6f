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
use rkv_engine::{fits_context, Engine, GenerationOutput, GenerationRequest, SamplingParams};
use rkv_eval::grade::grade;
use rkv_eval::{read_math_problems, MathProblem};
use rkv_model::chat_template::ChatMessage;
use serde_json::json;

use crate::args::{EngineArgs, KvArgs, ModelArgs};
use crate::exit::usage;
use crate::out::outln;

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
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Run the samples one at a time instead of all problems' samples at once (each
    /// request's samples sharing its prompt's prefill and blocks); same outputs, slower
    #[arg(long)]
    pub one_at_a_time: bool,
    /// Write the per-problem records here instead of to stdout
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// End with a JSON summary line on stdout
    #[arg(long)]
    pub json: bool,
}

/// The rendered user prompt for one problem (before the chat template).
pub use rkv_eval::r1_prompt as prompt_text;

pub fn run(a: MathArgs) -> Result<()> {
    if a.samples == 0 {
        return Err(usage!("--samples must be at least 1"));
    }
    if a.limit == Some(0) {
        return Err(usage!("--limit must be at least 1"));
    }
    if a.max_tokens == 0 {
        return Err(usage!("--max-tokens must be at least 1"));
    }
    let compression = a.kv.compression()?;
    // FullKV keeps everything: no budget to report.
    let budget = compression.policy.compresses().then_some(a.kv.kv_budget);
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
        None => Box::new(crate::out::Stdout),
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
    let mut cfg = a.engine.engine_config(&model, &a.kv)?;
    // Every problem's samples of one request are admitted together.
    cfg.max_num_seqs = cfg.max_num_seqs.max(a.samples);
    let mut engine = Engine::new(model, cfg)?;

    let total = problems.len().saturating_mul(a.samples) as u64;
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} samples (eta {eta}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // Sample j of every problem is seeded with --seed + j (a request of n samples seeds
    // its sample j so).
    let request = |prompt: &Vec<u32>, j: u64| GenerationRequest {
        logprobs: Default::default(),
        prompt: prompt.clone(),
        sampling: SamplingParams {
            seed: a.seed.wrapping_add(j),
            ..base.clone()
        },
        max_tokens: a.max_tokens,
        ignore_eos: false,
        stop: Vec::new(),
        grammar: None,
    };
    let t0 = Instant::now();
    let outputs = if a.one_at_a_time {
        one_at_a_time(&mut engine, &problems, &prompts, a.samples, &request, &bar)?
    } else {
        batched(&mut engine, &problems, &prompts, a.samples, &request, &bar)?
    };
    let mut pass_sum = 0.0;
    let mut generated_tokens = 0usize;
    let mut kv_slots_peak = 0usize;
    for (p, outs) in problems.iter().zip(outputs) {
        let mut samples = Vec::new();
        let mut n_correct = 0usize;
        for g in outs {
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
        }
        let pass = n_correct as f64 / a.samples as f64;
        pass_sum += pass;
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
        outln!(
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
                "seconds": secs,
                "batched": !a.one_at_a_time,
            }})
        )?;
    }
    Ok(())
}

/// Each sample of each problem in turn, one sequence at a time.
fn one_at_a_time(
    engine: &mut Engine,
    problems: &[MathProblem],
    prompts: &[Vec<u32>],
    samples: usize,
    request: &dyn Fn(&Vec<u32>, u64) -> GenerationRequest,
    bar: &ProgressBar,
) -> Result<Vec<Vec<GenerationOutput>>> {
    let mut all = Vec::with_capacity(problems.len());
    for (p, prompt) in problems.iter().zip(prompts) {
        let mut outs = Vec::with_capacity(samples);
        for j in 0..samples {
            let req = request(prompt, j as u64);
            let g = engine
                .generate(req, None, |_| {})
                .with_context(|| format!("problem {} sample {j}", p.index))?;
            outs.push(g);
            bar.inc(1);
        }
        all.push(outs);
    }
    Ok(all)
}

/// Every problem's request of `samples` samples queued at once: the engine runs as many
/// as its memory holds, each request's samples forked from one prefill of its prompt.
fn batched(
    engine: &mut Engine,
    problems: &[MathProblem],
    prompts: &[Vec<u32>],
    samples: usize,
    request: &dyn Fn(&Vec<u32>, u64) -> GenerationRequest,
    bar: &ProgressBar,
) -> Result<Vec<Vec<GenerationOutput>>> {
    let mut ids = Vec::with_capacity(problems.len());
    for (p, prompt) in problems.iter().zip(prompts) {
        let id = engine
            .add_request_n(request(prompt, 0), None, samples)
            .with_context(|| format!("problem {}", p.index))?;
        ids.push(id);
    }
    while engine.has_work() {
        let events = engine.step();
        bar.inc(events.iter().filter(|e| e.finished.is_some()).count() as u64);
        if let Some((id, err)) = engine.take_failures().into_iter().next() {
            let k = ids.iter().position(|s| s.contains(&id)).unwrap_or(0);
            return Err(err).with_context(|| format!("problem {}", problems[k].index));
        }
    }
    ids.iter()
        .map(|seqs| {
            seqs.iter()
                .map(|&id| {
                    engine
                        .take_output(id)
                        .context("a sample finished without an output")
                })
                .collect()
        })
        .collect()
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
