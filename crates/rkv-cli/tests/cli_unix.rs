//! `rkv` as a Unix command: a closed pipe ends it quietly (no panic, status 141, at the
//! next token), SIGINT during `generate` reports what it has (`finish_reason`
//! "cancelled") and exits 130, `--prompt-file -` reads standard input, usage errors exit
//! 2, and a damaged cached default model says to run `rkv fetch`.
//! Cases that generate need the default model (`rkv fetch`).

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{default_model, rkv};
use serde_json::Value;

/// More tokens than any of these tests waits for (the context is 8192).
const LONG: &str = "4000";

/// `rkv generate` on the default model, generating `LONG` tokens, with `extra` flags and
/// stdout and stderr piped.
fn spawn_generate(extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_rkv"))
        .arg("generate")
        .arg("--model")
        .arg(default_model())
        .args(["--prompt", "Once upon a time", "--ignore-eos"])
        .args(["--max-tokens", LONG])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rkv generate")
}

/// Waits at most `secs` seconds for `child` to exit; kills it and fails after that.
fn wait_for(child: &mut Child, secs: f64, what: &str) -> ExitStatus {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: rkv still running after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn read_all(r: Option<impl Read>) -> String {
    let mut s = String::new();
    if let Some(mut r) = r {
        let _ = r.read_to_string(&mut s);
    }
    s
}

/// Waits until `rkv` has installed its SIGINT handler (its `rkv-sigint` thread exists),
/// so that the signal is handled rather than ending the process by default.
fn wait_for_sigint_watcher(child: &Child) {
    let tasks = format!("/proc/{}/task", child.id());
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        let found = std::fs::read_dir(&tasks).is_ok_and(|d| {
            d.filter_map(Result::ok).any(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim() == "rkv-sigint")
            })
        });
        if found {
            return;
        }
        if !Path::new(&tasks).exists() {
            // No /proc: give the start-up time instead.
            std::thread::sleep(Duration::from_secs(3));
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("rkv generate did not start its SIGINT watcher");
}

fn sigint(child: &Child) {
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -INT failed");
}

#[test]
fn generate_into_a_pipe_closed_after_10_bytes_stops_quietly() {
    let mut child = spawn_generate(&[]);
    let mut out = child.stdout.take().expect("stdout");
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.len() < 10 {
        let n = out.read(&mut buf).expect("read stdout");
        assert!(n > 0, "rkv generate ended before writing 10 bytes");
        got.extend_from_slice(&buf[..n]);
    }
    drop(out);
    let status = wait_for(&mut child, 2.0, "after its stdout was closed");
    let err = read_all(child.stderr.take());
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        matches!(status.code(), Some(0 | 141)),
        "status {status}, stderr: {err}"
    );
    assert!(err.trim().is_empty(), "not quiet: {err}");
}

#[test]
fn sigint_during_generate_json_prints_the_cancelled_object() {
    let mut child = spawn_generate(&["--json"]);
    wait_for_sigint_watcher(&child);
    std::thread::sleep(Duration::from_millis(300));
    sigint(&child);
    let status = wait_for(&mut child, 30.0, "after SIGINT");
    let out = read_all(child.stdout.take());
    let err = read_all(child.stderr.take());
    assert_eq!(status.code(), Some(130), "status {status}, stderr: {err}");
    let v: Value = serde_json::from_str(out.trim()).expect("one JSON object on stdout");
    assert_eq!(v["finish_reason"], "cancelled", "{v}");
    let n = v["stats"]["generated_tokens"]
        .as_u64()
        .expect("generated_tokens");
    assert!(n < LONG.parse().expect("LONG"), "{v}");
    assert_eq!(v["token_ids"].as_array().map(Vec::len), Some(n as usize));
}

#[test]
fn sigint_during_streamed_generate_prints_the_stats_so_far() {
    let mut child = spawn_generate(&[]);
    let mut out = child.stdout.take().expect("stdout");
    let mut first = [0u8; 1];
    assert_eq!(out.read(&mut first).expect("read"), 1, "no text streamed");
    sigint(&child);
    let status = wait_for(&mut child, 30.0, "after SIGINT");
    let err = read_all(child.stderr.take());
    assert_eq!(status.code(), Some(130), "status {status}, stderr: {err}");
    assert!(err.contains("finish=cancelled"), "{err}");
}

#[test]
fn prompt_file_dash_reads_standard_input() {
    let model = default_model();
    let m = model.to_str().expect("utf-8 path");
    let prompt = "The capital of France is";
    let common = ["generate", "--model", m, "--max-tokens", "8", "--json"];
    let (code, direct, err) = rkv(&[&common[..], &["--prompt", prompt]].concat());
    assert_eq!(code, 0, "{err}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rkv"))
        .args(common)
        .args(["--prompt-file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rkv");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(prompt.as_bytes())
        .expect("write the prompt");
    let done = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(0), "{err}");
    let a: Value = serde_json::from_str(direct.trim()).expect("JSON");
    let b: Value = serde_json::from_slice(&done.stdout).expect("JSON");
    assert_eq!(a["stats"]["prompt_tokens"], b["stats"]["prompt_tokens"]);
    assert_eq!(a["token_ids"], b["token_ids"]);
}

/// A usage error: exit status 2, a message naming `needle`, no panic.
fn usage_error(args: &[&str], needle: &str) {
    let (code, out, err) = rkv(args);
    assert_eq!(code, 2, "{args:?}: stderr {err}");
    assert!(out.is_empty(), "{args:?}: stdout {out}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: `{err}` does not say `{needle}`"
    );
}

#[test]
fn refused_values_are_usage_errors() {
    let g = ["generate", "--prompt", "hi", "--model", "/x.gguf"];
    usage_error(&[&g[..], &["--stop", ""]].concat(), "must not be empty");
    usage_error(&[&g[..], &["--max-tokens", "-1"]].concat(), "at least 1");
    usage_error(&[&g[..], &["--max-tokens", "0"]].concat(), "at least 1");
    usage_error(&[&g[..], &["--top-k", "-3"]].concat(), "at least 0");
    usage_error(&[&g[..], &["--temperature", "-1"]].concat(), "temperature");
    usage_error(&[&g[..], &["--no-such-flag"]].concat(), "--no-such-flag");
    // A model that cannot be read is not a usage error.
    let (code, _, err) = rkv(&g);
    assert_eq!(code, 1, "{err}");
}

/// A KV dtype rkv does not store (`q4`, llama.cpp's `q4_0`, a wrong case) is refused by
/// every command that takes one before anything runs: `serve` binds no port and admits
/// nothing. The message lists what is supported.
#[test]
fn unsupported_kv_dtypes_are_usage_errors() {
    let m = ["--model", "/x.gguf"];
    for bad in ["q4", "q4_0", "Q8_0", "int8"] {
        let dtype = ["--kv-dtype", bad];
        for cmd in [
            &["generate", "--prompt", "hi"][..],
            &["serve", "--port", "0"],
            &["bench", "decode"],
            &["bench", "serve"],
            &["eval", "fidelity", "--traces", "/x.jsonl"],
            &["eval", "math", "--dataset", "/x.jsonl"],
            &["inspect", "--trace", "/x.jsonl"],
        ] {
            usage_error(&[cmd, &m, &dtype].concat(), "q8_0");
        }
    }
    let f = [
        "eval", "fidelity", "--traces", "/x.jsonl", "--model", "/x.gguf",
    ];
    usage_error(&[&f[..], &["--reference-kv-dtype", "q4"]].concat(), "q8_0");
    let d = ["bench", "decode", "--model", "/x.gguf"];
    usage_error(&[&d[..], &["--compare-kv-dtype", "q4"]].concat(), "q8_0");
    usage_error(&[&d[..], &["--interleave"]].concat(), "--compare-kv-dtype");
}

#[test]
fn a_damaged_cached_default_model_says_to_fetch_it() {
    let home = tempfile::tempdir().expect("tempdir");
    let models = home.path().join("models");
    std::fs::create_dir_all(&models).expect("mkdir");
    let cached = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let real = std::fs::read(default_model()).expect("read model");
    for content in [&real[..0], &real[..real.len() / 3]] {
        std::fs::write(&cached, content).expect("write");
        let out = Command::new(env!("CARGO_BIN_EXE_rkv"))
            .args(["generate", "--prompt", "hi"])
            .env("RKV_HOME", home.path())
            .output()
            .expect("run rkv");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("rkv fetch"), "{err}");
    }
}

#[test]
fn grade_into_a_closed_pipe_stops_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("outputs.jsonl");
    let line = r#"{"output": "so the answer is \\boxed{42}", "answer": "42"}"#;
    std::fs::write(&f, format!("{line}\n").repeat(20_000)).expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rkv"))
        .args(["eval", "grade", "--outputs"])
        .arg(&f)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rkv");
    let mut first = [0u8; 10];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("read 10 bytes");
    let status = wait_for(&mut child, 60.0, "eval grade");
    let err = read_all(child.stderr.take());
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        matches!(status.code(), Some(0 | 141)),
        "status {status}, stderr: {err}"
    );
}

/// `rkv --version` says which SIMD paths the kernels take on this CPU and what the CPU has.
#[test]
fn version_names_the_kernels_simd_level_and_the_cpu() {
    let (code, out, err) = rkv(&["--version"]);
    assert_eq!(code, 0, "{err}");
    let level = out
        .lines()
        .find_map(|l| l.strip_prefix("kernels: "))
        .unwrap_or_else(|| panic!("no kernels line: {out}"));
    assert!(
        ["avx512+vnni", "avx512", "avx2", "scalar"]
            .iter()
            .any(|k| level.starts_with(k)),
        "{out}"
    );
    let cpu = out
        .lines()
        .find_map(|l| l.strip_prefix("cpu: "))
        .unwrap_or_else(|| panic!("no cpu line: {out}"));
    // The path is chosen at run time, whatever the build's target: a CPU with AVX2, FMA
    // and F16C takes a SIMD path.
    let has = |f: &str| cpu.split(' ').any(|x| x == f);
    if has("avx2") && has("fma") && has("f16c") {
        assert!(!level.starts_with("scalar"), "{out}");
    }
    assert!(level.contains("chosen at run time"), "{out}");
    // Decode's K-quant tiles take the kernels' level, or AVX2 beside AVX-512 (AMD).
    let tiles = out
        .lines()
        .find_map(|l| l.strip_prefix("one-token K-quant tiles: "))
        .unwrap_or_else(|| panic!("no one-token line: {out}"));
    assert!(
        level.starts_with(tiles) || (tiles == "avx2" && level.starts_with("avx512")),
        "{out}"
    );
}
