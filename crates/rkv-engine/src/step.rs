//! One engine step: the scheduler's plan, one forward over every fed sequence, then per
//! sequence the compression schedule, sampling, the samples it forks and its stop rules.
//!
//! A step never fails as a whole: memory was settled by the scheduler, and an error in
//! one sequence (its compression, its detokenisation) finishes that sequence with the
//! error while the others go on. A failed forward fails the sequences it carried.
//! Must not know: HTTP, CLI.

use std::ops::Range;
use std::time::Instant;

use crate::admission::EngineMemory;
use crate::engine::Engine;
use crate::error::{EngineError, Result};
use crate::logprobs::{token_logprob, TokenLogprob};
use crate::paged_attention::{PagedAttention, Segment};
use crate::request::{FinishReason, SeqId, TokenEvent};
use crate::sampling::Sampler;
use crate::sequence::Sequence;

/// One sequence's part of a forward.
struct Feed {
    id: SeqId,
    n: usize,
    /// Its logits row, when the feed ends at its last token (it samples).
    row: Option<usize>,
    decode: bool,
    /// Whether the feed ends an append (a whole prompt, a chunk of a compressed one, or
    /// generated tokens): the compression schedule runs after it.
    final_append: bool,
    /// Prompt positions whose logits give prompt log-probabilities, and the logits row
    /// of the first of them (the others follow it).
    prompt_rows: (Range<usize>, usize),
}

impl Engine {
    /// One forward over the running sequences. Returns one event per sampled token; the
    /// sequences that failed are in [`Engine::take_failures`].
    pub fn step(&mut self) -> Vec<TokenEvent> {
        let t0 = Instant::now();
        let plan = {
            let limits = self.limits();
            let mut mem = EngineMemory {
                kv: &mut self.kv,
                seqs: &mut self.seqs,
                limits,
                prompt_tokens: 0,
                prefix_queries: 0,
                prefix_hits: 0,
            };
            let plan = self.sched.schedule(&mut mem);
            self.totals.prompt_tokens_total += mem.prompt_tokens;
            self.totals.prefix_cache_queries_total += mem.prefix_queries;
            self.totals.prefix_cache_hits_total += mem.prefix_hits;
            plan
        };
        let (feeds, segments, tokens, positions, logit_rows) = self.open_feeds(&plan.feeds);
        if feeds.is_empty() {
            return Vec::new();
        }
        let shape = self.model.attention_shape();
        let mut attn = PagedAttention::new(self.kv.store_mut(), shape, segments);
        let logits = self
            .model
            .forward(&tokens, &positions, &mut attn, &logit_rows);
        let segments = std::mem::take(&mut attn.segments);
        drop(attn);
        let logits = match logits {
            Ok(l) => l,
            Err(e) => {
                let msg = e.to_string();
                for (f, seg) in feeds.iter().zip(segments) {
                    if let Some(s) = self.seqs.get_mut(&f.id) {
                        let len_before = seg.len_before;
                        s.compression.abandon_segment(seg);
                        let _ = self.kv.store_mut().truncate(&mut s.table, len_before);
                    }
                    self.fail(
                        f.id,
                        EngineError::Failed(format!("the forward failed: {msg}")),
                    );
                }
                return Vec::new();
            }
        };
        // Every sequence takes back what its segment lent the forward before anything
        // below can fail: a segment dropped unclosed would take its sequence's policy
        // state (R-KV's head states, H2O's accumulators) with it.
        for (f, seg) in feeds.iter().zip(segments) {
            if let Some(s) = self.seqs.get_mut(&f.id) {
                s.compression.close_segment(seg);
                s.fed += f.n;
                // Its prompt's full blocks, still uncompressed, go into the prefix cache.
                if let Some(done) = s.prefix_blocks {
                    let full = s.fed.min(s.req.prompt.len()) / self.cfg.block_size.max(1);
                    if full > done {
                        let bs = self.cfg.block_size.max(1);
                        self.kv
                            .cache_prompt(&s.table, &s.req.prompt[..full * bs], done);
                        s.prefix_blocks = Some(full);
                    }
                }
            }
        }
        let vocab = self.model.config().vocab_size;
        let mut events = Vec::new();
        for f in &feeds {
            if let Err(e) = self.after_forward(f, &logits, vocab, &mut events) {
                self.fail(f.id, e);
            }
        }
        // Every sequence in the step waited for the whole step (forward, every
        // compression, sampling): that is its latency for these tokens.
        let elapsed = t0.elapsed().as_secs_f64();
        for f in &feeds {
            if let Some(s) = self.seqs.get_mut(&f.id) {
                if f.decode {
                    s.stats.decode_seconds += elapsed;
                } else {
                    s.stats.prefill_seconds += elapsed;
                }
            }
        }
        self.retire_finished();
        events
    }

    /// Reserves the slots of every planned feed and opens its segment; a sequence whose
    /// segment cannot be opened fails alone. Returns the feeds that go into the forward
    /// with their segments, tokens, positions and logits rows.
    #[allow(clippy::type_complexity)]
    fn open_feeds(
        &mut self,
        planned: &[(SeqId, usize)],
    ) -> (Vec<Feed>, Vec<Segment>, Vec<u32>, Vec<usize>, Vec<usize>) {
        let mut feeds = Vec::with_capacity(planned.len());
        let mut segments = Vec::with_capacity(planned.len());
        let mut tokens = Vec::new();
        let mut positions = Vec::new();
        let mut logit_rows = Vec::new();
        for &(id, n) in planned {
            let Some(s) = self.seqs.get_mut(&id) else {
                continue;
            };
            let start = s.fed;
            let append_end = s
                .compression
                .config()
                .prompt_append_end(start, s.req.prompt.len());
            let final_append = start + n >= append_end;
            let opened = s.compression.open_segment(
                self.kv.store_mut(),
                &mut s.table,
                tokens.len(),
                start,
                n,
                final_append,
            );
            let seg = match opened {
                Ok(seg) => seg,
                Err(e) => {
                    self.fail(id, e);
                    continue;
                }
            };
            let prompt_positions = s.prompt_logprob_rows(n);
            let prompt_rows = (prompt_positions.clone(), logit_rows.len());
            let base = tokens.len();
            logit_rows.extend(prompt_positions.map(|p| base + p - start));
            let samples = start + n == s.total_len();
            let row = samples.then_some(logit_rows.len());
            if samples {
                logit_rows.push(tokens.len() + n - 1);
            }
            feeds.push(Feed {
                id,
                n,
                row,
                decode: s.decoding(),
                final_append,
                prompt_rows,
            });
            segments.push(seg);
            positions.extend(start..start + n);
            tokens.extend((start..start + n).map(|i| s.token(i)));
            s.stats.kv_slots_peak = s.stats.kv_slots_peak.max(s.table.len());
            s.stats.kv_bytes_peak = s
                .stats
                .kv_bytes_peak
                .max(s.table.blocks().len() * self.kv.store().bytes_per_block());
        }
        (feeds, segments, tokens, positions, logit_rows)
    }

    /// The compression schedule, then sampling (with the forks of a request's first
    /// sample) for one fed sequence.
    fn after_forward(
        &mut self,
        f: &Feed,
        logits: &[f32],
        vocab: usize,
        events: &mut Vec<TokenEvent>,
    ) -> Result<()> {
        let Some(s) = self.seqs.get_mut(&f.id) else {
            return Ok(());
        };
        if let Some(k) = s.req.logprobs.prompt {
            let (positions, first) = f.prompt_rows.clone();
            for (i, p) in positions.enumerate() {
                let row = first + i;
                let lg = &logits[row * vocab..(row + 1) * vocab];
                s.prompt_logprobs
                    .push(token_logprob(lg, s.req.prompt[p + 1], k));
            }
        }
        // The schedule runs after an append only (a kept prompt is one append).
        if !f.final_append {
            return Ok(());
        }
        let tc = Instant::now();
        let done = s
            .compression
            .maybe_compress(self.kv.store_mut(), &mut s.table)?;
        // A recomputed compression (after a preemption) was counted the first time.
        if done.evicted > 0 {
            // Its rows left their tokens' positions: nothing more of it can be cached.
            s.prefix_blocks = None;
        }
        let first_time = s.fed > s.fed_most;
        s.fed_most = s.fed_most.max(s.fed);
        if done.evicted > 0 && first_time {
            s.stats.compressions += 1;
            s.stats.evicted_tokens += done.evicted;
            s.stats.compress_seconds += tc.elapsed().as_secs_f64();
            s.stats.compact_seconds += done.compact_seconds;
            self.totals.compressions_total += 1;
            self.totals.evicted_tokens_total += done.evicted as u64;
        }
        let Some(row) = f.row else {
            return Ok(());
        };
        let lg = &logits[row * vocab..(row + 1) * vocab];
        let tok = s.draw(lg)?;
        // Log-probabilities are the model's, from the logits before any grammar mask.
        let lp = s.req.logprobs.generated.map(|k| token_logprob(lg, tok, k));
        // On error the samples still to fork fail with this sequence (`Engine::fail`).
        events.push(accept_token(&self.tokenizer, s, tok, lp)?);
        let forks = std::mem::take(&mut s.forks);
        self.totals.generated_tokens_total += 1;
        if !forks.is_empty() {
            self.fork(f.id, forks, lg, events);
        }
        Ok(())
    }

    /// Forks the samples of `parent`'s request after its prompt is in: each shares the
    /// parent's blocks, copies its policy state and samples its first token from the
    /// same logits with its own seed.
    fn fork(
        &mut self,
        parent: SeqId,
        forks: Vec<(SeqId, crate::SamplingParams)>,
        lg: &[f32],
        events: &mut Vec<TokenEvent>,
    ) {
        // Each sample reserves what one sample can hold from now on (the prompt is in and
        // compressed); the request's admission reserved that for every sample, or the
        // prompt whole if that was more, so the parent keeps one share.
        let per_sample = match (self.kv.reserved(parent), self.seqs.get(&parent)) {
            (Some(_), Some(p)) => Some(
                self.limits()
                    .blocks()
                    .sample_blocks(&p.req, p.compression.config()),
            ),
            _ => None,
        };
        for (id, params) in forks {
            let Some(p) = self.seqs.get(&parent) else {
                self.failures.push((
                    id,
                    EngineError::Failed("its request's prompt failed".into()),
                ));
                continue;
            };
            let table = match self.kv.fork(parent, &p.table, id, per_sample) {
                Ok(t) => t,
                Err(e) => {
                    self.failures.push((id, e));
                    continue;
                }
            };
            let mut req = p.req.clone();
            req.sampling = params.clone();
            let mut child = Sequence {
                id,
                req,
                table,
                fed: p.fed,
                generated: Vec::new(),
                sampler: Sampler::new(params),
                stream: self.tokenizer.stream(true),
                text: String::new(),
                finished: None,
                compression: p.compression.clone(),
                stats: p.stats.clone(),
                forks: Vec::new(),
                started: true,
                fed_most: p.fed_most,
                prefix_blocks: None,
                logprobs: Vec::new(),
                prompt_logprobs: p.prompt_logprobs.clone(),
                // Its own matcher at the start: the parent's has consumed its first token.
                grammar: p.req.grammar.as_ref().map(|g| g.start()),
            };
            child.stats.generated_tokens = 0;
            child.stats.grammar_seconds = 0.0;
            self.sched.join_running(id);
            let ev = match child.draw(lg) {
                Ok(tok) => {
                    let lp = child
                        .req
                        .logprobs
                        .generated
                        .map(|k| token_logprob(lg, tok, k));
                    accept_token(&self.tokenizer, &mut child, tok, lp)
                }
                Err(e) => Err(e.into()),
            };
            self.seqs.insert(id, child);
            match ev {
                Ok(ev) => {
                    self.totals.generated_tokens_total += 1;
                    events.push(ev);
                }
                Err(e) => self.fail(id, e),
            }
        }
        if per_sample.is_some() {
            self.kv.admit(parent, per_sample);
        }
    }

    /// Moves finished sequences out, returning their blocks.
    fn retire_finished(&mut self) {
        let done: Vec<SeqId> = self
            .seqs
            .values()
            .filter(|s| s.finished.is_some())
            .map(|s| s.id)
            .collect();
        for id in done {
            if let Some(s) = self.retire(id) {
                self.finished.insert(id, s);
            }
        }
    }
}

/// Records a sampled token and applies the stop rules: EOS, the grammar complete, a stop
/// string, `max_tokens`.
fn accept_token(
    tokenizer: &rkv_model::Tokenizer,
    s: &mut Sequence,
    tok: u32,
    logprob: Option<TokenLogprob>,
) -> Result<TokenEvent> {
    s.generated.push(tok);
    if let Some(lp) = &logprob {
        s.logprobs.push(lp.clone());
    }
    s.stats.generated_tokens += 1;
    let mut finished = None;
    // The grammar moves past the token; once nothing can extend its output, the
    // sequence is done (EOS is drawn only where the grammar allowed it).
    let complete = match &mut s.grammar {
        Some(g) => {
            let done = g.consume(tok)?;
            s.stats.grammar_seconds = g.seconds();
            done
        }
        None => false,
    };
    let is_eos = !s.req.ignore_eos && tokenizer.is_eos(tok);
    let mut text = if is_eos {
        String::new()
    } else {
        s.stream.push(tok)?.unwrap_or_default()
    };
    if is_eos || complete {
        finished = Some(FinishReason::Stop);
    }
    // A complete grammar's output keeps its last characters (a stop string or EOS drops
    // an unfinished one).
    let mut keep_rest = complete && !is_eos;
    if !text.is_empty() && !s.req.stop.is_empty() {
        let before = s.text.len();
        s.text.push_str(&text);
        // Only matches that end inside the new text are new.
        let mut from = before.saturating_sub(s.req.stop.iter().map(|x| x.len()).max().unwrap_or(0));
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
            keep_rest = false;
        }
    } else {
        s.text.push_str(&text);
    }
    if finished.is_none() && s.generated.len() >= s.req.max_tokens {
        finished = Some(FinishReason::Length);
    }
    if finished.is_some() {
        if let Some(rest) = s.stream.finish()? {
            if finished == Some(FinishReason::Length) || keep_rest {
                s.text.push_str(&rest);
                text.push_str(&rest);
            }
        }
    }
    s.finished = finished;
    Ok(TokenEvent {
        seq: s.id,
        token: tok,
        text,
        finished,
        logprob,
    })
}
