//! Constrained decoding from the command line, on the default model: `rkv generate
//! --json-schema FILE` prints JSON that satisfies the schema (and refuses, as a usage
//! error, a schema that cannot be enforced), and `rkv bench grammar` reports its fields.

mod common;

use common::{default_model, rkv};
use serde_json::{json, Value};

const SCHEMA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../bench/schemas/people.json"
);

#[test]
fn generate_with_a_json_schema_prints_valid_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = dir.path().join("city.json");
    std::fs::write(
        &schema,
        json!({"type": "object",
               "properties": {"city": {"type": "string", "maxLength": 30},
                              "population": {"type": "integer", "minimum": 0,
                                             "maximum": 100_000_000}},
               "required": ["city", "population"], "additionalProperties": false})
        .to_string(),
    )
    .expect("write");
    let model = default_model();
    let (code, out, err) = rkv(&[
        "generate",
        "--model",
        model.to_str().unwrap_or(""),
        "--chat",
        "--prompt",
        "Describe Paris.",
        "--json-schema",
        schema.to_str().unwrap_or(""),
        "--temperature",
        "0",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(v["finish_reason"], "stop", "{v}");
    let text = v["text"].as_str().expect("text");
    let answer: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert!(answer["city"].is_string(), "{answer}");
    assert!(answer["population"].as_u64().is_some(), "{answer}");

    // A schema llguidance does not enforce is a usage error (exit 2), one line.
    std::fs::write(&schema, r#"{"type": "array", "uniqueItems": true}"#).expect("write");
    let (code, _, err) = rkv(&[
        "generate",
        "--model",
        model.to_str().unwrap_or(""),
        "--prompt",
        "hi",
        "--json-schema",
        schema.to_str().unwrap_or(""),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--json-schema"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn bench_grammar_reports_both_runs() {
    let model = default_model();
    let (code, out, err) = rkv(&[
        "bench",
        "grammar",
        "--model",
        model.to_str().unwrap_or(""),
        "--schema",
        SCHEMA,
        "--repeat",
        "1",
        "--max-tokens",
        "64",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(v["bench"], "grammar");
    assert_eq!(v["tokens"], 64, "{v}");
    for k in [
        "free_decode_tokens_per_s",
        "constrained_decode_tokens_per_s",
        "constrained_over_free",
        "grammar_ms_per_token",
    ] {
        assert!(v[k]["median"].as_f64().is_some_and(|x| x > 0.0), "{k}: {v}");
    }
}
