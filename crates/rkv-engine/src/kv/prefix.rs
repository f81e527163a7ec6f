//! Automatic prefix caching: which blocks hold the keys and values of which prompt
//! prefixes, so that a request starting with tokens seen before takes those blocks
//! instead of computing them again (vLLM v1's automatic prefix caching, llama.cpp's
//! `cache_prompt`).
//!
//! A full block of prompt tokens is named by a hash chained over its parent block's hash
//! and its own token ids; a hit is verified against the stored tokens and parent, so a
//! hash collision can never hand out the wrong keys. Only uncompressed prompt blocks are
//! entered (their rows are exactly what any request with that prefix would compute).
//! Which cached blocks stay in memory is the pool's business (free, least recently used
//! first); the entries of blocks the pool evicts or sees written are dropped on
//! [`PrefixCache::sync`].
//! Must not know: tensors, policies, sequences, HTTP.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use super::pool::{BlockId, BlockPool};

/// The hash of the empty prefix, every chain's parent.
const ROOT: u64 = 0x726b_765f_7072_6566; // "rkv_pref"

#[derive(Debug, Clone)]
struct Entry {
    hash: u64,
    parent: u64,
    tokens: Vec<u32>, // [block_size]
}

/// The prefix cache's index: block hash to block, and what each cached block holds.
#[derive(Debug, Clone, Default)]
pub struct PrefixCache {
    by_hash: HashMap<u64, BlockId>,
    entries: HashMap<BlockId, Entry>,
}

/// The hash of a block holding `tokens` after the prefix whose last block hashed to
/// `parent`.
pub fn block_hash(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

impl PrefixCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks with an entry.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops the entries of the blocks the pool evicted or saw written since last time.
    pub fn sync(&mut self, pool: &mut BlockPool) {
        for id in pool.take_forgotten() {
            if let Some(e) = self.entries.remove(&id) {
                if self.by_hash.get(&e.hash) == Some(&id) {
                    self.by_hash.remove(&e.hash);
                }
            }
        }
    }

    /// The cached blocks holding the longest prefix of `tokens`, in whole blocks and at
    /// most `max_blocks` of them.
    pub fn lookup(&self, pool: &BlockPool, tokens: &[u32], max_blocks: usize) -> Vec<BlockId> {
        let bs = pool.block_size();
        let mut parent = ROOT;
        let mut out = Vec::new();
        for chunk in tokens.chunks_exact(bs).take(max_blocks) {
            let hash = block_hash(parent, chunk);
            let Some(&id) = self.by_hash.get(&hash) else {
                break;
            };
            let verified = self
                .entries
                .get(&id)
                .is_some_and(|e| e.hash == hash && e.parent == parent && e.tokens == chunk);
            if !verified || !pool.is_cached(id) {
                break;
            }
            out.push(id);
            parent = hash;
        }
        out
    }

    /// Enters the full blocks `from..` of a table (`blocks`, held, whose slot `i` holds
    /// token `tokens[i]` at position `i`, uncompressed) that `tokens` fills. A block whose
    /// prefix is cached already in another block is left out (the first stays).
    pub fn insert(
        &mut self,
        pool: &mut BlockPool,
        blocks: &[BlockId],
        tokens: &[u32],
        from: usize,
    ) {
        let bs = pool.block_size();
        let mut parent = ROOT;
        for (i, (chunk, &id)) in tokens.chunks_exact(bs).zip(blocks).enumerate() {
            let hash = block_hash(parent, chunk);
            let prev = parent;
            parent = hash;
            if i < from || self.by_hash.contains_key(&hash) || self.entries.contains_key(&id) {
                continue;
            }
            if pool.set_cached(id).is_err() {
                break;
            }
            self.by_hash.insert(hash, id);
            self.entries.insert(
                id,
                Entry {
                    hash,
                    parent: prev,
                    tokens: chunk.to_vec(),
                },
            );
        }
    }

    /// A colliding entry, for tests: `id` entered under the hash of `tokens` after
    /// `parent` while holding `held` tokens.
    #[cfg(test)]
    fn insert_forged(&mut self, id: BlockId, parent: u64, tokens: &[u32], held: &[u32]) {
        let hash = block_hash(parent, tokens);
        self.by_hash.insert(hash, id);
        self.entries.insert(
            id,
            Entry {
                hash,
                parent,
                tokens: held.to_vec(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::pool::BlockTable;

    fn prompt(n: usize, seed: u32) -> Vec<u32> {
        (0..n as u32).map(|i| i * 7 + seed).collect()
    }

    #[test]
    fn a_released_prompt_is_found_again_block_by_block() {
        let mut pool = BlockPool::new(8, 2);
        let mut cache = PrefixCache::new();
        let p = prompt(5, 1);
        let mut t = BlockTable::new();
        t.grow(&mut pool, 5).unwrap(); // blocks 0, 1, 2; block 2 is not full
        cache.insert(&mut pool, t.blocks(), &p, 0);
        assert_eq!(cache.len(), 2);
        t.clear(&mut pool).unwrap();
        // Free, but cached: counted free, found again.
        assert_eq!((pool.n_free(), pool.n_cached_free()), (8, 2));
        assert_eq!(cache.lookup(&pool, &p, 10), vec![0, 1]);
        assert_eq!(cache.lookup(&pool, &p, 1), vec![0]);
        assert_eq!(cache.lookup(&pool, &p[..3], 10), vec![0]);
        // Another prompt with the same first block only.
        let mut q = p.clone();
        q[3] += 1;
        assert_eq!(cache.lookup(&pool, &q, 10), vec![0]);
        // The same tokens after a different first block: nothing.
        let mut r = p.clone();
        r[0] += 1;
        assert!(cache.lookup(&pool, &r, 10).is_empty());
        // Taken back by a new table: held again, no longer in the queue.
        let mut u = BlockTable::new();
        u.adopt(&mut pool, &[0, 1]).unwrap();
        assert_eq!((u.len(), pool.n_used(), pool.n_cached_free()), (4, 2, 0));
        assert!(u.adopt(&mut pool, &[0]).is_err());
    }

    #[test]
    fn eviction_takes_the_oldest_tail_first_and_the_cache_forgets_it() {
        let mut pool = BlockPool::new(4, 2);
        let mut cache = PrefixCache::new();
        let p = prompt(6, 3);
        let mut t = BlockTable::new();
        t.grow(&mut pool, 6).unwrap(); // blocks 0, 1, 2
        cache.insert(&mut pool, t.blocks(), &p, 0);
        t.clear(&mut pool).unwrap();
        // Plain block 3 goes first, then the prompt's tail (block 2), then block 1.
        assert_eq!(pool.allocate(1).unwrap(), vec![3]);
        assert_eq!(pool.allocate(1).unwrap(), vec![2]);
        cache.sync(&mut pool);
        assert_eq!(cache.lookup(&pool, &p, 10), vec![0, 1]);
        assert_eq!(pool.allocate(1).unwrap(), vec![1]);
        cache.sync(&mut pool);
        assert_eq!(cache.lookup(&pool, &p, 10), vec![0]);
        assert_eq!(cache.len(), 1);
        assert!(pool.allocate(2).is_err());
        assert_eq!(pool.n_cached_free(), 1);
    }

    #[test]
    fn a_block_written_in_place_is_forgotten() {
        let mut pool = BlockPool::new(4, 2);
        let mut cache = PrefixCache::new();
        let p = prompt(4, 0);
        let mut t = BlockTable::new();
        t.grow(&mut pool, 4).unwrap();
        cache.insert(&mut pool, t.blocks(), &p, 0);
        pool.uncache(t.blocks()[1]);
        cache.sync(&mut pool);
        assert_eq!(cache.lookup(&pool, &p, 10), vec![0]);
        t.clear(&mut pool).unwrap();
        assert_eq!((pool.n_plain_free(), pool.n_cached_free()), (3, 1));
    }

    #[test]
    fn a_hash_collision_is_a_miss_not_wrong_keys() {
        let mut pool = BlockPool::new(4, 2);
        let mut cache = PrefixCache::new();
        let mut t = BlockTable::new();
        t.grow(&mut pool, 2).unwrap();
        pool.set_cached(0).unwrap();
        // Block 0 holds [9, 9] but is entered under the hash of [1, 2].
        cache.insert_forged(0, ROOT, &[1, 2], &[9, 9]);
        assert!(cache.lookup(&pool, &[1, 2], 1).is_empty());
        assert!(cache.lookup(&pool, &[9, 9], 1).is_empty());
    }

    #[test]
    fn duplicate_content_keeps_the_first_block() {
        let mut pool = BlockPool::new(6, 2);
        let mut cache = PrefixCache::new();
        let p = prompt(4, 5);
        let (mut a, mut b) = (BlockTable::new(), BlockTable::new());
        a.grow(&mut pool, 4).unwrap(); // 0, 1
        b.grow(&mut pool, 4).unwrap(); // 2, 3
        cache.insert(&mut pool, a.blocks(), &p, 0);
        cache.insert(&mut pool, b.blocks(), &p, 0);
        assert_eq!(cache.len(), 2);
        assert!(!pool.is_cached(2) && !pool.is_cached(3));
        b.clear(&mut pool).unwrap();
        assert_eq!(pool.n_plain_free(), 4);
        // Entering from block 1 on leaves block 0 as it was.
        let mut c = BlockTable::new();
        c.grow(&mut pool, 4).unwrap();
        cache.insert(&mut pool, c.blocks(), &prompt(4, 6), 1);
        assert_eq!(cache.len(), 3);
    }
}
