"""Type stubs of the native module (crates/rkv-py)."""

from os import PathLike
from typing import Callable, Optional, Sequence, Union

__version__: str
DEFAULT_MODEL: str
KNOWN_MODELS: str

class SamplingParams:
    n: int
    temperature: float
    top_p: float
    top_k: int
    seed: Optional[int]
    max_tokens: Optional[int]
    stop: list[str]
    ignore_eos: bool
    logprobs: Optional[int]
    prompt_logprobs: Optional[int]
    def __init__(
        self,
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: Optional[int] = None,
        max_tokens: Optional[int] = 16,
        stop: Union[str, Sequence[str], None] = None,
        ignore_eos: bool = False,
        logprobs: Optional[int] = None,
        prompt_logprobs: Optional[int] = None,
    ) -> None: ...

class KvCompression:
    policy: str
    budget: Optional[int]
    buffer: int
    window: int
    def __init__(
        self,
        policy: str,
        budget: Optional[int] = None,
        *,
        buffer: Optional[int] = None,
        window: Optional[int] = None,
        lambda_: Optional[float] = None,
        threshold: Optional[float] = None,
        kernel: Optional[int] = None,
        sinks: Optional[int] = None,
        prompt: Optional[str] = None,
        prompt_chunk: Optional[int] = None,
        params: Optional[dict[str, float]] = None,
    ) -> None: ...
    @staticmethod
    def from_dict(d: dict) -> KvCompression: ...

class Logprob:
    logprob: float
    rank: int
    decoded_token: Optional[str]

class KvUsage:
    policy: str
    budget: Optional[int]
    slots_peak: int
    bytes_peak: int
    compressions: int
    evicted_tokens: int
    cached_tokens: int
    def to_dict(self) -> dict: ...

class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[list[dict[int, Logprob]]]
    finish_reason: str
    kv: KvUsage
    def finished(self) -> bool: ...

class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    prompt_logprobs: Optional[list[Optional[dict[int, Logprob]]]]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int

class Engine:
    kv_blocks: int
    kv_capacity_bytes: int
    max_context: int
    def __init__(
        self,
        model_path: Union[str, PathLike],
        kv_memory: Union[int, str],
        threads: Optional[int] = None,
        kv_compression: Union[KvCompression, dict, str, None] = None,
        kv_dtype: str = "f16",
        max_num_seqs: int = 64,
        max_batch_tokens: int = 512,
        enable_prefix_caching: bool = True,
        kv_admission: str = "grow",
    ) -> None: ...
    def metrics(self) -> dict[str, int]: ...
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...
    def render_chat(
        self, conversations: list[str], add_generation_prompt: bool = True, tools: Optional[str] = None
    ) -> list[str]: ...
    def generate(
        self,
        prompts: list[Union[str, list[int]]],
        params: list[SamplingParams],
        kv_compression: Union[KvCompression, dict, str, None] = None,
        progress: Optional[Callable[[int], object]] = None,
    ) -> list[RequestOutput]: ...
    def shutdown(self) -> None: ...

def resolve_model(model: Optional[str], cache_dir: str, python: str) -> str: ...
def read_math_problems(path: Union[str, PathLike], limit: Optional[int] = None) -> list[dict]: ...
def r1_prompt(problem: str) -> str: ...
def grade(output: str, gold: str) -> tuple[bool, Optional[str]]: ...
