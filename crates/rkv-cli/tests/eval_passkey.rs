//! `rkv eval passkey` end to end on the default model: a 600-token passkey prompt under
//! FullKV and SnapKV with the prompt kept and compressed gives one record per run, the
//! compressed run within budget + buffer + chunk, the kept one holding the prompt;
//! `--print-prompt` prints the prompt and runs nothing; bad flags are usage errors.

mod common;

use common::{default_model, rkv};
use serde_json::Value;

#[test]
fn full_keep_and_compress_each_answer_once() {
    let model = default_model();
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("runs.jsonl");
    let (code, out, err) = rkv(&[
        "eval",
        "passkey",
        "--model",
        model.to_str().unwrap(),
        "--lengths",
        "600",
        "--depths",
        "0.5",
        "--policies",
        "snapkv",
        "--budgets",
        "64",
        "--kv-buffer",
        "16",
        "--kv-prompt-chunk",
        "64",
        "--output",
        records.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let runs: Vec<Value> = std::fs::read_to_string(&records)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 3, "{runs:?}");
    let prompt = runs[0]["prompt_tokens"].as_u64().unwrap();
    assert!((550..=600).contains(&prompt), "{prompt}");
    assert_eq!(runs[0]["policy"], "full");
    assert_eq!(runs[1]["prompt_mode"], "keep");
    assert_eq!(runs[1]["kv_slots_peak"].as_u64(), Some(prompt));
    assert_eq!(runs[2]["prompt_mode"], "compress");
    assert!(
        runs[2]["kv_slots_peak"].as_u64() <= Some(64 + 16 + 64),
        "{}",
        runs[2]
    );
    for r in &runs {
        let key = r["key"].as_u64().unwrap();
        assert!((10_000..=99_999).contains(&key));
        let said = r["output"].as_str().unwrap();
        let first: String = said
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(char::is_ascii_digit)
            .collect();
        assert_eq!(r["correct"], first == key.to_string(), "{r}");
    }
    let summary: Value = serde_json::from_str(out.trim()).expect("summary JSON");
    assert_eq!(
        summary["summary"].as_array().map(Vec::len),
        Some(3),
        "{out}"
    );
}

#[test]
fn print_prompt_prints_the_prompt_and_bad_flags_are_usage_errors() {
    let model = default_model();
    let m = model.to_str().unwrap();
    let (code, out, err) = rkv(&[
        "eval",
        "passkey",
        "--model",
        m,
        "--lengths",
        "300",
        "--depths",
        "0.9",
        "--print-prompt",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("There is an important info hidden"),
        "{out}"
    );
    assert!(out.trim_end().ends_with("The pass key is"), "{out}");
    let at = out.find(" Remember it. ").expect("the key's sentence");
    assert!(at > out.len() * 3 / 4, "the key sits at 90% depth");
    for bad in [
        ["--prompt-modes", "drop"],
        ["--depths", "1.5"],
        ["--policies", "full"],
        ["--kv-prompt-chunk", "8"],
    ] {
        let (code, _, err) = rkv(&["eval", "passkey", "--model", m, bad[0], bad[1]]);
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert!(!err.is_empty(), "{bad:?}");
    }
}
