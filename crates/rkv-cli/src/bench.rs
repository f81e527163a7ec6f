//! `rkv bench`: speed measured the way users run the engine, reported as medians with
//! min and max over repeats.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use rkv_core::config::CompressionConfig;
use rkv_engine::{fits_context, Engine, GenerationRequest, KvDtype, SamplingParams, SeqStats};
use serde_json::json;

use crate::args::{engine_config, peak_rss_bytes, whole, KvArgs, ModelArgs};
use crate::bench_batch::{batch_sampling, BatchStats};
use crate::bench_llama::Llama;
use crate::exit::usage;
use crate::out::outln;

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Single-stream decode speed at given context depths
    Decode(DecodeArgs),
    /// The time of one compression event on real text (teacher-forced traces)
    Events(crate::bench_events::EventsArgs),
    /// Many requests at once through the engine, as a server runs them
    Serve(crate::bench_serve::ServeBenchArgs),
    /// Constrained decoding (a JSON Schema) against free decoding: tokens/s and mask time
    Grammar(crate::bench_grammar::GrammarArgs),
    /// Write a random-weight GGUF with a published model's shapes (Q4_K_M layout)
    Model(crate::bench_model::BenchModelArgs),
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
    /// A second policy (same budget and tuning) measured in the same run: each repeat runs
    /// both, in alternating order, on the same engine and KV pool, so that the ratios
    /// between them (reported per repeat) share the machine's conditions
    #[arg(long)]
    pub compare_policy: Option<String>,
    /// The same policy with its KV stored as this dtype, measured in the same run as
    /// --compare-policy measures a second policy (`--kv-dtype q8_0 --compare-kv-dtype
    /// f16`: 8-bit KV's speed against f16's, side by side); the KV pool is rebuilt for
    /// each dtype
    #[arg(long, value_parser = ["f16", "f32", "q8_0"], conflicts_with = "compare_policy")]
    pub compare_kv_dtype: Option<String>,
    /// With --compare-policy or --compare-kv-dtype: each run on its own engine (the model
    /// loaded once for each), both generations running at once, one forward of each in
    /// turn, so that the two share the machine's conditions step by step rather than
    /// repeat by repeat (on a shared machine the speed drifts by a tenth within a
    /// minute). Each run's time is its own steps'. The runs change engines every repeat:
    /// use an even --repeat.
    #[arg(long)]
    pub interleave: bool,
    /// llama.cpp's `llama-bench` binary: runs it on the same GGUF file in turn with every
    /// repeat (decode at each depth, and a prompt of the depth's length) and reports
    /// rkv / llama.cpp per repeat (see BENCHMARKS.md for building llama.cpp)
    #[arg(long, value_name = "PATH", conflicts_with_all = ["compare_policy", "compare_kv_dtype"])]
    pub llama_bench: Option<std::path::PathBuf>,
    /// Sequences decoding at once: one request of N samples of the depth's prompt (fed
    /// once; a compressing policy compresses it before the samples fork), sampled at
    /// temperature 0.6 so that they differ. The decode speed is then all
    /// sequences' tokens per second, and the KV pool holds just what the request can
    /// hold at once
    #[arg(long, default_value_t = 1, allow_negative_numbers = true,
          value_parser = whole::<1, usize>, conflicts_with_all = ["interleave", "llama_bench"])]
    pub batch: usize,
    /// llama.cpp's `llama-batched-bench` binary: runs it on the same GGUF file in turn
    /// with every repeat, decoding --llama-sequences sequences at once after the depth's
    /// prompt (decoded once and copied into each sequence's cache, `-pps`), and reports
    /// rkv / llama.cpp per repeat
    #[arg(long, value_name = "PATH",
          conflicts_with_all = ["compare_policy", "compare_kv_dtype", "llama_bench"])]
    pub llama_batched_bench: Option<std::path::PathBuf>,
    /// Sequences llama-batched-bench decodes at once [default: --batch]
    #[arg(long, requires = "llama_batched_bench", allow_negative_numbers = true,
          value_parser = whole::<1, usize>)]
    pub llama_sequences: Option<usize>,
    /// One JSON object per depth, then a summary object
    #[arg(long)]
    pub json: bool,
}

/// Text the depth prompts are cut from: real prose, so attention sees realistic keys.
const FILLER: &str = "The history of mathematics is a long conversation across centuries. \
Early scribes recorded tables of squares and reciprocals on clay, and later geometers asked \
why those rules held at all. Each generation re-checked the work of the one before, found \
small errors, and wrote the corrections into the margins of old books. ";

impl BenchCmd {
    /// `--threads` of the commands that run a model.
    pub fn threads(&self) -> Option<usize> {
        match self {
            BenchCmd::Decode(a) => a.model.threads,
            BenchCmd::Events(a) => a.model.threads,
            BenchCmd::Serve(a) => a.model.threads,
            BenchCmd::Grammar(a) => a.model.threads,
            BenchCmd::Model(_) => None,
        }
    }
}

pub fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Decode(a) => decode(a),
        BenchCmd::Events(a) => crate::bench_events::run(a),
        BenchCmd::Serve(a) => crate::bench_serve::run(a),
        BenchCmd::Grammar(a) => crate::bench_grammar::run(a),
        BenchCmd::Model(a) => crate::bench_model::run(a),
    }
}

/// Median, min and max of `xs` (non-empty).
pub(crate) fn stats(xs: &[f64]) -> (f64, f64, f64) {
    let mut xs = xs.to_vec();
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    let med = if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    };
    (med, xs[0], xs[n - 1])
}

/// [`stats`] of the per-repeat ratios `p[r] / q[r]` (the first policy's figure over the
/// second's in the same repeat).
pub(crate) fn ratio_stats(p: &[f64], q: &[f64]) -> (f64, f64, f64) {
    let r: Vec<f64> = p.iter().zip(q).map(|(p, q)| p / q).collect();
    stats(&r)
}

/// Which of `n` policies runs `k`-th in repeat `rep`: the order alternates, so that
/// neither policy always runs right after the other.
pub(crate) fn alternating(rep: usize, k: usize, n: usize) -> usize {
    if rep.is_multiple_of(2) {
        k
    } else {
        n - 1 - k
    }
}

/// The policy of `--kv-policy` and, with `--compare-policy`, a second one at the same
/// budget and tuning: `(name, config)` each.
pub(crate) fn policy_runs(
    kv: &KvArgs,
    compare: Option<&str>,
) -> Result<Vec<(String, CompressionConfig)>> {
    let mut runs = vec![(kv.kv_policy.clone(), kv.compression()?)];
    if let Some(other) = compare {
        runs.push((
            other.to_string(),
            kv.compression_for("--compare-policy", other)?,
        ));
    }
    Ok(runs)
}

/// [`stats`] as JSON.
pub(crate) fn summary_json((median, min, max): (f64, f64, f64)) -> serde_json::Value {
    json!({"median": median, "min": min, "max": max})
}

fn decode(a: DecodeArgs) -> Result<()> {
    if a.tokens == 0 || a.repeat == 0 || a.depths.is_empty() {
        return Err(usage!(
            "--tokens, --repeat and --depths must be non-empty and positive"
        ));
    }
    if a.interleave && a.compare_policy.is_none() && a.compare_kv_dtype.is_none() {
        return Err(usage!(
            "--interleave needs --compare-policy or --compare-kv-dtype"
        ));
    }
    let mut runs = policy_runs(&a.kv, a.compare_policy.as_deref())?;
    // The KV dtype of each run, and how each is named in the report.
    let mut dtypes = vec![a.kv.kv_dtype(); runs.len()];
    if let Some(other) = &a.compare_kv_dtype {
        let other = KvDtype::parse(other).map_err(|e| usage!("--compare-kv-dtype: {e}"))?;
        runs.push(runs[0].clone());
        dtypes.push(other);
    }
    let labels: Vec<String> = runs
        .iter()
        .zip(&dtypes)
        .map(|((p, _), d)| match a.compare_kv_dtype {
            Some(_) => format!("{p} ({d})"),
            None => p.clone(),
        })
        .collect();
    let compression = runs[0].1;
    let model = a.model.load()?;
    let ctx = model.transformer.config().max_context;
    let max_depth = a.depths.iter().copied().max().unwrap_or(0);
    // A depth-0 run still prompts with one token.
    if !fits_context(max_depth.max(1), a.tokens, ctx) {
        bail!(
            "depth {max_depth} + {} tokens exceeds the model's context of {ctx}",
            a.tokens
        );
    }
    let filler = model.tokenizer.encode(FILLER)?;
    let model_name = a
        .model
        .path()?
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut cfg = engine_config(
        a.kv.kv_dtype(),
        compression,
        max_depth.saturating_add(1).saturating_add(a.tokens),
    );
    let request = |depth: usize| GenerationRequest {
        logprobs: Default::default(),
        prompt: filler.iter().copied().cycle().take(depth.max(1)).collect(),
        sampling: match a.batch {
            1 => SamplingParams::default(),
            _ => batch_sampling(),
        },
        max_tokens: a.tokens + 1,
        ignore_eos: true,
        stop: Vec::new(),
        grammar: None,
    };
    if a.batch > 1 {
        // Just what the deepest request of any policy can hold at once.
        let deepest = request(max_depth);
        let need = runs
            .iter()
            .map(|(_, c)| cfg.request_blocks(&deepest, c, a.batch));
        cfg.kv_blocks = need.max().unwrap_or(1);
        cfg.max_num_seqs = cfg.max_num_seqs.max(a.batch);
    }
    // Bytes of keys and values one token holds over all layers (llama.cpp's cells too),
    // per run's dtype.
    let shape = model.transformer.attention_shape();
    let slot_bytes_of = |d| rkv_engine::EngineConfig::bytes_per_block(shape, d, 1);
    let slot_bytes = slot_bytes_of(cfg.kv_dtype);
    let mut llama = match (&a.llama_bench, &a.llama_batched_bench) {
        (None, None) => None,
        (bench, batched) => {
            let file = a.model.path()?;
            if file.is_dir() {
                return Err(usage!(
                    "llama.cpp runs on a GGUF file, and --model is a directory"
                ));
            }
            let threads = rayon::current_num_threads();
            let (bin, batched) = match (bench, batched) {
                (Some(bin), _) => (bin, None),
                (None, Some(bin)) => (bin, Some(a.llama_sequences.unwrap_or(a.batch))),
                (None, None) => unreachable!("matched above"),
            };
            Some(Llama::new(bin, &file, threads, &a.kv.kv_dtype, batched)?)
        }
    };
    let (cfg_blocks, block_size) = (cfg.kv_blocks, cfg.block_size);
    let mut engine = Engine::new(model, cfg.clone())?;
    // The second policy's own engine, when interleaved.
    let mut second = match a.interleave {
        true => Some(Engine::new(a.model.load()?, cfg)?),
        false => None,
    };
    for &depth in &a.depths {
        let req = request(depth);
        let mut measured = vec![Measured::default(); runs.len()];
        let mut theirs = Theirs::default();
        // llama.cpp's prompt speed is compared only against a FullKV prefill: with a
        // compressing policy rkv's prefill also compresses (and the depth's prompt is
        // the longest part of a repeat).
        let full = !compression.policy.compresses();
        for rep in 0..a.repeat {
            // llama.cpp runs after rkv in even repeats, before it in odd ones.
            let llama_first = rep % 2 == 1;
            if let (Some(l), true) = (llama.as_mut(), llama_first) {
                theirs.add(l, depth, a.tokens, full)?;
            }
            if let Some(other) = second.as_mut() {
                // The policies change engines every repeat (one engine ran 2% slower
                // than the other with the same policy on both), and so which steps first.
                let p = [alternating(rep, 0, 2), alternating(rep, 1, 2)];
                let policies = [runs[p[0]].1, runs[p[1]].1];
                engine.set_kv_dtype(dtypes[p[0]])?;
                other.set_kv_dtype(dtypes[p[1]])?;
                let reqs = policies.map(|p| (req.clone(), Some(p)));
                let stats = interleaved([&mut engine, other], reqs)?;
                for (k, s) in p.iter().zip(&stats) {
                    measured[*k].add(s);
                }
                continue;
            }
            for k in 0..runs.len() {
                let k = alternating(rep, k, runs.len());
                engine.set_kv_dtype(dtypes[k])?;
                if a.batch > 1 {
                    let b = crate::bench_batch::run(&mut engine, &req, a.batch, runs[k].1)?;
                    measured[k].add_batch(&b);
                    continue;
                }
                let out = engine.generate(req.clone(), Some(runs[k].1), |_| {})?;
                measured[k].add(&out.stats);
            }
            if let (Some(l), false) = (llama.as_mut(), llama_first) {
                theirs.add(l, depth, a.tokens, full)?;
            }
        }
        let rows: Vec<serde_json::Value> = runs
            .iter()
            .zip(&measured)
            .zip(&dtypes)
            .map(|(((policy, _), m), dtype)| {
                json!({
                    "bench": "decode",
                    "model": model_name,
                    "threads": rayon::current_num_threads(),
                    "kv_dtype": dtype.name(),
                    "depth": depth,
                    "tokens": a.tokens,
                    "repeat": a.repeat,
                    "policy": policy,
                    "budget": a.kv.kv_budget,
                    "interleaved": a.interleave,
                    // Sequences decoding at once; their tokens per second together.
                    "batch": a.batch,
                    "decode_tokens_per_s": summary_json(stats(&m.tps)),
                    // The depth's prompt in one pass (for a compressing policy, with the
                    // compression that follows it when the prompt reaches budget + buffer).
                    "prefill_tokens_per_s": summary_json(stats(&m.prefill_tps)),
                    "compressions": m.compressions,
                    // Mean time of one compression event (all layers and heads) per repeat.
                    "compress_ms_per_event": m.events().map(|e| summary_json(stats(e))),
                    // Of which compaction (moving kept slots, freeing blocks): shared by
                    // every policy.
                    "compact_ms_per_event": m.compactions().map(|c| summary_json(stats(c))),
                    "kv_bytes_peak": m.kv_bytes,
                    "kv_pool_bytes": cfg_blocks * block_size * slot_bytes_of(*dtype),
                    "peak_rss_bytes": peak_rss_bytes(),
                })
            })
            .collect();
        // Per repeat, the first policy's figure over the second's (same repeat).
        let paired = (measured.len() == 2).then(|| {
            let (x, y) = (&measured[0], &measured[1]);
            let speed = ratio_stats(&x.tps, &y.tps);
            let event = x.events().zip(y.events()).map(|(p, q)| ratio_stats(p, q));
            (speed, event)
        });
        if a.json {
            for row in &rows {
                outln!("{row}")?;
            }
            if let Some((speed, event)) = paired {
                let row = json!({
                    "bench": "decode_paired",
                    "depth": depth,
                    "policies": [runs[0].0, runs[1].0],
                    "kv_dtypes": [dtypes[0].name(), dtypes[1].name()],
                    "interleaved": a.interleave,
                    "decode_speed_ratio": summary_json(speed),
                    "event_ms_ratio": event.map(summary_json),
                });
                outln!("{row}")?;
            }
        } else {
            for (label, m) in labels.iter().zip(&measured) {
                print_text(depth, label, m, a.repeat, a.tokens, a.batch)?;
            }
            if let Some(((sm, slo, shi), event)) = paired {
                let (p, q) = (&labels[0], &labels[1]);
                if a.interleave {
                    outln!("              (interleaved: one forward of each run in turn)")?;
                }
                outln!(
                    "              {p} / {q} per repeat: decode speed {sm:.2} (min {slo:.2}, max {shi:.2})"
                )?;
                if let Some((em, elo, ehi)) = event {
                    outln!(
                        "              {p} / {q} per repeat: one event {em:.2} (min {elo:.2}, max {ehi:.2})"
                    )?;
                }
            }
        }
        if let Some(l) = &llama {
            theirs.report(l, depth, &measured[0], &a, &model_name, slot_bytes)?;
        }
    }
    if !a.json {
        if let Some(rss) = peak_rss_bytes() {
            outln!("peak RSS {:.1} MiB", rss as f64 / (1024.0 * 1024.0))?;
        }
    }
    Ok(())
}

/// One generation of `reqs[k]` (with its compression) on `engines[k]`, both at once: one
/// forward of each in turn (the first engine first) until both finish. Returns each
/// one's statistics, whose times are its own steps'.
pub(crate) fn interleaved(
    mut engines: [&mut Engine; 2],
    reqs: [(GenerationRequest, Option<CompressionConfig>); 2],
) -> Result<[SeqStats; 2]> {
    let mut ids = [0; 2];
    for (k, (req, comp)) in reqs.into_iter().enumerate() {
        ids[k] = engines[k].add_request(req, comp)?;
    }
    let mut done: [Option<SeqStats>; 2] = [None, None];
    while done.iter().any(Option::is_none) {
        for k in 0..2 {
            if done[k].is_some() {
                continue;
            }
            engines[k].step();
            if let Some((_, e)) = engines[k].take_failures().into_iter().next() {
                for (eng, id) in engines.iter_mut().zip(ids) {
                    eng.abort(id);
                }
                return Err(e.into());
            }
            done[k] = engines[k].take_output(ids[k]).map(|o| o.stats);
        }
    }
    let [Some(s0), Some(s1)] = done else {
        bail!("an interleaved generation did not finish");
    };
    Ok([s0, s1])
}

/// What llama.cpp measured over the repeats at one depth.
#[derive(Debug, Clone, Default)]
struct Theirs {
    /// `[repeats]` decode and (at depths above 0, against a FullKV rkv) prompt tokens
    /// per second.
    decode: Vec<f64>,
    prompt: Vec<f64>,
    /// KV cells a batched run held.
    kv_cells: Option<usize>,
}

impl Theirs {
    fn add(&mut self, l: &mut Llama, depth: usize, tokens: usize, prompt: bool) -> Result<()> {
        let run = l.measure(depth, tokens, prompt)?;
        self.decode.push(run.decode);
        self.prompt.extend(run.prompt);
        self.kv_cells = run.kv_cells.or(self.kv_cells);
        Ok(())
    }

    /// llama.cpp's figures at `depth`, and rkv's (`ours`) over them per repeat.
    fn report(
        &self,
        l: &Llama,
        depth: usize,
        ours: &Measured,
        a: &DecodeArgs,
        model: &str,
        slot_bytes: usize,
    ) -> std::io::Result<()> {
        let kv_bytes = self.kv_cells.map(|c| c * slot_bytes);
        let prompt = (!self.prompt.is_empty()).then(|| stats(&self.prompt));
        let decode_ratio = ratio_stats(&ours.tps, &self.decode);
        let prompt_ratio = prompt.map(|_| ratio_stats(&ours.prefill_tps, &self.prompt));
        if a.json {
            let row = json!({
                "bench": "decode_llamacpp",
                "model": model,
                "threads": l.threads,
                "kv_dtype": l.kv_dtype,
                "depth": depth,
                "tokens": a.tokens,
                "repeat": a.repeat,
                "llamacpp_build": l.build,
                // Sequences at once: rkv's, and llama.cpp's with the cells they held.
                "batch": a.batch,
                "llamacpp_sequences": l.sequences(),
                "llamacpp_kv_cells": self.kv_cells,
                "llamacpp_kv_bytes": kv_bytes,
                // rkv's policy; llama.cpp always keeps the whole cache.
                "policy": a.kv.kv_policy,
                "budget": a.kv.kv_budget,
                "decode_tokens_per_s": summary_json(stats(&self.decode)),
                "prompt_tokens_per_s": prompt.map(summary_json),
                "decode_speed_ratio": summary_json(decode_ratio),
                "prompt_speed_ratio": prompt_ratio.map(summary_json),
            });
            return outln!("{row}");
        }
        let (m, lo, hi) = stats(&self.decode);
        let (rm, rlo, rhi) = decode_ratio;
        let seqs = match l.sequences() {
            1 => String::new(),
            n => format!(", {n} sequences"),
        };
        outln!(
            "              llama.cpp {}{seqs}: decode {m:.1} tok/s (min {lo:.1}, max {hi:.1}); \
             rkv / llama.cpp per repeat {rm:.2} (min {rlo:.2}, max {rhi:.2})",
            l.build.as_deref().unwrap_or("")
        )?;
        if let Some(b) = kv_bytes {
            outln!(
                "              llama.cpp's KV cache held {:.1} MiB",
                b as f64 / (1024.0 * 1024.0)
            )?;
        }
        if let (Some((m, lo, hi)), Some((rm, rlo, rhi))) = (prompt, prompt_ratio) {
            outln!(
                "              llama.cpp prompt of {depth}: {m:.1} tok/s (min {lo:.1}, max {hi:.1}); \
                 rkv / llama.cpp per repeat {rm:.2} (min {rlo:.2}, max {rhi:.2})"
            )?;
        }
        Ok(())
    }
}

/// What the repeats of one policy at one depth measured.
#[derive(Debug, Clone, Default)]
struct Measured {
    /// `[repeats]` decode tokens per second.
    tps: Vec<f64>,
    /// `[repeats]` prompt tokens per second.
    prefill_tps: Vec<f64>,
    /// `[repeats]` mean milliseconds of one compression event, and of its compaction
    /// (empty when the policy never compressed).
    event_ms: Vec<f64>,
    compact_ms: Vec<f64>,
    compressions: usize,
    kv_bytes: usize,
}

impl Measured {
    /// A batched repeat: its statistics, with all sequences' decode speed.
    fn add_batch(&mut self, b: &BatchStats) {
        self.add(&b.stats);
        if let Some(t) = self.tps.last_mut() {
            *t = b.decode_tps;
        }
    }

    fn add(&mut self, s: &SeqStats) {
        self.tps.push(s.decode_tokens_per_s());
        self.prefill_tps.push(s.prefill_tokens_per_s());
        self.compressions = s.compressions;
        if s.compressions > 0 {
            self.event_ms.push(s.seconds_per_compression() * 1e3);
            self.compact_ms
                .push(s.compact_seconds_per_compression() * 1e3);
        }
        self.kv_bytes = s.kv_bytes_peak;
    }

    /// Event times, when every repeat compressed.
    fn events(&self) -> Option<&[f64]> {
        self.every_repeat(&self.event_ms)
    }

    /// Compaction times, when every repeat compressed.
    fn compactions(&self) -> Option<&[f64]> {
        self.every_repeat(&self.compact_ms)
    }

    fn every_repeat<'m>(&self, xs: &'m [f64]) -> Option<&'m [f64]> {
        (!xs.is_empty() && xs.len() == self.tps.len()).then_some(xs)
    }
}

fn print_text(
    depth: usize,
    policy: &str,
    m: &Measured,
    repeat: usize,
    tokens: usize,
    batch: usize,
) -> std::io::Result<()> {
    let (med, min, max) = stats(&m.tps);
    let policy = match batch {
        1 => policy.to_string(),
        n => format!("{policy} x {n} sequences"),
    };
    let (pmed, pmin, pmax) = stats(&m.prefill_tps);
    outln!(
        "depth {depth:>6} {policy}: decode {med:7.1} tok/s (min {min:.1}, max {max:.1}) over {repeat} x {tokens} tokens, \
         prefill {pmed:.1} tok/s (min {pmin:.1}, max {pmax:.1}), kv_bytes_peak {}",
        m.kv_bytes
    )?;
    if let (Some(e), Some(c)) = (m.events(), m.compactions()) {
        let ((em, elo, ehi), (cm, clo, chi)) = (stats(e), stats(c));
        outln!(
            "              {} compressions, {em:.2} ms per event (min {elo:.2}, max {ehi:.2}), \
             of which compaction {cm:.2} ms (min {clo:.2}, max {chi:.2})",
            m.compressions
        )?;
    }
    Ok(())
}
