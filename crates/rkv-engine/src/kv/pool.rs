//! The block pool and block tables: which fixed-size blocks of KV memory a sequence owns.
//!
//! Owns block-id bookkeeping and memory accounting only (vLLM's `BlockPool`, mistral.rs'
//! block engine): a block holds `block_size` slots for every layer and KV head of one
//! sequence. Slot `s` of a sequence lives in block `table[s / block_size]` at offset
//! `s % block_size`. Compaction keeps every (layer, head) at the same count, so a sequence
//! shrinks by returning whole tail blocks. Blocks are reference-counted: samples of one
//! prompt share the prompt's blocks ([`BlockTable::fork`]) until one of them writes into
//! a shared block, which it first replaces by a copy of its own (copy on write, done by
//! the owner of the memory through [`BlockTable::replace`]).
//! A block whose content the prefix cache keeps ([`BlockPool::set_cached`]) is not
//! forgotten when its last holder lets it go: it waits, free but intact, in a
//! least-recently-used queue; a later request may take it back ([`BlockPool::revive`]),
//! and an allocation that finds no plain free block evicts the oldest (vLLM v1's free
//! queue). Free counts include these blocks: they never cost a running request anything.
//! Must not know: tensors, dtypes, layers, positions, policies, what the cache hashes.

use std::collections::BTreeMap;

use thiserror::Error;

/// Index of a block in the pool's storage.
pub type BlockId = u32;

/// Errors of block bookkeeping. Running out of blocks is a normal outcome the scheduler
/// handles (queue or refuse), never a panic.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PoolError {
    #[error("out of KV blocks: need {needed}, {free} free of {total}")]
    OutOfBlocks {
        needed: usize,
        free: usize,
        total: usize,
    },
    #[error("block {0} is not allocated")]
    NotAllocated(BlockId),
    #[error("a table takes cached blocks only while it is empty")]
    NotEmpty,
    #[error("block {0} is neither held nor cached")]
    NotCached(BlockId),
    #[error("cannot shrink to {new_len} slots: only {len} are resident")]
    BadShrink { new_len: usize, len: usize },
}

/// A fixed set of blocks handed out and taken back; tensor-free.
#[derive(Debug, Clone)]
pub struct BlockPool {
    block_size: usize,
    n_blocks: usize,
    free: Vec<BlockId>, // LIFO stack of plain free ids: reuse warm blocks first
    refs: Vec<u32>,     // [n_blocks] tables holding each block; 0 = free
    peak_used: usize,
    cached: Vec<bool>,           // [n_blocks] the prefix cache keeps its content
    lru: BTreeMap<u64, BlockId>, // cached blocks nobody holds, oldest stamp first
    stamp: Vec<u64>,             // [n_blocks] a block's key in `lru` while it is there
    next_stamp: u64,
    forgotten: Vec<BlockId>, // cached blocks evicted or written since the last take
}

impl BlockPool {
    /// A pool of `n_blocks` blocks of `block_size` slots each.
    pub fn new(n_blocks: usize, block_size: usize) -> Self {
        let block_size = block_size.max(1);
        Self {
            block_size,
            n_blocks,
            free: (0..n_blocks as BlockId).rev().collect(),
            refs: vec![0; n_blocks],
            peak_used: 0,
            cached: vec![false; n_blocks],
            lru: BTreeMap::new(),
            stamp: vec![0; n_blocks],
            next_stamp: 0,
            forgotten: Vec::new(),
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn n_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Blocks no table holds: plain free ones and cached ones waiting to be reused.
    pub fn n_free(&self) -> usize {
        self.free.len() + self.lru.len()
    }

    /// Free blocks that hold nothing the prefix cache keeps.
    pub fn n_plain_free(&self) -> usize {
        self.free.len()
    }

    /// Free blocks whose content the prefix cache keeps (evictable).
    pub fn n_cached_free(&self) -> usize {
        self.lru.len()
    }

    /// Blocks tables hold.
    pub fn n_used(&self) -> usize {
        self.n_blocks - self.n_free()
    }

    /// The largest number of blocks in use at once since the pool was made.
    pub fn peak_used(&self) -> usize {
        self.peak_used
    }

    /// Blocks needed to hold `slots` slots.
    pub fn blocks_for(&self, slots: usize) -> usize {
        slots.div_ceil(self.block_size)
    }

    /// Takes `n` blocks, all or none: plain free ones first, then the least recently
    /// used cached ones (which the cache then forgets, [`Self::take_forgotten`]).
    pub fn allocate(&mut self, n: usize) -> Result<Vec<BlockId>, PoolError> {
        if n > self.n_free() {
            return Err(PoolError::OutOfBlocks {
                needed: n,
                free: self.n_free(),
                total: self.n_blocks,
            });
        }
        let mut ids = Vec::with_capacity(n);
        while ids.len() < n {
            let id = match self.free.pop() {
                Some(id) => id,
                None => match self.lru.pop_first() {
                    Some((_, id)) => {
                        self.cached[id as usize] = false;
                        self.forgotten.push(id);
                        id
                    }
                    None => break, // not reached: n <= n_free
                },
            };
            ids.push(id);
        }
        for &id in &ids {
            self.refs[id as usize] = 1;
        }
        self.peak_used = self.peak_used.max(self.n_used());
        Ok(ids)
    }

    /// Marks held block `id` as holding content the prefix cache keeps: when its last
    /// holder releases it, it waits in the least-recently-used queue instead of being
    /// forgotten.
    pub fn set_cached(&mut self, id: BlockId) -> Result<(), PoolError> {
        self.check_held(&[id])?;
        self.cached[id as usize] = true;
        Ok(())
    }

    /// Whether the prefix cache keeps block `id`'s content (held or waiting).
    pub fn is_cached(&self, id: BlockId) -> bool {
        self.cached.get(id as usize).copied().unwrap_or(false)
    }

    /// Held block `id`'s content is about to change in place: the cache forgets it.
    pub fn uncache(&mut self, id: BlockId) {
        if let Some(c) = self.cached.get_mut(id as usize) {
            if *c && self.refs[id as usize] > 0 {
                *c = false;
                self.forgotten.push(id);
            }
        }
    }

    /// Takes one more reference to cached block `id`: held by others (shared from now
    /// on) or waiting in the queue (taken out of it). Fails, changing nothing, for a
    /// block the cache does not keep.
    pub fn revive(&mut self, id: BlockId) -> Result<(), PoolError> {
        if !self.is_cached(id) {
            return Err(PoolError::NotCached(id));
        }
        let i = id as usize;
        if self.refs[i] == 0 {
            self.lru.remove(&self.stamp[i]);
        }
        self.refs[i] += 1;
        self.peak_used = self.peak_used.max(self.n_used());
        Ok(())
    }

    /// Forgets what every block held for the prefix cache: waiting ones become plain
    /// free blocks.
    pub fn forget_cached(&mut self) {
        while let Some((_, id)) = self.lru.pop_first() {
            self.free.push(id);
        }
        self.cached.iter_mut().for_each(|c| *c = false);
        self.forgotten.clear();
    }

    /// Cached blocks evicted or written in place since the last call: the cache's
    /// entries for them are stale.
    pub fn take_forgotten(&mut self) -> Vec<BlockId> {
        std::mem::take(&mut self.forgotten)
    }

    /// Drops one reference to each of `ids`; a block nobody holds any more goes back to
    /// the pool. Fails, changing nothing, if any id is not allocated (an id listed twice
    /// must be held twice).
    pub fn release(&mut self, ids: &[BlockId]) -> Result<(), PoolError> {
        self.check_held(ids)?;
        for &id in ids.iter().rev() {
            let r = &mut self.refs[id as usize];
            *r -= 1;
            if *r == 0 {
                if self.cached[id as usize] {
                    // Freed in reverse table order: a prefix's tail is evicted first.
                    self.next_stamp += 1;
                    self.stamp[id as usize] = self.next_stamp;
                    self.lru.insert(self.next_stamp, id);
                } else {
                    self.free.push(id);
                }
            }
        }
        Ok(())
    }

    /// Adds one reference to each of `ids` (another table now holds them too). Fails,
    /// changing nothing, if any id is not allocated.
    pub fn share(&mut self, ids: &[BlockId]) -> Result<(), PoolError> {
        self.check_held(ids)?;
        for &id in ids {
            self.refs[id as usize] += 1;
        }
        Ok(())
    }

    /// How many tables hold block `id` (0: free or unknown).
    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.refs.get(id as usize).copied().unwrap_or(0)
    }

    /// Whether more than one table holds block `id`.
    pub fn is_shared(&self, id: BlockId) -> bool {
        self.ref_count(id) > 1
    }

    /// Whether every id is allocated often enough to drop one reference per listing.
    fn check_held(&self, ids: &[BlockId]) -> Result<(), PoolError> {
        for (i, &id) in ids.iter().enumerate() {
            let times = ids[..=i].iter().filter(|&&x| x == id).count() as u32;
            if self.ref_count(id) < times {
                return Err(PoolError::NotAllocated(id));
            }
        }
        Ok(())
    }
}

/// The blocks one sequence owns, in slot order, and how many slots are resident.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockTable {
    blocks: Vec<BlockId>,
    len: usize,
}

impl BlockTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Resident slots (per layer and KV head; every head holds the same count).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn blocks(&self) -> &[BlockId] {
        &self.blocks
    }

    /// Where slot `slot` lives: (block id, offset in block). `None` past the end.
    pub fn locate(&self, slot: usize, block_size: usize) -> Option<(BlockId, usize)> {
        if slot >= self.len {
            return None;
        }
        let b = *self.blocks.get(slot / block_size)?;
        Some((b, slot % block_size))
    }

    /// Grows the table so that `extra` more slots fit, taking blocks from `pool`.
    /// All or nothing: on error the table and the pool are unchanged.
    pub fn grow(&mut self, pool: &mut BlockPool, extra: usize) -> Result<(), PoolError> {
        let ids = pool.allocate(self.blocks_needed(pool, extra))?;
        self.blocks.extend(ids);
        self.len += extra;
        Ok(())
    }

    /// Blocks that growing by `extra` slots would take from the pool.
    pub fn blocks_needed(&self, pool: &BlockPool, extra: usize) -> usize {
        pool.blocks_for(self.len + extra)
            .saturating_sub(self.blocks.len())
    }

    /// Shrinks to `new_len` slots (after compaction moved the kept rows to the front) and
    /// returns the freed tail blocks to the pool.
    pub fn shrink(&mut self, pool: &mut BlockPool, new_len: usize) -> Result<(), PoolError> {
        if new_len > self.len {
            return Err(PoolError::BadShrink {
                new_len,
                len: self.len,
            });
        }
        let keep = pool.blocks_for(new_len);
        let tail: Vec<BlockId> = self.blocks.split_off(keep);
        pool.release(&tail)?;
        self.len = new_len;
        Ok(())
    }

    /// Returns every block to the pool.
    pub fn clear(&mut self, pool: &mut BlockPool) -> Result<(), PoolError> {
        self.shrink(pool, 0)
    }

    /// A second table holding the same blocks (each block's count goes up by one).
    pub fn fork(&self, pool: &mut BlockPool) -> Result<BlockTable, PoolError> {
        pool.share(&self.blocks)?;
        Ok(self.clone())
    }

    /// Starts an empty table on cached blocks `ids`, whole (each taken back with
    /// [`BlockPool::revive`]): a prompt prefix found in the prefix cache. All or nothing.
    pub fn adopt(&mut self, pool: &mut BlockPool, ids: &[BlockId]) -> Result<(), PoolError> {
        if !self.blocks.is_empty() {
            return Err(PoolError::NotEmpty);
        }
        if let Some(&bad) = ids.iter().find(|&&id| !pool.is_cached(id)) {
            return Err(PoolError::NotCached(bad));
        }
        for &id in ids {
            pool.revive(id)?;
        }
        self.blocks = ids.to_vec();
        self.len = ids.len() * pool.block_size();
        Ok(())
    }

    /// Blocks of this table that other tables hold too.
    pub fn shared_blocks(&self, pool: &BlockPool) -> usize {
        self.blocks.iter().filter(|&&b| pool.is_shared(b)).count()
    }

    /// Puts `new` (freshly allocated for this table, typically a copy) in place of the
    /// `index`-th block and drops this table's reference to the old one, which it returns.
    pub fn replace(
        &mut self,
        pool: &mut BlockPool,
        index: usize,
        new: BlockId,
    ) -> Result<BlockId, PoolError> {
        let old = self.blocks[index];
        pool.release(&[old])?;
        self.blocks[index] = new;
        Ok(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_is_all_or_nothing() {
        let mut pool = BlockPool::new(4, 16);
        let a = pool.allocate(3).unwrap();
        assert_eq!(a, vec![0, 1, 2]);
        assert_eq!(
            pool.allocate(2),
            Err(PoolError::OutOfBlocks {
                needed: 2,
                free: 1,
                total: 4
            })
        );
        assert_eq!(pool.n_free(), 1);
        assert_eq!(pool.peak_used(), 3);
    }

    #[test]
    fn release_rejects_unknown_and_double_free() {
        let mut pool = BlockPool::new(2, 8);
        let a = pool.allocate(1).unwrap();
        assert_eq!(pool.release(&[1]), Err(PoolError::NotAllocated(1)));
        assert_eq!(pool.release(&[7]), Err(PoolError::NotAllocated(7)));
        pool.release(&a).unwrap();
        assert_eq!(pool.release(&a), Err(PoolError::NotAllocated(0)));
        assert_eq!(pool.n_free(), 2);
    }

    #[test]
    fn table_grows_locates_and_shrinks() {
        let mut pool = BlockPool::new(8, 4);
        let mut t = BlockTable::new();
        t.grow(&mut pool, 5).unwrap();
        assert_eq!(t.len(), 5);
        assert_eq!(t.blocks(), &[0, 1]);
        assert_eq!(t.locate(4, 4), Some((1, 0)));
        assert_eq!(t.locate(5, 4), None);
        assert_eq!(t.blocks_needed(&pool, 3), 0);
        assert_eq!(t.blocks_needed(&pool, 4), 1);
        t.grow(&mut pool, 7).unwrap();
        assert_eq!(t.blocks(), &[0, 1, 2]);
        t.shrink(&mut pool, 4).unwrap();
        assert_eq!(t.blocks(), &[0]);
        assert_eq!(pool.n_free(), 7);
        assert!(t.shrink(&mut pool, 5).is_err());
        t.clear(&mut pool).unwrap();
        assert_eq!(pool.n_free(), 8);
        assert_eq!(pool.peak_used(), 3);
    }

    #[test]
    fn shared_blocks_are_freed_by_their_last_holder() {
        let mut pool = BlockPool::new(4, 4);
        let mut a = BlockTable::new();
        a.grow(&mut pool, 6).unwrap();
        let mut b = a.fork(&mut pool).unwrap();
        assert_eq!(b.blocks(), &[0, 1]);
        assert_eq!((pool.ref_count(0), pool.ref_count(1)), (2, 2));
        assert_eq!(a.shared_blocks(&pool), 2);
        // b copies its last block before writing into it.
        let copy = pool.allocate(1).unwrap()[0];
        assert_eq!(b.replace(&mut pool, 1, copy), Ok(1));
        assert_eq!(b.blocks(), &[0, 2]);
        assert_eq!((pool.ref_count(1), pool.ref_count(2)), (1, 1));
        assert_eq!(a.shared_blocks(&pool), 1);
        a.clear(&mut pool).unwrap();
        // Block 0 is still b's; block 1 went back.
        assert_eq!(pool.n_free(), 2);
        assert_eq!(pool.ref_count(0), 1);
        b.clear(&mut pool).unwrap();
        assert_eq!(pool.n_free(), 4);
        // A block listed twice must be held twice.
        let x = pool.allocate(1).unwrap();
        assert_eq!(
            pool.release(&[x[0], x[0]]),
            Err(PoolError::NotAllocated(x[0]))
        );
        assert_eq!(pool.ref_count(x[0]), 1);
    }

    #[test]
    fn failed_grow_changes_nothing() {
        let mut pool = BlockPool::new(2, 4);
        let mut t = BlockTable::new();
        t.grow(&mut pool, 4).unwrap();
        assert!(t.grow(&mut pool, 9).is_err());
        assert_eq!(t.len(), 4);
        assert_eq!(pool.n_free(), 1);
    }
}
