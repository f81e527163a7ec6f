//! Command-line argument groups shared by subcommands, and their translation into the
//! typed configurations of the libraries (validated once, here).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_core::PromptMode;
use rkv_engine::{Admission, EngineConfig, KvDtype, SamplingParams};
use rkv_model::{LoadedModel, WeightMode};

use crate::exit::usage;
use crate::fetch;

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF file, Hugging Face directory, or a known model's name (`smollm2-135m`,
    /// `qwen2.5-coder-1.5b`; fetched if absent); omitted = the default model
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Weight precision: `native` runs quantised matmuls, `f32` dequantises (reference mode)
    #[arg(long, default_value = "native", value_parser = ["native", "f32"])]
    pub dtype: String,
    /// Worker threads (default: all cores)
    #[arg(long, allow_negative_numbers = true, value_parser = whole::<1, usize>)]
    pub threads: Option<usize>,
}

/// Most worker threads `--threads` accepts (llama.cpp's bound too): more only adds
/// start-up time and contention.
const MAX_THREADS: usize = 512;

/// The worker pool every command runs in: `threads` workers (`None`: one per core).
///
/// The command itself runs on one of the workers ([`rayon::ThreadPool::install`]), so
/// each parallel kernel splits its work between the calling worker and the others. From
/// a thread outside the pool, every parallel call (a few hundred per decoded token) would
/// hand its work over and put the caller to sleep until it is done: on 2 cores that halved
/// decode speed.
pub fn thread_pool(threads: Option<usize>) -> Result<rayon::ThreadPool> {
    let mut builder = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        if n == 0 || n > MAX_THREADS {
            return Err(usage!(
                "--threads must be between 1 and {MAX_THREADS}, got {n}"
            ));
        }
        builder = builder.num_threads(n);
    }
    builder.build().context("cannot set up the thread pool")
}

/// The model file or directory `--model VALUE` names: a path when one exists there, else a
/// known model's name (fetched if absent); omitted, the default model.
pub fn model_path(value: Option<&Path>) -> Result<PathBuf> {
    match value {
        Some(value) => fetch::resolve_model(value),
        None => fetch::ensure_default_model(),
    }
}

impl ModelArgs {
    /// The model file or directory: `--model` as a path when one exists there, else as a
    /// known model's name (fetched if absent); omitted, the default model.
    pub fn path(&self) -> Result<PathBuf> {
        model_path(self.model.as_deref())
    }

    /// The name a model goes by in reports and the server's model list: a known model's
    /// own name, else the file's stem or the directory's name.
    pub fn display_name(&self) -> String {
        let Some(value) = &self.model else {
            return fetch::DEFAULT_MODEL.name.to_string();
        };
        if !value.exists() {
            if let Some(m) = value.to_str().and_then(fetch::known) {
                return m.name.to_string();
            }
        }
        let name = if value.is_dir() {
            value.file_name()
        } else {
            value.file_stem()
        };
        name.map_or_else(|| "rkv".to_string(), |s| s.to_string_lossy().into_owned())
    }

    pub fn load(&self) -> Result<LoadedModel> {
        let mode = match self.dtype.as_str() {
            "f32" => WeightMode::F32,
            _ => WeightMode::Native,
        };
        let path = self.path()?;
        rkv_model::load(&path, mode).with_context(|| {
            format!(
                "cannot load model {} (a damaged cached model? `rkv fetch NAME --force` \
                 downloads it again)",
                path.display()
            )
        })
    }
}

#[derive(Args, Debug, Clone)]
pub struct KvArgs {
    /// KV storage: f16, f32 (the accuracy reference) or q8_0 (ggml's 8-bit blocks: 32
    /// values and one f16 scale in 34 bytes, 0.53x the memory of f16; docs/kv-dtype.md)
    #[arg(long, default_value = "f16", value_parser = ["f16", "f32", "q8_0"])]
    pub kv_dtype: String,
    /// KV policy by name: full, or any registered policy (h2o-mean, h2o, snapkv, rkv, ...;
    /// a wrong name lists them all; docs/compression.md says when to pick which)
    #[arg(long, default_value = "full")]
    pub kv_policy: String,
    /// Slots kept per layer and KV head after a compression (window included)
    #[arg(long, default_value_t = 1024, allow_negative_numbers = true, value_parser = whole::<0, usize>)]
    pub kv_budget: usize,
    #[command(flatten)]
    pub tuning: PolicyTuning,
}

/// Compression parameters shared by every command that compresses.
#[derive(Args, Debug, Clone)]
pub struct PolicyTuning {
    /// Slots that accumulate above the budget before compressing
    #[arg(long, default_value_t = 128, allow_negative_numbers = true, value_parser = whole::<0, usize>)]
    pub kv_buffer: usize,
    /// Observation window (most recent tokens whose queries score the cache)
    #[arg(long, default_value_t = 8, allow_negative_numbers = true, value_parser = whole::<0, usize>)]
    pub kv_window: usize,
    /// R-KV mixing weight: score = lambda * importance - (1 - lambda) * redundancy
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true)]
    pub rkv_lambda: f32,
    /// R-KV cosine threshold for the latest similar slot
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    pub rkv_threshold: f32,
    /// A policy's own parameter, NAME=VALUE (repeatable; `h2o-mean`: recent, halflife,
    /// power; docs/compression.md lists them). Each policy of the command takes the names
    /// it declares; a name none declares is an error
    #[arg(long = "kv-param", value_name = "NAME=VALUE", value_parser = parse_param)]
    pub kv_params: Vec<(String, f64)>,
    /// `keep`: hold the prompt whole and compress it once after its last token (a
    /// sequence holds max(prompt, budget + buffer) slots); `compress`: run the schedule
    /// after every --kv-prompt-chunk prompt tokens (at most budget + buffer + chunk)
    #[arg(long, default_value = "keep", value_parser = parse_prompt_mode)]
    pub kv_prompt: PromptMode,
    /// Prompt tokens appended between two compressions with `--kv-prompt compress` (at
    /// least twice the window; a step's --max-batch-tokens may feed one in pieces)
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = whole::<0, usize>)]
    pub kv_prompt_chunk: usize,
}

fn parse_prompt_mode(s: &str) -> std::result::Result<PromptMode, String> {
    s.parse().map_err(|e: rkv_core::ConfigError| e.to_string())
}

/// `NAME=VALUE` of `--kv-param`.
fn parse_param(s: &str) -> std::result::Result<(String, f64), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=VALUE, got {s:?}"))?;
    let v: f64 = value
        .trim()
        .parse()
        .map_err(|_| format!("{name}: {value:?} is not a number"))?;
    if !v.is_finite() {
        return Err(format!("{name}: the value must be finite"));
    }
    Ok((name.trim().to_string(), v))
}

impl PolicyTuning {
    /// The configuration of `policy` at `budget` with these parameters, validated.
    pub fn config(&self, policy: PolicyKind, budget: usize) -> Result<CompressionConfig> {
        let mut cfg = CompressionConfig {
            policy,
            budget,
            buffer: self.kv_buffer,
            window: self.kv_window,
            lambda: self.rkv_lambda,
            threshold: self.rkv_threshold,
            prompt: self.kv_prompt,
            prompt_chunk: self.kv_prompt_chunk,
            ..CompressionConfig::default()
        };
        for (name, value) in &self.kv_params {
            if cfg.param(name).is_some() {
                cfg.set_param(name, *value)
                    .map_err(|e| usage!("--kv-param {name}: {e}"))?;
            }
        }
        cfg.validate_if_compressing()
            .map_err(|e| usage!("{policy} at budget {budget}: {e}"))?;
        Ok(cfg)
    }

    /// Refuses a `--kv-param` that none of `policies` declares.
    pub fn check_params(&self, policies: &[PolicyKind]) -> Result<()> {
        for (name, _) in &self.kv_params {
            let probe = |p: &PolicyKind| CompressionConfig::with_policy(*p).param(name).is_some();
            if !policies.iter().any(probe) {
                let names: Vec<&str> = policies.iter().map(|p| p.name()).collect();
                return Err(usage!(
                    "--kv-param {name}: no policy of this command ({}) has that parameter",
                    names.join(", ")
                ));
            }
        }
        Ok(())
    }
}

impl KvArgs {
    pub fn kv_dtype(&self) -> KvDtype {
        // clap accepts only the names KvDtype parses.
        KvDtype::parse(&self.kv_dtype).unwrap_or(KvDtype::F16)
    }

    pub fn compression(&self) -> Result<CompressionConfig> {
        self.compression_for("--kv-policy", &self.kv_policy)
    }

    /// The configuration of policy `name` (given by the flag `flag`) at this budget and
    /// tuning.
    pub fn compression_for(&self, flag: &str, name: &str) -> Result<CompressionConfig> {
        let policy: PolicyKind = name.parse().map_err(|e| usage!("{flag}: {e}"))?;
        let main: PolicyKind = self.kv_policy.parse().unwrap_or(policy);
        self.tuning.check_params(&[main, policy])?;
        self.tuning.config(policy, self.kv_budget)
    }
}

#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// 0 = greedy
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// 0 = off
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = whole::<0, usize>)]
    pub top_k: usize,
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = whole::<0, u64>)]
    pub seed: u64,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
        }
    }

    /// The sampling parameters, checked (a bad one is a usage error).
    pub fn checked(&self) -> Result<SamplingParams> {
        let p = self.params();
        p.validate().map_err(|e| usage!("{e}"))?;
        Ok(p)
    }
}

/// The engine's limits for commands that run many sequences at once (`serve`,
/// `bench serve`, `eval math`).
#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    /// KV memory of the engine's block pool: bytes, or with a unit (`256MiB`, `2GiB`, `512MB`)
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes)]
    pub kv_memory: u64,
    /// Most sequences running at once
    #[arg(long, default_value_t = 64)]
    pub max_num_seqs: usize,
    /// Most tokens one forward carries (prompt chunks plus one token per decoding sequence)
    #[arg(long, default_value_t = 512)]
    pub max_batch_tokens: usize,
    /// Most requests waiting for admission; beyond it requests are refused (HTTP 429)
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// How FullKV requests take KV memory: `grow` (admitted with their prompt, preempted
    /// and recomputed when memory runs out, as vLLM does) or `reserve` (admitted only when
    /// prompt + max_tokens slots are free, never preempted, as TGI does); compressing
    /// requests always reserve their bounded `max(prompt, budget + buffer)`
    #[arg(long, default_value = "grow", value_parser = parse_admission)]
    pub kv_admission: Admission,
    /// Do not keep finished prompts' KV blocks for later requests that start with the same
    /// tokens (automatic prefix caching is on by default)
    #[arg(long)]
    pub no_prefix_cache: bool,
}

fn parse_admission(s: &str) -> std::result::Result<Admission, String> {
    s.parse()
        .map_err(|e: rkv_engine::EngineError| e.to_string())
}

impl EngineArgs {
    /// The engine configuration for `model` with `kv`'s storage and default compression.
    pub fn engine_config(&self, model: &LoadedModel, kv: &KvArgs) -> Result<EngineConfig> {
        let default = EngineConfig::default();
        let shape = model.transformer.attention_shape();
        let per_block = EngineConfig::bytes_per_block(shape, kv.kv_dtype(), default.block_size);
        let kv_blocks =
            EngineConfig::blocks_in(self.kv_memory, shape, kv.kv_dtype(), default.block_size);
        if kv_blocks == 0 {
            anyhow::bail!(
                "--kv-memory {} holds no KV block ({per_block} bytes each for this model)",
                self.kv_memory
            );
        }
        if self.max_num_seqs == 0 || self.max_batch_tokens == 0 {
            return Err(usage!(
                "--max-num-seqs and --max-batch-tokens must be at least 1"
            ));
        }
        Ok(EngineConfig {
            kv_dtype: kv.kv_dtype(),
            compression: kv.compression()?,
            kv_blocks,
            max_batch_tokens: self.max_batch_tokens,
            max_num_seqs: self.max_num_seqs.min(self.max_batch_tokens),
            admission: self.kv_admission,
            prefix_cache: !self.no_prefix_cache,
            ..default
        })
    }
}

/// A whole number of at least `MIN`, as a value parser: `0` or `-1` (with
/// `allow_negative_numbers`) get a message naming the range instead of clap's "invalid
/// digit" or "unexpected argument".
pub fn whole<const MIN: u64, T: TryFrom<u64>>(s: &str) -> std::result::Result<T, String> {
    let n: i128 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    if n < i128::from(MIN) {
        return Err(format!("must be at least {MIN}, got {n}"));
    }
    u64::try_from(n)
        .ok()
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("{n} is too large"))
}

/// A value that must not be empty, as a value parser (`--stop ""` would stop at once).
pub fn non_empty(s: &str) -> std::result::Result<String, String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    Ok(s.to_string())
}

/// A byte count with an optional unit ([`rkv_engine::kv::parse_size`]).
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    rkv_engine::kv::parse_size(s)
}

/// Peak resident memory of this process, from /proc (Linux), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// An engine configuration with room for one sequence of up to `max_slots` resident slots
/// (plus one spare block).
pub fn engine_config(
    kv_dtype: KvDtype,
    compression: CompressionConfig,
    max_slots: usize,
) -> EngineConfig {
    let default = EngineConfig::default();
    EngineConfig {
        kv_dtype,
        compression,
        kv_blocks: max_slots.div_ceil(default.block_size) + 1,
        ..default
    }
}

#[cfg(test)]
mod tests {
    use super::whole;

    #[test]
    fn whole_numbers_name_their_range() {
        assert_eq!(whole::<1, usize>("64"), Ok(64));
        assert_eq!(whole::<0, u64>("0"), Ok(0));
        assert_eq!(
            whole::<1, usize>("-1"),
            Err("must be at least 1, got -1".into())
        );
        assert_eq!(
            whole::<1, usize>("0"),
            Err("must be at least 1, got 0".into())
        );
        assert!(whole::<1, usize>("x").is_err());
        assert!(whole::<0, u64>("99999999999999999999999").is_err());
    }
}
