//! What a request may ask of an engine: the checks every request passes before it is
//! queued, shared by [`crate::Engine::add_request`] and the engine handle (which refuses
//! bad input on the caller's thread, before anything reaches the engine).
//!
//! Owns the validation of requests; how many blocks a request can ever hold is
//! [`crate::kv::BlockBudget`]'s arithmetic.
//! Must not know: HTTP, CLI.

use rkv_core::config::CompressionConfig;

use crate::compression::SeqCompression;
use crate::error::{EngineError, Result};
use crate::kv::{Admission, BlockBudget};
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
    /// FullKV sequences reserve their whole length (`prompt + max_tokens`) on admission
    /// instead of growing ([`Admission::Reserve`]).
    pub admission: Admission,
}

impl RequestLimits {
    /// The block arithmetic of this engine's admission.
    pub fn blocks(&self) -> BlockBudget {
        BlockBudget {
            block_size: self.block_size,
            admission: self.admission,
        }
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
        req.logprobs.validate()?;
        if let Some(g) = &req.grammar {
            if g.n_vocab() != self.vocab_size {
                return Err(EngineError::BadRequest(format!(
                    "the grammar was compiled for {} logits, the model has {}",
                    g.n_vocab(),
                    self.vocab_size
                )));
            }
        }
        SeqCompression::validate(comp)?;
        // A reserving request reserves for all its samples at once; growing FullKV samples
        // grow one by one, and each must fit alone.
        let blocks = self.blocks();
        let need = if blocks.reserves(comp) {
            blocks.request_blocks(req, comp, n)
        } else {
            blocks.blocks_needed(req, comp)
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

#[cfg(test)]
mod tests {
    use super::*;
    use rkv_core::config::PolicyKind;

    fn limits(admission: Admission) -> RequestLimits {
        RequestLimits {
            vocab_size: 100,
            max_context: 1000,
            n_blocks: 10,
            block_size: 10,
            max_num_seqs: 8,
            admission,
        }
    }

    fn req(prompt: usize, max_tokens: usize) -> GenerationRequest {
        GenerationRequest::of_len(prompt, max_tokens)
    }

    #[test]
    fn full_kv_samples_must_each_fit_when_they_grow_and_together_when_they_reserve() {
        let full = CompressionConfig::full();
        // 3 samples of 40 slots (4 blocks each) in a pool of 10 blocks.
        let r = req(10, 30);
        assert_eq!(limits(Admission::Grow).blocks().blocks_needed(&r, &full), 4);
        assert!(limits(Admission::Grow).check(&r, &full, 3).is_ok());
        assert!(!limits(Admission::Grow).blocks().reserves(&full));
        assert!(limits(Admission::Reserve).blocks().reserves(&full));
        let err = limits(Admission::Reserve).check(&r, &full, 3).unwrap_err();
        assert!(err.to_string().contains("12 KV blocks"), "{err}");
        assert!(limits(Admission::Reserve).check(&r, &full, 2).is_ok());
    }

    #[test]
    fn samples_of_a_long_prompt_reserve_it_once() {
        let comp = CompressionConfig {
            policy: PolicyKind::RKv,
            budget: 16,
            buffer: 4,
            window: 4,
            ..CompressionConfig::default()
        };
        let l = limits(Admission::Grow);
        // A 60-slot prompt (6 blocks) is compressed to B = 16 before the fork; each
        // sample then holds at most B + b = 20 slots (2 blocks).
        let r = req(60, 500);
        assert_eq!(l.blocks().blocks_needed(&r, &comp), 6);
        assert_eq!(l.blocks().sample_blocks(&r, &comp), 2);
        assert_eq!(l.blocks().request_blocks(&r, &comp, 2), 6);
        assert_eq!(l.blocks().request_blocks(&r, &comp, 4), 8);
        // In a pool of 10 blocks: 5 samples fit (10), 6 do not (12).
        assert!(l.check(&r, &comp, 5).is_ok());
        let err = l.check(&r, &comp, 6).unwrap_err();
        assert!(err.to_string().contains("12 KV blocks"), "{err}");
        // A short whole length bounds each sample below B + b.
        assert_eq!(l.blocks().sample_blocks(&req(5, 3), &comp), 1);
        // FullKV reserves every sample's whole length.
        let full = CompressionConfig::full();
        let lr = limits(Admission::Reserve);
        assert_eq!(lr.blocks().request_blocks(&req(10, 30), &full, 2), 8);
    }
}
