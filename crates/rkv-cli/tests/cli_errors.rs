//! Bad input to `rkv generate` gives a one-line error naming the problem and a non-zero
//! exit, never a panic: missing, corrupt and truncated model files, unsupported
//! architectures and quantisations, empty prompts, prompts longer than the context,
//! `--max-tokens` so large that the length wraps, unknown policies, budgets below the
//! window and absurd thread counts. Values clap refuses itself (`--max-tokens 0`,
//! `--stop ""`), whose message ends with clap's hint line, and the exit statuses are
//! tested in `cli_unix.rs`.
//! Cases that get past argument checks need the default model (`rkv fetch`).

mod common;

use std::path::{Path, PathBuf};

use common::{default_model, rkv};

/// Runs and asserts a clean one-line failure that mentions `needle`.
fn fails_with(args: &[&str], needle: &str) {
    let (code, _, err) = rkv(args);
    assert_ne!(code, 0, "{args:?} should fail; stderr: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?}: expected one error line, got: {err}"
    );
    assert!(
        lines[0].to_lowercase().contains(&needle.to_lowercase()),
        "{args:?}: `{}` does not mention `{needle}`",
        lines[0]
    );
}

fn gguf_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// A minimal GGUF v3 file: one string metadata entry and one 32-element tensor of
/// ggml type `dtype` (data left zero).
fn tiny_gguf(dir: &Path, arch: &str, dtype: u32) -> PathBuf {
    let mut b = Vec::new();
    b.extend(b"GGUF");
    b.extend(3u32.to_le_bytes());
    b.extend(1u64.to_le_bytes()); // tensors
    b.extend(1u64.to_le_bytes()); // metadata entries
    gguf_string(&mut b, "general.architecture");
    b.extend(8u32.to_le_bytes()); // string
    gguf_string(&mut b, arch);
    gguf_string(&mut b, "token_embd.weight");
    b.extend(1u32.to_le_bytes());
    b.extend(32u64.to_le_bytes());
    b.extend(dtype.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    while b.len() % 32 != 0 {
        b.push(0);
    }
    b.extend(vec![0u8; 32 * 4]);
    let p = dir.join(format!("{arch}-{dtype}.gguf"));
    std::fs::write(&p, b).expect("write gguf");
    p
}

#[test]
fn argument_errors_need_no_model() {
    fails_with(
        &["generate", "--prompt", "", "--model", "/nonexistent.gguf"],
        "empty",
    );
    fails_with(
        &[
            "generate",
            "--prompt",
            "hi",
            "--kv-policy",
            "lru",
            "--model",
            "/x.gguf",
        ],
        "lru",
    );
    fails_with(
        &[
            "generate",
            "--prompt",
            "hi",
            "--kv-policy",
            "rkv",
            "--kv-budget",
            "4",
            "--model",
            "/x.gguf",
        ],
        "budget",
    );
    fails_with(
        &[
            "generate",
            "--prompt",
            "hi",
            "--kv-policy",
            "rkv",
            "--rkv-lambda",
            "1.5",
            "--model",
            "/x.gguf",
        ],
        "lambda",
    );
    fails_with(
        &[
            "generate", "--prompt", "hi", "--top-p", "0", "--model", "/x.gguf",
        ],
        "top_p",
    );
    fails_with(
        &[
            "generate",
            "--prompt",
            "hi",
            "--threads",
            "5000",
            "--model",
            "/x.gguf",
        ],
        "threads",
    );
}

#[test]
fn bad_model_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    fails_with(
        &[
            "generate",
            "--prompt",
            "hi",
            "--model",
            "/nonexistent/model.gguf",
        ],
        "not found",
    );
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"this is not a model file at all").expect("write");
    fails_with(
        &[
            "generate",
            "--prompt",
            "hi",
            "--model",
            junk.to_str().unwrap_or(""),
        ],
        "GGUF",
    );
    // A real model cut short.
    let real = std::fs::read(default_model()).expect("read model");
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &real[..real.len() / 2]).expect("write");
    fails_with(
        &[
            "generate",
            "--prompt",
            "hi",
            "--model",
            cut.to_str().unwrap_or(""),
        ],
        "truncated",
    );
    let arch = tiny_gguf(dir.path(), "gpt2", 0);
    fails_with(
        &[
            "generate",
            "--prompt",
            "hi",
            "--model",
            arch.to_str().unwrap_or(""),
        ],
        "architecture `gpt2`",
    );
    let quant = tiny_gguf(dir.path(), "llama", 16);
    fails_with(
        &[
            "generate",
            "--prompt",
            "hi",
            "--model",
            quant.to_str().unwrap_or(""),
        ],
        "quantisation",
    );
}

#[test]
fn prompt_longer_than_context_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("long.txt");
    std::fs::write(&f, "memory ".repeat(9000)).expect("write");
    let model = default_model();
    fails_with(
        &[
            "generate",
            "--prompt-file",
            f.to_str().unwrap_or(""),
            "--model",
            model.to_str().unwrap_or(""),
        ],
        "context",
    );
    // Lengths whose sum with the prompt wraps in usize are refused too, not run.
    let huge = usize::MAX.to_string();
    let m = model.to_str().unwrap_or("");
    fails_with(
        &[
            "generate",
            "--prompt",
            "hi",
            "--max-tokens",
            &huge,
            "--model",
            m,
        ],
        "context",
    );
    fails_with(
        &[
            "bench", "decode", "--depths", &huge, "--tokens", "2", "--model", m,
        ],
        "context",
    );
}

#[test]
fn greedy_generation_is_fluent_and_reproducible() {
    let model = default_model();
    let args = [
        "generate",
        "--model",
        model.to_str().unwrap_or(""),
        "--prompt",
        "The capital of France is",
        "--max-tokens",
        "64",
        "--temperature",
        "0",
        "--json",
    ];
    let (c1, o1, e1) = rkv(&args);
    let (c2, o2, _) = rkv(&args);
    assert_eq!((c1, c2), (0, 0), "{e1}");
    let v: serde_json::Value = serde_json::from_str(o1.trim()).expect("one JSON object");
    let v2: serde_json::Value = serde_json::from_str(o2.trim()).expect("one JSON object");
    assert_eq!(
        v["token_ids"], v2["token_ids"],
        "greedy tokens differ between runs"
    );
    assert_eq!(v["text"], v2["text"], "greedy text differs between runs");
    let text = v["text"].as_str().expect("text");
    assert!(text.contains("Paris"), "unexpected text: {text}");
    for k in [
        "prompt_tokens",
        "generated_tokens",
        "prefill_tokens_per_s",
        "decode_tokens_per_s",
        "kv_bytes_peak",
    ] {
        assert!(v["stats"][k].is_number(), "stats.{k} missing in {v}");
    }
    assert_eq!(v["stats"]["generated_tokens"], 64);
}
