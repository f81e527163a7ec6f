//! Decoding-time KV compression of one sequence: the schedule of DESIGN.md §2 applied to
//! the paged store.
//!
//! Owns the per-sequence policy state (incremental redundancy bookkeeping per layer and
//! head, lent to each forward, whose attention describes the appended slots in it; the
//! observed window logits, H2O accumulators) and the compaction step: ask
//! rkv-core which slots each (layer, head) keeps, move them to the front of the
//! sequence's own blocks, return the freed tail blocks.
//! Must not know: the policies' maths (rkv-core), models, HTTP.

use std::time::Instant;

use crate::kv::BlockTable;
use rayon::prelude::*;
use rkv_core::config::CompressionConfig;
use rkv_core::policy::{select_keep, select_keep_explained, HeadObservation, HeadState, KeyRows};
use rkv_model::AttentionShape;

use crate::error::{EngineError, Result};
use crate::kv::KvStore;
use crate::paged_attention::{CaptureSpec, Segment, WindowLogits};
use crate::recorder::{head_event, CompressionRecord, EventRecord, HeadEvent};

/// What one call of [`SeqCompression::maybe_compress`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CompressionOutcome {
    /// Slots evicted per (layer, head); 0 when the schedule did not compress.
    pub evicted: usize,
    /// Wall time spent moving the kept slots and freeing blocks (the part of the event
    /// every scored policy shares; the rest is scoring and selection).
    pub compact_seconds: f64,
}

#[derive(Clone)]
pub struct SeqCompression {
    cfg: CompressionConfig,
    shape: AttentionShape,
    heads: Vec<HeadState>,        // [n_layers * n_kv_heads]
    window: Option<WindowLogits>, // filled over the steps before a compression
    h2o: Option<Vec<Vec<f32>>>,   // [n_layers * n_kv_heads] of [resident slots]
    /// Off (`None`) unless [`Self::start_recording`] was called.
    recorder: Option<CompressionRecord>,
}

impl SeqCompression {
    /// Checks that the engine can run `cfg` (the config's own checks, and a buffer that
    /// holds the observation window where the policy observes one).
    pub fn validate(cfg: &CompressionConfig) -> Result<()> {
        cfg.validate_if_compressing()
            .map_err(|e| EngineError::Config(e.to_string()))?;
        if cfg.policy.needs_window_logits() && cfg.buffer < cfg.window {
            return Err(EngineError::Config(format!(
                "buffer ({}) must be at least the window ({}): the window's queries are observed between two compressions",
                cfg.buffer, cfg.window
            )));
        }
        Ok(())
    }

    pub fn new(cfg: CompressionConfig, shape: AttentionShape) -> Result<Self> {
        Self::validate(&cfg)?;
        let n = shape.n_layers * shape.n_kv_heads;
        Ok(Self {
            heads: (0..n).map(|_| HeadState::new()).collect(),
            window: None,
            h2o: cfg.policy.needs_h2o_scores().then(|| vec![Vec::new(); n]),
            recorder: None,
            cfg,
            shape,
        })
    }

    pub fn config(&self) -> &CompressionConfig {
        &self.cfg
    }

    /// Forgets everything observed: the state of a sequence whose cache was freed (it
    /// was preempted) and whose tokens will be fed again from the first.
    pub fn reset(&mut self) {
        for st in &mut self.heads {
            st.reset();
        }
        self.window = None;
        if let Some(h2o) = self.h2o.as_mut() {
            h2o.iter_mut().for_each(Vec::clear);
        }
    }

    /// Whether observation is needed for a step appending `n_new` tokens to `len_before`
    /// resident slots, and if so which of the step's tokens fill which window rows.
    /// `final_append` is false for a piece of a prompt append that does not end it (a kept
    /// prompt is one append, a compressed one an append per chunk). An error when the window's buffer cannot be allocated.
    pub fn capture_for_step(
        &mut self,
        len_before: usize,
        n_new: usize,
        final_append: bool,
    ) -> Result<Option<(CaptureSpec, WindowLogits)>> {
        if !self.cfg.policy.needs_window_logits() {
            return Ok(None);
        }
        let (b, w) = (
            self.cfg.budget.saturating_add(self.cfg.buffer),
            self.cfg.window,
        );
        let len_after = len_before + n_new;
        // The compression this step's tokens observe for: at the end of this step when it
        // triggers, else the one when the cache reaches B + b one token at a time.
        let target = if final_append && self.cfg.should_compress(len_after) {
            len_after
        } else if final_append && len_after > b.saturating_sub(w) && len_after < b {
            b
        } else {
            return Ok(None);
        };
        let first_tok_idx = target - w; // index (in cache) of the window's first token
        let from_token = first_tok_idx.saturating_sub(len_before);
        if from_token >= n_new {
            return Ok(None);
        }
        let first_row = len_before + from_token - first_tok_idx;
        let win = match self.window.take() {
            Some(win) if win.candidates == target - w => win,
            _ => WindowLogits::new(&self.shape, w, target - w)?,
        };
        Ok(Some((
            CaptureSpec {
                from_token,
                first_row,
            },
            win,
        )))
    }

    /// Records every later compression event (kept positions and the terms that decided
    /// them, per layer and head) until [`Self::take_record`].
    pub fn start_recording(&mut self) {
        self.recorder = Some(CompressionRecord::new(
            self.shape.n_layers,
            self.shape.n_kv_heads,
        ));
    }

    /// The events recorded since [`Self::start_recording`] (`None` when not recording);
    /// recording stops.
    pub fn take_record(&mut self) -> Option<CompressionRecord> {
        self.recorder.take()
    }

    /// Takes back the window buffer after a forward.
    pub fn return_window(&mut self, win: WindowLogits) {
        self.window = Some(win);
    }

    /// Reserves `n` slots in `table` for a step's tokens (the forward's rows
    /// `token_start..`, positions `first_position..`) and builds the step's segment: the
    /// window observation the schedule asks for, the H2O accumulators and R-KV's head
    /// states, lent to the forward until [`Self::close_segment`] (or
    /// [`Self::abandon_segment`]), which must be called before the next compression. All
    /// or nothing: on error nothing changed.
    pub fn open_segment(
        &mut self,
        store: &mut KvStore,
        table: &mut BlockTable,
        token_start: usize,
        first_position: usize,
        n: usize,
        final_append: bool,
    ) -> Result<Segment> {
        let len_before = table.len();
        let capture = self.capture_for_step(len_before, n, final_append)?;
        // A block shared with another sample is copied before this step writes into it.
        if let Err(e) = store.allocate(table, n) {
            // All or nothing: the window buffer goes back for the next try.
            if let Some((_, win)) = capture {
                self.return_window(win);
            }
            return Err(e);
        }
        self.grow_accumulators(table.len());
        Ok(Segment {
            blocks: table.blocks().to_vec(),
            token_start,
            n_tokens: n,
            len_before,
            first_position: first_position as u32,
            capture,
            accumulate: self.h2o.take(),
            describe: self
                .cfg
                .policy
                .needs()
                .redundancy
                .then(|| (std::mem::take(&mut self.heads), self.cfg.threshold)),
            sums: self.cfg.should_compress(len_before + n),
        })
    }

    /// Takes back what [`Self::open_segment`] lent the forward.
    pub fn close_segment(&mut self, seg: Segment) {
        if let Some((_, win)) = seg.capture {
            self.return_window(win);
        }
        self.h2o = seg.accumulate;
        if let Some((heads, _)) = seg.describe {
            self.heads = heads;
        }
    }

    /// Takes back what a forward that failed was lent, as [`Self::close_segment`]; the
    /// slots it reserved go back to `seg.len_before`, so a head that described some of
    /// them (in the layers that ran) forgets everything: the next compression computes
    /// its redundancy from scratch.
    pub fn abandon_segment(&mut self, seg: Segment) {
        let len_before = seg.len_before;
        self.close_segment(seg);
        for st in &mut self.heads {
            if st.described() > len_before {
                st.reset();
            }
        }
    }

    /// Grows the H2O accumulators to `len` slots (new slots start at 0).
    fn grow_accumulators(&mut self, len: usize) {
        if let Some(h2o) = self.h2o.as_mut() {
            for a in h2o.iter_mut() {
                a.resize(len, 0.0);
            }
        }
    }

    /// Compresses the sequence's cache of `table.len()` slots to the budget if the
    /// schedule says so: every (layer, head) is scored and selects its kept slots, then
    /// the kept slots are compacted.
    pub fn maybe_compress(
        &mut self,
        store: &mut KvStore,
        table: &mut BlockTable,
    ) -> Result<CompressionOutcome> {
        // A segment not given back (see `open_segment`) leaves these short: refuse rather
        // than compact nothing and truncate.
        let n_heads = self.shape.n_layers * self.shape.n_kv_heads;
        if self.heads.len() != n_heads
            || self.h2o.as_ref().is_some_and(|a| a.len() != n_heads)
            || (self.cfg.policy.needs_h2o_scores() && self.h2o.is_none())
        {
            return Err(EngineError::Config(
                "the sequence's policy state is still lent to a forward".into(),
            ));
        }
        let len = table.len();
        if !self.cfg.should_compress(len) {
            return Ok(CompressionOutcome::default());
        }
        let (nkv, d, w) = (self.shape.n_kv_heads, self.shape.head_dim, self.cfg.window);
        let win = self.window.take();
        if self.cfg.policy.needs_window_logits()
            && win.as_ref().is_none_or(|x| x.candidates != len - w)
        {
            return Err(EngineError::Config(format!(
                "no observed window for a compression at {len} slots"
            )));
        }
        // Compaction writes the kept rows into the first `new_len` slots of each run: the
        // blocks holding them may not be shared (with a sample, or kept by the prefix
        // cache); the tail is only read, then released.
        let new_len = self.cfg.len_after_compression(len);
        store.make_writable(table, 0..new_len)?;
        let blocks = table.blocks().to_vec();
        let cfg = self.cfg;
        let needs = cfg.policy.policy().needs_for(&cfg);
        let needs_keys = needs.keys || needs.redundancy;
        let store_ref = &*store;
        let h2o = self.h2o.as_ref();
        let bs = store.layout().block_size;
        let runs_fit = bs.is_power_of_two();
        let recording = self.recorder.is_some();
        type Kept = (Vec<usize>, Option<HeadEvent>);
        let keeps: Vec<std::result::Result<Kept, String>> = self
            .heads
            .par_iter_mut()
            .enumerate()
            // One key buffer per worker, reused across heads, for block sizes that are not
            // a power of two and for q8_0 keys (read dequantised; otherwise the keys are
            // read where they lie), and one for values where the policy reads them.
            .map_init(
                || (Vec::new(), Vec::new()),
                |(flat, values), (i, state)| {
                    let (layer, head) = (i / nkv, i % nkv);
                    let runs = match (needs_keys, runs_fit) {
                        (true, true) => store_ref.key_runs(&blocks, layer, head, len),
                        _ => None,
                    };
                    if needs_keys && runs.is_none() {
                        store_ref.read_keys_into(&blocks, layer, head, len, flat);
                    }
                    let keys = match &runs {
                        Some(r) => r.rows(bs, len, d).map_err(|e| e.to_string())?,
                        None => KeyRows::flat_f32(flat, d),
                    };
                    if needs.values {
                        store_ref.read_values_into(&blocks, layer, head, len, values);
                    }
                    let obs = HeadObservation {
                        len,
                        head_dim: d,
                        keys,
                        // The window was reduced over each GQA group as it was captured.
                        group: 1,
                        window: w,
                        window_logits: win.as_ref().map_or(&[][..], |x| &x.data[i][..]),
                        h2o_scores: h2o.map_or(&[][..], |a| &a[i][..]),
                        values: if needs.values { &values[..] } else { &[] },
                    };
                    if !recording {
                        return select_keep(&cfg, &obs, state)
                            .map(|keep| (keep, None))
                            .map_err(|e| e.to_string());
                    }
                    let ex = select_keep_explained(&cfg, &obs, state).map_err(|e| e.to_string())?;
                    let positions: Vec<u32> = (0..len)
                        .map(|s| store_ref.position(&blocks, layer, head, s))
                        .collect();
                    let event = head_event(&positions, &ex);
                    Ok((ex.kept, Some(event)))
                },
            )
            .collect();
        let compacting = Instant::now();
        let mut recorded = Vec::new();
        if recording {
            recorded.reserve(keeps.len());
        }
        // Before the compaction moves them: the newest token's position.
        let newest = if recording && len > 0 {
            store.position(&blocks, 0, 0, len - 1)
        } else {
            0
        };
        for (i, keep) in keeps.into_iter().enumerate() {
            let (keep, event) = keep.map_err(EngineError::Config)?;
            recorded.extend(event);
            if keep.len() != new_len {
                return Err(EngineError::Config(format!(
                    "policy kept {} slots, expected {new_len}",
                    keep.len()
                )));
            }
            store.compact(&blocks, i / nkv, i % nkv, &keep);
            if let Some(acc) = self.h2o.as_mut() {
                let a = &mut acc[i];
                let kept: Vec<f32> = keep.iter().map(|&s| a[s]).collect();
                *a = kept;
            }
        }
        store.truncate(table, new_len)?;
        if let Some(rec) = self.recorder.as_mut() {
            rec.events.push(EventRecord {
                slots_before: len,
                position: newest,
                heads: recorded,
            });
        }
        Ok(CompressionOutcome {
            evicted: len - new_len,
            compact_seconds: compacting.elapsed().as_secs_f64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{KvDtype, KvLayout};
    use crate::paged_attention::PagedAttention;
    use rkv_core::config::PolicyKind;
    use rkv_model::Attention;

    /// A model shape of `n_layers` layers with one KV head of `d` dims and two query heads,
    /// a store of `dtype` rows in `n_blocks` blocks of `block_size` slots, and `cfg`'s
    /// compression.
    fn one_kv_head(
        dtype: KvDtype,
        n_layers: usize,
        d: usize,
        block_size: usize,
        n_blocks: usize,
        cfg: CompressionConfig,
    ) -> (AttentionShape, KvStore, SeqCompression) {
        let shape = AttentionShape {
            n_layers,
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: d,
        };
        let layout = KvLayout {
            n_layers,
            n_kv_heads: 1,
            head_dim: d,
            block_size,
        };
        let store = KvStore::new(layout, dtype, n_blocks).expect("store");
        let comp = SeqCompression::new(cfg, shape).expect("config");
        (shape, store, comp)
    }

    /// R-KV lends its heads to each forward, whose attention describes the appended slots;
    /// a forward that fails after some layers ran leaves those layers' heads describing
    /// slots that are then given back, so abandoning it resets them (the next compression
    /// computes from scratch) while heads that described nothing new are kept.
    #[test]
    fn abandoned_forward_forgets_what_it_described() {
        let cfg = CompressionConfig {
            policy: PolicyKind::RKv,
            budget: 16,
            buffer: 8,
            window: 2,
            ..CompressionConfig::default()
        };
        let (shape, mut store, mut comp) = one_kv_head(KvDtype::F16, 2, 4, 4, 8, cfg);
        let mut table = BlockTable::new();
        let forward = |store: &mut KvStore, seg: Segment, layers: usize, t: f32| {
            let n = seg.n_tokens;
            let mut attn = PagedAttention::new(store, shape, vec![seg]);
            let q = vec![0.1f32; n * 2 * 4];
            let k: Vec<f32> = (0..n * 4).map(|i| (i as f32 + t).sin()).collect();
            let mut out = vec![0.0f32; q.len()];
            for layer in 0..layers {
                attn.attend(layer, &q, &k, &k, &mut out).expect("attend");
            }
            attn.segments.pop().expect("segment")
        };
        // Three tokens in full: both layers' heads describe all three slots.
        let seg = comp
            .open_segment(&mut store, &mut table, 0, 0, 3, true)
            .expect("open");
        let seg = forward(&mut store, seg, 2, 0.0);
        // Compressing while the heads are lent is refused, not run over no heads.
        assert!(matches!(
            comp.maybe_compress(&mut store, &mut table),
            Err(EngineError::Config(_))
        ));
        comp.close_segment(seg);
        assert!(comp.maybe_compress(&mut store, &mut table).is_ok());
        let described =
            |c: &SeqCompression| c.heads.iter().map(HeadState::described).collect::<Vec<_>>();
        assert_eq!(described(&comp), [3, 3]);
        // One more token whose forward stops after layer 0: layer 0's head is reset.
        let seg = comp
            .open_segment(&mut store, &mut table, 0, 3, 1, true)
            .expect("open");
        let seg = forward(&mut store, seg, 1, 3.0);
        comp.abandon_segment(seg);
        store.truncate(&mut table, 3).expect("truncate");
        assert_eq!(described(&comp), [0, 3]);
        // A head that was reset stays out of step (the compression catches it up); the
        // other goes on describing.
        let seg = comp
            .open_segment(&mut store, &mut table, 0, 3, 1, true)
            .expect("open");
        let seg = forward(&mut store, seg, 2, 3.0);
        comp.close_segment(seg);
        assert_eq!(described(&comp), [0, 4]);
    }

    /// The attention describes every appended slot as the oracle resolves it, over f16
    /// keys read in place and q8_0 keys dequantised as policies read them, when a head's
    /// slots are split over several attention tasks (more than 256 visible) and a segment
    /// holds many tokens (a prompt) or one.
    #[test]
    fn described_slots_match_the_oracle_across_attention_chunks() {
        for (dtype, d) in [(KvDtype::F16, 16), (KvDtype::Q8_0, 32)] {
            described_slots_match_the_oracle(dtype, d);
        }
    }

    fn described_slots_match_the_oracle(dtype: KvDtype, d: usize) {
        let cfg = CompressionConfig {
            policy: PolicyKind::RKv,
            budget: 4096,
            ..CompressionConfig::default()
        };
        let (shape, mut store, mut comp) = one_kv_head(dtype, 1, d, 16, 64, cfg);
        let mut table = BlockTable::new();
        // Keys near one of five directions (so that many rows match), with noise.
        let key = |p: usize| -> Vec<f32> {
            let c = (p * 7 + p / 3) % 5;
            (0..d)
                .map(|i| ((c * d + i) as f32 * 0.9).sin() + 0.4 * ((p * 31 + i * 17) as f32).sin())
                .collect()
        };
        let mut pos = 0;
        for n in [300, 1, 1, 57, 1, 1, 1] {
            let seg = comp
                .open_segment(&mut store, &mut table, 0, pos, n, true)
                .expect("open");
            let q = vec![0.1f32; n * 2 * d];
            let k: Vec<f32> = (pos..pos + n).flat_map(key).collect();
            let mut out = vec![0.0f32; q.len()];
            let mut attn = PagedAttention::new(&mut store, shape, vec![seg]);
            attn.attend(0, &q, &k, &k, &mut out).expect("attend");
            let seg = attn.segments.pop().expect("segment");
            comp.close_segment(seg);
            pos += n;
        }
        let mut keys = Vec::new();
        store.read_keys_into(table.blocks(), 0, 0, pos, &mut keys);
        assert_eq!(comp.heads[0].described(), pos);
        let oracle = rkv_core::policy::redundancy_oracle(&keys, d, cfg.threshold, cfg.window);
        let matched = oracle.latest.iter().filter(|r| r.is_some()).count();
        assert!(
            matched > pos / 2,
            "{dtype}: the keys should repeat: {matched} of {pos}"
        );
        assert_eq!(
            comp.heads[0].latest_resolved(&keys, d, cfg.threshold),
            oracle.latest
        );
    }
}
