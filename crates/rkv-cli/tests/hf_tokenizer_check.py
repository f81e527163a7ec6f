"""transformers against rkv on an `rkv export-tokenizer` directory (run by
crates/rkv-cli/tests/export_tokenizer_hf.rs).

Usage: hf_tokenizer_check.py DIR CASES_JSON. Loads DIR with AutoTokenizer with the hub
switched off (HF_HUB_OFFLINE=1, set here and by the caller) and checks each case of
CASES_JSON, which rkv wrote: `tok(text)` gives rkv's `encode` ids, `tok(text,
add_special_tokens=False)` its `encode_raw` ids, decoding those gives the text back, and
`apply_chat_template` renders each chat as rkv does. Prints "all ok" when all hold.
"""

import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from transformers import AutoTokenizer  # noqa: E402


def main():
    directory, cases_path = sys.argv[1], sys.argv[2]
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    tok = AutoTokenizer.from_pretrained(directory)
    failures = []

    def check(what, got, want):
        if got != want:
            failures.append(f"{what}:\n  transformers {got!r}\n  rkv          {want!r}")

    check("bos_token_id", tok.bos_token_id, cases["bos_id"])
    check("eos_token_id", tok.eos_token_id, cases["eos_id"])
    for i, c in enumerate(cases["texts"]):
        text = c["text"]
        check(f"text #{i} {text[:40]!r}: ids", tok(text)["input_ids"], c["ids"])
        raw = tok(text, add_special_tokens=False)["input_ids"]
        check(f"text #{i} {text[:40]!r}: raw ids", raw, c["raw_ids"])
        check(f"text #{i}: decode", tok.decode(c["raw_ids"]), text)
    for i, c in enumerate(cases["chats"]):
        rendered = tok.apply_chat_template(
            c["messages"],
            tokenize=False,
            add_generation_prompt=c["add_generation_prompt"],
        )
        check(f"chat #{i}", rendered, c["rendered"])
    print(f"{len(cases['texts'])} texts, {len(cases['chats'])} chats")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("all ok")


if __name__ == "__main__":
    main()
