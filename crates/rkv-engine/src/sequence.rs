//! One request's life in the engine: its tokens, its blocks, its sampler and stop rules.
//!
//! A sequence's tokens are its prompt followed by what it generated; token `i` sits at
//! absolute position `i`. `fed` counts the tokens whose keys and values are in its cache
//! (since it last started: a preempted sequence starts again from 0 and recomputes them).
//! Owns per-sequence state; the engine owns the shared model and store.
//! Must not know: HTTP, CLI.

use crate::kv::BlockTable;
use rkv_model::tokenizer::TokenStream;

use crate::compression::SeqCompression;
use crate::request::{FinishReason, GenerationRequest, SeqId, SeqStats};
use crate::sampling::{Sampler, SamplingParams};

pub struct Sequence {
    pub id: SeqId,
    pub req: GenerationRequest,
    pub table: BlockTable,
    /// Tokens (prompt, then generated) fed through the model since the sequence (re)started.
    pub fed: usize,
    pub generated: Vec<u32>,
    pub sampler: Sampler,
    pub stream: TokenStream,
    pub text: String,
    pub finished: Option<FinishReason>,
    pub compression: SeqCompression,
    pub stats: SeqStats,
    /// Samples of the same request still to be forked from this one when it samples its
    /// first token: their ids and sampling parameters.
    pub forks: Vec<(SeqId, SamplingParams)>,
    /// Whether the sequence was ever admitted (its prompt tokens counted).
    pub started: bool,
    /// The most tokens it ever had fed (a recomputation feeds them again below this).
    pub fed_most: usize,
}

impl Sequence {
    /// Prompt plus generated tokens.
    pub fn total_len(&self) -> usize {
        self.req.prompt.len() + self.generated.len()
    }

    /// Token `i` of the prompt followed by the generated tokens.
    pub fn token(&self, i: usize) -> u32 {
        match i.checked_sub(self.req.prompt.len()) {
            None => self.req.prompt[i],
            Some(g) => self.generated[g],
        }
    }

    /// Whether the sequence is still feeding its prompt.
    pub fn in_prefill(&self) -> bool {
        self.fed < self.req.prompt.len()
    }

    /// Whether its next feed is the one token it just sampled.
    pub fn decoding(&self) -> bool {
        !self.generated.is_empty() && self.fed + 1 == self.total_len()
    }

    /// Samples this sequence stands for until it forks (itself and its forks).
    pub fn width(&self) -> usize {
        1 + self.forks.len()
    }
}
