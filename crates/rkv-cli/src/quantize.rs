//! `rkv quantize IN OUT --type T`: a GGUF model requantised into one of llama.cpp's file
//! types with llama.cpp's per-tensor type choice (see
//! `rkv_model::weights::requantize`), as `llama-quantize --allow-requantize` does.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use rkv_model::weights::quant_layout::{FileType, FILE_TYPES};
use rkv_model::weights::requantize::requantize;

use crate::out::outln;

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The GGUF model to read
    pub input: PathBuf,
    /// Where to write the requantised GGUF model
    pub output: PathBuf,
    /// The file type: q4_k_m, q5_k_m, q6_k, q8_0, f16 or bf16
    #[arg(long = "type", value_name = "TYPE")]
    pub file_type: String,
}

pub fn run(a: QuantizeArgs) -> Result<()> {
    let ft = FileType::by_name(&a.file_type).map_err(|e| {
        let names: Vec<&str> = FILE_TYPES.iter().map(|(_, n)| *n).collect();
        crate::exit::usage!("{e}; --type takes one of {}", names.join(", "))
    })?;
    if a.input == a.output {
        return Err(crate::exit::usage!(
            "the output must be another file than the input"
        ));
    }
    let t0 = std::time::Instant::now();
    let s = requantize(&a.input, &a.output, ft)
        .with_context(|| format!("cannot requantise {}", a.input.display()))?;
    let bytes = std::fs::metadata(&a.output).map(|m| m.len()).unwrap_or(0);
    let types: Vec<String> = s.by_type.iter().map(|(t, n)| format!("{n} {t}")).collect();
    outln!(
        "wrote {} ({}, {:.1} MB) in {:.1}s: {} tensors converted, {} kept; {}",
        a.output.display(),
        ft.name(),
        bytes as f64 / 1e6,
        t0.elapsed().as_secs_f64(),
        s.converted,
        s.kept,
        types.join(", ")
    )?;
    Ok(())
}
