//! What a request may ask of an engine: the checks every request passes before it is
//! queued, shared by [`crate::Engine::add_request`] and the engine handle (which refuses
//! bad input on the caller's thread, before anything reaches the engine).
//!
//! Owns the validation of requests and how many blocks a sequence can ever need.
//! Must not know: HTTP, CLI.

use rkv_core::config::CompressionConfig;

use crate::compression::SeqCompression;
use crate::error::{EngineError, Result};
use crate::request::{fits_context, GenerationRequest};

/// The fixed limits of one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    pub vocab_size: usize,
    pub max_context: usize,
    /// Blocks in the pool and slots per block.
    pub n_blocks: usize,
    pub block_size: usize,
    /// Most sequences running at once (so the most samples one request may ask for).
    pub max_num_seqs: usize,
}

impl RequestLimits {
    /// Blocks one sample of `req` can ever hold: FullKV its whole length; a compressing
    /// policy the prompt or `B + b`, whichever is larger (never more than the whole length).
    pub fn blocks_needed(&self, req: &GenerationRequest, comp: &CompressionConfig) -> usize {
        let full = req.prompt.len().saturating_add(req.max_tokens);
        let slots = match comp.max_resident_slots() {
            Some(m) => full.min(m.max(req.prompt.len())),
            None => full,
        };
        slots.div_ceil(self.block_size.max(1))
    }

    /// Checks a request of `n` samples with compression `comp`; the error says what is
    /// wrong. Nothing is changed either way.
    pub fn check(&self, req: &GenerationRequest, comp: &CompressionConfig, n: usize) -> Result<()> {
        if req.prompt.is_empty() {
            return Err(EngineError::BadRequest(
                "the prompt has no tokens (empty, or nothing the tokenizer keeps)".into(),
            ));
        }
        if req.max_tokens == 0 {
            return Err(EngineError::BadRequest(
                "max_tokens must be at least 1".into(),
            ));
        }
        if n == 0 || n > self.max_num_seqs {
            return Err(EngineError::BadRequest(format!(
                "n must be between 1 and {} (the most sequences the engine runs at once), got {n}",
                self.max_num_seqs
            )));
        }
        if let Some(&bad) = req.prompt.iter().find(|&&t| t as usize >= self.vocab_size) {
            return Err(EngineError::BadRequest(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.vocab_size
            )));
        }
        if !fits_context(req.prompt.len(), req.max_tokens, self.max_context) {
            return Err(EngineError::TooLong {
                prompt: req.prompt.len(),
                max_new: req.max_tokens,
                context: self.max_context,
            });
        }
        req.sampling.validate()?;
        SeqCompression::validate(comp)?;
        let one = self.blocks_needed(req, comp);
        // A compressing request reserves for all its samples at once; FullKV samples grow
        // one by one, and each must fit alone.
        let need = if comp.max_resident_slots().is_some() {
            one.saturating_mul(n)
        } else {
            one
        };
        if need > self.n_blocks {
            return Err(EngineError::BadRequest(format!(
                "the request needs up to {need} KV blocks but the engine has {} in all",
                self.n_blocks
            )));
        }
        Ok(())
    }
}
