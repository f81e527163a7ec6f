#!/usr/bin/env python3
"""Prints the `PROMPT | TOKENS` lines that teacher-force scripts/llamacpp/greedy.cpp along
a reference (crates/rkv-engine/tests/data/llamacpp_requant*.jsonl): one line per prompt of
the given file type, its prompt's token ids, then the reference's tokens.

Usage: forced_lines.py REFERENCE.jsonl FILE_TYPE
"""
import json
import sys

ref, file_type = sys.argv[1:]
for line in open(ref):
    r = json.loads(line) if line.strip() else None
    if r and r["file_type"] == file_type:
        print(" ".join(map(str, r["prompt_token_ids"])), "|", " ".join(map(str, r["token_ids"])))
