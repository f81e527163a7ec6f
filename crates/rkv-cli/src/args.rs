//! Command-line argument groups shared by subcommands, and their translation into the
//! typed configurations of the libraries (validated once, here).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_engine::{EngineConfig, KvDtype, SamplingParams};
use rkv_model::{LoadedModel, WeightMode};

use crate::fetch;

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF file or Hugging Face directory; omitted = the default model (fetched if absent)
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Weight precision: `native` runs quantised matmuls, `f32` dequantises (reference mode)
    #[arg(long, default_value = "native", value_parser = ["native", "f32"])]
    pub dtype: String,
    /// Worker threads (default: all cores)
    #[arg(long)]
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
            anyhow::bail!("--threads must be between 1 and {MAX_THREADS}, got {n}");
        }
        builder = builder.num_threads(n);
    }
    builder.build().context("cannot set up the thread pool")
}

impl ModelArgs {
    pub fn load(&self) -> Result<LoadedModel> {
        let path = match &self.model {
            Some(p) => p.clone(),
            None => fetch::ensure_default_model()?,
        };
        let mode = match self.dtype.as_str() {
            "f32" => WeightMode::F32,
            _ => WeightMode::Native,
        };
        rkv_model::load(&path, mode)
            .with_context(|| format!("cannot load model {}", path.display()))
    }
}

#[derive(Args, Debug, Clone)]
pub struct KvArgs {
    /// KV storage precision
    #[arg(long, default_value = "f16", value_parser = ["f16", "f32"])]
    pub kv_dtype: String,
    /// KV policy: full|rkv|snapkv|h2o|streamingllm
    #[arg(long, default_value = "full")]
    pub kv_policy: String,
    /// Slots kept per layer and KV head after a compression (window included)
    #[arg(long, default_value_t = 1024)]
    pub kv_budget: usize,
    #[command(flatten)]
    pub tuning: PolicyTuning,
}

/// Compression parameters shared by every command that compresses.
#[derive(Args, Debug, Clone)]
pub struct PolicyTuning {
    /// Slots that accumulate above the budget before compressing
    #[arg(long, default_value_t = 128)]
    pub kv_buffer: usize,
    /// Observation window (most recent tokens whose queries score the cache)
    #[arg(long, default_value_t = 8)]
    pub kv_window: usize,
    /// R-KV mixing weight: score = lambda * importance - (1 - lambda) * redundancy
    #[arg(long, default_value_t = 0.1)]
    pub rkv_lambda: f32,
    /// R-KV cosine threshold for the latest similar slot
    #[arg(long, default_value_t = 0.5)]
    pub rkv_threshold: f32,
}

impl PolicyTuning {
    /// The configuration of `policy` at `budget` with these parameters, validated.
    pub fn config(&self, policy: PolicyKind, budget: usize) -> Result<CompressionConfig> {
        let cfg = CompressionConfig {
            policy,
            budget,
            buffer: self.kv_buffer,
            window: self.kv_window,
            lambda: self.rkv_lambda,
            threshold: self.rkv_threshold,
            ..CompressionConfig::default()
        };
        cfg.validate_if_compressing()
            .map_err(|e| anyhow::anyhow!("{policy} at budget {budget}: {e}"))?;
        Ok(cfg)
    }
}

impl KvArgs {
    pub fn kv_dtype(&self) -> KvDtype {
        // clap accepts only f16 and f32.
        KvDtype::parse(&self.kv_dtype).unwrap_or(KvDtype::F16)
    }

    pub fn compression(&self) -> Result<CompressionConfig> {
        self.compression_for("--kv-policy", &self.kv_policy)
    }

    /// The configuration of policy `name` (given by the flag `flag`) at this budget and
    /// tuning.
    pub fn compression_for(&self, flag: &str, name: &str) -> Result<CompressionConfig> {
        let policy: PolicyKind = name.parse().map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
        self.tuning.config(policy, self.kv_budget)
    }
}

#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// 0 = greedy
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// 0 = off
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0)]
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
