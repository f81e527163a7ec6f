//! The one error type of rkv-model: what can go wrong loading weights or running a model.
//!
//! Must not know: how the CLI or the server present errors.

use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("model file not found: {0}")]
    NotFound(PathBuf),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not a valid GGUF file {path}: {reason}")]
    BadGguf { path: PathBuf, reason: String },
    #[error("bad model config: {0}")]
    BadConfig(String),
    #[error("unsupported architecture `{0}` (supported: llama, qwen2, qwen3)")]
    UnsupportedArch(String),
    #[error("unsupported weight type {dtype} for tensor `{tensor}`")]
    UnsupportedDtype { tensor: String, dtype: String },
    #[error("missing tensor `{0}`")]
    MissingTensor(String),
    #[error("tensor `{name}` has shape {got:?}, expected {want:?}")]
    BadShape {
        name: String,
        got: Vec<usize>,
        want: Vec<usize>,
    },
    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    BadToken { id: u32, vocab: usize },
    #[error("forward input: {0}")]
    BadInput(String),
    #[error("attention backend: {0}")]
    Attention(String),
    #[error("tensor library: {0}")]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
}

pub type Result<T> = std::result::Result<T, ModelError>;
