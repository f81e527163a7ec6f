//! `rkv eval fidelity`: how far each policy x budget drifts from FullKV on real text.
//!
//! Each trace (a prompt and a model's real output) is rendered with the chat template,
//! the output appended, and teacher-forced through the engine under FullKV and under every
//! policy x budget, on the same code path users run. Per generated position: KL(FullKV ||
//! policy), top-1 agreement with FullKV, and the NLL of the true next token.
//!
//! With `--reference-kv-dtype`, storage is compared instead: each policy x budget (and
//! FullKV) with its KV at `--kv-dtype` against the same policy x budget at the reference
//! dtype (what 8-bit KV costs, `--kv-dtype q8_0 --reference-kv-dtype f16`), one model
//! loaded, the engine's pool rebuilt for each dtype.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_engine::{Engine, KvDtype};
use rkv_model::chat_template::ChatMessage;
use serde::Serialize;

use crate::args::{engine_config, ModelArgs, PolicyTuning};
use crate::exit::usage;
use crate::out::outln;

#[derive(Args, Debug)]
pub struct FidelityArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// JSONL traces: `problem` or `prompt`, and `output` (a model's real output)
    #[arg(long)]
    pub traces: PathBuf,
    /// Policies compared with FullKV (`all`: every registered policy); with
    /// --reference-kv-dtype, `full` too
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rkv,snapkv,h2o,streamingllm"
    )]
    pub policies: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "128,256,512,1024")]
    pub budgets: Vec<usize>,
    /// First N traces only
    #[arg(long)]
    pub limit: Option<usize>,
    /// Truncate each output to N tokens
    #[arg(long)]
    pub max_tokens: Option<usize>,
    #[command(flatten)]
    pub tuning: PolicyTuning,
    /// KV storage of the runs measured
    #[arg(long, default_value = "f16", value_parser = ["f16", "f32", "q8_0"])]
    pub kv_dtype: String,
    /// Compare KV storage instead of policies: each policy x budget at --kv-dtype against
    /// the same policy x budget with its KV stored as this (`--kv-dtype q8_0
    /// --reference-kv-dtype f16`: what 8-bit KV costs)
    #[arg(long, value_parser = ["f16", "f32", "q8_0"])]
    pub reference_kv_dtype: Option<String>,
    /// Render the traces without the chat template
    #[arg(long)]
    pub no_chat: bool,
    /// One JSON line per (trace, policy, budget), then `{"summary": [...]}`
    #[arg(long)]
    pub json: bool,
    /// Write an SVG of KL and top-1 agreement against budget
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub trace: usize,
    pub policy: String,
    pub budget: usize,
    /// The KV storage of this run, and the run it is compared with: `full` (FullKV at
    /// the same dtype) or the same policy and budget at another dtype.
    pub kv_dtype: String,
    pub reference: String,
    pub tokens: usize,
    pub kl_mean: f64,
    pub top1_agreement: f64,
    pub nll_mean: f64,
    pub nll_delta: f64,
    pub kv_slots_peak: usize,
}

pub(crate) struct Trace {
    prompt: String,
    output: String,
}

pub(crate) fn read_traces(path: &PathBuf, limit: Option<usize>) -> Result<Vec<Trace>> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(f).lines().enumerate() {
        if limit.is_some_and(|n| out.len() >= n) {
            break;
        }
        let line = line.with_context(|| format!("{}: line {}", path.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("{}: line {} is not JSON", path.display(), i + 1))?;
        let prompt = v["problem"].as_str().or_else(|| v["prompt"].as_str());
        let (Some(prompt), Some(output)) = (prompt, v["output"].as_str()) else {
            bail!(
                "{}: line {} needs `problem` or `prompt`, and `output`",
                path.display(),
                i + 1
            );
        };
        out.push(Trace {
            prompt: prompt.to_string(),
            output: output.to_string(),
        });
    }
    if out.is_empty() {
        bail!("{} holds no traces", path.display());
    }
    Ok(out)
}

/// Each trace as tokens and its prompt's length: the prompt rendered with the chat
/// template (as is, with `no_chat`), the output appended (truncated to `max_tokens`),
/// the whole cut to the model's context, with at least 2 output tokens.
pub(crate) fn trace_tokens(
    engine: &Engine,
    traces: &[Trace],
    max_tokens: Option<usize>,
    no_chat: bool,
) -> Result<Vec<(Vec<u32>, usize)>> {
    let ctx = engine.model().config().max_context;
    let mut inputs = Vec::new();
    for (i, t) in traces.iter().enumerate() {
        let rendered = if no_chat {
            t.prompt.clone()
        } else {
            engine
                .tokenizer()
                .apply_chat_template(&[ChatMessage::user(t.prompt.clone())], true)?
        };
        let mut toks = engine.tokenizer().encode(&rendered)?;
        let prompt_len = toks.len();
        let mut out = engine.tokenizer().encode_raw(&t.output)?;
        if let Some(n) = max_tokens {
            out.truncate(n);
        }
        if out.len() < 2 {
            bail!("trace {i}: the output has fewer than 2 tokens");
        }
        toks.extend(out);
        if toks.len() > ctx {
            toks.truncate(ctx);
            if toks.len() < prompt_len.saturating_add(2) {
                bail!(
                    "trace {i}: the prompt of {prompt_len} tokens leaves fewer than 2 output tokens within the model's context of {ctx}"
                );
            }
            eprintln!("trace {i}: truncated to the model's context of {ctx} tokens");
        }
        inputs.push((toks, prompt_len));
    }
    Ok(inputs)
}

/// Log-softmax of `x` in f64 sums, as f32.
pub(crate) fn log_softmax(x: &[f32]) -> Vec<f32> {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = m as f64 + x.iter().map(|&v| ((v - m) as f64).exp()).sum::<f64>().ln();
    x.iter().map(|&v| (v as f64 - lse) as f32).collect()
}

/// KL(F || Q) of two log-distributions over the same vocabulary, in f64 sums.
pub(crate) fn kl_divergence(lf: &[f32], lq: &[f32]) -> f64 {
    lf.iter()
        .zip(lq)
        .map(|(&f, &q)| (f as f64).exp() * (f as f64 - q as f64))
        .sum::<f64>()
}

fn argmax(x: &[f32]) -> usize {
    rkv_engine::sampling::argmax(x) as usize
}

pub fn run(a: FidelityArgs) -> Result<()> {
    let mut configs = Vec::new();
    let names: Vec<&str> = if a.policies.iter().any(|p| p == "all") {
        // Every registered policy that compresses, in registry order.
        PolicyKind::ALL
            .into_iter()
            .filter(|p| p.compresses())
            .map(PolicyKind::name)
            .collect()
    } else {
        a.policies.iter().map(String::as_str).collect()
    };
    let dtype = KvDtype::parse(&a.kv_dtype).map_err(|e| usage!("--kv-dtype: {e}"))?;
    let ref_dtype = match &a.reference_kv_dtype {
        Some(r) => Some(KvDtype::parse(r).map_err(|e| usage!("--reference-kv-dtype: {e}"))?),
        None => None,
    };
    let mut policies = Vec::new();
    for p in names {
        let policy: PolicyKind = p.parse().map_err(|e| usage!("--policies: {e}"))?;
        policies.push(policy);
        if !policy.compresses() {
            if ref_dtype.is_some() {
                // FullKV against FullKV at the reference dtype: one row, budget 0.
                configs.push(CompressionConfig {
                    budget: 0,
                    ..CompressionConfig::full()
                });
                continue;
            }
            return Err(usage!(
                "--policies: `{p}` is the baseline every policy is compared with \
                 (with --reference-kv-dtype it may be measured too)"
            ));
        }
        for &budget in &a.budgets {
            let cfg = a.tuning.config(policy, budget)?;
            configs.push(cfg);
        }
    }
    a.tuning.check_params(&policies)?;
    if configs.is_empty() {
        return Err(usage!("give at least one policy and one budget"));
    }
    let traces = read_traces(&a.traces, a.limit)?;
    let model = a.model.load()?;
    let ctx = model.transformer.config().max_context;
    let cfg = engine_config(dtype, CompressionConfig::full(), ctx);
    let mut engine = Engine::new(model, cfg)?;
    let vocab = engine.model().config().vocab_size;

    let inputs = trace_tokens(&engine, &traces, a.max_tokens, a.no_chat)?;
    let runs = match ref_dtype {
        Some(_) => 2 * configs.len(),
        None => configs.len() + 1,
    };
    let bar = ProgressBar::new((inputs.len() * runs) as u64).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs {msg} [{elapsed_precise} < {eta}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut rows = Vec::new();
    // The reference's log-probabilities of every generated position, `[n_pos, vocab]`,
    // and its summed NLL of the true tokens.
    let reference = |engine: &mut Engine, toks: &[u32], prompt_len: usize, c| -> Result<_> {
        let n_pos = toks.len() - prompt_len; // positions prompt_len-1 .. len-2
        let mut lps = Vec::with_capacity(n_pos * vocab);
        let mut nll = 0f64;
        engine.teacher_force(toks, prompt_len, c, 256, |p, l| {
            let lp = log_softmax(l);
            nll -= lp[toks[p + 1] as usize] as f64;
            lps.extend(lp);
        })?;
        Ok((lps, nll))
    };
    for (ti, (toks, prompt_len)) in inputs.iter().enumerate() {
        let n_pos = toks.len() - prompt_len;
        // Comparing policies: FullKV once per trace, at the same dtype.
        let full = match ref_dtype {
            Some(_) => None,
            None => {
                bar.set_message(format!("trace {ti} full"));
                let r = reference(&mut engine, toks, *prompt_len, CompressionConfig::full())?;
                bar.inc(1);
                Some(r)
            }
        };
        for c in &configs {
            // Comparing dtypes: the same policy and budget at the reference dtype.
            let own = match ref_dtype {
                Some(rd) => {
                    bar.set_message(format!("trace {ti} {} {} {rd}", c.policy, c.budget));
                    engine.set_kv_dtype(rd)?;
                    let r = reference(&mut engine, toks, *prompt_len, *c);
                    engine.set_kv_dtype(dtype)?;
                    bar.inc(1);
                    Some(r?)
                }
                None => None,
            };
            let Some((full_lp, full_nll)) = own.as_ref().or(full.as_ref()) else {
                bail!("no reference run");
            };
            bar.set_message(format!("trace {ti} {} {} {dtype}", c.policy, c.budget));
            let (mut kl, mut agree, mut nll) = (0f64, 0usize, 0f64);
            let st = engine.teacher_force(toks, *prompt_len, *c, 256, |p, l| {
                let i = p + 1 - prompt_len;
                let lq = log_softmax(l);
                let lf = &full_lp[i * vocab..(i + 1) * vocab];
                kl += kl_divergence(lf, &lq);
                agree += usize::from(argmax(lf) == argmax(&lq));
                nll -= lq[toks[p + 1] as usize] as f64;
            })?;
            let n = n_pos as f64;
            let row = Row {
                trace: ti,
                policy: c.policy.to_string(),
                budget: c.budget,
                kv_dtype: dtype.to_string(),
                reference: reference_name(c, ref_dtype, dtype),
                tokens: n_pos,
                kl_mean: (kl / n).max(0.0),
                top1_agreement: agree as f64 / n,
                nll_mean: nll / n,
                nll_delta: (nll - *full_nll) / n,
                kv_slots_peak: st.kv_slots_peak,
            };
            if a.json {
                bar.suspend(|| outln!("{}", serde_json::to_string(&row).unwrap_or_default()))?;
            }
            rows.push(row);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let summary = summarise(&rows, &configs);
    if a.json {
        outln!("{}", serde_json::json!({ "summary": summary }))?;
    } else {
        match ref_dtype {
            Some(rd) => outln!(
                "KV {dtype} against the same policy and budget with KV {rd} (kl_mean: \
                 KL({rd} || {dtype}); top1: agreement with {rd}; nll_delta: {dtype} - {rd})"
            )?,
            None => outln!("KV {dtype}; every policy against FullKV at {dtype}")?,
        }
        outln!(
            "{:<13} {:>6} {:>8} {:>10} {:>8} {:>9} {:>10} {:>8}",
            "policy",
            "budget",
            "tokens",
            "kl_mean",
            "top1",
            "nll_mean",
            "nll_delta",
            "kv_peak"
        )?;
        for r in &summary {
            outln!(
                "{:<13} {:>6} {:>8} {:>10.5} {:>8.4} {:>9.4} {:>10.5} {:>8}",
                r.policy,
                r.budget,
                r.tokens,
                r.kl_mean,
                r.top1_agreement,
                r.nll_mean,
                r.nll_delta,
                r.kv_slots_peak
            )?;
        }
    }
    if let Some(path) = &a.plot {
        crate::eval::plot::fidelity_svg(path, &summary)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// What a row of `c` is compared with: FullKV at `dtype`, or `c` at the reference dtype.
fn reference_name(c: &CompressionConfig, ref_dtype: Option<KvDtype>, dtype: KvDtype) -> String {
    match ref_dtype {
        Some(rd) if c.policy.compresses() => format!("{} {} {rd}", c.policy, c.budget),
        Some(rd) => format!("full {rd}"),
        None => format!("full {dtype}"),
    }
}

/// Token-weighted means over traces, one row per (policy, budget) in config order.
pub fn summarise(rows: &[Row], configs: &[CompressionConfig]) -> Vec<Row> {
    configs
        .iter()
        .map(|c| {
            let rs: Vec<&Row> = rows
                .iter()
                .filter(|r| r.policy == c.policy.to_string() && r.budget == c.budget)
                .collect();
            let n: usize = rs.iter().map(|r| r.tokens).sum();
            let w = |f: fn(&Row) -> f64| {
                rs.iter().map(|r| f(r) * r.tokens as f64).sum::<f64>() / (n.max(1) as f64)
            };
            let first = |f: fn(&Row) -> &String| rs.first().map(|r| f(r).clone());
            Row {
                trace: rs.len(),
                policy: c.policy.to_string(),
                budget: c.budget,
                kv_dtype: first(|r| &r.kv_dtype).unwrap_or_default(),
                reference: first(|r| &r.reference).unwrap_or_default(),
                tokens: n,
                kl_mean: w(|r| r.kl_mean),
                top1_agreement: w(|r| r.top1_agreement),
                nll_mean: w(|r| r.nll_mean),
                nll_delta: w(|r| r.nll_delta),
                kv_slots_peak: rs.iter().map(|r| r.kv_slots_peak).max().unwrap_or(0),
            }
        })
        .collect()
}
