//! `rkv bench`: speed measured the way users run the engine, reported as medians with
//! min and max over repeats.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use rkv_engine::{Engine, GenerationRequest, SamplingParams};
use serde_json::json;

use crate::args::{engine_config, peak_rss_bytes, KvArgs, ModelArgs};

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Single-stream decode speed at given context depths
    Decode(DecodeArgs),
}

#[derive(Args, Debug)]
pub struct DecodeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    /// Context depths (prompt tokens before decoding), comma separated
    #[arg(long, value_delimiter = ',', default_value = "0,512,2048,4096")]
    pub depths: Vec<usize>,
    /// Tokens decoded per repeat
    #[arg(long, default_value_t = 128)]
    pub tokens: usize,
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// One JSON object per depth, then a summary object
    #[arg(long)]
    pub json: bool,
}

/// Text the depth prompts are cut from: real prose, so attention sees realistic keys.
const FILLER: &str = "The history of mathematics is a long conversation across centuries. \
Early scribes recorded tables of squares and reciprocals on clay, and later geometers asked \
why those rules held at all. Each generation re-checked the work of the one before, found \
small errors, and wrote the corrections into the margins of old books. ";

pub fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Decode(a) => decode(a),
    }
}

fn stats(xs: &mut [f64]) -> (f64, f64, f64) {
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    let med = if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    };
    (med, xs[0], xs[n - 1])
}

/// [`stats`] as JSON.
fn summary_json((median, min, max): (f64, f64, f64)) -> serde_json::Value {
    json!({"median": median, "min": min, "max": max})
}

fn decode(a: DecodeArgs) -> Result<()> {
    if a.tokens == 0 || a.repeat == 0 || a.depths.is_empty() {
        bail!("--tokens, --repeat and --depths must be non-empty and positive");
    }
    let compression = a.kv.compression()?;
    let model = a.model.load()?;
    let ctx = model.transformer.config().max_context;
    let max_depth = a.depths.iter().copied().max().unwrap_or(0);
    if max_depth.max(1) + a.tokens > ctx {
        bail!(
            "depth {max_depth} + {} tokens exceeds the model's context of {ctx}",
            a.tokens
        );
    }
    let filler = model.tokenizer.encode(FILLER)?;
    let model_name = a
        .model
        .model
        .as_ref()
        .and_then(|p| p.file_name())
        .map_or_else(
            || crate::fetch::DEFAULT_MODEL_FILE.to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
    let cfg = engine_config(a.kv.kv_dtype(), compression, max_depth + 1 + a.tokens);
    let mut engine = Engine::new(model, cfg)?;
    for &depth in &a.depths {
        let prompt: Vec<u32> = filler.iter().copied().cycle().take(depth.max(1)).collect();
        let mut tps = Vec::with_capacity(a.repeat);
        let mut event_ms = Vec::with_capacity(a.repeat);
        let mut compact_ms = Vec::with_capacity(a.repeat);
        let mut compressions = 0;
        let mut kv_bytes = 0;
        for _ in 0..a.repeat {
            let req = GenerationRequest {
                prompt: prompt.clone(),
                sampling: SamplingParams::default(),
                max_tokens: a.tokens + 1,
                ignore_eos: true,
                stop: Vec::new(),
            };
            let out = engine.generate(req, None, |_| {})?;
            tps.push(out.stats.decode_tokens_per_s());
            compressions = out.stats.compressions;
            if compressions > 0 {
                event_ms.push(out.stats.seconds_per_compression() * 1e3);
                compact_ms.push(out.stats.compact_seconds_per_compression() * 1e3);
            }
            kv_bytes = out.stats.kv_bytes_peak;
        }
        let (med, min, max) = stats(&mut tps);
        // Mean time of one compression event (all layers and heads) per repeat.
        let events = (!event_ms.is_empty()).then(|| stats(&mut event_ms));
        // Of which compaction (moving kept slots, freeing blocks): shared by every policy.
        let compaction = (!compact_ms.is_empty()).then(|| stats(&mut compact_ms));
        let row = json!({
            "bench": "decode",
            "model": model_name,
            "threads": rayon::current_num_threads(),
            "kv_dtype": a.kv.kv_dtype,
            "depth": depth,
            "tokens": a.tokens,
            "repeat": a.repeat,
            "policy": a.kv.kv_policy,
            "budget": a.kv.kv_budget,
            "decode_tokens_per_s": summary_json((med, min, max)),
            "compressions": compressions,
            "compress_ms_per_event": events.map(summary_json),
            "compact_ms_per_event": compaction.map(summary_json),
            "kv_bytes_peak": kv_bytes,
            "peak_rss_bytes": peak_rss_bytes(),
        });
        if a.json {
            println!("{row}");
        } else {
            println!(
                "depth {depth:>6}: decode {med:7.1} tok/s (min {min:.1}, max {max:.1}) over {} x {} tokens, kv_bytes_peak {kv_bytes}",
                a.repeat, a.tokens
            );
            if let (Some((m, lo, hi)), Some((cm, clo, chi))) = (events, compaction) {
                println!(
                    "              {compressions} compressions, {m:.2} ms per event (min {lo:.2}, max {hi:.2}), \
                     of which compaction {cm:.2} ms (min {clo:.2}, max {chi:.2})"
                );
            }
        }
    }
    if !a.json {
        if let Some(rss) = peak_rss_bytes() {
            println!("peak RSS {:.1} MiB", rss as f64 / (1024.0 * 1024.0));
        }
    }
    Ok(())
}
