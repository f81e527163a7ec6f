//! The engine's attention over paged KV memory, called by models through
//! [`rkv_model::Attention`].
//!
//! Owns: appending each forward's keys/values to the sequences' blocks, causal attention
//! with f32 accumulation over f16 or f32 storage (split over slot chunks and merged with
//! the online-softmax rule of flash-decoding), and observing what policies need while it
//! runs: the raw logits of the observation window's queries (R-KV, SnapKV), accumulated
//! attention probabilities (H2O), and for R-KV each appended key's dot products with the
//! keys it attends over, which describe the new slot in the head's redundancy
//! bookkeeping while those keys are in cache (`HeadState::describe_appended`), so that a
//! compression has no similar-slot scan left to run. Nothing is recomputed for
//! compression.
//! Must not know: which policy will use the observations, models' weights, HTTP.

use half::f16;
use half::slice::HalfBitsSliceExt;
use rayon::prelude::*;
use rkv_core::block_pool::BlockId;
use rkv_core::exp::{exp_slice, max_lanes};
use rkv_core::policy::importance::max_into;
use rkv_core::policy::{appended_dots, HeadState, KeyElem};
use rkv_model::{Attention, AttentionShape};

use crate::error::EngineError;
use crate::kv_store::{KvBuf, KvStore};

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
}

/// Partial attention of one query token over one chunk of slots, for the `g` query heads
/// of one KV head.
struct Partial {
    max: Vec<f32>,    // [g]
    sum: Vec<f32>,    // [g]
    acc: Vec<f32>,    // [g, head_dim]
    probs: Vec<f32>,  // [g, chunk] chunk-normalised probabilities, kept only for H2O
    logits: Vec<f32>, // [g, chunk] raw logits, kept only when captured
    dots: Vec<f32>,   // [chunk] the token's key . each slot's key, only when described
}

pub struct PagedAttention<'a> {
    store: &'a mut KvStore,
    shape: AttentionShape,
    pub segments: Vec<Segment>,
    /// `(segment, token, KV head, first slot, end slot)`: one attention task per chunk of
    /// visible slots; the same for every layer, so built once.
    tasks: Vec<(usize, usize, usize, usize, usize)>,
}

impl<'a> PagedAttention<'a> {
    pub fn new(store: &'a mut KvStore, shape: AttentionShape, segments: Vec<Segment>) -> Self {
        let mut tasks = Vec::new();
        for (si, seg) in segments.iter().enumerate() {
            for t in 0..seg.n_tokens {
                let visible = seg.len_before + t + 1;
                let cl = chunk_len(visible);
                for h in 0..shape.n_kv_heads {
                    let mut c0 = 0;
                    while c0 < visible {
                        let c1 = (c0 + cl).min(visible);
                        tasks.push((si, t, h, c0, c1));
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
        }
    }
}

/// Element types the store keeps, with the batched GQA kernels over one contiguous run of
/// `n` slots: `scores[i, j] = q_i . k_j` and `out[i] += sum_j w[i, j] v_j`.
trait KvElem: KeyElem {
    /// Rounds operands the way ggml's f16 matmuls do (no-op for f32 storage).
    fn round(x: f32) -> f32;
    fn scores(k: &[Self], d: usize, qs: &[f32], scores: &mut [f32]);
    fn weighted_sum(v: &[Self], d: usize, w: &[f32], out: &mut [f32]);
}

impl KvElem for f16 {
    fn round(x: f32) -> f32 {
        f16::from_f32(x).to_f32()
    }
    fn scores(k: &[Self], d: usize, qs: &[f32], scores: &mut [f32]) {
        rkv_kernels::gqa::gqa_scores_f16(k, d, d, qs, scores)
    }
    fn weighted_sum(v: &[Self], d: usize, w: &[f32], out: &mut [f32]) {
        rkv_kernels::gqa::gqa_weighted_sum_f16(v, d, d, w, out)
    }
}

impl KvElem for f32 {
    fn round(x: f32) -> f32 {
        x
    }
    fn scores(k: &[Self], d: usize, qs: &[f32], scores: &mut [f32]) {
        let g = qs.len() / d;
        let n = scores.len() / g;
        for (i, q) in qs.chunks_exact(d).enumerate() {
            for (j, kr) in k.chunks_exact(d).take(n).enumerate() {
                scores[i * n + j] = rkv_kernels::attn::dot_f32(kr, q);
            }
        }
    }
    fn weighted_sum(v: &[Self], d: usize, w: &[f32], out: &mut [f32]) {
        let g = out.len() / d;
        let n = w.len() / g;
        for (i, o) in out.chunks_exact_mut(d).enumerate() {
            for (j, vr) in v.chunks_exact(d).take(n).enumerate() {
                rkv_kernels::attn::axpy_f32(o, w[i * n + j], vr);
            }
        }
    }
}

/// Slots per task: equal chunks of at least about 256 slots (so scheduling costs little),
/// at most 8 per head (so long contexts spread over threads without many merges).
fn chunk_len(visible: usize) -> usize {
    let n = visible.div_ceil(256).clamp(1, 8);
    visible.div_ceil(n)
}

/// The contiguous runs `(slot_from, slot_to, slot offset in storage)` covering slots
/// `c0..c1`, where `run_start(block)` is the storage slot of the block's first slot.
fn runs(
    blocks: &[BlockId],
    run_start: impl Fn(BlockId) -> usize,
    bs: usize,
    c0: usize,
    c1: usize,
) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let mut s = c0;
    while s < c1 {
        let e = ((s / bs + 1) * bs).min(c1);
        out.push((s, e, run_start(blocks[s / bs]) + (s % bs)));
        s = e;
    }
    out
}

/// What one attention task computes over: one query token's `g` query heads against one
/// chunk `c0..c1` of a KV head's slots, and what it keeps for the policies.
struct Chunk<'a> {
    runs: &'a [(usize, usize, usize)], // contiguous runs of c0..c1, see `runs`
    d: usize,
    qs: &'a [f32], // [g, d]
    scale: f32,
    c0: usize,
    c1: usize,
    keep_probs: bool,
    keep_logits: bool,
    describe: Option<&'a [f32]>, // [d] the token's key as stored, when described
}

fn partial<E: KvElem>(keys: &[E], values: &[E], chunk: &Chunk<'_>) -> Partial {
    let Chunk {
        runs,
        d,
        qs,
        scale,
        c0,
        c1,
        keep_probs,
        keep_logits,
        describe,
    } = *chunk;
    let g = qs.len() / d;
    let n = c1 - c0;
    // ggml multiplies an f16 cache with f16 copies of its operands: the queries here, the
    // probabilities below. Doing the same keeps f16-KV runs token-equal to llama.cpp.
    let qr: Vec<f32> = qs.iter().map(|&x| E::round(x)).collect();
    let qs = &qr[..];
    let mut logits = vec![0f32; g * n]; // [g, n]
    let longest = runs.iter().map(|r| r.1 - r.0).max().unwrap_or(0);
    let mut tmp = vec![0f32; g * longest]; // [g, run]
    for &(s0, s1, off) in runs {
        let m = s1 - s0;
        let t = &mut tmp[..g * m];
        E::scores(&keys[off * d..(off + m) * d], d, qs, t);
        for i in 0..g {
            let dst = &mut logits[i * n + s0 - c0..i * n + s1 - c0];
            for (o, &x) in dst.iter_mut().zip(&t[i * m..(i + 1) * m]) {
                *o = x * scale;
            }
        }
    }
    let kept_logits = if keep_logits {
        logits.clone()
    } else {
        Vec::new()
    };
    // The key's dot products with the rows just read (still in cache), in rkv-core's
    // fixed order (the redundancy's threshold decisions must be the oracle's).
    let mut dots = Vec::new();
    if let Some(key) = describe {
        dots.resize(n, 0.0);
        for &(s0, s1, off) in runs {
            appended_dots(
                key,
                &keys[off * d..(off + s1 - s0) * d],
                &mut dots[s0 - c0..s1 - c0],
            );
        }
    }
    let mut max = vec![f32::NEG_INFINITY; g];
    let mut sum = vec![0f32; g];
    for i in 0..g {
        let row = &mut logits[i * n..(i + 1) * n];
        // Vectorised max and exp (rkv-core's, which the importance's softmax uses too).
        let m = max_lanes(row);
        let s_ = exp_slice(row, m);
        // Weights are the chunk's normalised probabilities (rounded like ggml's), scaled
        // back by the chunk sum so chunks merge by the online-softmax rule.
        for l in row.iter_mut() {
            *l = E::round(*l / s_);
        }
        max[i] = m;
        sum[i] = s_;
    }
    let mut acc = vec![0f32; g * d];
    for &(s0, s1, off) in runs {
        let m = s1 - s0;
        let t = &mut tmp[..g * m];
        for i in 0..g {
            t[i * m..(i + 1) * m].copy_from_slice(&logits[i * n + s0 - c0..i * n + s1 - c0]);
        }
        E::weighted_sum(&values[off * d..(off + m) * d], d, t, &mut acc);
    }
    for i in 0..g {
        acc[i * d..(i + 1) * d]
            .iter_mut()
            .for_each(|a| *a *= sum[i]);
    }
    Partial {
        max,
        sum,
        acc,
        probs: if keep_probs { logits } else { Vec::new() },
        logits: kept_logits,
        dots,
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
                    self.store.write_slot(
                        &seg.blocks,
                        layer,
                        h,
                        seg.len_before + t,
                        seg.first_position + t as u32,
                        &k[at..at + d],
                        &v[at..at + d],
                    );
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
        // 2. One task per (segment, token, KV head, chunk of slots).
        let tasks = &self.tasks;
        let scale = 1.0 / (d as f32).sqrt();
        let segs = &self.segments;
        let store = &*self.store;
        let partials: Vec<Partial> = tasks
            .par_iter()
            .map(|&(si, t, h, c0, c1)| {
                let seg = &segs[si];
                let row = seg.token_start + t;
                let qs = &q[(row * n_heads + h * g) * d..(row * n_heads + (h + 1) * g) * d];
                let offs = runs(
                    &seg.blocks,
                    |b| layout.elem_offset(b, layer, h, 0) / d,
                    bs,
                    c0,
                    c1,
                );
                let chunk = Chunk {
                    runs: &offs,
                    d,
                    qs,
                    scale,
                    c0,
                    c1,
                    keep_probs: seg.accumulate.is_some(),
                    keep_logits: seg.capture.as_ref().is_some_and(|(c, _)| t >= c.from_token),
                    describe: key_of(si, t, h),
                };
                match (&store.keys, &store.values) {
                    (KvBuf::F16(kb), KvBuf::F16(vb)) => partial::<f16>(
                        kb.reinterpret_cast::<f16>(),
                        vb.reinterpret_cast::<f16>(),
                        &chunk,
                    ),
                    (KvBuf::F32(kb), KvBuf::F32(vb)) => partial::<f32>(kb, vb, &chunk),
                    _ => unreachable!("keys and values share one dtype"),
                }
            })
            .collect();
        // 3. Merge the chunks of each (segment, token, KV head) and record observations.
        let mut dots = Vec::new();
        let mut i = 0;
        while i < tasks.len() {
            let (si, t, h, _, _) = tasks[i];
            let mut j = i;
            while j < tasks.len() && tasks[j].0 == si && tasks[j].1 == t && tasks[j].2 == h {
                j += 1;
            }
            let seg = &mut self.segments[si];
            let row = seg.token_start + t;
            for gi in 0..g {
                let m = (i..j)
                    .map(|p| partials[p].max[gi])
                    .fold(f32::NEG_INFINITY, f32::max);
                let denom: f32 = (i..j)
                    .map(|p| partials[p].sum[gi] * (partials[p].max[gi] - m).exp())
                    .sum();
                let o = &mut out[(row * n_heads + h * g + gi) * d..][..d];
                o.fill(0.0);
                for part in &partials[i..j] {
                    let w = (part.max[gi] - m).exp() / denom;
                    for (ov, av) in o.iter_mut().zip(&part.acc[gi * d..(gi + 1) * d]) {
                        *ov += w * av;
                    }
                }
                if let Some(acc) = seg.accumulate.as_mut() {
                    let buf = &mut acc[layer * n_kv_heads + h];
                    for p in i..j {
                        let (_, _, _, c0, c1) = tasks[p];
                        let n = c1 - c0;
                        let w = partials[p].sum[gi] * (partials[p].max[gi] - m).exp() / denom;
                        for (s, pr) in (c0..c1).zip(&partials[p].probs[gi * n..(gi + 1) * n]) {
                            buf[s] += pr * w;
                        }
                    }
                }
                if let Some((spec, win)) = seg.capture.as_mut() {
                    if t >= spec.from_token {
                        let wrow = spec.first_row + t - spec.from_token;
                        let cand = win.candidates;
                        let dst = &mut win.data[layer * n_kv_heads + h][wrow * cand..][..cand];
                        for p in i..j {
                            let (_, _, _, c0, c1) = tasks[p];
                            let n = c1 - c0;
                            let hi = c1.min(cand);
                            if hi > c0 {
                                let src = &partials[p].logits[gi * n..gi * n + hi - c0];
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
            // The token's slot joins its head's bookkeeping (tokens in order: tasks are).
            if let (Some(key), Some((heads, threshold))) = (key_of(si, t, h), seg.describe.as_mut())
            {
                let slot = seg.len_before + t;
                dots.clear();
                for part in &partials[i..j] {
                    dots.extend_from_slice(&part.dots);
                }
                dots.truncate(slot); // the slot's own entry is not a dot the state takes
                heads[layer * n_kv_heads + h]
                    .describe_appended(key, &dots, *threshold)
                    .map_err(|e| format!("describing slot {slot}: {e}"))?;
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
