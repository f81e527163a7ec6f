//! The official Python `openai` client against `rkv serve`
//! (`crates/rkv-server/tests/openai_client.py`). The interpreter comes from
//! `RKV_TEST_PYTHON` (a virtual environment with `pip install openai`);
//! `RKV_SKIP_PYTHON_CLIENT=1` skips the test, saying so.

mod serve_support;

use std::process::Command;

use serve_support::{serve, MODEL_NAME};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../rkv-server/tests/openai_client.py"
);

#[test]
fn official_openai_python_client() {
    let Some(python) = std::env::var_os("RKV_TEST_PYTHON") else {
        if std::env::var("RKV_SKIP_PYTHON_CLIENT").as_deref() == Ok("1") {
            eprintln!("SKIPPED official_openai_python_client: RKV_SKIP_PYTHON_CLIENT=1");
            return;
        }
        panic!(
            "RKV_TEST_PYTHON is not set. Create a Python with the openai client and name it:\n  \
             python3 -m venv /tmp/rkv-venv && /tmp/rkv-venv/bin/pip install openai\n  \
             export RKV_TEST_PYTHON=/tmp/rkv-venv/bin/python\n\
             (scripts/test.sh does this), or set RKV_SKIP_PYTHON_CLIENT=1 to skip this test."
        );
    };
    let srv = serve(&[]);
    let out = Command::new(&python)
        .arg(SCRIPT)
        .arg(&srv.base)
        .arg(MODEL_NAME)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.to_string_lossy()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "openai_client.py failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("all ok"), "{stdout}");
    let status = srv.stop();
    assert_eq!(status.code(), Some(0), "rkv serve exited with {status}");
}
