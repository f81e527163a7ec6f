#!/usr/bin/env python3
"""Where two greedy references of the same files part: for each (file type, prompt), the
steps on which they agree, and each reference's own top-2 margin at the step where they
part. Made to compare llama.cpp with itself, e.g. the AVX2 machine's reference
(crates/rkv-engine/tests/data/llamacpp_requant.jsonl) against the AVX-512 machine's
(llamacpp_requant.avx512.jsonl), both written by scripts/llamacpp/requant_reference.sh.

Usage: compare_references.py A.jsonl B.jsonl
"""
import json
import sys


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    a_rows, b_rows = rows(sys.argv[1]), rows(sys.argv[2])
    if len(a_rows) != len(b_rows):
        sys.exit(f"{len(a_rows)} rows against {len(b_rows)}")
    print("| file | prompt | steps agreeing | margin at the split, A | margin at the split, B |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for a, b in zip(a_rows, b_rows):
        if (a["file_sha256"], a["prompt_token_ids"]) != (b["file_sha256"], b["prompt_token_ids"]):
            sys.exit(f"rows differ in file or prompt: {a['file_type']} {a['prompt']!r}")
        ta, tb = a["token_ids"], b["token_ids"]
        same = 0
        while same < min(len(ta), len(tb)) and ta[same] == tb[same]:
            same += 1
        prompt = " ".join(a["prompt"].split())[:24]
        if same < min(len(ta), len(tb)):
            ma, mb = a["top2_rel_margin"][same], b["top2_rel_margin"][same]
            worst = max(worst, ma, mb)
            print(f"| {a['file_type']} | {prompt} | {same} of {len(ta)} | {ma:.4f} | {mb:.4f} |")
        else:
            print(f"| {a['file_type']} | {prompt} | all {same} | - | - |")
    print(f"\nLargest own margin at which the two part: {worst:.4f}")


if __name__ == "__main__":
    main()
