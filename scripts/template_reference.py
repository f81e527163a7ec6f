#!/usr/bin/env python3
"""Renders the chat templates the tests compare against with jinja2, as transformers'
apply_chat_template does (sandboxed, trim_blocks, lstrip_blocks, loop controls, its tojson),
into crates/rkv-model/tests/data/template_renders.jsonl.

    python3 scripts/template_reference.py   # needs jinja2 (pip install jinja2)

Templates: fuzz/corpus/chat_template/*.jinja (but those calling strftime_now, whose output
depends on the day, and the seeds that grow values until rkv's bounds stop them) and
crates/rkv-model/tests/data/templates/*.jinja.
"""
import glob
import json
import os

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "crates/rkv-model/tests/data/template_renders.jsonl")
# Seeds that grow values past rkv's bounds (jinja2 would build gigabytes), and a copy of
# tests/data/templates/operators.jinja.
HOSTILE_SEEDS = {"doubling.jinja", "nesting.jinja", "operators.jinja"}
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": "Adding.</think>\n\nIt is 5!"},
    {"role": "user", "content": "  And 4 + 4?  "},
]


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    paths = sorted(p for p in glob.glob(os.path.join(ROOT, "fuzz/corpus/chat_template/*.jinja"))
                   if os.path.basename(p) not in HOSTILE_SEEDS)
    paths += sorted(glob.glob(os.path.join(ROOT, "crates/rkv-model/tests/data/templates/*.jinja")))
    rows = []
    for path in paths:
        source = open(path, encoding="utf-8").read()
        if "strftime_now" in source:
            continue
        template = env.from_string(source)
        for gen in (False, True):
            out = template.render(messages=MESSAGES, add_generation_prompt=gen,
                                  bos_token="<s>", eos_token="</s>")
            rows.append({"template": os.path.relpath(path, ROOT), "messages": MESSAGES,
                         "add_generation_prompt": gen, "output": out})
    with open(OUT, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} renderings to {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
