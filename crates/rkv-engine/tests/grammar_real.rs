//! Structured outputs on real models: every sampled output under a JSON Schema parses and
//! validates against it (checked by the `jsonschema` crate, an independent validator).
//! The default model (SmolLM2-135M): 50 samples at temperature 0.8 of each of three
//! schemas (`tests/data/schemas/`: bounded strings, integers in ranges, arrays with item
//! bounds, an enum, a boolean, `anyOf` with null, `$defs`/`$ref`, an optional property
//! with a `pattern`), the three requests of 50 samples batched in one engine.
//! Qwen2.5-Coder-1.5B (when cached; skipped with a message otherwise): three samples of
//! each schema.

mod common;

use std::path::{Path, PathBuf};

use rkv_engine::{
    Engine, EngineConfig, FinishReason, GenerationRequest, GrammarSpec, KvDtype, SamplingParams,
};
use rkv_model::chat_template::ChatMessage;
use rkv_model::WeightMode;
use serde_json::Value;

const SCHEMAS: [&str; 3] = ["person", "review", "order"];

fn schema(name: &str) -> Value {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/schemas"))
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).expect("schema JSON")
}

fn engine(path: &Path, kv_blocks: usize) -> Engine {
    let model = rkv_model::load(path, WeightMode::Native).expect("load the model");
    Engine::new(
        model,
        EngineConfig {
            kv_dtype: KvDtype::F16,
            kv_blocks,
            ..EngineConfig::default()
        },
    )
    .expect("engine")
}

/// A chat prompt asking for JSON of `schema`, as users write it.
fn prompt(e: &Engine, name: &str, schema: &Value) -> Vec<u32> {
    let msgs = [
        ChatMessage::new(
            "system",
            format!("Answer with JSON that follows this schema: {schema}"),
        ),
        ChatMessage::user(format!("Write an example {name} record.")),
    ];
    let text = e
        .tokenizer()
        .apply_chat_template(&msgs, true)
        .expect("template");
    e.tokenizer().encode(&text).expect("encode")
}

/// Runs `n` samples of each schema, all at once, and checks every output.
fn all_valid(e: &mut Engine, n: usize, tag: &str) {
    let mut jobs = Vec::new();
    for (k, name) in SCHEMAS.iter().enumerate() {
        let s = schema(name);
        let grammar = e
            .grammars()
            .compile(&GrammarSpec::JsonSchema(s.clone()))
            .unwrap_or_else(|err| panic!("{tag} {name}: compile: {err}"));
        let req = GenerationRequest {
            prompt: prompt(e, name, &s),
            sampling: SamplingParams {
                temperature: 0.8,
                top_k: 0,
                top_p: 1.0,
                seed: 1000 * k as u64,
            },
            max_tokens: 400,
            ignore_eos: false,
            stop: Vec::new(),
            logprobs: Default::default(),
            grammar: Some(grammar),
        };
        let ids = e.add_request_n(req, None, n).expect("add");
        jobs.push((name, s, ids));
    }
    let mut steps = 0;
    while e.has_work() {
        e.step();
        let failed = e.take_failures();
        assert!(failed.is_empty(), "{tag}: step {steps}: {failed:?}");
        steps += 1;
        assert!(steps < 20_000, "{tag}: runaway");
    }
    for (name, s, ids) in jobs {
        let validator = jsonschema::validator_for(&s).expect("a valid schema");
        let mut distinct = std::collections::BTreeSet::new();
        let mut first = String::new();
        for (i, id) in ids.into_iter().enumerate() {
            let out = e.take_output(id).expect("output");
            let at = format!("{tag} {name} sample {i}: {:?}", out.text);
            assert_eq!(out.finish_reason, FinishReason::Stop, "{at}");
            let v: Value = serde_json::from_str(&out.text).unwrap_or_else(|err| {
                panic!("{at}: not JSON: {err}");
            });
            let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{at}: {errors:?}");
            if i == 0 {
                first = out.text.clone();
            }
            distinct.insert(out.text);
        }
        eprintln!(
            "{tag} {name}: {} distinct valid outputs of {n}, the first: {first}",
            distinct.len()
        );
        // Many draws at temperature 0.8 differ (a few of a confident model may not).
        assert!(
            distinct.len() > 1 || n < 10,
            "{tag} {name}: all samples alike"
        );
    }
}

#[test]
fn default_model_outputs_validate_against_their_schemas() {
    // 150 sequences of up to a few hundred tokens each (a few dozen on average), the
    // prompts shared by their samples: 800 blocks of 32 slots hold them.
    let mut e = engine(&common::model_path(), 800);
    all_valid(&mut e, 50, "SmolLM2-135M");
}

#[test]
fn qwen_outputs_validate_against_their_schemas() {
    let home = std::env::var_os("RKV_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/rkv")
        });
    let path = home.join("models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
    if !path.exists() {
        eprintln!(
            "SKIPPED qwen_outputs_validate_against_their_schemas: {} is absent \
             (`rkv fetch qwen2.5-coder-1.5b`)",
            path.display()
        );
        return;
    }
    let mut e = engine(&path, 200);
    all_valid(&mut e, 3, "Qwen2.5-Coder-1.5B");
}
