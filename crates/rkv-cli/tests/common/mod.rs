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

/// The shared reasoning traces (`$RKV_DATA_DIR`, default `../shared/data`); without
/// them, the committed `tests/data/traces_head.jsonl` (their first two traces, outputs cut
/// to 4000 characters; the first is whole), saying so.
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
    let local = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/traces_head.jsonl"
    ));
    println!(
        "trace data missing at {}: using the committed {}",
        p.display(),
        local.display()
    );
    local
}
