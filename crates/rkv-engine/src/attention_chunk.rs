//! One attention task: a query token's group of query heads against one chunk of a KV
//! head's slots, read in place from the paged store, with f32 accumulation over f16, f32
//! or q8_0 storage (8-bit rows read as they lie, never widened as a whole); the partial
//! result the online-softmax merge of `paged_attention` combines,
//! and what the policies observe on the way (probabilities, raw logits, the token's key's
//! dot products with the chunk's keys).
//!
//! Owns: the chunk's contiguous runs, the per-task arithmetic, where a task's results lie
//! in the forward's results buffer ([`TaskLayout`]) and the scratch a worker reuses across
//! its tasks ([`Scratch`]). A task allocates nothing that another thread frees: its
//! results go to a buffer the forward's thread allocated once, its scratch is freed by
//! the worker that made it (memory freed across threads contended for the allocator's
//! arena locks, and put the workers to sleep on them, about once per layer and token).
//! Must not know: which policy uses the observations, models' weights, HTTP.

use crate::kv::BlockId;
use half::f16;
use rkv_core::exp::{exp_slice, max_lanes};
use rkv_core::policy::appended_dots;
use rkv_kernels::{BlockQ8_0, QK};

/// Element types the store keeps, with the batched GQA kernels over one contiguous run of
/// `n` slots: `scores[i, j] = q_i . k_j` and `out[i] += sum_j w[i, j] v_j`.
pub(crate) trait KvElem: Copy + Send + Sync {
    /// Values one element holds: 1, or 32 for a q8_0 block (a row is `d / VALUES`
    /// elements).
    const VALUES: usize = 1;
    /// Rounds operands the way ggml's f16 matmuls do (no-op for f32 and q8_0 storage,
    /// whose products keep f32 queries and probabilities).
    fn round(x: &mut [f32]);
    fn scores(k: &[Self], d: usize, qs: &[f32], scores: &mut [f32]);
    fn weighted_sum(v: &[Self], d: usize, w: &[f32], out: &mut [f32]);
    /// `dots[j] = key . row j` for the first `dots.len()` rows of `run`, in rkv-core's
    /// fixed order over the rows as f32 (`widened` is scratch for types stored
    /// otherwise), so that the redundancy's threshold decisions are the oracle's on the
    /// keys as policies read them.
    fn key_dots(key: &[f32], run: &[Self], dots: &mut [f32], widened: &mut Vec<f32>);
}

impl KvElem for f16 {
    fn round(x: &mut [f32]) {
        rkv_kernels::attn::round_through_f16(x)
    }
    fn scores(k: &[Self], d: usize, qs: &[f32], scores: &mut [f32]) {
        rkv_kernels::gqa::gqa_scores_f16(k, d, d, qs, scores)
    }
    fn weighted_sum(v: &[Self], d: usize, w: &[f32], out: &mut [f32]) {
        rkv_kernels::gqa::gqa_weighted_sum_f16(v, d, d, w, out)
    }
    fn key_dots(key: &[f32], run: &[Self], dots: &mut [f32], _: &mut Vec<f32>) {
        appended_dots(key, run, dots)
    }
}

impl KvElem for BlockQ8_0 {
    const VALUES: usize = QK;
    fn round(_: &mut [f32]) {}
    fn scores(k: &[Self], d: usize, qs: &[f32], scores: &mut [f32]) {
        rkv_kernels::gqa_q8::gqa_scores_q8_0(k, d, qs, scores)
    }
    fn weighted_sum(v: &[Self], d: usize, w: &[f32], out: &mut [f32]) {
        rkv_kernels::gqa_q8::gqa_weighted_sum_q8_0(v, d, w, out)
    }
    fn key_dots(key: &[f32], run: &[Self], dots: &mut [f32], widened: &mut Vec<f32>) {
        // The run dequantised (exact), as `KvStore::read_keys_into` gives policies.
        let rows = sized(widened, dots.len() * key.len());
        for (blk, out) in run.iter().zip(rows.chunks_exact_mut(QK)) {
            let s = blk.d.to_f32();
            for (o, &q) in out.iter_mut().zip(&blk.qs) {
                *o = s * f32::from(q);
            }
        }
        appended_dots(key, rows, dots)
    }
}

impl KvElem for f32 {
    fn round(_: &mut [f32]) {}
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
    fn key_dots(key: &[f32], run: &[Self], dots: &mut [f32], _: &mut Vec<f32>) {
        appended_dots(key, run, dots)
    }
}

/// Slots per task: equal chunks of at least about 256 slots (so scheduling costs little),
/// at most 8 per head (so long contexts spread over threads without many merges).
pub(crate) fn chunk_len(visible: usize) -> usize {
    let n = visible.div_ceil(256).clamp(1, 8);
    visible.div_ceil(n)
}

/// The contiguous runs `(slot_from, slot_to, slot offset in storage)` covering slots
/// `c0..c1` of a sequence whose blocks are `blocks`, `bs` slots each, where `run_start`
/// gives the storage slot of a block's first slot. An iterator (read three times per
/// task, allocating nothing).
#[derive(Clone)]
pub(crate) struct Runs<'a, F> {
    pub blocks: &'a [BlockId],
    pub run_start: F,
    pub bs: usize,
    /// Next slot to cover, and the end.
    pub s: usize,
    pub c1: usize,
}

impl<F: Fn(BlockId) -> usize> Iterator for Runs<'_, F> {
    type Item = (usize, usize, usize);
    fn next(&mut self) -> Option<Self::Item> {
        let s = self.s;
        if s >= self.c1 {
            return None;
        }
        let e = ((s / self.bs + 1) * self.bs).min(self.c1);
        self.s = e;
        Some((
            s,
            e,
            (self.run_start)(self.blocks[s / self.bs]) + (s % self.bs),
        ))
    }
}

/// What one attention task computes over: one query token's `g` query heads against one
/// chunk `c0..c1` of a KV head's slots.
pub(crate) struct Chunk<'a, R> {
    pub runs: R, // contiguous runs of c0..c1, see [`Runs`]
    pub d: usize,
    pub qs: &'a [f32], // [g, d]
    pub scale: f32,
    pub c0: usize,
    pub c1: usize,
    pub describe: Option<&'a [f32]>, // [d] the token's key as stored, when described
    pub sum_key: Option<&'a [f32]>,  // [d] the key sum whose products `out.sums` takes
}

/// Where one task's results lie in the forward's results buffer: `[g]` running maximum,
/// `[g]` sum, `[g, d]` accumulator, then what the policies keep, each only when kept:
/// `[g, n]` chunk-normalised probabilities (H2O), `[g, n]` raw logits (captured window
/// tokens), `[n]` the token's key's dot products with the chunk's keys (R-KV), `[n]` the
/// chunk's keys' products with the key sum (R-KV, the last token of a forward that leads
/// to a compression). The same for every layer of a forward.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskLayout {
    pub at: usize,
    pub n: usize,
    pub probs: bool,
    pub logits: bool,
    pub dots: bool,
    pub sums: bool,
}

/// One task's results, in the buffer (`T` is `&[f32]` to read, `&mut [f32]` to write).
pub(crate) struct TaskOut<T> {
    pub max: T,            // [g]
    pub sum: T,            // [g]
    pub acc: T,            // [g, d]
    pub probs: Option<T>,  // [g, n]
    pub logits: Option<T>, // [g, n]
    pub dots: Option<T>,   // [n]
    pub sums: Option<T>,   // [n]
}

impl TaskLayout {
    /// Values the task's results take.
    pub fn len(&self, g: usize, d: usize) -> usize {
        let gn = g * self.n;
        2 * g
            + g * d
            + usize::from(self.probs) * gn
            + usize::from(self.logits) * gn
            + usize::from(self.dots) * self.n
            + usize::from(self.sums) * self.n
    }

    /// The results in `buf` (exactly [`TaskLayout::len`] values, this task's own).
    pub fn split_mut<'b>(&self, buf: &'b mut [f32], g: usize, d: usize) -> TaskOut<&'b mut [f32]> {
        self.carve(buf, g, d)
    }

    /// The results in the whole buffer `all`, to read.
    pub fn view<'b>(&self, all: &'b [f32], g: usize, d: usize) -> TaskOut<&'b [f32]> {
        self.carve(&all[self.at..self.at + self.len(g, d)], g, d)
    }

    /// `buf` cut into the fields, in layout order.
    fn carve<S: Cut>(&self, buf: S, g: usize, d: usize) -> TaskOut<S> {
        let (max, rest) = buf.cut(g);
        let (sum, rest) = rest.cut(g);
        let (acc, mut rest) = rest.cut(g * d);
        let mut take = |on: bool, len: usize| {
            on.then(|| {
                let (a, b) = std::mem::take(&mut rest).cut(len);
                rest = b;
                a
            })
        };
        let probs = take(self.probs, g * self.n);
        let logits = take(self.logits, g * self.n);
        let dots = take(self.dots, self.n);
        let sums = take(self.sums, self.n);
        TaskOut {
            max,
            sum,
            acc,
            probs,
            logits,
            dots,
            sums,
        }
    }
}

/// A slice that splits in two at an index: shared or mutable, for [`TaskLayout::carve`].
trait Cut: Sized + Default {
    fn cut(self, at: usize) -> (Self, Self);
}

impl Cut for &[f32] {
    fn cut(self, at: usize) -> (Self, Self) {
        self.split_at(at)
    }
}

impl Cut for &mut [f32] {
    fn cut(self, at: usize) -> (Self, Self) {
        self.split_at_mut(at)
    }
}

/// Buffers a worker reuses across the tasks it runs (made and freed on that worker).
#[derive(Default)]
pub(crate) struct Scratch {
    qr: Vec<f32>,     // [g, d] the queries, rounded like the cache's operands
    logits: Vec<f32>, // [g, n] logits, then probabilities
    tmp: Vec<f32>,    // [g, run] one run's scores, then its weights
    rows: Vec<f32>,   // [run, d] one run's q8_0 keys dequantised, for R-KV's dots
}

/// Resizes `v` to `n` values (their contents are overwritten before they are read).
fn sized(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    v.resize(n, 0.0);
    &mut v[..n]
}

/// Runs one task: writes its results to `out` (see [`TaskLayout`]; `out.dots` is written
/// only when `chunk.describe` is given, `out.sums` when `chunk.sum_key` is).
pub(crate) fn partial<E: KvElem, R>(
    keys: &[E],
    values: &[E],
    chunk: &Chunk<'_, R>,
    scratch: &mut Scratch,
    out: TaskOut<&mut [f32]>,
) where
    R: Iterator<Item = (usize, usize, usize)> + Clone,
{
    let Chunk {
        d,
        qs,
        scale,
        c0,
        c1,
        describe,
        sum_key,
        ..
    } = *chunk;
    let g = qs.len() / d;
    let n = c1 - c0;
    let Scratch {
        qr,
        logits,
        tmp,
        rows,
    } = scratch;
    // Elements of one row in storage (`d`, or `d / 32` q8_0 blocks).
    let de = d / E::VALUES;
    // ggml multiplies an f16 cache with f16 copies of its operands: the queries here, the
    // probabilities below. Doing the same keeps f16-KV runs token-equal to llama.cpp.
    let qr = sized(qr, g * d);
    qr.copy_from_slice(&qs[..g * d]);
    E::round(qr);
    let qs = &*qr;
    let logits = sized(logits, g * n); // [g, n]
    let longest = chunk.runs.clone().map(|r| r.1 - r.0).max().unwrap_or(0);
    let tmp = sized(tmp, g * longest); // [g, run]
    let mut dots = describe.zip(out.dots);
    let mut sums = sum_key.zip(out.sums);
    for (s0, s1, off) in chunk.runs.clone() {
        let m = s1 - s0;
        let t = &mut tmp[..g * m];
        let run = &keys[off * de..(off + m) * de];
        E::scores(run, d, qs, t);
        for i in 0..g {
            let dst = &mut logits[i * n + s0 - c0..i * n + s1 - c0];
            for (o, &x) in dst.iter_mut().zip(&t[i * m..(i + 1) * m]) {
                *o = x * scale;
            }
        }
        // The key's dot products with the rows just read (still in the L1 cache), in
        // rkv-core's fixed order (the redundancy's threshold decisions must be the
        // oracle's).
        if let Some((key, dots)) = dots.as_mut() {
            E::key_dots(key, run, &mut dots[s0 - c0..s1 - c0], rows);
        }
        if let Some((sum_key, sums)) = sums.as_mut() {
            E::key_dots(sum_key, run, &mut sums[s0 - c0..s1 - c0], rows);
        }
    }
    if let Some(kept) = out.logits {
        kept.copy_from_slice(logits);
    }
    for i in 0..g {
        let row = &mut logits[i * n..(i + 1) * n];
        // Vectorised max and exp (rkv-core's, which the importance's softmax uses too).
        let m = max_lanes(row);
        let s_ = exp_slice(row, m);
        // Weights are the chunk's normalised probabilities (rounded like ggml's), scaled
        // back by the chunk sum so chunks merge by the online-softmax rule.
        for l in row.iter_mut() {
            *l /= s_;
        }
        E::round(row);
        out.max[i] = m;
        out.sum[i] = s_;
    }
    let acc = out.acc;
    acc.fill(0.0);
    for (s0, s1, off) in chunk.runs.clone() {
        let m = s1 - s0;
        let t = &mut tmp[..g * m];
        for i in 0..g {
            t[i * m..(i + 1) * m].copy_from_slice(&logits[i * n + s0 - c0..i * n + s1 - c0]);
        }
        E::weighted_sum(&values[off * de..(off + m) * de], d, t, acc);
    }
    for i in 0..g {
        acc[i * d..(i + 1) * d]
            .iter_mut()
            .for_each(|a| *a *= out.sum[i]);
    }
    if let Some(probs) = out.probs {
        probs.copy_from_slice(logits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runs cover the chunk in order, split at block ends, each at its block's
    /// storage.
    #[test]
    fn runs_split_at_blocks() {
        let blocks: [BlockId; 3] = [7, 2, 5];
        let runs = Runs {
            blocks: &blocks,
            run_start: |b: BlockId| 100 * b as usize,
            bs: 4,
            s: 3,
            c1: 10,
        };
        assert_eq!(
            runs.collect::<Vec<_>>(),
            vec![(3, 4, 703), (4, 8, 200), (8, 10, 500)]
        );
    }

    /// Every field of a layout lies in its own part of the buffer, and what is written
    /// through `split_mut` is read back by `view` at the task's offset.
    #[test]
    fn layout_round_trips() {
        let (g, d) = (2, 3);
        let lay = TaskLayout {
            at: 5,
            n: 4,
            probs: false,
            logits: true,
            dots: true,
            sums: true,
        };
        assert_eq!(lay.len(g, d), 2 + 2 + 6 + 8 + 4 + 4);
        let mut all = vec![0.0f32; 5 + lay.len(g, d)];
        let out = lay.split_mut(&mut all[5..], g, d);
        assert!(out.probs.is_none());
        out.max.fill(1.0);
        out.sum.fill(2.0);
        out.acc.fill(3.0);
        out.logits.expect("kept").fill(4.0);
        out.dots.expect("kept").fill(5.0);
        out.sums.expect("kept").fill(6.0);
        let v = lay.view(&all, g, d);
        assert_eq!(v.max, &[1.0; 2]);
        assert_eq!(v.sum, &[2.0; 2]);
        assert_eq!(v.acc, &[3.0; 6]);
        assert_eq!(v.logits.expect("kept"), &[4.0; 8]);
        assert_eq!(v.dots.expect("kept"), &[5.0; 4]);
        assert_eq!(v.sums.expect("kept"), &[6.0; 4]);
        assert_eq!(all[..5], [0.0; 5]);
    }
}
