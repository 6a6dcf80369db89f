"""Typed arm options of the built-in backends (pydantic), and the "did you mean" check.

An arm's TOML table holds the :class:`~pytest_quantagent.quant.arms.ArmSpec` fields plus its
backend's options. Each built-in backend's options are a model here (strict types: a
boolean is ``true``/``false``, never ``"false"``; ranges such as ``max_connections >= 1`` and
a finite ``timeout_s > 0``), so the arms config is checked when it is read, before any
backend is built. A backend registered by a plugin has no model here: its options pass
through to its factory unchecked. No heavy imports: this module is read at config time.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    backend_name: ClassVar[str] = "backend"


TIMEOUT_RANGE_S = (0.001, 86_400.0)  # a millisecond to a day; outside it is a typo (issue 36)


def _timeout_seconds(v: float | None) -> float | None:
    lo, hi = TIMEOUT_RANGE_S
    if v is not None and not (math.isfinite(v) and lo <= v <= hi):
        raise ValueError(f"must be a number of seconds from {lo:g} to {hi:g}")
    return v


class EndpointTable(_Options):
    """One entry of an arm's ``endpoints`` list: ``{url = "http://gpu3:8000/v1", weight = 2}``."""

    backend_name: ClassVar[str] = "endpoint"

    url: StrictStr
    weight: StrictFloat | StrictInt = Field(default=1, gt=0)

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        return _check_url(v)


def _check_url(v: str) -> str:
    from urllib.parse import urlsplit

    from pytest_quantagent.backends.secrets import without_userinfo

    try:
        u = urlsplit(v)
        ok = u.scheme in ("http", "https") and bool(u.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{without_userinfo(v)!r} is not an http:// or https:// URL with a host "
                         "(e.g. \"http://127.0.0.1:8000/v1\")")
    return v


class OpenAIOptions(_Options):
    """``backend = "openai"``.

    ``endpoints``: several servers of the same model for one arm (a list of URLs, or of
    ``{url, weight}`` tables); a list given as ``base_url`` lands here too. Requests go to the
    least-loaded healthy endpoint (load divided by weight)."""

    backend_name: ClassVar[str] = "openai"

    constrained: StrictBool = False
    logprobs: StrictBool = True
    timeout_s: StrictFloat | StrictInt | None = None
    max_connections: StrictInt | None = Field(default=None, ge=1)
    extra_body: dict[str, Any] | None = None
    http_client: Literal["auto", "native", "httpx"] = "auto"
    max_output_chars: StrictInt = Field(default=32_768, ge=1)
    endpoints: list[Any] | None = Field(default=None, min_length=1)

    @field_validator("endpoints")
    @classmethod
    def _endpoint_entries(cls, v: list[Any] | None) -> list[Any] | None:
        if v is None:
            return v
        urls = []
        for i, e in enumerate(v):
            if isinstance(e, str):
                urls.append(_check_url(e))
            elif isinstance(e, Mapping):
                try:
                    urls.append(EndpointTable.model_validate(dict(e)).url)
                except ValidationError as err:
                    raise ValueError(f"entry {i}: " + option_error(
                        EndpointTable, e, err, "endpoint").split(": ", 1)[1]) from None
            else:
                raise ValueError(f"entry {i} ({e!r}) must be a URL or a table "
                                 "{url = \"http://...\", weight = 1}")
        from pytest_quantagent.backends.secrets import without_userinfo

        dup = sorted({without_userinfo(u.rstrip("/")) for u in urls
                      if [x.rstrip("/") for x in urls].count(u.rstrip("/")) > 1})
        if dup:
            raise ValueError(f"{', '.join(dup)} listed twice")
        return v

    _timeout = field_validator("timeout_s")(_timeout_seconds)


class MockOptions(_Options):
    """``backend = "mock"``."""

    backend_name: ClassVar[str] = "mock"

    responses: list[Any] | None = None
    rule: Any = None
    cycle: StrictBool = False
    latency_s: StrictFloat | StrictInt = Field(default=0.0, ge=0)


class TransformersOptions(_Options):
    """``backend = "transformers"``."""

    backend_name: ClassVar[str] = "transformers"

    compute_dtype: StrictStr = "float32"
    device: StrictStr = "cpu"
    max_batch: StrictInt = Field(default=32, ge=1)
    max_new_tokens: StrictInt | None = Field(default=None, ge=1)
    threads: StrictInt | None = Field(default=None, ge=1)


#: vLLM engine arguments an arm's table may set directly (``backend = "vllm"``) (passed to ``vllm.LLM``);
#: any other engine argument goes in an ``engine_args`` table, checked against
#: ``vllm.EngineArgs`` when the engine is built. All of them are in the arm's cache key
#: (a parallel layout can change the numerics, hence greedy outputs). ``kv_cache_dtype`` is
#: the arm's own key (``ArmSpec.kv_cache_dtype``, also the ``+kv-DTYPE`` label modifier),
#: handed to the engine by the backend.
ENGINE_ARGS = frozenset(
    {
        "max_model_len",
        "gpu_memory_utilization",
        "dtype",
        "enforce_eager",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "distributed_executor_backend",
        "max_num_seqs",
        "max_num_batched_tokens",
        "enable_prefix_caching",
        "enable_chunked_prefill",
        "swap_space",
        "cpu_offload_gb",
        "trust_remote_code",
        "enable_expert_parallel",
    }
)
#: Every option of a ``vllm`` arm: the engine arguments above, ``max_tokens``,
#: ``chat_template_kwargs`` and the ``engine_args`` table.
VLLM_OPTIONS = ENGINE_ARGS | {"max_tokens", "chat_template_kwargs", "engine_args"}

#: Backend name → the model of its options (the vLLM backend checks its own engine
#: arguments, which follow vLLM's version; its names are listed for "did you mean").
OPTION_MODELS: dict[str, type[_Options]] = {
    "openai": OpenAIOptions,
    "mock": MockOptions,
    "transformers": TransformersOptions,
}


def arm_endpoints(base_url: str | None, options: Mapping[str, Any]) -> list[tuple[str, float]]:
    """An arm's endpoints as (url, weight): its ``endpoints`` option, else its ``base_url``
    (weight 1); empty when it has neither. Entries are as validated by :class:`OpenAIOptions`
    (strings or ``{url, weight}`` mappings)."""
    raw = options.get("endpoints")
    if not raw:
        return [(base_url, 1.0)] if base_url else []
    out: list[tuple[str, float]] = []
    for e in raw:
        if isinstance(e, str):
            out.append((e, 1.0))
        else:
            out.append((str(e["url"]), float(e.get("weight", 1))))
    return out


def did_you_mean(value: str, known: Iterable[str]) -> str:
    """``"; did you mean 'base_url'?"`` for a close match, else ``""``."""
    close = difflib.get_close_matches(value, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def validate_options(model: type[_Options], options: Mapping[str, Any], *, where: str) -> _Options:
    """``options`` checked against ``model``; ``ValueError`` naming ``where``, the key, the bad
    value and the allowed keys/values (raises on the first problem)."""
    try:
        return model.model_validate(dict(options))
    except ValidationError as e:
        raise ValueError(option_error(model, options, e, where)) from None


def option_error(model: type[BaseModel], options: Mapping[str, Any], e: ValidationError,
                 where: str, known_extra: Iterable[str] = ()) -> str:
    """One readable line for the first error of ``e``."""
    err = e.errors()[0]
    key = str(err["loc"][0]) if err["loc"] else ""
    allowed = sorted({*model.model_fields, *known_extra})
    if err["type"] == "extra_forbidden":
        return (f"{where}: unknown {getattr(model, 'backend_name', 'backend')} option {key!r}"
                f"{did_you_mean(key, allowed)}; allowed: {', '.join(allowed)}")
    loc = ".".join(str(p) for p in err["loc"])
    value = options.get(key, err.get("input"))
    return f"{where}: key {loc!r} = {value!r}: {err['msg']}"
