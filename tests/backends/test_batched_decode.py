"""Batched decoding in the transformers backend: a request's tokens and logits never depend on
which other requests were decoded with it, nor on what the prefix cache held (the store
resumes and pairs episodes by task and seed). The reference is the request decoded alone
with an empty prefix cache; the chunked computation itself agrees with ``model.generate`` to
float rounding."""

from __future__ import annotations

import asyncio
import functools
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from pytest_quantagent.backends.base import BackendOptions, GenerateRequest, Generation  # noqa: E402
from pytest_quantagent.backends.batched_decode import (  # noqa: E402
    MIN_ROWS,
    BatchedDecoder,
    DecodeRow,
    PrefixCache,
)
from pytest_quantagent.backends.transformers import BUNDLED_DIR, TransformersBackend, create_backend  # noqa: E402
from pytest_quantagent.bundled.model import ModelSize, make_model  # noqa: E402
from pytest_quantagent.bundled.tokenizer import DomainTokenizer  # noqa: E402
from pytest_quantagent.quant.arms import resolve_arm  # noqa: E402
from pytest_quantagent.quant.loading import backend_spec  # noqa: E402
from pytest_quantagent.training.train import save_model  # noqa: E402

BUNDLED = BUNDLED_DIR / "tiny-agent-prone"
needs_bundled = pytest.mark.skipif(not (BUNDLED / "config.json").is_file(), reason="bundled model not built")

USER_TEXTS = [  # first messages of the telecom test split's scripted users
    "Hi, I'm back from my trip. Please turn off international roaming on my line 555-0116.",
    "Hi, my phone says it has no service and I can't make any calls.",
    "Hi, I want to switch my line 555-0101 to the Family plan, and I'd like to talk to a human about it.",
    "Hi, I can't send picture messages from my phone.",
    "Hello, my mobile internet is not working well. I need fast data on my phone.",
    "Hi, I have no service on my phone. Can you help me get it back?",
    "Hello. My phone has had no signal at all since this morning.",
]


@functools.cache
def _prompt() -> Any:
    from pytest_quantagent.env.registry import get_domain
    from pytest_quantagent.runner.build import AgentPrompt

    return AgentPrompt.for_domain(get_domain("telecom"))


def _conversation(i: int) -> list[dict[str, Any]]:
    """A telecom chat as the agent sends it; every other one carries a tool call and its
    result (prompts of different lengths)."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": _prompt().system_prompt},
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": USER_TEXTS[i % len(USER_TEXTS)]},
    ]
    if i % 2:
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_0_0", "type": "function",
                "function": {"name": "get_customer_by_phone", "arguments": '{"phone_number": "555-0116"}'}}]},
            {"role": "tool", "tool_call_id": "call_0_0", "content":
                '{"customer_id": "C12", "full_name": "Olga Hansen", "line_ids": ["L16"], '
                '"bill_ids": ["B22", "B23"], "account_status": "Active"}' * (1 + i % 3)},
        ]
    return msgs


def _requests(n: int, max_tokens: int = 48, **kw: Any) -> list[GenerateRequest]:
    return [GenerateRequest(messages=_conversation(i), tools=_prompt().tools, seed=i, max_tokens=max_tokens, **kw)
            for i in range(n)]


def _view(g: Generation) -> tuple[Any, ...]:
    """Everything an episode record keeps of a generation (margins as exact floats)."""
    return (g.raw_text, g.content, [(c.name, c.arguments) for c in g.tool_calls],
            [(d.top1, d.top2, d.margin, d.chosen) for d in g.decisions],
            g.prompt_tokens, g.completion_tokens)


def _cold(backend: TransformersBackend) -> None:
    """Empty the backend's prefix cache (a no-op when it decodes one request at a time)."""
    decoder = backend.batched_decoder()
    if decoder is not None:
        decoder.cache.clear()


def _alone(backend: TransformersBackend, requests: list[GenerateRequest]) -> list[tuple[Any, ...]]:
    """Each request decoded by itself, the prefix cache emptied before each one."""
    out = []
    for r in requests:
        _cold(backend)
        out.append(_view(backend.generate_batch([r])[0]))
    return out


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = ['{"name":"get_user","arguments":{"user_id":"u_001"}} hello there'] * 30
    tok = DomainTokenizer.build(corpus, ["u_001", "u_002"])
    model = make_model(tok, ModelSize(hidden=32, layers=2, heads=2, mlp=64, max_positions=512), seed=0)
    out = tmp_path_factory.mktemp("tiny")
    save_model(model, tok, out)
    return out


@needs_bundled
@pytest.mark.parametrize("arm", ["bf16", "int4", "int4+kv-int8", "fp8"])
def test_bundled_arm_decodes_the_same_alone_and_in_any_batch(arm: str) -> None:
    backend = create_backend(backend_spec(resolve_arm(arm, "tiny-agent-prone")), BackendOptions())
    reqs = _requests(8)
    alone = _alone(backend, reqs)
    assert backend.batched_decoder() is not None, backend.batching_reason
    assert sum(1 for v in alone if v[3]) >= 2  # some outputs carry tool-name margins
    assert [_view(g) for g in backend.generate_batch(reqs)] == alone
    # Other sizes, orders and companions, rows finishing at different steps.
    order = [5, 2, 7]
    assert [_view(g) for g in backend.generate_batch([reqs[i] for i in order])] == [alone[i] for i in order]
    dup = [reqs[3], reqs[0], reqs[3], reqs[6], reqs[1]]
    assert [_view(g) for g in backend.generate_batch(dup)] == [alone[i] for i in (3, 0, 3, 6, 1)]
    backend.max_batch = 3  # rows join the running batch as others leave it
    assert [_view(g) for g in backend.generate_batch(reqs[::-1])] == alone[::-1]

    async def concurrently() -> list[Generation]:
        return list(await asyncio.gather(*(backend.generate(r) for r in reqs)))

    backend.max_batch = 64
    assert [_view(g) for g in asyncio.run(concurrently())] == alone
    asyncio.run(backend.aclose())


@needs_bundled
@pytest.mark.parametrize("arm", ["bf16", "fp8"])
def test_bundled_rows_agree_with_generate_to_float_rounding(arm: str) -> None:
    # The chunked computation is the model's: model.generate's greedy tokens, and logits
    # within float32 rounding of the model's own forward pass over the whole sequence
    # (measured max |diff| 6e-6 on logits of magnitude ~10, both arms; 1e-4 leaves room for
    # other CPUs' kernels). fp8 is the compressed-tensors FP8-dynamic checkpoint: the step
    # applies its per-token input quantization and quantized weights itself. (generate's own
    # incremental logits are not the reference: with fp8 inputs, a float-rounding difference
    # can move a value across a rounding boundary, and they part from the full forward pass
    # by up to 0.11 on one of these prompts, measured, while the batched step stays at 6e-6.)
    backend = create_backend(backend_spec(resolve_arm(arm, "tiny-agent-prone")), BackendOptions())
    decoder = backend.batched_decoder()
    assert decoder is not None, backend.batching_reason
    prompts = [backend.prompt_ids(r) for r in _requests(5)]
    ref = []
    for p in prompts:
        ids = torch.tensor([p])
        with torch.inference_mode():
            res = backend.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                temperature=None, top_k=None, top_p=None, eos_token_id=backend.stop_ids,
                pad_token_id=backend.pad_id, return_dict_in_generate=True, output_logits=True)
            full = backend.model(res.sequences).logits[0, len(p) - 1:]
        ref.append((res.sequences[0, len(p):].tolist(), list(full)))
    rows = [DecodeRow(p, 12, True) for p in prompts]
    decoder.decode(rows, 64)
    for row, (seq, logits) in zip(rows, ref, strict=True):
        n = len(row.tokens)
        assert n >= 3 and row.tokens == seq[:n]
        assert n == len(seq) or seq[n] in backend.stop_ids
        for a, b in zip(row.logits, logits[:n], strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


def test_each_row_keeps_its_own_token_limit(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=40)
    assert backend.batched_decoder() is not None, backend.batching_reason
    short, long_ = _requests(2, max_tokens=3)[0], _requests(2, max_tokens=40)[1]
    ref = _alone(backend, [short, long_])
    gens = backend.generate_batch([short, long_])
    assert [_view(g) for g in gens] == ref
    assert (gens[0].completion_tokens or 0) <= 3 < (gens[1].completion_tokens or 0)


def test_sampled_requests_are_decoded_alone_and_repeat_per_seed(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=24)
    sampled = _requests(3, temperature=1.0)
    greedy = _requests(4)
    ref = _alone(backend, sampled)
    assert len({v[0] for v in ref}) > 1  # the seeds matter

    async def mixed() -> list[Generation]:
        return list(await asyncio.gather(*(backend.generate(r) for r in [*greedy, *sampled[::-1]])))

    out = asyncio.run(mixed())
    assert [_view(g) for g in out[len(greedy):]] == ref[::-1]
    assert [_view(g) for g in out[: len(greedy)]] == _alone(backend, greedy)
    asyncio.run(backend.aclose())


def test_a_machine_whose_batched_kernels_round_differently_decodes_alone(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_step = BatchedDecoder.step

    def skewed(self: BatchedDecoder, rows: list[DecodeRow]) -> None:
        real_step(self, rows)
        if len(rows) > 1:  # what a batch-dependent kernel would do: last-bit drift
            for r in rows:
                if r.logits:
                    r.logits[-1] = torch.nextafter(r.logits[-1], r.logits[-1] + 1)

    monkeypatch.setattr(BatchedDecoder, "step", skewed)
    backend = TransformersBackend(tiny_dir, max_new_tokens=12)
    assert backend.batched_decoder() is None
    assert "self-check" in (backend.batching_reason or "")
    reqs = _requests(4)
    assert [_view(g) for g in backend.generate_batch(reqs)] == _alone(backend, reqs)


def test_unsupported_models_decode_one_request_at_a_time(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=12, compute_dtype="bfloat16")
    assert backend.batched_decoder() is None
    assert "bfloat16" in (backend.batching_reason or "")
    reqs = _requests(3)
    assert [_view(g) for g in backend.generate_batch(reqs)] == _alone(backend, reqs)


def test_a_hooked_projection_is_not_bypassed(tiny_dir: Path) -> None:
    # Activation fake-quant and compressed-tensors work through hooks on the projections;
    # the batched step reads weights directly, so such a model must decode alone.
    backend = TransformersBackend(tiny_dir, max_new_tokens=12)
    proj = backend.model.model.layers[0].self_attn.q_proj
    proj.register_forward_hook(lambda _m, _i, out: out * 1.5)
    assert backend.batched_decoder() is None
    assert "hooks" in (backend.batching_reason or "")
    reqs = _requests(3)
    assert [_view(g) for g in backend.generate_batch(reqs)] == _alone(backend, reqs)


def test_a_failed_step_fails_its_rows_and_the_worker_goes_on(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=12)
    decoder = backend.batched_decoder()
    assert decoder is not None
    reqs = _requests(3)
    ref = _alone(backend, reqs)
    real_step = decoder.step
    calls = {"n": 0}

    def failing(rows: list[DecodeRow]) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("decode step failed")
        real_step(rows)

    monkeypatch.setattr(decoder, "step", failing)

    async def run() -> list[Any]:
        return list(await asyncio.gather(*(backend.generate(r) for r in reqs), return_exceptions=True))

    first = asyncio.run(run())
    failed = [x for x in first if isinstance(x, RuntimeError)]
    assert failed and all("decode step failed" in str(x) for x in failed)
    assert [_view(g) for g in asyncio.run(run())] == ref  # the thread survived
    thread = backend._thread
    assert isinstance(thread, threading.Thread)
    asyncio.run(backend.aclose())
    assert not thread.is_alive() and backend._thread is None


@needs_bundled
def test_episode_records_do_not_depend_on_the_concurrency() -> None:
    # The contract end to end: the runner's episodes (scripted user, environment, the
    # agent's decisions and their margins) at concurrency 1 and 6 are the same records.
    from pytest_quantagent.env.registry import get_domain
    from pytest_quantagent.runner.batch import RunSettings, plan_episodes, run_arm
    from pytest_quantagent.runner.build import build_arm

    domain = get_domain("telecom")
    plan = plan_episodes(list(domain.splits["test"])[:6], 1, run_seed=0)
    runtime = build_arm(resolve_arm("int4", "tiny-agent-prone"), concurrency=6)

    def records(conc: int) -> list[dict[str, Any]]:
        recs = asyncio.run(run_arm(domain=domain, runtime=runtime, plan=plan,
                                   settings=RunSettings(concurrency=conc)))
        return [{k: v for k, v in r.model_dump(mode="json").items() if k != "duration_s"} for r in recs]

    one = records(1)
    assert any(d for r in one for m in r["messages"] for d in (m.get("decisions") or []))
    assert records(6) == one


def _next_turn(backend: TransformersBackend, request: GenerateRequest, answer: Generation) -> GenerateRequest:
    """The conversation's next request: the answer and a tool result appended."""
    msgs = [*request.messages, {"role": "assistant", "content": answer.content or answer.raw_text},
            {"role": "user", "content": "Thanks. And my line 555-0101, please?"}]
    return GenerateRequest(messages=msgs, tools=request.tools, seed=request.seed,
                           max_tokens=request.max_tokens, want_margins=request.want_margins)


@needs_bundled
@pytest.mark.parametrize("arm", ["bf16", "bf16+kv-fp8"])
def test_a_conversation_decodes_the_same_from_the_prefix_cache_and_without_it(arm: str) -> None:
    backend = create_backend(backend_spec(resolve_arm(arm, "tiny-agent-prone")), BackendOptions())
    decoder = backend.batched_decoder()
    assert decoder is not None, backend.batching_reason
    first = _requests(6)
    answers = backend.generate_batch(first)
    second = [_next_turn(backend, r, a) for r, a in zip(first, answers, strict=True)]
    before = decoder.cache.reused
    warm = [_view(g) for g in backend.generate_batch(second)]  # first turns' chunks cached
    assert decoder.cache.reused - before >= 6 * decoder.chunk  # the cache did serve them
    assert warm == _alone(backend, second)  # each from an empty cache
    off = create_backend(backend_spec(resolve_arm(arm, "tiny-agent-prone")), BackendOptions())
    off.prefix_cache_bytes = 0
    off_decoder = off.batched_decoder()
    assert off_decoder is not None and off_decoder.cache.max_bytes == 0
    assert [_view(g) for g in off.generate_batch([*first, *second])][6:] == warm
    assert len(off_decoder.cache) == 0 and off_decoder.cache.reused == 0


def test_prompts_ending_at_and_across_chunk_boundaries_decode_alike(tiny_dir: Path) -> None:
    backend = TransformersBackend(tiny_dir, max_new_tokens=6)
    decoder = backend.batched_decoder()
    assert decoder is not None, backend.batching_reason
    c = decoder.chunk
    vocab = int(backend.model.config.vocab_size)
    base = [(5 * j + 3) % (vocab - 10) + 10 for j in range(3 * c + 2)]
    prompts = [base[:n] for n in (1, 2, c - 1, c, c + 1, 2 * c, 3 * c + 2)]

    def run(ps: list[list[int]], max_batch: int) -> list[tuple[list[int], list[Any]]]:
        rows = [DecodeRow(list(p), 6, True) for p in ps]
        decoder.decode(rows, max_batch)
        return [(r.tokens, r.logits) for r in rows]

    alone = []
    for p in prompts:
        decoder.cache.clear()
        alone += run([p], 1)
    decoder.cache.clear()
    for batch in (run(prompts, 64), run(prompts[::-1], 3)[::-1]):  # cold, then warm
        for (tokens, logits), (ref_tokens, ref_logits) in zip(batch, alone, strict=True):
            assert tokens == ref_tokens
            assert all(torch.equal(a, b) for a, b in zip(logits, ref_logits, strict=True))
    assert decoder.cache.reused > 0


def test_the_prefix_cache_stays_within_its_bound_and_evicts_least_recent_leaves() -> None:
    chunk, layers, heads, dim = 4, 2, 2, 8
    node_bytes = layers * 2 * heads * chunk * dim * 4
    cache = PrefixCache(chunk, 6 * node_bytes)

    def kv(n: int) -> Any:
        return torch.arange(layers * 2 * heads * n * dim, dtype=torch.float32).view(layers, 2, heads, n, dim)

    shared = list(range(8))
    a, b, c = [*shared, 10, 11, 12, 13], [*shared, 20, 21, 22, 23], list(range(30, 42))
    cache.insert(a, kv(12), 3)
    cache.insert(b, kv(12), 3)  # shares a's first two chunks: one node more
    assert len(cache) == 4 and cache.bytes == 4 * node_bytes
    assert len(cache.lookup(a, 3)) == 3  # a is now more recent than b
    cache.insert(c, kv(12), 3)  # 7 nodes > 6: the least recently used leaf goes
    assert cache.bytes == 6 * node_bytes
    assert len(cache.lookup(a, 3)) == 3 and len(cache.lookup(c, 3)) == 3
    assert len(cache.lookup(b, 3)) == 2  # b's own chunk was the least recently used leaf
    got = cache.lookup(c, 3)[2].kv
    assert got is not None and torch.equal(got, kv(12)[:, :, :, 8:12])
    assert len(PrefixCache(chunk, 0).lookup(a, 3)) == 0


def test_version_names_the_decoding_path(tiny_dir: Path) -> None:
    batched = TransformersBackend(tiny_dir)
    alone = TransformersBackend(tiny_dir, compute_dtype="bfloat16")
    fingerprint = batched.version().split("/", 1)[1]
    assert batched.version() == f"2/{fingerprint}" and batched.batching_reason is None
    assert alone.version() == f"1/{fingerprint}" and alone.batching_reason is not None


def test_a_machine_whose_linear_rows_depend_on_the_batch_decodes_alone(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = BatchedDecoder._linear

    def skewed(self: BatchedDecoder, weight: Any, x: Any) -> Any:
        y = real(self, weight, x)
        return torch.nextafter(y, y + 1) if x.shape[0] > 2 * MIN_ROWS else y

    monkeypatch.setattr(BatchedDecoder, "_linear", skewed)
    backend = TransformersBackend(tiny_dir, max_new_tokens=12)
    assert backend.batched_decoder() is None
    assert "linear rows" in (backend.batching_reason or "")
    assert backend.version().startswith("1/")
