//! A corpus of broken requests: every one gets a 4xx with an OpenAI error body, and the
//! server still answers (health and a real generation) afterwards.

mod common;

use common::{start, MODEL_NAME};
use rkv_engine::EngineConfig;
use serde_json::json;

const CHAT: &str = "/v1/chat/completions";
const COMP: &str = "/v1/completions";

fn chat_with(extra: serde_json::Value) -> Vec<u8> {
    let mut b = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    if let (Some(b), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    b.to_string().into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_bodies_get_4xx_with_an_error_object() {
    let srv = start(EngineConfig::default(), 64).await;
    let long_prompt = "hello ".repeat(9000);
    let nested = "[".repeat(5000) + &"]".repeat(5000);
    let json_ct = Some("application/json");
    // (path, body, content type, expected status)
    let corpus: Vec<(&str, Vec<u8>, Option<&str>, u16)> = vec![
        (CHAT, b"{".to_vec(), json_ct, 400),
        (CHAT, b"".to_vec(), json_ct, 400),
        (CHAT, b"null".to_vec(), json_ct, 400),
        (CHAT, b"[]".to_vec(), json_ct, 400),
        (CHAT, b"\"hi\"".to_vec(), json_ct, 400),
        (CHAT, b"{}".to_vec(), json_ct, 400),
        (CHAT, vec![0xff, 0xfe, b'{'], json_ct, 400),
        (CHAT, nested.into_bytes(), json_ct, 400),
        (CHAT, br#"{"messages": "hi"}"#.to_vec(), json_ct, 400),
        (CHAT, br#"{"messages": []}"#.to_vec(), json_ct, 400),
        (
            CHAT,
            br#"{"messages": [{"content": "hi"}]}"#.to_vec(),
            json_ct,
            400,
        ),
        (
            CHAT,
            br#"{"messages": [{"role": "user", "content": 5}]}"#.to_vec(),
            json_ct,
            400,
        ),
        (
            CHAT,
            br#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#.to_vec(),
            json_ct,
            400,
        ),
        (CHAT, chat_with(json!({"model": "gpt-4o"})), json_ct, 404),
        (CHAT, chat_with(json!({"max_tokens": "ten"})), json_ct, 400),
        (CHAT, chat_with(json!({"max_tokens": -1})), json_ct, 400),
        (CHAT, chat_with(json!({"max_tokens": 0})), json_ct, 400),
        (CHAT, chat_with(json!({"max_tokens": 1e300})), json_ct, 400),
        (
            CHAT,
            chat_with(json!({"max_tokens": u64::MAX})),
            json_ct,
            400,
        ),
        (CHAT, chat_with(json!({"max_tokens": 100000})), json_ct, 400),
        (
            CHAT,
            chat_with(json!({"max_completion_tokens": 100000})),
            json_ct,
            400,
        ),
        (CHAT, chat_with(json!({"n": 0})), json_ct, 400),
        (CHAT, chat_with(json!({"n": 100000})), json_ct, 400),
        (CHAT, chat_with(json!({"n": 1.5})), json_ct, 400),
        (CHAT, chat_with(json!({"temperature": -1})), json_ct, 400),
        (CHAT, chat_with(json!({"temperature": "hot"})), json_ct, 400),
        (CHAT, chat_with(json!({"temperature": 1e39})), json_ct, 400),
        (CHAT, chat_with(json!({"top_p": 0})), json_ct, 400),
        (CHAT, chat_with(json!({"top_p": 2})), json_ct, 400),
        (CHAT, chat_with(json!({"top_k": -5})), json_ct, 400),
        (CHAT, chat_with(json!({"seed": "x"})), json_ct, 400),
        (CHAT, chat_with(json!({"seed": 1e30})), json_ct, 400),
        (CHAT, chat_with(json!({"stop": 5})), json_ct, 400),
        (
            CHAT,
            chat_with(json!({"stop": vec!["x"; 100]})),
            json_ct,
            400,
        ),
        (CHAT, chat_with(json!({"stream": "yes"})), json_ct, 400),
        (CHAT, chat_with(json!({"stream_options": 3})), json_ct, 400),
        (CHAT, chat_with(json!({"logprobs": 3})), json_ct, 400),
        (
            CHAT,
            chat_with(json!({"kv_compression": "rkv"})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(json!({"kv_compression": {"policy": "zip"}})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(json!({"kv_compression": {"policy": "rkv", "budget": 2}})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(json!({"kv_compression": {"policy": "rkv", "budget": -3}})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(json!({"kv_compression": {"policy": "rkv", "budget": u64::MAX}})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(json!({"kv_compression": {"policy": "rkv", "lambda": 5}})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(json!({"kv_compression": {"policy": "h2o", "buffer": 0}})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(json!({"kv_compression": {"budgett": 64}})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(json!({"kv_compression": {"policy": "gkv", "params": {"decay": 0.5}}})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(json!({"kv_compression": {"policy": "h2o-mean", "params": {"recent": 2}}})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(json!({"kv_compression": {"policy": "gkv", "params": {"alpha": "x"}}})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(json!({"kv_compression": {"policy": "rkv", "prompt": "drop"}})),
            json_ct,
            400,
        ),
        (
            CHAT,
            chat_with(
                json!({"kv_compression": {"policy": "rkv", "prompt": "compress", "prompt_chunk": 8}}),
            ),
            json_ct,
            400,
        ),
        (CHAT, chat_with(json!({})), Some("text/plain"), 415),
        (CHAT, chat_with(json!({})), None, 415),
        (COMP, br#"{"prompt": 5}"#.to_vec(), json_ct, 400),
        (COMP, br#"{"prompt": ["a", 1]}"#.to_vec(), json_ct, 400),
        (COMP, br#"{"prompt": [[1], "b", 3]}"#.to_vec(), json_ct, 400),
        (
            COMP,
            br#"{"prompt": ["a", "b"], "n": 100}"#.to_vec(),
            json_ct,
            400,
        ),
        (COMP, br#"{"prompt": []}"#.to_vec(), json_ct, 400),
        (COMP, br#"{"prompt": [1, -2]}"#.to_vec(), json_ct, 400),
        (
            COMP,
            br#"{"prompt": [99999999], "max_tokens": 1}"#.to_vec(),
            json_ct,
            400,
        ),
        (COMP, br#"{"max_tokens": 1}"#.to_vec(), json_ct, 400),
        (
            COMP,
            br#"{"prompt": "a", "echo": true, "n": 2}"#.to_vec(),
            json_ct,
            400,
        ),
        (
            COMP,
            br#"{"prompt": "a", "best_of": 3}"#.to_vec(),
            json_ct,
            400,
        ),
        (
            COMP,
            json!({"prompt": long_prompt}).to_string().into_bytes(),
            json_ct,
            400,
        ),
        (
            COMP,
            json!({"prompt": long_prompt, "max_tokens": 4})
                .to_string()
                .into_bytes(),
            json_ct,
            400,
        ),
        (
            COMP,
            // Just past axum's 2 MiB limit: the server answers once it has read 2 MiB,
            // and a body far longer raced that answer (the client, still writing, got a
            // broken pipe under load); the last kilobyte fits the socket's buffer.
            json!({"prompt": "x".repeat((2 << 20) + 1024)})
                .to_string()
                .into_bytes(),
            json_ct,
            413,
        ),
        ("/v1/nothing", b"{}".to_vec(), json_ct, 404),
    ];
    for (i, (path, body, ct, want)) in corpus.into_iter().enumerate() {
        let shown = String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned();
        let (status, resp) = srv.post_raw(path, body, ct).await;
        assert_eq!(status, want, "case {i} ({path} {shown}): {resp}");
        let msg = resp["error"]["message"].as_str().unwrap_or("");
        assert!(
            !msg.is_empty(),
            "case {i} ({shown}): no error.message in {resp}"
        );
        assert!(resp["error"]["type"].is_string(), "case {i}: {resp}");
        assert!(resp["error"].get("param").is_some(), "case {i}: {resp}");
        assert!(resp["error"].get("code").is_some(), "case {i}: {resp}");
    }
    let (status, resp) = srv
        .post_raw(CHAT, chat_with(json!({"model": "gpt-4o"})), json_ct)
        .await;
    assert_eq!(
        (status, &resp["error"]["code"]),
        (404, &json!("model_not_found"))
    );

    // A wrong method is a 405 with the same body.
    let resp = srv
        .client
        .get(format!("{}{CHAT}", srv.base))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 405);
    let v: serde_json::Value = resp.json_text().await;
    assert!(v["error"]["message"].is_string());

    // Still healthy, still generating.
    assert_eq!(srv.get("/health").await.0, 200);
    let (status, resp) = srv
        .post(CHAT, &json!({"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
        .await;
    assert_eq!(status, 200, "{resp}");
    srv.stop().await;
}

/// Log-probability, echo and token-id requests the server refuses: a 400 naming the
/// field, and the engine never sees them (no prompt tokens counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_logprob_requests_name_their_field() {
    let srv = start(EngineConfig::default(), 64).await;
    let comp = |extra: serde_json::Value| {
        let mut b = json!({"prompt": "hi", "max_tokens": 2});
        if let (Some(b), Some(e)) = (b.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        b.to_string().into_bytes()
    };
    let cases = [
        (
            CHAT,
            chat_with(json!({"logprobs": true, "top_logprobs": 21})),
            "top_logprobs",
        ),
        (
            CHAT,
            chat_with(json!({"logprobs": true, "top_logprobs": -1})),
            "top_logprobs",
        ),
        (
            CHAT,
            chat_with(json!({"logprobs": true, "top_logprobs": "5"})),
            "top_logprobs",
        ),
        (CHAT, chat_with(json!({"top_logprobs": 2})), "top_logprobs"),
        (CHAT, chat_with(json!({"logprobs": 1})), "logprobs"),
        (CHAT, chat_with(json!({"logprobs": "yes"})), "logprobs"),
        (COMP, comp(json!({"logprobs": 21})), "logprobs"),
        (COMP, comp(json!({"logprobs": true})), "logprobs"),
        (COMP, comp(json!({"logprobs": [1]})), "logprobs"),
        (COMP, comp(json!({"logprobs": 1.5})), "logprobs"),
        (COMP, comp(json!({"echo": true, "n": 2})), "echo"),
        (COMP, comp(json!({"echo": true, "stream": true})), "echo"),
        (COMP, comp(json!({"max_tokens": 0})), "max_tokens"),
        (COMP, comp(json!({"echo": "yes"})), "echo"),
        (
            COMP,
            comp(json!({"return_token_ids": 1})),
            "return_token_ids",
        ),
    ];
    for (path, body, param) in cases {
        let shown = String::from_utf8_lossy(&body).into_owned();
        let (status, resp) = srv.post_raw(path, body, Some("application/json")).await;
        assert_eq!(status, 400, "{shown}: {resp}");
        let got = &resp["error"]["param"];
        assert!(
            got == param || got.as_str().is_some_and(|g| g.contains(param)),
            "{shown}: {resp}"
        );
    }
    assert_eq!(srv.metric("rkv_prompt_tokens_total").await, 0.0);
    srv.stop().await;
}

trait JsonText {
    async fn json_text(self) -> serde_json::Value;
}

impl JsonText for reqwest::Response {
    async fn json_text(self) -> serde_json::Value {
        let t = self.text().await.expect("body");
        serde_json::from_str(&t).expect("JSON body")
    }
}
