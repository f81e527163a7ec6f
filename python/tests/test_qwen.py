"""The realistic model from Python: Qwen2.5-Coder-1.5B-Instruct (R1-Distill-Qwen-1.5B's
shape) answers a chat exactly as `rkv generate --chat` does, with R-KV compressing. Skips
when the model is not in the cache (`rkv fetch qwen2.5-coder-1.5b` puts it there)."""

import json
import subprocess

import pytest
from conftest import ROOT

from rkv import LLM, SamplingParams
from rkv.llm import default_cache_dir

QWEN = default_cache_dir() / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
RKV = ROOT / "target" / "release" / "rkv"
QUESTION = "What is 17 times 23? Think step by step."


@pytest.mark.skipif(not QWEN.exists(), reason=f"{QWEN} is absent: rkv fetch qwen2.5-coder-1.5b")
@pytest.mark.skipif(not RKV.exists(), reason=f"{RKV} is absent: cargo build --release -p rkv-cli")
def test_qwen_chat_equals_the_cli():
    kv = ["--kv-policy", "rkv", "--kv-budget", "64", "--kv-buffer", "16"]
    cli = subprocess.run(
        [str(RKV), "generate", "--model", "qwen2.5-coder-1.5b", "--chat", "--prompt", QUESTION,
         "--max-tokens", "64", "--threads", "2", "--json", *kv],
        capture_output=True, text=True, check=True,
    )
    want = json.loads(cli.stdout.strip().splitlines()[-1])
    llm = LLM(model="qwen2.5-coder-1.5b", threads=2,
              kv_compression={"policy": "rkv", "budget": 64, "buffer": 16})
    try:
        out = llm.chat([{"role": "user", "content": QUESTION}],
                       SamplingParams(temperature=0, max_tokens=64), use_tqdm=False)[0]
    finally:
        llm.shutdown()
    got = out.outputs[0]
    assert got.token_ids == want["token_ids"]
    assert got.text == want["text"]
    assert got.kv.compressions > 0 and got.kv.slots_peak <= max(len(out.prompt_token_ids), 64 + 16)
