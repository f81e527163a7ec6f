//! Tokenizer and chat-template parity with llama.cpp / transformers on the default model
//! (SmolLM2-135M-Instruct Q4_1 GGUF): rendered prompts, prompt token ids and decoded
//! generations of `shared/reference/*_greedy.jsonl` must match exactly.
//!
//! Needs the model (`rkv fetch`, or RKV_MODEL_PATH); fails, saying so, when it is absent.
//! The reference files come from `$RKV_REFERENCE_DIR` (default `shared/reference` beside
//! the workspace), else from the copies committed in `tests/data/` (the same files,
//! 30 KB), and the test says which it read.

use std::path::PathBuf;

use candle_core::quantized::gguf_file;
use rkv_model::chat_template::ChatMessage;
use rkv_model::tokenizer::Tokenizer;
use serde_json::Value;

const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn model_path() -> PathBuf {
    if let Ok(p) = std::env::var("RKV_MODEL_PATH") {
        return PathBuf::from(p);
    }
    let home = std::env::var("RKV_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| ".".into())).join(".cache/rkv")
        });
    home.join("models").join(MODEL_FILE)
}

fn reference_dir() -> PathBuf {
    std::env::var("RKV_REFERENCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/reference"
            ))
        })
}

fn load_tokenizer() -> Tokenizer {
    let path = model_path();
    assert!(
        path.exists(),
        "model file {} is missing: download it with `rkv fetch` (or point RKV_MODEL_PATH / \
         RKV_HOME at a copy of {MODEL_FILE})",
        path.display()
    );
    let mut file = std::fs::File::open(&path).expect("open model file");
    let content = gguf_file::Content::read(&mut file).expect("read GGUF metadata");
    Tokenizer::from_gguf(&content).expect("build tokenizer from GGUF")
}

/// `name` in the reference folder, else its committed copy; says which.
fn reference_file(name: &str) -> PathBuf {
    let shared = reference_dir().join(name);
    if shared.exists() {
        println!("reference: {}", shared.display());
        return shared;
    }
    let local = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data")).join(name);
    // Straight to the stream, so that a normal (captured) test run shows it too.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "fallback: tokenizer_reference: {} is missing; using the committed copy {}\n",
            shared.display(),
            local.display()
        )
        .as_bytes(),
    );
    local
}

fn load_reference(name: &str) -> Vec<Value> {
    let path = reference_file(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reference file {name} is in neither the reference folder nor tests/data ({e}): \
             set RKV_REFERENCE_DIR to the directory holding it (shared/reference)"
        )
    });
    let rows: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("reference line is JSON"))
        .collect();
    assert!(!rows.is_empty(), "{} has no rows", path.display());
    rows
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn check_file(tok: &Tokenizer, name: &str) {
    for (i, row) in load_reference(name).iter().enumerate() {
        let prompt = row["prompt"].as_str().expect("prompt");
        let rendered = if row["chat"].as_bool().expect("chat") {
            tok.apply_chat_template(&[ChatMessage::user(prompt)], true)
                .expect("render chat template")
        } else {
            prompt.to_owned()
        };
        assert_eq!(
            rendered,
            row["rendered"].as_str().unwrap(),
            "{name} #{i}: rendered"
        );
        let got = tok.encode(&rendered).expect("encode");
        assert_eq!(
            got,
            ids(&row["prompt_token_ids"]),
            "{name} #{i}: prompt ids"
        );

        let gen = ids(&row["token_ids"]);
        let text = row["text"].as_str().expect("text");
        assert_eq!(
            tok.decode(&gen, false).unwrap(),
            text,
            "{name} #{i}: decode"
        );

        let mut stream = tok.stream(false);
        let mut streamed = String::new();
        for &id in &gen {
            if let Some(piece) = stream.push(id).unwrap() {
                streamed.push_str(&piece);
            }
        }
        if let Some(rest) = stream.finish().unwrap() {
            streamed.push_str(&rest);
        }
        assert_eq!(streamed, text, "{name} #{i}: streamed decode");
    }
}

#[test]
fn smollm2_metadata() {
    let tok = load_tokenizer();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.eos_token_ids(), &[2]);
    assert_eq!(tok.bos_token_id(), Some(1));
    assert!(!tok.adds_bos());
    assert_eq!(tok.token_str(2).as_deref(), Some("<|im_end|>"));
    assert_eq!(tok.encode("<|im_start|>user").unwrap()[0], 1);
    assert_eq!(tok.decode(&[1, 2], true).unwrap(), "");
    assert!(tok.chat_template().is_some());
}

#[test]
fn llamacpp_reference_prompts_and_decodes() {
    check_file(&load_tokenizer(), "llamacpp_greedy.jsonl");
}

#[test]
fn transformers_reference_prompts_and_decodes() {
    check_file(&load_tokenizer(), "transformers_f32_greedy.jsonl");
}

#[test]
fn tricky_texts_round_trip() {
    let tok = load_tokenizer();
    for text in [
        "",
        " ",
        "  leading spaces and trailing  ",
        "numbers 1234567 and 3.14159",
        "unicode: héllo wörld — 日本語 🦀 emoji",
        "tabs\tand\nnew\r\nlines\n\n\n",
        "it's they're we'll I'd",
        "<|im_start|>system\nhi<|im_end|>\n",
    ] {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), text, "{text:?}");
    }
    // Digits are split one by one by the smollm pre-tokenizer.
    let ids = tok.encode("2024").unwrap();
    assert_eq!(ids.len(), 4);
    assert!(tok.decode(&[u32::MAX], false).is_err());
}

#[test]
fn token_bytes_put_together_give_the_text() {
    let tok = load_tokenizer();
    for row in load_reference("transformers_f32_greedy.jsonl") {
        let rendered = row["rendered"].as_str().expect("rendered");
        let bytes: Vec<u8> = ids(&row["prompt_token_ids"])
            .iter()
            .flat_map(|&id| tok.token_bytes(id))
            .collect();
        assert_eq!(String::from_utf8(bytes).expect("UTF-8"), rendered);
    }
    // A multi-byte character split over tokens: each part is its own bytes.
    let ids = tok.encode_raw("naïve 日本語 🦀").expect("encode");
    let bytes: Vec<u8> = ids.iter().flat_map(|&id| tok.token_bytes(id)).collect();
    assert_eq!(bytes, "naïve 日本語 🦀".as_bytes());
    assert!(ids
        .iter()
        .any(|&id| tok.token_text(id).contains('\u{fffd}')));
    assert_eq!(tok.token_text(2), "<|im_end|>");
}
