//! `rkv eval passkey`: does a compressed cache still find a number hidden in a long
//! prompt? For each prompt length, depth and trial, one passkey prompt
//! (`rkv_eval::passkey`) is sized to the length with the model's tokenizer and answered
//! greedily under FullKV and under every policy x budget x prompt mode (`keep`: the prompt
//! held whole and compressed once after it; `compress`: compressed between chunks).
//! A run is correct when the first number it generates is the key.
//!
//! Must not know: how policies score, the engine's scheduling.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_core::PromptMode;
use rkv_engine::{Engine, GenerationRequest, KvDtype, SamplingParams};
use rkv_eval::passkey::{filler_units_for, is_correct, key_for, PasskeyPrompt};
use serde::Serialize;

use crate::args::{engine_config, ModelArgs, PolicyTuning};
use crate::exit::usage;
use crate::out::outln;

#[derive(Args, Debug)]
pub struct PasskeyArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt lengths in tokens (each within the model's context)
    #[arg(long, value_delimiter = ',', default_value = "4000")]
    pub lengths: Vec<usize>,
    /// Where the key sits, from 0 (start) to 1 (end)
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.5,0.9")]
    pub depths: Vec<f64>,
    /// Policies compared with FullKV (`all`: every registered policy)
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub policies: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "256,1024,2048")]
    pub budgets: Vec<usize>,
    /// Prompt modes compared (`keep`, `compress`)
    #[arg(long, value_delimiter = ',', default_value = "keep,compress")]
    pub prompt_modes: Vec<String>,
    /// Keys per length and depth
    #[arg(long, default_value_t = 1)]
    pub trials: usize,
    /// Seeds the keys
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Tokens generated after the question
    #[arg(long, default_value_t = 10)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub tuning: PolicyTuning,
    /// Write one JSON record per run here (the summary goes to stdout)
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Print the summary as one JSON line
    #[arg(long)]
    pub json: bool,
    /// Write an SVG of accuracy against budget, one panel per prompt mode
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print the first prompt (first length and depth, trial 0) and run nothing: a prompt
    /// for `rkv generate --prompt-file`
    #[arg(long)]
    pub print_prompt: bool,
}

/// One answered prompt.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub length: usize,
    pub prompt_tokens: usize,
    pub depth: f64,
    pub trial: usize,
    pub key: u32,
    pub policy: String,
    /// `None` for FullKV.
    pub budget: Option<usize>,
    pub prompt_mode: String,
    pub output: String,
    pub correct: bool,
    pub kv_slots_peak: usize,
    pub seconds: f64,
}

/// Accuracy of one (policy, budget, prompt mode, length) over depths and trials.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub policy: String,
    pub budget: Option<usize>,
    pub prompt_mode: String,
    pub length: usize,
    pub runs: usize,
    pub accuracy: f64,
    pub kv_slots_peak: usize,
}

/// The runs of one prompt: FullKV first, then every policy x budget x mode.
fn configs(a: &PasskeyArgs) -> Result<Vec<CompressionConfig>> {
    let names: Vec<&str> = if a.policies.iter().any(|p| p == "all") {
        PolicyKind::ALL
            .into_iter()
            .filter(|p| p.compresses())
            .map(PolicyKind::name)
            .collect()
    } else {
        a.policies.iter().map(String::as_str).collect()
    };
    let mut modes = Vec::new();
    for m in &a.prompt_modes {
        let mode: PromptMode = m.parse().map_err(|e| usage!("--prompt-modes: {e}"))?;
        modes.push(mode);
    }
    let mut out = vec![CompressionConfig::full()];
    let mut policies = Vec::new();
    for name in names {
        let policy: PolicyKind = name.parse().map_err(|e| usage!("--policies: {e}"))?;
        if !policy.compresses() {
            return Err(usage!("--policies: `{name}` is the baseline, always run"));
        }
        policies.push(policy);
        for &budget in &a.budgets {
            for &mode in &modes {
                let mut cfg = a.tuning.config(policy, budget)?;
                cfg.prompt = mode;
                cfg.validate()
                    .map_err(|e| usage!("{policy} at budget {budget}, prompt {mode}: {e}"))?;
                out.push(cfg);
            }
        }
    }
    a.tuning.check_params(&policies)?;
    if out.len() == 1 {
        return Err(usage!("give at least one policy, budget and prompt mode"));
    }
    Ok(out)
}

fn check(a: &PasskeyArgs) -> Result<()> {
    if a.lengths.is_empty() || a.lengths.contains(&0) {
        return Err(usage!("--lengths: give lengths of at least 1 token"));
    }
    if a.depths.is_empty() || a.depths.iter().any(|d| !(0.0..=1.0).contains(d)) {
        return Err(usage!("--depths must lie in [0, 1]"));
    }
    if a.trials == 0 || a.max_tokens == 0 {
        return Err(usage!("--trials and --max-tokens must be at least 1"));
    }
    Ok(())
}

/// Filler units that bring a prompt to about `length` tokens with this tokenizer.
fn units_for(engine: &Engine, length: usize) -> Result<usize> {
    let count = |units: usize| -> Result<usize> {
        let p = PasskeyPrompt {
            key: 10_000,
            depth: 0.5,
            units,
        };
        Ok(engine.tokenizer().encode(&p.text())?.len())
    };
    let (a, b) = (10, 40);
    let units = filler_units_for(length, (a, count(a)?), (b, count(b)?))
        .with_context(|| format!("--lengths {length}: too short for a passkey prompt"))?;
    Ok(units)
}

pub fn run(a: PasskeyArgs) -> Result<()> {
    check(&a)?;
    let configs = configs(&a)?;
    let mut out: Option<Box<dyn Write>> = match &a.output {
        Some(p) => Some(Box::new(BufWriter::new(
            File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        ))),
        None => None,
    };
    let model = a.model.load()?;
    let ctx = model.transformer.config().max_context;
    let longest = a.lengths.iter().copied().max().unwrap_or(0);
    if longest.saturating_add(a.max_tokens) > ctx {
        bail!(
            "--lengths {longest} plus --max-tokens {} exceeds the model's context of {ctx} tokens",
            a.max_tokens
        );
    }
    // Room for one FullKV run of the longest prompt (sizing may overshoot a little).
    let slots = (longest + longest / 16 + a.max_tokens).min(ctx);
    let mut engine = Engine::new(
        model,
        engine_config(KvDtype::F16, CompressionConfig::full(), slots),
    )?;
    if a.print_prompt {
        let p = PasskeyPrompt {
            key: key_for(a.seed, 0),
            depth: a.depths[0],
            units: units_for(&engine, a.lengths[0])?,
        };
        outln!("{}", p.text())?;
        return Ok(());
    }
    let cases = a.lengths.len() * a.depths.len() * a.trials;
    let bar = ProgressBar::new((cases * configs.len()) as u64).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs {msg} [{elapsed_precise} < {eta}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut records = Vec::new();
    let mut index = 0u64;
    for &length in &a.lengths {
        let units = units_for(&engine, length)?;
        for &depth in &a.depths {
            for trial in 0..a.trials {
                let p = PasskeyPrompt {
                    key: key_for(a.seed, index),
                    depth,
                    units,
                };
                index += 1;
                let prompt = engine.tokenizer().encode(&p.text())?;
                if prompt.len() + a.max_tokens > ctx {
                    bail!(
                        "a passkey prompt of {} tokens does not fit the context of {ctx}",
                        prompt.len()
                    );
                }
                for c in &configs {
                    bar.set_message(format!("{length} @{depth} {} {}", c.policy, c.budget));
                    let req = GenerationRequest {
                        logprobs: Default::default(),
                        prompt: prompt.clone(),
                        sampling: SamplingParams::default(),
                        max_tokens: a.max_tokens,
                        ignore_eos: false,
                        stop: Vec::new(),
                        grammar: None,
                    };
                    let t0 = Instant::now();
                    let g = engine.generate(req, Some(*c), |_| {})?;
                    let rec = Record {
                        length,
                        prompt_tokens: prompt.len(),
                        depth,
                        trial,
                        key: p.key,
                        policy: c.policy.to_string(),
                        budget: c.policy.compresses().then_some(c.budget),
                        prompt_mode: mode_of(c),
                        correct: is_correct(&g.text, p.key),
                        output: g.text,
                        kv_slots_peak: g.stats.kv_slots_peak,
                        seconds: t0.elapsed().as_secs_f64(),
                    };
                    // A record per run as it ends: a long sweep can be followed.
                    if let Some(w) = out.as_mut() {
                        writeln!(w, "{}", serde_json::to_string(&rec)?)?;
                        w.flush()?;
                    }
                    records.push(rec);
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_and_clear();
    if let Some(mut w) = out {
        w.flush()?;
    }
    let summary = summarise(&records);
    if a.json {
        outln!("{}", serde_json::json!({ "summary": summary }))?;
    } else {
        outln!(
            "{:<13} {:>6} {:>9} {:>7} {:>5} {:>9} {:>8}",
            "policy",
            "budget",
            "prompt",
            "length",
            "runs",
            "accuracy",
            "kv_peak"
        )?;
        for s in &summary {
            let budget = s.budget.map_or("-".to_string(), |b| b.to_string());
            outln!(
                "{:<13} {:>6} {:>9} {:>7} {:>5} {:>9.3} {:>8}",
                s.policy,
                budget,
                s.prompt_mode,
                s.length,
                s.runs,
                s.accuracy,
                s.kv_slots_peak
            )?;
        }
    }
    if let Some(path) = &a.plot {
        crate::eval::plot::passkey_svg(path, &summary)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The prompt mode a record names: FullKV has none to speak of.
fn mode_of(c: &CompressionConfig) -> String {
    if c.policy.compresses() {
        c.prompt.to_string()
    } else {
        "-".to_string()
    }
}

/// One row per (policy, budget, prompt mode, length), in the order first seen.
pub fn summarise(records: &[Record]) -> Vec<Summary> {
    let mut out: Vec<Summary> = Vec::new();
    for r in records {
        let same = |s: &&mut Summary| {
            s.policy == r.policy
                && s.budget == r.budget
                && s.prompt_mode == r.prompt_mode
                && s.length == r.length
        };
        match out.iter_mut().find(|s| same(s)) {
            Some(s) => {
                s.accuracy = (s.accuracy * s.runs as f64 + f64::from(u8::from(r.correct)))
                    / (s.runs + 1) as f64;
                s.runs += 1;
                s.kv_slots_peak = s.kv_slots_peak.max(r.kv_slots_peak);
            }
            None => out.push(Summary {
                policy: r.policy.clone(),
                budget: r.budget,
                prompt_mode: r.prompt_mode.clone(),
                length: r.length,
                runs: 1,
                accuracy: f64::from(u8::from(r.correct)),
                kv_slots_peak: r.kv_slots_peak,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(policy: &str, budget: Option<usize>, correct: bool, peak: usize) -> Record {
        Record {
            length: 4000,
            prompt_tokens: 3990,
            depth: 0.5,
            trial: 0,
            key: 12345,
            policy: policy.into(),
            budget,
            prompt_mode: "keep".into(),
            output: String::new(),
            correct,
            kv_slots_peak: peak,
            seconds: 1.0,
        }
    }

    #[test]
    fn the_summary_averages_each_configuration() {
        let rs = [
            rec("full", None, true, 4000),
            rec("rkv", Some(256), true, 300),
            rec("full", None, true, 4001),
            rec("rkv", Some(256), false, 380),
            rec("rkv", Some(256), false, 310),
        ];
        let s = summarise(&rs);
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].runs, s[0].accuracy, s[0].kv_slots_peak),
            (2, 1.0, 4001)
        );
        assert_eq!(s[1].runs, 3);
        assert!((s[1].accuracy - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(s[1].kv_slots_peak, 380);
    }
}
