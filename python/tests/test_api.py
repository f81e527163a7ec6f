"""The API against vLLM's documented shapes (LLM.generate / LLM.chat returning
RequestOutput -> CompletionOutput -> Logprob), validation, samples, logprobs, token id
prompts, the progress bar, cancellation, memory and two engines in one process."""

import _thread
import signal
import threading
import time

import pytest

from rkv import LLM, CompletionOutput, KvCompression, KvUsage, Logprob, RequestOutput, SamplingParams
from rkv.math_eval import grade, r1_prompt, read_math_problems

GREEDY = SamplingParams(temperature=0, max_tokens=12)


def test_outputs_have_vllms_shape(llm):
    outs = llm.generate("The capital of France is", GREEDY, use_tqdm=False)
    assert isinstance(outs, list) and len(outs) == 1
    o = outs[0]
    assert isinstance(o, RequestOutput)
    assert isinstance(o.request_id, str)
    assert o.prompt == "The capital of France is"
    assert o.prompt_token_ids == llm.encode("The capital of France is")
    assert o.prompt_logprobs is None
    assert o.finished is True
    assert isinstance(o.num_cached_tokens, int)
    assert len(o.outputs) == 1
    c = o.outputs[0]
    assert isinstance(c, CompletionOutput)
    assert c.index == 0
    assert isinstance(c.text, str) and c.text
    assert all(isinstance(t, int) for t in c.token_ids) and len(c.token_ids) <= 12
    assert c.text == llm.decode(c.token_ids)
    assert c.cumulative_logprob is None and c.logprobs is None
    assert c.finish_reason in ("stop", "length")
    assert isinstance(c.kv, KvUsage) and c.kv.policy == "full" and c.kv.budget is None
    assert c.kv.slots_peak >= len(o.prompt_token_ids)
    assert "RequestOutput(" in repr(o) and "CompletionOutput(" in repr(c)


def test_prompts_as_strings_token_ids_and_dicts_agree(llm):
    text = "Once upon a time"
    ids = llm.encode(text)
    outs = llm.generate(
        [text, ids, {"prompt": text}, {"prompt_token_ids": ids}], GREEDY, use_tqdm=False
    )
    assert [o.prompt_token_ids for o in outs] == [ids] * 4
    assert outs[1].prompt is None
    assert len({tuple(o.outputs[0].token_ids) for o in outs}) == 1
    one = llm.generate(ids, GREEDY, use_tqdm=False)
    assert one[0].outputs[0].token_ids == outs[0].outputs[0].token_ids
    assert llm.generate([], GREEDY, use_tqdm=False) == []


def test_one_sampling_params_per_prompt(llm):
    outs = llm.generate(
        ["a", "b"],
        [SamplingParams(temperature=0, max_tokens=3), SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)],
        use_tqdm=False,
    )
    assert len(outs[1].outputs[0].token_ids) == 5
    assert len(outs[0].outputs[0].token_ids) <= 3


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"temperature": -1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"n": 0}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"logprobs": 21}, "logprobs"),
        ({"prompt_logprobs": -1}, "prompt_logprobs"),
        ({"stop": [""]}, "stop"),
    ],
)
def test_bad_sampling_params_name_their_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"SamplingParams\.{field}\b"):
        SamplingParams(**kwargs)


def test_bad_types_and_unknown_fields_are_type_errors():
    with pytest.raises(TypeError):
        SamplingParams(best_of=2)
    with pytest.raises(TypeError, match="stop"):
        SamplingParams(stop=3)
    with pytest.raises(TypeError):
        SamplingParams(n="two")


def test_kv_compression_is_validated():
    k = KvCompression("rkv", budget=256)
    assert (k.policy, k.budget, k.buffer, k.window) == ("rkv", 256, 128, 8)
    assert KvCompression("full").budget is None
    assert KvCompression.from_dict({"policy": "gkv", "budget": 64, "lambda": 0.3}).policy == "gkv"
    with pytest.raises(ValueError, match=r"KvCompression\.policy"):
        KvCompression("zip")
    with pytest.raises(ValueError, match=r"budget \(4\) must exceed window"):
        KvCompression("rkv", budget=4)
    with pytest.raises(ValueError, match=r"KvCompression\.lambda"):
        KvCompression("rkv", lambda_=2.0)
    with pytest.raises(ValueError, match=r"params\.decay"):
        KvCompression("gkv", params={"decay": 0.5})
    with pytest.raises(ValueError, match="budgt"):
        KvCompression.from_dict({"policy": "rkv", "budgt": 64})


def test_bad_requests_change_nothing(llm):
    before = llm.metrics()["prompt_tokens_total"]
    too_long = [1] * (llm.max_context + 1)
    with pytest.raises(ValueError, match=r"prompts\[1\]"):
        llm.generate(["fine", too_long], GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.generate([[10**7]], GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="sampling_params"):
        llm.generate(["a", "b"], [GREEDY], use_tqdm=False)
    with pytest.raises(TypeError, match=r"prompts\[0\]"):
        llm.generate([3.5], GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        llm.chat([[]], GREEDY, use_tqdm=False)
    assert llm.metrics()["prompt_tokens_total"] == before


def test_bad_engine_arguments_are_value_errors():
    with pytest.raises(ValueError, match="kv_memory"):
        LLM(kv_memory="12XB")
    with pytest.raises(ValueError, match="kv_memory"):
        LLM(kv_memory=100)
    with pytest.raises(ValueError, match="threads"):
        LLM(threads=0)
    with pytest.raises(ValueError, match="model.*smollm2-135m"):
        LLM(model="no-such-model-xyz")
    with pytest.raises(ValueError, match="kv_dtype"):
        LLM(kv_dtype="int3")
    with pytest.raises(TypeError):
        LLM(tensor_parallel_size=2)


def test_n_samples_are_seeded_and_reproducible(llm):
    sp = SamplingParams(n=3, temperature=0.9, seed=7, max_tokens=16)
    a = llm.generate("Write a word:", sp, use_tqdm=False)[0]
    b = llm.generate("Write a word:", sp, use_tqdm=False)[0]
    assert [c.index for c in a.outputs] == [0, 1, 2]
    assert [c.token_ids for c in a.outputs] == [c.token_ids for c in b.outputs]
    assert len({tuple(c.token_ids) for c in a.outputs}) > 1, "three samples, one text"


def test_logprobs_as_vllm_reports_them(llm):
    sp = SamplingParams(temperature=0, max_tokens=8, logprobs=3, prompt_logprobs=2)
    o = llm.generate("The sky is", sp, use_tqdm=False)[0]
    c = o.outputs[0]
    assert len(c.logprobs) == len(c.token_ids)
    total = 0.0
    for tok, pos in zip(c.token_ids, c.logprobs):
        assert tok in pos and 3 <= len(pos) <= 4
        assert all(isinstance(v, Logprob) for v in pos.values())
        assert pos[tok].rank == 1, "greedy picks the most likely token"
        assert max(v.logprob for v in pos.values()) == pos[tok].logprob
        assert isinstance(pos[tok].decoded_token, str)
        total += pos[tok].logprob
    assert c.cumulative_logprob == pytest.approx(total, abs=1e-4)
    assert o.prompt_logprobs[0] is None
    assert len(o.prompt_logprobs) == len(o.prompt_token_ids)
    for tok, pos in zip(o.prompt_token_ids[1:], o.prompt_logprobs[1:]):
        assert tok in pos and pos[tok].rank >= 1 and pos[tok].logprob <= 0


def test_stop_strings_and_ignore_eos(llm):
    o = llm.generate("1, 2, 3, 4,", SamplingParams(temperature=0, max_tokens=30, stop=" 7"), use_tqdm=False)
    c = o[0].outputs[0]
    assert " 7" not in c.text and c.finish_reason == "stop"
    o = llm.generate("Hi", SamplingParams(temperature=0, max_tokens=40, ignore_eos=True), use_tqdm=False)
    assert len(o[0].outputs[0].token_ids) == 40


def test_chat_renders_the_template(llm):
    msgs = [{"role": "user", "content": "What is 2+2? Answer with a number."}]
    one = llm.chat(msgs, GREEDY, use_tqdm=False)
    two = llm.chat([msgs, msgs], GREEDY, use_tqdm=False)
    assert len(one) == 1 and len(two) == 2
    assert one[0].prompt.startswith("<|im_start|>") and one[0].prompt.endswith("assistant\n")
    assert two[0].outputs[0].text == two[1].outputs[0].text == one[0].outputs[0].text


def test_progress_bar_shows_and_can_be_turned_off(llm, capfd):
    llm.generate(["a", "b"], GREEDY, use_tqdm=False)
    assert capfd.readouterr().err == ""
    llm.generate(["a", "b"], GREEDY, use_tqdm=True)
    assert "Processed prompts" in capfd.readouterr().err


def test_ctrl_c_cancels_the_call_and_frees_its_memory(llm):
    long = SamplingParams(n=2, temperature=0.8, max_tokens=4000, ignore_eos=True)
    k = KvCompression("rkv", budget=256)
    # A process started in the background of a non-interactive shell (as CI may start
    # this one) inherits SIGINT ignored, and Python then raises nothing on Ctrl-C: take
    # Python's own handler for the test, as an interactive session has it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            llm.generate(["Tell me a story."] * 4, long, kv_compression=k, use_tqdm=False)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - t0 < 30, "the interrupt was not seen promptly"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = llm.metrics()
        if m["running"] == 0 and m["waiting"] == 0 and m["kv_blocks_used"] == 0:
            break
        time.sleep(0.05)
    m = llm.metrics()
    assert (m["running"], m["waiting"], m["kv_blocks_used"]) == (0, 0, 0), m
    assert llm.generate("Still there?", GREEDY, use_tqdm=False)[0].outputs[0].text


def test_kv_memory_is_respected():
    small = LLM(kv_memory="8MiB", threads=2)
    try:
        assert 0 < small.kv_capacity_bytes <= 8 << 20
        # Eight FullKV sequences of 300 tokens need 8x what one does, more than 8 MiB
        # holds: they are admitted as memory allows, preempted when it runs out, and all
        # finish whole.
        sp = SamplingParams(temperature=0, max_tokens=300, ignore_eos=True)
        outs = small.generate([f"Count to {i}:" for i in range(8)], sp, use_tqdm=False)
        assert all(len(o.outputs[0].token_ids) == 300 for o in outs)
        assert all(o.outputs[0].kv.bytes_peak <= small.kv_capacity_bytes for o in outs)
        m = small.metrics()
        # A SmolLM2 block at f16: 32 slots x 30 layers x 3 KV heads x 64 dims x (K, V) x 2 B.
        assert m["kv_blocks_total"] * 737_280 == small.kv_capacity_bytes
        assert m["preemptions_total"] > 0
    finally:
        small.shutdown()


def test_compression_bounds_each_sample(llm):
    sp = SamplingParams(n=2, temperature=0.7, seed=3, max_tokens=300, ignore_eos=True)
    k = KvCompression("rkv", budget=64, buffer=32)
    o = llm.generate("Explain photosynthesis.", sp, kv_compression=k, use_tqdm=False)[0]
    for c in o.outputs:
        assert c.kv.policy == "rkv" and c.kv.budget == 64
        assert c.kv.compressions > 0 and c.kv.evicted_tokens > 0
        assert c.kv.slots_peak <= 64 + 32


def test_two_llms_in_one_process_run_side_by_side(llm):
    other = LLM(kv_memory="32MiB", threads=1, kv_compression=KvCompression("snapkv", budget=64))
    try:
        prompts = ["The moon is", "Water boils at"]
        alone = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]
        results = {}

        def run(name, m):
            results[name] = [o.outputs[0].token_ids for o in m.generate(prompts, GREEDY, use_tqdm=False)]

        threads = [threading.Thread(target=run, args=(n, m)) for n, m in (("a", llm), ("b", other))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results["a"] == alone
        # Prompts and outputs shorter than the budget: SnapKV never compresses.
        assert results["b"] == alone
        assert other.generate("x", GREEDY, use_tqdm=False)[0].outputs[0].kv.policy == "snapkv"
    finally:
        other.shutdown()


def test_math_grader_and_prompt_are_the_clis(math500):
    problems = read_math_problems(str(math500), limit=2)
    assert len(problems) == 2 and set(problems[0]) == {"index", "problem", "gold"}
    assert r1_prompt("1+1?").endswith("put your final answer within \\boxed{}.")
    assert grade("so the answer is \\boxed{\\frac{1}{2}}", "0.5") == (True, "\\frac{1}{2}")
    assert grade("no idea", "3")[0] is False
