//! The KV memory's interface, block by block: reservations, growth, copy on write,
//! freeing and preemption on a pool of eight 2-slot blocks, with the exact block ids the
//! pool hands out (it reuses the block freed last first).

use super::*;

const BLOCKS: usize = 8;

fn cache() -> KvCache {
    let layout = KvLayout {
        n_layers: 1,
        n_kv_heads: 1,
        head_dim: 4,
        block_size: 2,
    };
    KvCache::new(layout, KvDtype::F32, BLOCKS).expect("a tiny cache")
}

/// Writes slot `slot` of `table` with keys and values all `x`, at position `slot`.
fn write(kv: &mut KvCache, table: &BlockTable, slot: usize, x: f32) {
    kv.store_mut()
        .write_slot(table.blocks(), 0, 0, slot, slot as u32, &[x; 4], &[-x; 4])
        .expect("a slot of the table");
}

fn keys(kv: &KvCache, table: &BlockTable) -> Vec<f32> {
    let mut out = Vec::new();
    kv.store()
        .read_keys_into(table.blocks(), 0, 0, table.len(), &mut out);
    out
}

fn refs(kv: &KvCache, table: &BlockTable) -> Vec<u32> {
    table
        .blocks()
        .iter()
        .map(|&b| kv.pool().ref_count(b))
        .collect()
}

#[test]
fn a_reservation_holds_its_blocks_back_until_it_is_freed() {
    let mut kv = cache();
    let mut a = BlockTable::new();
    let mut b = BlockTable::new();
    // Sequence 1 reserves 3 blocks; before it holds any, all 3 are promised.
    kv.admit(1, Some(3));
    assert_eq!(kv.available(|_| None), BLOCKS - 3);
    kv.allocate(&mut a, 3).unwrap();
    assert_eq!(a.blocks(), &[0, 1]);
    // It holds 2 of its 3 alone: 1 still promised, 6 free.
    assert_eq!(kv.available(|id| (id == 1).then_some(&a)), 5);
    // A reserving sequence's growth takes nothing more from what is available...
    assert_eq!(kv.grow_need(1, &a, 100), 0);
    // ... a growing one's takes its new blocks.
    assert_eq!(kv.grow_need(2, &b, 4), 2);
    kv.admit(2, None);
    kv.allocate(&mut b, 4).unwrap();
    assert_eq!(b.blocks(), &[2, 3]);
    assert_eq!(kv.available(|id| (id == 1).then_some(&a)), 3);
    // Freed: the reservation is gone and both blocks are back, the last freed on top.
    kv.free(1, &mut a);
    assert_eq!(kv.reserved(1), None);
    assert!(a.is_empty() && a.blocks().is_empty());
    assert_eq!(kv.available(|_| None), 6);
    kv.allocate(&mut b, 1).unwrap();
    assert_eq!(b.blocks(), &[2, 3, 0]);
    kv.allocate(&mut b, 2).unwrap();
    assert_eq!(b.blocks(), &[2, 3, 0, 1]);
}

#[test]
fn a_sample_shares_its_prompt_until_it_writes_then_copies_one_block() {
    let mut kv = cache();
    let mut parent = BlockTable::new();
    // A request of 2 samples reserves 4 blocks; its prompt is 3 slots.
    kv.admit(1, Some(4));
    kv.allocate(&mut parent, 3).unwrap();
    for s in 0..3 {
        write(&mut kv, &parent, s, s as f32 + 1.0);
    }
    // The fork shares blocks 0 and 1 and takes 2 of the 4 reserved blocks.
    let mut child = kv.fork(1, &parent, 2, Some(2)).unwrap();
    kv.admit(1, Some(2));
    assert_eq!(child.blocks(), &[0, 1]);
    assert_eq!(refs(&kv, &parent), [2, 2]);
    assert_eq!((kv.reserved(1), kv.reserved(2)), (Some(2), Some(2)));
    assert_eq!(kv.pool().n_used(), 2);
    // Each still owes a copy of both shared blocks: nothing else is available.
    let tables = |id| match id {
        1 => Some(&parent),
        2 => Some(&child),
        _ => None,
    };
    assert_eq!(kv.available(tables), BLOCKS - 2 - 4);
    // The child's slot 3 falls in shared block 1: that block is copied (to block 2), the
    // shared prefix block 0 stays shared.
    kv.allocate(&mut child, 1).unwrap();
    assert_eq!(child.blocks(), &[0, 2]);
    assert_eq!(parent.blocks(), &[0, 1]);
    assert_eq!(refs(&kv, &parent), [2, 1]);
    assert_eq!(keys(&kv, &child)[..12], keys(&kv, &parent)[..]);
    write(&mut kv, &child, 3, 9.0);
    write(&mut kv, &child, 2, 7.0);
    assert_eq!(&keys(&kv, &parent)[8..], &[3.0; 4]);
    assert_eq!(&keys(&kv, &child)[8..], &[[7.0; 4], [9.0; 4]].concat()[..]);
    // The parent writes its slot 3 into block 1, now its own: no copy.
    kv.allocate(&mut parent, 1).unwrap();
    assert_eq!(parent.blocks(), &[0, 1]);
    assert_eq!(kv.pool().n_used(), 3);
}

#[test]
fn a_growing_sample_counts_the_copy_it_must_make_before_writing() {
    let mut kv = cache();
    let mut parent = BlockTable::new();
    kv.admit(1, None);
    kv.allocate(&mut parent, 3).unwrap();
    let child = kv.fork(1, &parent, 2, None).unwrap();
    assert_eq!(kv.reserved(2), None);
    // Slot 3 fits in block 1, which is shared: one copy, no new block.
    assert_eq!(kv.grow_need(2, &child, 1), 1);
    // Slots 3 and 4: the copy and a new block.
    assert_eq!(kv.grow_need(2, &child, 2), 2);
    // A table of its own needs only new blocks.
    let mut own = BlockTable::new();
    kv.allocate(&mut own, 2).unwrap();
    assert_eq!(own.blocks(), &[2]);
    assert_eq!(kv.grow_need(3, &own, 1), 1);
    assert_eq!(kv.grow_need(3, &own, 0), 0);
}

#[test]
fn preempting_a_sample_frees_only_what_it_held_alone() {
    let mut kv = cache();
    let mut parent = BlockTable::new();
    kv.admit(1, Some(4));
    kv.allocate(&mut parent, 3).unwrap();
    let mut child = kv.fork(1, &parent, 2, Some(2)).unwrap();
    kv.admit(1, Some(2));
    kv.allocate(&mut child, 2).unwrap(); // copy of block 1 -> 2, new block 3
    assert_eq!(child.blocks(), &[0, 2, 3]);
    assert_eq!(kv.pool().n_used(), 4);
    // Preempted: blocks 2 and 3 come back, block 0 stays with the parent.
    kv.preempt(2, &mut child);
    assert_eq!(kv.reserved(2), None);
    assert_eq!(kv.pool().n_used(), 2);
    assert_eq!(refs(&kv, &parent), [1, 1]);
    assert_eq!(kv.available(|id| (id == 1).then_some(&parent)), BLOCKS - 2);
    // Recomputed later, it is admitted again with a table of its own, on the blocks
    // freed last first.
    let mut again = BlockTable::new();
    kv.admit(2, Some(2));
    kv.allocate(&mut again, 3).unwrap();
    assert_eq!(again.blocks(), &[2, 3]);
    kv.preempt(1, &mut parent);
    kv.preempt(2, &mut again);
    assert_eq!(kv.pool().n_free(), BLOCKS);
    assert_eq!(kv.available(|_| None), BLOCKS);
}

#[test]
fn an_allocation_that_does_not_fit_changes_nothing() {
    let mut kv = cache();
    let mut a = BlockTable::new();
    kv.allocate(&mut a, 2 * BLOCKS - 1).unwrap();
    let before = (a.clone(), kv.pool().n_free());
    assert!(kv.allocate(&mut a, 2).is_err());
    assert_eq!((a.clone(), kv.pool().n_free()), before);
    // The dtype changes only while no block is held.
    assert!(kv.set_dtype(KvDtype::Q8_0).is_err());
    assert_eq!(kv.store().dtype(), KvDtype::F32);
    kv.free(0, &mut a);
    kv.set_dtype(KvDtype::F16).unwrap();
    assert_eq!(kv.store().dtype(), KvDtype::F16);
}
