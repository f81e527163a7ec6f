//! `rkv bench decode` on the default model: the JSON row carries decode speed and, for a
//! compressing policy, the number of compressions and the time of one event.

mod common;

use common::{default_model, rkv};

/// R-KV at budget 64, buffer 16, over 100 tokens, twice, as JSON, then `extra`.
fn small_rkv_run<'a>(model: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "bench",
        "decode",
        "--model",
        model,
        "--kv-policy",
        "rkv",
        "--kv-budget",
        "64",
        "--kv-buffer",
        "16",
        "--depths",
        "0",
        "--tokens",
        "100",
        "--repeat",
        "2",
        "--json",
    ];
    args.extend_from_slice(extra);
    args
}

/// Every line of `out` as JSON.
fn json_rows(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// `(median, min, max)` of a summary object (-1 where a field is missing).
fn summary(v: &serde_json::Value) -> (f64, f64, f64) {
    let f = |k: &str| v[k].as_f64().unwrap_or(-1.0);
    (f("median"), f("min"), f("max"))
}

#[test]
fn bench_decode_reports_compression_events() {
    let model = default_model();
    let model = model.to_str().expect("utf-8 path");
    let (code, out, err) = rkv(&small_rkv_run(model, &[]));
    assert_eq!(code, 0, "{err}");
    let rows = json_rows(&out);
    let row = rows.first().unwrap_or_else(|| panic!("no rows: {out}"));
    // 101 slots after the last token: first compression at 80, then every 16.
    assert_eq!(row["compressions"], 2, "{row}");
    let (med, min, max) = summary(&row["compress_ms_per_event"]);
    assert!(min > 0.0 && min <= med && med <= max, "{row}");
    // Compaction is a part of each event.
    let compact = row["compact_ms_per_event"]["median"]
        .as_f64()
        .unwrap_or(-1.0);
    assert!(compact > 0.0 && compact < med, "{row}");
    assert!(row["decode_tokens_per_s"]["median"].as_f64().unwrap_or(0.0) > 0.0);
    // FullKV never compresses: no event time.
    let (code, out, err) = rkv(&[
        "bench", "decode", "--model", model, "--depths", "0", "--tokens", "8", "--repeat", "1",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let rows = json_rows(&out);
    let row = rows.first().unwrap_or_else(|| panic!("no rows: {out}"));
    assert_eq!(row["compressions"], 0, "{row}");
    assert!(row["compress_ms_per_event"].is_null(), "{row}");
    assert!(row["compact_ms_per_event"].is_null(), "{row}");
}

#[test]
fn bench_decode_compares_two_policies_in_one_run() {
    let model = default_model();
    let model = model.to_str().expect("utf-8 path");
    let args = small_rkv_run(model, &["--compare-policy", "snapkv"]);
    let (code, out, err) = rkv(&args);
    assert_eq!(code, 0, "{err}");
    let rows = json_rows(&out);
    assert_eq!(rows.len(), 3, "{out}");
    assert_eq!(rows[0]["policy"], "rkv", "{out}");
    assert_eq!(rows[1]["policy"], "snapkv", "{out}");
    for row in &rows[..2] {
        assert_eq!(row["compressions"], 2, "{row}");
        assert_eq!(row["repeat"], 2, "{row}");
    }
    let paired = &rows[2];
    assert_eq!(paired["bench"], "decode_paired", "{paired}");
    assert_eq!(paired["policies"], serde_json::json!(["rkv", "snapkv"]));
    for key in ["decode_speed_ratio", "event_ms_ratio"] {
        let (med, min, max) = summary(&paired[key]);
        assert!(min > 0.0 && min <= med && med <= max, "{key}: {paired}");
    }
    // An unknown policy to compare with is refused before anything runs.
    let (code, out, err) = rkv(&small_rkv_run(model, &["--compare-policy", "bogus"]));
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("--compare-policy") && err.contains("bogus"),
        "{err}"
    );
}

/// `--interleave`: both policies' generations run at once, each on its own engine, with
/// the same rows as a sequential comparison; without a second policy it is refused.
#[test]
fn bench_decode_interleaves_two_policies() {
    let model = default_model();
    let model = model.to_str().expect("utf-8 path");
    let args = small_rkv_run(model, &["--compare-policy", "snapkv", "--interleave"]);
    let (code, out, err) = rkv(&args);
    assert_eq!(code, 0, "{err}");
    let rows = json_rows(&out);
    assert_eq!(rows.len(), 3, "{out}");
    for (row, policy) in rows[..2].iter().zip(["rkv", "snapkv"]) {
        assert_eq!(row["policy"], policy, "{row}");
        assert_eq!(row["interleaved"], true, "{row}");
        // Each generation compressed as it does alone: its own engine, its own schedule.
        assert_eq!(row["compressions"], 2, "{row}");
        let (med, min, max) = summary(&row["decode_tokens_per_s"]);
        assert!(min > 0.0 && min <= med && med <= max, "{row}");
    }
    assert_eq!(rows[2]["interleaved"], true, "{}", rows[2]);
    let (med, min, max) = summary(&rows[2]["decode_speed_ratio"]);
    assert!(min > 0.0 && min <= med && med <= max, "{}", rows[2]);
    let (code, out, err) = rkv(&small_rkv_run(model, &["--interleave"]));
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("--compare-policy"), "{err}");
}

/// `--batch`: samples of one prompt decoding at once. Under R-KV the prompt (longer than
/// budget + buffer) is compressed before the samples fork, so the pool the run is given
/// (what the request reserves) holds the prompt once and each sample's budget + buffer:
/// far less than FullKV's whole lengths, and the run stays inside it.
#[test]
fn bench_decode_batches_samples_within_their_reservation() {
    let model = default_model();
    let model = model.to_str().expect("utf-8 path");
    let run = |policy: &str| {
        let (code, out, err) = rkv(&[
            "bench",
            "decode",
            "--model",
            model,
            "--kv-policy",
            policy,
            "--kv-budget",
            "64",
            "--kv-buffer",
            "16",
            "--depths",
            "200",
            "--tokens",
            "40",
            "--repeat",
            "1",
            "--batch",
            "4",
            "--json",
        ]);
        assert_eq!(code, 0, "{err}");
        json_rows(&out).remove(0)
    };
    let (rkv_row, full_row) = (run("rkv"), run("full"));
    for row in [&rkv_row, &full_row] {
        assert_eq!(row["batch"], 4, "{row}");
        let peak = row["kv_bytes_peak"].as_u64().unwrap_or(u64::MAX);
        let pool = row["kv_pool_bytes"].as_u64().unwrap_or(0);
        assert!(peak > 0 && peak <= pool, "{row}");
        assert!(row["decode_tokens_per_s"]["median"].as_f64().unwrap_or(0.0) > 0.0);
    }
    // The prompt's compression (inherited by every sample), then two each: 64 kept slots
    // reach 80 after 16 of the 41 tokens, and again after 32.
    assert_eq!(rkv_row["compressions"], 12, "{rkv_row}");
    // In blocks of 32 slots: the 200-slot prompt once (7 blocks) or 4 x 80 slots (4 x 3
    // blocks), whichever is more, against 4 x 241 slots (4 x 8 blocks).
    let pool = |r: &serde_json::Value| r["kv_pool_bytes"].as_u64().unwrap_or(0);
    assert_eq!(
        pool(&full_row) * 12,
        pool(&rkv_row) * 32,
        "{rkv_row} {full_row}"
    );
    for bad in [
        &["--batch", "0"][..],
        &["--batch", "2", "--llama-bench", "/bin/true"],
        &["--llama-sequences", "2"],
    ] {
        let (code, out, err) = rkv(&small_rkv_run(model, bad));
        assert_ne!(code, 0, "{bad:?} accepted");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains("--batch") || err.contains("--llama"), "{err}");
    }
}
