//! One request's life in the engine: its tokens, its blocks, its sampler and stop rules.
//!
//! A sequence's tokens are its prompt followed by what it generated; token `i` sits at
//! absolute position `i`. `fed` counts the tokens whose keys and values are in its cache
//! (since it last started: a preempted sequence starts again from 0 and recomputes them).
//! Owns per-sequence state; the engine owns the shared model and store.
//! Must not know: HTTP, CLI.

use rkv_core::PromptMode;
use rkv_model::tokenizer::TokenStream;

use crate::kv::BlockTable;

use crate::compression::SeqCompression;
use crate::grammar::{GrammarError, GrammarState};
use crate::logprobs::TokenLogprob;
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
    /// Leading blocks of its table entered in the prefix cache since it (re)started;
    /// `None` once its rows no longer sit at their tokens' positions (it compacted, or it
    /// is a sample sharing its parent's prompt).
    pub prefix_blocks: Option<usize>,
    /// Log-probabilities of its generated tokens, when its request asks for them.
    pub logprobs: Vec<TokenLogprob>,
    /// Log-probabilities of its prompt tokens after the first, when its request asks for
    /// them: entry `i` is token `i + 1`'s (a recomputed prompt does not add them again).
    pub prompt_logprobs: Vec<TokenLogprob>,
    /// Its place in its request's grammar (kept through a preemption: the tokens it
    /// consumed are kept too, and are only fed again).
    pub grammar: Option<GrammarState>,
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

    /// The prompt positions of a feed of `n` tokens from `fed` whose logits give prompt
    /// log-probabilities not recorded yet (position `p` gives token `p + 1`'s).
    pub fn prompt_logprob_rows(&self, n: usize) -> std::ops::Range<usize> {
        if self.req.logprobs.prompt.is_none() {
            return 0..0;
        }
        let last = self.req.prompt.len().saturating_sub(1);
        let start = self.fed.max(self.prompt_logprobs.len());
        let end = (self.fed + n).min(last);
        start.min(end)..end
    }

    /// Draws its next token from `logits` ([vocab]), through its grammar's mask when its
    /// request has one (the mask's `-inf` keep every sampling path, greedy included,
    /// inside the grammar).
    pub fn draw(&mut self, logits: &[f32]) -> Result<u32, GrammarError> {
        match &mut self.grammar {
            None => Ok(self.sampler.sample(logits)),
            Some(g) => Ok(self.sampler.sample(g.mask(logits)?)),
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

    /// The most whole blocks of its prompt it may take from the prefix cache, and so not
    /// compute: its policy's state must not depend on the queries it skips. FullKV
    /// computes at least the prompt's last token (its logits); a compressing policy that
    /// keeps the prompt whole computes at least the window its compression observes (its
    /// key redundancy is caught up from the cached keys); H2O's attention mass sums every
    /// query, and a compressed prompt's chunks are scored as they are fed, so those take
    /// nothing.
    pub fn prefix_limit(&self, block_size: usize) -> usize {
        let comp = self.compression.config();
        // Prompt log-probabilities need every prompt token's logits.
        if self.req.logprobs.prompt.is_some() {
            return 0;
        }
        let computed = if !comp.policy.compresses() {
            1
        } else if comp.policy.needs_h2o_scores() || comp.prompt == PromptMode::Compress {
            return 0;
        } else {
            comp.window.max(1)
        };
        self.req.prompt.len().saturating_sub(computed) / block_size.max(1)
    }
}
