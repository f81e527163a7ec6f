//! A pool too small for the FullKV load: the engine preempts (the metric counts it) and
//! every request still completes with the answer it gets alone.

mod common;

use common::{greedy, solo_text, start};
use rkv_engine::EngineConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_pool_preempts_and_answers_right() {
    // 4 blocks of 32 slots; each request needs 2 blocks by its end (about 10 prompt
    // tokens + 28 generated), 6 of them need 12.
    let cfg = EngineConfig {
        kv_blocks: 4,
        ..EngineConfig::default()
    };
    let srv = std::sync::Arc::new(start(cfg, 64).await);
    let prompts: Vec<String> = (0..6)
        .map(|i| format!("Story {i}: once upon a time"))
        .collect();
    let mut solo = Vec::new();
    for p in &prompts {
        let body = solo_text(&srv, p, 28, None).await;
        solo.push(
            body["choices"][0]["text"]
                .as_str()
                .expect("text")
                .to_string(),
        );
    }
    assert_eq!(srv.metric("rkv_preemptions_total").await, 0.0);

    let mut tasks = Vec::new();
    for p in &prompts {
        let srv = std::sync::Arc::clone(&srv);
        let body = greedy(p, 28, None, false);
        tasks.push(tokio::spawn(async move {
            srv.post("/v1/completions", &body).await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let (status, body) = t.await.expect("task");
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["choices"][0]["text"], solo[i].as_str(), "request {i}");
    }
    assert!(
        srv.metric("rkv_preemptions_total").await > 0.0,
        "nothing was preempted"
    );
    srv.wait_metric("rkv_kv_blocks_used", |v| v == 0.0, 10)
        .await;
    std::sync::Arc::into_inner(srv)
        .expect("one owner")
        .stop()
        .await;
}
