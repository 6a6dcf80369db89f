"""``transformers`` backend: any HF causal LM on CPU (or a local GPU), in process.

- **Models.** The bundled reference agents by name (``tiny-agent``, ``tiny-agent-prone``,
  any arm folder of theirs), a local HF folder, or a hub id already in the local cache
  (``local_files_only``: a test run never downloads).
- **Chat format.** Bundled models use their own compact format
  (:mod:`pytest_quantagent.bundled.chat`); other models use their tokenizer's chat
  template with the request's tools. Tool calls are parsed from the bundled
  ``<|call|>{json}`` form, the Hermes ``<tool_call>`` form or a bare JSON object; a call
  that cannot be read comes back with an empty name so the agent records
  ``malformed_call``.
- **Decoding.** Greedy by default (deterministic); ``temperature > 0`` samples with a
  generator seeded from the request seed.
- **Margins.** At every tool name in the output, a :class:`Decision` with the top-1/top-2
  logits at the name token whose margin is smallest (for the bundled tokenizer a name is
  several tokens — ``get``, ``_``, ``user``, ... — and the decisive one is rarely the first).
- **Batching.** Concurrent episodes' ``generate`` calls are queued for one worker thread
  that decodes them together (continuous batching: a request joins the running batch at the
  next forward pass, up to ``max_batch`` rows, its prompt prefilled in that pass with the
  other new rows' and the decoding rows' tokens, and leaves it at its own stop token or
  ``max_tokens``). A conversation's next request reuses the keys and values of its previous
  prompt from a prefix cache (``prefix_cache_mb``) and prefills only what is new. Every
  row's tokens and logits are a function of its own prompt, bit for bit, whatever was
  batched with it and whatever the cache held
  (:mod:`pytest_quantagent.backends.batched_decode` says how): an episode's record never
  depends on which other episodes were in flight. Sampled requests (``temperature > 0``),
  and models the batched path does not support (see ``batching_reason``), are decoded one
  request at a time by ``model.generate``, so they too are batch-independent.
- **KV-cache precision** (``kv_cache_dtype``: ``int8``, ``int4``, ``fp8``/``fp8_e4m3``,
  ``fp8_e5m2``): keys and values are fake-quantized as they are written to the cache, on both
  paths (:mod:`pytest_quantagent.backends.kv_cache` says how), and the version names the
  dtype, so a KV arm's episodes never share a store key with the same weights' ``auto`` arm.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_quantagent.backends.base import (
    Backend,
    BackendOptions,
    GenerateRequest,
    Generation,
    RawToolCall,
)
from pytest_quantagent.backends.batched_decode import (
    CACHE_BYTES,
    BatchedDecoder,
    DecodeRow,
    self_check,
    unsupported_reason,
)
from pytest_quantagent.backends.kv_cache import KV_SCHEMES
from pytest_quantagent.errors import MissingDependencyError, UnknownNameError
from pytest_quantagent.vocab.messages import Decision

if TYPE_CHECKING:
    import torch

    from pytest_quantagent.backends.spec import BackendSpec, ModelHook

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "bundled" / "models"
_NAME_RE = re.compile(rb'"name"\s*:\s*"([^"]*)"')


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise MissingDependencyError(
            "the transformers backend", "transformers", ["torch", "transformers", "safetensors"]
        ) from e


def bundled_models() -> list[str]:
    """Names of the model folders shipped with the package (and their arm folders)."""
    if not BUNDLED_DIR.is_dir():
        return []
    return sorted(
        str(p.parent.relative_to(BUNDLED_DIR))
        for p in BUNDLED_DIR.rglob("config.json")
    )


def resolve_model_path(model: str) -> Path | str:
    """A bundled model name, a local folder, or a hub id to load from the local cache."""
    bundled = BUNDLED_DIR / model
    if (bundled / "config.json").is_file():
        return bundled
    local = Path(model).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise UnknownNameError(
                "model folder", str(local), bundled_models(),
                hint="a model folder must hold config.json (HF format)",
            )
        return local
    if "/" in model and not model.startswith((".", "/")):
        return model  # hub id: loaded with local_files_only
    raise UnknownNameError(
        "model", model, bundled_models(),
        hint="give a bundled name, a local HF folder, or a hub id already in the local cache",
    )


@dataclass
class _Job:
    request: GenerateRequest
    future: asyncio.Future[Generation]
    loop: asyncio.AbstractEventLoop
    prompt: list[int]
    """The request's token ids (computed once, by ``generate``'s length check)."""
    row: DecodeRow | None = None


_UNCHECKED = "not checked yet"


def _settle_compressed(model: Any) -> None:
    """A compressed-tensors checkpoint (the FP8-dynamic arms) loads with packed weights that a
    forward pre-hook decompresses on the first call, behind CPU-to-CPU offload wrappers that
    re-fetch every parameter on every forward. Decompress now and drop the wrappers: the
    values are the same, the forward many times cheaper, and the projections readable by the
    batched decoder (which applies their activation quantization itself)."""
    hooks = [h for h in model._forward_pre_hooks.values()
             if getattr(h, "__name__", "") == "ct_decompress_hook"]
    for hook in hooks:
        hook(model, ())  # removes itself
    try:
        from compressed_tensors.offload.cache import OffloadCache
        from compressed_tensors.offload.dispatch import remove_dispatch
    except ImportError:
        return
    if any(isinstance(m._parameters, OffloadCache) for m in model.modules()):
        remove_dispatch(model, onload_tensors=True)
        for module in model.modules():
            # remove_dispatch binds each module's own forward back onto the instance; a
            # bound class forward is no patch (the quantized projections keep theirs)
            forward = vars(module).get("forward")
            if getattr(forward, "__func__", None) is type(module).forward:
                del module.forward


class TransformersBackend(Backend):
    """An in-process HF causal LM with batched greedy generation."""

    name = "transformers"

    def __init__(
        self,
        model: str | Path,
        *,
        compute_dtype: str = "float32",
        device: str = "cpu",
        max_batch: int = 64,
        max_new_tokens: int | None = None,
        threads: int = 1,
        quantization: str | None = None,
        prefix_cache_mb: float = CACHE_BYTES / 2**20,
        prepare_model: ModelHook | None = None,
        kv_cache_dtype: str = "auto",
    ) -> None:
        from pytest_quantagent.backends.kv_cache import check_kv_cache_dtype

        self.kv_cache_dtype = check_kv_cache_dtype(kv_cache_dtype)
        _require_torch()
        import torch
        from transformers import AutoModelForCausalLM

        from pytest_quantagent.bundled.tokenizer import TOKENIZER_FILE, DomainTokenizer

        if threads > 0:
            torch.set_num_threads(threads)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        self.model_ref = str(model)
        path = resolve_model_path(str(model))
        self.path = path
        self._version: str | None = None
        self.device = device
        self.max_batch = max_batch
        if not prefix_cache_mb >= 0:
            raise ValueError(f"prefix_cache_mb must be a size in MiB >= 0, got {prefix_cache_mb!r}")
        self.prefix_cache_bytes = int(prefix_cache_mb * 2**20)
        dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        if compute_dtype not in dtypes:
            raise ValueError(
                f"compute_dtype {compute_dtype!r} is not one of {', '.join(map(repr, dtypes))}"
            )
        self.compute_dtype = compute_dtype
        local_only = {"local_files_only": True}
        self.bundled = isinstance(path, Path) and (path / TOKENIZER_FILE).is_file()
        if self.bundled:
            self.dtok: DomainTokenizer | None = DomainTokenizer.load(path)
            self.hf_tok: Any = None
            self.pad_id = self.dtok.pad_id
            self.stop_ids = [self.dtok.end_id, self.dtok.eos_id]
        else:
            from transformers import AutoTokenizer

            self.dtok = None
            self.hf_tok = AutoTokenizer.from_pretrained(str(path), **local_only)
            pad = self.hf_tok.pad_token_id
            self.pad_id = pad if pad is not None else self.hf_tok.eos_token_id
            self.stop_ids = [self.hf_tok.eos_token_id]
        self.model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtypes[compute_dtype], **local_only)
        _settle_compressed(self.model)
        self.quantization = quantization
        # quantizing on load is the arm side's (quant/loading.py); `quantization` is a label
        self.quant_report = None if prepare_model is None else prepare_model(self.model)
        self.model.to(device)  # type: ignore[arg-type]
        self.model.eval()  # type: ignore[no-untyped-call]
        if max_new_tokens is None:
            max_new_tokens = 160 if self.bundled else 1024
        self.max_new_tokens = max_new_tokens
        limit = getattr(self.model.config, "max_position_embeddings", None)
        self.context_limit: int | None = int(limit) if limit else None
        """Positions the model was built for: a longer prompt raises ContextLengthError (as a
        server refuses it) instead of running RoPE past what the model has ever seen."""
        self._queue: collections.deque[_Job] = collections.deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._decoder: BatchedDecoder | None = None
        self._decoder_model: int | None = None
        self.batching_reason: str | None = _UNCHECKED
        """Why greedy requests are decoded one at a time (None: they are batched)."""

    # -- Backend policy ----------------------------------------------------------------
    def max_concurrency(self) -> int:
        return 256

    def is_retryable(self, exc: BaseException) -> bool:
        return False

    def version(self) -> str:
        """Decoding path plus a fingerprint of the checkpoint's files (part of the episode
        cache key: a model retrained or re-quantized in place gets new episodes). ``2``: the
        chunked batched decoder (greedy requests); ``1``: one ``model.generate`` per request
        (unsupported models, or a machine that failed the self-check), whose logits differ
        from the chunked path's in the last bits, so their episodes are not mixed. A quantized
        KV cache adds ``/kv-<dtype>``."""
        from pytest_quantagent.backends.fingerprint import checkpoint_fingerprint

        if self._version is None:
            path = 2 if self.batched_decoder() is not None else 1
            kv = "" if self.kv_cache_dtype == "auto" else f"/kv-{self.kv_cache_dtype}"
            self._version = f"{path}/{checkpoint_fingerprint(self.path)}{kv}"
        return self._version

    def describe(self) -> dict[str, Any]:
        import torch
        import transformers

        return {
            "backend": self.name,
            "version": self.version(),
            "model": self.model_ref,
            "path": str(self.path),
            "compute_dtype": self.compute_dtype,
            "quantization": self.quantization,
            "kv_cache_dtype": self.kv_cache_dtype,
            "kv_cache_scheme": KV_SCHEMES[self.kv_cache_dtype],
            "batching": self.batching_reason or "batched",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        }

    # -- prompt ------------------------------------------------------------------------
    def prompt_ids(self, request: GenerateRequest) -> list[int]:
        """Token ids of the rendered chat (generation prompt included)."""
        if self.dtok is not None:
            from pytest_quantagent.bundled.chat import render_messages

            return self.dtok.encode(render_messages(request.messages))
        kwargs: dict[str, Any] = {"add_generation_prompt": True, "tokenize": True}
        if request.tools:
            kwargs["tools"] = request.tools
        out = self.hf_tok.apply_chat_template(_hf_messages(request.messages), **kwargs)
        if isinstance(out, dict) or hasattr(out, "input_ids"):
            out = out["input_ids"]
        return list(out)

    def _token_bytes(self, ids: list[int]) -> list[bytes]:
        if self.dtok is not None:
            return [self.dtok.decode([i]).encode() for i in ids]
        # Byte spans from prefix decodes (exact for multi-byte pieces).
        out: list[bytes] = []
        prev = b""
        for k in range(1, len(ids) + 1):
            cur = self.hf_tok.decode(ids[:k], skip_special_tokens=False).encode()
            out.append(cur[len(prev):] if cur.startswith(prev) else cur)
            prev = cur
        return out

    def _aliases(self, request: GenerateRequest) -> dict[str, str] | None:
        """Alias token → id for an aliasing domain tokenizer (see bundled/tokenizer.py)."""
        if self.dtok is None or not self.dtok.aliases:
            return None
        from pytest_quantagent.bundled.chat import render_messages

        return self.dtok.alias_map(render_messages(request.messages))

    def _decode(self, ids: list[int], aliases: dict[str, str] | None = None) -> str:
        if self.dtok is not None:
            return self.dtok.decode(ids, aliases=aliases)
        return str(self.hf_tok.decode(ids, skip_special_tokens=False))

    # -- generation --------------------------------------------------------------------
    def generate_batch(
        self, requests: list[GenerateRequest], prompts: list[list[int] | None] | None = None
    ) -> list[Generation]:
        """Run requests synchronously: greedy ones batched (see the module doc), sampled ones
        one at a time. Each result is what the request gets decoded alone.

        ``prompts``: token ids already computed for some requests (``None`` entries are
        rendered and tokenized here)."""
        given = prompts if prompts is not None else [None] * len(requests)
        if len(given) != len(requests):
            raise ValueError(f"generate_batch: {len(given)} prompts for {len(requests)} requests")
        ids = [p if p is not None else self.prompt_ids(r) for r, p in zip(requests, given, strict=True)]
        for p in ids:
            self._refuse_if_too_long(len(p))
        decoder = self.batched_decoder()
        out: list[Generation | None] = [None] * len(requests)
        rows: list[tuple[int, DecodeRow]] = []
        for i, (r, p) in enumerate(zip(requests, ids, strict=True)):
            if decoder is None or r.temperature > 0:
                out[i] = self._run([r], [p])[0]
            else:
                rows.append((i, self._row(r, p)))
        if decoder is not None and rows:
            decoder.decode([row for _, row in rows], self.max_batch)
            for i, row in rows:
                out[i] = self._finish(requests[i], row)
        return [g for g in out if g is not None]

    def batched_decoder(self) -> BatchedDecoder | None:
        """The batched decoder for the loaded model, or None (``batching_reason`` says why).
        Built, and checked bitwise (alone / batched / from the prefix cache), on first use."""
        if self._decoder_model != id(self.model):
            self._decoder_model = id(self.model)
            self._decoder = None
            self.batching_reason = unsupported_reason(self.model, self.device)
            if self.batching_reason is None:
                try:
                    decoder = BatchedDecoder(self.model, self.stop_ids, self.pad_id,
                                             cache_bytes=self.prefix_cache_bytes,
                                             kv_cache_dtype=self.kv_cache_dtype)
                    vocab = int(self.model.config.vocab_size)
                    self.batching_reason = self_check(decoder, min(self.max_batch, 24), vocab)
                except Exception as e:  # decoding alone is always available
                    self.batching_reason = f"the batched decoder failed its self-check: {e!r}"
                if self.batching_reason is None:
                    self._decoder = decoder
        return self._decoder

    def _max_new(self, request: GenerateRequest, prompt_len: int) -> int:
        """Tokens this request may generate: its ``max_tokens``, the arm's cap, the context."""
        max_new = min(self.max_new_tokens, request.max_tokens)
        if self.context_limit is not None:
            max_new = max(1, min(max_new, self.context_limit - prompt_len))
        return max_new

    def _row(self, request: GenerateRequest, prompt: list[int]) -> DecodeRow:
        return DecodeRow(prompt, self._max_new(request, len(prompt)), request.want_margins)

    def _finish(self, request: GenerateRequest, row: DecodeRow) -> Generation:
        import torch

        logits = torch.stack(row.logits) if row.want_logits and row.logits else None
        return self._to_generation(row.prompt, row.tokens, logits, self._aliases(request),
                                   max_new=row.max_new)

    def _run(self, requests: list[GenerateRequest], given: list[list[int] | None]) -> list[Generation]:
        """``model.generate`` over ``requests`` left-padded into one batch. Called with one
        request (the unbatched path); with several, rows are padded to the longest prompt and
        share its length cap, and their logits depend on the batch in the last bits."""
        import torch

        prompts = [p if p is not None else self.prompt_ids(r) for r, p in zip(requests, given, strict=True)]
        for p in prompts:
            self._refuse_if_too_long(len(p))
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            ids[row, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[row, width - len(p):] = 1
        max_new = min(self.max_new_tokens, max(r.max_tokens for r in requests))
        if self.context_limit is not None:
            max_new = max(1, min(max_new, self.context_limit - max(len(p) for p in prompts)))
        sample = requests[0].temperature > 0
        gen_kwargs: dict[str, Any] = {
            "max_new_tokens": max_new,
            "do_sample": sample,
            "eos_token_id": self.stop_ids,
            "pad_token_id": self.pad_id,
            "return_dict_in_generate": True,
            "output_logits": any(r.want_margins for r in requests),
            "use_cache": True,
        }
        if self.kv_cache_dtype != "auto":
            from transformers.generation import utils as gen_utils

            from pytest_quantagent.backends.kv_cache import quantized_cache

            # transformers 5.x renames the argument ``cache`` (``past_key_values`` deprecated)
            name = "cache" if "cache" in getattr(gen_utils, "ALL_CACHE_NAMES", ()) else "past_key_values"
            gen_kwargs[name] = quantized_cache(self.kv_cache_dtype)
        if sample:
            torch.manual_seed(requests[0].seed)
            gen_kwargs.update(temperature=requests[0].temperature, top_k=0, top_p=1.0)
        else:
            gen_kwargs.update(temperature=None, top_k=None, top_p=None)
        with torch.inference_mode():
            res = self.model.generate(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **gen_kwargs
            )
        seqs = res.sequences[:, width:].tolist()
        logits = res.logits  # tuple over steps of (batch, vocab)
        outs: list[Generation] = []
        for row, (req, seq) in enumerate(zip(requests, seqs, strict=True)):
            n = len(seq)
            for k, t in enumerate(seq):
                if t in self.stop_ids:
                    n = k
                    break
            gen_ids = seq[:n]
            row_logits = None
            if req.want_margins and logits is not None:
                row_logits = torch.stack([step[row] for step in logits[:n]]) if n else None
            outs.append(self._to_generation(prompts[row], gen_ids, row_logits, self._aliases(req),
                                            max_new=max_new if n == len(seq) else None))
        return outs

    def _to_generation(
        self, prompt: list[int], gen_ids: list[int], logits: torch.Tensor | None,
        aliases: dict[str, str] | None = None, max_new: int | None = None,
    ) -> Generation:
        """The decoded output as a :class:`Generation`; ``finish_reason`` is ``length`` when it
        used all of ``max_new`` (no stop token), else ``stop``."""
        from pytest_quantagent.bundled.chat import parse_tool_calls

        text = self._decode(gen_ids, aliases)
        turn = parse_tool_calls(text)
        calls = [
            RawToolCall(id="", name=c.name, arguments=c.arguments) for c in turn.calls
        ]
        decisions: list[Decision] = []
        if logits is not None and turn.calls:
            decisions = self.name_decisions(gen_ids, logits)
        return Generation(
            content=turn.content,
            tool_calls=calls,
            raw_text=text,
            decisions=decisions,
            prompt_tokens=len(prompt),
            completion_tokens=len(gen_ids),
            finish_reason="length" if max_new is not None and len(gen_ids) >= max_new else "stop",
        )

    def name_decisions(self, gen_ids: list[int], logits: torch.Tensor) -> list[Decision]:
        """One :class:`Decision` per tool name in the output: top-1/top-2 at the name token
        with the smallest margin."""
        import torch

        pieces = self._token_bytes(gen_ids)
        starts: list[int] = []
        pos = 0
        for p in pieces:
            starts.append(pos)
            pos += len(p)
        blob = b"".join(pieces)
        top = torch.topk(logits.float(), 2, dim=-1)
        out: list[Decision] = []
        for m in _NAME_RE.finditer(blob):
            a, b = m.span(1)
            toks = [k for k, s in enumerate(starts) if s < b and s + len(pieces[k]) > a]
            if not toks:
                continue
            margins = [(float(top.values[k, 0] - top.values[k, 1]), k) for k in toks]
            margin, k = min(margins)
            out.append(
                Decision(
                    kind="tool_name",
                    top1=self._decode([int(top.indices[k, 0])]),
                    top2=self._decode([int(top.indices[k, 1])]),
                    margin=margin,
                    chosen=m.group(1).decode("utf-8", errors="replace"),
                )
            )
        return out

    # -- async queue -------------------------------------------------------------------
    def _refuse_if_too_long(self, prompt_tokens: int) -> None:
        """Raise :class:`ContextLengthError` when a prompt leaves no position to generate."""
        if self.context_limit is not None and prompt_tokens >= self.context_limit:
            from pytest_quantagent.errors import ContextLengthError

            raise ContextLengthError(self.model_ref, prompt_tokens, self.context_limit)

    async def generate(self, request: GenerateRequest) -> Generation:
        # Refused here, per request, so that one over-long prompt never fails the batch it
        # would have joined.
        prompt = self.prompt_ids(request)  # kept for the batch: tokenized once
        self._refuse_if_too_long(len(prompt))
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Generation] = loop.create_future()
        with self._cond:
            self._queue.append(_Job(request, fut, loop, prompt))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._worker_main, name=f"quantagent-decode-{self.model_ref}", daemon=True)
                self._thread.start()
            self._cond.notify()
        return await fut

    def _worker_main(self) -> None:
        """The decode thread: admit queued jobs at every step boundary, step the batch, hand
        each finished row back to its event loop. Exits when idle and closing."""
        active: list[_Job] = []
        while True:
            with self._cond:
                while not self._queue and not active:
                    if self._closing:
                        return
                    self._cond.wait()
                admit: list[_Job] = []
                while self._queue and len(active) + len(admit) < self.max_batch:
                    admit.append(self._queue.popleft())
            for job in admit:
                if job.future.done():  # cancelled while queued
                    continue
                try:
                    decoder = self.batched_decoder() if job.request.temperature <= 0 else None
                    if decoder is None:
                        _deliver(job, self._run([job.request], [job.prompt])[0])
                        continue
                    job.row = self._row(job.request, job.prompt)
                    decoder.prepare(job.row)  # its KV cache, from the prefix cache
                    active.append(job)
                except Exception as e:
                    _deliver(job, None, e)
            active = [j for j in active if not j.future.done()]  # drop cancelled episodes
            if not active or self._decoder is None:
                continue
            try:
                # New rows' prompts and decoding rows' tokens in one pass (rows beyond the
                # pass's prefill budget wait for the next).
                self._decoder.step([j.row for j in active if j.row is not None])
            except Exception as e:  # delivered to every row of the failed step
                for j in active:
                    _deliver(j, None, e)
                active = []
                continue
            still: list[_Job] = []
            for j in active:
                if j.row is not None and j.row.done:
                    try:
                        _deliver(j, self._finish(j.request, j.row))
                    except Exception as e:
                        _deliver(j, None, e)
                else:
                    still.append(j)
            active = still

    async def aclose(self) -> None:
        """Let the decode thread finish its work and stop (safe to call twice)."""
        thread = self._thread
        if thread is None:
            return
        with self._cond:
            self._closing = True
            self._cond.notify()
        await asyncio.to_thread(thread.join)
        with self._cond:
            self._closing = False
            if self._thread is thread:
                self._thread = None


def _deliver(job: _Job, result: Generation | None, exc: BaseException | None = None) -> None:
    """Resolve ``job``'s future on its own event loop (from the decode thread)."""

    def resolve() -> None:
        if job.future.done():
            return
        if exc is not None:
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)  # type: ignore[arg-type]

    try:
        job.loop.call_soon_threadsafe(resolve)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass


def _hf_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages with tool-call arguments as objects (HF chat templates expect dicts)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("tool_calls"):
            m = dict(m)
            calls = []
            for c in m["tool_calls"]:
                fn = dict(c.get("function", {}))
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        fn["arguments"] = json.loads(args) if args.strip() else {}
                    except json.JSONDecodeError:
                        fn["arguments"] = {}
                calls.append({**c, "function": fn})
            m["tool_calls"] = calls
        out.append(m)
    return out


def create_backend(arm: BackendSpec, options: BackendOptions) -> TransformersBackend:
    """Factory for ``backend = "transformers"``: ``path`` (or ``model``) names the weights;
    ``prepare_model`` (an on-load quantizer, from ``quant/loading.py``) is applied once loaded.

    Arm options: ``compute_dtype`` (``float32`` default: bf16/int4 weights are exact in
    fp32, and fp32 matmuls are the fast path on CPU), ``device``, ``max_batch``,
    ``max_new_tokens``, ``threads`` (default ``$QUANTAGENT_TORCH_THREADS`` or 1),
    ``prefix_cache_mb`` (the prefix cache's bound, default 128; 0 turns it off: same
    results, more prefill). The arm's ``kv_cache_dtype`` is emulated (``backends/kv_cache.py``).
    """
    opts = dict(arm.options)
    threads = int(opts.get("threads", os.environ.get("QUANTAGENT_TORCH_THREADS", 1)))
    return TransformersBackend(
        arm.path or arm.model,
        compute_dtype=str(opts.get("compute_dtype", "float32")),
        device=str(opts.get("device", "cpu")),
        max_batch=int(opts.get("max_batch", 32)),
        max_new_tokens=opts.get("max_new_tokens"),
        threads=threads,
        quantization=arm.quantization,
        prefix_cache_mb=float(opts.get("prefix_cache_mb", CACHE_BYTES / 2**20)),
        prepare_model=arm.prepare_model,
        kv_cache_dtype=arm.kv_cache_dtype,
    )
