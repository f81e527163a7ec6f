"""rkv from Python: vLLM's offline API over rkv's engine, which keeps each sequence's KV
cache inside a fixed budget while the model reasons (R-KV and other policies).

    from rkv import LLM, SamplingParams, KvCompression
    llm = LLM(kv_memory="256MiB", kv_compression=KvCompression("rkv", budget=256))
    outs = llm.generate(["2+2="], SamplingParams(n=4, temperature=0.6, max_tokens=64))
    outs[0].outputs[0].text, outs[0].outputs[0].kv.slots_peak

`rkv.ray.Generator` runs it over a Ray cluster (``pip install "rkv[ray]"``).
"""

from rkv._rkv import (
    CompletionOutput,
    KvCompression,
    KvUsage,
    Logprob,
    RequestOutput,
    SamplingParams,
    __version__,
)
from rkv.llm import LLM

__all__ = [
    "LLM",
    "SamplingParams",
    "KvCompression",
    "RequestOutput",
    "CompletionOutput",
    "Logprob",
    "KvUsage",
    "__version__",
]
