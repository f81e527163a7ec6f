//! `rkv bench serve --url` against a running `rkv serve`: the JSON row counts every
//! generated token from the streams and sees the server's running sequences in /metrics;
//! an unreachable server is a clear error.

mod serve_support;

use std::io::Write;
use std::process::Command;

use serve_support::{default_model, serve};

/// Runs `rkv bench serve` with `args`: (exit code, stdout, stderr).
fn bench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rkv"))
        .args(["bench", "serve"])
        .args(args)
        .output()
        .expect("run rkv bench serve");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn prompts() -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    writeln!(f, r#"{{"problem": "What is 2 + 3?"}}"#).expect("write");
    writeln!(f, r#"{{"prompt": "Once upon a time"}}"#).expect("write");
    f
}

#[test]
fn bench_serve_url_streams_from_a_running_server() {
    let srv = serve(&["--threads", "2"]);
    let model = default_model();
    let prompts = prompts();
    let (code, stdout, stderr) = bench(&[
        "--url",
        &srv.base,
        "--model",
        model.to_str().expect("utf-8 path"),
        "--prompts",
        prompts.path().to_str().expect("utf-8 path"),
        "--requests",
        "2",
        "--concurrency",
        "2",
        "--max-tokens",
        "8",
        "--ignore-eos",
        "--json",
    ]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let line = stdout.lines().next().expect("a JSON line");
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
    assert_eq!(v["generated_tokens"], 16, "{v}");
    assert!(v["peak_running"].as_u64().unwrap_or(0) >= 1, "{v}");
    assert!(v["kv_blocks_total"].as_u64().unwrap_or(0) > 0, "{v}");
    assert!(v["tpot_ms"]["p50"].as_f64().unwrap_or(0.0) > 0.0, "{v}");
    let status = srv.stop();
    assert_eq!(status.code(), Some(0), "rkv serve exited with {status}");

    // The server is gone now: a clear error, not a panic.
    let (code, _, stderr) = bench(&[
        "--url",
        &format!("http://127.0.0.1:{}", srv_port_closed()),
        "--model",
        model.to_str().expect("utf-8 path"),
        "--prompts",
        prompts.path().to_str().expect("utf-8 path"),
        "--requests",
        "1",
        "--max-tokens",
        "4",
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("is `rkv serve` running there?"), "{stderr}");
}

/// A port nothing listens on (bound, then released).
fn srv_port_closed() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}
