//! `rkv eval fidelity` on the default model and a real reasoning trace: a budget at least
//! the trace's length reports KL 0 and agreement 1 exactly, and StreamingLLM at budget 128
//! is measurably worse than FullKV (the metric can fail). Output shapes follow the issue.

mod common;

use std::process::Command;

use common::traces;

#[test]
fn full_budget_is_exact_and_streaming_drifts() {
    let t = traces();
    let out = Command::new(env!("CARGO_BIN_EXE_rkv"))
        .args(["eval", "fidelity", "--traces"])
        .arg(&t)
        .args([
            "--limit",
            "1",
            "--max-tokens",
            "300",
            "--policies",
            "rkv,streamingllm",
            "--budgets",
            "128,4096",
            "--json",
        ])
        .output()
        .expect("run rkv");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(
        lines.len(),
        5,
        "4 (trace, policy, budget) lines and a summary"
    );
    for r in &lines[..4] {
        for k in [
            "trace",
            "policy",
            "budget",
            "tokens",
            "kl_mean",
            "top1_agreement",
            "nll_mean",
            "nll_delta",
            "kv_slots_peak",
        ] {
            assert!(!r[k].is_null(), "field {k} missing in {r}");
        }
        assert_eq!(r["tokens"], 300);
        if r["budget"] == 4096 {
            assert_eq!(r["kl_mean"].as_f64(), Some(0.0), "{r}");
            assert_eq!(r["top1_agreement"].as_f64(), Some(1.0), "{r}");
            assert_eq!(r["nll_delta"].as_f64(), Some(0.0), "{r}");
        }
    }
    let summary = lines[4]["summary"].as_array().expect("summary");
    assert_eq!(summary.len(), 4);
    let s128 = summary
        .iter()
        .find(|r| r["policy"] == "streamingllm" && r["budget"] == 128)
        .expect("streamingllm 128");
    assert!(s128["kl_mean"].as_f64().unwrap_or(0.0) > 0.01, "{s128}");
    assert!(
        s128["top1_agreement"].as_f64().unwrap_or(1.0) < 0.99,
        "{s128}"
    );
    assert!(
        s128["kv_slots_peak"].as_u64().unwrap_or(999) <= 256,
        "{s128}"
    );
}

/// `--reference-kv-dtype` compares storage: each policy (FullKV included) at `--kv-dtype`
/// against itself at the reference dtype. The same dtype on both sides is exact; q8_0
/// against f16 drifts, measurably but little.
#[test]
fn kv_dtypes_compare_policy_by_policy() {
    let t = traces();
    let run = |dtype: &str| -> Vec<serde_json::Value> {
        let out = Command::new(env!("CARGO_BIN_EXE_rkv"))
            .args(["eval", "fidelity", "--traces"])
            .arg(&t)
            .args([
                "--limit",
                "1",
                "--max-tokens",
                "300",
                "--policies",
                "full,rkv",
            ])
            .args(["--budgets", "128", "--json", "--reference-kv-dtype", "f16"])
            .args(["--kv-dtype", dtype])
            .output()
            .expect("run rkv");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect();
        assert_eq!(lines.len(), 3, "full, rkv 128 and a summary");
        lines[..2].to_vec()
    };
    for r in run("f16") {
        assert_eq!(r["kl_mean"].as_f64(), Some(0.0), "{r}");
        assert_eq!(r["top1_agreement"].as_f64(), Some(1.0), "{r}");
    }
    let q8 = run("q8_0");
    assert_eq!(q8[0]["policy"], "full");
    assert_eq!(q8[0]["reference"], "full f16");
    assert_eq!(q8[1]["reference"], "rkv 128 f16");
    for r in &q8 {
        assert_eq!(r["kv_dtype"], "q8_0");
        let kl = r["kl_mean"].as_f64().unwrap_or(-1.0);
        assert!(kl > 0.0 && kl < 0.05, "{r}");
        assert!(r["top1_agreement"].as_f64().unwrap_or(0.0) > 0.9, "{r}");
    }
}
