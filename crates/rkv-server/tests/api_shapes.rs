//! The OpenAI shapes on the real model: whole and streamed chat and completions, `n`,
//! `stream_options.include_usage`, stop strings, `kv_compression` (its prompt modes too)
//! with `usage.kv`, the model list and the metrics exposition; a repeated prompt's
//! `usage.prompt_tokens_details.cached_tokens` and the prefix cache's metrics.

mod common;

use common::{greedy, join_chunks, metric_value, solo_text, start, MODEL_NAME};
use rkv_engine::EngineConfig;
use serde_json::{json, Value};

fn chat_body(n: usize, stream: bool) -> Value {
    json!({
        "model": MODEL_NAME,
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "Name a colour."}]}],
        "max_completion_tokens": 12,
        "temperature": 0.8,
        "top_p": 0.95,
        "seed": 7,
        "n": n,
        "stream": stream,
        "stream_options": {"include_usage": true},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_shapes() {
    let srv = start(EngineConfig::default(), 64).await;

    // Whole chat, n = 2, seeded sampling.
    let (status, whole) = srv.post("/v1/chat/completions", &chat_body(2, false)).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["object"], "chat.completion");
    assert!(whole["id"]
        .as_str()
        .is_some_and(|s| s.starts_with("chatcmpl-")));
    assert!(whole["created"].as_u64().is_some());
    assert_eq!(whole["model"], MODEL_NAME);
    let choices = whole["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 2);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert_eq!(c["message"]["role"], "assistant");
        assert!(c["message"]["content"].is_string());
        assert!(matches!(
            c["finish_reason"].as_str(),
            Some("stop" | "length")
        ));
    }
    let u = &whole["usage"];
    let completion = u["completion_tokens"].as_u64().expect("completion_tokens");
    assert!((2..=24).contains(&completion), "{u}");
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().expect("prompt_tokens") + completion)
    );
    assert_eq!(u["kv"]["policy"], "full");
    assert_eq!(u["kv"]["budget"], Value::Null);
    assert!(u["kv"]["slots_peak"].as_u64() > Some(0));
    assert!(u["kv"]["bytes_peak"].as_u64() > Some(0));

    // The same request streamed gives the same texts, in chunks ending with [DONE].
    let chunks = srv
        .stream("/v1/chat/completions", &chat_body(2, true))
        .await
        .collect()
        .await;
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert!(chunks.iter().all(|c| c["id"] == chunks[0]["id"]));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let last = chunks.last().expect("chunks");
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], completion);
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["usage"].is_null()));
    let (texts, finish) = join_chunks(&chunks, 2);
    for i in 0..2 {
        assert_eq!(
            texts[i],
            choices[i]["message"]["content"].as_str().unwrap_or("")
        );
        assert_eq!(finish[i].as_deref(), choices[i]["finish_reason"].as_str());
    }

    // Completions: a stop string cuts the text, streamed or not.
    let prompt = "The three primary colours are";
    let full = solo_text(&srv, prompt, 16, None).await;
    let text = full["choices"][0]["text"]
        .as_str()
        .expect("text")
        .to_string();
    assert_eq!(full["object"], "text_completion");
    assert!(full["id"].as_str().is_some_and(|s| s.starts_with("cmpl-")));
    let words: Vec<&str> = text.split_whitespace().collect();
    assert!(words.len() >= 3, "greedy text too short: {text:?}");
    let stop = format!(" {}", words[2]);
    let cut = text.find(&stop).expect("stop in text");
    let mut body = greedy(prompt, 16, None, false);
    body["stop"] = json!([stop, "\u{1F600}never"]);
    let (status, stopped) = srv.post("/v1/completions", &body).await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["choices"][0]["text"], &text[..cut]);
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    body["stream"] = json!(true);
    let chunks = srv.stream("/v1/completions", &body).await.collect().await;
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    let (texts, finish) = join_chunks(&chunks, 1);
    assert_eq!(texts[0], &text[..cut]);
    assert_eq!(finish[0].as_deref(), Some("stop"));

    // Per-request compression, reported back in usage.kv.
    let kv = json!({"policy": "rkv", "budget": 16, "buffer": 8, "window": 4});
    let body = solo_text(&srv, prompt, 32, Some(&kv)).await;
    let k = &body["usage"]["kv"];
    assert_eq!(k["policy"], "rkv");
    assert_eq!(k["budget"], 16);
    assert!(k["compressions"].as_u64() > Some(0), "{k}");
    assert!(k["evicted_tokens"].as_u64() > Some(0), "{k}");
    assert!(k["slots_peak"].as_u64() <= Some(24), "{k}");
    // A new policy with its own parameters, per request.
    let kv = json!({"policy": "gkv", "budget": 16, "buffer": 8, "window": 4,
                    "params": {"alpha": 0.9, "lambda": 0.4}});
    let body = solo_text(&srv, prompt, 32, Some(&kv)).await;
    let k = &body["usage"]["kv"];
    assert_eq!(k["policy"], "gkv");
    assert!(k["compressions"].as_u64() > Some(0), "{k}");
    assert!(k["slots_peak"].as_u64() <= Some(24), "{k}");
    // A long prompt compressed between chunks of 8: never more than 16 + 8 + 8 slots;
    // kept whole, the prompt's length.
    let long = prompt.repeat(12);
    let kv = json!({"policy": "snapkv", "budget": 16, "buffer": 8, "window": 4,
                    "prompt": "compress", "prompt_chunk": 8});
    let body = solo_text(&srv, &long, 4, Some(&kv)).await;
    let k = &body["usage"]["kv"];
    let prompt_tokens = body["usage"]["prompt_tokens"]
        .as_u64()
        .expect("prompt_tokens");
    assert!(prompt_tokens > 40, "{body}");
    assert!(k["slots_peak"].as_u64() <= Some(32), "{k}");
    assert!(k["compressions"].as_u64() > Some(2), "{k}");
    let kv = json!({"policy": "snapkv", "budget": 16, "buffer": 8, "window": 4, "prompt": "keep"});
    let body = solo_text(&srv, &long, 4, Some(&kv)).await;
    assert_eq!(
        body["usage"]["kv"]["slots_peak"].as_u64(),
        Some(prompt_tokens)
    );

    // The model list and the metrics.
    let (status, models) = srv.get("/v1/models").await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).expect("JSON");
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], MODEL_NAME);
    assert_eq!(srv.get(&format!("/v1/models/{MODEL_NAME}")).await.0, 200);
    assert_eq!(srv.get("/v1/models/other").await.0, 404);
    let (status, text) = srv.get("/metrics").await;
    assert_eq!(status, 200);
    for name in [
        "rkv_requests_running",
        "rkv_requests_waiting",
        "rkv_requests_preempted",
        "rkv_kv_blocks_used",
        "rkv_kv_blocks_total",
        "rkv_prompt_tokens_total",
        "rkv_generated_tokens_total",
        "rkv_compressions_total",
        "rkv_evicted_tokens_total",
        "rkv_preemptions_total",
        "rkv_requests_rejected_total",
        "rkv_kv_blocks_cached",
        "rkv_prefix_cache_queries_total",
        "rkv_prefix_cache_hits_total",
    ] {
        assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
        assert!(metric_value(&text, name).is_some(), "{name} has no value");
    }
    assert!(metric_value(&text, "rkv_kv_blocks_total") > Some(0.0));
    assert!(metric_value(&text, "rkv_compressions_total") > Some(0.0));
    assert!(metric_value(&text, "rkv_time_to_first_token_seconds_count") >= Some(6.0));
    assert!(metric_value(&text, "rkv_time_per_output_token_seconds_count") >= Some(6.0));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_prompt_reports_its_cached_tokens() {
    let srv = start(EngineConfig::default(), 64).await;
    let text = "The committee met on Tuesday to review the budget. ".repeat(12);
    let body = json!({
        "model": MODEL_NAME, "prompt": text, "max_tokens": 8, "temperature": 0,
    });
    let (status, first) = srv.post("/v1/completions", &body).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let prompt = first["usage"]["prompt_tokens"]
        .as_u64()
        .expect("prompt_tokens");
    let (status, second) = srv.post("/v1/completions", &body).await;
    assert_eq!(status, 200, "{second}");
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached_tokens");
    // Whole blocks of 32 slots, the prompt's last token computed.
    assert_eq!(cached, (prompt - 1) / 32 * 32, "{second}");
    assert_eq!(second["choices"][0]["text"], first["choices"][0]["text"]);
    let (_, metrics) = srv.get("/metrics").await;
    assert_eq!(
        metric_value(&metrics, "rkv_prefix_cache_hits_total"),
        Some(cached as f64)
    );
    assert_eq!(
        metric_value(&metrics, "rkv_prefix_cache_queries_total"),
        Some(2.0 * prompt as f64)
    );
    // Idle again: no block held, the prompt's whole blocks cached.
    srv.wait_metric("rkv_kv_blocks_used", |v| v == 0.0, 30)
        .await;
    let cached_blocks = srv.metric("rkv_kv_blocks_cached").await;
    assert!(cached_blocks >= (prompt / 32) as f64, "{cached_blocks}");
    srv.stop().await;
}
