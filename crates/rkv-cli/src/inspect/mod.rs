//! `rkv inspect`: what the KV cache kept at every compression event, as one
//! self-contained HTML report (and optionally the same record as JSON).
//!
//! Owns the command: where the text comes from (a prompt the model continues, or a real
//! trace teacher-forced), the runs (FullKV for the reference distributions, the policy
//! and `--compare-policy` with the engine's recorder on, all teacher-forced on the same
//! tokens), the per-token KL to FullKV, and writing the files. The JSON shape is
//! [`record_json`]'s, the page [`html`]'s.
//! Must not know: the recorder's internals (rkv-engine), the policies' maths (rkv-core).

mod html;
mod packed;
mod record_json;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context, Result};
use clap::Args;
use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_engine::{fits_context, Engine, GenerationRequest, KvDtype};
use rkv_model::chat_template::ChatMessage;
use rkv_model::Tokenizer;

use crate::args::{engine_config, whole, ModelArgs, PolicyTuning, SamplingArgs};
use crate::eval::fidelity::{kl_divergence, log_softmax, read_traces, trace_tokens};
use crate::exit::usage;
use crate::generate::read_prompt;
use record_json::{Inspection, PolicyRun};

#[derive(Args, Debug)]
pub struct InspectArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Continue this prompt (greedy unless --temperature), then inspect prompt and output
    #[arg(long, conflicts_with_all = ["prompt_file", "trace"])]
    pub prompt: Option<String>,
    /// Read the prompt from a file (`-`: standard input)
    #[arg(long, conflicts_with = "trace")]
    pub prompt_file: Option<PathBuf>,
    /// Render the prompt as a user message with the chat template (with --prompt)
    #[arg(long)]
    pub chat: bool,
    /// Teacher-force a real trace: JSONL with `problem` or `prompt`, and `output`
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Which line of --trace (0-based)
    #[arg(long, default_value_t = 0, requires = "trace", value_parser = whole::<0, usize>)]
    pub index: usize,
    /// Render the trace without the chat template
    #[arg(long, requires = "trace")]
    pub no_chat: bool,
    /// Tokens to generate (prompt; default 256), or to keep of the trace's output
    #[arg(long, allow_negative_numbers = true, value_parser = whole::<1, usize>)]
    pub max_tokens: Option<usize>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// KV storage: f16, f32 (the accuracy reference) or q8_0 (ggml's 8-bit blocks: 32
    /// values and one f16 scale in 34 bytes, 0.53x the memory of f16; docs/kv-dtype.md)
    #[arg(long, default_value = "f16", value_parser = ["f16", "f32", "q8_0"])]
    pub kv_dtype: String,
    /// The policy inspected, by name (any registered policy but full)
    #[arg(long, default_value = "rkv")]
    pub kv_policy: String,
    /// Slots kept per layer and KV head after a compression (window included)
    #[arg(long, default_value_t = 1024, allow_negative_numbers = true, value_parser = whole::<0, usize>)]
    pub kv_budget: usize,
    #[command(flatten)]
    pub tuning: PolicyTuning,
    /// A second policy recorded on the same tokens at the same budget
    #[arg(long)]
    pub compare_policy: Option<String>,
    /// The HTML report
    #[arg(long, default_value = "inspect.html")]
    pub out: PathBuf,
    /// Also write the record as JSON (shape: docs/inspect.md)
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

impl InspectArgs {
    fn policy(&self, flag: &str, name: &str) -> Result<CompressionConfig> {
        let policy: PolicyKind = name.parse().map_err(|e| usage!("{flag}: {e}"))?;
        if !policy.compresses() {
            return Err(usage!(
                "{flag}: `full` never compresses; it is the baseline the KL is measured against"
            ));
        }
        self.tuning.config(policy, self.kv_budget)
    }
}

/// The text of each position: token `i` decoded after the few before it, less their
/// text, so that multi-byte characters split over tokens come out whole on the last one.
pub(crate) fn token_texts(tok: &Tokenizer, tokens: &[u32]) -> Result<Vec<String>> {
    const CONTEXT: usize = 4;
    let mut out = Vec::with_capacity(tokens.len());
    for i in 0..tokens.len() {
        let from = i.saturating_sub(CONTEXT);
        let before = tok.decode(&tokens[from..i], false)?;
        let with = tok.decode(&tokens[from..=i], false)?;
        let text = match with.strip_prefix(&before) {
            Some(t) => t.to_string(),
            None => tok.token_str(tokens[i]).unwrap_or_default(),
        };
        out.push(text);
    }
    Ok(out)
}

/// The tokens (prompt then continuation), the prompt's length, and a description.
fn source_tokens(a: &InspectArgs, engine: &mut Engine) -> Result<(Vec<u32>, usize, String)> {
    if let Some(path) = &a.trace {
        let traces = read_traces(path, Some(a.index + 1))?;
        if traces.len() <= a.index {
            bail!(
                "{} holds {} traces; --index {} is past the last",
                path.display(),
                traces.len(),
                a.index
            );
        }
        let mut inputs = trace_tokens(engine, &traces[a.index..], a.max_tokens, a.no_chat)?;
        let (toks, prompt_len) = inputs.remove(0);
        return Ok((
            toks,
            prompt_len,
            format!("trace {} of {}", a.index, path.display()),
        ));
    }
    let text = read_prompt(a.prompt.as_ref(), a.prompt_file.as_ref())?;
    let rendered = if a.chat {
        engine
            .tokenizer()
            .apply_chat_template(&[ChatMessage::user(text)], true)?
    } else {
        text
    };
    let prompt = engine.tokenizer().encode(&rendered)?;
    let max_tokens = a.max_tokens.unwrap_or(256);
    let ctx = engine.max_context();
    if !fits_context(prompt.len(), max_tokens, ctx) {
        bail!(
            "prompt of {} tokens plus --max-tokens {max_tokens} exceeds the model's context of {ctx} tokens",
            prompt.len()
        );
    }
    let prompt_len = prompt.len();
    let req = GenerationRequest {
        logprobs: Default::default(),
        prompt: prompt.clone(),
        sampling: a.sampling.checked()?,
        max_tokens,
        ignore_eos: false,
        stop: Vec::new(),
        grammar: None,
    };
    let never = AtomicBool::new(false);
    let out = engine.generate_until(req, None, &never, |_| {})?;
    let mut toks = prompt;
    toks.extend(&out.token_ids);
    if toks.len() < prompt_len + 2 {
        bail!("the model wrote fewer than 2 tokens; nothing to inspect");
    }
    Ok((
        toks,
        prompt_len,
        format!("the model's continuation of a {prompt_len}-token prompt"),
    ))
}

pub fn run(a: InspectArgs) -> Result<()> {
    let mut configs = vec![a.policy("--kv-policy", &a.kv_policy)?];
    if let Some(p) = &a.compare_policy {
        configs.push(a.policy("--compare-policy", p)?);
    }
    a.tuning
        .check_params(&configs.iter().map(|c| c.policy).collect::<Vec<_>>())?;
    if a.trace.is_none() && a.prompt.is_none() && a.prompt_file.is_none() {
        return Err(usage!(
            "give --prompt, --prompt-file or --trace FILE.jsonl --index N"
        ));
    }
    let model = a.model.load()?;
    let model_name = a
        .model
        .model
        .as_ref()
        .map_or("SmolLM2-135M-Instruct Q4_1 (default)".to_string(), |p| {
            p.display().to_string()
        });
    let ctx = model.transformer.config().max_context;
    let kv_dtype = KvDtype::parse(&a.kv_dtype).unwrap_or(KvDtype::F16);
    // The continuation of a prompt is written under the inspected policy.
    let mut engine = Engine::new(model, engine_config(kv_dtype, configs[0], ctx))?;
    let vocab = engine.model().config().vocab_size;
    let (tokens, prompt_len, source) = source_tokens(&a, &mut engine)?;
    let n_pos = tokens.len() - prompt_len;
    eprintln!(
        "{source}: {} tokens ({prompt_len} prompt); FullKV first",
        tokens.len()
    );
    let mut full_lp = Vec::new();
    full_lp
        .try_reserve_exact(n_pos * vocab)
        .context("cannot hold FullKV's distributions for the KL (try --max-tokens)")?;
    engine.teacher_force(
        &tokens,
        prompt_len,
        CompressionConfig::full(),
        256,
        |_, l| {
            full_lp.extend(log_softmax(l));
        },
    )?;
    let mut runs = Vec::new();
    for cfg in configs {
        eprintln!("{} at budget {}", cfg.policy, cfg.budget);
        let mut kl = vec![None; tokens.len()];
        let (stats, record) =
            engine.teacher_force_recorded(&tokens, prompt_len, cfg, 256, |p, l| {
                let i = p + 1 - prompt_len;
                let lf = &full_lp[i * vocab..(i + 1) * vocab];
                kl[p + 1] = Some(kl_divergence(lf, &log_softmax(l)).max(0.0));
            })?;
        let mean = kl.iter().flatten().sum::<f64>() / n_pos as f64;
        eprintln!(
            "  {} compression events, mean KL to FullKV {mean:.5}",
            stats.compressions
        );
        runs.push(PolicyRun { cfg, record, kl });
    }
    let ins = Inspection {
        model: model_name,
        source,
        prompt_tokens: prompt_len,
        tokens: token_texts(engine.tokenizer(), &tokens)?,
        runs,
    };
    let json = record_json::to_json(&ins);
    if let Some(path) = &a.json_out {
        std::fs::write(path, serde_json::to_vec(&json)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    std::fs::write(&a.out, html::render(&packed::to_json(&ins))?)
        .with_context(|| format!("cannot write {}", a.out.display()))?;
    eprintln!("wrote {}", a.out.display());
    Ok(())
}
