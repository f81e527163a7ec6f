"""Fixtures of the Python package's tests: the default model (SmolLM2-135M-Instruct,
fetched into the cache by scripts/test.sh) behind one engine for the module, and MATH-500
problems from ../shared/data (or a stand-in that says so)."""

import json
import os
from pathlib import Path

import pytest

from rkv import LLM

ROOT = Path(__file__).resolve().parents[2]
MATH500 = Path(os.environ.get("RKV_DATA_DIR", ROOT.parent / "shared" / "data")) / "math500.jsonl"

STAND_IN = [
    {"problem": "What is $2+3$?", "answer": "5"},
    {"problem": "Compute $7 \\times 6$.", "answer": "42"},
    {"problem": "What is the square root of 81?", "answer": "9"},
    {"problem": "Simplify $\\frac{10}{4}$.", "answer": "\\frac{5}{2}"},
]


@pytest.fixture(scope="session")
def math500(tmp_path_factory) -> Path:
    """MATH-500 when the shared data is there; else a 4-problem stand-in."""
    if MATH500.exists():
        return MATH500
    print(f"note: {MATH500} is absent; using a 4-problem stand-in")
    p = tmp_path_factory.mktemp("data") / "math_stand_in.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in STAND_IN))
    return p


@pytest.fixture(scope="module")
def llm():
    m = LLM(kv_memory="64MiB", threads=2)
    yield m
    m.shutdown()
