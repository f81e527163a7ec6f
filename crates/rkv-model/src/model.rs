//! Opening a model from a path: a GGUF file or a Hugging Face directory.
//!
//! Owns the choice of loader and pairs the transformer with its tokenizer (or reads the
//! tokenizer alone).
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

/// A model's tokenizer read without its weights, and its context length when the model
/// states one (GGUF `{arch}.context_length`, `config.json` `max_position_embeddings`).
pub struct ModelTokenizer {
    pub tokenizer: Tokenizer,
    pub context_length: Option<usize>,
}

/// Reads only the tokenizer of a GGUF file or a Hugging Face directory (one without a
/// `config.json`, such as a tokenizer export, has no context length).
pub fn load_tokenizer(path: &Path) -> Result<ModelTokenizer> {
    if !path.exists() {
        return Err(ModelError::NotFound(path.to_path_buf()));
    }
    if path.is_dir() {
        let cfg_path = path.join("config.json");
        let context_length = match std::fs::read(&cfg_path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(ModelError::Io {
                    path: cfg_path,
                    source,
                })
            }
            Ok(bytes) => serde_json::from_slice::<serde_json::Value>(&bytes)
                .map_err(|e| ModelError::BadConfig(format!("{}: {e}", cfg_path.display())))?
                .get("max_position_embeddings")
                .and_then(serde_json::Value::as_u64)
                .and_then(|n| usize::try_from(n).ok()),
        };
        let tokenizer = Tokenizer::from_hf_dir(path)?;
        return Ok(ModelTokenizer {
            tokenizer,
            context_length,
        });
    }
    let src = GgufSource::open(path, WeightMode::Native)?;
    Ok(ModelTokenizer {
        tokenizer: Tokenizer::from_gguf(src.content())?,
        context_length: src.context_length(),
    })
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
