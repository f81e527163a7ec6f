//! `rkv bench serve`: many requests through the engine at a given concurrency, as a server
//! runs them (the engine on its own thread behind an `EngineHandle`), reporting generated
//! tokens per second, the most sequences running at once, time to first token and time per
//! output token (p50 and p99), peak KV blocks and preemptions; `--compare-policy` runs a
//! second configuration in the same invocation. With `--url` the requests go to a running
//! `rkv serve` over HTTP instead (see `bench_serve_http.rs`).

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rkv_core::config::CompressionConfig;
use rkv_engine::{
    Admission, EngineHandle, GenerationRequest, HandleConfig, RequestEvent, SamplingParams,
    Submission,
};
use rkv_model::chat_template::ChatMessage;
use rkv_model::Tokenizer;
use serde_json::json;

use crate::args::{EngineArgs, KvArgs, ModelArgs};
use crate::bench::policy_runs;
use crate::eval::math::prompt_text;
use crate::exit::usage;
use crate::out::outln;

#[path = "bench_serve_http.rs"]
mod http;

#[derive(Args, Debug)]
pub struct ServeBenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Requests in all
    #[arg(long, default_value_t = 64)]
    pub requests: usize,
    /// Requests in flight at once (a new one is sent when one finishes)
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Most tokens generated per request
    #[arg(long, default_value_t = 2048)]
    pub max_tokens: usize,
    /// Generate exactly --max-tokens per request, through end-of-sequence tokens
    #[arg(long)]
    pub ignore_eos: bool,
    /// Sampling temperature (0 = greedy)
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// JSONL prompts: `prompt` (sent as is) or `problem`/`question` (rendered with the R1
    /// prompt as a user message in the chat template); cycled when fewer than --requests
    #[arg(long, default_value = "../shared/data/math500.jsonl")]
    pub prompts: PathBuf,
    /// A second policy (same budget and tuning) measured in the same invocation
    #[arg(long)]
    pub compare_policy: Option<String>,
    /// Start every prompt with the same text of this many tokens (a shared system prompt;
    /// with prefix caching, computed once)
    #[arg(long, default_value_t = 0)]
    pub shared_prefix: usize,
    /// Conversations of this many turns: each of --requests is a conversation whose next
    /// turn re-sends its whole history (the answer, then a short user message) as a chat
    /// client does; --concurrency counts conversations in flight
    #[arg(long, default_value_t = 1)]
    pub turns: usize,
    /// One JSON object per configuration
    #[arg(long)]
    pub json: bool,
    /// Benchmark a running `rkv serve` at this base URL (`http://127.0.0.1:8000`) over HTTP
    /// instead of an in-process engine; the model is loaded only to render the prompts, and
    /// each configuration is sent as the request's `kv_compression`
    #[arg(long)]
    pub url: Option<String>,
}

/// Sequences running and blocks used as seen over a run: peaks, and the running count's
/// mean over wall time (each reading held until the next).
#[derive(Debug, Default, Clone)]
struct Occupancy {
    peak_running: usize,
    blocks_peak: usize,
    last: Option<(Instant, usize)>,
    running_seconds: f64,
    seconds: f64,
}

impl Occupancy {
    fn see(&mut self, running: usize, blocks_used: usize) {
        let now = Instant::now();
        if let Some((t, r)) = self.last {
            let dt = now.duration_since(t).as_secs_f64();
            self.running_seconds += r as f64 * dt;
            self.seconds += dt;
        }
        self.last = Some((now, running));
        self.peak_running = self.peak_running.max(running);
        self.blocks_peak = self.blocks_peak.max(blocks_used);
    }

    fn mean_running(&self) -> f64 {
        if self.seconds > 0.0 {
            self.running_seconds / self.seconds
        } else {
            0.0
        }
    }
}

/// What one configuration measured.
struct Outcome {
    generated: usize,
    seconds: f64,
    peak_running: usize,
    mean_running: f64,
    blocks_peak: usize,
    blocks_total: usize,
    preemptions: u64,
    /// Prompt tokens taken from the prefix cache (in-process runs).
    cached_tokens: Option<u64>,
    ttft_ms: Vec<f64>,
    /// Time to first token of the turns after a conversation's first (`--turns`).
    ttft_later_ms: Vec<f64>,
    /// A hash of every request's generated token ids, in request order (in-process runs):
    /// two runs that generate the same tokens have the same digest.
    output_digest: Option<String>,
    tpot_ms: Vec<f64>,
}

pub fn run(a: ServeBenchArgs) -> Result<()> {
    if a.requests == 0 || a.concurrency == 0 || a.max_tokens == 0 || a.turns == 0 {
        return Err(usage!(
            "--requests, --concurrency, --max-tokens and --turns must be at least 1"
        ));
    }
    if a.turns > 1 && a.url.is_some() {
        return Err(usage!(
            "--turns is measured in-process only (leave out --url)"
        ));
    }
    let runs = policy_runs(&a.kv, a.compare_policy.as_deref())?;
    if let Some(url) = &a.url {
        let model = a.model.load()?;
        let texts = read_prompts(&a.prompts, &model.tokenizer, a.shared_prefix)?;
        encode_checked(&a, &model, &texts)?;
        drop(model);
        for (name, comp) in &runs {
            let out = http::drive(url, &a, &texts, name, comp)?;
            report(&a, name, comp, &out)?;
        }
        return Ok(());
    }
    for (name, comp) in &runs {
        let model = a.model.load()?;
        let texts = read_prompts(&a.prompts, &model.tokenizer, a.shared_prefix)?;
        let prompts = encode_checked(&a, &model, &texts)?;
        let mut cfg = a.engine.engine_config(&model, &a.kv)?;
        cfg.compression = *comp;
        let handle = EngineHandle::spawn(
            model,
            cfg,
            HandleConfig {
                max_queue: a.requests,
                threads: a.model.threads,
            },
        )?;
        let out = drive(&handle, &a, &prompts, &texts, name);
        handle.shutdown();
        report(&a, name, comp, &out?)?;
    }
    Ok(())
}

/// The token ids of `texts`, each of which with --max-tokens must fit the model's context.
fn encode_checked(
    a: &ServeBenchArgs,
    model: &rkv_model::LoadedModel,
    texts: &[String],
) -> Result<Vec<Vec<u32>>> {
    let ctx = model.transformer.config().max_context;
    let mut out = Vec::with_capacity(texts.len());
    for t in texts {
        let p = model.tokenizer.encode(t)?;
        if p.len() + a.max_tokens > ctx {
            bail!(
                "a prompt of {} tokens plus --max-tokens {} exceeds the context of {ctx}",
                p.len(),
                a.max_tokens
            );
        }
        out.push(p);
    }
    Ok(out)
}

/// A text of about `n` tokens (a shared system prompt), the same on every call.
fn shared_prefix_text(tok: &Tokenizer, n: usize) -> Result<String> {
    const LINE: &str = "You are a careful assistant. Read the whole problem, reason step by \
        step, check each step, and give the final answer in a box. ";
    let ids = tok.encode_raw(&LINE.repeat(n / 8 + 1))?;
    Ok(tok.decode(&ids[..n.min(ids.len())], true)?)
}

/// The text of every prompt in `path`, chat-rendered where it is a problem or question,
/// after a shared text of about `shared` tokens when that is not 0.
fn read_prompts(path: &PathBuf, tok: &Tokenizer, shared: usize) -> Result<Vec<String>> {
    let prefix = if shared > 0 {
        shared_prefix_text(tok, shared)?
    } else {
        String::new()
    };
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read prompts from {} (give a JSONL file with --prompts)",
            path.display()
        )
    })?;
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: not JSON", path.display(), i + 1))?;
        let field = |k: &str| v.get(k).and_then(|x| x.as_str());
        let rendered = match (field("prompt"), field("problem").or(field("question"))) {
            (Some(p), _) => p.to_string(),
            (None, Some(q)) => {
                tok.apply_chat_template(&[ChatMessage::user(prompt_text(q))], true)?
            }
            _ => bail!(
                "{} line {}: no `prompt`, `problem` or `question` string",
                path.display(),
                i + 1
            ),
        };
        out.push(format!("{prefix}{rendered}"));
    }
    if out.is_empty() {
        bail!("{} holds no prompts", path.display());
    }
    Ok(out)
}

/// Per-request timings as the events arrive.
#[derive(Default, Clone)]
struct Timing {
    sent: Option<Instant>,
    first: Option<Instant>,
    last: Option<Instant>,
    tokens: usize,
    done: bool,
    /// [`fnv1a`] of its generated token ids.
    digest: u64,
}

/// FNV-1a over token ids (little-endian bytes).
fn fnv1a(ids: &[u32]) -> u64 {
    ids.iter()
        .flat_map(|id| id.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// The text a chat client appends to a conversation after the assistant's answer to ask
/// for the next turn: the end of the answer, a user message, the generation prompt, as
/// the model's chat template renders them.
fn next_turn_text(tok: &Tokenizer) -> Result<String> {
    let (q, a, next) = ("Q", "A", "Go on.");
    let first = tok.apply_chat_template(&[ChatMessage::user(q)], true)?;
    let both = tok.apply_chat_template(
        &[
            ChatMessage::user(q),
            ChatMessage::new("assistant", a),
            ChatMessage::user(next),
        ],
        true,
    )?;
    match both.strip_prefix(&format!("{first}{a}")) {
        Some(rest) => Ok(rest.to_string()),
        None => bail!(
            "the chat template does not render a conversation as its first turn plus more \
             (it rewrites the history), so --turns cannot extend it"
        ),
    }
}

/// One conversation: its text so far and the turn it is on.
struct Conversation {
    text: String,
    turn: usize,
}

fn drive(
    handle: &EngineHandle,
    a: &ServeBenchArgs,
    prompts: &[Vec<u32>],
    texts: &[String],
    name: &str,
) -> Result<Outcome> {
    let (tx, rx) = mpsc::channel::<(usize, RequestEvent)>();
    let turns = a.turns;
    let total = a.requests * turns;
    let suffix = if turns > 1 {
        next_turn_text(handle.tokenizer())?
    } else {
        String::new()
    };
    let ctx = handle.max_context();
    // Request `c * turns + t` is turn `t` of conversation `c`.
    let mut timing = vec![Timing::default(); total];
    let mut convs: Vec<Conversation> = (0..a.requests)
        .map(|c| Conversation {
            text: texts[c % texts.len()].clone(),
            turn: 0,
        })
        .collect();
    let bar = ProgressBar::with_draw_target(
        Some((total * a.max_tokens) as u64),
        ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} tokens {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(name.to_string());
    let submit = |c: usize, prompt: Vec<u32>, timing: &mut [Timing], turn: usize| -> Result<()> {
        let i = c * turns + turn;
        if prompt.len() + a.max_tokens > ctx {
            bail!(
                "turn {} of conversation {c} has {} tokens: with --max-tokens {} it exceeds \
                 the context of {ctx} (fewer --turns or --max-tokens)",
                turn + 1,
                prompt.len(),
                a.max_tokens
            );
        }
        let req = GenerationRequest {
            logprobs: Default::default(),
            prompt,
            sampling: SamplingParams {
                temperature: a.temperature,
                seed: i as u64,
                ..SamplingParams::default()
            },
            max_tokens: a.max_tokens,
            ignore_eos: a.ignore_eos,
            stop: Vec::new(),
            grammar: None,
        };
        let tx = tx.clone();
        let sink = Box::new(move |ev| tx.send((i, ev)).is_ok());
        timing[i].sent = Some(Instant::now());
        handle
            .submit(
                Submission {
                    request: req,
                    compression: None,
                    n: 1,
                },
                sink,
            )
            .with_context(|| format!("request {i}"))?;
        Ok(())
    };
    let t0 = Instant::now();
    let mut next = 0;
    while next < a.requests.min(a.concurrency) {
        submit(next, prompts[next % prompts.len()].clone(), &mut timing, 0)?;
        next += 1;
    }
    let (mut done, mut generated) = (0, 0);
    let mut occ = Occupancy::default();
    while done < total {
        let m = handle.metrics().counters;
        occ.see(m.running, m.kv_blocks_used);
        let Ok((i, ev)) = rx.recv_timeout(Duration::from_millis(20)) else {
            continue;
        };
        let now = Instant::now();
        let t = &mut timing[i];
        match ev {
            RequestEvent::Token { .. } => {
                t.first.get_or_insert(now);
                t.last = Some(now);
                t.tokens += 1;
                generated += 1;
                bar.inc(1);
            }
            RequestEvent::Failed { error, .. } => {
                bar.finish_and_clear();
                bail!("request {i} failed: {error}");
            }
            RequestEvent::Finished { output, .. } => {
                t.done = true;
                t.digest = fnv1a(&output.token_ids);
                done += 1;
                let c = i / turns;
                let conv = &mut convs[c];
                conv.turn += 1;
                if conv.turn < turns {
                    conv.text.push_str(&output.text);
                    conv.text.push_str(&suffix);
                    let prompt = handle.tokenizer().encode(&conv.text)?;
                    submit(c, prompt, &mut timing, conv.turn)?;
                } else if next < a.requests {
                    submit(next, prompts[next % prompts.len()].clone(), &mut timing, 0)?;
                    next += 1;
                }
            }
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let m = handle.metrics().counters;
    let (ttft_ms, tpot_ms) = latencies(&timing);
    let later: Vec<Timing> = timing
        .iter()
        .enumerate()
        .filter(|(i, _)| i % turns != 0)
        .map(|(_, t)| t.clone())
        .collect();
    let (ttft_later_ms, _) = latencies(&later);
    let digests: Vec<u32> = timing
        .iter()
        .flat_map(|t| [t.digest as u32, (t.digest >> 32) as u32])
        .collect();
    let output_digest = Some(format!("{:016x}", fnv1a(&digests)));
    occ.see(m.running, m.kv_blocks_used);
    Ok(Outcome {
        generated,
        seconds,
        peak_running: occ.peak_running,
        mean_running: occ.mean_running(),
        blocks_peak: occ.blocks_peak,
        blocks_total: m.kv_blocks_total,
        preemptions: m.preemptions_total,
        cached_tokens: Some(m.prefix_cache_hits_total),
        ttft_ms,
        ttft_later_ms,
        tpot_ms,
        output_digest,
    })
}

/// Time to first token and time per output token (ms) of each request that has them.
fn latencies(timing: &[Timing]) -> (Vec<f64>, Vec<f64>) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ttft_ms = timing
        .iter()
        .filter_map(|t| Some(ms(t.first?.duration_since(t.sent?))))
        .collect();
    let tpot_ms = timing
        .iter()
        .filter(|t| t.tokens > 1)
        .filter_map(|t| Some(ms(t.last?.duration_since(t.first?)) / (t.tokens - 1) as f64))
        .collect();
    (ttft_ms, tpot_ms)
}

/// The `q`-quantile (0..=1) of `xs` by nearest rank; 0 for none.
fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn report(
    a: &ServeBenchArgs,
    name: &str,
    comp: &CompressionConfig,
    o: &Outcome,
) -> std::io::Result<()> {
    let budget = comp.policy.compresses().then_some(comp.budget);
    // Compressing sequences always reserve; only FullKV's admission is a choice, and a
    // running server's (`--url`) is its own, not known here.
    let admission = match (budget, &a.url) {
        (Some(_), _) => Admission::Reserve.to_string(),
        (None, None) => a.engine.kv_admission.to_string(),
        (None, Some(_)) => "the server's".to_string(),
    };
    let tps = o.generated as f64 / o.seconds.max(1e-9);
    let (t50, t99) = (quantile(&o.ttft_ms, 0.5), quantile(&o.ttft_ms, 0.99));
    let (p50, p99) = (quantile(&o.tpot_ms, 0.5), quantile(&o.tpot_ms, 0.99));
    if a.json {
        outln!(
            "{}",
            json!({
                "policy": name,
                "url": a.url,
                "budget": budget,
                "admission": admission,
                "requests": a.requests,
                "concurrency": a.concurrency,
                "max_tokens": a.max_tokens,
                "kv_memory": a.engine.kv_memory,
                "kv_dtype": a.kv.kv_dtype,
                "threads": a.model.threads,
                "shared_prefix": a.shared_prefix,
                "turns": a.turns,
                "output_digest": o.output_digest,
                "ttft_later_turns_ms": (a.turns > 1).then(|| json!({
                    "p50": quantile(&o.ttft_later_ms, 0.5),
                    "p99": quantile(&o.ttft_later_ms, 0.99),
                })),
                "prefix_cache": !a.engine.no_prefix_cache,
                "cached_tokens": o.cached_tokens,
                "generated_tokens": o.generated,
                "seconds": o.seconds,
                "tokens_per_s": tps,
                "peak_running": o.peak_running,
                "mean_running": o.mean_running,
                "kv_blocks_peak": o.blocks_peak,
                "kv_blocks_total": o.blocks_total,
                "preemptions": o.preemptions,
                "ttft_ms": {"p50": t50, "p99": t99},
                "tpot_ms": {"p50": p50, "p99": p99},
            })
        )?;
    } else {
        outln!(
            "{name} budget {} ({admission}), KV {}: {} requests, {} tokens in {:.1} s = {tps:.1} tok/s; peak running {}; KV blocks peak {}/{}; preemptions {}; TTFT p50 {t50:.0} ms p99 {t99:.0} ms; TPOT p50 {p50:.1} ms p99 {p99:.1} ms",
            budget.map_or_else(|| "none".into(), |b| b.to_string()),
            a.kv.kv_dtype,
            a.requests,
            o.generated,
            o.seconds,
            o.peak_running,
            o.blocks_peak,
            o.blocks_total,
            o.preemptions,
        )?;
        if a.turns > 1 {
            outln!(
                "  turns 2..{}: TTFT p50 {:.0} ms p99 {:.0} ms; prompt tokens from the prefix cache {}",
                a.turns,
                quantile(&o.ttft_later_ms, 0.5),
                quantile(&o.ttft_later_ms, 0.99),
                o.cached_tokens.unwrap_or(0),
            )?;
        }
    }
    Ok(())
}
