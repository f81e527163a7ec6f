//! KV memory, in one place (DESIGN.md §3): the block pool and block tables
//! ([`pool`]), the rows they hold in f16, f32 or 8-bit ([`store`], [`dtype`]), the
//! reservations promised to sequences ([`ledger`]), the block arithmetic of admission
//! ([`budget`]), the prefix cache's index ([`prefix`]), sizes as people write them ([`size`]), and [`KvCache`], the small
//! interface the engine's scheduling goes through: how many blocks are free to admit
//! with, admit, allocate, fork (copy on write), free and preempt, and the prompt prefixes
//! it caches.
//!
//! As vLLM v1's `KVCacheManager` over its `BlockPool`: sequences own their block tables;
//! every block a table takes or returns goes through here.
//! Must not know: models' maths, policies' scoring, the scheduler's order, HTTP.

pub mod budget;
pub mod dtype;
pub mod ledger;
pub mod pool;
pub mod prefix;
pub mod size;
pub mod store;
#[cfg(test)]
mod tests;

pub use budget::{Admission, BlockBudget};
pub use dtype::KvDtype;
pub use ledger::Ledger;
pub use pool::{BlockId, BlockPool, BlockTable, PoolError};
pub use prefix::PrefixCache;
pub use size::parse_size;
pub use store::{KeyRuns, KvBuf, KvLayout, KvStore};

use crate::error::Result;
use crate::request::SeqId;

/// The engine's KV memory: the store (pool and rows) and the reservations on it.
pub struct KvCache {
    store: KvStore,
    ledger: Ledger,
    /// `None`: prefix caching is off (`--no-prefix-cache`).
    prefix: Option<PrefixCache>,
}

impl KvCache {
    /// A cache of `n_blocks` blocks laid out as `layout`, rows stored as `dtype`.
    pub fn new(layout: KvLayout, dtype: KvDtype, n_blocks: usize) -> Result<Self> {
        Ok(Self {
            store: KvStore::new(layout, dtype, n_blocks)?,
            ledger: Ledger::new(),
            prefix: Some(PrefixCache::new()),
        })
    }

    /// Turns prefix caching on or off (off forgets every cached prefix).
    pub fn set_prefix_caching(&mut self, on: bool) {
        if on == self.prefix.is_some() {
            return;
        }
        self.prefix = on.then(PrefixCache::new);
        if !on {
            self.store.forget_cached();
        }
    }

    pub fn prefix_caching(&self) -> bool {
        self.prefix.is_some()
    }

    /// The cached blocks holding the longest prefix of `tokens` in whole blocks, at most
    /// `max_blocks` of them (none with prefix caching off).
    pub fn lookup_prefix(&mut self, tokens: &[u32], max_blocks: usize) -> Vec<BlockId> {
        let Some(prefix) = self.prefix.as_mut() else {
            return Vec::new();
        };
        prefix.sync(self.store.pool_mut());
        prefix.lookup(self.store.pool(), tokens, max_blocks)
    }

    /// Starts the empty `table` on cached blocks `ids` ([`Self::lookup_prefix`]).
    pub fn adopt(&mut self, table: &mut BlockTable, ids: &[BlockId]) -> Result<()> {
        Ok(table.adopt(self.store.pool_mut(), ids)?)
    }

    /// Enters the full blocks `from..` of `table` that `prompt` fills into the prefix
    /// cache: `table` holds `prompt` uncompressed and computed, token `i` in slot `i`
    /// (pass only the prompt tokens whose keys are written: a block entered is final).
    pub fn cache_prompt(&mut self, table: &BlockTable, prompt: &[u32], from: usize) {
        if let Some(prefix) = self.prefix.as_mut() {
            let pool = self.store.pool_mut();
            prefix.sync(pool);
            prefix.insert(pool, table.blocks(), prompt, from);
        }
    }

    pub fn store(&self) -> &KvStore {
        &self.store
    }

    /// The rows, for the forward's attention and for compaction (which write only into
    /// blocks their table has made its own).
    pub fn store_mut(&mut self) -> &mut KvStore {
        &mut self.store
    }

    pub fn pool(&self) -> &BlockPool {
        self.store.pool()
    }

    /// Blocks reserved for `id`, if it reserves.
    pub fn reserved(&self, id: SeqId) -> Option<usize> {
        self.ledger.reserved(id)
    }

    /// Free blocks no reservation promises: what an admission or a growing sequence may
    /// take. `table_of` gives each reserving sequence's table.
    pub fn available<'a>(&self, table_of: impl Fn(SeqId) -> Option<&'a BlockTable>) -> usize {
        self.ledger.available(self.store.pool(), table_of)
    }

    /// Admits `id`: a reserving sequence is promised `reserve` blocks (replacing any
    /// earlier promise); a growing one (`None`) is promised nothing.
    pub fn admit(&mut self, id: SeqId, reserve: Option<usize>) {
        match reserve {
            Some(blocks) => self.ledger.reserve(id, blocks),
            None => self.ledger.release(id),
        }
    }

    /// Blocks appending `n` slots to `id`'s `table` takes from what is available: new
    /// blocks and copies of shared ones for a growing sequence, none for a reserving one
    /// (its reservation holds them).
    pub fn grow_need(&self, id: SeqId, table: &BlockTable, n: usize) -> usize {
        if self.ledger.reserved(id).is_some() {
            return 0;
        }
        table.blocks_needed(self.store.pool(), n) + self.store.copies_needed(table, table.len())
    }

    /// Makes room for `n` more slots at the end of `table` (a shared last block copied
    /// first); see [`KvStore::allocate`].
    pub fn allocate(&mut self, table: &mut BlockTable, n: usize) -> Result<()> {
        self.store.allocate(table, n)
    }

    /// A sample `child` forked from `parent`: a table sharing `table`'s blocks (each is
    /// copied when one of them first writes into it). With `share`, `child` takes that
    /// many blocks of `parent`'s reservation as its own.
    pub fn fork(
        &mut self,
        parent: SeqId,
        table: &BlockTable,
        child: SeqId,
        share: Option<usize>,
    ) -> Result<BlockTable> {
        let t = self.store.fork(table)?;
        if let Some(blocks) = share {
            self.ledger.split(parent, child, blocks);
        }
        Ok(t)
    }

    /// Ends `id`'s hold on memory (finished, failed, cancelled or preempted): its
    /// reservation is dropped and its blocks go back to the pool (a block another table
    /// shares stays with it).
    pub fn free(&mut self, id: SeqId, table: &mut BlockTable) {
        self.ledger.release(id);
        // Releasing blocks the table holds cannot fail; a failure would mean the
        // bookkeeping is broken, and the blocks are then lost rather than double-freed.
        let _ = self.store.release(table);
    }

    /// Preempts `id`: as [`Self::free`]; what it fed is recomputed when it is admitted
    /// again.
    pub fn preempt(&mut self, id: SeqId, table: &mut BlockTable) {
        self.free(id, table);
    }

    /// Replaces the store by an empty one of `dtype`, as many blocks; refused, changing
    /// nothing, while any block is held.
    pub fn set_dtype(&mut self, dtype: KvDtype) -> Result<()> {
        let pool = self.store.pool();
        if pool.n_free() != pool.n_blocks() {
            return Err(crate::EngineError::Config(
                "the KV dtype changes only while no sequence holds KV blocks".into(),
            ));
        }
        self.store = KvStore::new(*self.store.layout(), dtype, self.store.pool().n_blocks())?;
        self.ledger = Ledger::new();
        self.prefix = self.prefix.is_some().then(PrefixCache::new);
        Ok(())
    }
}
