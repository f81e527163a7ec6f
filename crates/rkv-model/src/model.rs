//! Opening a model from a path: a GGUF file or a Hugging Face directory.
//!
//! Owns the choice of loader and pairs the transformer with its tokenizer.
//! Must not know: caches, the CLI's defaults (the caller gives the path).

use std::path::Path;

use crate::error::{ModelError, Result};
use crate::tokenizer::Tokenizer;
use crate::transformer::Transformer;
use crate::weights::gguf::GgufSource;
use crate::weights::hf::{parse_config, HfSource};
use crate::weights::WeightMode;

/// A model ready to run: weights and tokenizer.
pub struct LoadedModel {
    pub transformer: Transformer,
    pub tokenizer: Tokenizer,
}

/// Loads a GGUF file or a Hugging Face directory (`config.json`, `*.safetensors`,
/// `tokenizer.json`).
pub fn load(path: &Path, mode: WeightMode) -> Result<LoadedModel> {
    if !path.exists() {
        return Err(ModelError::NotFound(path.to_path_buf()));
    }
    if path.is_dir() {
        let cfg_path = path.join("config.json");
        let text = std::fs::read_to_string(&cfg_path).map_err(|source| ModelError::Io {
            path: cfg_path.clone(),
            source,
        })?;
        let cfg = parse_config(&text)?;
        let tokenizer = Tokenizer::from_hf_dir(path)?;
        let mut src = HfSource::open(path, mode)?;
        let transformer = Transformer::load(cfg, &mut src)?;
        return Ok(LoadedModel {
            transformer,
            tokenizer,
        });
    }
    from_gguf(GgufSource::open(path, mode)?)
}

/// Loads a GGUF model held whole in memory (`label` names it in errors): the path
/// [`load`] takes for a GGUF file, without the file.
pub fn load_gguf_bytes(label: &Path, bytes: Vec<u8>, mode: WeightMode) -> Result<LoadedModel> {
    from_gguf(GgufSource::from_bytes(label, bytes, mode)?)
}

fn from_gguf(mut src: GgufSource) -> Result<LoadedModel> {
    let cfg = src.config()?;
    let tokenizer = Tokenizer::from_gguf(src.content())?;
    let transformer = Transformer::load(cfg, &mut src)?;
    Ok(LoadedModel {
        transformer,
        tokenizer,
    })
}
