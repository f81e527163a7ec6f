//! The record as the HTML report embeds it: the same content as [`super::record_json`]'s
//! JSON, packed so that an 8,000-token report stays small and opens fast (one base64
//! string per event instead of hundreds of thousands of small JSON arrays).
//!
//! Owns the packed layout, which `report.js` decodes: per event, for every (layer, head)
//! in layer-major order, a fixed stride of little-endian bytes: the kept bitmask over the
//! resident slots (`ceil(slots_before / 8)` bytes, bit `s % 8` of byte `s / 8` for slot
//! `s`), `n_imp` f16 importances, `n_red` f16 redundancies, `n_by` i32 `redundant_by`
//! positions (-1: none). Resident positions are left out where they follow from the
//! schedule (the previous event's kept positions, then every position written since; all
//! positions up to the first event), and given as flat ranges where they do not.
//! Must not know: how the record was made, HTML.

use base64::Engine as _;
use rkv_engine::recorder::{EventRecord, HeadEvent, Ranges};
use serde_json::{json, Value};

use super::record_json::Inspection;

fn expand(r: &Ranges) -> Vec<u32> {
    r.iter().flat_map(|&(a, b)| a..b).collect()
}

/// Each head's resident positions as the schedule implies them: `previous` kept (per
/// head), then the positions after the previous event up to this one.
fn implied(previous: Option<(&EventRecord, &[Vec<u32>])>, ev: &EventRecord) -> Vec<Vec<u32>> {
    match previous {
        None => vec![(0..=ev.position).collect(); ev.heads.len()],
        Some((p, kept)) => kept
            .iter()
            .map(|k| {
                let mut r = k.clone();
                r.extend(p.position + 1..=ev.position);
                r
            })
            .collect(),
    }
}

fn head_bytes(h: &HeadEvent, resident: &[u32], out: &mut Vec<u8>) {
    let kept = expand(&h.kept);
    let mut mask = vec![0u8; resident.len().div_ceil(8)];
    let mut k = kept.iter().peekable();
    for (s, &p) in resident.iter().enumerate() {
        if k.peek() == Some(&&p) {
            mask[s / 8] |= 1 << (s % 8);
            k.next();
        }
    }
    out.extend(mask);
    out.extend(h.importance.iter().flat_map(|x| x.to_le_bytes()));
    out.extend(h.redundancy.iter().flat_map(|x| x.to_le_bytes()));
    out.extend(
        h.redundant_by
            .iter()
            .flat_map(|r| r.map_or(-1i32, |p| p as i32).to_le_bytes()),
    );
}

fn event_json(ev: &EventRecord, previous: Option<(&EventRecord, &[Vec<u32>])>) -> Value {
    let len = |f: fn(&HeadEvent) -> usize| ev.heads.first().map_or(0, f);
    let (n_imp, n_red, n_by) = (
        len(|h| h.importance.len()),
        len(|h| h.redundancy.len()),
        len(|h| h.redundant_by.len()),
    );
    let residents: Vec<Vec<u32>> = ev.heads.iter().map(|h| expand(&h.resident)).collect();
    let uniform = ev.heads.iter().all(|h| {
        (h.importance.len(), h.redundancy.len(), h.redundant_by.len()) == (n_imp, n_red, n_by)
    });
    let mut bytes = Vec::new();
    for (h, r) in ev.heads.iter().zip(&residents) {
        head_bytes(h, r, &mut bytes);
    }
    let mut o = json!({
        "position": ev.position,
        "slots_before": ev.slots_before,
        "n_imp": n_imp,
        "n_red": n_red,
        "n_by": n_by,
        "heads": base64::engine::general_purpose::STANDARD.encode(&bytes),
    });
    let lengths_fixed = residents.iter().all(|r| r.len() == ev.slots_before) && uniform;
    if !lengths_fixed || implied(previous, ev) != residents {
        o["resident"] = Value::Array(
            ev.heads
                .iter()
                .map(|h| {
                    json!(h
                        .resident
                        .iter()
                        .flat_map(|&(a, b)| [a, b])
                        .collect::<Vec<_>>())
                })
                .collect(),
        );
    }
    o
}

/// The packed record the page embeds.
pub fn to_json(ins: &Inspection) -> Value {
    let policies: Vec<Value> = ins
        .runs
        .iter()
        .map(|r| {
            let mut events = Vec::new();
            let mut kept: Vec<Vec<u32>> = Vec::new();
            for (k, ev) in r.record.events.iter().enumerate() {
                let previous = (k > 0).then(|| (&r.record.events[k - 1], kept.as_slice()));
                events.push(event_json(ev, previous));
                kept = ev.heads.iter().map(|h| expand(&h.kept)).collect();
            }
            json!({
                "policy": r.cfg.policy.to_string(),
                "budget": r.cfg.budget,
                "buffer": r.cfg.buffer,
                "window": r.cfg.window,
                "lambda": r.cfg.effective_lambda(),
                "n_layers": r.record.n_layers,
                "n_kv_heads": r.record.n_kv_heads,
                "events": events,
                "kl": r.kl,
            })
        })
        .collect();
    json!({
        "model": ins.model,
        "source": ins.source,
        "prompt_tokens": ins.prompt_tokens,
        "tokens": ins.tokens,
        "policies": policies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::record_json::PolicyRun;
    use half::f16;
    use rkv_core::config::{CompressionConfig, PolicyKind};
    use rkv_engine::CompressionRecord;

    fn head(resident: Ranges, kept: Ranges, by: Vec<Option<u32>>) -> HeadEvent {
        HeadEvent {
            resident,
            kept,
            importance: vec![f16::from_f32(1.0); 2],
            redundancy: Vec::new(),
            redundant_by: by,
        }
    }

    fn inspection(events: Vec<EventRecord>) -> Inspection {
        Inspection {
            model: "m".into(),
            source: "s".into(),
            prompt_tokens: 1,
            tokens: vec!["t".into(); 12],
            runs: vec![PolicyRun {
                cfg: CompressionConfig {
                    policy: PolicyKind::RKv,
                    budget: 3,
                    ..CompressionConfig::default()
                },
                record: CompressionRecord {
                    n_layers: 1,
                    n_kv_heads: 1,
                    events,
                },
                kl: vec![None; 12],
            }],
        }
    }

    /// Bitmask over the resident slots, then the scores and positions; resident positions
    /// are left out when the schedule implies them and written when it does not.
    #[test]
    fn packs_kept_slots_as_bits_and_omits_implied_residents() {
        let first = EventRecord {
            slots_before: 5,
            position: 4,
            heads: vec![head(
                vec![(0, 5)],
                vec![(0, 1), (3, 5)],
                vec![Some(4), None],
            )],
        };
        let second = EventRecord {
            slots_before: 5,
            position: 6,
            heads: vec![head(
                vec![(0, 1), (3, 7)],
                vec![(0, 1), (5, 7)],
                vec![None, None],
            )],
        };
        let v = to_json(&inspection(vec![first.clone(), second]));
        let evs = v["policies"][0]["events"].as_array().expect("events");
        let b64 = evs[0]["heads"].as_str().expect("heads");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("b64");
        // Slots 0, 3, 4 kept: 0b11001; two f16 1.0; 4 and -1 as i32.
        assert_eq!(
            bytes,
            [
                vec![0b11001u8, 0x00, 0x3c, 0x00, 0x3c],
                4i32.to_le_bytes().to_vec(),
                (-1i32).to_le_bytes().to_vec()
            ]
            .concat()
        );
        assert!(evs[0].get("resident").is_none() && evs[1].get("resident").is_none());
        assert_eq!(evs[1]["n_by"], 2);
        // A resident set the schedule does not imply is written out.
        let odd = EventRecord {
            slots_before: 5,
            position: 7,
            heads: vec![head(
                vec![(0, 1), (4, 8)],
                vec![(0, 1), (6, 8)],
                vec![None, None],
            )],
        };
        let v = to_json(&inspection(vec![first, odd]));
        assert_eq!(
            v["policies"][0]["events"][1]["resident"],
            json!([[0, 1, 4, 8]])
        );
    }
}
