//! The engine's error type: bad requests, memory exhaustion and model failures.
//!
//! Must not know: how the CLI or server present them.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum EngineError {
    #[error("invalid request: {0}")]
    BadRequest(String),
    #[error("prompt of {prompt} tokens plus {max_new} new tokens exceeds the context of {context} tokens")]
    TooLong {
        prompt: usize,
        max_new: usize,
        context: usize,
    },
    #[error("KV memory exhausted: {0}")]
    OutOfMemory(#[from] crate::kv::PoolError),
    #[error("cannot allocate a KV pool of {blocks} blocks of {} each", block_bytes.map_or_else(|| "too many bytes".to_string(), |b| format!("{b} bytes")))]
    KvAlloc {
        blocks: usize,
        block_bytes: Option<usize>,
    },
    #[error("cannot allocate the observation window's logits ({window} x {candidates} per layer and KV head)")]
    WindowAlloc { window: usize, candidates: usize },
    #[error("the sequence failed: {0}")]
    Failed(String),
    #[error("unknown sequence {0}")]
    UnknownSequence(u64),
    #[error("invalid compression config: {0}")]
    Config(String),
    #[error(transparent)]
    Model(#[from] rkv_model::ModelError),
    #[error(transparent)]
    Tokenizer(#[from] rkv_model::tokenizer::TokenizerError),
    /// A request's grammar (`GrammarError::Invalid` and `Unavailable` are the caller's
    /// to fix; `Failed` is a matcher that broke while running).
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
}

pub type Result<T> = std::result::Result<T, EngineError>;
