//! The engine: admits requests and advances every running sequence one step at a time.
//!
//! Scheduling model, in one paragraph: there is no prefill or decode phase. Each running
//! sequence has tokens it still has to feed (the rest of its prompt, or the token it just
//! sampled); each step gathers up to `max_batch_tokens` of them across sequences (prompts
//! in chunks) into one forward, then samples for every sequence whose tokens are all in,
//! applies stop rules and the compression schedule.
//! Owns: sequences, the KV store, the step loop. Must not know: HTTP, CLI.

use std::time::Instant;

use rkv_core::config::CompressionConfig;
use rkv_model::{LoadedModel, Tokenizer, Transformer};

use crate::compression::SeqCompression;
use crate::error::{EngineError, Result};
use crate::kv_store::{KvDtype, KvLayout, KvStore};
use crate::paged_attention::{PagedAttention, Segment};
use crate::request::{
    fits_context, FinishReason, GenerationOutput, GenerationRequest, SeqId, SeqStats, TokenEvent,
};
use crate::sampling::Sampler;
use crate::sequence::Sequence;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub kv_dtype: KvDtype,
    /// Slots per block.
    pub block_size: usize,
    /// Blocks in the pool: the engine's whole KV memory.
    pub kv_blocks: usize,
    /// Most tokens one forward carries (prompt chunks plus decode tokens).
    pub max_batch_tokens: usize,
    /// Compression for requests that do not bring their own.
    pub compression: CompressionConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            kv_dtype: KvDtype::F16,
            block_size: 32,
            kv_blocks: 256,
            max_batch_tokens: 256,
            compression: CompressionConfig::full(),
        }
    }
}

/// Tokens of a prompt's next chunk: at most `room`, except that the last chunk keeps the
/// whole observation window (`w` tokens), so the window's queries are observed in the step
/// that may compress; that can exceed `room` by fewer than `w` tokens.
pub fn prompt_chunk(rest: usize, room: usize, w: usize) -> usize {
    let n = rest.min(room.max(1));
    if n < rest && rest - n < w {
        if rest > w {
            rest - w
        } else {
            rest
        }
    } else {
        n
    }
}

pub struct Engine {
    pub(crate) model: Transformer,
    tokenizer: Tokenizer,
    pub(crate) cfg: EngineConfig,
    pub(crate) store: KvStore,
    seqs: Vec<Sequence>,
    finished: Vec<Sequence>,
    next_id: SeqId,
}

impl Engine {
    pub fn new(model: LoadedModel, cfg: EngineConfig) -> Result<Self> {
        if cfg.block_size == 0 || cfg.max_batch_tokens == 0 {
            return Err(EngineError::Config(
                "block size and max batch tokens must be positive".into(),
            ));
        }
        let shape = model.transformer.attention_shape();
        let layout = KvLayout {
            n_layers: shape.n_layers,
            n_kv_heads: shape.n_kv_heads,
            head_dim: shape.head_dim,
            block_size: cfg.block_size,
        };
        Ok(Self {
            store: KvStore::new(layout, cfg.kv_dtype, cfg.kv_blocks)?,
            model: model.transformer,
            tokenizer: model.tokenizer,
            cfg,
            seqs: Vec::new(),
            finished: Vec::new(),
            next_id: 0,
        })
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn model(&self) -> &Transformer {
        &self.model
    }

    pub fn store(&self) -> &KvStore {
        &self.store
    }

    /// The longest prompt plus generation the model accepts.
    pub fn max_context(&self) -> usize {
        self.model.config().max_context
    }

    /// Blocks one sequence can need at most (FullKV: its whole length; compressed: the
    /// prompt or `B + b`, whichever is larger).
    pub fn blocks_needed(&self, req: &GenerationRequest, comp: &CompressionConfig) -> usize {
        let full = req.prompt.len().saturating_add(req.max_tokens);
        let slots = match comp.max_resident_slots() {
            Some(m) => full.min(m.max(req.prompt.len())),
            None => full,
        };
        self.store.pool().blocks_for(slots)
    }

    /// Validates and admits a request. Bad input changes nothing.
    pub fn add_request(
        &mut self,
        req: GenerationRequest,
        compression: Option<CompressionConfig>,
    ) -> Result<SeqId> {
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
        let vocab = self.model.config().vocab_size;
        if let Some(&bad) = req.prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::BadRequest(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        if !fits_context(req.prompt.len(), req.max_tokens, self.max_context()) {
            return Err(EngineError::TooLong {
                prompt: req.prompt.len(),
                max_new: req.max_tokens,
                context: self.max_context(),
            });
        }
        req.sampling.validate()?;
        let comp_cfg = compression.unwrap_or(self.cfg.compression);
        let compression = SeqCompression::new(comp_cfg, self.model.attention_shape())?;
        let need = self.blocks_needed(&req, &comp_cfg);
        if need > self.store.pool().n_blocks() {
            return Err(EngineError::BadRequest(format!(
                "the request needs up to {need} KV blocks but the engine has {}",
                self.store.pool().n_blocks()
            )));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.seqs.push(Sequence {
            id,
            sampler: Sampler::new(req.sampling.clone()),
            stream: self.tokenizer.stream(true),
            stats: SeqStats {
                prompt_tokens: req.prompt.len(),
                ..Default::default()
            },
            req,
            table: Default::default(),
            prefilled: 0,
            generated: Vec::new(),
            pending: None,
            text: String::new(),
            finished: None,
            compression,
        });
        Ok(id)
    }

    pub fn has_work(&self) -> bool {
        !self.seqs.is_empty()
    }

    /// Tokens a sequence feeds this step: a prompt chunk or its pending token. The last
    /// prompt chunk keeps at least `window` tokens so the window's queries are observed
    /// in the step that may compress.
    fn next_feed(&self, s: &Sequence, room: usize) -> Vec<u32> {
        if let Some(t) = s.pending {
            return vec![t];
        }
        let rest = s.req.prompt.len() - s.prefilled;
        let n = prompt_chunk(rest, room, s.compression.config().window);
        s.req.prompt[s.prefilled..s.prefilled + n].to_vec()
    }

    /// One forward over all running sequences. Returns one event per sampled token.
    pub fn step(&mut self) -> Result<Vec<TokenEvent>> {
        let t0 = Instant::now();
        let shape = self.model.attention_shape();
        // (seq index, tokens, whether it decodes rather than prefills)
        let mut feeds: Vec<(usize, Vec<u32>, bool)> = Vec::new();
        let mut budget = self.cfg.max_batch_tokens;
        for (i, s) in self.seqs.iter().enumerate() {
            if budget == 0 {
                break;
            }
            let toks = self.next_feed(s, budget);
            budget = budget.saturating_sub(toks.len());
            feeds.push((i, toks, s.pending.is_some()));
        }
        // Reserve memory for every feed first: all or nothing per sequence.
        let mut segments = Vec::with_capacity(feeds.len());
        let mut tokens = Vec::new();
        let mut positions = Vec::new();
        let mut logit_rows = Vec::new();
        for (i, toks, decode) in &feeds {
            let s = &mut self.seqs[*i];
            let start_pos = s.next_position();
            let final_append = *decode || s.prefilled + toks.len() == s.req.prompt.len();
            let opened = s.compression.open_segment(
                &mut self.store,
                &mut s.table,
                tokens.len(),
                start_pos,
                toks.len(),
                final_append,
            );
            let seg = match opened {
                Ok(seg) => seg,
                Err(e) => {
                    self.abandon(&feeds, segments);
                    return Err(e);
                }
            };
            segments.push(seg);
            positions.extend(start_pos..start_pos + toks.len());
            if final_append {
                logit_rows.push(tokens.len() + toks.len() - 1);
            }
            tokens.extend_from_slice(toks);
            s.stats.kv_slots_peak = s.stats.kv_slots_peak.max(s.table.len());
            s.stats.kv_bytes_peak = s
                .stats
                .kv_bytes_peak
                .max(s.table.blocks().len() * self.store.bytes_per_block());
        }
        let mut attn = PagedAttention::new(&mut self.store, shape, segments);
        let logits = self
            .model
            .forward(&tokens, &positions, &mut attn, &logit_rows);
        let segments = std::mem::take(&mut attn.segments);
        drop(attn);
        let logits = match logits {
            Ok(l) => l,
            Err(e) => {
                self.abandon(&feeds, segments);
                return Err(e.into());
            }
        };
        let vocab = self.model.config().vocab_size;
        let mut events = Vec::new();
        let mut row = 0;
        // Every sequence takes back what its segment lent the forward before anything
        // below can fail: a segment dropped unclosed would take its sequence's policy
        // state (R-KV's head states, H2O's accumulators) with it.
        for ((i, toks, decode), seg) in feeds.iter().zip(segments) {
            let s = &mut self.seqs[*i];
            s.compression.close_segment(seg);
            if *decode {
                s.pending = None;
            } else {
                s.prefilled += toks.len();
            }
        }
        for (i, _, _) in &feeds {
            let s = &mut self.seqs[*i];
            // The prompt is one append: the schedule runs after its last chunk only.
            if s.in_prefill() {
                continue;
            }
            let tc = Instant::now();
            let done = s
                .compression
                .maybe_compress(&mut self.store, &mut s.table)?;
            if done.evicted > 0 {
                s.stats.compressions += 1;
                s.stats.evicted_tokens += done.evicted;
                s.stats.compress_seconds += tc.elapsed().as_secs_f64();
                s.stats.compact_seconds += done.compact_seconds;
            }
            let lg = &logits[row * vocab..(row + 1) * vocab];
            row += 1;
            let tok = s.sampler.sample(lg);
            events.push(Self::accept_token(&self.tokenizer, s, tok)?);
        }
        // Every sequence in the step waited for the whole step (forward, every
        // compression, sampling): that is its latency for these tokens.
        let elapsed = t0.elapsed().as_secs_f64();
        for (i, _, decode) in &feeds {
            let st = &mut self.seqs[*i].stats;
            if *decode {
                st.decode_seconds += elapsed;
            } else {
                st.prefill_seconds += elapsed;
            }
        }
        // Retire finished sequences, returning their blocks.
        let mut k = 0;
        while k < self.seqs.len() {
            if self.seqs[k].finished.is_some() {
                let mut s = self.seqs.remove(k);
                self.store.release(&mut s.table)?;
                self.finished.push(s);
            } else {
                k += 1;
            }
        }
        Ok(events)
    }

    /// Undoes the segments opened by a step that failed: every sequence gets back its
    /// borrowed buffers and the slots reserved for the step, as if it had not run, except
    /// that an R-KV head that described some of those slots starts its next compression
    /// from scratch (`SeqCompression::abandon_segment`).
    fn abandon(&mut self, feeds: &[(usize, Vec<u32>, bool)], segments: Vec<Segment>) {
        for ((i, _, _), seg) in feeds.iter().zip(segments) {
            let s = &mut self.seqs[*i];
            let len_before = seg.len_before;
            s.compression.abandon_segment(seg);
            // Shrinking back to a length the table had cannot fail.
            let _ = self.store.truncate(&mut s.table, len_before);
        }
    }

    /// Records a sampled token and applies the stop rules.
    fn accept_token(tokenizer: &Tokenizer, s: &mut Sequence, tok: u32) -> Result<TokenEvent> {
        s.generated.push(tok);
        s.stats.generated_tokens += 1;
        let mut finished = None;
        let is_eos = !s.req.ignore_eos && tokenizer.is_eos(tok);
        let mut text = if is_eos {
            String::new()
        } else {
            s.stream.push(tok)?.unwrap_or_default()
        };
        if is_eos {
            finished = Some(FinishReason::Stop);
        }
        if !text.is_empty() && !s.req.stop.is_empty() {
            let before = s.text.len();
            s.text.push_str(&text);
            // Only matches that end inside the new text are new.
            let mut from =
                before.saturating_sub(s.req.stop.iter().map(|x| x.len()).max().unwrap_or(0));
            // A byte count back may land inside a multi-byte character.
            while !s.text.is_char_boundary(from) {
                from -= 1;
            }
            let hit = s
                .req
                .stop
                .iter()
                .filter(|x| !x.is_empty())
                .filter_map(|x| s.text[from..].find(x.as_str()).map(|p| p + from))
                .min();
            if let Some(p) = hit {
                s.text.truncate(p);
                text = s.text[before.min(p)..].to_string();
                finished = Some(FinishReason::Stop);
            }
        } else {
            s.text.push_str(&text);
        }
        if finished.is_none() && s.generated.len() >= s.req.max_tokens {
            finished = Some(FinishReason::Length);
        }
        if finished.is_some() {
            if let Some(rest) = s.stream.finish()? {
                if finished == Some(FinishReason::Length) {
                    s.text.push_str(&rest);
                    text.push_str(&rest);
                }
            }
        } else {
            s.pending = Some(tok);
        }
        s.finished = finished;
        Ok(TokenEvent {
            seq: s.id,
            token: tok,
            text,
            finished,
        })
    }

    /// Removes a finished sequence and returns its output.
    pub fn take_output(&mut self, id: SeqId) -> Option<GenerationOutput> {
        let k = self.finished.iter().position(|s| s.id == id)?;
        let s = self.finished.remove(k);
        Some(GenerationOutput {
            token_ids: s.generated,
            text: s.text,
            finish_reason: s.finished.unwrap_or(FinishReason::Length),
            stats: s.stats,
        })
    }

    /// Runs one request to completion, calling `on_event` for each token.
    pub fn generate(
        &mut self,
        req: GenerationRequest,
        compression: Option<CompressionConfig>,
        mut on_event: impl FnMut(&TokenEvent),
    ) -> Result<GenerationOutput> {
        let id = self.add_request(req, compression)?;
        loop {
            match self.step() {
                Ok(events) => events
                    .iter()
                    .filter(|e| e.seq == id)
                    .for_each(&mut on_event),
                Err(e) => {
                    self.abort(id)?;
                    return Err(e);
                }
            }
            if let Some(out) = self.take_output(id) {
                return Ok(out);
            }
        }
    }

    /// Drops a sequence, returning its blocks.
    pub fn abort(&mut self, id: SeqId) -> Result<()> {
        if let Some(k) = self.seqs.iter().position(|s| s.id == id) {
            let mut s = self.seqs.remove(k);
            self.store.release(&mut s.table)?;
        }
        self.finished.retain(|s| s.id != id);
        Ok(())
    }
}
