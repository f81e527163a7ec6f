"""The official `openai` Python client against a running `rkv serve`.

Usage: python openai_client.py BASE_URL MODEL_NAME   (BASE_URL like http://127.0.0.1:8000)

Exercises chat and completions, whole and streamed, n = 3, include_usage, per-request
KV compression through `extra_body` with `usage.kv` read back, chat logprobs and a
prompt scored with `echo` + `logprobs` + `max_tokens: 0`, structured outputs through
`client.chat.completions.parse(..., response_format=PydanticModel)`, and bad requests that
must raise `openai.BadRequestError`. Exits non-zero (an AssertionError) on any mismatch;
prints one line per check.
"""

import sys
from typing import Literal

import openai
import pydantic


class Pet(pydantic.BaseModel):
    """What `parse` asks for: the client sends its strict JSON Schema as `response_format`."""

    name: str = pydantic.Field(max_length=20)
    species: Literal["cat", "dog", "bird"]
    age: int = pydantic.Field(ge=0, le=30)
    vaccinated: bool


def kv_of(usage):
    """`usage.kv`, an extra field the client keeps in `model_extra`."""
    kv = getattr(usage, "kv", None)
    if kv is None:
        kv = (usage.model_extra or {}).get("kv")
    assert kv is not None, f"usage has no kv: {usage}"
    return kv if isinstance(kv, dict) else dict(kv)


def main():
    base, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120)

    models = client.models.list()
    assert [m.id for m in models.data] == [model], models
    print("models: ok")

    messages = [{"role": "user", "content": "What is 2 plus 2?"}]
    chat = client.chat.completions.create(
        model=model, messages=messages, max_tokens=8, temperature=0, seed=1
    )
    assert chat.object == "chat.completion", chat
    assert chat.choices[0].message.role == "assistant"
    assert isinstance(chat.choices[0].message.content, str)
    assert chat.choices[0].finish_reason in ("stop", "length")
    assert chat.usage.completion_tokens >= 1
    assert kv_of(chat.usage)["policy"] == "full"
    print("chat: ok", repr(chat.choices[0].message.content))

    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=8,
        temperature=0,
        seed=1,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text == chat.choices[0].message.content, (text, chat.choices[0].message.content)
    assert finish == chat.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == chat.usage.completion_tokens
    print("chat stream: ok")

    three = client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, temperature=0.9, seed=3, n=3
    )
    assert [c.index for c in three.choices] == [0, 1, 2], three
    print("chat n=3: ok", [c.message.content for c in three.choices])

    comp = client.completions.create(
        model=model,
        prompt="The capital of France is",
        max_tokens=24,
        temperature=0,
        extra_body={
            "ignore_eos": True,
            "kv_compression": {"policy": "rkv", "budget": 16, "buffer": 4, "window": 4},
        },
    )
    assert comp.object == "text_completion", comp
    assert comp.choices[0].finish_reason == "length"
    assert comp.usage.completion_tokens == 24
    kv = kv_of(comp.usage)
    assert kv["policy"] == "rkv" and kv["budget"] == 16, kv
    assert kv["compressions"] > 0 and kv["evicted_tokens"] > 0, kv
    assert kv["slots_peak"] <= 20, kv
    print("completion with kv_compression: ok", kv)

    pieces = {}
    for chunk in client.completions.create(
        model=model, prompt="Once upon a time", max_tokens=6, temperature=0.7, seed=5, n=3, stream=True
    ):
        for c in chunk.choices:
            pieces[c.index] = pieces.get(c.index, "") + c.text
    whole = client.completions.create(
        model=model, prompt="Once upon a time", max_tokens=6, temperature=0.7, seed=5, n=3
    )
    assert pieces == {c.index: c.text for c in whole.choices}, (pieces, whole)
    print("completion stream n=3: ok")

    lp = client.chat.completions.create(
        model=model, messages=messages, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2
    )
    content = lp.choices[0].logprobs.content
    assert len(content) == lp.usage.completion_tokens, lp
    for t in content:
        assert isinstance(t.token, str) and t.logprob <= 0 and isinstance(t.bytes, list), t
        assert len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token, t
    print("chat logprobs: ok", [(t.token, round(t.logprob, 3)) for t in content])

    scored = client.completions.create(
        model=model, prompt="The capital of France is Paris", max_tokens=0, echo=True, logprobs=1
    )
    c = scored.choices[0]
    assert c.text == "The capital of France is Paris", c
    assert c.logprobs.token_logprobs[0] is None and c.logprobs.top_logprobs[0] is None, c
    assert all(v <= 0 for v in c.logprobs.token_logprobs[1:]), c
    assert len(c.logprobs.tokens) == scored.usage.prompt_tokens and scored.usage.completion_tokens == 0
    print("completion echo logprobs, max_tokens 0: ok", [round(v, 3) for v in c.logprobs.token_logprobs[1:]])

    for seed in range(3):
        done = client.chat.completions.parse(
            model=model,
            messages=[{"role": "user", "content": "Describe a pet as JSON."}],
            response_format=Pet,
            max_tokens=150,
            temperature=0.8,
            seed=seed,
        )
        msg = done.choices[0].message
        assert isinstance(msg.parsed, Pet), done
        assert Pet.model_validate_json(msg.content) == msg.parsed, msg.content
        assert done.choices[0].finish_reason == "stop", done
        print("chat.completions.parse: ok", msg.parsed)

    for bad in (
        dict(extra_body={"kv_compression": {"policy": "nonsense"}}),
        dict(extra_body={"response_format": {"type": "yaml"}}),
        dict(logprobs=21),
        dict(echo=True, n=2),
        dict(n=0),
        dict(max_tokens=10**9),
    ):
        try:
            client.completions.create(model=model, prompt="hi", **{"max_tokens": 4, **bad})
        except openai.BadRequestError as e:
            assert e.status_code == 400
            print("bad request raised BadRequestError:", e.message)
        else:
            raise AssertionError(f"{bad} was accepted")

    try:
        client.chat.completions.create(model="not-" + model, messages=messages, max_tokens=2)
    except openai.NotFoundError as e:
        assert e.code == "model_not_found", e
        print("unknown model raised NotFoundError")
    else:
        raise AssertionError("an unknown model was accepted")
    print("all ok")


if __name__ == "__main__":
    main()
