//! `rkv bench model`: writes a random-weight GGUF with a published model's shapes in
//! llama.cpp's Q4_K_M layout (see `rkv_model::weights::bench_model`), so anyone can time
//! the engine on those shapes without a download.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use rkv_model::weights::bench_model::{write_q4_k_m, BenchShape, BENCH_SHAPES};

use crate::out::outln;

#[derive(Args, Debug)]
pub struct BenchModelArgs {
    /// The published shape: r1-distill-qwen-1.5b (Qwen2, 28 layers, hidden 1536, 12/2 heads
    /// of 128, FFN 8960, vocabulary 151936) or r1-distill-llama-8b
    #[arg(long, default_value = "r1-distill-qwen-1.5b")]
    pub shape: String,
    /// Where to write the GGUF file
    #[arg(long)]
    pub out: PathBuf,
    /// GGUF whose tokenizer and chat template are copied; omitted = the default model
    #[arg(long)]
    pub donor: Option<PathBuf>,
    /// Seed of the random weights
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn run(a: BenchModelArgs) -> Result<()> {
    let shape = BenchShape::by_name(&a.shape).map_err(|e| {
        crate::exit::usage!("{e}; shapes: {}", BENCH_SHAPES.map(|s| s.name).join(", "))
    })?;
    let donor = match a.donor {
        Some(p) => p,
        None => crate::fetch::ensure_default_model()?,
    };
    let t0 = std::time::Instant::now();
    write_q4_k_m(&shape, &donor, &a.out, a.seed)
        .with_context(|| format!("cannot write {}", a.out.display()))?;
    let bytes = std::fs::metadata(&a.out).map(|m| m.len()).unwrap_or(0);
    outln!(
        "wrote {} ({} Q4_K_M, random weights, {:.2} GB) in {:.1}s",
        a.out.display(),
        shape.name,
        bytes as f64 / 1e9,
        t0.elapsed().as_secs_f64()
    )?;
    Ok(())
}
