//! `rkv serve` and signals: SIGTERM or SIGINT during a streaming request lets the request
//! finish (all its tokens, then `[DONE]`) and the process exits with status 0.

mod serve_support;

use serde_json::{json, Value};
use serve_support::{finish, open, read_until, request, serve, sse_data};

fn signal_drains(signal: &str) {
    let mut srv = serve(&[]);
    assert_eq!(request(srv.port, "GET", "/health", "").0, 200);
    let body = json!({
        "prompt": "The history of the printing press",
        "max_tokens": 48,
        "temperature": 0,
        "ignore_eos": true,
        "stream": true,
    });
    let mut s = open(srv.port, "POST", "/v1/completions", &body.to_string());
    let mut buf = Vec::new();
    read_until(&mut s, &mut buf, "\"text\"");
    srv.signal(signal);
    let (status, body) = finish(s, buf);
    assert_eq!(status, 200);
    let data = sse_data(&body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{body}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("JSON chunk"))
        .collect();
    let finish_reason = chunks
        .iter()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str());
    assert_eq!(finish_reason, Some("length"), "{body}");
    let status = srv.wait(60);
    assert_eq!(status.code(), Some(0), "rkv serve exited with {status}");
    let lines: Vec<String> = srv.stderr.try_iter().collect();
    assert!(
        lines.iter().any(|l| l.contains(&format!("SIG{signal}"))),
        "{lines:?}"
    );
}

#[test]
fn sigterm_finishes_the_stream_and_exits_0() {
    signal_drains("TERM");
}

#[test]
fn sigint_finishes_the_stream_and_exits_0() {
    signal_drains("INT");
}
