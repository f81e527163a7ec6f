//! The inspection record as JSON (`rkv inspect --json-out`, and the data the HTML report
//! embeds): the token texts, then per policy its compression events and its per-token KL
//! to FullKV.
//!
//! Owns the JSON shape (docs/inspect.md): `{"tokens": [...], "policies": [{"policy",
//! "budget", "events": [{"position", "kept": {layer: {head: [[start, end], ...]}},
//! ...}], "kl": [...]}]}` with ranges half-open, scores as base64 little-endian f16.
//! Must not know: how the record was made (the engine's recorder), HTML.

use base64::Engine as _;
use rkv_core::config::CompressionConfig;
use rkv_engine::recorder::{EventRecord, HeadEvent, Ranges};
use rkv_engine::CompressionRecord;
use serde_json::{json, Map, Value};

/// One policy's run: its configuration, its events and its per-token KL to FullKV
/// (`kl[t]`: KL of the distribution that predicted token `t`; `None` for the prompt).
pub struct PolicyRun {
    pub cfg: CompressionConfig,
    pub record: CompressionRecord,
    pub kl: Vec<Option<f64>>,
}

/// Everything a report shows.
pub struct Inspection {
    pub model: String,
    pub source: String,
    pub prompt_tokens: usize,
    pub tokens: Vec<String>,
    pub runs: Vec<PolicyRun>,
}

fn ranges(r: &Ranges) -> Value {
    Value::Array(r.iter().map(|&(a, b)| json!([a, b])).collect())
}

fn f16_base64(xs: &[half::f16]) -> Value {
    let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// `{layer: {head: f(head event)}}` over an event's heads (layer-major).
fn per_head(ev: &EventRecord, n_kv_heads: usize, f: impl Fn(&HeadEvent) -> Option<Value>) -> Value {
    let mut layers = Map::new();
    for (i, h) in ev.heads.iter().enumerate() {
        if let Some(v) = f(h) {
            let layer = layers
                .entry((i / n_kv_heads).to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = layer {
                m.insert((i % n_kv_heads).to_string(), v);
            }
        }
    }
    Value::Object(layers)
}

fn event_json(ev: &EventRecord, n_kv_heads: usize) -> Value {
    let scored = ev.heads.iter().any(|h| !h.importance.is_empty());
    let redundancy = ev.heads.iter().any(|h| !h.redundancy.is_empty());
    let mut o = Map::new();
    o.insert("position".into(), json!(ev.position));
    o.insert("slots_before".into(), json!(ev.slots_before));
    o.insert(
        "kept".into(),
        per_head(ev, n_kv_heads, |h| Some(ranges(&h.kept))),
    );
    o.insert(
        "resident".into(),
        per_head(ev, n_kv_heads, |h| Some(ranges(&h.resident))),
    );
    if scored {
        o.insert(
            "importance_f16".into(),
            per_head(ev, n_kv_heads, |h| Some(f16_base64(&h.importance))),
        );
    }
    if redundancy {
        o.insert(
            "redundancy_f16".into(),
            per_head(ev, n_kv_heads, |h| Some(f16_base64(&h.redundancy))),
        );
        o.insert(
            "redundant_by".into(),
            per_head(ev, n_kv_heads, |h| {
                Some(Value::Array(
                    h.redundant_by
                        .iter()
                        .map(|r| r.map_or(json!(-1), |p| json!(p)))
                        .collect(),
                ))
            }),
        );
    }
    Value::Object(o)
}

/// The whole record as one JSON value.
pub fn to_json(ins: &Inspection) -> Value {
    let policies: Vec<Value> = ins
        .runs
        .iter()
        .map(|r| {
            json!({
                "policy": r.cfg.policy.to_string(),
                "budget": r.cfg.budget,
                "buffer": r.cfg.buffer,
                "window": r.cfg.window,
                "lambda": r.cfg.effective_lambda(),
                "threshold": r.cfg.threshold,
                "n_layers": r.record.n_layers,
                "n_kv_heads": r.record.n_kv_heads,
                "events": r.record.events.iter().map(|e| event_json(e, r.record.n_kv_heads)).collect::<Vec<_>>(),
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
    use half::f16;
    use rkv_core::config::PolicyKind;

    #[test]
    fn events_nest_layers_and_heads_with_ranges_and_f16() {
        let head = |k: u32| HeadEvent {
            resident: vec![(0, 6)],
            kept: vec![(0, 2), (k, 6)],
            importance: vec![f16::from_f32(1.0), f16::from_f32(-2.0)],
            redundancy: vec![f16::from_f32(0.5), f16::from_f32(0.25)],
            redundant_by: vec![Some(5), None],
        };
        let ins = Inspection {
            model: "m".into(),
            source: "s".into(),
            prompt_tokens: 2,
            tokens: vec!["a".into(); 6],
            runs: vec![PolicyRun {
                cfg: CompressionConfig {
                    policy: PolicyKind::RKv,
                    budget: 4,
                    ..CompressionConfig::default()
                },
                record: CompressionRecord {
                    n_layers: 2,
                    n_kv_heads: 2,
                    events: vec![EventRecord {
                        slots_before: 6,
                        position: 5,
                        heads: vec![head(4), head(4), head(4), head(3)],
                    }],
                },
                kl: vec![None, None, Some(0.5), Some(0.0), Some(0.1), Some(0.2)],
            }],
        };
        let v = to_json(&ins);
        let p = &v["policies"][0];
        assert_eq!(p["policy"], "rkv");
        assert_eq!(p["budget"], 4);
        assert_eq!(p["kl"][0], Value::Null);
        assert_eq!(p["kl"][2], 0.5);
        let ev = &p["events"][0];
        assert_eq!(ev["position"], 5);
        assert_eq!(ev["kept"]["1"]["1"], json!([[0, 2], [3, 6]]));
        assert_eq!(ev["kept"]["0"]["1"], json!([[0, 2], [4, 6]]));
        assert_eq!(ev["redundant_by"]["0"]["0"], json!([5, -1]));
        // 1.0 = 0x3c00, -2.0 = 0xc000, little-endian.
        let b64 = ev["importance_f16"]["0"]["0"].as_str().expect("string");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("base64");
        assert_eq!(bytes, vec![0x00, 0x3c, 0x00, 0xc0]);
    }
}
