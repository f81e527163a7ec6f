//! Self-contained tokenizer tests (no model file needed): chat-template rendering, the
//! streaming decoder, a tiny `tokenizer.json` directory and synthetic GGUF metadata for the
//! `gpt2` and `llama` (SentencePiece) tokenizer models.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};
use rkv_model::chat_template::{format_unix_time, ChatMessage, ChatTemplate, ChatTemplateError};
use rkv_model::tokenizer::{Tokenizer, TokenizerError};
use serde_json::json;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

fn render(src: &str, messages: &[ChatMessage], gen: bool) -> Result<String, ChatTemplateError> {
    ChatTemplate::new(src)?.render(messages, gen, Some("<s>"), Some("</s>"))
}

#[test]
fn chat_template_basic_and_trim_blocks() {
    let src = "{% for m in messages %}\n<{{ m.role }}>{{ m['content'] | trim }}\n{% endfor %}\n{% if add_generation_prompt %}<assistant>{% endif %}";
    let msgs = [ChatMessage::system(" sys "), ChatMessage::user("hi")];
    assert_eq!(
        render(src, &msgs, true).unwrap(),
        "<system>sys\n<user>hi\n<assistant>"
    );
    assert_eq!(
        render(src, &msgs, false).unwrap(),
        "<system>sys\n<user>hi\n"
    );
    // lstrip_blocks + trim_blocks, string concatenation, bos/eos, loop controls.
    let src = "  {% if true %}\n{{ bos_token + 'x' + eos_token }}{% endif %}{% for i in [1, 2, 3] %}{% if i == 2 %}{% continue %}{% endif %}{{ i }}{% endfor %}";
    assert_eq!(render(src, &[], false).unwrap(), "<s>x</s>13");
}

#[test]
fn chat_template_python_methods_and_tojson() {
    let src = "{{ messages[0].content.strip().upper() }}|{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}|{{ messages[0].content.startswith(' he') }}|{{ {'a': [1, 2], 'b': 'é<'} | tojson }}";
    assert_eq!(
        render(src, &[ChatMessage::user(" hello ")], false).unwrap(),
        "HELLO|a=1|True|{\"a\": [1, 2], \"b\": \"é<\"}"
    );
    let src = "{{ {'a': [1, 2], 'b': 'x', 'c': {}} | tojson(indent=2) }}";
    assert_eq!(
        render(src, &[], false).unwrap(),
        "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"x\",\n  \"c\": {}\n}"
    );
}

#[test]
fn chat_template_raise_exception_surfaces() {
    let src = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation must start with user!') }}{% endif %}ok";
    let err = render(src, &[ChatMessage::assistant("x")], false).unwrap_err();
    assert!(matches!(err, ChatTemplateError::Render(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("Conversation must start with user!"),
        "{err}"
    );
    assert_eq!(render(src, &[ChatMessage::user("x")], false).unwrap(), "ok");
    assert!(matches!(
        ChatTemplate::new("{% for %}"),
        Err(ChatTemplateError::Syntax(_))
    ));
}

/// A template (it comes with the model file) that loops without end, or asks `tojson`
/// for a gigantic indent, is a render error rather than a hang or an abort.
#[test]
fn chat_template_hostile_templates_are_errors() {
    let endless =
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x";
    assert!(matches!(
        render(endless, &[], false),
        Err(ChatTemplateError::Render(_))
    ));
    let wide = "{{ messages | tojson(indent=100000000000) }}";
    assert!(matches!(
        render(wide, &[ChatMessage::user("x")], false),
        Err(ChatTemplateError::Render(_))
    ));
}

#[test]
fn chat_template_list_form() {
    let v = json!([
        {"name": "tool_use", "template": "TOOLS"},
        {"name": "default", "template": "D{{ bos_token }}"}
    ]);
    let t = ChatTemplate::from_json(&v).unwrap();
    assert_eq!(t.render(&[], false, Some("<s>"), None).unwrap(), "D<s>");
    let t = ChatTemplate::from_json(&json!([{"name": "only", "template": "O"}])).unwrap();
    assert_eq!(t.render(&[], false, None, None).unwrap(), "O");
    assert!(ChatTemplate::from_json(&json!([])).is_err());
    assert!(ChatTemplate::from_json(&json!(3)).is_err());
}

#[test]
fn strftime_subset() {
    let t = 1_709_251_200 + 13 * 3600 + 5 * 60 + 7;
    assert_eq!(
        format_unix_time(t, "%Y-%m-%d %H:%M:%S %a %A %b %B %d %j %I %p %y %-d %%"),
        "2024-03-01 13:05:07 Fri Friday Mar March 01 061 01 PM 24 1 %"
    );
    assert_eq!(format_unix_time(0, "%d %b %Y"), "01 Jan 1970");
    let src = "{{ strftime_now('%Y') | length }}";
    assert_eq!(render(src, &[], false).unwrap(), "4");
}

/// The 256 byte-level symbols as ids 0..256, plus extra tokens after them.
fn byte_vocab() -> Vec<String> {
    let mut v: Vec<String> = ByteLevel::alphabet()
        .into_iter()
        .map(String::from)
        .collect();
    v.sort();
    v
}

fn gguf(metadata: Vec<(&str, Value)>) -> Content {
    Content {
        magic: VersionedMagic::GgufV3,
        metadata: metadata
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<HashMap<_, _>>(),
        tensor_infos: HashMap::new(),
        tensor_data_offset: 0,
    }
}

fn strs(v: &[String]) -> Value {
    Value::Array(v.iter().cloned().map(Value::String).collect())
}

fn gpt2_gguf() -> Content {
    let mut tokens = byte_vocab();
    let mut types = vec![1i32; tokens.len()];
    for (t, ty) in [
        ("he", 1),
        ("hel", 1),
        ("<|im_start|>", 3),
        ("<|im_end|>", 3),
        ("<tool>", 4),
    ] {
        tokens.push(t.to_owned());
        types.push(ty);
    }
    let im_end = (tokens.len() - 2) as u32;
    gguf(vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("smollm".into())),
        ("tokenizer.ggml.tokens", strs(&tokens)),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        (
            "tokenizer.ggml.merges",
            strs(&["h e".to_owned(), "he l".to_owned(), "x y".to_owned()]),
        ),
        ("tokenizer.ggml.eos_token_id", Value::U32(im_end)),
        ("tokenizer.ggml.bos_token_id", Value::U32(im_end - 1)),
        (
            "tokenizer.chat_template",
            Value::String("{{ messages[0].content }}{{ eos_token }}".into()),
        ),
    ])
}

#[test]
fn gguf_gpt2_specials_merges_and_stream() {
    let tok = Tokenizer::from_gguf(&gpt2_gguf()).unwrap();
    let n = tok.vocab_size() as u32;
    let (start, end, tool) = (n - 3, n - 2, n - 1);
    assert_eq!(tok.eos_token_ids(), &[end]);
    assert!(!tok.adds_bos());
    let ids = tok.encode("<|im_start|>hello<tool><|im_end|>").unwrap();
    assert_eq!(ids[0], start);
    assert_eq!(ids[1], tok.token_id("hel").unwrap());
    assert_eq!(&ids[ids.len() - 2..], &[tool, end]);
    assert_eq!(
        tok.decode(&ids, false).unwrap(),
        "<|im_start|>hello<tool><|im_end|>"
    );
    // Control tokens are skipped, user-defined ones kept.
    assert_eq!(tok.decode(&ids, true).unwrap(), "hello<tool>");

    // "é" is two byte tokens; the stream holds the first back.
    let ids = tok.encode("aé!").unwrap();
    assert_eq!(ids.len(), 4);
    let mut s = tok.stream(false);
    assert_eq!(s.push(ids[0]).unwrap().as_deref(), Some("a"));
    assert_eq!(s.push(ids[1]).unwrap(), None);
    assert_eq!(s.push(ids[2]).unwrap().as_deref(), Some("é"));
    assert_eq!(s.push(ids[3]).unwrap().as_deref(), Some("!"));
    assert_eq!(s.finish().unwrap(), None);
    // An incomplete character at the end comes out on finish, lossy.
    let mut s = tok.stream(false);
    assert_eq!(s.push(ids[1]).unwrap(), None);
    assert_eq!(s.finish().unwrap().as_deref(), Some("\u{FFFD}"));
    assert!(matches!(
        s.push(u32::MAX),
        Err(TokenizerError::UnknownId(_))
    ));

    let rendered = tok
        .apply_chat_template(&[ChatMessage::user("hi")], true)
        .unwrap();
    assert_eq!(rendered, "hi<|im_end|>");
}

#[test]
fn gguf_errors_are_clear() {
    let err = Tokenizer::from_gguf(&gguf(vec![])).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.model"), "{err}");
    let err = Tokenizer::from_gguf(&gguf(vec![
        ("tokenizer.ggml.model", Value::String("bert".into())),
        ("tokenizer.ggml.tokens", strs(&["a".to_owned()])),
    ]))
    .unwrap_err();
    assert!(
        matches!(&err, TokenizerError::Unsupported(m) if m == "bert"),
        "{err}"
    );
    // No template: a clear error.
    let mut c = gpt2_gguf();
    c.metadata.remove("tokenizer.chat_template");
    let tok = Tokenizer::from_gguf(&c).unwrap();
    assert!(tok.chat_template().is_none());
    let err = tok
        .apply_chat_template(&[ChatMessage::user("x")], true)
        .unwrap_err();
    assert!(matches!(err, TokenizerError::NoChatTemplate), "{err}");
}

/// A `llama` (SentencePiece) tokenizer's GGUF metadata: `<unk>`, `<s>`, `</s>`, the 256
/// byte tokens, then `words` (normal tokens, with their scores), and `extra` entries.
fn sentencepiece_gguf(
    words: impl Iterator<Item = (String, f32)>,
    extra: Vec<(&str, Value)>,
) -> Content {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let mut scores = vec![0.0f32; tokens.len()];
    for (w, score) in words {
        tokens.push(w);
        types.push(1);
        scores.push(score);
    }
    let mut metadata = vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strs(&tokens)),
        (
            "tokenizer.ggml.scores",
            Value::Array(scores.into_iter().map(Value::F32).collect()),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.unknown_token_id", Value::U32(0)),
    ];
    metadata.extend(extra);
    gguf(metadata)
}

#[test]
fn gguf_sentencepiece_llama() {
    let words = ["▁", "h", "e", "l", "o", "▁h", "ll", "▁he", "llo", "▁hello"];
    let c = sentencepiece_gguf(
        words
            .iter()
            .enumerate()
            .map(|(i, w)| ((*w).to_owned(), -(i as f32))),
        vec![
            ("tokenizer.ggml.bos_token_id", Value::U32(1)),
            ("tokenizer.ggml.eos_token_id", Value::U32(2)),
        ],
    );
    let tok = Tokenizer::from_gguf(&c).unwrap();
    let hello = tok.token_id("▁hello").unwrap();
    assert!(tok.adds_bos());
    assert_eq!(tok.encode("hello").unwrap(), vec![1, hello]);
    assert_eq!(tok.decode(&[1, hello], true).unwrap(), "hello");
    // Byte fallback for characters outside the vocabulary.
    let ids = tok.encode_raw("é").unwrap();
    assert_eq!(ids.len(), 3, "{ids:?}"); // ▁ <0xC3> <0xA9>
    assert_eq!(tok.decode(&ids, false).unwrap(), "é");
    let mut s = tok.stream(true);
    let mut out = String::new();
    for &id in &[hello, ids[0], ids[1], ids[2]] {
        if let Some(p) = s.push(id).unwrap() {
            out.push_str(&p);
        }
    }
    assert_eq!(out, "hello é");
}

/// SentencePiece tokens longer than 1 KB get no merges (finding a token's splits costs
/// its length squared): with tokens "a", "aa", ... up to 2048 a's, 2048 a's encode as two
/// 1024-a tokens, not the 2048-a one.
#[test]
fn gguf_sentencepiece_long_tokens_get_no_merges() {
    let words = std::iter::once(("▁".to_owned(), 0.0))
        .chain((0..=11).map(|k| ("a".repeat(1 << k), k as f32)));
    let c = sentencepiece_gguf(words, vec![]);
    let tok = Tokenizer::from_gguf(&c).unwrap();
    let (long, half) = (
        tok.token_id(&"a".repeat(2048)).unwrap(),
        tok.token_id(&"a".repeat(1024)).unwrap(),
    );
    let ids = tok.encode_raw(&"a".repeat(2048)).unwrap();
    assert!(!ids.contains(&long), "{ids:?}");
    assert_eq!(ids.iter().filter(|&&i| i == half).count(), 2, "{ids:?}");
}

#[test]
fn hf_dir_tokenizer_json() {
    use tokenizers::models::bpe::BPE;
    use tokenizers::AddedToken;

    let mut vocab: Vec<String> = byte_vocab();
    vocab.push("he".into());
    let map: HashMap<String, u32> = vocab
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(
            map.into_iter().collect::<tokenizers::models::bpe::Vocab>(),
            vec![("h".into(), "e".into())],
        )
        .build()
        .unwrap();
    let mut hf = tokenizers::Tokenizer::new(bpe);
    hf.with_pre_tokenizer(Some(ByteLevel::new(false, false, true)));
    hf.with_decoder(Some(ByteLevel::default()));
    hf.add_special_tokens(&[
        AddedToken::from("<s>", true),
        AddedToken::from("</s>", true),
        AddedToken::from("<eot>", true),
    ]);
    let dir = tempfile::tempdir().unwrap();
    hf.save(dir.path().join("tokenizer.json"), false).unwrap();
    let s_id = hf.token_to_id("<s>").unwrap();
    let e_id = hf.token_to_id("</s>").unwrap();
    let eot = hf.token_to_id("<eot>").unwrap();

    // Without tokenizer_config.json: no BOS, no EOS, no template.
    let tok = Tokenizer::from_hf_dir(dir.path()).unwrap();
    assert_eq!(tok.encode("he").unwrap(), vec![256]);
    assert!(tok.eos_token_ids().is_empty());
    assert!(matches!(
        tok.apply_chat_template(&[], true),
        Err(TokenizerError::NoChatTemplate)
    ));

    let config = json!({
        "bos_token": {"content": "<s>", "special": true},
        "eos_token": "</s>",
        "add_bos_token": true,
        "chat_template": [{"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}"}]
    });
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
    std::fs::write(
        dir.path().join("generation_config.json"),
        json!({"eos_token_id": [e_id, eot]}).to_string(),
    )
    .unwrap();
    let tok = Tokenizer::from_hf_dir(dir.path()).unwrap();
    assert_eq!(tok.bos_token_id(), Some(s_id));
    assert_eq!(tok.eos_token_ids(), &[e_id, eot]);
    let rendered = tok
        .apply_chat_template(&[ChatMessage::user("he")], true)
        .unwrap();
    assert_eq!(rendered, "<s>he</s>");
    // BOS is not doubled when the text already starts with it.
    assert_eq!(tok.encode(&rendered).unwrap(), vec![s_id, 256, e_id]);
    assert_eq!(tok.encode("he").unwrap(), vec![s_id, 256]);
    assert_eq!(tok.decode(&[s_id, 256, e_id], true).unwrap(), "he");

    let missing = Tokenizer::from_hf_dir(&dir.path().join("nope")).unwrap_err();
    assert!(matches!(missing, TokenizerError::Io { .. }), "{missing}");
}
