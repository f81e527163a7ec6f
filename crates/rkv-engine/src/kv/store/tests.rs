//! Tests of the KV store: rows, positions and compaction for every dtype, q8_0 blocks
//! bit for bit, pool sizes and refused layouts.

use super::*;

fn store(dtype: KvDtype) -> KvStore {
    let layout = KvLayout {
        n_layers: 2,
        n_kv_heads: 2,
        head_dim: 4,
        block_size: 3,
    };
    KvStore::new(layout, dtype, 6).expect("a small pool")
}

fn read_keys(s: &KvStore, blocks: &[BlockId], layer: usize, head: usize, len: usize) -> Vec<f32> {
    let mut out = Vec::new();
    s.read_keys_into(blocks, layer, head, len, &mut out);
    out
}

/// A pool whose size overflows, or that no allocator can give (a petabyte), is an
/// error rather than an abort.
#[test]
fn impossible_pools_are_errors() {
    let layout = KvLayout {
        n_layers: 2,
        n_kv_heads: 2,
        head_dim: 4,
        block_size: 3,
    };
    assert!(matches!(
        KvStore::new(layout, KvDtype::F16, usize::MAX / 8),
        Err(EngineError::KvAlloc { .. })
    ));
    assert!(matches!(
        KvStore::new(layout, KvDtype::F32, 1 << 45),
        Err(EngineError::KvAlloc { .. })
    ));
}

#[test]
fn write_read_and_compact_keep_rows_and_positions() {
    for dtype in [KvDtype::F16, KvDtype::F32] {
        let mut s = store(dtype);
        let mut t = BlockTable::new();
        s.reserve(&mut t, 7).unwrap();
        let blocks = t.blocks().to_vec();
        for slot in 0..7 {
            let k = [slot as f32; 4];
            let v = [-(slot as f32); 4];
            s.write_slot(&blocks, 1, 1, slot, 100 + slot as u32, &k, &v)
                .unwrap();
        }
        let keys = read_keys(&s, &blocks, 1, 1, 7);
        assert_eq!(keys[4 * 5], 5.0);
        s.compact(&blocks, 1, 1, &[0, 2, 5, 6]);
        let keys = read_keys(&s, &blocks, 1, 1, 4);
        let firsts: Vec<f32> = keys.chunks(4).map(|r| r[0]).collect();
        assert_eq!(firsts, vec![0.0, 2.0, 5.0, 6.0]);
        let pos: Vec<u32> = (0..4).map(|i| s.position(&blocks, 1, 1, i)).collect();
        assert_eq!(pos, vec![100, 102, 105, 106]);
        s.truncate(&mut t, 4).unwrap();
        assert_eq!(t.blocks().len(), 2);
        assert_eq!(s.pool().n_free(), 4);
        // Other (layer, head) runs are untouched.
        assert_eq!(read_keys(&s, &blocks, 0, 1, 1)[0], 0.0);
    }
}

#[test]
fn compact_keeps_every_kept_row_across_blocks_and_leaves_other_heads() {
    // 17 slots in blocks of 3; keep patterns whose kept runs start, end and cross
    // block boundaries on either side.
    let mut patterns: Vec<Vec<usize>> = vec![
        (0..17).collect(),
        (1..17).collect(),
        (0..17).filter(|i| i % 3 != 1).collect(),
        vec![2, 3, 4, 5, 6, 7, 8, 16],
        vec![0, 1, 5, 6, 7, 8, 9, 10, 11, 12, 15],
        vec![16],
        vec![],
    ];
    let mut x = 12345u64;
    for _ in 0..20 {
        patterns.push(
            (0..17)
                .filter(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    !(x >> 33).is_multiple_of(5)
                })
                .collect(),
        );
    }
    for dtype in [KvDtype::F16, KvDtype::F32] {
        for keep in &patterns {
            let mut s = store(dtype);
            let mut t = BlockTable::new();
            s.reserve(&mut t, 17).unwrap();
            let blocks = t.blocks().to_vec();
            for layer in 0..2 {
                for head in 0..2 {
                    for slot in 0..17 {
                        let tag = (100 * layer + 10 * head + slot) as f32;
                        let k = [tag, tag + 0.5, tag + 0.25, tag + 0.125];
                        let v = k.map(|e| -e);
                        s.write_slot(&blocks, layer, head, slot, 1000 + slot as u32, &k, &v)
                            .unwrap();
                    }
                }
            }
            s.compact(&blocks, 1, 0, keep);
            for layer in 0..2 {
                for head in 0..2 {
                    let moved = (layer, head) == (1, 0);
                    let rows: Vec<usize> = if moved {
                        keep.clone()
                    } else {
                        (0..17).collect()
                    };
                    let keys = read_keys(&s, &blocks, layer, head, rows.len());
                    for (i, &src) in rows.iter().enumerate() {
                        let tag = (100 * layer + 10 * head + src) as f32;
                        assert_eq!(
                            keys[4 * i..4 * i + 4],
                            [tag, tag + 0.5, tag + 0.25, tag + 0.125]
                        );
                        assert_eq!(s.position(&blocks, layer, head, i), 1000 + src as u32);
                        let at = s.layout.elem_offset(blocks[i / 3], layer, head, i % 3);
                        let mut v = [0.0f32; 4];
                        s.values.read(at, &mut v);
                        assert_eq!(v, [-tag, -tag - 0.5, -tag - 0.25, -tag - 0.125]);
                    }
                }
            }
        }
    }
}

#[test]
fn bytes_per_block_counts_keys_and_values() {
    assert_eq!(store(KvDtype::F16).bytes_per_block(), 2 * 2 * 2 * 3 * 4 * 2);
    assert_eq!(store(KvDtype::F32).bytes_per_block(), 2 * 2 * 2 * 3 * 4 * 4);
    // q8_0: 34 bytes (32 quants, one f16 scale) per 32 values.
    let q8 = q8_store(2);
    assert_eq!(q8.bytes_per_block(), 2 * 2 * 2 * 3 * 2 * 34);
    let shape = rkv_model::AttentionShape {
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 64,
    };
    assert_eq!(
        crate::EngineConfig::bytes_per_block(shape, KvDtype::Q8_0, 3),
        q8.bytes_per_block()
    );
}

#[test]
fn dtypes_parse_by_name_and_others_are_refused() {
    for d in KvDtype::ALL {
        assert_eq!(KvDtype::parse(d.name()).unwrap(), d);
    }
    for bad in ["q4", "q4_0", "Q8_0", "int8", ""] {
        let e = KvDtype::parse(bad).unwrap_err().to_string();
        assert!(e.contains("f16, f32, q8_0"), "{e}");
    }
}

/// A store of q8_0 rows of `blocks_per_row * 32` values (2 layers, 2 heads, blocks
/// of 3 slots, 6 blocks).
fn q8_store(blocks_per_row: usize) -> KvStore {
    let layout = KvLayout {
        n_layers: 2,
        n_kv_heads: 2,
        head_dim: 32 * blocks_per_row,
        block_size: 3,
    };
    KvStore::new(layout, KvDtype::Q8_0, 6).expect("a small pool")
}

/// The q8_0 blocks of `slot` of (layer, head) in `buf`, as stored.
fn q8_row(
    s: &KvStore,
    buf: &KvBuf,
    blocks: &[BlockId],
    layer: usize,
    head: usize,
    slot: usize,
) -> Vec<BlockQ8_0> {
    let d = s.layout.head_dim;
    let at = s
        .layout
        .elem_offset(blocks[slot / 3], layer, head, slot % 3);
    match buf {
        KvBuf::Q8_0(b) => b[at / QK..(at + d) / QK].to_vec(),
        _ => panic!("not a q8_0 buffer"),
    }
}

#[test]
fn q8_0_needs_head_sizes_of_whole_blocks() {
    let layout = KvLayout {
        n_layers: 1,
        n_kv_heads: 1,
        head_dim: 48,
        block_size: 4,
    };
    let e = KvStore::new(layout, KvDtype::Q8_0, 2)
        .err()
        .expect("refused");
    assert!(matches!(e, EngineError::Config(_)), "{e}");
    assert!(KvStore::new(layout, KvDtype::F16, 2).is_ok());
}

/// A written row is ggml's q8_0 of it (scale `max|x| / 127` as f16, quants
/// `round(x / d)`), and reads back as `d * q`, within half a step of the input.
#[test]
fn q8_0_rows_are_ggml_blocks_and_read_back_dequantised() {
    let mut s = q8_store(2);
    let mut t = BlockTable::new();
    s.reserve(&mut t, 2).unwrap();
    let blocks = t.blocks().to_vec();
    let k: Vec<f32> = (0..64)
        .map(|i| ((i * 37 % 64) as f32 - 31.5) * 0.11)
        .collect();
    let v: Vec<f32> = k.iter().map(|x| -2.0 * x + 0.25).collect();
    s.write_slot(&blocks, 1, 0, 1, 7, &k, &v).unwrap();
    let mut want = vec![BlockQ8_0::default(); 2];
    rkv_kernels::quantize_row_q8_0_ref(&k, &mut want).unwrap();
    assert_eq!(q8_row(&s, &s.keys, &blocks, 1, 0, 1), want);
    let back = read_keys(&s, &blocks, 1, 0, 2);
    assert_eq!(&back[..64], &[0.0; 64], "slot 0 was never written");
    for (i, (&b, &x)) in back[64..].iter().zip(&k).enumerate() {
        let blk = &want[i / QK];
        assert_eq!(b, blk.d.to_f32() * f32::from(blk.qs[i % QK]));
        assert!((b - x).abs() <= blk.d.to_f32() * 0.5 + 1e-3, "value {i}");
    }
    let mut one = vec![0.0; 64];
    s.read_key(&blocks, 1, 0, 1, &mut one);
    assert_eq!(one, back[64..]);
    let mut vals = Vec::new();
    s.read_values_into(&blocks, 1, 0, 2, &mut vals);
    assert!(vals[64..].iter().zip(&v).all(|(a, b)| (a - b).abs() < 0.05));
    assert!(
        s.key_runs(&blocks, 1, 0, 2).is_none(),
        "q8_0 keys are not lent"
    );
}

/// Compaction moves each kept row's quants and scales as they were (bit for bit),
/// with its position, across block boundaries, and leaves other (layer, head) runs
/// alone; a copied block (copy on write) carries them too.
#[test]
fn q8_0_compact_moves_quants_and_scales() {
    let keep = [0usize, 2, 3, 7, 8, 10, 16];
    let mut s = q8_store(2);
    let mut t = BlockTable::new();
    s.reserve(&mut t, 17).unwrap();
    let blocks = t.blocks().to_vec();
    let mut before = std::collections::HashMap::new();
    for layer in 0..2 {
        for head in 0..2 {
            for slot in 0..17 {
                // Rows with their own scale per block: the second block of each
                // row is scaled by the slot, the first by the (layer, head).
                let k: Vec<f32> = (0..64)
                    .map(|i| {
                        let amp = if i < 32 {
                            1 + layer + 2 * head
                        } else {
                            1 + slot
                        };
                        amp as f32 * ((i as f32 * 0.37 + slot as f32).sin())
                    })
                    .collect();
                let v: Vec<f32> = k.iter().map(|x| 0.5 - x).collect();
                s.write_slot(&blocks, layer, head, slot, 500 + slot as u32, &k, &v)
                    .unwrap();
                let rows = (
                    q8_row(&s, &s.keys, &blocks, layer, head, slot),
                    q8_row(&s, &s.values, &blocks, layer, head, slot),
                );
                before.insert((layer, head, slot), rows);
            }
        }
    }
    s.compact(&blocks, 0, 1, &keep);
    for layer in 0..2 {
        for head in 0..2 {
            let moved = (layer, head) == (0, 1);
            let rows: Vec<usize> = if moved {
                keep.to_vec()
            } else {
                (0..17).collect()
            };
            for (i, &src) in rows.iter().enumerate() {
                let (k, v) = &before[&(layer, head, src)];
                assert_eq!(&q8_row(&s, &s.keys, &blocks, layer, head, i), k);
                assert_eq!(&q8_row(&s, &s.values, &blocks, layer, head, i), v);
                assert_eq!(s.position(&blocks, layer, head, i), 500 + src as u32);
            }
        }
    }
    // The freed tail goes back; a fork shares the rest, and making it writable copies
    // them with their scales.
    s.truncate(&mut t, keep.len()).unwrap();
    assert_eq!(s.pool().n_free(), 3);
    let mut forked = s.fork(&t).unwrap();
    let len = forked.len();
    s.make_writable(&mut forked, 0..len).unwrap();
    let copied = forked.blocks().to_vec();
    assert!(copied.iter().all(|b| !t.blocks().contains(b)));
    for (i, &src) in keep.iter().enumerate() {
        let (k, v) = &before[&(0, 1, src)];
        assert_eq!(&q8_row(&s, &s.keys, &copied, 0, 1, i), k);
        assert_eq!(&q8_row(&s, &s.values, &copied, 0, 1, i), v);
    }
}
