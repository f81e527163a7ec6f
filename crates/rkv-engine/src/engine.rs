//! The engine: takes requests, and advances every running sequence one step at a time
//! (see [`crate::scheduler`] for the scheduling model and [`crate::step`] for a step).
//!
//! Owns: sequences, the KV memory ([`crate::kv::KvCache`]), the scheduler, finished
//! outputs and failures, the engine-wide counters. Must not know: HTTP, CLI.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use rkv_core::config::CompressionConfig;
use rkv_model::{AttentionShape, LoadedModel, Tokenizer, Transformer};

use crate::compression::SeqCompression;
use crate::error::{EngineError, Result};
use crate::grammar::Grammars;
use crate::kv::{Admission, BlockBudget, KvCache, KvDtype, KvLayout, KvStore};
use crate::limits::RequestLimits;
use crate::request::{
    FinishReason, GenerationOutput, GenerationRequest, SeqId, SeqStats, TokenEvent,
};
use crate::sampling::{Sampler, SamplingParams};
use crate::scheduler::Scheduler;
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
    /// Most sequences running at once.
    pub max_num_seqs: usize,
    /// Compression for requests that do not bring their own.
    pub compression: CompressionConfig,
    /// How FullKV sequences take memory: grow (and be preempted) or reserve.
    pub admission: Admission,
    /// Keep the blocks of finished prompts and give them to later requests that start
    /// with the same tokens (automatic prefix caching; `--no-prefix-cache` turns it off).
    pub prefix_cache: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            kv_dtype: KvDtype::F16,
            block_size: 32,
            kv_blocks: 256,
            max_batch_tokens: 256,
            max_num_seqs: 256,
            compression: CompressionConfig::full(),
            admission: Admission::Grow,
            prefix_cache: true,
        }
    }
}

impl EngineConfig {
    /// Bytes of keys and values one block of `block_size` slots holds for a model of
    /// `shape` at `dtype`.
    /// (q8_0: 34 bytes per 32 values, scales included). Saturates rather than overflows.
    pub fn bytes_per_block(shape: AttentionShape, dtype: KvDtype, block_size: usize) -> usize {
        KvLayout {
            n_layers: shape.n_layers,
            n_kv_heads: shape.n_kv_heads,
            head_dim: shape.head_dim,
            block_size,
        }
        .bytes_per_block(dtype)
    }

    /// Blocks of `block_size` slots that fit in `bytes` of KV memory for a model of
    /// `shape` at `dtype` (0 when not even one does).
    pub fn blocks_in(
        bytes: u64,
        shape: AttentionShape,
        dtype: KvDtype,
        block_size: usize,
    ) -> usize {
        let per_block = Self::bytes_per_block(shape, dtype, block_size).max(1) as u64;
        usize::try_from(bytes / per_block).unwrap_or(usize::MAX)
    }

    /// Blocks a request of `n` samples of `req` under `comp` can hold at once with this
    /// configuration ([`BlockBudget::request_blocks`]: for FullKV every sample's whole
    /// length), so a pool of that many blocks runs it without preemption.
    pub fn request_blocks(
        &self,
        req: &GenerationRequest,
        comp: &CompressionConfig,
        n: usize,
    ) -> usize {
        BlockBudget {
            block_size: self.block_size,
            admission: self.admission,
        }
        .request_blocks(req, comp, n)
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

/// Engine-wide gauges (now) and counters (since the engine was made).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineCounters {
    pub running: usize,
    pub waiting: usize,
    pub preempted: usize,
    pub kv_blocks_used: usize,
    pub kv_blocks_total: usize,
    pub prompt_tokens_total: u64,
    pub generated_tokens_total: u64,
    pub compressions_total: u64,
    pub evicted_tokens_total: u64,
    pub preemptions_total: u64,
    /// Free blocks holding cached prompt prefixes (reclaimed before anything waits).
    pub kv_blocks_cached: usize,
    /// Prompt tokens looked up in the prefix cache, and how many were found.
    pub prefix_cache_queries_total: u64,
    pub prefix_cache_hits_total: u64,
}

pub struct Engine {
    pub(crate) model: Transformer,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) cfg: EngineConfig,
    pub(crate) kv: KvCache,
    pub(crate) sched: Scheduler,
    pub(crate) seqs: BTreeMap<SeqId, Sequence>,
    pub(crate) finished: BTreeMap<SeqId, Sequence>,
    pub(crate) failures: Vec<(SeqId, EngineError)>,
    pub(crate) totals: EngineCounters,
    grammars: Grammars,
    next_id: SeqId,
}

impl Engine {
    pub fn new(model: LoadedModel, cfg: EngineConfig) -> Result<Self> {
        if cfg.block_size == 0 || cfg.max_batch_tokens == 0 || cfg.max_num_seqs == 0 {
            return Err(EngineError::Config(
                "block size, max batch tokens and max sequences must be positive".into(),
            ));
        }
        let shape = model.transformer.attention_shape();
        let layout = KvLayout {
            n_layers: shape.n_layers,
            n_kv_heads: shape.n_kv_heads,
            head_dim: shape.head_dim,
            block_size: cfg.block_size,
        };
        let mut kv = KvCache::new(layout, cfg.kv_dtype, cfg.kv_blocks)?;
        kv.set_prefix_caching(cfg.prefix_cache);
        let grammars = Grammars::new(
            model.tokenizer.clone(),
            model.transformer.config().vocab_size,
        );
        Ok(Self {
            kv,
            model: model.transformer,
            tokenizer: model.tokenizer,
            sched: Scheduler::new(cfg.max_num_seqs, cfg.max_batch_tokens),
            cfg,
            seqs: BTreeMap::new(),
            finished: BTreeMap::new(),
            failures: Vec::new(),
            totals: EngineCounters::default(),
            grammars,
            next_id: 0,
        })
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn model(&self) -> &Transformer {
        &self.model
    }

    /// Compiles requests' grammars for this model ([`GenerationRequest::grammar`]).
    pub fn grammars(&self) -> &Grammars {
        &self.grammars
    }

    pub fn store(&self) -> &KvStore {
        self.kv.store()
    }

    /// Rebuilds the KV pool, with as many blocks, to store rows as `dtype`: for callers
    /// that compare dtypes on one loaded model (`rkv eval fidelity
    /// --reference-kv-dtype`, `rkv bench decode --compare-kv-dtype`). Refused, changing
    /// nothing, while any sequence holds KV blocks or the model's head size does not suit
    /// `dtype`.
    pub fn set_kv_dtype(&mut self, dtype: KvDtype) -> Result<()> {
        if dtype == self.cfg.kv_dtype {
            return Ok(());
        }
        if !self.seqs.is_empty() {
            return Err(EngineError::Config(
                "the KV dtype changes only while no sequence holds KV blocks".into(),
            ));
        }
        self.kv.set_dtype(dtype)?;
        self.cfg.kv_dtype = dtype;
        Ok(())
    }

    /// Turns prefix caching on or off (off forgets every cached prefix).
    pub fn set_prefix_cache(&mut self, on: bool) {
        self.cfg.prefix_cache = on;
        self.kv.set_prefix_caching(on);
    }

    /// The longest prompt plus generation the model accepts.
    pub fn max_context(&self) -> usize {
        self.model.config().max_context
    }

    /// What requests may ask of this engine.
    pub fn limits(&self) -> RequestLimits {
        RequestLimits {
            vocab_size: self.model.config().vocab_size,
            max_context: self.max_context(),
            n_blocks: self.kv.pool().n_blocks(),
            block_size: self.cfg.block_size,
            max_num_seqs: self.cfg.max_num_seqs,
            admission: self.cfg.admission,
        }
    }

    /// Blocks one sequence can need at most (FullKV: its whole length; compressed: the
    /// prompt or `B + b`, whichever is larger).
    pub fn blocks_needed(&self, req: &GenerationRequest, comp: &CompressionConfig) -> usize {
        self.limits().blocks().blocks_needed(req, comp)
    }

    /// Validates and queues a request. Bad input changes nothing.
    pub fn add_request(
        &mut self,
        req: GenerationRequest,
        compression: Option<CompressionConfig>,
    ) -> Result<SeqId> {
        let ids = self.add_request_n(req, compression, 1)?;
        Ok(ids[0])
    }

    /// Validates and queues a request of `n` samples: the prompt is fed once, and when it
    /// is in, the samples fork from it sharing its blocks (sample `i` seeded with
    /// `seed + i`). Returns the samples' ids in order. Bad input changes nothing.
    pub fn add_request_n(
        &mut self,
        req: GenerationRequest,
        compression: Option<CompressionConfig>,
        n: usize,
    ) -> Result<Vec<SeqId>> {
        let comp_cfg = compression.unwrap_or(self.cfg.compression);
        self.limits().check(&req, &comp_cfg, n)?;
        let compression = SeqCompression::new(comp_cfg, self.model.attention_shape())?;
        let ids: Vec<SeqId> = (self.next_id..self.next_id + n as SeqId).collect();
        self.next_id += n as SeqId;
        let forks = ids[1..]
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let p = SamplingParams {
                    seed: req.sampling.seed.wrapping_add(i as u64 + 1),
                    ..req.sampling.clone()
                };
                (id, p)
            })
            .collect();
        let grammar = req.grammar.as_ref().map(|g| g.start());
        self.seqs.insert(
            ids[0],
            Sequence {
                id: ids[0],
                sampler: Sampler::new(req.sampling.clone()),
                stream: self.tokenizer.stream(true),
                stats: SeqStats {
                    prompt_tokens: req.prompt.len(),
                    ..Default::default()
                },
                req,
                table: Default::default(),
                fed: 0,
                generated: Vec::new(),
                text: String::new(),
                finished: None,
                compression,
                forks,
                started: false,
                fed_most: 0,
                prefix_blocks: Some(0),
                logprobs: Vec::new(),
                prompt_logprobs: Vec::new(),
                grammar,
            },
        );
        self.sched.enqueue(ids[0]);
        Ok(ids)
    }

    /// Whether any sequence waits, runs or is preempted.
    pub fn has_work(&self) -> bool {
        !self.seqs.is_empty()
    }

    /// Gauges and counters as of now.
    pub fn counters(&self) -> EngineCounters {
        EngineCounters {
            running: self.sched.n_running(),
            waiting: self.sched.n_waiting(),
            preempted: self.sched.n_preempted(),
            kv_blocks_used: self.kv.pool().n_used(),
            kv_blocks_total: self.kv.pool().n_blocks(),
            kv_blocks_cached: self.kv.pool().n_cached_free(),
            preemptions_total: self.sched.preemptions(),
            ..self.totals.clone()
        }
    }

    /// Removes a finished sequence and returns its output.
    pub fn take_output(&mut self, id: SeqId) -> Option<GenerationOutput> {
        let s = self.finished.remove(&id)?;
        Some(output_of(s))
    }

    /// The sequences that failed since the last call, with their errors. A failed
    /// sequence has returned its blocks; the others were not disturbed.
    pub fn take_failures(&mut self) -> Vec<(SeqId, EngineError)> {
        std::mem::take(&mut self.failures)
    }

    /// Runs one request to completion, calling `on_event` for each token.
    pub fn generate(
        &mut self,
        req: GenerationRequest,
        compression: Option<CompressionConfig>,
        on_event: impl FnMut(&TokenEvent),
    ) -> Result<GenerationOutput> {
        self.generate_until(req, compression, &AtomicBool::new(false), on_event)
    }

    /// [`Engine::generate`] that stops early once `cancel` is set (checked after every
    /// step, so within one forward): the output then holds what was generated so far,
    /// with [`FinishReason::Cancelled`]. `cancel` may be set from another thread (a signal
    /// handler) or from `on_event` itself (a reader that went away).
    pub fn generate_until(
        &mut self,
        req: GenerationRequest,
        compression: Option<CompressionConfig>,
        cancel: &AtomicBool,
        mut on_event: impl FnMut(&TokenEvent),
    ) -> Result<GenerationOutput> {
        let id = self.add_request(req, compression)?;
        loop {
            self.step()
                .iter()
                .filter(|e| e.seq == id)
                .for_each(&mut on_event);
            if let Some(out) = self.take_output(id) {
                return Ok(out);
            }
            let failures = self.take_failures();
            let mut others = Vec::new();
            for (sid, err) in failures {
                if sid == id {
                    self.failures.extend(others);
                    return Err(err);
                }
                others.push((sid, err));
            }
            self.failures.extend(others);
            if cancel.load(Ordering::Relaxed) {
                return self.cancel(id).ok_or(EngineError::UnknownSequence(id));
            }
            if !self.seqs.contains_key(&id) {
                return Err(EngineError::UnknownSequence(id));
            }
        }
    }

    /// Ends a sequence now, returning its blocks and what it generated so far with
    /// [`FinishReason::Cancelled`] (a sequence that had already finished keeps its own
    /// reason). `None` for an unknown id.
    pub fn cancel(&mut self, id: SeqId) -> Option<GenerationOutput> {
        if let Some(out) = self.take_output(id) {
            return Some(out);
        }
        let s = self.retire(id)?;
        Some(GenerationOutput {
            finish_reason: FinishReason::Cancelled,
            ..output_of(s)
        })
    }

    /// Drops a sequence (waiting, running, preempted or finished), returning its blocks;
    /// a sample not yet forked is simply not forked. Unknown ids are ignored.
    pub fn abort(&mut self, id: SeqId) {
        self.finished.remove(&id);
        if self.seqs.contains_key(&id) {
            self.retire(id);
            return;
        }
        for s in self.seqs.values_mut() {
            s.forks.retain(|(f, _)| *f != id);
        }
    }

    /// Takes a sequence out of the engine, returning its blocks and reservation.
    pub(crate) fn retire(&mut self, id: SeqId) -> Option<Sequence> {
        let mut s = self.seqs.remove(&id)?;
        self.sched.remove(id);
        self.kv.free(id, &mut s.table);
        Some(s)
    }

    /// Ends a sequence with an error (and the samples it had still to fork).
    pub(crate) fn fail(&mut self, id: SeqId, err: EngineError) {
        if let Some(s) = self.retire(id) {
            let msg = err.to_string();
            self.failures.push((id, err));
            for (f, _) in s.forks {
                self.failures.push((f, EngineError::Failed(msg.clone())));
            }
        }
    }
}

/// A retired sequence's output (its finish reason as it stands).
fn output_of(s: Sequence) -> GenerationOutput {
    let asked = s.req.logprobs;
    GenerationOutput {
        token_ids: s.generated,
        text: s.text,
        finish_reason: s.finished.unwrap_or(FinishReason::Length),
        stats: s.stats,
        logprobs: asked.generated.map(|_| s.logprobs),
        prompt_logprobs: asked.prompt.map(|_| s.prompt_logprobs),
    }
}
