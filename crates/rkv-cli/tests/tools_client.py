"""Tool calling through the official `openai` client against a running `rkv serve` of
Qwen2.5-Coder-1.5B-Instruct (hermes format).

Usage: python tools_client.py BASE_URL MODEL_NAME

An agent loop: the model calls one tool, gets its answer in a `tool` message, calls the
second, gets that answer, then (asked with `tool_choice: none`) answers in text. The calls' arguments must parse as JSON
with the required `city`. A streamed request's tool-call deltas must reassemble into the
non-streamed calls. Bad tool requests must raise BadRequestError naming the field.
`tool_choice` `required` and a named function always yield a call that parses (sampled,
two seeds each); `chat.completions.parse` with a Pydantic model returns a valid object. Prints one line per check; exits non-zero on any failure.
"""

import json
import sys

import openai
import pydantic

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current local time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
]
ANSWERS = {"get_weather": {"temperature_c": 18, "sky": "cloudy"}, "get_time": {"time": "14:05"}}


def main():
    base, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)
    ask = dict(model=model, tools=TOOLS, temperature=0, max_tokens=120)
    messages = [{"role": "user", "content":
                 "What is the weather in Paris and what time is it there? Use the tools one at a time."}]

    called = []
    for turn in range(4):
        # Once both tools have answered, the client asks for the answer (tool_choice
        # none: the 1.5B model otherwise tends to end its turn at once).
        done = sorted(set(called)) == ["get_time", "get_weather"]
        choice = {"tool_choice": "none"} if done else {}
        r = client.chat.completions.create(messages=messages, **ask, **choice)
        m = r.choices[0].message
        if not m.tool_calls:
            assert r.choices[0].finish_reason == "stop", r
            assert m.content and m.content.strip(), r
            print(f"turn {turn}: answer {m.content!r}")
            break
        assert r.choices[0].finish_reason == "tool_calls", r
        messages.append(m.model_dump(exclude_none=True))
        for tc in m.tool_calls:
            args = json.loads(tc.function.arguments)
            assert tc.function.name in ANSWERS, tc
            assert isinstance(args.get("city"), str) and args["city"], args
            assert tc.id.startswith("call_"), tc
            called.append(tc.function.name)
            print(f"turn {turn}: call {tc.function.name}({args})")
            messages.append({"role": "tool", "tool_call_id": tc.id,
                             "content": json.dumps(ANSWERS[tc.function.name])})
    else:
        raise AssertionError(f"no answer after 4 turns: {messages}")
    assert sorted(set(called)) == ["get_time", "get_weather"], called
    print("agent loop: ok", called)

    first = messages[:1]
    whole = client.chat.completions.create(messages=first, **ask)
    calls, finish = {}, None
    for chunk in client.chat.completions.create(messages=first, stream=True, **ask):
        for c in chunk.choices:
            finish = c.finish_reason or finish
            for d in c.delta.tool_calls or []:
                e = calls.setdefault(d.index, {"name": "", "arguments": "", "id": None})
                e["id"] = d.id or e["id"]
                if d.function and d.function.name:
                    e["name"] += d.function.name
                if d.function and d.function.arguments:
                    e["arguments"] += d.function.arguments
    streamed = [(calls[k]["name"], calls[k]["arguments"]) for k in sorted(calls)]
    expected = [(t.function.name, t.function.arguments) for t in whole.choices[0].message.tool_calls]
    assert streamed == expected and finish == "tool_calls", (streamed, expected, finish)
    assert all(calls[k]["id"] for k in calls), calls
    print("streamed tool calls reassemble: ok", streamed)

    # required and a named function are enforced: a call that parses, whatever the prompt.
    for choice, prompt, want in [
        ("required", "Say hello.", set(ANSWERS)),
        ({"type": "function", "function": {"name": "get_time"}},
         "What is the weather in Rome?", {"get_time"}),
    ]:
        for seed in (1, 2):
            r = client.chat.completions.create(
                model=model, tools=TOOLS, tool_choice=choice, temperature=0.8, seed=seed,
                max_tokens=60, messages=[{"role": "user", "content": prompt}])
            c = r.choices[0]
            assert c.finish_reason == "tool_calls" and c.message.tool_calls, r
            tc = c.message.tool_calls[0]
            assert tc.function.name in want, tc
            assert isinstance(json.loads(tc.function.arguments).get("city"), str), tc
        print("tool_choice", choice if isinstance(choice, str) else "named", ": ok", tc.function)

    # Structured outputs through the client's parse() with a Pydantic model.
    class City(pydantic.BaseModel):
        name: str
        country: str
        population: int

    parsed = client.chat.completions.parse(
        model=model, response_format=City, temperature=0, max_tokens=80,
        messages=[{"role": "user", "content": "Describe Paris as JSON."}])
    city = parsed.choices[0].message.parsed
    assert isinstance(city, City), parsed
    City.model_validate_json(parsed.choices[0].message.content)
    print("chat.completions.parse: ok", city)

    bad_cases = [
        ("tools", dict(tools=[{"type": "function", "function": {"description": "no name"}}])),
        ("tool_choice", dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})),
        ("messages[1]", dict(tools=TOOLS, messages=first + [{"role": "tool", "content": "18 C"}])),
    ]
    for param, kw in bad_cases:
        kw.setdefault("messages", first)
        try:
            client.chat.completions.create(model=model, max_tokens=4, **kw)
        except openai.BadRequestError as e:
            got = (e.body or {}).get("param")
            assert got == param, (param, e.body)
            print("bad request raised BadRequestError:", param)
        else:
            raise AssertionError(f"{param}: accepted")
    print("all ok")


if __name__ == "__main__":
    main()
