//! 32 concurrent streaming greedy requests on the real model, 8 of them dropped midway:
//! the dropped ones are cancelled (their blocks come back, they stop generating) and
//! every other request gets exactly the text it gets alone. For FullKV and for R-KV at a
//! budget small enough to compress.

mod common;

use std::sync::Arc;

use common::{greedy, join_chunks, solo_text, start, TestServer};
use rkv_engine::EngineConfig;
use serde_json::{json, Value};

const N: usize = 32;
const TOKENS: usize = 24;

fn prompt(i: usize) -> String {
    format!("Note {i}: the number {} is", i * 7 + 3)
}

fn dropped(i: usize) -> bool {
    i % 4 == 1
}

async fn run(srv: Arc<TestServer>, kv: Option<Value>) {
    // Alone first (non-streaming).
    let mut solo = vec![String::new(); N];
    for (i, s) in solo.iter_mut().enumerate().filter(|(i, _)| !dropped(*i)) {
        let body = solo_text(&srv, &prompt(i), TOKENS, kv.as_ref()).await;
        if kv.is_some() {
            assert!(
                body["usage"]["kv"]["compressions"].as_u64() > Some(0),
                "no compression happened: {body}"
            );
        }
        *s = body["choices"][0]["text"]
            .as_str()
            .expect("text")
            .to_string();
    }
    let generated_before = srv.metric("rkv_generated_tokens_total").await;

    let mut tasks = Vec::new();
    for i in 0..N {
        let srv = Arc::clone(&srv);
        let body = greedy(&prompt(i), TOKENS, kv.as_ref(), true);
        tasks.push(tokio::spawn(async move { one(&srv, i, body).await }));
    }
    for t in tasks {
        let (i, text) = t.await.expect("request task");
        if let Some(text) = text {
            assert_eq!(text, solo[i], "request {i} differs from its solo run");
        }
    }

    srv.wait_metric("rkv_kv_blocks_used", |v| v == 0.0, 10)
        .await;
    srv.wait_metric("rkv_requests_running", |v| v == 0.0, 10)
        .await;
    let generated = srv.metric("rkv_generated_tokens_total").await - generated_before;
    let kept = (N - (0..N).filter(|&i| dropped(i)).count()) * TOKENS;
    assert!(
        generated >= kept as f64 && generated < (N * TOKENS) as f64,
        "generated {generated} tokens: the dropped requests were not cancelled"
    );
}

/// Streams request `i`; a dropped one reads three chunks and goes away (`None`).
async fn one(srv: &TestServer, i: usize, body: Value) -> (usize, Option<String>) {
    let mut s = srv.stream("/v1/completions", &body).await;
    if dropped(i) {
        for _ in 0..3 {
            s.next().await.expect("a chunk");
        }
        drop(s);
        return (i, None);
    }
    let chunks = s.collect().await;
    let (texts, finish) = join_chunks(&chunks, 1);
    assert_eq!(finish[0].as_deref(), Some("length"), "request {i}");
    (i, Some(texts[0].clone()))
}

/// One server for both (compression is per request): the two phases run one after the
/// other instead of two engines contending for the cores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_full_kv_then_rkv() {
    let srv = Arc::new(start(EngineConfig::default(), 64).await);
    run(Arc::clone(&srv), None).await;
    let kv = json!({"policy": "rkv", "budget": 16, "buffer": 8, "window": 4});
    run(Arc::clone(&srv), Some(kv)).await;
    Arc::into_inner(srv).expect("one owner").stop().await;
}
