//! `rkv bench events`: the time of one compression event in the engine on real text.
//! Each trace (a prompt and a model's real output) is teacher-forced through the engine,
//! so every policy compresses at the same points of the same tokens, whatever text greedy
//! decoding would have produced (which `rkv bench decode`'s event figure depends on).
//! Reported as medians with min and max over the repeats, and with `--compare-policy`
//! as per-repeat ratios measured in the same run.
//!
//! Must not know: the policies' maths, the engine's internals beyond teacher forcing.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use rkv_core::config::CompressionConfig;
use rkv_engine::Engine;
use serde_json::json;

use crate::args::{engine_config, KvArgs, ModelArgs};
use crate::bench::{alternating, policy_runs, ratio_stats, stats, summary_json};
use crate::eval::fidelity::{read_traces, trace_tokens};
use crate::exit::usage;
use crate::out::outln;

#[derive(Args, Debug)]
pub struct EventsArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    /// JSONL traces: `problem` or `prompt`, and `output` (a model's real output), as for
    /// `rkv eval fidelity`
    #[arg(long)]
    pub traces: PathBuf,
    /// First N traces only
    #[arg(long, default_value_t = 1)]
    pub limit: usize,
    /// Truncate each output to N tokens
    #[arg(long)]
    pub max_tokens: Option<usize>,
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// A second policy (same budget and tuning) measured in the same run, each repeat
    /// running both in alternating order; the ratios are reported per repeat
    #[arg(long)]
    pub compare_policy: Option<String>,
    /// Render the traces without the chat template
    #[arg(long)]
    pub no_chat: bool,
    /// One JSON object per policy, then the paired ratios
    #[arg(long)]
    pub json: bool,
}

/// What the repeats of one policy measured.
#[derive(Debug, Clone, Default)]
struct Events {
    /// `[repeats]` mean milliseconds of one event, and of its compaction.
    event_ms: Vec<f64>,
    compact_ms: Vec<f64>,
    /// Events per repeat (the same every repeat: the tokens are fixed).
    compressions: usize,
}

pub fn run(a: EventsArgs) -> Result<()> {
    if a.repeat == 0 || a.limit == 0 {
        return Err(usage!("--repeat and --limit must be positive"));
    }
    let runs = policy_runs(&a.kv, a.compare_policy.as_deref())?;
    if let Some((name, _)) = runs.iter().find(|(_, c)| !c.policy.compresses()) {
        return Err(usage!(
            "policy `{name}` never compresses: there is no event to time"
        ));
    }
    let traces = read_traces(&a.traces, Some(a.limit))?;
    let model = a.model.load()?;
    let ctx = model.transformer.config().max_context;
    let mut engine = Engine::new(
        model,
        engine_config(a.kv.kv_dtype(), CompressionConfig::full(), ctx),
    )?;
    let inputs = trace_tokens(&engine, &traces, a.max_tokens, a.no_chat)?;
    let tokens: usize = inputs.iter().map(|(t, _)| t.len()).sum();
    let mut measured = vec![Events::default(); runs.len()];
    for rep in 0..a.repeat {
        for k in 0..runs.len() {
            let k = alternating(rep, k, runs.len());
            let (mut n, mut secs, mut compact) = (0, 0.0, 0.0);
            for (toks, prompt_len) in &inputs {
                let st = engine.teacher_force(toks, *prompt_len, runs[k].1, 256, |_, _| {})?;
                n += st.compressions;
                secs += st.compress_seconds;
                compact += st.compact_seconds;
            }
            if n == 0 {
                bail!(
                    "`{}` never compressed over {tokens} tokens: give longer traces (--limit, --max-tokens) or a smaller --kv-budget",
                    runs[k].0
                );
            }
            let m = &mut measured[k];
            m.compressions = n;
            m.event_ms.push(secs * 1e3 / n as f64);
            m.compact_ms.push(compact * 1e3 / n as f64);
        }
    }
    let ratio =
        (measured.len() == 2).then(|| ratio_stats(&measured[0].event_ms, &measured[1].event_ms));
    for ((policy, cfg), m) in runs.iter().zip(&measured) {
        let (em, elo, ehi) = stats(&m.event_ms);
        let (cm, clo, chi) = stats(&m.compact_ms);
        if a.json {
            let row = json!({
                "bench": "events",
                "policy": policy,
                "budget": cfg.budget,
                "buffer": cfg.buffer,
                "threads": rayon::current_num_threads(),
                "kv_dtype": a.kv.kv_dtype,
                "traces": inputs.len(),
                "tokens": tokens,
                "repeat": a.repeat,
                "compressions": m.compressions,
                "event_ms": summary_json((em, elo, ehi)),
                "compact_ms": summary_json((cm, clo, chi)),
            });
            outln!("{row}")?;
        } else {
            outln!(
                "{policy}: {} events over {} traces ({tokens} tokens), {em:.2} ms per event (min {elo:.2}, max {ehi:.2}), of which compaction {cm:.2} ms (min {clo:.2}, max {chi:.2})",
                m.compressions,
                inputs.len()
            )?;
        }
    }
    if let Some(r) = ratio {
        let (p, q) = (&runs[0].0, &runs[1].0);
        if a.json {
            let row = json!({
                "bench": "events_paired",
                "policies": [p, q],
                "event_ms_ratio": summary_json(r),
            });
            outln!("{row}")?;
        } else {
            let (rm, rlo, rhi) = r;
            outln!("{p} / {q} per repeat: one event {rm:.2} (min {rlo:.2}, max {rhi:.2})")?;
        }
    }
    Ok(())
}
