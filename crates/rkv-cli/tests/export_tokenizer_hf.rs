//! `rkv export-tokenizer` read by transformers: `AutoTokenizer.from_pretrained(DIR)` with
//! the hub switched off encodes the reference prompts (`shared/reference/*_greedy.jsonl`,
//! raw and rendered as chats) and awkward texts to exactly rkv's ids, and renders chats as
//! rkv does (`tests/hf_tokenizer_check.py`). The default model always; the 1.5B Qwen
//! model when it is cached, else skipped, saying so.
//!
//! The interpreter comes from `RKV_TEST_PYTHON` (a virtual environment with `pip install
//! transformers`; scripts/test.sh makes one); `RKV_SKIP_PYTHON_CLIENT=1` skips the test,
//! saying so. Also the command's refusal of a directory it must not write to.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{default_model, rkv};
use rkv_model::chat_template::ChatMessage;
use rkv_model::Tokenizer;
use serde_json::{json, Value};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hf_tokenizer_check.py");
const QWEN_FILE: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";

const TEXTS: [&str; 7] = [
    "",
    "  leading spaces and trailing  ",
    "numbers 1234567 and 3.14159",
    "unicode: héllo wörld — 日本語 🦀 emoji",
    "tabs\tand\nnew\r\nlines\n\n\n",
    "it's they're we'll I'd",
    "<|im_start|>system\nhi<|im_end|>\n",
];

/// The prompts of the reference generations: `$RKV_REFERENCE_DIR` (default
/// `shared/reference` beside the workspace), else rkv-model's committed copies, saying so.
fn reference_prompts() -> Vec<String> {
    let shared = std::env::var_os("RKV_REFERENCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/reference"
            ))
        });
    let committed = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../rkv-model/tests/data"
    ));
    let mut prompts = Vec::new();
    for name in ["llamacpp_greedy.jsonl", "transformers_f32_greedy.jsonl"] {
        let mut path = shared.join(name);
        if !path.exists() {
            eprintln!(
                "fallback: export_tokenizer_hf: {} is missing; using the committed copy",
                path.display()
            );
            path = committed.join(name);
        }
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let row: Value = serde_json::from_str(line).expect("reference line is JSON");
            prompts.push(row["prompt"].as_str().expect("prompt").to_owned());
        }
    }
    prompts
}

/// What rkv makes of the texts and chats: the cases the Python script checks.
fn cases(tok: &Tokenizer) -> Value {
    let mut texts: Vec<String> = TEXTS.iter().map(|t| t.to_string()).collect();
    let mut chats = Vec::new();
    for prompt in reference_prompts() {
        let convs = [
            vec![ChatMessage::user(&prompt)],
            vec![
                ChatMessage::system("You answer in one word."),
                ChatMessage::user(&prompt),
                ChatMessage::assistant("Paris."),
                ChatMessage::user("And of Italy?"),
            ],
        ];
        for msgs in convs {
            for gen in [true, false] {
                let rendered = tok.apply_chat_template(&msgs, gen).expect("render");
                chats.push(json!({"messages": msgs, "add_generation_prompt": gen,
                                  "rendered": rendered}));
            }
        }
        let chat = tok
            .apply_chat_template(&[ChatMessage::user(&prompt)], true)
            .expect("render");
        texts.push(prompt);
        texts.push(chat);
    }
    let texts: Vec<Value> = texts
        .iter()
        .map(|t| {
            json!({"text": t, "ids": tok.encode(t).expect("encode"),
                   "raw_ids": tok.encode_raw(t).expect("encode")})
        })
        .collect();
    json!({"bos_id": tok.bos_token_id(), "eos_id": tok.eos_token_ids().first(),
           "texts": texts, "chats": chats})
}

/// Exports `model` with the command, then runs the Python check on the export.
fn check_model(python: &std::ffi::OsStr, model: &Path) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tokenizer");
    let (model_s, dir_s) = (model.to_str().unwrap(), dir.to_str().unwrap());
    let (code, out, err) = rkv(&["export-tokenizer", "--model", model_s, "--out", dir_s]);
    assert_eq!(code, 0, "export-tokenizer failed: {err}");
    assert_eq!(
        out.lines().count(),
        rkv_model::tokenizer::EXPORT_FILES.len(),
        "{out}"
    );
    let tok = rkv_model::load_tokenizer(model)
        .expect("tokenizer")
        .tokenizer;
    let cases_path = tmp.path().join("cases.json");
    std::fs::write(&cases_path, cases(&tok).to_string()).unwrap();
    let out = Command::new(python)
        .arg(SCRIPT)
        .arg(&dir)
        .arg(&cases_path)
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.to_string_lossy()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("all ok"),
        "hf_tokenizer_check.py on {} failed ({}); is transformers installed in \
         RKV_TEST_PYTHON (`pip install transformers`)?\n{stdout}\n{stderr}",
        model.display(),
        out.status
    );
    println!("{}: {}", model.display(), stdout.trim());
}

#[test]
fn transformers_encodes_the_export_as_rkv_does() {
    let Some(python) = std::env::var_os("RKV_TEST_PYTHON") else {
        if std::env::var("RKV_SKIP_PYTHON_CLIENT").as_deref() == Ok("1") {
            eprintln!(
                "SKIPPED transformers_encodes_the_export_as_rkv_does: RKV_SKIP_PYTHON_CLIENT=1"
            );
            return;
        }
        panic!(
            "RKV_TEST_PYTHON is not set. Create a Python with transformers and name it:\n  \
             python3 -m venv /tmp/rkv-venv && /tmp/rkv-venv/bin/pip install openai transformers\n  \
             export RKV_TEST_PYTHON=/tmp/rkv-venv/bin/python\n\
             (scripts/test.sh does this), or set RKV_SKIP_PYTHON_CLIENT=1 to skip this test."
        );
    };
    let model = default_model();
    check_model(&python, &model);
    let qwen = model.with_file_name(QWEN_FILE);
    if qwen.exists() {
        check_model(&python, &qwen);
    } else {
        eprintln!(
            "SKIPPED the Qwen half of transformers_encodes_the_export_as_rkv_does: {} is \
             absent (`rkv fetch qwen2.5-coder-1.5b`)",
            qwen.display()
        );
    }
}

#[test]
fn export_refuses_a_model_directory() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("config.json"), "{}").unwrap();
    let model = default_model();
    let dir = tmp.path().to_str().unwrap();
    let (code, _, err) = rkv(&[
        "export-tokenizer",
        "--model",
        model.to_str().unwrap(),
        "--out",
        dir,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("error: cannot export the tokenizer to"),
        "{err}"
    );
    assert!(err.contains("\"config.json\""), "{err}");
    assert!(
        !tmp.path().join("tokenizer.json").exists(),
        "nothing is written"
    );
}
