//! `rkv export-tokenizer --model M --out DIR`: the model's tokenizer written as a Hugging
//! Face tokenizer directory (`rkv_model::Tokenizer::export_hf`), for tools that tokenize
//! on their side, such as lm-evaluation-harness with `tokenizer_backend=huggingface`.
//!
//! Owns: the command's flags. Must not know: the files written or their contents.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use rkv_model::tokenizer::TokenizerError;

use crate::args::model_path;
use crate::exit::usage;
use crate::out::outln;

#[derive(Args, Debug)]
pub struct ExportTokenizerArgs {
    /// GGUF file, Hugging Face directory, or a known model's name (`smollm2-135m`,
    /// `qwen2.5-coder-1.5b`; fetched if absent); omitted = the default model
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The directory to write: created when missing; an existing one must be empty or an
    /// earlier export, whose files are overwritten
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

pub fn run(a: ExportTokenizerArgs) -> Result<()> {
    let path = model_path(a.model.as_deref())?;
    let model = rkv_model::load_tokenizer(&path)
        .with_context(|| format!("cannot read the tokenizer of {}", path.display()))?;
    // A directory the export may not write to is a bad `--out` (exit status 2).
    let written = match model.tokenizer.export_hf(&a.out, model.context_length) {
        Err(e @ TokenizerError::Export { .. }) => return Err(usage!("{e}")),
        other => other?,
    };
    for p in written {
        outln!("{}", p.display())?;
    }
    Ok(())
}
