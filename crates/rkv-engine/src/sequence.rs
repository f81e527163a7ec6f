//! One request's life in the engine: its tokens, its blocks, its sampler and stop rules.
//!
//! Owns per-sequence state; the engine owns the shared model and store.
//! Must not know: HTTP, CLI.

use rkv_core::block_pool::BlockTable;
use rkv_model::tokenizer::TokenStream;

use crate::compression::SeqCompression;
use crate::request::{FinishReason, GenerationRequest, SeqId, SeqStats};
use crate::sampling::Sampler;

pub struct Sequence {
    pub id: SeqId,
    pub req: GenerationRequest,
    pub table: BlockTable,
    /// Prompt tokens already fed through the model.
    pub prefilled: usize,
    pub generated: Vec<u32>,
    /// The last sampled token, not yet fed.
    pub pending: Option<u32>,
    pub sampler: Sampler,
    pub stream: TokenStream,
    pub text: String,
    pub finished: Option<FinishReason>,
    pub compression: SeqCompression,
    pub stats: SeqStats,
}

impl Sequence {
    /// Absolute position of the next token fed.
    pub fn next_position(&self) -> usize {
        self.prefilled
            + self
                .generated
                .len()
                .saturating_sub(usize::from(self.pending.is_some()))
    }

    pub fn in_prefill(&self) -> bool {
        self.prefilled < self.req.prompt.len()
    }
}
