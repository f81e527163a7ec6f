#!/usr/bin/env python3
"""pass@k on MATH-500 with rkv's Python API, written as a vLLM script would be: every
problem's k samples in one `LLM.chat` call, R-KV at a fixed KV budget, graded with rkv's
grader (the one `rkv eval math` uses, on the same R1 prompt and seeds: sample j of every
problem has seed + j).

    pip install .            # at the repository root: builds and installs `rkv`
    python examples/passk.py --dataset ../shared/data/math500.jsonl --problems 20 --samples 8

Prints pass@1 (the mean over samples, then problems), pass@k, the tokens generated and
the throughput; `--json` adds a summary line in `rkv eval math --json`'s shape.
"""

import argparse
import json
import time
from math import comb

from rkv import LLM, KvCompression, SamplingParams
from rkv.math_eval import grade, r1_prompt, read_math_problems


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator of Chen et al. (2021) for c correct of n samples."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="../shared/data/math500.jsonl")
    ap.add_argument("--problems", type=int, default=20)
    ap.add_argument("--samples", type=int, default=8, help="k: samples per problem")
    ap.add_argument("--model", default=None, help="default: SmolLM2-135M-Instruct")
    ap.add_argument("--policy", default="rkv")
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--kv-memory", default="256MiB")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", action="store_true", help="end with a JSON summary line")
    a = ap.parse_args()

    llm = LLM(
        model=a.model,
        kv_memory=a.kv_memory,
        threads=a.threads,
        kv_compression=KvCompression(a.policy, budget=a.budget),
    )
    problems = read_math_problems(a.dataset, limit=a.problems)
    chats = [[{"role": "user", "content": r1_prompt(p["problem"])}] for p in problems]
    params = SamplingParams(
        n=a.samples,
        temperature=a.temperature,
        top_p=a.top_p,
        seed=a.seed,
        max_tokens=a.max_tokens,
    )
    t0 = time.perf_counter()
    outputs = llm.chat(chats, params)
    seconds = time.perf_counter() - t0

    pass1 = passk = 0.0
    tokens = 0
    for p, out in zip(problems, outputs):
        correct = sum(grade(s.text, p["gold"])[0] for s in out.outputs)
        tokens += sum(len(s.token_ids) for s in out.outputs)
        pass1 += correct / a.samples
        passk += pass_at_k(a.samples, correct, a.samples)
    n = len(problems)
    slots_peak = max(s.kv.slots_peak for o in outputs for s in o.outputs)
    print(
        f"pass@1 {pass1 / n:.4f}  pass@{a.samples} {passk / n:.4f} over {n} problems x "
        f"{a.samples} samples ({a.policy}, budget {a.budget}): {tokens} tokens in "
        f"{seconds:.1f}s ({tokens / seconds:.1f} tok/s), kv_slots_peak {slots_peak}"
    )
    if a.json:
        print(json.dumps({"summary": {
            "pass_at_1": pass1 / n,
            f"pass_at_{a.samples}": passk / n,
            "n_problems": n,
            "samples": a.samples,
            "policy": a.policy,
            "budget": a.budget,
            "max_tokens": a.max_tokens,
            "generated_tokens": tokens,
            "kv_slots_peak": slots_peak,
            "seconds": seconds,
        }}))


if __name__ == "__main__":
    main()
