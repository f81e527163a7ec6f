//! Shared helpers of the CLI tests: running the binary and finding the default model.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// Runs `rkv` with `args`: (exit code, stdout, stderr).
pub fn rkv(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rkv"))
        .args(args)
        .output()
        .expect("run rkv");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The default model in `$RKV_HOME` (default `~/.cache/rkv`); fails with instructions.
pub fn default_model() -> PathBuf {
    let home = std::env::var_os("RKV_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/rkv")
        });
    let p = home.join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "default model missing at {}: run `rkv fetch`",
        p.display()
    );
    p
}

/// The shared reasoning traces (`$RKV_DATA_DIR`, default `../shared/data`). Without
/// them (a clone on its own), a one-trace file written here by the default model itself:
/// a problem of this test's own, and the model's greedy answer to it as the output to
/// teacher-force (the public traces are not copied into the repository). Says which.
pub fn traces() -> PathBuf {
    let dir = std::env::var_os("RKV_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data"))
        });
    let p = dir.join("traces/r1-distill-qwen-1.5b_math100_fullkv.jsonl");
    if p.exists() {
        return p;
    }
    static MADE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let made = MADE.get_or_init(model_trace).clone();
    // Straight to the stream, so that a normal (captured) test run shows it too.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "fallback: trace data missing at {}: a trace the default model wrote ({})\n",
            p.display(),
            made.display()
        )
        .as_bytes(),
    );
    made
}

/// Writes a one-line trace: a problem and the default model's greedy output to it.
fn model_trace() -> PathBuf {
    let problem = "A train travels at 60 miles per hour for 3 hours, then at 40 miles per \
                   hour for 2 hours. How far does it travel in all? Explain each step.";
    let model = default_model();
    let (code, out, err) = rkv(&[
        "generate",
        "--model",
        model.to_str().expect("utf-8 path"),
        "--prompt",
        problem,
        "--max-tokens",
        "420",
        "--ignore-eos",
        "--json",
    ]);
    assert_eq!(code, 0, "generating the fallback trace: {err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("generate --json");
    let line = serde_json::json!({"idx": 0, "problem": problem, "output": v["text"]});
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("model_trace_{}.jsonl", std::process::id()));
    std::fs::write(&path, format!("{line}\n")).expect("write the fallback trace");
    path
}
