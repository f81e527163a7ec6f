//! lm-evaluation-harness, unchanged, against `rkv serve`: its own `local-completions`
//! model runs a log-likelihood task and a `generate_until` task (`tests/data/lm_eval/`,
//! local JSONL files) with the tokenizer from `rkv export-tokenizer`, the hub switched
//! off, two prompts per request (`--batch_size 2`). Its log-likelihoods must be the server's own (`echo` + `logprobs` read back
//! directly), and the default model answers the two generation prompts.
//!
//! The interpreter comes from `RKV_TEST_PYTHON` (a virtual environment with `pip install
//! "lm-eval[api]>=0.4.10" transformers`; scripts/test.sh makes one);
//! `RKV_SKIP_PYTHON_CLIENT=1` skips the test, saying so.

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use serve_support::{default_model, request, serve, MODEL_NAME};

const TASKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/lm_eval");

/// The one results file lm-eval wrote under `out`, and its sample logs.
fn outputs(out: &Path) -> (Value, Vec<PathBuf>) {
    let mut results = None;
    let mut samples = Vec::new();
    let mut stack = vec![out.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)
            .expect("read lm-eval output")
            .flatten()
        {
            let p = e.path();
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            if p.is_dir() {
                stack.push(p);
            } else if name.starts_with("results_") {
                let text = std::fs::read_to_string(&p).expect("read results");
                results = Some(serde_json::from_str(&text).expect("results JSON"));
            } else if name.starts_with("samples_") {
                samples.push(p);
            }
        }
    }
    (results.expect("a results_*.json"), samples)
}

/// The server's log-likelihood of `continuation` after `context`, as lm-eval asks for it.
fn server_loglikelihood(port: u16, context: &[u64], continuation: &[u64]) -> f64 {
    let mut all = context.to_vec();
    all.extend(continuation);
    let body = json!({"model": MODEL_NAME, "prompt": [all], "max_tokens": 1, "echo": true,
                      "logprobs": 1, "temperature": 0});
    let (status, text) = request(port, "POST", "/v1/completions", &body.to_string());
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    let lps = v["choices"][0]["logprobs"]["token_logprobs"]
        .as_array()
        .expect("token_logprobs")
        .clone();
    lps[context.len()..all.len()]
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .sum()
}

#[test]
fn lm_evaluation_harness_runs_its_tasks_against_rkv_serve() {
    let Some(python) = std::env::var_os("RKV_TEST_PYTHON") else {
        if std::env::var("RKV_SKIP_PYTHON_CLIENT").as_deref() == Ok("1") {
            eprintln!("SKIPPED lm_evaluation_harness: RKV_SKIP_PYTHON_CLIENT=1");
            return;
        }
        panic!(
            "RKV_TEST_PYTHON is not set: scripts/test.sh makes a virtual environment with \
             lm-eval; or set RKV_SKIP_PYTHON_CLIENT=1 to skip this test."
        );
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let tok = tmp.path().join("tokenizer");
    let out = Command::new(env!("CARGO_BIN_EXE_rkv"))
        .arg("export-tokenizer")
        .arg("--model")
        .arg(default_model())
        .arg("--out")
        .arg(&tok)
        .output()
        .expect("run rkv export-tokenizer");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let srv = serve(&["--threads", "2"]);
    let results_dir = tmp.path().join("out");
    let model_args = format!(
        "model={MODEL_NAME},base_url={}/v1/completions,tokenizer={},\
         tokenizer_backend=huggingface,num_concurrent=1,max_retries=1",
        srv.base,
        tok.display()
    );
    let run = Command::new(&python)
        .args([
            "-m",
            "lm_eval",
            "--model",
            "local-completions",
            "--model_args",
        ])
        .arg(&model_args)
        .args([
            "--tasks",
            "rkv_mc,rkv_gen",
            "--include_path",
            ".",
            "--log_samples",
        ])
        // Several prompts per request, as a batch.
        .args(["--batch_size", "2"])
        .arg("--output_path")
        .arg(&results_dir)
        .current_dir(TASKS)
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HOME", tmp.path().join("hf"))
        .output()
        .expect("run lm_eval");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "lm_eval failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}");

    let (results, samples) = outputs(&results_dir);
    let r = &results["results"];
    let acc = r["rkv_mc"]["acc,none"].as_f64().expect("rkv_mc acc");
    assert!((0.0..=1.0).contains(&acc), "{r}");
    assert_eq!(r["rkv_gen"]["exact_match,strip"].as_f64(), Some(1.0), "{r}");

    // Every choice's log-likelihood is the server's own for that continuation.
    let mc = samples
        .iter()
        .find(|p| p.to_string_lossy().contains("rkv_mc"))
        .expect("rkv_mc samples");
    let text = std::fs::read_to_string(mc).expect("read samples");
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let s: Value = serde_json::from_str(line).expect("sample JSON");
        let args = s["arguments"].as_object().expect("arguments");
        let resps = s["resps"].as_array().expect("resps");
        for (arg, resp) in args.values().zip(resps) {
            let context = arg["arg_0"].as_str().expect("context");
            let cont = arg["arg_1"].as_str().expect("continuation");
            let ll = resp[0][0]
                .as_f64()
                .or_else(|| resp[0][0].as_str().and_then(|x| x.parse().ok()))
                .expect("loglikelihood");
            let encode = |t: &str| -> Vec<u64> {
                let body = json!({"model": MODEL_NAME, "prompt": t, "max_tokens": 1,
                                  "return_token_ids": true, "temperature": 0});
                let (_, text) = request(srv.port, "POST", "/v1/completions", &body.to_string());
                let v: Value = serde_json::from_str(&text).expect("JSON");
                v["choices"][0]["prompt_token_ids"]
                    .as_array()
                    .expect("ids")
                    .iter()
                    .filter_map(Value::as_u64)
                    .collect()
            };
            let ctx = encode(context);
            let whole = encode(&format!("{context}{cont}"));
            if !whole.starts_with(&ctx) {
                continue; // the tokens merged across the boundary; lm-eval splits otherwise
            }
            let want = server_loglikelihood(srv.port, &ctx, &whole[ctx.len()..]);
            assert!(
                (ll - want).abs() < 1e-4,
                "{context:?} + {cont:?}: {ll} vs {want}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 8, "only {checked} choices checked");
    let status = srv.stop();
    assert_eq!(status.code(), Some(0), "rkv serve exited with {status}");
}
