//! The reservation ledger: blocks promised to compressing (and reserving) sequences, and
//! so how many of the pool's free blocks are really free.
//!
//! A compressing sequence never holds more than its peak (`max(prompt, B + b)` with the
//! prompt kept, `B + b + chunk` with it compressed), so on admission it reserves that
//! many blocks once; it then allocates them as it grows, and
//! copies a block it shares with another sample before writing into it, all inside its
//! reservation. The blocks a reservation still promises are its size minus the blocks
//! the sequence holds alone (a shared block may still have to be copied). FullKV
//! sequences grow from what is left, or (with [`super::Admission::Reserve`]) reserve their
//! whole length the same way.
//! Owns: the reservations. Must not know: tensors, policies, HTTP.

use std::collections::BTreeMap;

use super::pool::{BlockPool, BlockTable};

use crate::request::SeqId;

#[derive(Debug, Clone, Default)]
pub struct Ledger {
    reserved: BTreeMap<SeqId, usize>, // blocks promised to each compressing sequence
}

impl Ledger {
    pub fn new() -> Self {
        Self::default()
    }

    /// Promises `blocks` blocks to `id` (replacing any earlier promise).
    pub fn reserve(&mut self, id: SeqId, blocks: usize) {
        self.reserved.insert(id, blocks);
    }

    /// Drops `id`'s reservation (it finished, failed or was preempted).
    pub fn release(&mut self, id: SeqId) {
        self.reserved.remove(&id);
    }

    /// The blocks reserved for `id`, if it reserves.
    pub fn reserved(&self, id: SeqId) -> Option<usize> {
        self.reserved.get(&id).copied()
    }

    /// Moves `blocks` of `from`'s reservation to a new reservation of `to` (a sample
    /// forked from `from`, whose admission reserved for every sample).
    pub fn split(&mut self, from: SeqId, to: SeqId, blocks: usize) {
        if let Some(r) = self.reserved.get_mut(&from) {
            *r = r.saturating_sub(blocks);
            self.reserved.insert(to, blocks);
        }
    }

    /// Blocks still promised to `id` beyond those of `table` it holds alone.
    pub fn outstanding(&self, id: SeqId, table: &BlockTable, pool: &BlockPool) -> usize {
        self.reserved(id).map_or(0, |r| {
            let own = table.blocks().len() - table.shared_blocks(pool);
            r.saturating_sub(own)
        })
    }

    /// Free blocks that no reservation promises: what FullKV growth and new admissions
    /// may take. `table_of` gives each reserving sequence's table.
    pub fn available<'a>(
        &self,
        pool: &BlockPool,
        table_of: impl Fn(SeqId) -> Option<&'a BlockTable>,
    ) -> usize {
        let promised: usize = self
            .reserved
            .keys()
            .map(|&id| {
                table_of(id).map_or_else(
                    || self.reserved(id).unwrap_or(0),
                    |t| self.outstanding(id, t, pool),
                )
            })
            .sum();
        pool.n_free().saturating_sub(promised)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_promise_what_their_tables_do_not_hold_alone() {
        let mut pool = BlockPool::new(10, 4);
        let mut kv = Ledger::new();
        let mut a = BlockTable::new();
        kv.reserve(0, 4);
        assert_eq!(kv.available(&pool, |_| Some(&a)), 6);
        a.grow(&mut pool, 6).unwrap(); // 2 blocks
        assert_eq!(kv.outstanding(0, &a, &pool), 2);
        assert_eq!(kv.available(&pool, |_| Some(&a)), 6);
        // A sample shares both blocks: each still has to be copied before a write.
        let b = a.fork(&mut pool).unwrap();
        kv.reserve(0, 8);
        kv.split(0, 1, 4);
        let tables = [a.clone(), b.clone()];
        assert_eq!(kv.outstanding(0, &a, &pool), 4);
        assert_eq!(kv.outstanding(1, &b, &pool), 4);
        assert_eq!(kv.available(&pool, |id| tables.get(id as usize)), 0);
        kv.release(1);
        assert_eq!(kv.reserved(1), None);
        assert_eq!(kv.available(&pool, |id| tables.get(id as usize)), 4);
    }
}
