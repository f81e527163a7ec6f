//! Chat templates render as jinja2 renders them for transformers' `apply_chat_template`:
//! the committed renderings (`tests/data/template_renders.jsonl`, made by
//! `scripts/template_reference.py` with jinja2's sandbox) of the fuzz seeds' templates and
//! of `tests/data/templates/operators.jinja`, which runs every operator, filter and method
//! the bounded rewrite (`template_guard`, `template_filters`) wraps.

use std::path::Path;

use rkv_model::chat_template::{ChatMessage, ChatTemplate};

#[test]
fn templates_render_as_jinja2_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let data = root.join("crates/rkv-model/tests/data/template_renders.jsonl");
    let text = std::fs::read_to_string(&data).expect("committed template renderings");
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let row: serde_json::Value = serde_json::from_str(line).expect("a JSON row");
        let path = row["template"].as_str().expect("template path");
        let source = std::fs::read_to_string(root.join(path)).expect("template source");
        let messages: Vec<ChatMessage> =
            serde_json::from_value(row["messages"].clone()).expect("messages");
        let gen = row["add_generation_prompt"].as_bool().expect("flag");
        let template = ChatTemplate::new(&source).expect("compiles");
        let got = template
            .render(&messages, gen, Some("<s>"), Some("</s>"))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            got,
            row["output"].as_str().expect("output"),
            "{path} (gen {gen})"
        );
        checked += 1;
    }
    assert!(checked >= 12, "only {checked} renderings checked");
}
