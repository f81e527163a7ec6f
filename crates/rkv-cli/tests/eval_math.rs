//! `rkv eval math` end to end on the default model (`rkv fetch`): five MATH-500 problems
//! under R-KV with a small budget give five per-problem records and a pass@1 summary;
//! a malformed dataset line is a one-line error naming the line.

mod common;

use std::path::PathBuf;

use common::{default_model, rkv};

use serde_json::Value;

/// MATH-500 from the shared data (or $RKV_DATA_DIR); without it, a 2-line stand-in.
fn dataset(dir: &tempfile::TempDir) -> (PathBuf, usize) {
    let shared = std::env::var_os("RKV_DATA_DIR")
        .map(|d| PathBuf::from(d).join("math500.jsonl"))
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/data/math500.jsonl"
            ))
        });
    if shared.exists() {
        return (shared, 5);
    }
    // Straight to the stream, so that a normal (captured) test run shows it too.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "fallback: eval_math: {} is absent; using a 2-line stand-in dataset\n",
            shared.display()
        )
        .as_bytes(),
    );
    let p = dir.path().join("math2.jsonl");
    std::fs::write(
        &p,
        concat!(
            r#"{"problem": "What is $2+3$?", "solution": "$2+3=\\boxed{5}$.", "answer": "5"}"#,
            "\n",
            r#"{"question": "What is $4 \\cdot 6$?", "answer": 24}"#,
            "\n",
        ),
    )
    .unwrap();
    (p, 2)
}

#[test]
fn five_problems_under_rkv() {
    let model = default_model();
    let dir = tempfile::tempdir().unwrap();
    let (data, n) = dataset(&dir);
    let (code, out, err) = rkv(&[
        "eval",
        "math",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        data.to_str().unwrap(),
        "--limit",
        "5",
        "--max-tokens",
        "64",
        "--kv-policy",
        "rkv",
        "--kv-budget",
        "32",
        "--kv-buffer",
        "16",
        "--json",
    ]);
    assert_eq!(code, 0, "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<Value> = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), n + 1, "stdout: {out}");
    for (i, r) in lines[..n].iter().enumerate() {
        assert_eq!(r["index"], i, "{r}");
        assert!(r["problem"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
        assert!(r["gold"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
        let samples = r["samples"].as_array().expect("samples");
        assert_eq!(samples.len(), 1, "{r}");
        let s = &samples[0];
        assert!(s["output"].is_string(), "{s}");
        assert!(
            s["extracted"].is_string() || s["extracted"].is_null(),
            "{s}"
        );
        let correct = s["correct"].as_bool().expect("correct");
        let tokens = s["tokens"].as_u64().expect("tokens");
        assert!((1..=64).contains(&tokens), "{s}");
        let fr = s["finish_reason"].as_str().expect("finish_reason");
        assert!(fr == "stop" || fr == "length", "{s}");
        let pass = r["pass_at_1"].as_f64().expect("pass_at_1");
        assert_eq!(pass, if correct { 1.0 } else { 0.0 }, "{r}");
    }
    let s = &lines[n]["summary"];
    let pass = s["pass_at_1"].as_f64().expect("summary pass_at_1");
    assert!((0.0..=1.0).contains(&pass), "{s}");
    assert_eq!(s["n_problems"], n, "{s}");
    assert_eq!(s["samples"], 1, "{s}");
    assert_eq!(s["policy"], "rkv", "{s}");
    assert_eq!(s["budget"], 32, "{s}");
    assert_eq!(s["max_tokens"], 64, "{s}");
    assert!(s["generated_tokens"].as_u64().unwrap() >= n as u64, "{s}");
    // Budget 32 plus buffer 16: never more than 48 slots once decoding compresses
    // (the prompt itself is kept whole when longer).
    assert!(s["kv_slots_peak"].as_u64().unwrap() > 0, "{s}");
    assert!(err.contains("pass@1"), "no summary on stderr: {err}");
}

#[test]
fn malformed_line_is_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.jsonl");
    std::fs::write(
        &p,
        "{\"problem\": \"What is 1+1?\", \"answer\": \"2\"}\n{\"problem\": oops\n",
    )
    .unwrap();
    // No model needed: the dataset is read before the model is loaded.
    let (code, out, err) = rkv(&[
        "eval",
        "math",
        "--model",
        "/nonexistent/model.gguf",
        "--dataset",
        p.to_str().unwrap(),
    ]);
    assert_ne!(code, 0, "stdout: {out}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one error line: {err}");
    assert!(lines[0].starts_with("error:"), "{err}");
    assert!(lines[0].contains("line 2"), "{err}");

    for (args, needle) in [
        (vec!["--samples", "0"], "--samples"),
        (vec!["--limit", "0"], "--limit"),
    ] {
        let mut all = vec!["eval", "math", "--dataset", p.to_str().unwrap()];
        all.extend(args);
        let (code, _, err) = rkv(&all);
        assert_ne!(code, 0);
        assert!(
            err.trim().lines().count() == 1 && err.contains(needle),
            "{err}"
        );
    }
    let (code, _, err) = rkv(&["eval", "math", "--dataset", "/nonexistent/x.jsonl"]);
    assert_ne!(code, 0);
    assert!(
        err.trim().lines().count() == 1 && err.contains("cannot open"),
        "{err}"
    );
}
