//! The compression recorder on the default model under teacher forcing: recording changes
//! nothing the model computes or keeps, records one event per compression, and each
//! event describes the cache as it was (resident positions, the kept ones, the terms).

mod common;

use common::engine;
use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_engine::recorder::Ranges;
use rkv_engine::KvDtype;
use rkv_model::WeightMode;

const TEXT: &str = "Let me check the arithmetic again. 17 times 23: 17 times 20 is 340, \
and 17 times 3 is 51, so the total is 391. Wait, let me verify: 23 times 17 is 23 times 10, \
which is 230, plus 23 times 7, which is 161; 230 plus 161 is 391. So the answer is 391. ";

fn expand(r: &Ranges) -> Vec<u32> {
    r.iter().flat_map(|&(a, b)| a..b).collect()
}

#[test]
fn recording_changes_nothing_and_describes_every_event() {
    let mut e = engine(WeightMode::Native, KvDtype::F16, CompressionConfig::full());
    let tokens = e.tokenizer().encode(&TEXT.repeat(3)).expect("encode");
    let prompt = 20;
    for policy in [
        PolicyKind::RKv,
        PolicyKind::SnapKv,
        PolicyKind::H2o,
        PolicyKind::StreamingLlm,
    ] {
        let comp = CompressionConfig {
            policy,
            budget: 48,
            buffer: 16,
            ..CompressionConfig::default()
        };
        let (mut plain_logits, mut rec_logits) = (Vec::new(), Vec::new());
        let plain = e
            .teacher_force(&tokens, prompt, comp, 256, |_, l| {
                plain_logits.extend_from_slice(l)
            })
            .expect("plain");
        let (stats, record) = e
            .teacher_force_recorded(&tokens, prompt, comp, 256, |_, l| {
                rec_logits.extend_from_slice(l)
            })
            .expect("recorded");
        assert_eq!(plain_logits, rec_logits, "{policy}");
        assert_eq!(plain.final_positions, stats.final_positions, "{policy}");
        assert!(stats.compressions > 2, "{policy}");
        assert_eq!(record.events.len(), stats.compressions, "{policy}");
        let heads = record.n_layers * record.n_kv_heads;
        let (w, b) = (comp.window, comp.budget);
        let mut previous: Option<Vec<Vec<u32>>> = None;
        let mut named = 0;
        for (k, ev) in record.events.iter().enumerate() {
            assert_eq!(ev.heads.len(), heads);
            let len = ev.slots_before;
            let mut kept_now = Vec::new();
            for (i, h) in ev.heads.iter().enumerate() {
                let resident = expand(&h.resident);
                let kept = expand(&h.kept);
                assert_eq!(resident.len(), len, "{policy} event {k} head {i}");
                assert_eq!(kept.len(), b);
                assert!(kept.iter().all(|p| resident.contains(p)));
                assert_eq!(*resident.last().expect("resident"), ev.position);
                // The last w positions are always kept by the scored policies.
                assert!(resident[len - w..].iter().all(|p| kept.contains(p)));
                if let Some(prev) = &previous {
                    // What the last event kept is still there, newer tokens after it.
                    assert_eq!(resident[..b], prev[i][..], "{policy} event {k} head {i}");
                }
                match policy {
                    PolicyKind::RKv | PolicyKind::SnapKv => {
                        assert_eq!(h.importance.len(), len - w);
                    }
                    PolicyKind::H2o => assert_eq!(h.importance.len(), len),
                    _ => assert!(h.importance.is_empty()),
                }
                if policy == PolicyKind::RKv {
                    assert_eq!(h.redundancy.len(), len - w);
                    assert_eq!(h.redundant_by.len(), len - b);
                    let evicted: Vec<u32> = resident
                        .iter()
                        .copied()
                        .filter(|p| !kept.contains(p))
                        .collect();
                    for (&p, r) in evicted.iter().zip(&h.redundant_by) {
                        if let Some(r) = *r {
                            assert!(r > p && resident.contains(&r));
                            named += 1;
                        }
                    }
                } else {
                    assert!(h.redundancy.is_empty() && h.redundant_by.is_empty());
                }
                kept_now.push(kept);
            }
            previous = Some(kept_now);
        }
        if policy == PolicyKind::RKv {
            assert!(named > 0, "repeated text names redundant tokens");
        }
        // The last event's kept sets begin each head's final resident positions.
        let last = previous.expect("events");
        let per_head = stats.final_positions.len() / heads;
        for (i, kept) in last.iter().enumerate() {
            let fin = &stats.final_positions[i * per_head..(i + 1) * per_head];
            assert_eq!(fin[..b], kept[..], "{policy} head {i}");
        }
    }
}

#[test]
fn full_kv_records_no_event() {
    let mut e = engine(WeightMode::Native, KvDtype::F16, CompressionConfig::full());
    let tokens = e.tokenizer().encode(TEXT).expect("encode");
    let (stats, record) = e
        .teacher_force_recorded(&tokens, 10, CompressionConfig::full(), 256, |_, _| {})
        .expect("recorded");
    assert_eq!(stats.compressions, 0);
    assert!(record.events.is_empty());
    assert_eq!(record.n_layers, 30);
    assert_eq!(record.n_kv_heads, 3);
}
