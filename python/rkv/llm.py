"""`LLM`: vLLM's offline entry point (``LLM(...).generate(prompts, SamplingParams(...))``)
over rkv's engine. Code written for vLLM ports by changing the import; what rkv adds is
the KV budget (``kv_memory``, ``kv_compression``) and each sample's KV usage
(``output.kv``).

This layer only shapes Python calls (one prompt or many, progress bars, chat messages);
validation, tokenizing, scheduling and outputs are the native module's.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from rkv import _rkv
from rkv._rkv import KvCompression, RequestOutput, SamplingParams

PromptType = Union[str, Sequence[int], dict]
CompressionType = Union[KvCompression, dict, str, None]


def default_cache_dir() -> Path:
    """Where named models live: ``$RKV_HOME/models``, default ``~/.cache/rkv/models``
    (the ``rkv`` CLI's cache too)."""
    home = os.environ.get("RKV_HOME")
    base = Path(home) if home else Path.home() / ".cache" / "rkv"
    return base / "models"


class LLM:
    """A model and its engine: the KV block pool (``kv_memory``), the default compression
    and the worker threads. Every prompt of one ``generate`` call is queued at once;
    the engine runs as many as the memory holds (continuous batching, memory-aware
    admission, samples of one prompt sharing its prefill copy-on-write).

    model: ``None`` (the default model, SmolLM2-135M-Instruct), a known model's name
        (``"smollm2-135m"``, ``"qwen2.5-coder-1.5b"``; downloaded if absent) or the path
        of a GGUF file or Hugging Face directory.
    kv_memory: the KV pool's size, bytes or a string such as ``"256MiB"``.
    threads: worker threads (default: one per core).
    kv_compression: the compression of calls that name none (default: FullKV).
    """

    def __init__(
        self,
        model: Optional[Union[str, os.PathLike]] = None,
        kv_memory: Union[int, str] = "256MiB",
        threads: Optional[int] = None,
        kv_compression: CompressionType = None,
        *,
        kv_dtype: str = "f16",
        max_num_seqs: int = 64,
        max_batch_tokens: int = 512,
        enable_prefix_caching: bool = True,
        kv_admission: str = "grow",
        download_dir: Optional[Union[str, os.PathLike]] = None,
    ) -> None:
        cache = Path(download_dir) if download_dir is not None else default_cache_dir()
        name = None if model is None else os.fspath(model)
        self.model_path: Path = Path(_rkv.resolve_model(name, str(cache), sys.executable))
        self._engine = _rkv.Engine(
            str(self.model_path),
            kv_memory,
            threads,
            kv_compression,
            kv_dtype,
            max_num_seqs,
            max_batch_tokens,
            enable_prefix_caching,
            kv_admission,
        )

    @property
    def kv_capacity_bytes(self) -> int:
        """KV memory the engine's block pool holds (at most ``kv_memory``)."""
        return self._engine.kv_capacity_bytes

    @property
    def max_context(self) -> int:
        return self._engine.max_context

    def metrics(self) -> dict:
        """The engine's gauges and counters: running and waiting sequences, KV blocks used
        and total, preemptions, tokens."""
        return self._engine.metrics()

    def encode(self, text: str) -> list[int]:
        return self._engine.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._engine.decode(list(token_ids))

    def generate(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        kv_compression: CompressionType = None,
        use_tqdm: Union[bool, Callable[..., Any]] = True,
    ) -> list[RequestOutput]:
        """Generates for one prompt or many: strings, token id lists, or vLLM's
        ``{"prompt": ...}`` / ``{"prompt_token_ids": [...]}`` dicts. Returns one
        ``RequestOutput`` per prompt, in order. ``sampling_params`` is one for all
        prompts or one per prompt; ``kv_compression`` overrides the LLM's for this call.
        Ctrl-C cancels every request of the call and frees its memory."""
        items = _prompt_list(prompts)
        params = _params_list(sampling_params, len(items))
        return self._run(items, params, kv_compression, use_tqdm)

    def chat(
        self,
        messages: Union[Sequence[dict], Sequence[Sequence[dict]]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        use_tqdm: Union[bool, Callable[..., Any]] = True,
        kv_compression: CompressionType = None,
        add_generation_prompt: bool = True,
        tools: Optional[Sequence[dict]] = None,
    ) -> list[RequestOutput]:
        """Generates replies to one conversation (a list of ``{"role", "content"}``
        messages) or many (a list of such lists), each rendered with the model's chat
        template as vLLM's ``LLM.chat`` does; ``tools`` are passed to the template."""
        convs = _conversations(messages)
        try:
            encoded = [json.dumps(list(c)) for c in convs]
            tools_json = None if tools is None else json.dumps(list(tools))
        except TypeError as e:
            raise TypeError(f"messages must be JSON-serialisable: {e}") from None
        rendered = self._engine.render_chat(encoded, add_generation_prompt, tools_json)
        params = _params_list(sampling_params, len(rendered))
        return self._run(rendered, params, kv_compression, use_tqdm)

    def shutdown(self) -> None:
        """Stops the engine thread (also done when the LLM is garbage collected)."""
        self._engine.shutdown()

    def _run(self, items, params, kv_compression, use_tqdm) -> list[RequestOutput]:
        total = sum(p.n for p in params)
        bar = _progress_bar(use_tqdm, total)
        try:
            progress = None if bar is None else bar.update
            return self._engine.generate(items, params, kv_compression, progress)
        finally:
            if bar is not None:
                bar.close()


def _progress_bar(use_tqdm, total: int):
    if not use_tqdm or total == 0:
        return None
    if callable(use_tqdm) and use_tqdm is not True:
        make = use_tqdm
    else:
        from tqdm.auto import tqdm as make
    return make(total=total, desc="Processed prompts", dynamic_ncols=True)


def _prompt_list(prompts) -> list:
    """One prompt or many, as a list of ``str`` or ``list[int]``."""
    if isinstance(prompts, (str, dict)):
        prompts = [prompts]
    elif _is_token_ids(prompts):
        prompts = [prompts]
    items = []
    for i, p in enumerate(prompts):
        if isinstance(p, dict):
            if "prompt_token_ids" in p:
                p = p["prompt_token_ids"]
            elif "prompt" in p:
                p = p["prompt"]
            else:
                raise ValueError(
                    f"prompts[{i}]: a dict prompt needs 'prompt' or 'prompt_token_ids'"
                )
        if isinstance(p, str):
            items.append(p)
        elif _is_token_ids(p):
            items.append([int(t) for t in p])
        else:
            raise TypeError(
                f"prompts[{i}] must be a str, a list of token ids or a dict, "
                f"got {type(p).__name__}"
            )
    return items


def _is_token_ids(p) -> bool:
    if isinstance(p, (str, bytes, dict)):
        return False
    try:
        seq = list(p)
    except TypeError:
        return False
    return len(seq) > 0 and all(
        isinstance(t, int) or type(t).__name__.startswith(("int", "uint")) for t in seq
    )


def _params_list(sampling_params, n: int) -> list[SamplingParams]:
    if sampling_params is None:
        return [SamplingParams()] * n
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * n
    params = list(sampling_params)
    if len(params) != n:
        raise ValueError(
            f"sampling_params: {len(params)} given for {n} prompts (give one, or one per prompt)"
        )
    for i, p in enumerate(params):
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params[{i}] must be a SamplingParams")
    return params


def _conversations(messages) -> list:
    if isinstance(messages, dict):
        raise TypeError("messages must be a list of messages (dicts) or a list of such lists")
    msgs = list(messages)
    if msgs and isinstance(msgs[0], dict):
        return [msgs]
    return [list(c) for c in msgs]
