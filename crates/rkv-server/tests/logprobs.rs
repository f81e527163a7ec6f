//! Log-probabilities and token ids through the HTTP API on the real model: completions
//! with `logprobs`, `echo` and `max_tokens: 0` (the prompt scored: lm-evaluation-harness's
//! log-likelihood request), chat with `logprobs` + `top_logprobs`, vLLM's
//! `return_token_ids`, and the same tokens and values whether streamed or not.

mod common;

use common::{start, MODEL_NAME};
use rkv_engine::EngineConfig;
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";
const COMP: &str = "/v1/completions";

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_score_a_prompt_and_its_continuation() {
    let srv = start(EngineConfig::default(), 64).await;
    // Greedy continuation with its log-probabilities and ids.
    let (status, gen) = srv
        .post(
            COMP,
            &json!({"model": MODEL_NAME, "prompt": "The capital of France is", "max_tokens": 6,
                    "temperature": 0, "ignore_eos": true, "logprobs": 3,
                    "return_token_ids": true}),
        )
        .await;
    assert_eq!(status, 200, "{gen}");
    let c = &gen["choices"][0];
    let prompt_ids = ids(&c["prompt_token_ids"]);
    let gen_ids = ids(&c["token_ids"]);
    assert_eq!(gen_ids.len(), 6);
    let lp = &c["logprobs"];
    let gen_lps = floats(&lp["token_logprobs"]);
    assert_eq!(gen_lps.len(), 6);
    assert_eq!(lp["tokens"].as_array().map(Vec::len), Some(6));
    let joined: String = lp["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_str().expect("token"))
        .collect();
    assert_eq!(joined, c["text"].as_str().expect("text"));
    let offsets = ids(&lp["text_offset"]);
    assert_eq!(offsets[0], 0);
    for (i, top) in lp["top_logprobs"]
        .as_array()
        .expect("top")
        .iter()
        .enumerate()
    {
        let top = top.as_object().expect("top dict");
        assert!((3..=4).contains(&top.len()), "{top:?}");
        // Greedy: the token is the most likely one.
        let best = top
            .values()
            .filter_map(Value::as_f64)
            .fold(f64::MIN, f64::max);
        assert!((gen_lps[i] - best).abs() < 1e-6, "step {i}: {top:?}");
        assert!(gen_lps[i] <= 0.0);
    }

    // The prompt and that continuation scored in one request: the echoed text, a null for
    // the first token, nothing generated, and the continuation's values again.
    let mut all: Vec<u64> = prompt_ids.clone();
    all.extend(&gen_ids);
    let (status, scored) = srv
        .post(
            COMP,
            &json!({"model": MODEL_NAME, "prompt": all, "max_tokens": 0, "echo": true,
                    "logprobs": 1, "temperature": 0}),
        )
        .await;
    assert_eq!(status, 200, "{scored}");
    let c = &scored["choices"][0];
    assert_eq!(c["finish_reason"], "length");
    assert_eq!(scored["usage"]["completion_tokens"], 0);
    assert_eq!(scored["usage"]["prompt_tokens"], all.len());
    let text = c["text"].as_str().expect("text");
    assert!(text.starts_with("The capital of France is"), "{text}");
    assert!(text.ends_with(gen["choices"][0]["text"].as_str().expect("text")));
    let lp = &c["logprobs"];
    let tl = lp["token_logprobs"].as_array().expect("token_logprobs");
    assert_eq!(tl.len(), all.len());
    assert!(tl[0].is_null() && lp["top_logprobs"][0].is_null());
    let echoed: Vec<f64> = tl[prompt_ids.len()..]
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect();
    // A prefill's rows against decode steps: the same kernels, so (nearly) the same.
    let diff = echoed
        .iter()
        .zip(&gen_lps)
        .map(|(a, b)| (a - b).abs())
        .fold(0f64, f64::max);
    eprintln!("echoed against generated: max |diff| {diff}");
    assert!(diff < 1e-3, "echoed {echoed:?} generated {gen_lps:?}");
    assert!(tl[1..].iter().all(|x| x.as_f64().is_some_and(|v| v <= 0.0)));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_logprobs_and_token_ids_stream_as_they_answer() {
    let srv = start(EngineConfig::default(), 64).await;
    let body = |stream: bool| {
        json!({"model": MODEL_NAME, "messages": [{"role": "user", "content": "Name a colour."}],
               "max_tokens": 10, "temperature": 0, "logprobs": true, "top_logprobs": 3,
               "return_token_ids": true, "stream": stream, "stop": ["\n"]})
    };
    let (status, whole) = srv.post(CHAT, &body(false)).await;
    assert_eq!(status, 200, "{whole}");
    let c = &whole["choices"][0];
    let content = c["logprobs"]["content"].as_array().expect("content");
    let token_ids = ids(&c["token_ids"]);
    assert_eq!(content.len(), token_ids.len());
    assert_eq!(whole["usage"]["completion_tokens"], token_ids.len());
    assert_eq!(
        whole["prompt_token_ids"].as_array().map(Vec::len),
        whole["usage"]["prompt_tokens"].as_u64().map(|n| n as usize)
    );
    for e in content {
        let bytes: Vec<u8> = e["bytes"]
            .as_array()
            .expect("bytes")
            .iter()
            .map(|b| b.as_u64().expect("byte") as u8)
            .collect();
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            e["token"].as_str().expect("token")
        );
        let top = e["top_logprobs"].as_array().expect("top_logprobs");
        assert_eq!(top.len(), 3);
        assert_eq!(top[0]["token"], e["token"], "greedy picks the top token");
        assert!(top[0]["logprob"].as_f64() >= top[1]["logprob"].as_f64());
    }

    // Streamed: the same tokens, the same values, each once.
    let chunks = srv.stream(CHAT, &body(true)).await.collect().await;
    assert_eq!(chunks[0]["prompt_token_ids"], whole["prompt_token_ids"]);
    assert!(chunks[1..]
        .iter()
        .all(|c| c.get("prompt_token_ids").is_none()));
    let mut s_content = Vec::new();
    let mut s_ids = Vec::new();
    for ch in &chunks {
        for c in ch["choices"].as_array().expect("choices") {
            if let Some(a) = c["logprobs"]["content"].as_array() {
                s_content.extend(a.iter().cloned());
            }
            if c.get("token_ids").is_some() {
                s_ids.extend(ids(&c["token_ids"]));
            }
        }
    }
    assert_eq!(&s_content, content);
    assert_eq!(s_ids, token_ids);

    // Completions streamed: offsets run on across chunks.
    let comp = |stream: bool| {
        json!({"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 8,
               "temperature": 0, "ignore_eos": true, "logprobs": 2, "stream": stream})
    };
    let (_, whole) = srv.post(COMP, &comp(false)).await;
    let chunks = srv.stream(COMP, &comp(true)).await.collect().await;
    let mut tokens = Vec::new();
    let mut offsets = Vec::new();
    for ch in &chunks {
        for c in ch["choices"].as_array().expect("choices") {
            tokens.extend(
                c["logprobs"]["tokens"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
            offsets.extend(
                c["logprobs"]["text_offset"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
        }
    }
    let lp = &whole["choices"][0]["logprobs"];
    assert_eq!(&tokens, lp["tokens"].as_array().expect("tokens"));
    assert_eq!(&offsets, lp["text_offset"].as_array().expect("offsets"));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_prompts_answers_each_in_order() {
    let srv = start(EngineConfig::default(), 64).await;
    let prompts = ["The capital of France is", "Once upon a time"];
    let body = |prompt: Value, stream: bool| {
        json!({"model": MODEL_NAME, "prompt": prompt, "max_tokens": 5, "temperature": 0,
               "ignore_eos": true, "n": 2, "logprobs": 1, "return_token_ids": true,
               "stream": stream})
    };
    let (status, batch) = srv.post(COMP, &body(json!(prompts), false)).await;
    assert_eq!(status, 200, "{batch}");
    let choices = batch["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 4);
    let mut prompt_tokens = 0;
    for (p, prompt) in prompts.iter().enumerate() {
        let (_, solo) = srv.post(COMP, &body(json!(prompt), false)).await;
        prompt_tokens += solo["usage"]["prompt_tokens"]
            .as_u64()
            .expect("prompt tokens");
        for j in 0..2 {
            let c = &choices[p * 2 + j];
            assert_eq!(c["index"], p * 2 + j);
            let s = &solo["choices"][j];
            assert_eq!(c["text"], s["text"], "prompt {p} sample {j}");
            assert_eq!(c["prompt_token_ids"], s["prompt_token_ids"]);
            assert_eq!(c["logprobs"], s["logprobs"]);
        }
    }
    assert_eq!(batch["usage"]["prompt_tokens"], prompt_tokens);
    assert_eq!(batch["usage"]["completion_tokens"], 4 * 5);
    // As token-id arrays, and streamed: the same texts.
    let ids: Vec<Value> = choices
        .iter()
        .step_by(2)
        .map(|c| c["prompt_token_ids"].clone())
        .collect();
    let chunks = srv
        .stream(COMP, &body(json!(ids), true))
        .await
        .collect()
        .await;
    let (texts, finish) = common::join_chunks(&chunks, 4);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(texts[i], c["text"].as_str().expect("text"), "choice {i}");
        assert_eq!(finish[i].as_deref(), Some("length"));
    }
    srv.stop().await;
}
