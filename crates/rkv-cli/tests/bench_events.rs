//! `rkv bench events` on the default model and a real reasoning trace: both policies
//! compress at the same points of the same teacher-forced tokens, every event is timed,
//! and the paired ratio is reported; a policy that never compresses is refused.

mod common;

use common::{default_model, rkv, traces};

/// `rkv bench events` on the default model and the shared traces, then `extra`.
fn events(extra: &[&str]) -> (i32, String, String) {
    let (model, t) = (default_model(), traces());
    let mut args = vec![
        "bench",
        "events",
        "--model",
        model.to_str().expect("utf-8 path"),
        "--traces",
        t.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    rkv(&args)
}

#[test]
fn rkv_and_snapkv_events_on_a_trace() {
    let (code, out, err) = events(&[
        "--max-tokens",
        "300",
        "--kv-policy",
        "rkv",
        "--compare-policy",
        "snapkv",
        "--kv-budget",
        "64",
        "--kv-buffer",
        "16",
        "--repeat",
        "2",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(rows.len(), 3, "two policies and the paired row: {out}");
    let tokens = rows[0]["tokens"].as_u64().expect("tokens");
    // Compressions start when the cache reaches budget + buffer (80 slots) and recur
    // every 16 tokens: over 300 output tokens, at least 300 / 16 - 1 of them.
    let n = rows[0]["compressions"].as_u64().expect("compressions");
    assert!(n >= 17 && tokens > 300, "{n} events over {tokens} tokens");
    assert_eq!(rows[1]["compressions"].as_u64(), Some(n), "same schedule");
    for (r, policy) in rows[..2].iter().zip(["rkv", "snapkv"]) {
        assert_eq!(r["policy"], policy);
        let (min, med, max) = (
            r["event_ms"]["min"].as_f64().expect("min"),
            r["event_ms"]["median"].as_f64().expect("median"),
            r["event_ms"]["max"].as_f64().expect("max"),
        );
        assert!(0.0 < min && min <= med && med <= max, "{r}");
        let compact = r["compact_ms"]["median"].as_f64().expect("compaction");
        assert!(0.0 < compact && compact < max, "{r}");
    }
    assert_eq!(rows[2]["bench"], "events_paired");
    assert!(rows[2]["event_ms_ratio"]["median"].as_f64().expect("ratio") > 0.0);
}

#[test]
fn full_kv_has_no_event_to_time() {
    let (code, _, err) = events(&["--kv-policy", "full"]);
    assert_ne!(code, 0);
    assert!(err.contains("never compresses"), "{err}");
}
