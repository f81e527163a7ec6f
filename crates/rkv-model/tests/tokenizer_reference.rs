//! Tokenizer and chat-template parity with llama.cpp / transformers on the default model
//! (SmolLM2-135M-Instruct Q4_1 GGUF): rendered prompts, prompt token ids and decoded
//! generations of `shared/reference/*_greedy.jsonl` must match exactly.
//!
//! Needs the model (`rkv fetch`, or RKV_MODEL_PATH); fails, saying so, when it is absent.
//! The reference files come from `$RKV_REFERENCE_DIR` (default `shared/reference` beside
//! the workspace), else from the copies committed in `tests/data/` (the same files,
//! 30 KB), and the test says which it read.

mod reference_files;

use reference_files::{ids, load_reference, load_tokenizer};
use rkv_model::chat_template::ChatMessage;
use rkv_model::tokenizer::Tokenizer;

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
