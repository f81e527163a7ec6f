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
    #[error("not a valid safetensors file {path}: {reason}")]
    BadSafetensors { path: PathBuf, reason: String },
    #[error("bad model config: {0}")]
    BadConfig(String),
    #[error("unsupported architecture `{0}` (supported: llama, qwen2, qwen3)")]
    UnsupportedArch(String),
    #[error("unsupported weight type {dtype} for tensor `{tensor}`")]
    UnsupportedDtype { tensor: String, dtype: String },
    #[error("unsupported quantisation: ggml type {0} (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)")]
    UnsupportedQuant(String),
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
    Candle(String),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
}

pub type Result<T> = std::result::Result<T, ModelError>;

/// The first line of a candle error: candle appends a backtrace to its message when
/// `RUST_BACKTRACE` is set, which must not reach a one-line error.
pub fn candle_message(e: &candle_core::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

impl From<candle_core::Error> for ModelError {
    fn from(e: candle_core::Error) -> Self {
        ModelError::Candle(candle_message(&e))
    }
}
