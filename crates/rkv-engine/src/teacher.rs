//! Running a given text through the engine instead of sampling: scoring prompts and
//! teacher-forcing traces (for parity checks and the fidelity evaluation).
//!
//! Owns sequences that live outside the step loop for one call. Uses the same store,
//! attention and compression schedule as generation, so what it measures is what users run.
//! Must not know: metrics (the caller computes them from the logits), HTTP, CLI.

use std::time::Instant;

use crate::kv::BlockTable;
use rkv_core::config::CompressionConfig;

use crate::compression::SeqCompression;
use crate::engine::{prompt_chunk, Engine};
use crate::error::{EngineError, Result};
use crate::paged_attention::PagedAttention;
use crate::recorder::CompressionRecord;

/// What a teacher-forced run reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TeacherStats {
    pub compressions: usize,
    /// Largest resident slot count of any layer/head.
    pub kv_slots_peak: usize,
    /// Positions resident at the end, `[n_layers, n_kv_heads, resident]` flattened.
    pub final_positions: Vec<u32>,
    /// Wall time of the compression events (all layers and heads), summed.
    pub compress_seconds: f64,
    /// Of which compaction (moving kept slots, freeing blocks): shared by every policy.
    pub compact_seconds: f64,
}

impl Engine {
    /// Feeds `tokens` through a fresh, uncompressed sequence (chunked prefill on the
    /// normal path) and returns the logits of every position: `[n, vocab]`. The
    /// sequence's blocks are returned afterwards. For parity checks and scoring.
    pub fn prompt_logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let vocab = self.model.config().vocab_size;
        if tokens.is_empty() {
            return Err(EngineError::BadRequest("no tokens to score".into()));
        }
        if tokens.len() > self.max_context() {
            return Err(EngineError::TooLong {
                prompt: tokens.len(),
                max_new: 0,
                context: self.max_context(),
            });
        }
        let mut full =
            SeqCompression::new(CompressionConfig::full(), self.model.attention_shape())?;
        let mut table = BlockTable::new();
        let mut logits = Vec::with_capacity(tokens.len() * vocab);
        let step = self.cfg.max_batch_tokens;
        let mut run = |this: &mut Self| -> Result<()> {
            for (ci, chunk) in tokens.chunks(step).enumerate() {
                let rows: Vec<usize> = (0..chunk.len()).collect();
                logits.extend(this.feed(&mut table, &mut full, chunk, ci * step, false, &rows)?);
            }
            Ok(())
        };
        let res = run(self);
        self.kv.store_mut().release(&mut table)?;
        res.map(|_| logits)
    }

    /// Teacher-forces `tokens` (a prompt of `prompt_len` tokens, then a continuation)
    /// through a fresh sequence on the normal path, compression schedule included, and
    /// calls `on_logits(p, logits)` for every position `p` in `prompt_len - 1 .. n - 1`
    /// with the distribution of token `p + 1`.
    ///
    /// The prompt is one append. Between two compressions the cache only grows, so the
    /// continuation goes through in causal chunks of at most `max_chunk` tokens that end
    /// where the schedule compresses; the window's logits are observed inside the chunks.
    /// `max_chunk = 1` is token-by-token decoding, and gives the same kept sets.
    pub fn teacher_force(
        &mut self,
        tokens: &[u32],
        prompt_len: usize,
        comp: CompressionConfig,
        max_chunk: usize,
        on_logits: impl FnMut(usize, &[f32]),
    ) -> Result<TeacherStats> {
        self.teacher_force_with(tokens, prompt_len, comp, max_chunk, false, on_logits)
            .map(|(stats, _)| stats)
    }

    /// [`Self::teacher_force`] with the compression recorder on: also returns every
    /// compression event (what each layer and head kept, and why).
    pub fn teacher_force_recorded(
        &mut self,
        tokens: &[u32],
        prompt_len: usize,
        comp: CompressionConfig,
        max_chunk: usize,
        on_logits: impl FnMut(usize, &[f32]),
    ) -> Result<(TeacherStats, CompressionRecord)> {
        let (stats, record) =
            self.teacher_force_with(tokens, prompt_len, comp, max_chunk, true, on_logits)?;
        let shape = self.model.attention_shape();
        let record =
            record.unwrap_or_else(|| CompressionRecord::new(shape.n_layers, shape.n_kv_heads));
        Ok((stats, record))
    }

    fn teacher_force_with(
        &mut self,
        tokens: &[u32],
        prompt_len: usize,
        comp: CompressionConfig,
        max_chunk: usize,
        record: bool,
        mut on_logits: impl FnMut(usize, &[f32]),
    ) -> Result<(TeacherStats, Option<CompressionRecord>)> {
        if prompt_len == 0 || prompt_len > tokens.len() || max_chunk == 0 {
            return Err(EngineError::BadRequest(format!(
                "teacher forcing needs 1 <= prompt ({prompt_len}) <= tokens ({}) and a chunk >= 1",
                tokens.len()
            )));
        }
        if tokens.len() > self.max_context() {
            return Err(EngineError::TooLong {
                prompt: prompt_len,
                max_new: tokens.len() - prompt_len,
                context: self.max_context(),
            });
        }
        let vocab = self.model.config().vocab_size;
        let mut compression = SeqCompression::new(comp, self.model.attention_shape())?;
        if record {
            compression.start_recording();
        }
        let mut table = BlockTable::new();
        let mut stats = TeacherStats::default();
        let mut run = |this: &mut Self, table: &mut BlockTable| -> Result<()> {
            let mut pos = 0;
            while pos < tokens.len() {
                let in_prompt = pos < prompt_len;
                let append_end = comp.prompt_append_end(pos, prompt_len);
                let n = if in_prompt {
                    let room = max_chunk.max(this.cfg.max_batch_tokens);
                    prompt_chunk(append_end - pos, room, comp.window)
                } else {
                    let mut n = (tokens.len() - pos).min(max_chunk);
                    if let Some(cap) = comp.max_resident_slots() {
                        n = n.min(cap.saturating_sub(table.len()).max(1));
                    }
                    n
                };
                let final_append = !in_prompt || pos + n == append_end;
                let rows: Vec<usize> = (0..n).filter(|&t| pos + t + 1 >= prompt_len).collect();
                let logits = this.feed(
                    table,
                    &mut compression,
                    &tokens[pos..pos + n],
                    pos,
                    final_append,
                    &rows,
                )?;
                for (i, &t) in rows.iter().enumerate() {
                    if pos + t + 1 < tokens.len() {
                        on_logits(pos + t, &logits[i * vocab..(i + 1) * vocab]);
                    }
                }
                stats.kv_slots_peak = stats.kv_slots_peak.max(table.len());
                pos += n;
                if final_append {
                    let started = Instant::now();
                    let done = compression.maybe_compress(this.kv.store_mut(), table)?;
                    if done.evicted > 0 {
                        stats.compressions += 1;
                        stats.compress_seconds += started.elapsed().as_secs_f64();
                        stats.compact_seconds += done.compact_seconds;
                    }
                }
            }
            let layout = *this.kv.store().layout();
            for l in 0..layout.n_layers {
                for h in 0..layout.n_kv_heads {
                    for s in 0..table.len() {
                        stats.final_positions.push(this.kv.store().position(
                            table.blocks(),
                            l,
                            h,
                            s,
                        ));
                    }
                }
            }
            Ok(())
        };
        let res = run(self, &mut table);
        self.kv.store_mut().release(&mut table)?;
        res.map(|_| (stats, compression.take_record()))
    }

    /// One forward of `chunk` (starting at absolute position `start`) for a sequence that
    /// is not in the step loop; returns the logits of `rows`.
    fn feed(
        &mut self,
        table: &mut BlockTable,
        compression: &mut SeqCompression,
        chunk: &[u32],
        start: usize,
        final_append: bool,
        rows: &[usize],
    ) -> Result<Vec<f32>> {
        let shape = self.model.attention_shape();
        let seg = compression.open_segment(
            self.kv.store_mut(),
            table,
            0,
            start,
            chunk.len(),
            final_append,
        )?;
        let positions: Vec<usize> = (start..start + chunk.len()).collect();
        let mut attn = PagedAttention::new(self.kv.store_mut(), shape, vec![seg]);
        let out = self.model.forward(chunk, &positions, &mut attn, rows);
        let seg = attn.segments.pop();
        drop(attn);
        if let Some(seg) = seg {
            if out.is_ok() {
                compression.close_segment(seg);
            } else {
                // As the step loop does: the slots go back, and so does what described them.
                let len_before = seg.len_before;
                compression.abandon_segment(seg);
                self.kv.store_mut().truncate(table, len_before)?;
            }
        }
        Ok(out?)
    }
}
