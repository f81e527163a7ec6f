//! A two-turn conversation through the chat API on the real model: the second turn
//! re-sends the first turn's history, takes it from the prefix cache
//! (`usage.prompt_tokens_details.cached_tokens`) and answers token for token what a server
//! with the cache off answers, with FullKV and with R-KV.

mod common;

use common::{start, MODEL_NAME};
use rkv_engine::EngineConfig;
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";

fn body(messages: &Value, kv: &Value) -> Value {
    json!({"model": MODEL_NAME, "messages": messages, "max_tokens": 24, "temperature": 0,
           "ignore_eos": true, "return_token_ids": true, "kv_compression": kv})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_turn_reuses_the_first_and_answers_the_same() {
    let cached = start(EngineConfig::default(), 64).await;
    let uncached = start(
        EngineConfig {
            prefix_cache: false,
            ..EngineConfig::default()
        },
        64,
    )
    .await;
    let system = "You answer questions about a long story. ".repeat(70);
    for kv in [
        json!({"policy": "full"}),
        json!({"policy": "rkv", "budget": 256, "buffer": 32, "window": 8}),
    ] {
        let mut messages = json!([{"role": "system", "content": system},
                                  {"role": "user", "content": "Tell me how the story starts."}]);
        let (status, first) = cached.post(CHAT, &body(&messages, &kv)).await;
        assert_eq!(status, 200, "{first}");
        let answer = first["choices"][0]["message"]["content"].clone();
        let history = first["usage"]["prompt_tokens"]
            .as_u64()
            .expect("prompt tokens");
        assert!(history > 500, "{history}");
        let list = messages.as_array_mut().expect("messages");
        list.push(json!({"role": "assistant", "content": answer}));
        list.push(json!({"role": "user", "content": "And then?"}));
        let (s1, on) = cached.post(CHAT, &body(&messages, &kv)).await;
        let (s2, off) = uncached.post(CHAT, &body(&messages, &kv)).await;
        assert_eq!((s1, s2), (200, 200), "{on}\n{off}");
        let hit = on["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .expect("cached tokens");
        // Every whole block of the first turn's prompt (its tail is computed again).
        eprintln!("{kv}: {hit} of {history} history tokens cached");
        assert!(hit + 64 >= history, "{kv}: {hit} of {history}");
        assert_eq!(off["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        assert_eq!(on["prompt_token_ids"], off["prompt_token_ids"]);
        assert_eq!(
            on["choices"][0]["token_ids"], off["choices"][0]["token_ids"],
            "{kv}: the second turn differs with the prefix cache"
        );
    }
    cached.stop().await;
    uncached.stop().await;
}
