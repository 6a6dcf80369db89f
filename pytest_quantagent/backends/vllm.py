"""``vllm`` backend: offline ``vllm.LLM`` per arm, on a GPU.

- **Quantization** is taken from the checkpoint (compressed-tensors AWQ W4A16 / FP8 written
  by ``quantagent quantize`` or llm-compressor). ``quantization = "fp8-dynamic"`` on an arm
  whose checkpoint is bf16 asks vLLM for dynamic FP8 (``quantization="fp8"``).
- **Chat with tools** goes through the model's own chat template (``LLM.chat(...,
  tools=...)``); tool calls are read from the output text in the Hermes/Qwen form
  (``<tool_call>{json}</tool_call>``) or a bare JSON object. A call that cannot be read comes
  back with an empty name and the raw text, so the agent records ``malformed_call``.
- **Margins**: ``SamplingParams(logprobs=2)`` gives the top-2 logprobs of every generated
  token; a :class:`~pytest_quantagent.vocab.messages.Decision` is recorded at the first token
  of each tool name.
- **Batching**: concurrent episodes' ``generate`` calls are gathered and sent to vLLM as one
  ``LLM.chat`` batch (vLLM schedules them with continuous batching), in a worker thread so
  the event loop keeps running.
- **KV cache**: the arm's ``kv_cache_dtype`` (``+kv-fp8``, or the TOML key) is the engine's
  ``kv_cache_dtype``; vLLM takes ``auto``, ``fp8`` (E4M3), ``fp8_e4m3`` and ``fp8_e5m2``
  (with the checkpoint's calibrated k/v scales when it has them, else 1.0), and the
  emulated-only ``int8``/``int4`` are refused before the engine is built.
- **Memory**: ``aclose`` releases the engine and the GPU memory before the next arm's
  engine is built (the runner closes each arm's backend when the arm is done).

vLLM is an optional extra with its own torch/transformers pins: install it in its own
environment with ``pip install 'pytest-quantagent[vllm]'``.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_quantagent.backends.base import (
    Backend,
    BackendOptions,
    GenerateRequest,
    Generation,
    RawToolCall,
)
from pytest_quantagent.backends.kv_cache import VLLM_KV_CACHE_DTYPES
from pytest_quantagent.backends.openai_parse import tool_name_decisions
from pytest_quantagent.backends.options import ENGINE_ARGS, VLLM_OPTIONS
from pytest_quantagent.errors import MissingDependencyError

if TYPE_CHECKING:
    from pytest_quantagent.backends.spec import BackendSpec

#: BackendSpec.quantization values → what vLLM's ``quantization=`` gets (None: from checkpoint).
_VLLM_QUANTIZATION: dict[str, str | None] = {
    "fp8-dynamic": "fp8",
    "fp8": "fp8",
}

_INT_ARGS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
             "max_num_seqs", "max_num_batched_tokens", "max_model_len")



def check_vllm_kv_cache_dtype(dtype: str, label: str = "") -> str:
    """``dtype`` when vLLM's ``kv_cache_dtype`` accepts it; else ``ValueError`` naming the arm,
    the dtype and what vLLM accepts (``int8``/``int4`` are emulated by the transformers
    backend only)."""
    if dtype not in VLLM_KV_CACHE_DTYPES:
        who = f"arm {label!r}: " if label else ""
        raise ValueError(f"{who}kv_cache_dtype {dtype!r} is not one vLLM serves; vLLM accepts "
                         f"{', '.join(VLLM_KV_CACHE_DTYPES)} ({dtype!r} is emulated by the "
                         "transformers backend only)")
    return dtype


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise MissingDependencyError("the vLLM backend", "vllm", ["vllm"]) from e
    return vllm


def vllm_quantization(scheme: str | None) -> str | None:
    """The ``quantization=`` argument for vLLM given an arm's scheme (None: checkpoint's)."""
    if scheme is None:
        return None
    return _VLLM_QUANTIZATION.get(scheme)


def logprobs_to_tokens(
    logprobs: list[dict[int, Any]] | None, token_ids: list[int] | None = None
) -> list[dict[str, Any]]:
    """vLLM per-token logprob dicts → OpenAI ``logprobs.content`` entries.

    Each vLLM entry maps token id → ``Logprob(logprob, rank, decoded_token)`` and holds the
    top-k tokens plus the sampled one (which, under sampling, need not be in the top-k).
    ``token_ids`` (the generated ids) say which entry was sampled; without them the most
    likely token is taken, which is right under greedy decoding.
    """
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(logprobs or ()):
        if not entry:
            continue
        top = sorted(entry.values(), key=lambda lp: -lp.logprob)
        sampled = entry.get(token_ids[i]) if token_ids is not None and i < len(token_ids) else None
        chosen = sampled if sampled is not None else top[0]
        out.append(
            {
                "token": chosen.decoded_token or "",
                "logprob": float(chosen.logprob),
                "top_logprobs": [
                    {"token": lp.decoded_token or "", "logprob": float(lp.logprob)} for lp in top[:2]
                ],
            }
        )
    return out


def output_to_generation(text: str, token_entries: list[dict[str, Any]], prompt_tokens: int | None,
                         completion_tokens: int | None) -> Generation:
    """One vLLM completion (text + top-2 token entries) → :class:`Generation`."""
    from pytest_quantagent.bundled.chat import parse_tool_calls

    turn = parse_tool_calls(text)
    calls = [
        RawToolCall(id=f"call_{i}", name=c.name, arguments=c.arguments)
        for i, c in enumerate(turn.calls)
    ]
    decisions = tool_name_decisions(token_entries, [c.name for c in calls]) if token_entries else []
    return Generation(
        content=turn.content,
        tool_calls=calls,
        raw_text=text,
        decisions=decisions,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )


@dataclass
class _Job:
    request: GenerateRequest
    future: asyncio.Future[Generation]
    loop: asyncio.AbstractEventLoop = field(repr=False)


class VLLMBackend(Backend):
    """One offline vLLM engine serving one arm."""

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        quantization: str | None = None,
        revision: str | None = None,
        max_model_len: int = 16384,
        gpu_memory_utilization: float = 0.85,
        dtype: str = "auto",
        enforce_eager: bool = False,
        tensor_parallel_size: int = 1,
        chat_template_kwargs: dict[str, Any] | None = None,
        kv_cache_dtype: str = "auto",
        **engine_args: Any,
    ) -> None:
        check_vllm_kv_cache_dtype(kv_cache_dtype)
        vllm = _import_vllm()
        self._vllm = vllm
        self.model = model
        self.quantization = quantization
        self.kv_cache_dtype = kv_cache_dtype
        if kv_cache_dtype != "auto":
            engine_args["kv_cache_dtype"] = kv_cache_dtype
        self._llm: Any = vllm.LLM(
            model=model,
            revision=revision,
            quantization=quantization,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
            enforce_eager=enforce_eager,
            tensor_parallel_size=tensor_parallel_size,
            **engine_args,
        )
        self.engine_args = {"tensor_parallel_size": tensor_parallel_size, **engine_args}
        self._chat_template_kwargs = chat_template_kwargs or {}
        self._pending: list[_Job] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._worker = threading.Thread(target=self._serve, name="vllm-batcher", daemon=True)
        self._worker.start()

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "version": self.version(),
            "model": self.model,
            "quantization": self.quantization,
            "kv_cache_dtype": self.kv_cache_dtype,
            "vllm": getattr(self._vllm, "__version__", "?"),
            "engine_args": dict(self.engine_args),
        }

    def version(self) -> str:
        from pytest_quantagent.backends.fingerprint import checkpoint_fingerprint

        return f"1/vllm-{getattr(self._vllm, '__version__', '?')}/{checkpoint_fingerprint(self.model)}"

    def is_retryable(self, exc: BaseException) -> bool:
        return False  # in-process: a failure is a bug or OOM, not a transient fault

    async def generate(self, request: GenerateRequest) -> Generation:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Generation] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("vLLM backend is closed")
            self._pending.append(_Job(request, fut, loop))
        self._wake.set()
        return await fut

    def _serve(self) -> None:
        while True:
            self._wake.wait()
            with self._lock:
                jobs, self._pending = self._pending, []
                self._wake.clear()
                if self._closed and not jobs:
                    return
            if not jobs:
                continue
            # One LLM.chat call per distinct tool list (all episodes of a domain share one).
            for _, group_iter in itertools.groupby(
                sorted(jobs, key=lambda j: id(j.request.tools)), key=lambda j: id(j.request.tools)
            ):
                group = list(group_iter)
                try:
                    results = self._run(group)
                except BaseException as e:
                    for job in group:
                        job.loop.call_soon_threadsafe(_set_exception, job.future, e)
                    continue
                for job, gen in zip(group, results, strict=True):
                    job.loop.call_soon_threadsafe(_set_result, job.future, gen)

    def _run(self, jobs: list[_Job]) -> list[Generation]:
        params = [
            self._vllm.SamplingParams(
                temperature=j.request.temperature,
                max_tokens=j.request.max_tokens,
                seed=j.request.seed,
                logprobs=2 if j.request.want_margins else None,
            )
            for j in jobs
        ]
        outputs = self._llm.chat(
            [j.request.messages for j in jobs],
            params,
            tools=jobs[0].request.tools,
            use_tqdm=False,
            chat_template_kwargs=self._chat_template_kwargs or None,
        )
        gens = []
        for out in outputs:
            comp = out.outputs[0]
            gens.append(
                output_to_generation(
                    comp.text,
                    logprobs_to_tokens(comp.logprobs, list(comp.token_ids or ())),
                    len(out.prompt_token_ids or ()),
                    len(comp.token_ids or ()),
                )
            )
        return gens

    async def aclose(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake.set()
        await asyncio.to_thread(self._worker.join, 60)
        self._llm = None
        gc.collect()
        try:  # free the GPU before the next arm's engine is built
            from vllm.distributed.parallel_state import (
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            destroy_model_parallel()
            destroy_distributed_environment()
        except Exception:
            pass
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass


def _set_result(fut: asyncio.Future[Generation], gen: Generation) -> None:
    if not fut.done():
        fut.set_result(gen)


def _set_exception(fut: asyncio.Future[Generation], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def engine_kwargs(spec: BackendSpec) -> dict[str, Any]:
    """The keyword arguments of ``vllm.LLM`` for ``spec`` (its engine arguments and the
    ``engine_args`` table merged; ``chat_template_kwargs`` kept for the backend), checked for
    types that vLLM would only refuse after loading: sizes are integers >= 1, tables are
    tables, and a key is not given twice. No vLLM import."""
    opts = {k: v for k, v in spec.options.items() if k not in ("max_tokens", "engine_args")}
    table = spec.options.get("engine_args", {})
    if not isinstance(table, dict):
        raise ValueError(f"arm {spec.label!r}: engine_args must be a table, got {table!r}")
    if "kv_cache_dtype" in table:
        raise ValueError(f"arm {spec.label!r}: give kv_cache_dtype as the arm's own key (or the "
                         "label's '+kv-DTYPE'), not in engine_args")
    twice = sorted(set(table) & set(opts))
    if twice:
        raise ValueError(f"arm {spec.label!r}: {twice[0]!r} is given both in the arm's table and in engine_args")
    opts.update(table)
    for k in _INT_ARGS:
        v = opts.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"arm {spec.label!r}: {k} ({v!r}) must be an integer >= 1")
    ctk = opts.get("chat_template_kwargs")
    if ctk is not None and not isinstance(ctk, dict):
        raise ValueError(f"arm {spec.label!r}: chat_template_kwargs must be a table, got {ctk!r}")
    return opts


def _engine_arg_names(vllm: Any) -> set[str]:
    import dataclasses

    cls = getattr(vllm, "EngineArgs", None)
    if cls is None or not dataclasses.is_dataclass(cls):
        return set()
    return {f.name for f in dataclasses.fields(cls)}


def create_backend(spec: BackendSpec, options: BackendOptions) -> VLLMBackend:
    """Factory for ``backend = "vllm"``: ``path`` (or ``model``) is the checkpoint."""
    unknown = set(spec.options) - VLLM_OPTIONS
    if unknown:
        raise ValueError(
            f"arm {spec.label!r}: unknown vllm option(s) {', '.join(sorted(unknown))}; "
            f"allowed: {', '.join(sorted(VLLM_OPTIONS))}"
        )
    opts = engine_kwargs(spec)
    check_vllm_kv_cache_dtype(spec.kv_cache_dtype, spec.label)
    vllm = _import_vllm()  # fail with the install line before anything else
    extra = set(opts) - ENGINE_ARGS - {"chat_template_kwargs"}
    known = _engine_arg_names(vllm)
    if extra and known:
        from pytest_quantagent.backends.options import did_you_mean

        bad = sorted(extra - known)
        if bad:
            raise ValueError(f"arm {spec.label!r}: engine_args: {bad[0]!r} is not a vLLM engine "
                             f"argument{did_you_mean(bad[0], known)}")
    ctk = opts.pop("chat_template_kwargs", None)
    return VLLMBackend(
        spec.path or spec.model,
        quantization=vllm_quantization(spec.quantization),
        revision=spec.revision,
        chat_template_kwargs=ctk,
        kv_cache_dtype=spec.kv_cache_dtype,
        **opts,
    )


__all__ = ["ENGINE_ARGS", "VLLMBackend", "check_vllm_kv_cache_dtype", "create_backend", "engine_kwargs", "logprobs_to_tokens", "output_to_generation", "vllm_quantization"]
