//! 200 concurrent requests against a queue bound of 50: those beyond the bound get 429
//! with an OpenAI error body, the others 200, and the server stays up.

mod common;

use common::{greedy, start};
use rkv_engine::EngineConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_queue_bound_get_429() {
    let cfg = EngineConfig {
        max_num_seqs: 2,
        ..EngineConfig::default()
    };
    let srv = std::sync::Arc::new(start(cfg, 50).await);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let srv = std::sync::Arc::clone(&srv);
        let body = greedy(&format!("Item {i}:"), 2, None, false);
        tasks.push(tokio::spawn(async move {
            srv.post("/v1/completions", &body).await
        }));
    }
    let (mut ok, mut busy) = (0, 0);
    for t in tasks {
        let (status, body) = t.await.expect("task");
        match status {
            200 => {
                ok += 1;
                assert_eq!(body["usage"]["completion_tokens"], 2, "{body}");
            }
            429 => {
                busy += 1;
                assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
                assert!(body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()));
                assert!(body["error"]["type"].is_string(), "{body}");
            }
            s => panic!("status {s}: {body}"),
        }
    }
    assert!(busy > 0, "no request was refused");
    assert!(ok >= 50, "only {ok} requests were served");
    assert_eq!(
        srv.metric("rkv_requests_rejected_total").await,
        busy as f64,
        "the metric disagrees with the 429s"
    );
    let (status, _) = srv.get("/health").await;
    assert_eq!(status, 200);
    srv.wait_metric("rkv_kv_blocks_used", |v| v == 0.0, 10)
        .await;
    std::sync::Arc::into_inner(srv)
        .expect("one owner")
        .stop()
        .await;
}
