//! `response_format` through the HTTP API on the default model: chat with a JSON Schema
//! (n = 3, sampled) whose every choice parses and validates, completions with
//! `json_object` streamed, a stop string inside a constrained output, and the refusals
//! (unknown type, missing schema, a schema that is not JSON Schema, one using what the
//! grammar engine cannot enforce): a 400 naming `response_format`, with nothing run.

mod common;

use common::{join_chunks, start, MODEL_NAME};
use rkv_engine::EngineConfig;
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";
const COMP: &str = "/v1/completions";

fn city_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1, "maxLength": 30},
            "population": {"type": "integer", "minimum": 0, "maximum": 100_000_000},
            "capital": {"type": "boolean"},
            "rivers": {"type": "array", "items": {"type": "string", "maxLength": 20},
                       "maxItems": 3}
        },
        "required": ["city", "population", "capital", "rivers"],
        "additionalProperties": false
    })
}

fn json_schema_format(schema: &Value) -> Value {
    json!({"type": "json_schema",
           "json_schema": {"name": "city", "schema": schema, "strict": true}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_choices_validate_against_the_schema() {
    let srv = start(EngineConfig::default(), 64).await;
    let schema = city_schema();
    let (status, body) = srv
        .post(
            CHAT,
            &json!({"model": MODEL_NAME,
                    "messages": [{"role": "user", "content": "Describe Paris as JSON."}],
                    "max_tokens": 200, "temperature": 0.8, "seed": 11, "n": 3,
                    "response_format": json_schema_format(&schema)}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let validator = jsonschema::validator_for(&schema).expect("schema");
    for c in body["choices"].as_array().expect("choices") {
        let text = c["message"]["content"].as_str().expect("content");
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(validator.is_valid(&v), "{text}");
        assert_eq!(c["finish_reason"], "stop", "{c}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_completion_is_a_json_object_and_stop_strings_still_cut() {
    let srv = start(EngineConfig::default(), 64).await;
    let body = json!({"model": MODEL_NAME, "prompt": "A JSON object describing a cat:",
                      "max_tokens": 120, "temperature": 0.7, "seed": 5, "stream": true,
                      "response_format": {"type": "json_object"}});
    let chunks = srv.stream(COMP, &body).await.collect().await;
    let (texts, finish) = join_chunks(&chunks, 1);
    // A complete object ends the sequence (`stop`); `length` leaves a cut one.
    match finish[0].as_deref() {
        Some("stop") => {
            let v: Value =
                serde_json::from_str(&texts[0]).unwrap_or_else(|e| panic!("{:?}: {e}", texts[0]));
            assert!(v.is_object(), "{v}");
        }
        other => {
            assert_eq!(other, Some("length"));
            assert!(texts[0].starts_with('{'), "{:?}", texts[0]);
        }
    }
    // A stop string inside the constrained output ends it there.
    let (status, cut) = srv
        .post(
            CHAT,
            &json!({"model": MODEL_NAME,
                    "messages": [{"role": "user", "content": "Describe Rome as JSON."}],
                    "max_tokens": 200, "temperature": 0, "stop": ["\"population\""],
                    "response_format": json_schema_format(&city_schema())}),
        )
        .await;
    assert_eq!(status, 200, "{cut}");
    let text = cut["choices"][0]["message"]["content"]
        .as_str()
        .expect("text");
    assert!(text.starts_with("{\"city\":\""), "{text:?}");
    assert!(!text.contains("population"), "{text:?}");
    assert_eq!(cut["choices"][0]["finish_reason"], "stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_response_formats_are_refused_naming_the_field() {
    let srv = start(EngineConfig::default(), 64).await;
    let cases = [
        json!("json"),
        json!({"type": "yaml"}),
        json!({"type": "json_schema"}),
        json!({"type": "json_schema", "json_schema": {"name": "x"}}),
        // Not JSON Schema: an unknown type, a `properties` that is not an object.
        json!({"type": "json_schema", "json_schema": {"name": "x",
               "schema": {"type": "objekt"}}}),
        json!({"type": "json_schema", "json_schema": {"name": "x",
               "schema": {"type": "object", "properties": 5}}}),
        // Valid JSON Schema the grammar engine does not enforce.
        json!({"type": "json_schema", "json_schema": {"name": "x",
               "schema": {"type": "array", "uniqueItems": true}}}),
        json!({"type": "json_schema", "json_schema": {"name": "x",
               "schema": {"not": {"type": "string"}}}}),
    ];
    for rf in &cases {
        for (path, body) in [
            (
                CHAT,
                json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                       "response_format": rf}),
            ),
            (
                COMP,
                json!({"prompt": "hi", "max_tokens": 4, "response_format": rf}),
            ),
        ] {
            let (status, err) = srv.post(path, &body).await;
            assert_eq!(status, 400, "{path} {rf}: {err}");
            assert_eq!(
                err["error"]["param"], "response_format",
                "{path} {rf}: {err}"
            );
        }
    }
    // Nothing was admitted.
    assert_eq!(srv.metric("rkv_prompt_tokens_total").await, 0.0);
    // `text` is free text, as without the field.
    let (status, ok) = srv
        .post(
            COMP,
            &json!({"prompt": "hi", "max_tokens": 2, "response_format": {"type": "text"}}),
        )
        .await;
    assert_eq!(status, 200, "{ok}");
}
