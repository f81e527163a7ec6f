"""rkv over a Ray cluster: `Generator`, a callable class for Ray Data's ``map_batches``,
one engine per actor, as vLLM's Ray Data processor runs vLLM.

    import ray, rkv.ray
    ds = ray.data.from_items([{"prompt": p} for p in prompts])
    out = ds.map_batches(
        rkv.ray.Generator,
        fn_constructor_kwargs={
            "sampling_params": {"n": 8, "temperature": 0.6, "max_tokens": 1024},
            "kv_compression": {"policy": "rkv", "budget": 256},
            "kv_memory": "1GiB", "threads": 2,
        },
        concurrency=4, num_cpus=2, batch_size=16,
        **rkv.ray.RETRY,  # an actor that dies is restarted and its batch rerun
    )

Each row's ``prompt`` (a string or token ids) or ``messages`` (a chat) is generated for;
the input columns are kept and ``generated_text``, ``generated_token_ids``,
``num_generated_tokens``, ``finish_reason`` and ``kv`` (the KV usage as a dict) are added.
With ``n > 1`` each of those holds a list of the ``n`` samples. Needs ``pip install
"rkv[ray]"``.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from rkv._rkv import KvCompression, SamplingParams
from rkv.llm import LLM

#: ``map_batches`` arguments that make an actor's death cost nothing: Ray restarts the
#: actor (loading the model again) and reruns the batch it held, so no row is lost.
RETRY = {"max_restarts": -1, "max_task_retries": -1}

OUTPUT_COLUMNS = (
    "generated_text",
    "generated_token_ids",
    "num_generated_tokens",
    "finish_reason",
    "kv",
)


class Generator:
    """Generates for a batch of rows. Constructed once per actor from
    ``fn_constructor_kwargs``: ``sampling_params`` (a dict of `SamplingParams` fields or a
    `SamplingParams`), ``kv_compression`` (a dict, a `KvCompression` or a policy name),
    ``kv_memory``, ``threads``, ``model`` and any other `LLM` keyword."""

    def __init__(
        self,
        sampling_params: Union[dict, SamplingParams, None] = None,
        kv_compression: Union[dict, KvCompression, str, None] = None,
        kv_memory: Union[int, str] = "256MiB",
        threads: Optional[int] = None,
        model: Optional[str] = None,
        **llm_kwargs: Any,
    ) -> None:
        if isinstance(sampling_params, dict):
            sampling_params = SamplingParams(**sampling_params)
        self.sampling_params = sampling_params or SamplingParams()
        self.llm = LLM(
            model=model,
            kv_memory=kv_memory,
            threads=threads,
            kv_compression=kv_compression,
            **llm_kwargs,
        )

    def __call__(self, batch: dict) -> dict:
        if "messages" in batch:
            convs = [_plain(m) for m in batch["messages"]]
            outs = self.llm.chat(convs, self.sampling_params, use_tqdm=False)
        elif "prompt" in batch:
            prompts = [_plain(p) for p in batch["prompt"]]
            outs = self.llm.generate(prompts, self.sampling_params, use_tqdm=False)
        else:
            raise ValueError(
                f"rkv.ray.Generator needs a 'prompt' or 'messages' column; "
                f"the batch has {sorted(batch)}"
            )
        many = self.sampling_params.n > 1

        def column(get):
            if many:
                return [[get(s) for s in o.outputs] for o in outs]
            return [get(o.outputs[0]) for o in outs]

        result = dict(batch)
        result["generated_text"] = column(lambda s: s.text)
        result["generated_token_ids"] = column(lambda s: list(s.token_ids))
        result["num_generated_tokens"] = column(lambda s: len(s.token_ids))
        result["finish_reason"] = column(lambda s: s.finish_reason)
        result["kv"] = column(lambda s: s.kv.to_dict())
        return result


def _plain(x):
    """A batch cell as plain Python: numpy arrays (Ray Data's default batch format) become
    lists, recursively; ints stay ints."""
    if hasattr(x, "tolist"):
        x = x.tolist()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x
