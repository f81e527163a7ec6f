//! The paged KV store: block storage for keys, values and per-slot positions.
//!
//! Owns the memory of every sequence's cache (DESIGN.md §3): a pool of fixed-size blocks;
//! a block holds `block_size` slots for every layer and KV head of one sequence, laid out
//! so that one (layer, head) run of slots is contiguous. Positions live per
//! (layer, head, slot), never derived from the slot index. Compaction moves rows within
//! a sequence's own blocks; the table then returns its freed tail blocks.
//! Rows are stored as f16, f32 or ggml `q8_0` blocks (32 signed 8-bit values and one f16
//! scale each, quantised when a row is written; a row of `head_dim` values is
//! `head_dim / 32` blocks, so moving a row moves its scales with it); docs/kv-dtype.md.
//! Must not know: models' maths, policies' scoring, HTTP.

use super::dtype::KvDtype;
use super::pool::{BlockId, BlockPool, BlockTable};
use std::ops::Range;

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use rkv_core::policy::{KeyRows, PolicyError, Rows};
use rkv_kernels::{quantize_row_q8_0, BlockQ8_0, QK};

use crate::error::{EngineError, Result};

/// Index arithmetic of the block layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
}

impl KvLayout {
    /// Values of keys (or of values) per block.
    pub fn block_elems(&self) -> usize {
        self.n_layers * self.n_kv_heads * self.block_size * self.head_dim
    }

    /// [`Self::block_elems`], `None` when it overflows (checked before a pool is built).
    fn checked_block_elems(&self) -> Option<usize> {
        [self.n_kv_heads, self.block_size, self.head_dim]
            .iter()
            .try_fold(self.n_layers, |acc, &x| acc.checked_mul(x))
    }

    /// Bytes of keys and values one block holds at `dtype` (for q8_0, its quants and
    /// scales). Saturates rather than overflows.
    pub fn bytes_per_block(&self, dtype: KvDtype) -> usize {
        self.checked_block_elems()
            .and_then(|v| dtype.bytes_of(v))
            .and_then(|b| b.checked_mul(2))
            .unwrap_or(usize::MAX)
    }

    /// Index of the run (block, layer, head): `block_size` consecutive slots.
    fn run(&self, block: BlockId, layer: usize, head: usize) -> usize {
        (block as usize * self.n_layers + layer) * self.n_kv_heads + head
    }

    /// Element offset of slot `off` of run (block, layer, head) in the key/value buffers.
    pub fn elem_offset(&self, block: BlockId, layer: usize, head: usize, off: usize) -> usize {
        (self.run(block, layer, head) * self.block_size + off) * self.head_dim
    }

    /// Offset of slot `off` of run (block, layer, head) in the position buffer.
    pub fn pos_offset(&self, block: BlockId, layer: usize, head: usize, off: usize) -> usize {
        self.run(block, layer, head) * self.block_size + off
    }
}

/// Key or value storage of the whole pool. Offsets (`at`, `len`) count values; for
/// q8_0 they are multiples of 32 (rows of whole blocks), and value `at` is block `at / 32`.
pub enum KvBuf {
    F16(Vec<u16>), // [n_blocks, n_layers, n_kv_heads, block_size, head_dim], f16 bits
    F32(Vec<f32>), // [n_blocks, n_layers, n_kv_heads, block_size, head_dim]
    Q8_0(Vec<BlockQ8_0>), // [n_blocks, n_layers, n_kv_heads, block_size, head_dim / 32]
}

impl KvBuf {
    /// `n` zeros, or `None` when the allocator refuses. Zeroed vectors of primitives come
    /// from the allocator's zeroed pages: memory is only touched (resident) once a block
    /// is first written.
    fn zeroed(dtype: KvDtype, n: usize) -> Option<Self> {
        use bytemuck::allocation::try_zeroed_vec;
        match dtype {
            KvDtype::F16 => try_zeroed_vec::<u16>(n).ok().map(KvBuf::F16),
            KvDtype::F32 => try_zeroed_vec::<f32>(n).ok().map(KvBuf::F32),
            // An all-zero block is scale 0 and quants 0: the value 0, as for f16.
            KvDtype::Q8_0 => try_zeroed_vec::<BlockQ8_0>(n / QK).ok().map(KvBuf::Q8_0),
        }
    }

    /// Writes `src` (f32) at `at`; q8_0 quantises it (ggml's `quantize_row_q8_0`, as
    /// llama.cpp writes a q8_0 cache on x86: `d = max|x| / 127`, `q = round(x / d)`).
    /// An error only when `at` or `src.len()` is not a multiple of 32 in a q8_0 buffer.
    pub fn write(&mut self, at: usize, src: &[f32]) -> Result<()> {
        match self {
            KvBuf::F16(b) => b[at..at + src.len()]
                .reinterpret_cast_mut::<f16>()
                .convert_from_f32_slice(src),
            KvBuf::F32(b) => b[at..at + src.len()].copy_from_slice(src),
            KvBuf::Q8_0(b) => {
                let blocks = q8_span(b, at, src.len())?;
                quantize_row_q8_0(src, blocks).map_err(|e| EngineError::Failed(e.to_string()))?
            }
        }
        Ok(())
    }

    /// Reads `dst.len()` values at `at` as f32 (q8_0 dequantised: exact, `d * q`).
    pub fn read(&self, at: usize, dst: &mut [f32]) {
        match self {
            KvBuf::F16(b) => b[at..at + dst.len()]
                .reinterpret_cast::<f16>()
                .convert_to_f32_slice(dst),
            KvBuf::F32(b) => dst.copy_from_slice(&b[at..at + dst.len()]),
            KvBuf::Q8_0(b) => {
                // Offsets of whole rows are multiples of 32 (`KvStore::new` checks the
                // head size); a partial block is never asked for.
                let blocks = &b[at / QK..(at + dst.len()).div_ceil(QK)];
                for (blk, out) in blocks.iter().zip(dst.chunks_mut(QK)) {
                    let d = blk.d.to_f32();
                    for (o, &q) in out.iter_mut().zip(&blk.qs) {
                        *o = d * f32::from(q);
                    }
                }
            }
        }
    }

    /// Copies `len` values from `from` to `to` (rows of the same buffer; may not overlap
    /// partially in a way `copy_within` does not handle — it handles all).
    pub fn copy_within(&mut self, from: usize, to: usize, len: usize) {
        match self {
            KvBuf::F16(b) => b.copy_within(from..from + len, to),
            KvBuf::F32(b) => b.copy_within(from..from + len, to),
            // Whole rows: their blocks, quants and scales together.
            KvBuf::Q8_0(b) => b.copy_within(from / QK..(from + len) / QK, to / QK),
        }
    }
}

/// The blocks of q8_0 values `at..at + len`, both multiples of 32.
fn q8_span(b: &mut [BlockQ8_0], at: usize, len: usize) -> Result<&mut [BlockQ8_0]> {
    if !at.is_multiple_of(QK) || !len.is_multiple_of(QK) {
        return Err(EngineError::Failed(format!(
            "q8_0 rows are whole blocks of {QK}: values {at}..{} are not",
            at + len
        )));
    }
    Ok(&mut b[at / QK..(at + len) / QK])
}

/// One (layer, head)'s key runs, borrowed from the store: `[blocks][block_size * head_dim]`.
pub enum KeyRuns<'a> {
    F16(Vec<&'a [f16]>),
    F32(Vec<&'a [f32]>),
}

impl KeyRuns<'_> {
    /// The first `len` rows of `head_dim` keys, `block_size` rows per run, for rkv-core
    /// (an error when `block_size` is not a power of two).
    pub fn rows(
        &self,
        block_size: usize,
        len: usize,
        head_dim: usize,
    ) -> std::result::Result<KeyRows<'_>, PolicyError> {
        Ok(match self {
            KeyRuns::F16(r) => KeyRows::F16(Rows::runs(r, block_size, len, head_dim)?),
            KeyRuns::F32(r) => KeyRows::F32(Rows::runs(r, block_size, len, head_dim)?),
        })
    }
}

pub struct KvStore {
    layout: KvLayout,
    dtype: KvDtype,
    pool: BlockPool,
    pub(crate) keys: KvBuf, // [n_blocks, n_layers, n_kv_heads, block_size, head_dim]
    pub(crate) values: KvBuf, // [n_blocks, n_layers, n_kv_heads, block_size, head_dim]
    positions: Vec<u32>,    // [n_blocks, n_layers, n_kv_heads, block_size]
}

impl KvStore {
    /// A pool of `n_blocks` blocks; an error (not an abort) when its size overflows or
    /// the allocator refuses it.
    pub fn new(layout: KvLayout, dtype: KvDtype, n_blocks: usize) -> Result<Self> {
        dtype.check_head_dim(layout.head_dim)?;
        let block_elems = layout.checked_block_elems();
        let refused = || EngineError::KvAlloc {
            blocks: n_blocks,
            block_bytes: block_elems
                .and_then(|e| dtype.bytes_of(e))
                .and_then(|b| b.checked_mul(2)),
        };
        let elems = block_elems
            .and_then(|e| e.checked_mul(n_blocks))
            .ok_or_else(refused)?;
        let keys = KvBuf::zeroed(dtype, elems).ok_or_else(refused)?;
        let values = KvBuf::zeroed(dtype, elems).ok_or_else(refused)?;
        let positions = bytemuck::allocation::try_zeroed_vec(elems / layout.head_dim.max(1))
            .map_err(|()| refused())?;
        Ok(Self {
            pool: BlockPool::new(n_blocks, layout.block_size),
            keys,
            values,
            positions,
            layout,
            dtype,
        })
    }

    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// The pool, for the prefix cache's bookkeeping (which blocks it keeps).
    pub(crate) fn pool_mut(&mut self) -> &mut BlockPool {
        &mut self.pool
    }

    /// Forgets every cached block's content (prefix caching turned off).
    pub(crate) fn forget_cached(&mut self) {
        self.pool.forget_cached();
    }

    pub fn dtype(&self) -> KvDtype {
        self.dtype
    }

    /// Bytes of keys and values one block holds (for q8_0, its quants and scales).
    pub fn bytes_per_block(&self) -> usize {
        self.layout.bytes_per_block(self.dtype)
    }

    /// Makes room for `extra` slots in `table` (all or nothing).
    pub fn reserve(&mut self, table: &mut BlockTable, extra: usize) -> Result<()> {
        table.grow(&mut self.pool, extra)?;
        Ok(())
    }

    /// Drops slots past `new_len` and returns freed blocks to the pool.
    pub fn truncate(&mut self, table: &mut BlockTable, new_len: usize) -> Result<()> {
        table.shrink(&mut self.pool, new_len)?;
        Ok(())
    }

    /// Returns all of a sequence's blocks.
    pub fn release(&mut self, table: &mut BlockTable) -> Result<()> {
        table.clear(&mut self.pool)?;
        Ok(())
    }

    /// Makes every block of `table` that holds a slot of `slots` this table's own: a block
    /// other tables share is replaced by a copy (keys, values and positions of every layer
    /// and head). Call before writing into those slots (appending, compacting); blocks
    /// outside them are left as they are. All or nothing per block; on error the blocks
    /// copied so far stay copied, which changes no slot's content. A block held alone whose
    /// content the prefix cache keeps is copied too while a plain free block exists (the
    /// cache keeps the original, free and evictable), else the cache forgets it.
    pub fn make_writable(&mut self, table: &mut BlockTable, slots: Range<usize>) -> Result<()> {
        let bs = self.layout.block_size;
        let end = slots.end.div_ceil(bs).min(table.blocks().len());
        for i in slots.start / bs..end {
            let old = table.blocks()[i];
            let keep_cached = self.pool.is_cached(old) && self.pool.n_plain_free() > 0;
            if !self.pool.is_shared(old) && !keep_cached {
                self.pool.uncache(old);
                continue;
            }
            let new = self.pool.allocate(1)?[0];
            self.copy_block(old, new);
            table.replace(&mut self.pool, i, new)?;
        }
        Ok(())
    }

    /// Makes room for `n` more slots at the end of `table`: the block the next slot falls
    /// in is made this table's own first (copy on write), then new blocks are taken. On
    /// error no slot's content has changed and the table holds no new slot.
    pub fn allocate(&mut self, table: &mut BlockTable, n: usize) -> Result<()> {
        let len = table.len();
        self.make_writable(table, len..len + n)?;
        self.reserve(table, n)
    }

    /// Blocks [`Self::make_writable`] would have to take from the pool.
    pub fn copies_needed(&self, table: &BlockTable, from_slot: usize) -> usize {
        let first = from_slot / self.layout.block_size;
        table
            .blocks()
            .iter()
            .skip(first)
            .filter(|&&b| self.pool.is_shared(b))
            .count()
    }

    /// Copies block `from` whole (every layer and head) into block `to`.
    fn copy_block(&mut self, from: BlockId, to: BlockId) {
        let n = self.layout.block_elems();
        let (f, t) = (from as usize * n, to as usize * n);
        self.keys.copy_within(f, t, n);
        self.values.copy_within(f, t, n);
        let np = self.layout.n_layers * self.layout.n_kv_heads * self.layout.block_size;
        let (f, t) = (from as usize * np, to as usize * np);
        self.positions.copy_within(f..f + np, t);
    }

    /// A second table holding `table`'s blocks (a sample sharing its prompt's cache).
    pub fn fork(&mut self, table: &BlockTable) -> Result<BlockTable> {
        Ok(table.fork(&mut self.pool)?)
    }

    /// Stores key/value rows of slot `slot` for (layer, head) at absolute `position`
    /// (q8_0: quantised here, once).
    #[allow(clippy::too_many_arguments)]
    pub fn write_slot(
        &mut self,
        blocks: &[BlockId],
        layer: usize,
        head: usize,
        slot: usize,
        position: u32,
        k: &[f32], // [head_dim]
        v: &[f32], // [head_dim]
    ) -> Result<()> {
        let bs = self.layout.block_size;
        let b = blocks[slot / bs];
        let at = self.layout.elem_offset(b, layer, head, slot % bs);
        self.keys.write(at, k)?;
        self.values.write(at, v)?;
        self.positions[self.layout.pos_offset(b, layer, head, slot % bs)] = position;
        Ok(())
    }

    /// Absolute position of `slot` of (layer, head).
    pub fn position(&self, blocks: &[BlockId], layer: usize, head: usize, slot: usize) -> u32 {
        let bs = self.layout.block_size;
        self.positions[self
            .layout
            .pos_offset(blocks[slot / bs], layer, head, slot % bs)]
    }

    /// Keys of slots `0..len` of (layer, head) as f32 into `out` (resized to
    /// `[len, head_dim]`, so one buffer serves many heads); q8_0 keys dequantised, as
    /// policies read them when [`Self::key_runs`] cannot lend them in place.
    pub fn read_keys_into(
        &self,
        blocks: &[BlockId],
        layer: usize,
        head: usize,
        len: usize,
        out: &mut Vec<f32>,
    ) {
        self.read_rows_into(&self.keys, blocks, layer, head, len, out);
    }

    /// Values of slots `0..len` of (layer, head) as f32 into `out` (resized to
    /// `[len, head_dim]`), for policies that read values.
    pub fn read_values_into(
        &self,
        blocks: &[BlockId],
        layer: usize,
        head: usize,
        len: usize,
        out: &mut Vec<f32>,
    ) {
        self.read_rows_into(&self.values, blocks, layer, head, len, out);
    }

    /// Rows of slots `0..len` of (layer, head) of `buf` (the keys or the values) as f32.
    fn read_rows_into(
        &self,
        buf: &KvBuf,
        blocks: &[BlockId],
        layer: usize,
        head: usize,
        len: usize,
        out: &mut Vec<f32>,
    ) {
        let (bs, d) = (self.layout.block_size, self.layout.head_dim);
        out.resize(len * d, 0.0);
        for (i, chunk) in out.chunks_mut(bs * d).enumerate() {
            let at = self.layout.elem_offset(blocks[i], layer, head, 0);
            buf.read(at, chunk);
        }
    }

    /// The key of `slot` of (layer, head) as stored, widened to f32, into `out`
    /// (`[head_dim]`).
    pub fn read_key(
        &self,
        blocks: &[BlockId],
        layer: usize,
        head: usize,
        slot: usize,
        out: &mut [f32],
    ) {
        let bs = self.layout.block_size;
        let at = self
            .layout
            .elem_offset(blocks[slot / bs], layer, head, slot % bs);
        self.keys.read(at, out);
    }

    /// The keys of slots `0..len` of (layer, head) where they lie: one run of
    /// `block_size` rows per block, in the stored element type (nothing is copied).
    /// `None` for q8_0 keys, which policies read dequantised ([`Self::read_keys_into`]).
    pub fn key_runs<'a>(
        &'a self,
        blocks: &[BlockId],
        layer: usize,
        head: usize,
        len: usize,
    ) -> Option<KeyRuns<'a>> {
        let (bs, d) = (self.layout.block_size, self.layout.head_dim);
        let runs = blocks.iter().take(len.div_ceil(bs.max(1)));
        let span = |&b: &BlockId| {
            let at = self.layout.elem_offset(b, layer, head, 0);
            at..at + bs * d
        };
        match &self.keys {
            KvBuf::F16(k) => Some(KeyRuns::F16(
                runs.map(|b| k[span(b)].reinterpret_cast()).collect(),
            )),
            KvBuf::F32(k) => Some(KeyRuns::F32(runs.map(|b| &k[span(b)]).collect())),
            KvBuf::Q8_0(_) => None,
        }
    }

    /// Moves the rows `keep` (ascending slot indices) of (layer, head) to slots
    /// `0..keep.len()`, with their positions. Because `keep` ascends, `keep[i] >= i`, so
    /// moving in order never overwrites a row still to be read.
    pub fn compact(&mut self, blocks: &[BlockId], layer: usize, head: usize, keep: &[usize]) {
        let (bs, d) = (self.layout.block_size, self.layout.head_dim);
        for (dst, &src) in keep.iter().enumerate() {
            if dst == src {
                continue;
            }
            let from = self
                .layout
                .elem_offset(blocks[src / bs], layer, head, src % bs);
            let to = self
                .layout
                .elem_offset(blocks[dst / bs], layer, head, dst % bs);
            self.keys.copy_within(from, to, d);
            self.values.copy_within(from, to, d);
            let pf = self
                .layout
                .pos_offset(blocks[src / bs], layer, head, src % bs);
            let pt = self
                .layout
                .pos_offset(blocks[dst / bs], layer, head, dst % bs);
            self.positions[pt] = self.positions[pf];
        }
    }
}

#[cfg(test)]
mod tests;
