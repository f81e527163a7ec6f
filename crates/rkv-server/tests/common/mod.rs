//! Shared helpers of the server tests: the real default model behind an in-process
//! server on 127.0.0.1:0, and a small HTTP/SSE client.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rkv_engine::handle::{EngineHandle, HandleConfig};
use rkv_engine::EngineConfig;
use rkv_model::WeightMode;
use rkv_server::{ServerError, ServerOptions};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const MODEL_NAME: &str = "smollm2-test";

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
        "default model missing at {}: run `cargo run --release -p rkv-cli -- fetch`",
        p.display()
    );
    p
}

pub struct TestServer {
    pub base: String,
    pub client: reqwest::Client,
    pub handle: EngineHandle,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServerError>>>,
}

/// The default model served in-process with `cfg` and queue bound `max_queue`.
pub async fn start(cfg: EngineConfig, max_queue: usize) -> TestServer {
    let model = rkv_model::load(&default_model(), WeightMode::Native).expect("load the model");
    let handle = EngineHandle::spawn(
        model,
        cfg,
        HandleConfig {
            max_queue,
            threads: None,
        },
    )
    .expect("start the engine");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(rkv_server::serve(
        handle.clone(),
        ServerOptions::new(MODEL_NAME),
        listener,
        async move {
            let _ = rx.await;
        },
    ));
    TestServer {
        base: format!("http://{addr}"),
        // A fresh connection per request: the server may close a connection after an
        // error response whose body it did not read, and a pooled client that reuses it
        // fails with `IncompleteMessage` by chance (seen once in `bad_requests`).
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("build the HTTP client"),
        handle,
        stop: Some(tx),
        task: Some(task),
    }
}

impl TestServer {
    /// POSTs JSON; (status, body as JSON or `Value::String` of the raw text).
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(
            path,
            body.to_string().into_bytes(),
            Some("application/json"),
        )
        .await
    }

    pub async fn post_raw(
        &self,
        path: &str,
        body: Vec<u8>,
        content_type: Option<&str>,
    ) -> (u16, Value) {
        let mut req = self.client.post(format!("{}{path}", self.base)).body(body);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let resp = req.send().await.expect("send");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        let resp = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("send");
        let status = resp.status().as_u16();
        (status, resp.text().await.expect("body"))
    }

    /// Opens a streaming request; panics unless it answers 200.
    pub async fn stream(&self, path: &str, body: &Value) -> SseReader {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 200, "stream refused");
        SseReader {
            resp,
            buf: String::new(),
        }
    }

    /// The value of an unlabelled metric.
    pub async fn metric(&self, name: &str) -> f64 {
        let (status, text) = self.get("/metrics").await;
        assert_eq!(status, 200);
        metric_value(&text, name).unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
    }

    /// Polls `name` until `ok` holds (or panics after `secs` seconds).
    pub async fn wait_metric(&self, name: &str, ok: impl Fn(f64) -> bool, secs: u64) -> f64 {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.metric(name).await;
            if ok(v) {
                return v;
            }
            assert!(Instant::now() < end, "{name} stayed at {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the server (graceful) and the engine.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task").expect("server");
        }
    }
}

pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Reads `data:` payloads of an SSE response.
pub struct SseReader {
    resp: reqwest::Response,
    buf: String,
}

impl SseReader {
    /// The next event's data (`[DONE]` included); `None` at the end of the body.
    pub async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Some(data.join("\n"));
            }
            let chunk = self.resp.chunk().await.expect("read the stream")?;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Every remaining chunk as JSON, up to `[DONE]` (which must come last).
    pub async fn collect(mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(d) = self.next().await {
            if d == "[DONE]" {
                assert!(self.next().await.is_none(), "data after [DONE]");
                return out;
            }
            out.push(serde_json::from_str(&d).expect("chunk is JSON"));
        }
        panic!("stream ended without [DONE]");
    }
}

/// Joins the text of every choice of streamed chunks: (texts by index, finish reasons).
pub fn join_chunks(chunks: &[Value], n: usize) -> (Vec<String>, Vec<Option<String>>) {
    let mut texts = vec![String::new(); n];
    let mut finish = vec![None; n];
    for c in chunks {
        for ch in c["choices"].as_array().expect("choices") {
            let i = ch["index"].as_u64().expect("index") as usize;
            let piece = ch["text"]
                .as_str()
                .or_else(|| ch["delta"]["content"].as_str())
                .unwrap_or("");
            texts[i].push_str(piece);
            if let Some(f) = ch["finish_reason"].as_str() {
                assert!(finish[i].is_none(), "two finish reasons for choice {i}");
                finish[i] = Some(f.to_string());
            }
        }
    }
    (texts, finish)
}

/// A greedy completion request of exactly `max_tokens` tokens.
pub fn greedy(prompt: &str, max_tokens: usize, kv: Option<&Value>, stream: bool) -> Value {
    let mut b = json!({
        "model": MODEL_NAME,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": true,
        "stream": stream,
    });
    if let Some(kv) = kv {
        b["kv_compression"] = kv.clone();
    }
    b
}

/// The text of a non-streamed greedy completion.
pub async fn solo_text(
    srv: &TestServer,
    prompt: &str,
    max_tokens: usize,
    kv: Option<&Value>,
) -> Value {
    let (status, body) = srv
        .post("/v1/completions", &greedy(prompt, max_tokens, kv, false))
        .await;
    assert_eq!(status, 200, "{body}");
    body
}
