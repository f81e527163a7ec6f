//! What a caller asks of the engine and what it gets back.
//!
//! Owns the request, the per-token event, finish reasons and per-sequence statistics.
//! Must not know: HTTP, CLI flags.

use crate::grammar::Grammar;
use crate::logprobs::{LogprobsRequest, TokenLogprob};
use crate::sampling::SamplingParams;

pub type SeqId = u64;

/// Whether a prompt of `prompt` tokens plus `max_new` generated ones fits a context of
/// `context` tokens (a sum that overflows does not).
pub fn fits_context(prompt: usize, max_new: usize, context: usize) -> bool {
    prompt.checked_add(max_new).is_some_and(|n| n <= context)
}

#[derive(Debug, Clone)]
pub struct GenerationRequest {
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    /// Most tokens to generate; at least 1.
    pub max_tokens: usize,
    /// Keep generating through end-of-sequence tokens (exactly `max_tokens` tokens).
    pub ignore_eos: bool,
    /// Stop when the generated text contains one of these; the text before it is kept.
    pub stop: Vec<String>,
    /// Log-probabilities to report with the tokens (none by default).
    pub logprobs: LogprobsRequest,
    /// What the output must match (constrained decoding), compiled by
    /// [`crate::Grammars::compile`]; `None`: anything.
    pub grammar: Option<Grammar>,
}

#[cfg(test)]
impl GenerationRequest {
    /// For unit tests: a prompt of `prompt` tokens (all id 5), default sampling, exactly
    /// `max_tokens` generated.
    pub(crate) fn of_len(prompt: usize, max_tokens: usize) -> Self {
        Self {
            prompt: vec![5; prompt],
            sampling: SamplingParams::default(),
            max_tokens,
            ignore_eos: true,
            stop: Vec::new(),
            logprobs: LogprobsRequest::default(),
            grammar: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token, a stop string, or the request's grammar complete.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// Stopped by the caller before either ([`crate::Engine::generate_until`]).
    Cancelled,
}

impl FinishReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// Counters of one sequence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeqStats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
    pub compressions: usize,
    /// Wall time spent in this sequence's compressions (scoring, selection, compaction);
    /// also counted in the prefill/decode time of the steps they ran in.
    pub compress_seconds: f64,
    /// The part of `compress_seconds` spent compacting (moving the kept slots, freeing
    /// blocks); the rest is scoring and selection.
    pub compact_seconds: f64,
    /// Tokens evicted over all compressions (per layer and head; all heads evict alike).
    pub evicted_tokens: usize,
    /// Largest resident slot count of any layer/head.
    pub kv_slots_peak: usize,
    /// Largest KV memory held, in bytes of whole blocks.
    pub kv_bytes_peak: usize,
    /// Prompt tokens whose keys and values came from the prefix cache when the sequence
    /// was first admitted, instead of being computed.
    pub cached_tokens: usize,
    /// Wall time spent on its grammar (masks and consumed tokens); also counted in the
    /// prefill/decode time of the steps it ran in. 0 without a grammar.
    pub grammar_seconds: f64,
}

impl SeqStats {
    pub fn prefill_tokens_per_s(&self) -> f64 {
        rate(self.prompt_tokens, self.prefill_seconds)
    }

    /// Mean wall time of one compression event (all layers and heads), 0 without any.
    pub fn seconds_per_compression(&self) -> f64 {
        self.per_compression(self.compress_seconds)
    }

    /// Mean wall time of one event's compaction, 0 without any compression.
    pub fn compact_seconds_per_compression(&self) -> f64 {
        self.per_compression(self.compact_seconds)
    }

    /// `seconds` spread over the compressions, 0 without any.
    fn per_compression(&self, seconds: f64) -> f64 {
        if self.compressions == 0 {
            0.0
        } else {
            seconds / self.compressions as f64
        }
    }

    /// Decode speed: tokens after the first (which the prefill produces) per second.
    pub fn decode_tokens_per_s(&self) -> f64 {
        rate(self.generated_tokens.saturating_sub(1), self.decode_seconds)
    }
}

fn rate(n: usize, s: f64) -> f64 {
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

/// What one engine step produced for one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    pub seq: SeqId,
    pub token: u32,
    /// Text that became printable with this token (may be empty).
    pub text: String,
    pub finished: Option<FinishReason>,
    /// The token's log-probability, when the request asked for them.
    pub logprob: Option<TokenLogprob>,
}

/// A finished generation.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationOutput {
    pub token_ids: Vec<u32>,
    pub text: String,
    pub finish_reason: FinishReason,
    pub stats: SeqStats,
    /// One per generated token, when the request asked for them.
    pub logprobs: Option<Vec<TokenLogprob>>,
    /// One per prompt token after the first, when the request asked for them.
    pub prompt_logprobs: Option<Vec<TokenLogprob>>,
}
