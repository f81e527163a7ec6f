//! Tool calling with the official `openai` client against `rkv serve` of
//! Qwen2.5-Coder-1.5B-Instruct (`tests/tools_client.py`): an agent loop of two tool calls
//! and an answer, streamed calls that reassemble into the whole ones, and bad tool
//! requests refused naming their field. The default model's template renders no tools,
//! so a request with tools is refused there.
//!
//! The 1.5B model comes from the model cache (`rkv fetch qwen2.5-coder-1.5b`); without it
//! the Qwen part is skipped, saying so. The interpreter comes from `RKV_TEST_PYTHON`
//! (scripts/test.sh makes it); `RKV_SKIP_PYTHON_CLIENT=1` skips, saying so.

mod serve_support;

use std::path::PathBuf;
use std::process::Command;

use serve_support::{request, serve, serve_model, MODEL_NAME};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools_client.py");

fn qwen() -> Option<PathBuf> {
    let home = std::env::var_os("RKV_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/rkv")
        });
    let p = home.join("models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
    p.exists().then_some(p)
}

#[test]
fn a_template_without_tools_refuses_them() {
    let srv = serve(&["--threads", "2"]);
    let body = r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        "tools": [{"type": "function", "function": {"name": "f"}}]}"#;
    let (status, text) = request(srv.port, "POST", "/v1/chat/completions", body);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("\"param\":\"tools\""), "{text}");
    // tool_choice none: the tools are not rendered, so nothing is refused.
    let none = body.replace(
        "\"max_tokens\": 2,",
        "\"max_tokens\": 2, \"tool_choice\": \"none\",",
    );
    let (status, text) = request(srv.port, "POST", "/v1/chat/completions", &none);
    assert_eq!(status, 200, "{text}");
    assert_eq!(srv.stop().code(), Some(0));
}

#[test]
fn qwen_agent_loop_with_the_openai_client() {
    let Some(python) = std::env::var_os("RKV_TEST_PYTHON") else {
        if std::env::var("RKV_SKIP_PYTHON_CLIENT").as_deref() == Ok("1") {
            eprintln!("SKIPPED qwen_agent_loop_with_the_openai_client: RKV_SKIP_PYTHON_CLIENT=1");
            return;
        }
        panic!("RKV_TEST_PYTHON is not set (scripts/test.sh makes it), or set RKV_SKIP_PYTHON_CLIENT=1");
    };
    let Some(model) = qwen() else {
        eprintln!(
            "SKIPPED qwen_agent_loop_with_the_openai_client: the 1.5B model is not cached \
             (rkv fetch qwen2.5-coder-1.5b)"
        );
        return;
    };
    let srv = serve_model(&model, &["--threads", "2"]);
    let out = Command::new(&python)
        .arg(SCRIPT)
        .arg(&srv.base)
        .arg(MODEL_NAME)
        .output()
        .expect("run tools_client.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tools_client.py failed:\n{stdout}\n{stderr}"
    );
    eprintln!("{stdout}");
    assert!(stdout.contains("all ok"), "{stdout}");
    assert_eq!(srv.stop().code(), Some(0));
}
