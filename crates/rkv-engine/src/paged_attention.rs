//! The engine's attention over paged KV memory, called by models through
//! [`rkv_model::Attention`].
//!
//! Owns: appending each forward's keys/values to the sequences' blocks, causal attention
//! split over slot chunks (one task each, `attention_chunk`) and merged with the
//! online-softmax rule of flash-decoding, and recording what policies need while it
//! runs: the raw logits of the observation window's queries (R-KV, SnapKV), accumulated
//! attention probabilities (H2O), and for R-KV each appended key's dot products with the
//! keys it attends over, which describe the new slot in the head's redundancy
//! bookkeeping while those keys are in cache (`HeadState::describe_appended`), so that a
//! compression has no similar-slot scan left to run. Nothing is recomputed for
//! compression.
//! Must not know: which policy will use the observations, models' weights, HTTP.

use crate::kv::BlockId;
use half::f16;
use half::slice::HalfBitsSliceExt;
use rayon::prelude::*;
use rkv_core::policy::importance::max_into;
use rkv_core::policy::{AppendedRows, HeadState};
use rkv_kernels::BlockQ8_0;
use rkv_model::{Attention, AttentionShape};

use crate::attention_chunk::{chunk_len, partial, Chunk, Runs, Scratch, TaskLayout};
use crate::error::EngineError;
use crate::kv::{KvBuf, KvStore};

/// The observation window's logits over the compression candidates, kept across the steps
/// that produce them, already reduced over each GQA group: row `r`, candidate `j` holds the
/// maximum over the group's query heads of the raw logit (DESIGN.md §2, importance step 1,
/// takes that maximum before anything else, so it is all the policies need; the group's
/// heads are never stored, which keeps this buffer `group` times smaller).
/// One buffer per (layer, KV head): `[window, candidates]`.
#[derive(Debug, Clone)]
pub struct WindowLogits {
    pub candidates: usize,
    pub data: Vec<Vec<f32>>, // [n_layers * n_kv_heads] of [window, candidates]
}

impl WindowLogits {
    /// The zeroed buffers, or an error (not an abort) when they cannot be allocated: their
    /// size grows with the window (`--kv-window`) times the budget.
    pub fn new(
        shape: &AttentionShape,
        window: usize,
        candidates: usize,
    ) -> crate::error::Result<Self> {
        let refused = || EngineError::WindowAlloc { window, candidates };
        let per_head = window.checked_mul(candidates).ok_or_else(refused)?;
        let data = (0..shape.n_layers * shape.n_kv_heads)
            .map(|_| bytemuck::allocation::try_zeroed_vec(per_head).map_err(|()| refused()))
            .collect::<crate::error::Result<_>>()?;
        Ok(Self { candidates, data })
    }
}

/// Which tokens of a segment fill which rows of the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureSpec {
    /// First token (index within the segment) whose logits are kept.
    pub from_token: usize,
    /// The window row that token fills; later tokens fill the following rows.
    pub first_row: usize,
}

/// The tokens of one sequence inside a forward.
pub struct Segment {
    pub blocks: Vec<BlockId>,
    /// First row of this segment among the forward's tokens.
    pub token_start: usize,
    pub n_tokens: usize,
    /// Resident slots before this forward; token `t` goes to slot `len_before + t`.
    pub len_before: usize,
    /// Position of token 0; token `t` is at `first_position + t`.
    pub first_position: u32,
    pub capture: Option<(CaptureSpec, WindowLogits)>,
    /// H2O: accumulated attention probability per (layer, KV head) and slot,
    /// `[n_layers * n_kv_heads]` of `[len_before + n_tokens]`.
    pub accumulate: Option<Vec<Vec<f32>>>,
    /// R-KV: the redundancy bookkeeping of each (layer, KV head),
    /// `[n_layers * n_kv_heads]`, and the threshold. A head whose state describes exactly
    /// the `len_before` slots (from the first append on, until a failed forward resets it
    /// and a compression catches it up) has this forward's tokens described one at a
    /// time, in order.
    pub describe: Option<(Vec<HeadState>, f32)>,
    /// R-KV: this forward ends at a length the schedule compresses, so the attention of
    /// its last token also takes every row's product with the key sum of its heads
    /// (`HeadState::set_sum_dots`), while it reads those keys anyway, and the compression
    /// reads none for its column sums.
    pub sums: bool,
}

/// A segment asked for an observation its forward did not lay out (its policy fields
/// changed after [`PagedAttention::new`]).
const UNLAID: &str = "a segment's observations changed after its forward was laid out";

/// One attention task: a (segment, token, KV head) and the chunk `c0..c1` of its visible
/// slots, with where its results lie in the forward's results buffer.
#[derive(Debug, Clone, Copy)]
struct Task {
    si: usize,
    t: usize,
    h: usize,
    c0: usize,
    c1: usize,
    out: TaskLayout,
}

pub struct PagedAttention<'a> {
    store: &'a mut KvStore,
    shape: AttentionShape,
    pub segments: Vec<Segment>,
    /// One attention task per chunk of visible slots; the same for every layer, so built
    /// once.
    tasks: Vec<Task>,
    /// The tasks' results (see [`TaskLayout`]), allocated once per forward by the thread
    /// that merges them, reused by every layer.
    results: Vec<f32>,
}

impl<'a> PagedAttention<'a> {
    pub fn new(store: &'a mut KvStore, shape: AttentionShape, segments: Vec<Segment>) -> Self {
        let (g, d) = (shape.group(), shape.head_dim);
        let mut tasks = Vec::new();
        let mut at = 0;
        for (si, seg) in segments.iter().enumerate() {
            for t in 0..seg.n_tokens {
                let visible = seg.len_before + t + 1;
                let cl = chunk_len(visible);
                let logits = seg.capture.as_ref().is_some_and(|(c, _)| t >= c.from_token);
                for h in 0..shape.n_kv_heads {
                    let mut c0 = 0;
                    while c0 < visible {
                        let c1 = (c0 + cl).min(visible);
                        let out = TaskLayout {
                            at,
                            n: c1 - c0,
                            probs: seg.accumulate.is_some(),
                            logits,
                            dots: seg.describe.is_some(),
                            sums: seg.describe.is_some() && seg.sums && t + 1 == seg.n_tokens,
                        };
                        at += out.len(g, d);
                        tasks.push(Task {
                            si,
                            t,
                            h,
                            c0,
                            c1,
                            out,
                        });
                        c0 = c1;
                    }
                }
            }
        }
        Self {
            store,
            shape,
            segments,
            tasks,
            results: vec![0.0; at],
        }
    }
}

impl Attention for PagedAttention<'_> {
    fn attend(
        &mut self,
        layer: usize,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        out: &mut [f32],
    ) -> Result<(), String> {
        let AttentionShape {
            n_heads,
            n_kv_heads,
            head_dim: d,
            ..
        } = self.shape;
        let g = self.shape.group();
        let layout = *self.store.layout();
        let bs = layout.block_size;
        let n_total: usize = self.segments.iter().map(|s| s.n_tokens).sum();
        if q.len() != n_total * n_heads * d
            || k.len() != n_total * n_kv_heads * d
            || v.len() != k.len()
            || out.len() != q.len()
        {
            return Err(format!(
                "attention inputs do not match {n_total} tokens of {n_heads}/{n_kv_heads} heads x {d}"
            ));
        }
        // 1. Append this forward's keys and values.
        for seg in &self.segments {
            for t in 0..seg.n_tokens {
                let row = seg.token_start + t;
                for h in 0..n_kv_heads {
                    let at = (row * n_kv_heads + h) * d;
                    self.store
                        .write_slot(
                            &seg.blocks,
                            layer,
                            h,
                            seg.len_before + t,
                            seg.first_position + t as u32,
                            &k[at..at + d],
                            &v[at..at + d],
                        )
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        // R-KV: which KV heads of each segment describe this forward's tokens (their state
        // describes exactly the slots before them), and those tokens' keys read back as
        // stored, `[n_tokens, n_kv_heads, d]`.
        let described: Vec<Option<(Vec<bool>, Vec<f32>)>> = self
            .segments
            .iter()
            .map(|seg| {
                let (heads, _) = seg.describe.as_ref()?;
                let on: Vec<bool> = (0..n_kv_heads)
                    .map(|h| {
                        let st = heads.get(layer * n_kv_heads + h);
                        st.is_some_and(|st| st.described() == seg.len_before)
                    })
                    .collect();
                if !on.contains(&true) {
                    return None;
                }
                let mut keys = vec![0.0f32; seg.n_tokens * n_kv_heads * d];
                for (i, key) in keys.chunks_exact_mut(d).enumerate() {
                    let (t, h) = (i / n_kv_heads, i % n_kv_heads);
                    self.store
                        .read_key(&seg.blocks, layer, h, seg.len_before + t, key);
                }
                Some((on, keys))
            })
            .collect();
        let key_of = |si: usize, t: usize, h: usize| -> Option<&[f32]> {
            let (on, keys) = described[si].as_ref()?;
            on[h].then(|| &keys[(t * n_kv_heads + h) * d..][..d])
        };
        // The key sum (rounded) each such head will have once this forward's tokens are
        // described, when the forward leads to a compression: its last token's tasks take
        // every row's product with it.
        let sum_keys: Vec<Vec<Option<Vec<f32>>>> = self
            .segments
            .iter()
            .enumerate()
            .map(|(si, seg)| match seg.describe.as_ref() {
                Some((heads, _)) if seg.sums => (0..n_kv_heads)
                    .map(|h| {
                        let keys = (0..seg.n_tokens).map(|t| key_of(si, t, h));
                        let keys: Vec<&[f32]> = keys.collect::<Option<_>>()?;
                        Some(heads.get(layer * n_kv_heads + h)?.sum_key_after(keys))
                    })
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        let sum_key_of =
            |si: usize, h: usize| -> Option<&[f32]> { sum_keys[si].get(h)?.as_deref() };
        // 2. One task per (segment, token, KV head, chunk of slots), each writing its own
        // part of the results buffer. For a segment of one token (a decode step) whose
        // head describes its slot, each task also updates the head state's rows it read
        // (`AppendedRows`), so that describing runs on every worker instead of in the
        // sequential merge; longer segments describe token by token in the merge.
        let tasks = &self.tasks;
        let scale = 1.0 / (d as f32).sqrt();
        let store = &*self.store;
        let mut bufs: Vec<&mut [f32]> = Vec::with_capacity(tasks.len());
        let mut rest = &mut self.results[..];
        for task in tasks {
            let (buf, tail) = std::mem::take(&mut rest).split_at_mut(task.out.len(g, d));
            bufs.push(buf);
            rest = tail;
        }
        // Per segment: its blocks and first row, and (one-token segments) this layer's
        // head states, each lent to the tasks of its head once.
        let mut views: Vec<(&[BlockId], usize)> = Vec::with_capacity(self.segments.len());
        let mut lent: Vec<(Vec<Option<&mut HeadState>>, f32)> = Vec::new();
        for seg in self.segments.iter_mut() {
            let Segment {
                blocks,
                token_start,
                n_tokens,
                describe,
                ..
            } = seg;
            views.push((&blocks[..], *token_start));
            let heads = match describe.as_mut() {
                Some((heads, threshold)) if *n_tokens == 1 => {
                    let layer_heads = heads.iter_mut().skip(layer * n_kv_heads).take(n_kv_heads);
                    (layer_heads.map(Some).collect(), *threshold)
                }
                _ => (Vec::new(), 0.0),
            };
            lent.push(heads);
        }
        let mut rows: Vec<Option<AppendedRows<'_>>> = (0..tasks.len()).map(|_| None).collect();
        let mut i = 0;
        while i < tasks.len() {
            let Task { si, t, h, .. } = tasks[i];
            let j = i + tasks[i..]
                .iter()
                .take_while(|o| (o.si, o.t, o.h) == (si, t, h))
                .count();
            let (heads, threshold) = &mut lent[si];
            if let (Some(key), Some(st)) =
                (key_of(si, t, h), heads.get_mut(h).and_then(Option::take))
            {
                let n = st.described();
                let ends = tasks[i..j].iter().map(|o| o.c1.min(n));
                let parts = st
                    .appended_parts(key, *threshold, ends)
                    .map_err(|e| format!("describing slot {n}: {e}"))?;
                for (slot, part) in rows[i..j].iter_mut().zip(parts) {
                    *slot = Some(part);
                }
            }
            i = j;
        }
        let hits: Vec<Option<(u32, f32)>> = tasks
            .par_iter()
            .zip(bufs)
            .zip(rows)
            .map_init(Scratch::default, |scratch, ((task, buf), rows)| {
                let Task {
                    si, t, h, c0, c1, ..
                } = *task;
                let (blocks, token_start) = views[si];
                let row = token_start + t;
                let qs = &q[(row * n_heads + h * g) * d..(row * n_heads + (h + 1) * g) * d];
                let chunk = Chunk {
                    runs: Runs {
                        blocks,
                        run_start: |b: BlockId| layout.elem_offset(b, layer, h, 0) / d,
                        bs,
                        s: c0,
                        c1,
                    },
                    d,
                    qs,
                    scale,
                    c0,
                    c1,
                    describe: key_of(si, t, h),
                    sum_key: sum_key_of(si, h).filter(|_| task.out.sums),
                };
                let out = task.out.split_mut(&mut *buf, g, d);
                match (&store.keys, &store.values) {
                    (KvBuf::F16(kb), KvBuf::F16(vb)) => partial::<f16, _>(
                        kb.reinterpret_cast::<f16>(),
                        vb.reinterpret_cast::<f16>(),
                        &chunk,
                        scratch,
                        out,
                    ),
                    (KvBuf::F32(kb), KvBuf::F32(vb)) => {
                        partial::<f32, _>(kb, vb, &chunk, scratch, out)
                    }
                    (KvBuf::Q8_0(kb), KvBuf::Q8_0(vb)) => {
                        partial::<BlockQ8_0, _>(kb, vb, &chunk, scratch, out)
                    }
                    _ => unreachable!("keys and values share one dtype"),
                }
                // The rows this task read, described from the dots it just computed (the
                // chunk's rows from its first; the token's own slot is not among them).
                let part = rows?;
                let dots = task.out.split_mut(buf, g, d).dots?;
                let len = part.len();
                part.describe(&dots[..len])
            })
            .collect();
        drop(lent);
        // 3. Merge the chunks of each (segment, token, KV head) and record observations.
        let results = &self.results;
        let part = |task: &Task| task.out.view(results, g, d);
        let mut dots = Vec::new();
        let mut i = 0;
        while i < tasks.len() {
            let Task { si, t, h, .. } = tasks[i];
            let mut j = i;
            while j < tasks.len() && (tasks[j].si, tasks[j].t, tasks[j].h) == (si, t, h) {
                j += 1;
            }
            let seg = &mut self.segments[si];
            let row = seg.token_start + t;
            for gi in 0..g {
                let group = &tasks[i..j];
                let m = group
                    .iter()
                    .map(|task| part(task).max[gi])
                    .fold(f32::NEG_INFINITY, f32::max);
                let denom: f32 = group
                    .iter()
                    .map(|task| part(task).sum[gi] * (part(task).max[gi] - m).exp())
                    .sum();
                let o = &mut out[(row * n_heads + h * g + gi) * d..][..d];
                o.fill(0.0);
                for task in group {
                    let v = part(task);
                    let w = (v.max[gi] - m).exp() / denom;
                    for (ov, av) in o.iter_mut().zip(&v.acc[gi * d..(gi + 1) * d]) {
                        *ov += w * av;
                    }
                }
                if let Some(acc) = seg.accumulate.as_mut() {
                    let buf = &mut acc[layer * n_kv_heads + h];
                    for task in group {
                        let Task { c0, c1, .. } = *task;
                        let n = c1 - c0;
                        let v = part(task);
                        let probs = v.probs.ok_or(UNLAID)?;
                        let w = v.sum[gi] * (v.max[gi] - m).exp() / denom;
                        for (s, pr) in (c0..c1).zip(&probs[gi * n..(gi + 1) * n]) {
                            buf[s] += pr * w;
                        }
                    }
                }
                if let Some((spec, win)) = seg.capture.as_mut() {
                    if t >= spec.from_token {
                        let wrow = spec.first_row + t - spec.from_token;
                        let cand = win.candidates;
                        let dst = &mut win.data[layer * n_kv_heads + h][wrow * cand..][..cand];
                        for task in group {
                            let Task { c0, c1, .. } = *task;
                            let n = c1 - c0;
                            let hi = c1.min(cand);
                            if hi > c0 {
                                let logits = part(task).logits.ok_or(UNLAID)?;
                                let src = &logits[gi * n..gi * n + hi - c0];
                                // The group's first head starts the maximum (importance's
                                // own rule, in the same head order: bit-identical).
                                if gi == 0 {
                                    dst[c0..hi].copy_from_slice(src);
                                } else {
                                    max_into(&mut dst[c0..hi], src);
                                }
                            }
                        }
                    }
                }
            }
            // The token's slot joins its head's bookkeeping (tokens in order: tasks are):
            // a one-token segment's rows were described by the tasks, which found the last
            // row matching it; a longer segment's are described here, token by token.
            if let (Some(key), Some((heads, threshold))) = (key_of(si, t, h), seg.describe.as_mut())
            {
                let slot = seg.len_before + t;
                let st = &mut heads[layer * n_kv_heads + h];
                let done = if seg.n_tokens == 1 {
                    let last = hits[i..j].iter().flatten().max_by_key(|(r, _)| *r).copied();
                    st.finish_appended(key, *threshold, last)
                } else {
                    dots.clear();
                    for task in &tasks[i..j] {
                        dots.extend_from_slice(part(task).dots.ok_or(UNLAID)?);
                    }
                    dots.truncate(slot); // the slot's own entry is not a dot the state takes
                    st.describe_appended(key, &dots, *threshold)
                };
                // The last token's tasks took every row's product with the key sum.
                let sums = match sum_key_of(si, h) {
                    Some(sum_key) if t + 1 == seg.n_tokens => {
                        let mut sums = Vec::with_capacity(slot + 1);
                        for task in &tasks[i..j] {
                            sums.extend_from_slice(part(task).sums.ok_or(UNLAID)?);
                        }
                        Some((sum_key.to_vec(), sums))
                    }
                    _ => None,
                };
                let done = done.and_then(|()| match sums {
                    Some((sum_key, sums)) => st.set_sum_dots(sum_key, sums),
                    None => Ok(()),
                });
                if let Err(e) = done {
                    // Rows the tasks updated point at a slot the state does not hold.
                    st.reset();
                    return Err(format!("describing slot {slot}: {e}"));
                }
            }
            i = j;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window buffer too large to exist is an error, not an abort; a normal one is zeroed.
    #[test]
    fn window_buffers_are_allocated_fallibly() {
        let shape = AttentionShape {
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 8,
        };
        let ok = WindowLogits::new(&shape, 8, 100).expect("small");
        assert_eq!(ok.data.len(), 4);
        assert!(ok
            .data
            .iter()
            .all(|b| b.len() == 800 && b.iter().all(|&x| x == 0.0)));
        for (w, c) in [(usize::MAX / 2, 3), (1 << 22, 1 << 22)] {
            assert!(matches!(
                WindowLogits::new(&shape, w, c),
                Err(EngineError::WindowAlloc { .. })
            ));
        }
    }
}
